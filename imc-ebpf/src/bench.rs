//! Programs that only `cargo xtask bench-tick` loads (the `bench` feature; the production object
//! carries none of this): the baseline the tick is compared against, and cost probes that each do
//! one piece of the tick's work alone, so the benchmark can say where the tick's time goes.
use crate::{SLOT0, SLOT1};
use aya_ebpf::{
    bindings::BPF_F_CURRENT_CPU,
    cty::c_void,
    helpers::generated::{
        bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_perf_event_read,
    },
    macros::{map, perf_event},
    maps::{PerCpuArray, PerCpuHashMap},
    programs::PerfEventContext,
};

/// The baseline's per-process counts.
#[map]
static BASELINE_COUNTS: PerCpuHashMap<u32, u64> = PerCpuHashMap::with_max_entries(16384, 0);

/// What `bpftrace -e 'profile:hz:1000 { @[pid] = count(); }'` does per run: one per-CPU hash
/// increment keyed by the process id.
#[perf_event]
pub fn baseline_pid_count(_ctx: PerfEventContext) -> u32 {
    // SAFETY: helper without preconditions.
    let tgid = (unsafe { bpf_get_current_pid_tgid() } >> 32) as u32;
    match BASELINE_COUNTS.get_ptr_mut(tgid) {
        // SAFETY: per-CPU value, only this CPU writes it.
        Some(p) => unsafe { *p += 1 },
        None => {
            let _ = BASELINE_COUNTS.insert(tgid, 1, 0);
        }
    }
    0
}

#[map]
static PROBE_OUT: PerCpuArray<u64> = PerCpuArray::with_max_entries(2, 0);

#[inline(always)]
fn probe_store(i: u32, v: u64) {
    if let Some(p) = PROBE_OUT.get_ptr_mut(i) {
        // SAFETY: per-CPU slot, only this CPU writes it.
        unsafe { *p = v };
    }
}

/// The floor: a perf_event program that does nothing (includes the run-time accounting).
#[perf_event]
pub fn probe_empty(_ctx: PerfEventContext) -> u32 {
    0
}

/// CPU number (inlined by the verifier) and pid/tgid: what every record needs to name the task.
#[perf_event]
pub fn probe_task(_ctx: PerfEventContext) -> u32 {
    // SAFETY: helpers without preconditions.
    unsafe {
        probe_store(0, bpf_get_smp_processor_id() as u64);
        probe_store(1, bpf_get_current_pid_tgid());
    }
    0
}

/// The timestamp.
#[perf_event]
pub fn probe_clock(_ctx: PerfEventContext) -> u32 {
    // SAFETY: helper without preconditions.
    probe_store(0, unsafe { bpf_ktime_get_ns() });
    0
}

/// One counter read of slot 0, value only (the benchmark puts `msr/tsc/` there).
#[perf_event]
pub fn probe_read(_ctx: PerfEventContext) -> u32 {
    // SAFETY: SLOT0 is a PERF_EVENT_ARRAY map; the helper checks the entry.
    let v = unsafe { bpf_perf_event_read(&raw const SLOT0 as *mut c_void, BPF_F_CURRENT_CPU) };
    probe_store(0, v);
    0
}

/// One counter read of slot 1, value only (the benchmark puts a software counter there, whose
/// read has no hardware access: the helper's own cost).
#[perf_event]
pub fn probe_read_sw(_ctx: PerfEventContext) -> u32 {
    // SAFETY: SLOT1 is a PERF_EVENT_ARRAY map; the helper checks the entry.
    let v = unsafe { bpf_perf_event_read(&raw const SLOT1 as *mut c_void, BPF_F_CURRENT_CPU) };
    probe_store(0, v);
    0
}

/// The floor of a context-switch program: attached to sched_switch as imc's is (a raw
/// tracepoint), doing nothing. `cargo xtask bench-overhead` runs the switch-heavy workload under
/// it beside imc, so imc's ns per switch is read against what any program on that hook costs.
#[aya_ebpf::macros::raw_tracepoint(tracepoint = "sched_switch")]
pub fn bare_switch(_ctx: aya_ebpf::programs::RawTracePointContext) -> i32 {
    0
}

/// The floor plus one counter read: on sched_switch as `bare_switch`, reading slot 0's counter
/// on this CPU (the benchmark's workload puts a page-faults counter per CPU there, the VM's
/// stand-in for the weight imc's switch reads). `bare_switch_read` − `bare_switch` per run is
/// what one read costs on that hook, the allowance imc has per counter it reads there.
#[aya_ebpf::macros::raw_tracepoint(tracepoint = "sched_switch")]
pub fn bare_switch_read(_ctx: aya_ebpf::programs::RawTracePointContext) -> i32 {
    // SAFETY: SLOT0 is a PERF_EVENT_ARRAY map; the helper checks the entry.
    let v = unsafe { bpf_perf_event_read(&raw const SLOT0 as *mut c_void, BPF_F_CURRENT_CPU) };
    probe_store(0, v);
    0
}

/// The floor plus the clock: on sched_switch as `bare_switch`, reading the time as imc's switch
/// must to know how long the outgoing task ran. `bare_switch_clock` − `bare_switch` per run is
/// that read's cost on the hook.
#[aya_ebpf::macros::raw_tracepoint(tracepoint = "sched_switch")]
pub fn bare_switch_clock(_ctx: aya_ebpf::programs::RawTracePointContext) -> i32 {
    // SAFETY: helper without preconditions.
    probe_store(0, unsafe { bpf_ktime_get_ns() });
    0
}

/// Per CPU: when `bare_hooks_tick` last read its counter.
#[map]
static FLOOR_LAST_READ: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// The floor of imc's default collector on a workload, its sched_switch half: a switch must
/// read its CPU's counter (slot 0; the benchmark puts a page-faults counter there) and the
/// clock to charge the task leaving, and this does that and nothing else. With
/// `bare_hooks_tick` on the kernel's tick tracepoint, `cargo xtask bench-overhead` runs the
/// compute and memory workloads under it beside imc, so imc's collector CPU is read against what
/// those reads alone cost the machine.
#[aya_ebpf::macros::raw_tracepoint(tracepoint = "sched_switch")]
pub fn bare_hooks_switch(_ctx: aya_ebpf::programs::RawTracePointContext) -> i32 {
    // SAFETY: SLOT0 is a PERF_EVENT_ARRAY map; the helper checks the entry. The clock helper
    // has no preconditions.
    let (v, t) = unsafe {
        (
            bpf_perf_event_read(&raw const SLOT0 as *mut c_void, BPF_F_CURRENT_CPU),
            bpf_ktime_get_ns(),
        )
    };
    // One store of both, so neither read is left out and no second lookup is added.
    probe_store(0, v.wrapping_add(t));
    0
}

/// The floor's tick half: the tracepoint fires at every hrtimer expiry, and imc's tick reads its
/// counters once a tick period (MIN_FLUSH_NS since its last flush), so this reads the clock at
/// every run and the counter only when MIN_FLUSH_NS have passed since its last read on this
/// CPU: the same reads imc's tick makes, and nothing else.
#[aya_ebpf::macros::raw_tracepoint(tracepoint = "local_timer_entry")]
pub fn bare_hooks_tick(_ctx: aya_ebpf::programs::RawTracePointContext) -> i32 {
    // SAFETY: helper without preconditions; the global is set by the loader and only read.
    let (now, min) = unsafe {
        (
            bpf_ktime_get_ns(),
            core::ptr::read_volatile(&crate::MIN_FLUSH_NS),
        )
    };
    let Some(last) = FLOOR_LAST_READ.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: this CPU's entry, which only this CPU touches, with preemption off.
    unsafe {
        if now.wrapping_sub(*last) < min {
            return 0;
        }
        *last = now;
        // SAFETY: as in `bare_hooks_switch`.
        let v = bpf_perf_event_read(&raw const SLOT0 as *mut c_void, BPF_F_CURRENT_CPU);
        probe_store(0, v);
    }
    0
}

/// What `bare_switch_charge` keeps per CPU: the counter's last reading, the sum of its deltas,
/// and the last task and time charged.
#[repr(C)]
pub struct FloorCharge {
    last: u64,
    sum: u64,
    id: u64,
    t: u64,
}

#[map]
static FLOOR_CHARGE: PerCpuArray<FloorCharge> = PerCpuArray::with_max_entries(1, 0);

/// The floor of charging a switch to its task: on sched_switch as `bare_switch`, reading slot
/// 0's counter and the clock, naming the task leaving (its pid and tgid, as imc's switch does)
/// and adding the counter's delta since the CPU's last switch into one per-CPU accumulator. imc
/// keeps an accumulator per task between flushes; one for all is the least a charge can be, so
/// `bare_switch_charge` less the bare program, its read and the clock is what naming and adding
/// cost on the hook at the least.
#[aya_ebpf::macros::raw_tracepoint(tracepoint = "sched_switch")]
pub fn bare_switch_charge(_ctx: aya_ebpf::programs::RawTracePointContext) -> i32 {
    // SAFETY: SLOT0 is a PERF_EVENT_ARRAY map; the helper checks the entry. The other helpers
    // have no preconditions.
    let (v, t, id) = unsafe {
        (
            bpf_perf_event_read(&raw const SLOT0 as *mut c_void, BPF_F_CURRENT_CPU),
            bpf_ktime_get_ns(),
            bpf_get_current_pid_tgid(),
        )
    };
    if let Some(c) = FLOOR_CHARGE.get_ptr_mut(0) {
        // SAFETY: this CPU's entry, which only this CPU touches, with preemption off.
        unsafe {
            (*c).sum = (*c).sum.wrapping_add(v.wrapping_sub((*c).last));
            (*c).last = v;
            (*c).id = id;
            (*c).t = t;
        }
    }
    0
}

//! imc's kernel side: at every cpu-clock tick (and, in precise mode, at every context switch)
//! read the configured counter slots on the current CPU and emit one `TickRecord` with the task
//! that was running.
//!
//! Cost matters more than anything here: this runs up to 10 000 times a second on every CPU of a
//! production host. So the record is written in place in the ring buffer (no copy), the counters
//! are read straight into it, the slot count is a read-only global the verifier folds (unused
//! slots cost nothing), and submission never wakes userspace (it drains on its own timer).
#![no_std]
#![no_main]

use aya_ebpf::{
    bindings::BPF_F_MMAPABLE,
    bindings::{BPF_F_CURRENT_CPU, bpf_perf_event_value},
    cty::c_void,
    helpers::generated::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_perf_event_read, bpf_perf_event_read_value,
    },
    macros::{map, perf_event, raw_tracepoint},
    maps::{Array, PerCpuArray, PerCpuHashMap, PerfEventArray},
    programs::{PerfEventContext, RawTracePointContext},
};
use imc_common::{
    CpuHead, FLAG_TASK_OMITTED, KIND_SWITCH, KIND_TIMER, MAX_SLOTS, NR_STATS, STAT_READ_ERROR,
    STAT_SLOT_ABSENT, SlotReading, TickRecord,
};

/// How many slots userspace configured. Lives in .rodata and is frozen before load, so the
/// verifier sees a constant and drops the code of unused slots.
#[unsafe(no_mangle)]
static NR_SLOTS: u32 = 0;

// One PERF_EVENT_ARRAY per slot, indexed by CPU; userspace sizes them to the possible CPUs and
// inserts counter fds (for a package-scope counter, into the entries of the CPUs allowed to
// read it).
#[map]
static SLOT0: PerfEventArray<u32> = PerfEventArray::new(0);
#[map]
static SLOT1: PerfEventArray<u32> = PerfEventArray::new(0);
#[map]
static SLOT2: PerfEventArray<u32> = PerfEventArray::new(0);
#[map]
static SLOT3: PerfEventArray<u32> = PerfEventArray::new(0);
#[map]
static SLOT4: PerfEventArray<u32> = PerfEventArray::new(0);
#[map]
static SLOT5: PerfEventArray<u32> = PerfEventArray::new(0);
#[map]
static SLOT6: PerfEventArray<u32> = PerfEventArray::new(0);
#[map]
static SLOT7: PerfEventArray<u32> = PerfEventArray::new(0);

/// Bit `s` set: slot `s` can be multiplexed (a core PMU event), so its enabled/running times are
/// read too. They cost a clock read per counter inside the kernel, and counting-only PMUs
/// (uncore, msr, software) never multiplex, so their slots read the value alone.
#[unsafe(no_mangle)]
static TIMED_SLOTS: u32 = 0;

/// Records per CPU ring, a power of two (set by userspace before load).
#[unsafe(no_mangle)]
static RING_LEN: u32 = 1;

/// Per-CPU rings of tick records (see imc_common::TICKS_MAP_NAME); userspace sizes it to
/// possible CPUs × RING_LEN and reads it through mmap.
#[map]
static TICKS: Array<TickRecord> = Array::with_max_entries(1, BPF_F_MMAPABLE);

/// Per-CPU producer heads (imc_common::CpuHead), also read through mmap.
#[map]
static HEADS: Array<CpuHead> = Array::with_max_entries(1, BPF_F_MMAPABLE);

/// Per-CPU counters of runs, lost records and read failures per slot (imc_common::STAT_*).
#[map]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(NR_STATS, 0);

/// Benchmark baseline only (see `baseline_pid_count`).
#[map]
static BASELINE_COUNTS: PerCpuHashMap<u32, u64> = PerCpuHashMap::with_max_entries(16384, 0);

const ENOENT: i64 = 2;

#[perf_event]
pub fn imc_tick(_ctx: PerfEventContext) -> u32 {
    record(KIND_TIMER);
    0
}

/// sched_switch, as a raw tracepoint (needs no tracefs mounted): it fires before the switch, so
/// `current` is still the task being switched out, the one the counts since the previous record
/// belong to.
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn imc_switch(_ctx: RawTracePointContext) -> i32 {
    record(KIND_SWITCH);
    0
}

/// Not used by imc: the baseline `cargo xtask bench-tick` compares the tick against. It does
/// what `bpftrace -e 'profile:hz:1000 { @[pid] = count(); }'` does per run: one per-CPU hash
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

// Cost probes for `cargo xtask bench-tick --breakdown`: each does one piece of the tick's work
// alone, so the benchmark can say where the tick's time goes (helper calls dominate in a VM).
// Loaded only by that benchmark.
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

#[inline(always)]
fn bump(index: u32) {
    if let Some(p) = STATS.get_ptr_mut(index) {
        // SAFETY: a per-CPU slot only this CPU writes, with preemption off in this program.
        unsafe { *p += 1 };
    }
}

#[inline(always)]
fn record(kind: u8) {
    // SAFETY (whole function): helpers without preconditions; `h` and `rec` are pointers the
    // verifier proved to be inside their arrays, and only this CPU writes its head and its
    // ring region (the program runs with preemption off, and a tick cannot nest in a switch
    // record on one CPU because perf_event and raw tracepoint programs share the per-CPU
    // bpf_prog_active guard).
    unsafe {
        let cpu = bpf_get_smp_processor_id();
        let Some(h) = HEADS.get_ptr_mut(cpu) else {
            return;
        };
        let ring_len = core::ptr::read_volatile(&RING_LEN);
        let seq = (*h).head;
        let index = cpu
            .wrapping_mul(ring_len)
            .wrapping_add((seq as u32) & ring_len.wrapping_sub(1));
        let Some(rec) = TICKS.get_ptr_mut(index) else {
            return;
        };
        // The volatile read keeps the compiler from folding the zero NR_SLOTS was compiled with.
        let nr = core::ptr::read_volatile(&NR_SLOTS);
        let timed = core::ptr::read_volatile(&TIMED_SLOTS);
        let mut failed: u8 = 0;

        (*rec).t_ns = bpf_ktime_get_ns();
        (*rec).cpu = cpu;
        let id = bpf_get_current_pid_tgid();
        let pid = id as u32;
        (*rec).pid = pid;
        (*rec).tgid = (id >> 32) as u32;
        (*rec).kind = kind;
        (*rec).nr_slots = if nr as usize > MAX_SLOTS {
            MAX_SLOTS as u8
        } else {
            nr as u8
        };
        // comm and cgroup cost ~100 ns each in a VM; fetch them only for a task this CPU's last
        // full record did not describe, and every 64th record anyway (comm changes at exec).
        if pid != (*h).last_pid || seq & 63 == 0 {
            (*rec).cgroup_id = bpf_get_current_cgroup_id();
            if bpf_get_current_comm((*rec).comm.as_mut_ptr().cast(), 16) != 0 {
                (*rec).comm = [0; 16];
            }
            (*rec).flags = 0;
            (*h).last_pid = pid;
        } else {
            (*rec).flags = FLAG_TASK_OMITTED;
        }

        macro_rules! read_slot {
            ($i:literal, $map:ident) => {
                let out = &raw mut (*rec).slots[$i];
                if nr > $i {
                    let map = &raw const $map as *mut c_void;
                    let r = if timed & (1 << $i) != 0 {
                        // Zeroes the reading on failure, so a failed slot reads as zero.
                        bpf_perf_event_read_value(
                            map,
                            BPF_F_CURRENT_CPU,
                            out.cast::<bpf_perf_event_value>(),
                            core::mem::size_of::<SlotReading>() as u32,
                        )
                    } else {
                        // Returns the value, or a negative errno in the top 4095 values.
                        let v = bpf_perf_event_read(map, BPF_F_CURRENT_CPU);
                        let err = v as i64;
                        if (-4095..0).contains(&err) {
                            *out = SlotReading {
                                value: 0,
                                enabled: 0,
                                running: 0,
                            };
                            err
                        } else {
                            // Never multiplexed: enabled == running; 1 marks "ran" for readers.
                            *out = SlotReading {
                                value: v,
                                enabled: 1,
                                running: 1,
                            };
                            0
                        }
                    };
                    if r != 0 {
                        failed |= 1 << $i;
                        // An empty entry is expected for package counters on CPUs that may not
                        // read them; anything else is a real read error.
                        bump(if r == -ENOENT {
                            STAT_SLOT_ABSENT + $i
                        } else {
                            STAT_READ_ERROR + $i
                        });
                    }
                }
            };
        }
        read_slot!(0, SLOT0);
        read_slot!(1, SLOT1);
        read_slot!(2, SLOT2);
        read_slot!(3, SLOT3);
        read_slot!(4, SLOT4);
        read_slot!(5, SLOT5);
        read_slot!(6, SLOT6);
        read_slot!(7, SLOT7);
        (*rec).failed_mask = failed;
        // Publish. Only this CPU writes its head, so no read-modify-write is needed: the
        // compiler fence keeps the record's stores before the head's, the JIT emits them in
        // that order, and x86 (TSO) makes them visible in that order to the reader, which
        // loads the head with acquire. (A weakly ordered architecture would need a real
        // barrier here; the eBPF sampler targets x86, POWER's nest IMC is read in userspace.)
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::Release);
        core::ptr::write_volatile(&raw mut (*h).head, seq.wrapping_add(1));
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";

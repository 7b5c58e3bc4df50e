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
    bindings::{BPF_F_CURRENT_CPU, BPF_RB_NO_WAKEUP, bpf_perf_event_value},
    cty::c_void,
    helpers::generated::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_perf_event_read_value,
    },
    macros::{map, perf_event, raw_tracepoint},
    maps::{PerCpuArray, PerfEventArray, RingBuf},
    programs::{PerfEventContext, RawTracePointContext},
};
use imc_common::{
    KIND_SWITCH, KIND_TIMER, MAX_SLOTS, NR_STATS, STAT_READ_ERROR, STAT_RINGBUF_FULL, STAT_RUNS,
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

/// Tick records. Userspace resizes it to fit its drain period at the chosen frequency.
#[map]
static TICKS: RingBuf = RingBuf::with_byte_size(1 << 22, 0);

/// Per-CPU counters of runs, lost records and read failures per slot (imc_common::STAT_*).
#[map]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(NR_STATS, 0);

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

#[inline(always)]
fn bump(index: u32) {
    if let Some(p) = STATS.get_ptr_mut(index) {
        // SAFETY: a per-CPU slot only this CPU writes, with preemption off in this program.
        unsafe { *p += 1 };
    }
}

#[inline(always)]
fn record(kind: u8) {
    bump(STAT_RUNS);
    let Some(mut entry) = TICKS.reserve::<TickRecord>(0) else {
        bump(STAT_RINGBUF_FULL);
        return;
    };
    // SAFETY: NR_SLOTS is a plain u32 global; the volatile read keeps the compiler from folding
    // the zero it was compiled with (userspace sets the real value before load).
    let nr = unsafe { core::ptr::read_volatile(&NR_SLOTS) };
    let rec: *mut TickRecord = entry.as_mut_ptr();
    let mut failed: u8 = 0;
    // SAFETY: `rec` points at a reserved ring buffer entry of size_of::<TickRecord>() bytes that
    // this program owns until submit; every field is written below before submission.
    unsafe {
        (*rec).t_ns = bpf_ktime_get_ns();
        (*rec).cgroup_id = bpf_get_current_cgroup_id();
        (*rec).cpu = bpf_get_smp_processor_id();
        let id = bpf_get_current_pid_tgid();
        (*rec).pid = id as u32;
        (*rec).tgid = (id >> 32) as u32;
        (*rec).kind = kind;
        (*rec).nr_slots = if nr as usize > MAX_SLOTS {
            MAX_SLOTS as u8
        } else {
            nr as u8
        };
        (*rec)._pad = 0;
        if bpf_get_current_comm((*rec).comm.as_mut_ptr().cast(), 16) != 0 {
            (*rec).comm = [0; 16];
        }

        macro_rules! read_slot {
            ($i:literal, $map:ident) => {
                let out = &raw mut (*rec).slots[$i];
                if nr > $i {
                    // The helper zeroes the value on failure, so a failed slot reads as zero.
                    let r = bpf_perf_event_read_value(
                        &raw const $map as *mut c_void,
                        BPF_F_CURRENT_CPU,
                        out.cast::<bpf_perf_event_value>(),
                        core::mem::size_of::<SlotReading>() as u32,
                    );
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
                } else {
                    *out = SlotReading {
                        value: 0,
                        enabled: 0,
                        running: 0,
                    };
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
    }
    entry.submit(BPF_RB_NO_WAKEUP as u64);
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";

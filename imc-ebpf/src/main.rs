//! imc's kernel side: at every tick and every context switch, read the configured counter slots
//! on the current CPU and write what they counted, with the task that was running, into the
//! CPU's ring. A record is one of three kinds (imc_common::Record): a tick's or a switch's
//! cumulative readings (`--precise`: `write_tick_or_switch`), or, by default, a task's
//! aggregate over a flush period (`accumulate` adds each slice, `flush_aggregates` writes one
//! record per task at the tick). Both paths share each step: reading the package counters and
//! filling their slots, describing the task, finding the ring entry, publishing and waking.
//!
//! The tick is the kernel's own: the program is attached to the local-timer (or hrtimer-expiry)
//! tracepoint and to sched_switch, so it adds no interrupt; `imc_tick`, on a cpu-clock timer, is
//! there for `--freq`, which asks for finer resolution than the kernel's tick.
//!
//! Cost matters more than anything here: this runs on every CPU of a production host at every
//! tick and switch. So the record is written in place in the CPU's ring (no copy), the counters
//! are read straight into it, the slot count is a read-only global the verifier folds (unused
//! slots cost nothing), and userspace is woken only when a ring is half full (it drains on its
//! own timer otherwise). A CPU reads only its own counters; a package's counters (one per
//! memory channel and direction) are read by one reader CPU at most once per tick period, so a
//! workload CPU's tick costs the same whatever the number of channels.
#![no_std]
#![no_main]
// `atomic_xadd`: the BPF target has atomic adds but no compare-and-swap, so core offers no
// `fetch_add` (see stacks::add).
#![allow(internal_features)]
#![feature(core_intrinsics)]

use aya_ebpf::{
    EbpfContext,
    bindings::BPF_F_MMAPABLE,
    bindings::{BPF_F_CURRENT_CPU, BPF_RB_FORCE_WAKEUP, bpf_perf_event_value},
    cty::c_void,
    helpers::generated::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_get_current_task, bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_perf_event_read,
        bpf_perf_event_read_value,
    },
    macros::{map, perf_event, raw_tracepoint},
    maps::{Array, PerCpuArray, PerfEventArray, RingBuf},
    programs::{PerfEventContext, RawTracePointContext, tracing::StackIdContext},
};
use imc_common::{
    AggState, CpuHead, FLAG_TASK_OMITTED, IntervalClock, KIND_SWITCH, KIND_TICK, MAX_SLOTS,
    NR_STATS, RECENT_TASKS, RECORD_ABI_VERSION, ReaderCfg, Record, STAT_READ_ERROR,
    STAT_SLOT_ABSENT, STAT_UNSEEN_SWITCH, SlotReading,
};

mod aggregate;
#[cfg(feature = "bench")]
mod bench;
mod exec;
mod fields;
mod package;
mod stacks;

use aggregate::accumulate;
use fields::{set_comm, set_reading};
use package::{PkgSums, fill_package_slot, read_package};

/// The record layout and names this object was built against (imc_common::ABI_VERSION_GLOBAL):
/// userspace reads it from the ELF before loading and refuses another version.
#[unsafe(no_mangle)]
static IMC_ABI_VERSION: u32 = RECORD_ABI_VERSION;

/// How many slots userspace configured. Lives in .rodata and is frozen before load, so the
/// verifier sees a constant and drops the code of unused slots.
#[unsafe(no_mangle)]
pub(crate) static NR_SLOTS: u32 = 0;

// One PERF_EVENT_ARRAY per slot, indexed by CPU; userspace sizes them to the possible CPUs and
// inserts counter fds (for a package-scope counter, into the entries of the CPUs allowed to
// read it).
#[map]
pub(crate) static SLOT0: PerfEventArray<u32> = PerfEventArray::new(0);
#[map]
pub(crate) static SLOT1: PerfEventArray<u32> = PerfEventArray::new(0);
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
pub(crate) static TIMED_SLOTS: u32 = 0;

/// Bit `s` set: slot `s` is configured and read on each CPU (imc_common::CPU_SLOTS_GLOBAL): the
/// configured slots that are not package slots. A constant to the verifier, like NR_SLOTS.
#[unsafe(no_mangle)]
pub(crate) static CPU_SLOTS: u32 = 0;

/// Bit `s` set: slot `s` is a package slot, the sum of the package counters PKG_SLOT maps to it.
#[unsafe(no_mangle)]
pub(crate) static PKG_SLOTS: u32 = 0;

/// The least time between two reads of one reader group's counters.
#[unsafe(no_mangle)]
pub(crate) static PKG_MIN_GAP_NS: u64 = 0;

/// Every package counter, indexed by counter number; a reader group's are contiguous.
#[map]
pub(crate) static PKG: PerfEventArray<u32> = PerfEventArray::new(0);

/// The package slot each counter of PKG is summed into.
#[map]
pub(crate) static PKG_SLOT: Array<u32> = Array::with_max_entries(1, 0);

/// Per CPU: which counters of PKG its ticks read (count 0: none).
#[map]
pub(crate) static READERS: Array<ReaderCfg> = Array::with_max_entries(1, 0);

/// Per reader group: when its counters were last read.
#[map]
pub(crate) static GROUP_LAST: Array<u64> = Array::with_max_entries(1, 0);

/// Records per CPU ring, a power of two (set by userspace before load).
#[unsafe(no_mangle)]
static RING_LEN: u32 = 1;

/// Records between two wake-ups of userspace by one CPU, a power of two (0: never; set by
/// userspace before load).
#[unsafe(no_mangle)]
static WAKE_EVERY: u32 = 0;

/// CPU numbers of rings that reached a multiple of WAKE_EVERY records (imc_common::
/// WAKE_MAP_NAME): userspace polls it and drains then instead of waiting for its timer.
#[map]
pub(crate) static WAKE: RingBuf = RingBuf::with_byte_size(4096, 0);

/// Per-CPU rings of tick records (see imc_common::TICKS_MAP_NAME); userspace sizes it to
/// possible CPUs × RING_LEN and reads it through mmap.
#[map]
static TICKS: Array<Record> = Array::with_max_entries(1, BPF_F_MMAPABLE);

/// Per-CPU producer heads (imc_common::CpuHead), also read through mmap.
#[map]
pub(crate) static HEADS: Array<CpuHead> = Array::with_max_entries(1, BPF_F_MMAPABLE);

/// 1: context switches add to the CPU's accumulator (AGG) and its ticks flush it as one
/// KIND_AGGREGATE record per task that ran; 0: a record per switch (`--precise`).
#[unsafe(no_mangle)]
static AGGREGATE: u32 = 0;

/// A slice longer than this (an idle CPU without ticks) is a flush period of its own.
#[unsafe(no_mangle)]
pub(crate) static LONG_SLICE_NS: u64 = u64::MAX;

/// A tick sooner than this after the last flush (another hrtimer's expiry) flushes nothing,
/// unless this CPU's package read is due (imc_common::MIN_FLUSH_GLOBAL).
#[unsafe(no_mangle)]
pub(crate) static MIN_FLUSH_NS: u64 = 0;

/// Per CPU: the switch accumulator (imc_common::AggState).
#[map]
pub(crate) static AGG: PerCpuArray<AggState> = PerCpuArray::with_max_entries(1, 0);

/// Userspace's interval clock (imc_common::INTERVALS_MAP_NAME): the aggregating path never lets
/// a flush period run across an interval end. A global in a data section of its own, which the
/// loader makes a one-entry array userspace writes: a run reads it with one load a word, where
/// a map's entry costs a lookup.
#[unsafe(link_section = ".data.clock")]
#[unsafe(no_mangle)]
pub(crate) static mut INTERVALS: IntervalClock = IntervalClock {
    origin: 0,
    period: 0,
};

/// Per-CPU counters of runs, lost records and read failures per slot (imc_common::STAT_*).
#[map]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(NR_STATS, 0);

const ENOENT: i64 = 2;

/// `--freq`: imc's own cpu-clock timer, for finer resolution than the kernel's tick (it adds a
/// timer interrupt per CPU per period).
#[perf_event]
pub fn imc_tick(ctx: PerfEventContext) -> u32 {
    tick(&ctx);
    0
}

/// The default tick: a tracepoint of the kernel's own timer interrupt (`local_timer_entry` on
/// x86, else `hrtimer_expire_entry`), which fires at the scheduler tick on a busy CPU. The
/// program reads no tracepoint argument, so one program serves either.
#[raw_tracepoint(tracepoint = "local_timer_entry")]
pub fn imc_tick_tp(ctx: RawTracePointContext) -> i32 {
    tick(&ctx);
    0
}

#[inline(always)]
pub(crate) fn aggregating() -> bool {
    // SAFETY: a read of a global; volatile so the compiler does not fold the compiled-in 0.
    unsafe { core::ptr::read_volatile(&AGGREGATE) != 0 }
}

#[inline(always)]
fn tick<C: EbpfContext + StackIdContext>(ctx: &C) {
    if aggregating() {
        accumulate(ctx, None);
    } else {
        write_tick_or_switch(ctx, KIND_TICK, None);
    }
}

/// The tasks of a sched_switch: `prev`, the one running now and leaving, and `next`, the one
/// that runs from here on, which the CPU's next run must find running (owner_known). Both are
/// `task_struct` addresses, compared, never read.
#[derive(Clone, Copy)]
pub(crate) struct Switch {
    pub(crate) prev: u64,
    pub(crate) next: u64,
}

/// sched_switch, as a raw tracepoint (needs no tracefs mounted): it fires before the switch, so
/// `current` is still the task being switched out, the one the counts since the previous record
/// belong to.
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn imc_switch(ctx: RawTracePointContext) -> i32 {
    // TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next, ...)
    // (include/trace/events/sched.h); `prev` is `current`, read here without a helper call.
    let sw = Switch {
        prev: ctx.arg(1),
        next: ctx.arg(2),
    };
    if aggregating() {
        accumulate(&ctx, Some(sw));
    } else {
        write_tick_or_switch(&ctx, KIND_SWITCH, Some(sw));
    }
    0
}

/// Whether the task running now is the one this CPU's last run left running (the `next` of its
/// last switch, or what its last tick found), and what the next run must find: the switch's
/// `next`, or the current task after a tick. A CPU that has seen no switch checks nothing (a
/// `--freq` tick without switches, or before the CPU's first switch), and then needs no task.
///
/// A task the CPU ran that no switch program saw leave (a kernel may keep tracepoints from
/// firing while some task runs: this VM kind's traces no switch out of a task of its own, and
/// runs no program while it runs) made part of what the CPU counted since its last run: that
/// count is no known task's, and the caller gives it to no task (pid 0), counted in
/// STAT_UNSEEN_SWITCH.
///
/// # Safety
/// `st` points to this CPU's accumulator, which only this CPU touches, with preemption off.
#[inline(always)]
pub(crate) unsafe fn owner_known(st: *mut AggState, sw: Option<Switch>) -> bool {
    // SAFETY: the caller's; the task pointers are compared, never read.
    unsafe {
        let expect = (*st).expect;
        let (known, after) = match sw {
            Some(sw) => (expect == 0 || expect == sw.prev, sw.next),
            None if expect == 0 => return true,
            None => {
                let cur = bpf_get_current_task();
                (expect == cur, cur)
            }
        };
        (*st).expect = after;
        if !known {
            let _ = bump(STAT_UNSEEN_SWITCH);
        }
        known
    }
}

/// [`owner_known`] on this CPU's accumulator (true when there is none).
#[inline(always)]
fn owner_known_here(sw: Option<Switch>) -> bool {
    match AGG.get_ptr_mut(0) {
        // SAFETY: this CPU's accumulator, which only this CPU touches, with preemption off.
        Some(st) => unsafe { owner_known(st, sw) },
        None => true,
    }
}

/// Counts one event in this CPU's STATS; returns the count before it.
#[inline(always)]
pub(crate) fn bump(index: u32) -> u64 {
    match STATS.get_ptr_mut(index) {
        // SAFETY: a per-CPU slot only this CPU writes, with preemption off in this program.
        Some(p) => unsafe {
            let before = *p;
            *p = before + 1;
            before
        },
        None => 0,
    }
}

/// The ring entry of this CPU's record number `seq` (its region of TICKS, `seq` modulo
/// RING_LEN), or None when the maps are smaller than the CPU number says.
#[inline(always)]
pub(crate) fn ring_entry(cpu: u32, seq: u64) -> Option<*mut Record> {
    // SAFETY: a read of a global.
    let ring_len = unsafe { core::ptr::read_volatile(&RING_LEN) };
    let index = cpu
        .wrapping_mul(ring_len)
        .wrapping_add((seq as u32) & ring_len.wrapping_sub(1));
    TICKS.get_ptr_mut(index)
}

/// Makes this CPU's records `seq .. head` visible to userspace, and wakes it when the head
/// passes a multiple of WAKE_EVERY.
///
/// Only this CPU writes its head, so no read-modify-write is needed: the compiler fence keeps
/// the records' stores before the head's, the JIT emits them in that order, and x86 (TSO) makes
/// them visible in that order to the reader, which loads the head with acquire. (A weakly
/// ordered architecture would need a real barrier here; the eBPF sampler targets x86, POWER's
/// nest IMC is read in userspace.)
///
/// # Safety
/// `h` is this CPU's head, which no other CPU writes.
#[inline(always)]
pub(crate) unsafe fn publish(h: *mut CpuHead, cpu: u32, seq: u64, head: u64) {
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::Release);
    // SAFETY: the caller's; the other is a read of a global.
    let wake_every = unsafe {
        core::ptr::write_volatile(&raw mut (*h).head, head);
        u64::from(core::ptr::read_volatile(&WAKE_EVERY))
    };
    if wake_every != 0 && (head & !(wake_every - 1)) != (seq & !(wake_every - 1)) {
        // Full buffer (userspace is already behind): nothing to add.
        let _ = WAKE.output::<u32>(&cpu, u64::from(BPF_RB_FORCE_WAKEUP));
    }
}

/// Describes the running thread `pid` into `cgroup_id` and `comm` (flags 0), unless one of this
/// CPU's recent full descriptions named it and no `refresh` is due: then only
/// [`FLAG_TASK_OMITTED`] is set, and the sampler fills them in from its cache. comm and cgroup
/// cost ~100 ns each in a VM; threads taking turns on a CPU stay described until an exec
/// anywhere ([`exec::imc_exec`]) empties the list; `refresh` (about one record or entry in 64)
/// catches a comm changed otherwise (prctl). `recent` holds thread id + 1, so its
/// initial zeroes name no thread (the idle task is pid 0 and is described like any other).
///
/// # Safety
/// `h` is this CPU's head; the other pointers are valid for writing, `comm` 8-byte aligned.
#[inline(always)]
pub(crate) unsafe fn describe_task(
    h: *mut CpuHead,
    pid: u32,
    refresh: bool,
    cgroup_id: *mut u64,
    comm: *mut [u8; 16],
    flags: *mut u8,
) {
    // SAFETY: the caller's; helpers without preconditions.
    unsafe {
        let recent = &raw mut (*h).recent;
        let execs = exec::execs();
        if (*h).epoch != execs {
            // One store each (an array assignment becomes a memset call, which BPF has not).
            for i in 0..RECENT_TASKS {
                core::ptr::write_volatile(&raw mut (*recent)[i], 0);
            }
            (*h).epoch = execs;
        }
        let tag = pid.wrapping_add(1);
        let known = (*recent).contains(&tag);
        if known && !refresh {
            *flags = FLAG_TASK_OMITTED;
            return;
        }
        *cgroup_id = bpf_get_current_cgroup_id();
        if bpf_get_current_comm((*comm).as_mut_ptr().cast(), 16) != 0 {
            set_comm(comm, None);
        }
        *flags = 0;
        if !known {
            let slot = ((*h).next as usize) & (RECENT_TASKS - 1);
            (*recent)[slot] = tag;
            (*h).next = (*h).next.wrapping_add(1);
        }
    }
}

/// No task's description, for a slice no known task ran (pid 0, see [`owner_known`]): the
/// sampler names it from its own records of pid 0 ([`FLAG_TASK_OMITTED`]).
///
/// # Safety
/// The pointers are valid for writing, `comm` 8-byte aligned.
#[inline(always)]
pub(crate) unsafe fn describe_no_task(cgroup_id: *mut u64, comm: *mut [u8; 16], flags: *mut u8) {
    // SAFETY: the caller's.
    unsafe {
        *cgroup_id = 0;
        set_comm(comm, None);
        *flags = FLAG_TASK_OMITTED;
    }
}

/// The per-record path (`AGGREGATE` 0): a record at every tick (KIND_TICK) or switch
/// (KIND_SWITCH, `sw` the switch), carrying the counters' cumulative readings at
/// this instant and the task that was running (pid 0 after an unseen switch: see
/// [`owner_known`]).
#[inline(always)]
fn write_tick_or_switch<C: EbpfContext>(ctx: &C, kind: u8, sw: Option<Switch>) {
    // SAFETY (whole function): helpers without preconditions; `h` and `rec` are pointers the
    // verifier proved to be inside their arrays, and only this CPU writes its head and its
    // ring region (the program runs with preemption off, and a tick cannot nest in a switch
    // record on one CPU: a switch runs with interrupts off, so neither timer program can
    // interrupt it, and each program's own recursion guard keeps it from nesting in itself).
    unsafe {
        let cpu = bpf_get_smp_processor_id();
        let Some(h) = HEADS.get_ptr_mut(cpu) else {
            return;
        };
        let seq = (*h).head;
        let Some(rec) = ring_entry(cpu, seq) else {
            return;
        };
        // The volatile read keeps the compiler from folding the zero NR_SLOTS was compiled with.
        let nr = core::ptr::read_volatile(&NR_SLOTS);
        let timed = core::ptr::read_volatile(&TIMED_SLOTS);
        let pkg_slots = core::ptr::read_volatile(&PKG_SLOTS);
        let mut failed: u8 = 0;

        let now = bpf_ktime_get_ns();
        (*rec).t_ns = now;
        // Volatile: two plain zero stores side by side become a byte-wise memset (see
        // set_reading).
        core::ptr::write_volatile(&raw mut (*rec).t0_ns, 0);
        core::ptr::write_volatile(&raw mut (*rec).on_ns, 0);
        let mut sums = PkgSums::new();
        let pkg_ok = read_package(ctx, cpu, now, &mut sums);
        (*rec).cpu = cpu;
        let known = owner_known_here(sw);
        let id = if known { bpf_get_current_pid_tgid() } else { 0 };
        let pid = id as u32;
        (*rec).pid = pid;
        (*rec).tgid = (id >> 32) as u32;
        (*rec).kind = kind;
        (*rec).nr_slots = if nr as usize > MAX_SLOTS {
            MAX_SLOTS as u8
        } else {
            nr as u8
        };
        let (cgroup_id, comm, flags) = (
            &raw mut (*rec).cgroup_id,
            &raw mut (*rec).comm,
            &raw mut (*rec).flags,
        );
        if known {
            describe_task(h, pid, seq & 63 == 0, cgroup_id, comm, flags);
        } else {
            describe_no_task(cgroup_id, comm, flags);
        }

        macro_rules! read_slot {
            ($i:literal) => {
                let out = &raw mut (*rec).slots[$i];
                if nr > $i && pkg_slots & (1 << $i) != 0 {
                    let read = pkg_ok & (1 << $i) != 0;
                    if fill_package_slot(out, sums.get($i, read), read) {
                        failed |= 1 << $i;
                    }
                } else if nr > $i && read_cpu_slot($i, timed & (1 << $i) != 0, out) != 0 {
                    // A failed read (counted by read_cpu_slot) reads as zero.
                    set_reading(out, 0, 0, 0);
                    failed |= 1 << $i;
                }
            };
        }
        read_slot!(0);
        read_slot!(1);
        read_slot!(2);
        read_slot!(3);
        read_slot!(4);
        read_slot!(5);
        read_slot!(6);
        read_slot!(7);
        (*rec).failed_mask = failed;
        publish(h, cpu, seq, seq.wrapping_add(1));
    }
}

/// Reads CPU slot `s`'s counter on this CPU into `out` (value, and enabled/running when
/// `timed`; a never-multiplexed counter reads enabled == running == 1). Returns 0, or the
/// negative errno of a failed read, counted in STATS.
#[inline(always)]
pub(crate) fn read_cpu_slot(s: u32, timed: bool, out: *mut SlotReading) -> i64 {
    if !timed {
        return match read_cpu_value(s) {
            Ok(v) => {
                // SAFETY: `out` is valid for one SlotReading.
                unsafe { set_reading(out, v, 1, 1) };
                0
            }
            Err(e) => e,
        };
    }
    // SAFETY: `slot_map` is a PERF_EVENT_ARRAY map; `out` is valid for one SlotReading, the
    // layout of struct bpf_perf_event_value.
    let r = unsafe {
        bpf_perf_event_read_value(
            slot_map(s),
            BPF_F_CURRENT_CPU,
            out.cast::<bpf_perf_event_value>(),
            core::mem::size_of::<SlotReading>() as u32,
        )
    };
    if r != 0 {
        count_read_failure(s, r);
    }
    r
}

/// The value of CPU slot `s`'s counter on this CPU, read alone (a slot that never multiplexes:
/// see TIMED_SLOTS), or the negative errno of a failed read, counted in STATS.
#[inline(always)]
pub(crate) fn read_cpu_value(s: u32) -> Result<u64, i64> {
    // SAFETY: `slot_map` is a PERF_EVENT_ARRAY map.
    let v = unsafe { bpf_perf_event_read(slot_map(s), BPF_F_CURRENT_CPU) };
    // The helper returns a count or a negative errno in one word.
    let err = v as i64;
    if (-4095..0).contains(&err) {
        count_read_failure(s, err);
        Err(err)
    } else {
        Ok(v)
    }
}

/// CPU slot `s`'s PERF_EVENT_ARRAY.
#[inline(always)]
fn slot_map(s: u32) -> *mut c_void {
    match s {
        0 => &raw const SLOT0 as *mut c_void,
        1 => &raw const SLOT1 as *mut c_void,
        2 => &raw const SLOT2 as *mut c_void,
        3 => &raw const SLOT3 as *mut c_void,
        4 => &raw const SLOT4 as *mut c_void,
        5 => &raw const SLOT5 as *mut c_void,
        6 => &raw const SLOT6 as *mut c_void,
        _ => &raw const SLOT7 as *mut c_void,
    }
}

/// Counts a failed read of CPU slot `s` (errno `err`) in STATS: a counter absent on this CPU
/// apart from other errors.
#[inline(always)]
fn count_read_failure(s: u32, err: i64) {
    let _ = bump(if err == -ENOENT {
        STAT_SLOT_ABSENT + s
    } else {
        STAT_READ_ERROR + s
    });
}

/// No code of the program can panic (the verifier proves every access in bounds first); a
/// bounds check the compiler could not drop (aya-log's buffer writes) is unreachable, and saying
/// so lets it drop the check, where an infinite loop would be refused by the verifier.
#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // SAFETY: see above; no panic can happen in verified code.
    unsafe { core::hint::unreachable_unchecked() }
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";

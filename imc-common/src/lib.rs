//! Types shared by the eBPF program (`imc-ebpf`) and userspace (`imc-user`).
//!
//! Everything here is `#[repr(C)]` and plain data: the kernel side writes these records into
//! per-CPU rings (an mmapable array, see [`TICKS_MAP_NAME`]) and userspace reads the same bytes
//! back, so the layout is the contract between the two halves. Change it only together with
//! [`RECORD_ABI_VERSION`].
//!
//! Every name userspace looks up in the object (maps, read-only globals, programs) is a
//! constant here and is listed in [`MAP_NAMES`], [`GLOBAL_NAMES`] or [`PROGRAM_NAMES`]: the
//! contract test checks those lists against the built object both ways, so a name cannot be
//! added to one half alone.
#![no_std]

/// Counter slots a record carries. A CPU slot is one PERF_EVENT_ARRAY map (`SLOT0` … `SLOT7`)
/// indexed by CPU, read by every CPU for itself; a package slot (bit set in
/// [`PKG_SLOTS_GLOBAL`]) carries the sum of that slot's package counters, read by one reader
/// CPU per package at most once per [`PKG_MIN_GAP_GLOBAL`] (see [`ReaderCfg`]).
pub const MAX_SLOTS: usize = 8;

/// Package counters one reader reads at one tick, at most (a 12-channel socket with read and
/// write counters has 24; the bound keeps the verifier's loop finite).
pub const MAX_PKG_COUNTERS: u32 = 128;

/// Bumped whenever [`Record`], the map, global or program names or the STATS indices
/// change. The program carries it in [`ABI_VERSION_GLOBAL`]; userspace refuses an object built
/// against another version before loading it.
pub const RECORD_ABI_VERSION: u32 = 17;
/// The program's read-only global holding the [`RECORD_ABI_VERSION`] it was built with.
pub const ABI_VERSION_GLOBAL: &str = "IMC_ABI_VERSION";

/// The program on imc's own cpu-clock timer (`--freq`).
pub const TICK_PROGRAM: &str = "imc_tick";
/// The program on the kernel's tick (a raw tracepoint of its timer interrupt).
pub const TICK_TP_PROGRAM: &str = "imc_tick_tp";
/// The program on sched_switch (a raw tracepoint).
pub const SWITCH_PROGRAM: &str = "imc_switch";
/// The program on sched_process_exec (a raw tracepoint): a task's comm changes at exec, so
/// every CPU describes its tasks afresh ([`CpuHead::epoch`]).
pub const EXEC_PROGRAM: &str = "imc_exec";
/// Array of one u32: execs seen since the program was loaded ([`CpuHead::epoch`]).
pub const EXECS_MAP_NAME: &str = "EXECS";

/// Names of the per-slot PERF_EVENT_ARRAY maps, in slot order.
pub const SLOT_MAP_NAMES: [&str; MAX_SLOTS] = [
    "SLOT0", "SLOT1", "SLOT2", "SLOT3", "SLOT4", "SLOT5", "SLOT6", "SLOT7",
];
/// Per-CPU rings of [`Record`]s: one BPF_F_MMAPABLE array, CPU `c` owning entries
/// `c * RING_LEN .. (c + 1) * RING_LEN`. Each CPU writes only its own region and publishes with
/// its [`CpuHead`], so the tick takes no lock (the shared BPF ring buffer's spinlock cost more
/// than everything else in the tick together) and userspace reads it through mmap, with no
/// syscall per record.
pub const TICKS_MAP_NAME: &str = "TICKS";
/// One [`CpuHead`] per CPU, also mmapable.
pub const HEADS_MAP_NAME: &str = "HEADS";
/// Read-only global: bit `s` set when slot `s` may be multiplexed and needs enabled/running
/// times; other slots carry `enabled == running == 1`.
pub const TIMED_SLOTS_GLOBAL: &str = "TIMED_SLOTS";
/// Read-only global: records per CPU ring (a power of two).
pub const RING_LEN_GLOBAL: &str = "RING_LEN";
/// Read-only global: a CPU whose head reaches a multiple of this (a power of two; 0: never)
/// wakes userspace through [`WAKE_MAP_NAME`], so a ring never waits for a timer to be drained
/// once it is that full: userspace can sleep long while records come slowly.
pub const WAKE_EVERY_GLOBAL: &str = "WAKE_EVERY";
/// BPF ring buffer of u32 CPU numbers, one per [`WAKE_EVERY_GLOBAL`] records of that CPU, or
/// [`STACKS_WAKE`] once per [`STACK_WAKE_AFTER_GLOBAL`] stack entries of a generation, or a
/// process id marked [`PROCESS_WAKE`], written with a forced wake-up; userspace polls its fd
/// beside its timer.
pub const WAKE_MAP_NAME: &str = "WAKE";
/// What [`WAKE_MAP_NAME`] carries when a generation's stack map fills, in place of a CPU.
pub const STACKS_WAKE: u32 = u32::MAX;
/// Set in what [`WAKE_MAP_NAME`] carries (other than [`STACKS_WAKE`]) for a process not in
/// [`STACK_PROCS_MAP_NAME`] that made a stack entry: the rest is its id (a pid is below 2^22),
/// and userspace reads the process's maps at once, while it runs, with no drain.
pub const PROCESS_WAKE: u32 = 1 << 31;

/// What a [`WAKE_MAP_NAME`] item asks of userspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// A drain: a CPU's ring is filling (its number), or a generation's stacks are.
    Drain,
    /// A process that made its first stack entry: its maps are to be read now.
    Process(u32),
}

impl Wake {
    pub fn of(item: u32) -> Wake {
        if item != STACKS_WAKE && item & PROCESS_WAKE != 0 {
            Wake::Process(item & !PROCESS_WAKE)
        } else {
            Wake::Drain
        }
    }
}

/// The producer side of one CPU's ring. Padded to a cache line so CPUs never share one.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuHead {
    /// Records ever written on this CPU; the next goes to `head % RING_LEN`. Increased with an
    /// atomic add after the record is complete, so a reader that loads it (acquire) sees
    /// complete records below it.
    pub head: u64,
    /// Thread ids + 1 (0 = empty) this CPU's records last carried comm and cgroup for, in full
    /// (see [`FLAG_TASK_OMITTED`]): four, so that threads taking turns on a CPU (every context
    /// switch is a record) are not fetched again at each switch.
    pub recent: [u32; RECENT_TASKS],
    /// Where the next thread described in full goes in `recent` (modulo its length).
    pub next: u32,
    /// The exec count (the program's `EXECS` map) when `recent` was last emptied: a CPU that
    /// finds another empties it, so no thread is left described by the name it had before
    /// an exec anywhere.
    pub epoch: u32,
    pub _pad: [u32; 8],
}

/// Threads a CPU remembers having described in full.
pub const RECENT_TASKS: usize = 4;

/// Set by the kernel in `Record::flags` when the task is one an earlier record of this CPU
/// described in full (one of its [`CpuHead::recent`]), so comm and cgroup were not fetched again
/// (each helper costs about 100 ns in a VM). The sampler fills them in from its cache of those
/// records and clears the flag before any consumer sees the record.
pub const FLAG_TASK_OMITTED: u8 = 1;
/// PERF_EVENT_ARRAY of every package counter, indexed by counter number (not by CPU): the
/// counters of one reader group are contiguous, `ReaderCfg::first ..first + count`.
pub const PKG_MAP_NAME: &str = "PKG";
/// Array of u32 indexed like [`PKG_MAP_NAME`]: the package slot each counter is summed into.
pub const PKG_SLOT_MAP_NAME: &str = "PKG_SLOT";
/// Array of [`ReaderCfg`] indexed by CPU: which package counters that CPU's ticks read.
pub const READERS_MAP_NAME: &str = "READERS";
/// Array of u64 indexed by reader group: when its counters were last read (ns), so a package
/// with several reader CPUs is read once per period, not by each of them.
pub const GROUP_LAST_MAP_NAME: &str = "GROUP_LAST";
/// Read-only global: bit `s` set when slot `s` is a package slot (a sum of package counters).
pub const PKG_SLOTS_GLOBAL: &str = "PKG_SLOTS";
/// Read-only global: the least time between two reads of one group's counters (ns).
pub const PKG_MIN_GAP_GLOBAL: &str = "PKG_MIN_GAP_NS";

/// What one CPU reads of the package counters. `count == 0`: nothing (a CPU that is not a
/// reader, or whose kernel may not read its package's counters).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReaderCfg {
    pub first: u32,
    pub count: u32,
    pub group: u32,
    pub _pad: u32,
}

/// Per-CPU array of u64 counters, indexed by the `STAT_*` constants.
pub const STATS_MAP_NAME: &str = "STATS";
/// Read-only global: how many slots are configured (0..=MAX_SLOTS).
pub const NR_SLOTS_GLOBAL: &str = "NR_SLOTS";
/// Read-only global: bit `s` set when slot `s` is configured and read on each CPU (not a
/// package slot). It follows from [`NR_SLOTS_GLOBAL`] and [`PKG_SLOTS_GLOBAL`]; the program
/// takes it whole, so that a run tests one loaded word per slot instead of computing it.
pub const CPU_SLOTS_GLOBAL: &str = "CPU_SLOTS";

/// A tick's record: what made the program run was a timer (the kernel's own tick through a
/// tracepoint, or imc's cpu-clock timer with `--freq`); the counter values are cumulative.
pub const KIND_TICK: u8 = 0;
/// A `sched_switch`: the record describes the task switched *out*, and the
/// counter values are the ones at the moment it stopped running.
pub const KIND_SWITCH: u8 = 1;

/// Per-task aggregate of one flush period on one CPU (the default with the kernel's tick):
/// `t0_ns .. t_ns` is the period, `on_ns` the task's on-CPU time in it, and the CPU slots carry
/// the task's counter *deltas* within it (Σvalue, Σenabled, Σrunning over its slices; failed
/// bit set when a slice of it could not be read). A package slot carries the package's
/// cumulative sum read at `t_ns`, in the first record of a flush only (failed in the others).
/// The records of one flush share `t0_ns` and `t_ns`, and their `on_ns` add up to the period,
/// less the idle task's (pid 0) when its aggregate counted nothing: that one is left out unless
/// it carries the package readings.
pub const KIND_AGGREGATE: u8 = 2;

/// Read-only global: 1 = context switches add to the per-CPU accumulator ([`AggState`]) and
/// ticks flush it as [`KIND_AGGREGATE`] records; 0 = a record per switch (`--precise`).
pub const AGGREGATE_GLOBAL: &str = "AGGREGATE";
/// Read-only global: a slice longer than this (ns; an idle CPU without ticks) is flushed as a
/// period of its own, so a long idle stretch never dilutes what ran before or after it.
pub const LONG_SLICE_GLOBAL: &str = "LONG_SLICE_NS";
/// Read-only global: a tick that comes sooner than this (ns) after the CPU's last flush flushes
/// nothing (unless its package read is due). The timer tracepoint fires at every hrtimer expiry,
/// not only the scheduler tick's, and each extra firing would otherwise be a flush of its own.
pub const MIN_FLUSH_GLOBAL: &str = "MIN_FLUSH_NS";
/// The tick-period rules userspace sets these globals by (and the userspace replay of the
/// aggregation follows), for a tick of `hz` per second.
pub mod tick_rules {
    /// PKG_MIN_GAP_NS: once per tick period, with a margin for a tick that comes a little early.
    pub const fn pkg_min_gap_ns(hz: u32) -> u64 {
        900_000_000 / hz_or_1(hz)
    }
    /// LONG_SLICE_NS: a slice longer than two tick periods is a tickless idle stretch (or a task
    /// the tick missed).
    pub const fn long_slice_ns(hz: u32) -> u64 {
        2_000_000_000 / hz_or_1(hz)
    }
    /// MIN_FLUSH_NS: as PKG_MIN_GAP_NS, so a CPU flushes about once a tick period however many
    /// hrtimers expire on it, and a tick that comes a little early still flushes.
    pub const fn min_flush_ns(hz: u32) -> u64 {
        pkg_min_gap_ns(hz)
    }
    const fn hz_or_1(hz: u32) -> u64 {
        if hz == 0 { 1 } else { hz as u64 }
    }
}
/// Per-CPU array (one [`AggState`] entry) of the switch accumulator.
pub const AGG_MAP_NAME: &str = "AGG";
/// Array of one [`IntervalClock`], written by userspace once its interval clock starts. The
/// aggregating path ends its flush period at the last switch before an end and makes the slice
/// that crosses it a period of its own, so an aggregate never mixes two intervals' tasks: only
/// one task's slice is split at the end, by time. The program's global `INTERVALS`, in a data
/// section of its own, which the loader makes this map (named after the section).
pub const INTERVALS_MAP_NAME: &str = ".data.clock";

/// Userspace's interval clock (CLOCK_MONOTONIC ns): interval `k` ends at `origin + k × period`
/// (k ≥ 1); period 0: no clock yet.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IntervalClock {
    pub origin: u64,
    pub period: u64,
}

/// The first end of the clock `origin`, `period` after `from` (`u64::MAX`: none, the clock is
/// not running). A CPU keeps it while the clock stays the same, so its runs compare a time
/// instead of dividing.
#[inline(always)]
pub fn next_interval_end(origin: u64, period: u64, from: u64) -> u64 {
    if period == 0 {
        return u64::MAX;
    }
    let k = if from < origin {
        1
    } else {
        (from - origin) / period + 1
    };
    origin.wrapping_add(k.wrapping_mul(period))
}

/// Whether the slice `from .. to` crosses an interval end of the clock `origin`, `period`
/// ([`INTERVALS_MAP_NAME`]): an end `e` with `from < e < to` (a slice ending on an end is
/// within its interval). The program and its userspace twin decide by this one function.
#[inline(always)]
pub fn crosses_interval_end(origin: u64, period: u64, from: u64, to: u64) -> bool {
    period != 0 && to > next_interval_end(origin, period, from)
}

/// Stack-trace maps (BPF_MAP_TYPE_STACK_TRACE) the program stores the call stacks of charged
/// slices in, this one in even generations ([`STACK_GEN_MAP_NAME`]), the next in odd ones: a
/// stack id is the key (the stack's hash bucket), its value the addresses, leaf first, zero
/// after the last. Sized by userspace before load. A bucket holds one stack until it is
/// deleted (no BPF_F_REUSE_STACKID: another stack hashed there is refused, `-EEXIST`), so
/// userspace empties each generation's map once it has read the stacks charged in it: a long
/// run does not fill the buckets with stacks of the past.
pub const STACK_TRACES_MAP_NAME: &str = "STACK_TRACES";
pub const STACK_TRACES_ODD_MAP_NAME: &str = "STACK_TRACES_ODD";
/// The spare stack maps of even and odd generations: a stack its generation's map refuses
/// because another stack holds its bucket (`-EEXIST`) is stored here instead, its id carrying
/// [`SPARE_STACK`]. Only refused stacks come here, so two stacks that share a bucket of the
/// main map both keep their addresses (without it, the one stored second lost its stack for
/// the whole generation, however hot). Sized by userspace before load, emptied as the main
/// maps are.
pub const STACK_SPARE_MAP_NAME: &str = "STACK_SPARE";
pub const STACK_SPARE_ODD_MAP_NAME: &str = "STACK_SPARE_ODD";
/// Set in a [`StackKey`] stack id that names a stack of the spare map
/// ([`STACK_SPARE_MAP_NAME`]); the rest of the id is its key there.
pub const SPARE_STACK: i32 = 1 << 30;
/// Array of two u32: at [`STACK_GEN_NOW`], the generation stacks are taken in now (its low bit
/// picks the stack map), carried in each [`StackKey`]; at [`STACK_GEN_ENTRIES`], the
/// [`STACK_COUNTS_MAP_NAME`] entries the program made in it. Userspace moves the generation on
/// (and zeroes the entries) at each drain, reads the stacks of the generation before, and
/// empties that generation's map.
pub const STACK_GEN_MAP_NAME: &str = "STACK_GEN";
pub const STACK_GEN_NOW: u32 = 0;
pub const STACK_GEN_ENTRIES: u32 = 1;
/// Read-only global, a power of two (0: never): each time the entries made in a generation
/// ([`STACK_GEN_ENTRIES`]) reach a multiple of it, the program wakes userspace
/// ([`STACKS_WAKE`]) to drain and move the generation on, so a stack map is never far past that
/// many stacks: the fuller a stack map, the more new stacks find their bucket taken.
pub const STACK_WAKE_AFTER_GLOBAL: &str = "STACK_WAKE_AFTER";
/// Read-only global: imc's own process id, whose stacks the program does not take: its traffic
/// is charged under no stack, which userspace shows as one frame (it never resolves its own
/// stacks: reading symbols is traffic of imc's own, in new places each time).
pub const STACK_SELF_GLOBAL: &str = "STACK_SELF_TGID";
/// LRU hash map of process id → u8 (unused): the processes that made a stack entry lately,
/// [`STACK_PROCS_ENTRIES`] of them. The first entry of a process not in it wakes userspace with
/// the process's id ([`PROCESS_WAKE`]), so that its maps are read while it runs, however short
/// its life; a process that fell out of it is announced again (its maps read once more).
pub const STACK_PROCS_MAP_NAME: &str = "STACK_PROCS";
pub const STACK_PROCS_ENTRIES: u32 = 4096;
/// Hash map of [`StackKey`] → [`StackCounts`]: what each process's stacks were charged since
/// userspace last took the entries out (lookup-and-delete, one entry at a time). Sized by
/// userspace; a slice whose entry does not fit is counted in [`STAT_STACK_DROPPED`].
pub const STACK_COUNTS_MAP_NAME: &str = "STACK_COUNTS";
/// Read-only global: which stacks a charged slice takes ([`STACK_USER`], [`STACK_KERNEL`]);
/// 0: none (the program then takes no stack and touches neither map). With [`STACK_SAMPLED`]
/// the slices take none either: [`STACK_SAMPLE_PROGRAM`] takes them on a counter's overflow.
pub const STACK_MODE_GLOBAL: &str = "STACK_MODE";
/// Read-only global: bit `s` set when slot `s`'s deltas are charged to stacks (the plan's
/// weight slots). A slice none of whose such slots counted anything takes no stack (it has
/// nothing to charge); 0: every slice takes one, weighed by its on-CPU time.
pub const STACK_SLOTS_GLOBAL: &str = "STACK_SLOTS";
/// Read-only global: `--stack-period N`, the overflow period of the sampled counter: each
/// run of [`STACK_SAMPLE_PROGRAM`] adds N to slot [`STACK_PERIOD_SLOT_GLOBAL`] of its stack.
pub const STACK_PERIOD_GLOBAL: &str = "STACK_PERIOD";
/// Read-only global: the slot a sampled overflow counts in (its weight slot's index).
pub const STACK_PERIOD_SLOT_GLOBAL: &str = "STACK_PERIOD_SLOT";
/// The program on a weight counter's overflow (`--stack-period`): a perf_event program.
pub const STACK_SAMPLE_PROGRAM: &str = "imc_stack_sample";
/// [`STACK_MODE_GLOBAL`] bit: the task's user stack (frame pointers).
pub const STACK_USER: u32 = 1;
/// [`STACK_MODE_GLOBAL`] bit: the kernel stack.
pub const STACK_KERNEL: u32 = 2;
/// [`STACK_MODE_GLOBAL`] bit: stacks are taken on overflow, not at the slices.
pub const STACK_SAMPLED: u32 = 4;
/// Frames a stored stack holds at most (the kernel's PERF_MAX_STACK_DEPTH, the stack map's
/// value size): a deeper stack keeps its innermost frames and is marked cut short.
pub const STACK_DEPTH: usize = 127;

/// Whose traffic, in which stacks: a process, the cgroup v2 id its thread ran in
/// (`bpf_get_current_cgroup_id`, as task records carry it), and the ids of its user and
/// kernel stacks in generation `generation`'s stack map ([`STACK_TRACES_MAP_NAME`]), or in its
/// spare map where the id carries [`SPARE_STACK`]. An id below 0 is no stack: `-errno` of
/// `bpf_get_stackid` (`-EEXIST`: the bucket held another stack in both maps; `-EFAULT`: no
/// user stack, a kernel thread), or [`NO_STACK`] where that stack was not asked for.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StackKey {
    pub tgid: u32,
    pub user_stack: i32,
    pub kernel_stack: i32,
    pub generation: u32,
    pub cgroup: u64,
}

/// [`StackKey`] id of a stack that was not asked for.
pub const NO_STACK: i32 = i32::MIN;

/// What one key was charged: the slot deltas of its slices (each weight slot's events), their
/// on-CPU time and how many slices (or sampled overflows) there were.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackCounts {
    pub on_ns: u64,
    pub slices: u64,
    pub slots: [u64; MAX_SLOTS],
}
/// Tasks one CPU's accumulator holds between two flushes; a ninth flushes it early.
pub const AGG_TASKS: usize = 8;

/// One task's share of a flush period, as the kernel accumulates it. What a common switch
/// touches (the thread id, the time, the failures and the slots' sums) comes first, so a switch
/// reads and writes few cache lines of it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AggTask {
    pub pid: u32,
    pub tgid: u32,
    pub on_ns: u64,
    pub failed_mask: u8,
    pub flags: u8,
    pub _pad: [u8; 6],
    pub slots: [SlotReading; MAX_SLOTS],
    pub cgroup_id: u64,
    pub comm: [u8; 16],
}

/// One CPU's switch accumulator (the kernel's; userspace never reads it). The fields a common
/// switch reads and writes come first, side by side, up to the first slot's baseline.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AggState {
    /// The last switch or tick: where the running task's slice began.
    pub last_t: u64,
    /// The first interval end after `last_t` ([`next_interval_end`]): a slice that ends after
    /// it crosses an end.
    pub next_end: u64,
    /// The task (its `task_struct` address, compared, never read) the CPU's next run must find
    /// running: the `next` of its last sched_switch, or the task its last tick found; 0 until
    /// the CPU's first switch. A run that finds another task knows a switch went unseen, and
    /// what the CPU counted since its last run is then no known task's (pid 0). Used by the
    /// per-record path too.
    pub expect: u64,
    /// The interval clock `next_end` was computed from: a run that finds another one in
    /// [`INTERVALS_MAP_NAME`] computes it again.
    pub clock: IntervalClock,
    /// Entries of `tasks` in use.
    pub n: u32,
    /// Bit s: `last[s]` is a valid reading of CPU slot s.
    pub last_ok: u32,
    /// Where in `tasks` a thread whose id is `pid` modulo [`AGG_TASKS`] was last found or put: a
    /// hint the common switch checks (the entry there, in use, holding that pid) before it
    /// falls back to searching every entry.
    pub hint: [u8; AGG_TASKS],
    pub last: [SlotReading; MAX_SLOTS],
    /// Start of the current flush period (0: no baseline yet).
    pub period_start: u64,
    /// Entries created.
    pub created: u64,
    pub tasks: [AggTask; AGG_TASKS],
}

/// Package-counter reads this CPU made as its package's reader (one per group read). (Runs are
/// not counted here: the kernel's BPF statistics count them, see `bench-tick`.)
pub const STAT_PKG_READS: u32 = 0;
/// `STAT_READ_ERROR + slot`: `bpf_perf_event_read_value` failed for a reason other than an
/// empty array entry (the counter exists but cannot be read from this CPU, for instance).
pub const STAT_READ_ERROR: u32 = 1;
/// `STAT_SLOT_ABSENT + slot`: this CPU has no entry in the slot's array (-ENOENT). Expected for
/// package-scope counters on CPUs that are not allowed to read them; counted apart from errors.
pub const STAT_SLOT_ABSENT: u32 = STAT_READ_ERROR + MAX_SLOTS as u32;
/// Runs that found another task running than the CPU's last run left (a switch that ran no
/// program): what the CPU counted since its last run was charged to no task (pid 0).
pub const STAT_UNSEEN_SWITCH: u32 = STAT_SLOT_ABSENT + MAX_SLOTS as u32;
/// Charged slices whose stack entry did not fit [`STACK_COUNTS_MAP_NAME`] (full): their
/// traffic stays charged to the task, and no stack says where in its code.
pub const STAT_STACK_DROPPED: u32 = STAT_UNSEEN_SWITCH + 1;
/// Number of u64 entries in the `STATS` map.
pub const NR_STATS: u32 = STAT_STACK_DROPPED + 1;

/// One counter as `bpf_perf_event_read_value` returns it (`struct bpf_perf_event_value`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotReading {
    pub value: u64,
    pub enabled: u64,
    pub running: u64,
}

/// One record of one CPU's ring: a tick's or a switch's cumulative readings, or a task's
/// aggregate over a flush period ([`Record::kind`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Record {
    /// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC in ns.
    pub t_ns: u64,
    /// cgroup v2 id of the task (`bpf_get_current_cgroup_id`).
    pub cgroup_id: u64,
    pub cpu: u32,
    /// Thread id (kernel pid); 0 is the idle task.
    pub pid: u32,
    /// Process id (kernel tgid).
    pub tgid: u32,
    /// [`KIND_TICK`], [`KIND_SWITCH`] or [`KIND_AGGREGATE`].
    pub kind: u8,
    /// Slots filled in this record.
    pub nr_slots: u8,
    /// Bit `s` set: slot `s` could not be read in this run; its reading is zero.
    pub failed_mask: u8,
    /// Kernel-to-sampler flags ([`FLAG_TASK_OMITTED`]); always 0 in records handed out.
    pub flags: u8,
    pub comm: [u8; 16],
    /// `KIND_AGGREGATE`: start of the flush period (its end is `t_ns`); 0 otherwise.
    pub t0_ns: u64,
    /// `KIND_AGGREGATE`: the task's on-CPU ns within the period; 0 otherwise.
    pub on_ns: u64,
    pub slots: [SlotReading; MAX_SLOTS],
}

impl Record {
    pub const SIZE: usize = core::mem::size_of::<Record>();
    /// Bytes before the slots: what every record carries.
    pub const HEADER_SIZE: usize = core::mem::offset_of!(Record, slots);

    /// Bytes of a ring entry for a plan of `nr_slots` slots: the header and those slots. The
    /// rings (TICKS) are loaded with this value size, so a 2-slot plan's rings hold 112-byte
    /// entries, not 256; the program never touches a slot past NR_SLOTS.
    pub const fn entry_size(nr_slots: usize) -> usize {
        let n = if nr_slots > MAX_SLOTS {
            MAX_SLOTS
        } else {
            nr_slots
        };
        Self::HEADER_SIZE + n * core::mem::size_of::<SlotReading>()
    }

    /// The task name up to its first NUL.
    pub fn comm_bytes(&self) -> &[u8] {
        let end = self
            .comm
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.comm.len());
        &self.comm[..end]
    }
}

// The record must not change size by accident: the per-CPU rings (sized in records) and the
// recording file both depend on it.
const _: () = assert!(Record::SIZE == 64 + 24 * MAX_SLOTS);
// Ring entries of any slot count keep every field 8-byte aligned.
const _: () = assert!(Record::HEADER_SIZE == 64 && Record::entry_size(1).is_multiple_of(8));

#[cfg(feature = "user")]
unsafe impl aya::Pod for SlotReading {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for Record {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for CpuHead {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for AggState {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for ReaderCfg {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for StackKey {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for StackCounts {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for IntervalClock {}

const _: () = assert!(core::mem::size_of::<CpuHead>() == 64);

/// Every map the program defines and userspace looks up, by the constants above.
pub const MAP_NAMES: [&str; 26] = [
    SLOT_MAP_NAMES[0],
    SLOT_MAP_NAMES[1],
    SLOT_MAP_NAMES[2],
    SLOT_MAP_NAMES[3],
    SLOT_MAP_NAMES[4],
    SLOT_MAP_NAMES[5],
    SLOT_MAP_NAMES[6],
    SLOT_MAP_NAMES[7],
    TICKS_MAP_NAME,
    HEADS_MAP_NAME,
    WAKE_MAP_NAME,
    PKG_MAP_NAME,
    PKG_SLOT_MAP_NAME,
    READERS_MAP_NAME,
    GROUP_LAST_MAP_NAME,
    STATS_MAP_NAME,
    AGG_MAP_NAME,
    INTERVALS_MAP_NAME,
    STACK_TRACES_MAP_NAME,
    STACK_TRACES_ODD_MAP_NAME,
    STACK_SPARE_MAP_NAME,
    STACK_SPARE_ODD_MAP_NAME,
    STACK_GEN_MAP_NAME,
    STACK_COUNTS_MAP_NAME,
    STACK_PROCS_MAP_NAME,
    EXECS_MAP_NAME,
];
/// Every read-only global of the program: userspace sets them before load, or reads them
/// ([`ABI_VERSION_GLOBAL`]).
pub const GLOBAL_NAMES: [&str; 17] = [
    NR_SLOTS_GLOBAL,
    CPU_SLOTS_GLOBAL,
    TIMED_SLOTS_GLOBAL,
    RING_LEN_GLOBAL,
    WAKE_EVERY_GLOBAL,
    PKG_SLOTS_GLOBAL,
    PKG_MIN_GAP_GLOBAL,
    AGGREGATE_GLOBAL,
    LONG_SLICE_GLOBAL,
    MIN_FLUSH_GLOBAL,
    ABI_VERSION_GLOBAL,
    STACK_MODE_GLOBAL,
    STACK_SLOTS_GLOBAL,
    STACK_PERIOD_GLOBAL,
    STACK_PERIOD_SLOT_GLOBAL,
    STACK_WAKE_AFTER_GLOBAL,
    STACK_SELF_GLOBAL,
];
/// Every program of the production object.
pub const PROGRAM_NAMES: [&str; 5] = [
    TICK_PROGRAM,
    TICK_TP_PROGRAM,
    SWITCH_PROGRAM,
    STACK_SAMPLE_PROGRAM,
    EXEC_PROGRAM,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// A wake item is a process only with its mark and short of the stacks' notice.
    #[test]
    fn wake_items_name_a_drain_or_a_process() {
        assert_eq!(Wake::of(0), Wake::Drain);
        assert_eq!(Wake::of(63), Wake::Drain);
        assert_eq!(Wake::of(STACKS_WAKE), Wake::Drain);
        assert_eq!(Wake::of(PROCESS_WAKE | 4_194_303), Wake::Process(4_194_303));
        assert_eq!(Wake::of(PROCESS_WAKE | 1), Wake::Process(1));
    }
}

//! Call stacks of charged traffic: where the aggregating path charges a task's slice, the
//! slice's weight deltas (and its on-CPU time) are also added to the task's process under its
//! current call stack, in STACK_COUNTS (imc_common::STACK_COUNTS_MAP_NAME); the stacks
//! themselves go to the stack map of the current generation (STACK_GEN), which userspace
//! empties once it has read them. With `--stack-period` the slices take no stack and
//! `imc_stack_sample` does, on a weight counter's overflow, adding the period.
//!
//! Cost is paid only where there is something to charge: with STACK_MODE 0 nothing here runs
//! past one read of a constant, and a slice none of whose weight slots counted takes no stack.
//! Several CPUs may charge one key at once, so the counts are added atomically.
use aya_ebpf::{
    EbpfContext,
    bindings::{BPF_F_USER_STACK, BPF_NOEXIST, BPF_RB_FORCE_WAKEUP},
    helpers::generated::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid},
    macros::{map, perf_event},
    maps::{Array, HashMap, LruHashMap, StackTrace},
    programs::{PerfEventContext, tracing::StackIdContext},
};
use core::intrinsics::{AtomicOrdering, atomic_xadd};
use imc_common::{
    MAX_SLOTS, NO_STACK, PROCESS_WAKE, SPARE_STACK, STACK_GEN_ENTRIES, STACK_GEN_NOW, STACK_KERNEL,
    STACK_SAMPLED, STACK_USER, STACKS_WAKE, STAT_STACK_DROPPED, StackCounts, StackKey,
};

/// Which stacks a charged slice takes (imc_common::STACK_MODE_GLOBAL); frozen before load.
#[unsafe(no_mangle)]
static STACK_MODE: u32 = 0;

/// The slots whose deltas are charged to stacks (imc_common::STACK_SLOTS_GLOBAL).
#[unsafe(no_mangle)]
static STACK_SLOTS: u32 = 0;

/// `--stack-period`: what one overflow adds, and to which slot.
#[unsafe(no_mangle)]
static STACK_PERIOD: u64 = 0;
#[unsafe(no_mangle)]
static STACK_PERIOD_SLOT: u32 = 0;

/// Stack id → addresses, in even and in odd generations (sized by userspace before load).
#[map]
static STACK_TRACES: StackTrace = StackTrace::with_max_entries(1, 0);
#[map]
static STACK_TRACES_ODD: StackTrace = StackTrace::with_max_entries(1, 0);
/// The stacks those maps refused for a bucket another stack held, in even and odd generations.
#[map]
static STACK_SPARE: StackTrace = StackTrace::with_max_entries(1, 0);
#[map]
static STACK_SPARE_ODD: StackTrace = StackTrace::with_max_entries(1, 0);

/// The generation stacks are taken in now, and the entries made in it (userspace moves it on
/// at each drain).
#[map]
static STACK_GEN: Array<u32> = Array::with_max_entries(2, 0);

/// Entries of a generation after which userspace is woken to drain it
/// (imc_common::STACK_WAKE_AFTER_GLOBAL; a power of two, 0: never).
#[unsafe(no_mangle)]
static STACK_WAKE_AFTER: u32 = 0;

/// imc's own process (imc_common::STACK_SELF_GLOBAL): charged with no stack taken.
#[unsafe(no_mangle)]
static STACK_SELF_TGID: u32 = 0;

/// Whether process `tgid` is imc's own, whose stacks are not taken.
#[inline(always)]
fn is_self(tgid: u32) -> bool {
    // SAFETY: a read of a global set before load.
    tgid == unsafe { core::ptr::read_volatile(&STACK_SELF_TGID) }
}

/// (process, stack ids) → what they were charged (sized by userspace before load).
#[map]
static STACK_COUNTS: HashMap<StackKey, StackCounts> = HashMap::with_max_entries(1, 0);

/// The processes that made a stack entry lately (sized by userspace before load): see
/// [`announce`].
#[map]
static STACK_PROCS: LruHashMap<u32, u8> = LruHashMap::with_max_entries(1, 0);

#[inline(always)]
fn mode() -> u32 {
    // SAFETY: a read of a global the verifier sees as a constant.
    unsafe { core::ptr::read_volatile(&STACK_MODE) }
}

/// Whether slices take stacks at all (a constant: the code behind it goes when it is false).
#[inline(always)]
pub(crate) fn at_slices() -> bool {
    let m = mode();
    m != 0 && m & STACK_SAMPLED == 0
}

/// Charges one slice of process `tgid` to its current stacks: `deltas` per slot (only those
/// of STACK_SLOTS count), `on_ns` its on-CPU time. Takes no stack when the slice counted
/// nothing on those slots (unless STACK_SLOTS is empty: then time is the weight).
#[inline(always)]
pub(crate) fn charge_slice<C: EbpfContext + StackIdContext>(
    ctx: &C,
    tgid: u32,
    on_ns: u64,
    deltas: &[u64; MAX_SLOTS],
    nr: u32,
) {
    // SAFETY: a read of a global.
    let mask = unsafe { core::ptr::read_volatile(&STACK_SLOTS) };
    let mut any = 0u64;
    for s in 0..(nr as usize).min(MAX_SLOTS) {
        if mask & (1 << s) != 0 {
            any |= deltas[s];
        }
    }
    if mask != 0 && any == 0 {
        return;
    }
    let Some(c) = counts_of(ctx, tgid) else {
        return;
    };
    // SAFETY: `c` points to a live map value; the adds are atomic.
    unsafe {
        add(&raw mut (*c).on_ns, on_ns);
        add(&raw mut (*c).slices, 1);
        for s in 0..(nr as usize).min(MAX_SLOTS) {
            if mask & (1 << s) != 0 && deltas[s] != 0 {
                add(&raw mut (*c).slots[s], deltas[s]);
            }
        }
    }
}

/// `--stack-period`: the sampled counter overflowed on this CPU; the running task's process is
/// charged the period in its stack.
#[perf_event]
pub fn imc_stack_sample(ctx: PerfEventContext) -> u32 {
    // SAFETY: a helper without preconditions; reads of globals.
    let (id, period, slot) = unsafe {
        (
            bpf_get_current_pid_tgid(),
            core::ptr::read_volatile(&STACK_PERIOD),
            core::ptr::read_volatile(&STACK_PERIOD_SLOT) as usize,
        )
    };
    let tgid = (id >> 32) as u32;
    if tgid == 0 || mode() & STACK_SAMPLED == 0 {
        return 0;
    }
    if let Some(c) = counts_of(&ctx, tgid) {
        // SAFETY: as in charge_slice.
        unsafe {
            add(&raw mut (*c).slices, 1);
            add(&raw mut (*c).slots[slot & (MAX_SLOTS - 1)], period);
        }
    }
    0
}

/// The running task's stack entry for process `tgid` in the cgroup the task runs in, created
/// when it has none; None (counted in STAT_STACK_DROPPED) when the map is full. imc's own
/// process takes no stack (its entry carries none): userspace gives its traffic one frame and
/// never resolves it, so walking its stack would cost for nothing.
#[inline(always)]
fn counts_of<C: EbpfContext + StackIdContext>(ctx: &C, tgid: u32) -> Option<*mut StackCounts> {
    let m = mode();
    let generation = STACK_GEN.get(STACK_GEN_NOW).copied().unwrap_or(0);
    let maps = if generation & 1 == 0 {
        (&STACK_TRACES, &STACK_SPARE)
    } else {
        (&STACK_TRACES_ODD, &STACK_SPARE_ODD)
    };
    let walk = !is_self(tgid);
    let user = if walk && m & STACK_USER != 0 {
        take_stack(ctx, maps, u64::from(BPF_F_USER_STACK))
    } else {
        NO_STACK
    };
    let kernel = if walk && m & STACK_KERNEL != 0 {
        take_stack(ctx, maps, 0)
    } else {
        NO_STACK
    };
    // Stored field by field, volatile: a struct literal or a loop of stores becomes a call
    // to compiler_builtins' byte-wise memset here (see main.rs `set_reading`).
    let mut key = core::mem::MaybeUninit::<StackKey>::uninit();
    let k = key.as_mut_ptr();
    // SAFETY: `k` is valid for writing one StackKey, every field of which is written.
    let key = unsafe {
        core::ptr::write_volatile(&raw mut (*k).tgid, tgid);
        core::ptr::write_volatile(&raw mut (*k).user_stack, user);
        core::ptr::write_volatile(&raw mut (*k).kernel_stack, kernel);
        core::ptr::write_volatile(&raw mut (*k).generation, generation);
        core::ptr::write_volatile(&raw mut (*k).cgroup, bpf_get_current_cgroup_id());
        key.assume_init_ref()
    };
    if let Some(c) = STACK_COUNTS.get_ptr_mut(key) {
        return Some(c);
    }
    // Zeroed word by word, volatile (as the key above).
    let mut zero = core::mem::MaybeUninit::<StackCounts>::uninit();
    let z = zero.as_mut_ptr();
    // SAFETY: `z` is valid for writing one StackCounts.
    unsafe {
        core::ptr::write_volatile(&raw mut (*z).on_ns, 0);
        core::ptr::write_volatile(&raw mut (*z).slices, 0);
        for s in 0..MAX_SLOTS {
            core::ptr::write_volatile(&raw mut (*z).slots[s], 0);
        }
    }
    // SAFETY: every field was written above.
    let zero = unsafe { zero.assume_init_ref() };
    // Another CPU may have created it meanwhile (EEXIST): the lookup below finds it.
    if STACK_COUNTS
        .insert(key, zero, u64::from(BPF_NOEXIST))
        .is_ok()
    {
        count_entry();
        announce(key);
    }
    let found = STACK_COUNTS.get_ptr_mut(key);
    if found.is_none() {
        crate::bump(STAT_STACK_DROPPED);
    }
    found
}

/// Counts an entry made in the current generation, and wakes userspace each time the count
/// reaches a multiple of STACK_WAKE_AFTER: the drain that follows moves the generation on
/// before its stack map is so full that new stacks find their buckets taken. (The count is
/// read back after an atomic add, not fetched: two CPUs adding at once may both miss a
/// multiple, and the next one wakes.)
#[inline(always)]
fn count_entry() {
    // SAFETY: a read of a global.
    let every = unsafe { core::ptr::read_volatile(&STACK_WAKE_AFTER) };
    if every == 0 {
        return;
    }
    let Some(n) = STACK_GEN.get_ptr_mut(STACK_GEN_ENTRIES) else {
        return;
    };
    // SAFETY: `n` points to a live, 4-aligned map value, only added to atomically here.
    let made = unsafe {
        atomic_xadd::<u32, u32, { AtomicOrdering::Relaxed }>(n, 1);
        core::ptr::read_volatile(n)
    };
    if made & every.wrapping_sub(1) == 0 {
        let _ = crate::WAKE.output::<u32>(&STACKS_WAKE, u64::from(BPF_RB_FORCE_WAKEUP));
    }
}

/// Wakes userspace with the process of new entry `key` (its id marked [`PROCESS_WAKE`]) where
/// it is not among the processes that made an entry lately, so that its maps are read while
/// it runs: a process that lives less than a drain period would otherwise be gone when its
/// stacks are drained, and they could not be resolved. An entry with no stack taken (imc's
/// own) has nothing to resolve. Runs only where an entry is made (a new stack of a
/// generation), not at every charge. A lookup first: an LRU map's update takes a free node
/// (and its lock) before it finds the key there. A function of its own, reading what it needs
/// from the key, so the paths that charge a slice keep no value alive for it.
#[inline(never)]
fn announce(key: &StackKey) {
    if key.user_stack == NO_STACK && key.kernel_stack == NO_STACK {
        return;
    }
    let tgid = key.tgid;
    if STACK_PROCS.get_ptr(&tgid).is_none()
        && STACK_PROCS
            .insert(&tgid, &0, u64::from(BPF_NOEXIST))
            .is_ok()
    {
        let _ = crate::WAKE.output::<u32>(&(tgid | PROCESS_WAKE), u64::from(BPF_RB_FORCE_WAKEUP));
    }
}

/// The running task's process exec'ed: its next entry announces it again, so the new
/// program's maps are read (those read before were the old program's).
#[inline(always)]
pub(crate) fn exec_seen() {
    if mode() != 0 {
        // SAFETY: a helper without preconditions.
        let tgid = (unsafe { bpf_get_current_pid_tgid() } >> 32) as u32;
        let _ = STACK_PROCS.remove(&tgid);
    }
}

/// The id of the running task's stack (`flags`: user or kernel) in the generation's map, or,
/// where another stack holds its bucket there, in the spare map (the id marked [`SPARE_STACK`]);
/// `-errno` where neither took it.
#[inline(always)]
fn take_stack<C: StackIdContext>(
    ctx: &C,
    (traces, spare): (&StackTrace, &StackTrace),
    flags: u64,
) -> i32 {
    match ctx.get_stackid(traces, flags) {
        Ok(id) => id as i32,
        // Rare (a bucket taken), so the second walk costs only there.
        Err(e) if e == -EEXIST => match ctx.get_stackid(spare, flags) {
            Ok(id) => id as i32 | SPARE_STACK,
            Err(e) => e.min(-1),
        },
        Err(e) => e.min(-1),
    }
}

/// The kernel's EEXIST: `bpf_get_stackid`'s answer where the bucket holds another stack.
const EEXIST: i32 = 17;

/// `*p += v`, atomically (other CPUs may charge the same key): BPF's atomic add. The BPF
/// target has no compare-and-swap, so `AtomicU64::fetch_add` does not exist there; the
/// intrinsic lowers to the one instruction.
///
/// # Safety
/// `p` is valid, 8-aligned, and only ever accessed atomically while shared.
#[inline(always)]
unsafe fn add(p: *mut u64, v: u64) {
    // SAFETY: the caller's.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(p, v) };
}

//! The aggregating path (`AGGREGATE` 1): the CPU's accumulator of task slices between two
//! flushes, and the flush that writes one record per task.
use crate::fields::{copy_reading, set_comm, set_reading, zeroed_sums};
use crate::package::{PkgSums, fill_package_slot, package_due, read_package};
use crate::{
    AGG, CPU_SLOTS, HEADS, INTERVALS, LONG_SLICE_NS, MIN_FLUSH_NS, NR_SLOTS, PKG_SLOTS, Switch,
    TIMED_SLOTS, describe_no_task, describe_task, owner_known, publish, read_cpu_slot,
    read_cpu_value, ring_entry, stacks,
};
use aya_ebpf::{
    EbpfContext,
    helpers::generated::{
        bpf_get_current_pid_tgid, bpf_get_current_task, bpf_get_smp_processor_id, bpf_ktime_get_ns,
    },
    programs::tracing::StackIdContext,
};
use imc_common::{AGG_TASKS, AggState, KIND_AGGREGATE, MAX_SLOTS, SlotReading, next_interval_end};

/// The aggregating path (`AGGREGATE` 1): a switch adds the outgoing task's slice (time and CPU
/// slot deltas) to its entry in this CPU's accumulator and writes nothing; a tick (`tick`) adds
/// the running task's slice and flushes every entry as a KIND_AGGREGATE record, the package
/// readings in the first. Records per second are then ticks × tasks per tick, whatever the
/// switch rate. A full accumulator is flushed early (its period ends at the last switch), and a
/// slice longer than LONG_SLICE_NS (a tickless idle CPU) is a period of its own, so a long idle
/// stretch never dilutes the time of what ran around it; so is a slice across an end of
/// userspace's interval clock (INTERVALS), so no period mixes two intervals' tasks.
///
/// Most switches are [`common_switch`]es and most ticks of a busy CPU [`common_tick`]s, inlined
/// into their programs; a run that is neither takes the general path in a function of its own
/// ([`switch_general`], [`tick_general`]), so that the common case keeps its values in
/// registers and its code in few cache lines.
#[inline(always)]
pub(crate) fn accumulate<C: EbpfContext + StackIdContext>(ctx: &C, sw: Option<Switch>) {
    let Some(st) = AGG.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: a helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: `st` points into this CPU's AGG entry, which only this CPU touches, with
    // preemption off (a tick cannot nest in a switch on one CPU: see `write_tick_or_switch`).
    unsafe {
        match sw {
            None => {
                // The mode is a constant to the verifier, which keeps one of the two.
                let done = if stacks::at_slices() {
                    common_tick::<C, true>(ctx, st, now)
                } else {
                    common_tick::<C, false>(ctx, st, now)
                };
                if !done {
                    tick_general(ctx, st, now);
                }
            }
            Some(sw) => {
                if !common_switch(ctx, st, sw, now) {
                    switch_general(ctx, st, sw.prev, sw.next, now);
                }
            }
        }
    }
}

/// A switch that is not a [`common_switch`] (the CPU's first run, an unseen switch, a long
/// slice, one across an interval end, a thread without an entry where the hint says):
/// [`accumulate_general`], out of the program's common path.
///
/// The switch comes as its two task words, in registers: a `Switch` would be built on the
/// stack on the common path too, for this call alone.
///
/// # Safety
/// `st` points to this CPU's accumulator.
#[inline(never)]
unsafe fn switch_general<C: EbpfContext + StackIdContext>(
    ctx: &C,
    st: *mut AggState,
    prev: u64,
    next: u64,
    now: u64,
) {
    // SAFETY: the caller's.
    unsafe { accumulate_general(ctx, st, Some(Switch { prev, next }), now) }
}

/// A tick that is not a [`common_tick`] (the CPU's first run, an accumulator with entries, the
/// idle task or an unseen switch, a long slice, one across an interval end):
/// [`accumulate_general`], out of the tick's common path.
///
/// # Safety
/// `st` points to this CPU's accumulator.
#[inline(never)]
unsafe fn tick_general<C: EbpfContext + StackIdContext>(ctx: &C, st: *mut AggState, now: u64) {
    // SAFETY: the caller's.
    unsafe { accumulate_general(ctx, st, None, now) }
}

/// [`accumulate`]'s general path: a tick that is not a [`common_tick`], and a switch that is
/// not a [`common_switch`].
///
/// # Safety
/// `st` points to this CPU's accumulator.
#[inline(always)]
unsafe fn accumulate_general<C: EbpfContext + StackIdContext>(
    ctx: &C,
    st: *mut AggState,
    sw: Option<Switch>,
    now: u64,
) {
    let tick = sw.is_none();
    // SAFETY (whole function): the caller's.
    unsafe {
        let cpu = bpf_get_smp_processor_id();
        let timed = core::ptr::read_volatile(&TIMED_SLOTS);
        let cpu_slots = cpu_slot_mask();
        if (*st).period_start == 0 {
            // The first run on this CPU: only the baselines.
            (*st).period_start = now;
            (*st).last_t = now;
            (*st).last_ok = read_baselines(st, cpu_slots, timed);
            // No clock yet: the next run takes the one in INTERVALS. (Volatile: two plain zero
            // stores side by side become a byte-wise memset, see set_reading.)
            core::ptr::write_volatile(&raw mut (*st).clock.origin, 0);
            core::ptr::write_volatile(&raw mut (*st).clock.period, 0);
            (*st).next_end = u64::MAX;
            let _ = owner_known(st, sw);
            return;
        }
        let crossing = crosses_next_end(st, now);
        if tick && !crossing && !flush_due(st, cpu, now) {
            // Another hrtimer's expiry soon after the last flush: the running task's slice goes
            // on, and the next tick (or switch) takes it (and checks its owner then).
            return;
        }
        let known = owner_known(st, sw);
        // A long slice, or one across an interval end, is a period of its own: what ran
        // before it keeps its own period (all of it before the end), and only this one task's
        // slice is split at the end by time.
        let alone = long_slice(st, now) || crossing;
        if alone {
            let end = (*st).last_t;
            flush_aggregates(ctx, cpu, st, end, false);
        }
        // After an unseen switch the slice is no known task's: pid 0's entry takes it.
        let id = if known { bpf_get_current_pid_tgid() } else { 0 };
        let e = entry(ctx, cpu, st, id as u32, (id >> 32) as u32, known);
        let Some(e) = e else {
            return;
        };
        // The mode is a constant to the verifier, which keeps one of the two.
        if stacks::at_slices() {
            add_slice::<C, true>(ctx, st, e, id, known, now);
        } else {
            add_slice::<C, false>(ctx, st, e, id, known, now);
        }
        if crossing {
            // The slice's own end was the one crossed: the next is computed once per end.
            (*st).next_end = next_interval_end((*st).clock.origin, (*st).clock.period, now);
        }
        if tick || alone {
            flush_aggregates(ctx, cpu, st, now, true);
        }
    }
}

/// The common switch, taken whole: stacks are not taken at slices, the task leaving is the one
/// the CPU's last run left running, its slice crosses no interval end and is not long, and its
/// entry is where the accumulator's hint says. Then the slice is added as [`accumulate`] adds
/// it, and true is returned; otherwise nothing is changed, and [`accumulate`]'s general path
/// takes the run. This is most switches, so it touches the accumulator's head, one entry and
/// the slots' baselines, and makes no call but the counter reads and the thread id. (A switch
/// that takes a stack costs the stack's helper far more than the general path's search.)
///
/// # Safety
/// `st` points to this CPU's accumulator.
#[inline(always)]
unsafe fn common_switch<C: EbpfContext + StackIdContext>(
    ctx: &C,
    st: *mut AggState,
    sw: Switch,
    now: u64,
) -> bool {
    // SAFETY: the caller's.
    unsafe {
        // A constant to the verifier: with stacks it keeps only the return.
        if stacks::at_slices() {
            return false;
        }
        // A zeroed accumulator (no baseline yet) has `next_end` 0: every run crosses it.
        if now > (*st).next_end || !same_clock(st) {
            return false;
        }
        let expect = (*st).expect;
        if (expect != 0 && expect != sw.prev) || long_slice(st, now) {
            return false;
        }
        let id = bpf_get_current_pid_tgid();
        let Some(e) = hinted_entry(st, id as u32) else {
            return false;
        };
        (*st).expect = sw.next;
        add_slice::<C, false>(ctx, st, e, id, true, now);
        true
    }
}

/// The common tick of a busy CPU, taken whole: no slice was charged since the last flush (the
/// accumulator has no entry), the slice crosses no interval end and is not long, and the task
/// running is the one the CPU's last run left running, a thread (not the idle task). The
/// period is then this one thread's one slice, and when the flush is due its record is written
/// straight into the ring, as [`accumulate`]'s general path would write it from an entry made
/// for it, with the package readings when this CPU reads them, and with `STACKS` (stacks are
/// taken at slices) the slice's stack charged as [`add_slice`] charges it. Returns false,
/// having changed nothing, where the general path must take the tick.
///
/// The tick comes after milliseconds of the workload's own use of the caches, so what it costs
/// is mostly the lines of code and data it touches: this path touches no entry and runs no
/// search or copy.
///
/// # Safety
/// `st` points to this CPU's accumulator.
#[inline(always)]
unsafe fn common_tick<C: EbpfContext + StackIdContext, const STACKS: bool>(
    ctx: &C,
    st: *mut AggState,
    now: u64,
) -> bool {
    // SAFETY (whole function): the caller's; `h` and `rec` are pointers the verifier proved to
    // be inside their arrays, which only this CPU writes (see `write_tick_or_switch`).
    unsafe {
        // A zeroed accumulator (no baseline yet) has `next_end` 0: every run crosses it.
        if (*st).n != 0 || now > (*st).next_end || !same_clock(st) || long_slice(st, now) {
            return false;
        }
        let cpu = bpf_get_smp_processor_id();
        if !flush_due(st, cpu, now) {
            // As on the general path: the slice goes on, and a later run takes it.
            return true;
        }
        // What `owner_known` decides for a tick, without its counting: an unseen switch is
        // the general path's.
        let expect = (*st).expect;
        if expect != 0 && expect != bpf_get_current_task() {
            return false;
        }
        let id = bpf_get_current_pid_tgid();
        let pid = id as u32;
        if pid == 0 {
            return false;
        }
        let Some(h) = HEADS.get_ptr_mut(cpu) else {
            return false;
        };
        let seq = (*h).head;
        let Some(rec) = ring_entry(cpu, seq) else {
            return false;
        };
        // Nothing was changed until here; from here the tick is this path's.
        let mut sums = PkgSums::new();
        let pkg_ok = read_package(ctx, cpu, now, &mut sums);
        let nr = core::ptr::read_volatile(&NR_SLOTS).min(MAX_SLOTS as u32);
        (*rec).t_ns = now;
        (*rec).t0_ns = (*st).period_start;
        let on_ns = now.wrapping_sub((*st).last_t);
        (*rec).on_ns = on_ns;
        (*rec).cpu = cpu;
        (*rec).pid = pid;
        (*rec).tgid = (id >> 32) as u32;
        (*rec).kind = KIND_AGGREGATE;
        (*rec).nr_slots = nr as u8;
        // The entry's rule (see `entry`): refreshed by the time of the CPU's last run.
        let refresh = ((*st).last_t >> 10) & 63 == 0;
        describe_task(
            h,
            pid,
            refresh,
            &raw mut (*rec).cgroup_id,
            &raw mut (*rec).comm,
            &raw mut (*rec).flags,
        );
        let timed = core::ptr::read_volatile(&TIMED_SLOTS);
        let pkg_slots = core::ptr::read_volatile(&PKG_SLOTS);
        let cpu_slots = cpu_slot_mask();
        let mut ok = (*st).last_ok;
        let mut failed = 0u8;
        // The slice's own deltas, for its stack, as in `add_slice`.
        let mut deltas = core::mem::MaybeUninit::<[u64; MAX_SLOTS]>::uninit();
        if STACKS {
            zeroed_sums(&mut deltas);
        }
        // SAFETY: a pointer to the array, read only where it was zeroed above.
        let deltas = &mut *deltas.as_mut_ptr();
        // Each slot as the flush writes it: a package slot's sum in this first record, a CPU
        // slot's delta over the slice. The masks are constants: other slots' code is dropped,
        // and (as in `add_slice`) the slots above the last configured one by one test.
        let slots = pkg_slots | cpu_slots;
        macro_rules! fill_slots {
            ($s:literal $($above:literal)*) => {
                let out = &raw mut (*rec).slots[$s];
                if pkg_slots & (1 << $s) != 0 {
                    let read = pkg_ok & (1 << $s) != 0;
                    if fill_package_slot(out, sums.get($s, read), read) {
                        failed |= 1 << $s;
                    }
                } else if cpu_slots & (1 << $s) != 0 {
                    set_reading(out, 0, 0, 0);
                    let t = timed & (1 << $s) != 0;
                    add_slot_delta(st, out, &mut failed, $s, t, &mut ok, deltas);
                }
                if slots >> $s > 1 {
                    fill_slots!($($above)*);
                }
            };
            () => {};
        }
        fill_slots!(0 1 2 3 4 5 6 7);
        (*rec).failed_mask = failed;
        if STACKS {
            stacks::charge_slice(ctx, (id >> 32) as u32, on_ns, deltas, nr);
        }
        (*st).last_ok = ok;
        (*st).last_t = now;
        (*st).period_start = now;
        publish(h, cpu, seq, seq.wrapping_add(1));
        true
    }
}

/// Adds the slice from the accumulator's last run to `now` to entry `e`, thread `id`'s
/// (`known` false: no known task's, see [`owner_known`]): its time, each CPU slot's delta, and
/// with `STACKS` (stacks are taken at slices: [`stacks::at_slices`]) its stack. The slice's end
/// is the next one's start. The mode is a parameter, not a read: the verifier would drop its
/// test but keep the arithmetic the compiler makes of it.
///
/// # Safety
/// `st` points to this CPU's accumulator and `e` to one of its entries.
#[inline(always)]
unsafe fn add_slice<C: EbpfContext + StackIdContext, const STACKS: bool>(
    ctx: &C,
    st: *mut AggState,
    e: *mut imc_common::AggTask,
    id: u64,
    known: bool,
    now: u64,
) {
    // SAFETY: the caller's.
    unsafe {
        let timed = core::ptr::read_volatile(&TIMED_SLOTS);
        let cpu_slots = cpu_slot_mask();
        let slice_ns = now.wrapping_sub((*st).last_t);
        (*e).on_ns = (*e).on_ns.wrapping_add(slice_ns);
        let mut ok = (*st).last_ok;
        // The slice's own deltas, for its stack: zeroed only with STACKS, written by each
        // slot's read, read only by the stack's charge.
        let mut deltas = core::mem::MaybeUninit::<[u64; MAX_SLOTS]>::uninit();
        if STACKS {
            zeroed_sums(&mut deltas);
        }
        // SAFETY: a pointer to the array, read only where it was zeroed above.
        let deltas = &mut *deltas.as_mut_ptr();
        // One copy per slot, each kept only when the slot is a configured CPU slot: the mask is
        // a constant to the verifier, which removes the others' code, so a switch neither loops
        // nor tests a slot it does not read. The verifier leaves the arithmetic of a test it
        // removes, so the slots above the last CPU slot are passed by one test, not one each.
        macro_rules! add_slots {
            ($s:literal $($above:literal)*) => {
                if cpu_slots & (1 << $s) != 0 {
                    add_slot_delta(
                        st,
                        &raw mut (*e).slots[$s],
                        &raw mut (*e).failed_mask,
                        $s,
                        timed & (1 << $s) != 0,
                        &mut ok,
                        deltas,
                    );
                }
                if cpu_slots >> $s > 1 {
                    add_slots!($($above)*);
                }
            };
            () => {};
        }
        add_slots!(0 1 2 3 4 5 6 7);
        (*st).last_ok = ok;
        (*st).last_t = now;
        if STACKS {
            if known && id as u32 != 0 {
                let nr = core::ptr::read_volatile(&NR_SLOTS).min(MAX_SLOTS as u32);
                stacks::charge_slice(ctx, (id >> 32) as u32, slice_ns, deltas, nr);
            }
        }
    }
}

/// Whether the slice from the accumulator's last run to `now` is longer than LONG_SLICE_NS.
///
/// # Safety
/// `st` points to this CPU's accumulator.
#[inline(always)]
unsafe fn long_slice(st: *const AggState, now: u64) -> bool {
    // SAFETY: the caller's, and a read of a global.
    unsafe { now.wrapping_sub((*st).last_t) > core::ptr::read_volatile(&LONG_SLICE_NS) }
}

/// The entry of thread `pid` where the accumulator's hint points, if that entry is in use and
/// is `pid`'s (see [`entry`], which keeps the hint).
///
/// # Safety
/// `st` points to this CPU's accumulator.
#[inline(always)]
unsafe fn hinted_entry(st: *mut AggState, pid: u32) -> Option<*mut imc_common::AggTask> {
    // SAFETY: the caller's; the index is masked into the array.
    unsafe {
        let j = usize::from((*st).hint[pid as usize & (AGG_TASKS - 1)]) & (AGG_TASKS - 1);
        if j >= (*st).n as usize {
            return None;
        }
        let e = &raw mut (*st).tasks[j];
        ((*e).pid == pid).then_some(e)
    }
}

/// Reads CPU slot `s` and adds its delta since the accumulator's baseline to `acc` (an entry's
/// or a record's reading of the slot), the reading then replacing the baseline; `ok` (bit `s`:
/// the baseline is valid) is updated, and bit `s` of `failed` set where the delta is unknown.
/// An untimed slot's enabled and running times are 1 at every read (see [`read_cpu_slot`]):
/// their deltas are 0, so only its value is read, added and kept.
///
/// # Safety
/// `st` points to this CPU's accumulator; `acc` and `failed` are valid for writing.
#[inline(always)]
unsafe fn add_slot_delta(
    st: *mut AggState,
    acc: *mut SlotReading,
    failed: *mut u8,
    s: u32,
    timed: bool,
    ok: &mut u32,
    deltas: &mut [u64; MAX_SLOTS],
) {
    let bit = 1u32 << s;
    let i = s as usize & (MAX_SLOTS - 1);
    // SAFETY: the caller's.
    unsafe {
        let last = &raw mut (*st).last[i];
        if !timed {
            let Ok(v) = read_cpu_value(s) else {
                *failed |= bit as u8;
                *ok &= !bit;
                return;
            };
            if *ok & bit != 0 {
                let d = v.wrapping_sub((*last).value);
                deltas[i] = d;
                (*acc).value = (*acc).value.wrapping_add(d);
            } else {
                // No baseline (the previous read failed): this slice's delta is unknown.
                *failed |= bit as u8;
            }
            (*last).value = v;
            *ok |= bit;
            return;
        }
        // Filled by the read (the helper writes all of it); read only when the read succeeded.
        let mut cur = core::mem::MaybeUninit::<SlotReading>::uninit();
        let cur = cur.as_mut_ptr();
        if read_cpu_slot(s, true, cur) != 0 {
            *failed |= bit as u8;
            *ok &= !bit;
            return;
        }
        if *ok & bit != 0 {
            let d = (*cur).value.wrapping_sub((*last).value);
            deltas[i] = d;
            (*acc).value = (*acc).value.wrapping_add(d);
            (*acc).enabled = (*acc)
                .enabled
                .wrapping_add((*cur).enabled.wrapping_sub((*last).enabled));
            (*acc).running = (*acc)
                .running
                .wrapping_add((*cur).running.wrapping_sub((*last).running));
        } else {
            // No baseline (the previous read failed): this slice's delta is unknown.
            *failed |= bit as u8;
        }
        copy_reading(last, cur);
        *ok |= bit;
    }
}

/// Whether the slice from the accumulator's `last_t` to `now` crosses an end of userspace's
/// interval clock (none until userspace writes it): whether it ends after `next_end`, which is
/// computed again only when the clock in INTERVALS is not the one it was computed from. A run
/// that crosses no end reads the clock and compares two words and a time; it never divides.
///
/// # Safety
/// `st` points to this CPU's accumulator.
#[inline(always)]
unsafe fn crosses_next_end(st: *mut AggState, now: u64) -> bool {
    // SAFETY: the caller's.
    unsafe {
        if !same_clock(st) {
            let (origin, period) = interval_clock();
            (*st).clock.origin = origin;
            (*st).clock.period = period;
            (*st).next_end = next_interval_end(origin, period, (*st).last_t);
        }
        now > (*st).next_end
    }
}

/// Whether the interval clock is the one the accumulator's `next_end` was computed from.
///
/// # Safety
/// `st` points to this CPU's accumulator.
#[inline(always)]
unsafe fn same_clock(st: *const AggState) -> bool {
    let (origin, period) = interval_clock();
    // SAFETY: the caller's.
    unsafe { origin == (*st).clock.origin && period == (*st).clock.period }
}

/// Userspace's interval clock (INTERVALS): origin and period.
#[inline(always)]
fn interval_clock() -> (u64, u64) {
    // SAFETY: reads of a global userspace writes and the program only reads; volatile, so each
    // run reads it anew.
    unsafe {
        (
            core::ptr::read_volatile(&raw const INTERVALS.origin),
            core::ptr::read_volatile(&raw const INTERVALS.period),
        )
    }
}

/// Whether a tick at `now` flushes: MIN_FLUSH_NS since the period began, or this CPU's package
/// read is due (so package readings keep the tick's schedule whatever the accumulator did).
///
/// # Safety
/// `st` points to this CPU's accumulator.
#[inline(always)]
unsafe fn flush_due(st: *const AggState, cpu: u32, now: u64) -> bool {
    // SAFETY: the caller's.
    let start = unsafe { (*st).period_start };
    // SAFETY: reads of globals.
    let (min, pkg_slots) = unsafe {
        (
            core::ptr::read_volatile(&MIN_FLUSH_NS),
            core::ptr::read_volatile(&PKG_SLOTS),
        )
    };
    now.wrapping_sub(start) >= min || (pkg_slots != 0 && package_due(cpu, now).is_some())
}

/// Reads every CPU slot into the accumulator's baselines; returns the mask of those read.
///
/// # Safety
/// `st` points to this CPU's accumulator.
#[inline(always)]
unsafe fn read_baselines(st: *mut AggState, cpu_slots: u32, timed: u32) -> u32 {
    let mut ok = 0;
    for s in 0..MAX_SLOTS as u32 {
        let bit = 1u32 << s;
        if cpu_slots & bit == 0 {
            continue;
        }
        // SAFETY: the caller's.
        let out = unsafe { &raw mut (*st).last[s as usize & (MAX_SLOTS - 1)] };
        if read_cpu_slot(s, timed & bit != 0, out) == 0 {
            ok |= bit;
        }
    }
    ok
}

/// The accumulator entry of thread `pid`, created (with comm and cgroup, unless this CPU
/// described the thread lately) if it has none; a full accumulator is flushed first. `current`
/// false: `pid` is 0 for a slice no known task ran, not the running task, whose description
/// is then not fetched.
///
/// # Safety
/// `st` points to this CPU's accumulator.
#[inline(always)]
unsafe fn entry<C: EbpfContext>(
    ctx: &C,
    cpu: u32,
    st: *mut AggState,
    pid: u32,
    tgid: u32,
    current: bool,
) -> Option<*mut imc_common::AggTask> {
    // SAFETY: the caller's; `tasks` indices are masked into the array.
    unsafe {
        let n = ((*st).n as usize).min(AGG_TASKS);
        // Every entry is looked at and the count checked inside: a loop that stops at `n`
        // becomes a pointer walk the verifier cannot bound.
        for i in 0..AGG_TASKS {
            let e = &raw mut (*st).tasks[i];
            if i < n && (*e).pid == pid {
                (*st).hint[pid as usize & (AGG_TASKS - 1)] = i as u8;
                return Some(e);
            }
        }
        let mut n = n;
        if n >= AGG_TASKS {
            let end = (*st).last_t;
            flush_aggregates(ctx, cpu, st, end, false);
            n = 0;
        }
        let e = &raw mut (*st).tasks[n & (AGG_TASKS - 1)];
        (*st).hint[pid as usize & (AGG_TASKS - 1)] = n as u8;
        (*e).pid = pid;
        (*e).tgid = tgid;
        (*e).on_ns = 0;
        (*e).failed_mask = 0;
        // Only the CPU slots' sums are ever added to or read (a package slot's come from the
        // package read at the flush): the others' stores are compiled out.
        let cpu_slots = cpu_slot_mask();
        macro_rules! zero_slots {
            ($($s:literal)*) => {$(
                if cpu_slots & (1 << $s) != 0 {
                    set_reading(&raw mut (*e).slots[$s], 0, 0, 0);
                }
            )*};
        }
        zero_slots!(0 1 2 3 4 5 6 7);
        let h = HEADS.get_ptr_mut(cpu)?;
        let (cgroup_id, comm, flags) = (
            &raw mut (*e).cgroup_id,
            &raw mut (*e).comm,
            &raw mut (*e).flags,
        );
        if current {
            // About one entry in 64 refreshes, picked by the time of the CPU's last run (its
            // low bits jitter from tick to tick), not by the entry count: entries come in the
            // same order tick after tick, so every 64th would always be the same task's, and a
            // task whose comm changed at exec in the others' place would keep its old one.
            let refresh = ((*st).last_t >> 10) & 63 == 0;
            describe_task(h, pid, refresh, cgroup_id, comm, flags);
        } else {
            describe_no_task(cgroup_id, comm, flags);
        }
        (*st).created = (*st).created.wrapping_add(1);
        (*st).n = (n + 1) as u32;
        Some(e)
    }
}

/// Bit `s` set: slot `s` is configured and read on each CPU (not a package slot). A constant
/// to the verifier (the global is frozen), so code under a clear bit is dropped.
#[inline(always)]
fn cpu_slot_mask() -> u32 {
    // SAFETY: a read of a global; volatile so the compiler does not fold the compiled-in 0.
    unsafe { core::ptr::read_volatile(&CPU_SLOTS) }
}

/// Whether an accumulator entry counted nothing: every slot read, every CPU slot's delta zero
/// (its package slots are filled at the flush).
///
/// # Safety
/// `e` points to an entry of this CPU's accumulator.
#[inline(always)]
unsafe fn counted_nothing(e: *const imc_common::AggTask) -> bool {
    let cpu_slots = cpu_slot_mask();
    // SAFETY: the caller's.
    unsafe {
        if (*e).failed_mask != 0 {
            return false;
        }
        let mut sum = 0u64;
        macro_rules! or_slots {
            ($($s:literal)*) => {$(
                if cpu_slots & (1 << $s) != 0 {
                    sum |= (*e).slots[$s].value;
                }
            )*};
        }
        or_slots!(0 1 2 3 4 5 6 7);
        sum == 0
    }
}

/// Writes one KIND_AGGREGATE record per accumulator entry (the idle task's only when it counted
/// something or carries the package readings), for the period
/// `period_start .. end`, and starts the next period at `end`. With `pkg`, this CPU reads its
/// package's counters (when it is a reader and the period's read is due) into the first record
/// written.
///
/// # Safety
/// `st` points to this CPU's accumulator.
#[inline(always)]
unsafe fn flush_aggregates<C: EbpfContext>(
    ctx: &C,
    cpu: u32,
    st: *mut AggState,
    end: u64,
    pkg: bool,
) {
    // SAFETY: the caller's, and `write_tick_or_switch`'s for the ring.
    unsafe {
        let Some(h) = HEADS.get_ptr_mut(cpu) else {
            return;
        };
        let n = ((*st).n as usize).min(AGG_TASKS);
        let nr = core::ptr::read_volatile(&NR_SLOTS).min(MAX_SLOTS as u32);
        let pkg_slots = core::ptr::read_volatile(&PKG_SLOTS);
        let mut sums = PkgSums::new();
        let pkg_ok = if pkg {
            read_package(ctx, cpu, end, &mut sums)
        } else {
            0
        };
        let seq = (*h).head;
        let start = (*st).period_start;
        let mut written = 0u64;
        for i in 0..AGG_TASKS {
            if i >= n {
                continue;
            }
            let Some(rec) = ring_entry(cpu, seq.wrapping_add(written)) else {
                break;
            };
            let e = &raw const (*st).tasks[i];
            if (*e).pid == 0 && !(written == 0 && pkg_ok != 0) && counted_nothing(e) {
                // The idle task's aggregate that counted nothing claims nothing either (the
                // idle task has no claim by time): leaving it out halves an idle-ish CPU's
                // records. Idle time is the period less its tasks' on_ns.
                continue;
            }
            (*rec).t_ns = end;
            (*rec).t0_ns = start;
            (*rec).on_ns = (*e).on_ns;
            (*rec).cgroup_id = (*e).cgroup_id;
            (*rec).cpu = cpu;
            (*rec).pid = (*e).pid;
            (*rec).tgid = (*e).tgid;
            (*rec).kind = KIND_AGGREGATE;
            (*rec).nr_slots = nr as u8;
            (*rec).flags = (*e).flags;
            set_comm(&raw mut (*rec).comm, Some(&raw const (*e).comm));
            let mut failed = (*e).failed_mask;
            for s in 0..nr as usize {
                let bit = 1u8 << s;
                if pkg_slots & u32::from(bit) != 0 {
                    // The package readings go into the first record of the flush only.
                    let read = written == 0 && pkg_ok & bit != 0;
                    if fill_package_slot(&raw mut (*rec).slots[s], sums.get(s, read), read) {
                        failed |= bit;
                    }
                } else {
                    copy_reading(&raw mut (*rec).slots[s], &raw const (*e).slots[s]);
                }
            }
            (*rec).failed_mask = failed;
            written += 1;
        }
        (*st).n = 0;
        (*st).period_start = end;
        if written == 0 {
            return;
        }
        publish(h, cpu, seq, seq.wrapping_add(written));
    }
}

//! The userspace twin of the eBPF program's aggregating path (imc-ebpf's `aggregate`, `flush`
//! and `flush_due`), kept beside the sampler, the program's Rust half; the equivalence tests
//! below hold the two to the same answers.
//!
//! The kernel's per-task aggregation, replayed in userspace: [`Aggregator`] turns the record
//! stream the program writes with `--precise` (a record per context switch and per tick) into
//! the one it writes by default (per CPU, one `KIND_AGGREGATE` record per task that ran since
//! the last flush, at every tick), following imc-ebpf's `aggregate` step for step: the same
//! accumulator of [`AGG_TASKS`] entries flushed early when full, the same long-slice rule, the
//! same interval-end rule (with the interval clock set, a slice across an end is a period of
//! its own), the same minimum time between a flush and a tick that flushes, the package
//! readings in the first record of a tick's flush.
//!
//! Tests (imc-sim/tests/aggregate_twin.rs) use it to check that attribution gives the same
//! answer from either stream of one synthetic timeline, and `cargo xtask bench-scale` to replay
//! a large machine both ways.
use crate::model::{SlotScope, SlotSpec};
use imc_common::{
    AGG_TASKS, KIND_AGGREGATE, KIND_TICK, MAX_SLOTS, Record, SlotReading, crosses_interval_end,
    tick_rules,
};

#[derive(Clone, Copy)]
struct Entry {
    /// The task's identity, from its first record in the period.
    who: Record,
    on_ns: u64,
    failed: u8,
    slots: [SlotReading; MAX_SLOTS],
}

#[derive(Clone, Default)]
struct CpuAgg {
    started: bool,
    period_start: u64,
    last_t: u64,
    last: [SlotReading; MAX_SLOTS],
    last_ok: u8,
    nr: u8,
    entries: Vec<Entry>,
}

/// Per-CPU accumulators, as the kernel keeps them.
pub struct Aggregator {
    pkg_mask: u8,
    long_slice_ns: u64,
    min_flush_ns: u64,
    /// The interval clock (origin, period in ns), as userspace writes it into the program.
    clock: Option<(u64, u64)>,
    cpus: Vec<CpuAgg>,
}

impl Aggregator {
    /// `specs`: the slots (package slots are read at ticks, CPU slots accumulated);
    /// `tick_hz`: the tick rate (a slice longer than two periods is a period of its own).
    pub fn new(specs: &[SlotSpec], tick_hz: u32) -> Aggregator {
        let pkg_mask = specs
            .iter()
            .take(MAX_SLOTS)
            .enumerate()
            .filter(|(_, s)| s.scope == SlotScope::Package)
            .fold(0u8, |m, (i, _)| m | 1 << i);
        Aggregator {
            pkg_mask,
            long_slice_ns: tick_rules::long_slice_ns(tick_hz),
            min_flush_ns: tick_rules::min_flush_ns(tick_hz),
            clock: None,
            cpus: Vec::new(),
        }
    }

    /// The interval clock the program is handed (`Sampler::set_interval_clock`): intervals end
    /// every `period_ns` from `origin_ns`.
    pub fn interval_clock(mut self, origin_ns: u64, period_ns: u64) -> Aggregator {
        self.clock = Some((origin_ns, period_ns));
        self
    }

    /// One record of the per-switch stream (`KIND_TICK` or `KIND_SWITCH`, each CPU's in time
    /// order); appends the aggregates it flushes to `out`.
    pub fn push(&mut self, rec: &Record, out: &mut Vec<Record>) {
        let c = rec.cpu as usize;
        if c >= self.cpus.len() {
            self.cpus.resize(c + 1, CpuAgg::default());
        }
        let pkg_mask = self.pkg_mask;
        let long_slice_ns = self.long_slice_ns;
        let st = &mut self.cpus[c];
        let nr = rec.nr_slots.min(MAX_SLOTS as u8);
        st.nr = nr;
        let cpu_slots = (((1u16 << nr) - 1) as u8) & !pkg_mask;
        let t = rec.t_ns;
        if !st.started || t < st.last_t {
            st.started = true;
            st.entries.clear();
            st.period_start = t;
            st.last_t = t;
            st.last = rec.slots;
            st.last_ok = cpu_slots & !rec.failed_mask;
            return;
        }
        let crossing = self
            .clock
            .is_some_and(|(origin, period)| crosses_interval_end(origin, period, st.last_t, t));
        if rec.kind == KIND_TICK
            && !crossing
            && t - st.period_start < self.min_flush_ns
            && rec.failed_mask & pkg_mask == pkg_mask
        {
            // A tick soon after the last flush that read no package (the program's flush_due:
            // its read was not due): the running slice goes on.
            return;
        }
        // A long slice, or one across an interval end, is a period of its own.
        let alone = t - st.last_t > long_slice_ns || crossing;
        if alone {
            let end = st.last_t;
            flush(st, rec.cpu, end, None, pkg_mask, out);
        }
        let i = entry_of(st, rec, pkg_mask, out);
        add_slice(st, i, rec, cpu_slots);
        st.last_t = t;
        if rec.kind == KIND_TICK || alone {
            flush(st, rec.cpu, t, Some(rec), pkg_mask, out);
        }
    }
}

/// The accumulator entry of `rec`'s task, made if it has none (a full accumulator flushed
/// first, its period ending where its last task stopped): the program's `entry`.
fn entry_of(st: &mut CpuAgg, rec: &Record, pkg_mask: u8, out: &mut Vec<Record>) -> usize {
    if let Some(i) = st.entries.iter().position(|e| e.who.pid == rec.pid) {
        return i;
    }
    if st.entries.len() >= AGG_TASKS {
        let end = st.last_t;
        flush(st, rec.cpu, end, None, pkg_mask, out);
    }
    st.entries.push(Entry {
        who: *rec,
        on_ns: 0,
        failed: 0,
        slots: [SlotReading::default(); MAX_SLOTS],
    });
    st.entries.len() - 1
}

/// Adds the slice since the CPU's last record (its time and each CPU slot's delta) to entry
/// `i`, and makes `rec`'s readings the new baselines: the program's slice step in `accumulate`.
fn add_slice(st: &mut CpuAgg, i: usize, rec: &Record, cpu_slots: u8) {
    let e = &mut st.entries[i];
    e.on_ns += rec.t_ns - st.last_t;
    let mut bits = cpu_slots;
    while bits != 0 {
        let s = bits.trailing_zeros() as usize;
        bits &= bits - 1;
        let bit = 1u8 << s;
        if rec.failed_mask & bit != 0 {
            e.failed |= bit;
            st.last_ok &= !bit;
            continue;
        }
        let (a, b) = (&st.last[s], &rec.slots[s]);
        if st.last_ok & bit != 0 {
            let acc = &mut e.slots[s];
            acc.value = acc.value.wrapping_add(b.value.wrapping_sub(a.value));
            acc.enabled = acc.enabled.wrapping_add(b.enabled.wrapping_sub(a.enabled));
            acc.running = acc.running.wrapping_add(b.running.wrapping_sub(a.running));
        } else {
            e.failed |= bit;
        }
        st.last[s] = *b;
        st.last_ok |= bit;
    }
}

/// Every entry as a KIND_AGGREGATE record of the period ending at `end`; `pkg`: the record
/// whose package readings the first carries.
fn flush(
    st: &mut CpuAgg,
    cpu: u32,
    end: u64,
    pkg: Option<&Record>,
    pkg_mask: u8,
    out: &mut Vec<Record>,
) {
    let nr_mask = ((1u16 << st.nr) - 1) as u8;
    let pkg_read = pkg.is_some_and(|p| p.failed_mask & pkg_mask != pkg_mask);
    let mut written = 0;
    for e in &st.entries {
        let carries_pkg = written == 0 && pkg_read;
        if e.who.pid == 0 && !carries_pkg && e.failed == 0 && e.slots.iter().all(|s| s.value == 0) {
            // The program's counted_nothing: an idle aggregate with nothing in it is left out.
            continue;
        }
        let mut r = e.who;
        r.kind = KIND_AGGREGATE;
        r.cpu = cpu;
        r.t_ns = end;
        r.t0_ns = st.period_start;
        r.on_ns = e.on_ns;
        r.nr_slots = st.nr;
        r.flags = 0;
        r.slots = e.slots;
        let mut failed = e.failed;
        match pkg.filter(|_| written == 0) {
            Some(p) => {
                failed |= p.failed_mask & pkg_mask;
                for s in 0..MAX_SLOTS {
                    if pkg_mask & (1 << s) != 0 {
                        r.slots[s] = p.slots[s];
                    }
                }
            }
            None => {
                failed |= pkg_mask;
                for s in 0..MAX_SLOTS {
                    if pkg_mask & (1 << s) != 0 {
                        r.slots[s] = SlotReading::default();
                    }
                }
            }
        }
        r.failed_mask = failed & nr_mask;
        out.push(r);
        written += 1;
    }
    st.entries.clear();
    st.period_start = end;
}

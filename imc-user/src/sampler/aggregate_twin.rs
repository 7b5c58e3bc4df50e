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
//! Tests use it to check that attribution gives the same answer from either stream of one
//! synthetic timeline, and `cargo xtask bench-scale` to replay a large machine both ways.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::Attributor;
    use crate::model::result::IntervalResult;
    use crate::simulator::{Readers, Scenario, SynthItem, SynthTask};

    const MS: u64 = 1_000_000;

    /// Every task's read and write bytes and the unattributed ones, per interval, from one
    /// stream of `sc` either as is (a record per switch) or through the aggregator.
    fn attribute(
        sc: &Scenario,
        aggregated: bool,
    ) -> (Vec<IntervalResult>, u64, u64, crate::simulator::Truth) {
        attribute_with(sc, aggregated, 100 * MS, false)
    }

    /// [`attribute`] with intervals of `every` ns, the aggregator knowing their clock
    /// (`clock`) or not.
    fn attribute_with(
        sc: &Scenario,
        aggregated: bool,
        every: u64,
        clock: bool,
    ) -> (Vec<IntervalResult>, u64, u64, crate::simulator::Truth) {
        let specs = sc.specs();
        let mut a = Attributor::new(&specs, &sc.topology(), "test").tick_hz(sc.freq_hz);
        let mut agg = Aggregator::new(&specs, sc.freq_hz);
        if clock {
            agg = agg.interval_clock(0, every);
        }
        let mut out = Vec::new();
        let mut results = Vec::new();
        let (mut records, mut aggregates) = (0u64, 0u64);
        let mut sc = sc.clone();
        sc.mark_every_ns = Some(every);
        // As the drainer does: an interval's end is set before the records that cross it come,
        // and it closes once every CPU has reported past it.
        let mut open_end: Option<u64> = None;
        let mut stream = sc.stream();
        for it in stream.by_ref() {
            match it {
                SynthItem::Tick(r) if aggregated => {
                    records += 1;
                    out.clear();
                    agg.push(&r, &mut out);
                    for x in &out {
                        aggregates += 1;
                        a.push_tick(x);
                    }
                }
                SynthItem::Tick(r) => {
                    records += 1;
                    a.push_tick(&r);
                }
                SynthItem::PackageRead(p, s, t, v) => a.push_package_read(p, s, t, v),
                SynthItem::Mark(t) => {
                    if let Some(end) = open_end.take() {
                        results.push(a.close_interval(end));
                    }
                    a.split_at(t);
                    open_end = Some(t);
                }
            }
            if let Some(end) = open_end.filter(|&end| a.reported_past(end)) {
                results.push(a.close_interval(end));
                open_end = None;
            }
        }
        if let Some(end) = open_end {
            results.push(a.close_interval(end));
        }
        results.push(a.finish(sc.duration_ns));
        (results, records, aggregates, stream.truth)
    }

    /// (bytes per pid, unattributed bytes, package bytes, task rows: each rounded to a count).
    fn per_task(
        results: &[IntervalResult],
    ) -> (std::collections::BTreeMap<u32, u64>, u64, u64, u64) {
        let mut by = std::collections::BTreeMap::new();
        let (mut un, mut total, mut rows) = (0, 0, 0);
        for r in results {
            rows += r.tasks.len() as u64 + 1;
            for t in &r.tasks {
                *by.entry(t.pid).or_insert(0) += t.read_bytes + t.write_bytes;
            }
            un += r.unattributed_bytes;
            total += r
                .packages
                .iter()
                .map(|p| p.read_bytes + p.write_bytes)
                .sum::<u64>();
        }
        (by, un, total, rows)
    }

    /// Two tasks ping-ponging on each CPU every `slice` ns, a third now and then, some idle.
    fn switchy(ncpus: u32, slice: u64, weights: bool) -> Scenario {
        let mut sc = Scenario::busy(ncpus, 250, 2_000 * MS);
        sc.tasks = (0..3 * ncpus)
            .map(|i| SynthTask {
                pid: 2000 + i,
                tgid: 2000 + i / 3,
                comm: format!("pp{}", i % 5),
                cgroup: 1,
                read_bps: 1.0e8 * f64::from(1 + i % 7),
                write_bps: 0.5e8 * f64::from(1 + i % 4),
            })
            .collect();
        sc.schedule = (0..ncpus as usize)
            .map(|c| {
                let mut v = Vec::new();
                let mut t = 0;
                let mut k = 0usize;
                while t < sc.duration_ns {
                    let task = match k % 7 {
                        6 => None,
                        5 => Some(3 * c + 2),
                        j => Some(3 * c + j % 2),
                    };
                    v.push((t, task));
                    t += slice + (k as u64 * 7919) % (slice / 2);
                    k += 1;
                }
                v
            })
            .collect();
        sc.precise = true;
        sc.weights = weights;
        sc.dma_bps = vec![2.0e7];
        sc.readers = Readers::First;
        sc
    }

    /// The largest error of a task's bytes against the truth, over the package total.
    fn max_error(
        by: &std::collections::BTreeMap<u32, u64>,
        sc: &Scenario,
        truth: &crate::simulator::Truth,
        total: f64,
    ) -> f64 {
        sc.tasks
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let got = by.get(&t.pid).copied().unwrap_or(0) as f64;
                (got - truth.task_read[i] - truth.task_write[i]).abs() / total
            })
            .fold(0.0, f64::max)
    }

    /// Both streams of `sc` conserve the package's traffic, and the aggregated one is as
    /// accurate as the one with a record per switch (its largest error against the truth
    /// within 0.005 of the total of theirs), from far fewer records.
    fn compare(sc: &Scenario, fewer: u64) {
        let (precise, recs, _, truth) = attribute(sc, false);
        let (aggregated, _, aggs, _) = attribute(sc, true);
        let (pa, ua, ta, ra) = per_task(&precise);
        let (pb, ub, tb, rb) = per_task(&aggregated);
        // Conservation: attributed + unattributed = the package total (up to each row's
        // rounding to whole counts of 64 bytes, read and write).
        for (how, by, un, total, rows) in [
            ("per switch", &pa, ua, ta, ra),
            ("aggregated", &pb, ub, tb, rb),
        ] {
            let attributed: u64 = by.values().sum();
            let diff = (attributed + un) as f64 - total as f64;
            eprintln!("{how}: attributed {attributed} + unattributed {un} vs total {total}");
            assert!(
                how == "per switch" || diff.abs() <= 128.0 * rows as f64,
                "{how}: {attributed} + {un} != {total}"
            );
        }
        assert_eq!(ta, tb, "the package totals are the same counters");
        let total = ta as f64;
        let ea = max_error(&pa, sc, &truth, total);
        let eb = max_error(&pb, sc, &truth, total);
        eprintln!(
            "largest error: per switch {ea:.4}, aggregated {eb:.4}; {recs} records, {aggs} aggregates"
        );
        assert!(eb <= ea + 0.005, "aggregated error {eb} vs per switch {ea}");
        assert!(aggs * fewer <= recs, "{aggs} aggregates for {recs} records");
    }

    #[test]
    fn aggregates_attribute_like_a_record_per_switch_with_weights() {
        compare(&switchy(4, 50_000, true), 10);
    }

    #[test]
    fn aggregates_attribute_like_a_record_per_switch_by_time() {
        compare(&switchy(4, 50_000, false), 10);
    }

    #[test]
    fn aggregates_of_slow_switches_and_idle_stretches() {
        // Slices longer than a tick (4 ms) and idle CPUs without ticks: long-slice periods.
        compare(&switchy(3, 9 * MS, true), 1);
    }

    #[test]
    fn a_full_accumulator_flushes_early_and_keeps_every_nanosecond() {
        let specs = Scenario::busy(1, 250, MS).specs();
        let mut agg = Aggregator::new(&specs, 250);
        let mut out = Vec::new();
        let mut rec = Record {
            nr_slots: 3,
            ..Record::default()
        };
        // Ten tasks in one tick period: the ninth flushes the first eight.
        for k in 0..=10u32 {
            rec.t_ns = 1_000 + u64::from(k) * 100;
            rec.pid = 100 + k;
            rec.kind = imc_common::KIND_SWITCH;
            rec.slots[2].value = u64::from(k) * 10;
            agg.push(&rec, &mut out);
        }
        assert_eq!(out.len(), AGG_TASKS);
        rec.kind = KIND_TICK;
        rec.t_ns = 3_000;
        agg.push(&rec, &mut out);
        let on: u64 = out.iter().map(|r| r.on_ns).sum();
        assert_eq!(on, 3_000 - 1_000);
        let w: u64 = out.iter().map(|r| r.slots[2].value).sum();
        assert_eq!(w, 100);
        assert!(out.iter().all(|r| r.kind == KIND_AGGREGATE));
        // The early flush ends where its last task stopped; the next period starts there.
        assert_eq!(out[0].t_ns, 1_800);
        assert_eq!(out[AGG_TASKS].t0_ns, 1_800);
    }

    /// A record of `kind` at `t` ms of task `pid`, its CPU slot (2) at `weight`; `pkg`: the
    /// package slots (0, 1) were read, else they failed (not this CPU's turn to read them).
    fn at(kind: u8, t_ms: u64, pid: u32, weight: u64, pkg: bool) -> Record {
        let mut r = Record {
            nr_slots: 3,
            kind,
            t_ns: t_ms * MS,
            pid,
            failed_mask: if pkg { 0 } else { 0b011 },
            ..Record::default()
        };
        r.slots[2].value = weight;
        r
    }

    fn three_slots() -> Vec<SlotSpec> {
        let specs = Scenario::busy(1, 250, MS).specs();
        let scopes: Vec<SlotScope> = specs.iter().map(|s| s.scope).collect();
        assert_eq!(
            scopes,
            [SlotScope::Package, SlotScope::Package, SlotScope::Cpu]
        );
        specs
    }

    #[test]
    fn timer_firings_within_a_tick_period_of_a_flush_flush_nothing_unless_a_read_is_due() {
        use imc_common::KIND_SWITCH;
        let mut agg = Aggregator::new(&three_slots(), 250);
        let mut out = Vec::new();
        agg.push(&at(KIND_SWITCH, 1, 7, 0, false), &mut out);
        agg.push(&at(KIND_TICK, 5, 7, 40, false), &mut out);
        assert_eq!(out.len(), 1, "the first tick flushes");
        // Another hrtimer 1 ms later, the package not due: the slice goes on.
        agg.push(&at(KIND_TICK, 6, 7, 50, false), &mut out);
        assert_eq!(out.len(), 1);
        // The next tick flushes the whole period since the last flush.
        agg.push(&at(KIND_TICK, 9, 7, 80, false), &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(
            (out[1].t0_ns, out[1].t_ns, out[1].on_ns),
            (5 * MS, 9 * MS, 4 * MS)
        );
        assert_eq!(out[1].slots[2].value, 40);
        // Soon after, but the package read was due: it flushes, carrying the readings.
        agg.push(&at(KIND_TICK, 10, 7, 90, true), &mut out);
        assert_eq!(out.len(), 3);
        assert_eq!(out[2].failed_mask & 0b011, 0, "{:?}", out[2]);
    }

    #[test]
    fn an_idle_aggregate_that_counted_nothing_is_left_out() {
        use imc_common::KIND_SWITCH;
        let mut agg = Aggregator::new(&three_slots(), 250);
        let mut out = Vec::new();
        agg.push(&at(KIND_SWITCH, 1, 0, 0, false), &mut out);
        // Idle until 2 ms (nothing counted), task 7 until 5 ms.
        agg.push(&at(KIND_SWITCH, 2, 0, 0, false), &mut out);
        agg.push(&at(KIND_TICK, 5, 7, 30, false), &mut out);
        let pids: Vec<u32> = out.iter().map(|r| r.pid).collect();
        assert_eq!(pids, [7]);
        assert_eq!(
            out[0].on_ns,
            3 * MS,
            "idle time is the period less the tasks'"
        );
        // Idle counted something (an interrupt's misses): it stays.
        agg.push(&at(KIND_SWITCH, 6, 7, 35, false), &mut out);
        agg.push(&at(KIND_TICK, 9, 0, 36, false), &mut out);
        let pids: Vec<u32> = out[1..].iter().map(|r| r.pid).collect();
        assert_eq!(pids, [7, 0]);
        // Idle alone and counting nothing, but the flush carries the package readings.
        agg.push(&at(KIND_TICK, 13, 0, 36, true), &mut out);
        assert_eq!(out.len(), 4);
        assert_eq!((out[3].pid, out[3].failed_mask & 0b011), (0, 0));
    }

    #[test]
    fn a_slice_crosses_an_interval_end_strictly_inside_it() {
        // Ends at 10, 20, 30 … (origin 0, period 10).
        assert!(crosses_interval_end(0, 10, 5, 15));
        assert!(crosses_interval_end(0, 10, 19, 21));
        assert!(
            !crosses_interval_end(0, 10, 5, 10),
            "ending on an end is inside"
        );
        assert!(
            !crosses_interval_end(0, 10, 10, 20),
            "from one end to the next"
        );
        assert!(!crosses_interval_end(0, 10, 11, 19));
        assert!(crosses_interval_end(0, 10, 5, 35), "across several");
        // Before the origin: the first end is one period after it.
        assert!(!crosses_interval_end(100, 10, 50, 110));
        assert!(crosses_interval_end(100, 10, 50, 111));
        // No clock yet.
        assert!(!crosses_interval_end(0, 0, 5, 1_000));
    }

    #[test]
    fn the_next_interval_end_is_the_first_strictly_after_a_time() {
        use imc_common::next_interval_end;
        assert_eq!(next_interval_end(0, 10, 5), 10);
        assert_eq!(
            next_interval_end(0, 10, 10),
            20,
            "an end is its interval's own"
        );
        assert_eq!(next_interval_end(0, 10, 0), 10);
        assert_eq!(
            next_interval_end(100, 10, 50),
            110,
            "one period after the origin"
        );
        assert_eq!(next_interval_end(0, 0, 5), u64::MAX, "no clock: no end");
    }

    #[test]
    fn a_slice_across_an_interval_end_is_a_period_of_its_own() {
        use imc_common::KIND_SWITCH;
        // Task 7 until 2 ms, then task 8 until the tick at 4 ms; an interval ends at 3 ms.
        let run = |agg: Aggregator| {
            let mut agg = agg;
            let mut out = Vec::new();
            agg.push(&at(KIND_SWITCH, 1, 0, 0, false), &mut out);
            agg.push(&at(KIND_TICK, 1, 7, 0, false), &mut out);
            agg.push(&at(KIND_SWITCH, 2, 7, 10, false), &mut out);
            agg.push(&at(KIND_TICK, 4, 8, 50, true), &mut out);
            out.iter()
                .map(|r| (r.pid, r.t0_ns / MS, r.t_ns / MS, r.slots[2].value))
                .collect::<Vec<_>>()
        };
        let clock = |a: Aggregator| a.interval_clock(0, 3 * MS);
        // Without the clock one period holds both tasks, across the end.
        let blind = run(Aggregator::new(&three_slots(), 250));
        assert_eq!(blind.last().map(|r| (r.1, r.2)), Some((1, 4)), "{blind:?}");
        // With it, task 7's period ends where its slice did, before the end, and task 8's slice
        // across the end is alone: only its own counts are split by time.
        let seen = run(clock(Aggregator::new(&three_slots(), 250)));
        let tail: Vec<_> = seen.iter().filter(|r| r.1 >= 1).copied().collect();
        assert_eq!(tail, [(7, 1, 2, 10), (8, 2, 4, 40)], "{seen:?}");
    }

    /// Each interval's per-task counts of the CPU slot (the weight, as a stand-in event is
    /// counted: charged to the task that ran, no package traffic spread) from an aggregated
    /// stream against those of the per-switch stream, over the interval's total count: the
    /// largest difference.
    fn interval_gap(sc: &Scenario, clock: bool) -> f64 {
        // Interval ends between ticks (a tick period is 4 ms), as they fall on a real machine.
        let every = 98_700_000;
        let (precise, ..) = attribute_with(sc, false, every, false);
        let (aggregated, ..) = attribute_with(sc, true, every, clock);
        assert_eq!(precise.len(), aggregated.len());
        let specs = sc.specs();
        let cpu_slot = specs
            .iter()
            .position(|s| s.scope == SlotScope::Cpu)
            .expect("a CPU slot");
        let event = &specs[cpu_slot].event;
        let counts = |r: &IntervalResult| -> std::collections::BTreeMap<u32, f64> {
            r.tasks
                .iter()
                .map(|t| (t.pid, t.values.get(event).copied().unwrap_or(0.0)))
                .collect()
        };
        let mut worst = 0.0f64;
        let mut compared = 0;
        // Not the run's last interval: the aggregator's open periods are never flushed there.
        let closed = precise.len() - 1;
        for (p, a) in precise.iter().zip(&aggregated).take(closed) {
            let (cp, ca) = (counts(p), counts(a));
            let total: f64 = cp.values().sum();
            compared += 1;
            for (pid, n) in &cp {
                let other = ca.get(pid).copied().unwrap_or(0.0);
                worst = worst.max((n - other).abs() / total);
            }
        }
        assert!(compared >= 20, "{compared} intervals counted {event}");
        worst
    }

    #[test]
    fn with_the_interval_clock_aggregates_place_each_task_in_its_interval() {
        // Slices of 1–1.5 ms: a tick period (4 ms) holds several tasks of different rates, and
        // a period across an interval end would spread them all over both intervals.
        let sc = switchy(2, MS, true);
        let blind = interval_gap(&sc, false);
        let seen = interval_gap(&sc, true);
        eprintln!(
            "largest per-interval gap to per-switch records: blind {blind:.4}, clock {seen:.4}"
        );
        assert!(seen <= 0.002, "with the clock: {seen}");
        assert!(
            seen < blind,
            "the clock narrows the gap ({blind} without it)"
        );
    }
}

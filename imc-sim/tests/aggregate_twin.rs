//! The aggregator twin (imc's `sampler::aggregate_twin`) against the simulator's per-switch
//! stream of the same timeline: the same attribution from far fewer records.
use imc::attribution::Attributor;
use imc::model::result::IntervalResult;
use imc::model::{SlotScope, SlotSpec};
use imc::sampler::aggregate_twin::Aggregator;
use imc_common::{AGG_TASKS, KIND_AGGREGATE, KIND_TICK, Record, crosses_interval_end};
use imc_sim::{Readers, Scenario, SynthItem, SynthTask};

const MS: u64 = 1_000_000;

/// Every task's read and write bytes and the unattributed ones, per interval, from one
/// stream of `sc` either as is (a record per switch) or through the aggregator.
fn attribute(sc: &Scenario, aggregated: bool) -> (Vec<IntervalResult>, u64, u64, imc_sim::Truth) {
    attribute_with(sc, aggregated, 100 * MS, false)
}

/// [`attribute`] with intervals of `every` ns, the aggregator knowing their clock
/// (`clock`) or not.
fn attribute_with(
    sc: &Scenario,
    aggregated: bool,
    every: u64,
    clock: bool,
) -> (Vec<IntervalResult>, u64, u64, imc_sim::Truth) {
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
fn per_task(results: &[IntervalResult]) -> (std::collections::BTreeMap<u32, u64>, u64, u64, u64) {
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
    truth: &imc_sim::Truth,
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
    eprintln!("largest per-interval gap to per-switch records: blind {blind:.4}, clock {seen:.4}");
    assert!(seen <= 0.002, "with the clock: {seen}");
    assert!(
        seen < blind,
        "the clock narrows the gap ({blind} without it)"
    );
}

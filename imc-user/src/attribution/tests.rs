use super::*;
use crate::model::result::IntervalResult;
use crate::model::{Direction, Package};
use imc_common::{KIND_AGGREGATE, KIND_TICK, Record, SlotReading};

fn specs() -> Vec<SlotSpec> {
    vec![SlotSpec {
        event: "instructions".into(),
        scope: SlotScope::Cpu,
        role: SlotRole::Other,
        bytes_per_count: None,
        counter_bits: 64,
    }]
}

fn topo() -> Topology {
    topo_of(&[&[0]])
}

/// One package per list of CPUs, numbered from 0.
fn topo_of(packages: &[&[u32]]) -> Topology {
    Topology {
        packages: packages
            .iter()
            .zip(0..)
            .map(|(cpus, id)| Package {
                id,
                cpus: cpus.to_vec(),
            })
            .collect(),
        ..Topology::default()
    }
}

/// The read bytes charged to `pid` (0 without a row).
fn read_bytes(iv: &IntervalResult, pid: u32) -> u64 {
    iv.tasks
        .iter()
        .find(|t| t.pid == pid)
        .map_or(0, |t| t.read_bytes)
}

/// A tick of `pid` on `cpu` reading `nslots` slots, all 0 until set.
fn tick(t: u64, cpu: u32, pid: u32, nslots: usize) -> Record {
    let mut r = rec(t, pid, Some(0));
    r.cpu = cpu;
    r.nr_slots = nslots as u8;
    r
}

fn rec(t: u64, pid: u32, value: Option<u64>) -> Record {
    let mut r = Record {
        t_ns: t,
        cgroup_id: 0,
        cpu: 0,
        pid,
        tgid: pid,
        kind: KIND_TICK,
        nr_slots: 1,
        failed_mask: u8::from(value.is_none()),
        flags: 0,
        comm: [0; 16],
        t0_ns: 0,
        on_ns: 0,
        slots: [SlotReading::default(); MAX_SLOTS],
    };
    r.slots[0].value = value.unwrap_or(0);
    r
}

fn values(iv: &IntervalResult) -> Vec<(u32, f64)> {
    iv.tasks
        .iter()
        .map(|t| (t.pid, t.values["instructions"]))
        .collect()
}

#[test]
fn wrap_and_multiplex_scaling() {
    let a = SlotReading {
        value: (1 << 48) - 10,
        enabled: 100,
        running: 50,
    };
    let b = SlotReading {
        value: 30,
        enabled: 300,
        running: 100,
    };
    // 40 counts in 50 ns of running out of 200 enabled: 160.
    assert_eq!(scaled_delta(&a, &b, width_mask(48), true), 160.0);
    assert_eq!(scaled_delta(&a, &b, width_mask(48), false), 40.0);
}

#[test]
fn failed_read_between_two_tasks_loses_the_delta() {
    let mut a = Attributor::new(&specs(), &topo(), "t");
    // A record's delta belongs to its task: (1000, 2000] is task 7's, (2000, 3000] task 8's.
    a.push_tick(&rec(1000, 7, Some(100)));
    a.push_tick(&rec(2000, 7, None)); // unreadable
    a.push_tick(&rec(3000, 8, Some(400))); // 300 since 1000, over two owners: dropped
    a.push_tick(&rec(4000, 8, Some(420))); // 20 to task 8
    assert_eq!(values(&a.close_interval(5000)), [(8, 20.0)]);
}

#[test]
fn failed_read_inside_one_tasks_run_keeps_the_real_delta() {
    let mut a = Attributor::new(&specs(), &topo(), "t");
    a.push_tick(&rec(1000, 7, Some(100)));
    a.push_tick(&rec(2000, 7, None));
    a.push_tick(&rec(3000, 7, Some(400))); // both readings are task 7's: 300 is exact
    assert_eq!(values(&a.close_interval(4000)), [(7, 300.0)]);
}

#[test]
fn an_overlapping_smaller_package_sum_is_skipped_not_wrapped() {
    // A package slot of summed 64-bit counts: a userspace reading dated after a tick's may
    // hold a smaller sum (its counters were read around the tick). It must not count as a
    // wrap of 2^64.
    let spec = SlotSpec {
        event: "read".into(),
        scope: SlotScope::Package,
        role: SlotRole::Traffic(crate::model::Direction::Read),
        bytes_per_count: Some(1.0),
        counter_bits: 64,
    };
    let mut a = Attributor::new(&[spec], &topo(), "test");
    for (t, v) in [(1_000, 100), (2_000, 200), (3_000, 150), (4_000, 300)] {
        a.push_package_read(0, 0, t, v);
    }
    let r = a.finish(5_000);
    assert_eq!(r.packages[0].read_bytes, 200);
}

/// A 64-bit slot; a package slot counts 64-byte lines.
fn slot(event: &str, scope: SlotScope, role: SlotRole) -> SlotSpec {
    SlotSpec {
        event: event.into(),
        scope,
        role,
        bytes_per_count: (scope == SlotScope::Package).then_some(64.0),
        counter_bits: 64,
    }
}

#[test]
fn remote_weights_charge_another_packages_traffic_to_the_task_that_made_it() {
    // Package 0 (CPU 0) runs pid 7, which reads package 1's memory at 3 lines/µs; package 1
    // (CPU 1) runs pid 8, which reads its own at 1 line/µs. Package 0's controller sees
    // nothing; package 1's sees both.
    let specs = [
        slot(
            "read",
            SlotScope::Package,
            SlotRole::Traffic(Direction::Read),
        ),
        slot(
            "local",
            SlotScope::Cpu,
            SlotRole::Weight(Some(Direction::Read)),
        ),
        slot(
            "remote",
            SlotScope::Cpu,
            SlotRole::RemoteWeight(Some(Direction::Read)),
        ),
    ];
    let topo = topo_of(&[&[0], &[1]]);
    for numa in [true, false] {
        let specs: Vec<SlotSpec> = specs
            .iter()
            .filter(|s| numa || !matches!(s.role, SlotRole::RemoteWeight(_)))
            .cloned()
            .collect();
        let mut a = Attributor::new(&specs, &topo, "t");
        for k in 0..=100u64 {
            let t = 1_000_000 + k * 1000;
            for (cpu, pid, local, remote, pkg) in [(0, 7, 0, 3 * k, 0), (1, 8, k, 0, 4 * k)] {
                let mut r = tick(t, cpu, pid, specs.len());
                r.slots[0].value = pkg;
                r.slots[1].value = local;
                r.slots[2].value = remote;
                a.push_tick(&r);
            }
        }
        let iv = a.finish(1_000_000 + 100 * 1000);
        let bytes = |pid| read_bytes(&iv, pid);
        if numa {
            assert_eq!((bytes(7), bytes(8)), (300 * 64, 100 * 64), "{iv:?}");
        } else {
            // Without remote weights, package 1's traffic is all its own CPU's task's.
            assert_eq!((bytes(7), bytes(8)), (0, 400 * 64), "{iv:?}");
        }
        assert_eq!(iv.unattributed_bytes, 0);
    }
}

#[test]
fn a_weight_that_did_not_run_falls_back_to_time_and_is_counted() {
    let specs = [
        slot(
            "read",
            SlotScope::Package,
            SlotRole::Traffic(Direction::Read),
        ),
        slot(
            "misses",
            SlotScope::Cpu,
            SlotRole::Weight(Some(Direction::Read)),
        ),
    ];
    let topo = topo_of(&[&[0, 1]]);
    for multiplexed_out in [false, true] {
        let mut a = Attributor::new(&specs, &topo, "t");
        for k in 0..=100u64 {
            let t = 1_000_000 + k * 1000;
            // CPU 0's task makes 3 of every 4 lines, CPU 1's one.
            for (cpu, pid, w) in [(0, 7, 3 * k), (1, 8, k)] {
                let mut r = tick(t, cpu, pid, 2);
                r.slots[0].value = 4 * k;
                r.slots[1] = SlotReading {
                    value: w,
                    enabled: t,
                    // CPU 1's counter is scheduled out the whole time.
                    running: if multiplexed_out && cpu == 1 { 0 } else { t },
                };
                a.push_tick(&r);
            }
        }
        let iv = a.finish(1_000_000 + 100 * 1000);
        let bytes = |pid| read_bytes(&iv, pid);
        if multiplexed_out {
            assert!(iv.weight_fallbacks > 0, "{iv:?}");
            assert_eq!(
                (bytes(7), bytes(8)),
                (200 * 64, 200 * 64),
                "by time: {iv:?}"
            );
        } else {
            assert_eq!(iv.weight_fallbacks, 0);
            assert_eq!(
                (bytes(7), bytes(8)),
                (300 * 64, 100 * 64),
                "by weight: {iv:?}"
            );
        }
    }
}

#[test]
fn first_record_is_a_baseline_and_idle_is_nobodys() {
    let mut a = Attributor::new(&specs(), &topo(), "t");
    a.push_tick(&rec(1000, 7, Some(1_000_000)));
    a.push_tick(&rec(2000, 0, Some(1_000_100)));
    a.push_tick(&rec(3000, 7, Some(1_000_300)));
    let iv = a.close_interval(4000);
    assert_eq!(values(&iv), [(7, 200.0)]);
    assert_eq!(iv.t_start_ns, 1000);
}

const MS: u64 = 1_000_000;

/// A task's counts over a span that crosses the interval's end: the part before the end
/// by time is the interval's, the rest the next's; whole where the end was not said.
#[test]
fn a_span_across_the_interval_end_is_split_by_time() {
    // A record per tick at 4 ms (HZ=250), pid 7 counting 100 per tick; the end at 10 ms
    // falls in the tick 8..12 ms.
    for split in [true, false] {
        let mut a = Attributor::new(&specs(), &topo(), "t").tick_hz(250);
        if split {
            a.split_at(10 * MS);
        }
        for k in 0..=3u64 {
            a.push_tick(&rec(k * 4 * MS, 7, Some(k * 100)));
        }
        let first = a.close_interval(10 * MS);
        a.push_tick(&rec(16 * MS, 7, Some(400)));
        let second = a.finish(16 * MS);
        let (f, s) = (values(&first), values(&second));
        let placed = |iv: &IntervalResult| -> Vec<f64> {
            iv.tasks
                .iter()
                .map(|t| t.placed_by_time.values().sum())
                .collect()
        };
        if split {
            assert_eq!(f, [(7, 250.0)], "8..10 ms of 8..12 ms is half a tick's");
            assert_eq!(s, [(7, 150.0)]);
            // The tick's 100 split in halves: up to 50 of either part may be the other's.
            assert_eq!((placed(&first), placed(&second)), (vec![50.0], vec![50.0]));
        } else {
            assert_eq!((placed(&first), placed(&second)), (vec![0.0], vec![0.0]));
            assert_eq!(f, [(7, 300.0)], "counted where its span ends");
            assert_eq!(s, [(7, 100.0)]);
        }
        // Nothing lost or counted twice, and each interval conserved.
        for iv in [&first, &second] {
            let tasks: f64 = values(iv).iter().map(|v| v.1).sum();
            let p = &iv.packages[0];
            assert_eq!(p.slot_counts[0], tasks + p.unattributed_counts[0], "{iv:?}");
        }
    }
}

/// A CPU the host took away across an end reports after the interval was delivered: its
/// counts, whose span began before that end, are charged where they are read and said to be
/// late from the span's start, as a silent tick's and a late aggregate's are. Counts read in
/// time are not late.
#[test]
fn a_cpu_reporting_after_its_interval_was_closed_is_charged_late_from_its_span_start() {
    let late = |iv: &IntervalResult| -> Vec<(u32, f64, u64)> {
        iv.tasks
            .iter()
            .flat_map(|t| t.placed_late.values().map(|&(v, s)| (t.pid, v, s)))
            .collect()
    };
    // Ticks of pid 7 every 4 ms up to 96 ms; then nothing until 150 ms (the host's stall).
    let mut a = Attributor::new(&specs(), &topo(), "t").tick_hz(250);
    a.split_at(100 * MS);
    for k in 0..=24u64 {
        a.push_tick(&rec(k * 4 * MS, 7, Some(k * 10)));
    }
    let first = a.close_interval(100 * MS);
    assert_eq!(values(&first), [(7, 240.0)]);
    assert_eq!(late(&first), []);
    a.split_at(200 * MS);
    a.push_tick(&rec(150 * MS, 7, Some(378)));
    a.push_tick(&rec(154 * MS, 7, Some(388)));
    let second = a.close_interval(200 * MS);
    assert_eq!(values(&second), [(7, 148.0)]);
    assert_eq!(late(&second), [(7, 138.0, 96 * MS)]);
    // Its placed-by-time split is for counts read across an end in time: none here.
    assert!(second.tasks[0].placed_by_time.is_empty());

    // An aggregate whose flush period began before the closed end is late the same way.
    let mut a = Attributor::new(&specs(), &topo(), "t").tick_hz(250);
    let agg = |t0: u64, t: u64, v: u64| {
        let mut r = rec(t, 7, Some(v));
        r.kind = KIND_AGGREGATE;
        (r.t0_ns, r.on_ns) = (t0, t - t0);
        r
    };
    a.split_at(100 * MS);
    a.push_tick(&agg(92 * MS, 96 * MS, 40));
    let first = a.close_interval(100 * MS);
    a.split_at(200 * MS);
    a.push_tick(&agg(96 * MS, 150 * MS, 138));
    a.push_tick(&agg(150 * MS, 154 * MS, 10));
    let second = a.close_interval(200 * MS);
    assert_eq!((values(&first), late(&first)), (vec![(7, 40.0)], vec![]));
    assert_eq!(values(&second), [(7, 148.0)]);
    assert_eq!(late(&second), [(7, 138.0, 96 * MS)]);
}

/// An aggregate of a flush period `t0 .. t` across the end is split by its period's time,
/// and the run's last interval holds everything even when an end was said.
#[test]
fn an_aggregate_across_the_end_is_split_and_the_last_interval_is_whole() {
    let agg = |t0: u64, t: u64, pid: u32, v: u64| {
        let mut r = rec(t, pid, Some(v));
        r.kind = KIND_AGGREGATE;
        r.t0_ns = t0;
        r.on_ns = (t - t0) / 2;
        r
    };
    let mut a = Attributor::new(&specs(), &topo(), "t").tick_hz(250);
    a.split_at(10 * MS);
    a.push_tick(&agg(4 * MS, 8 * MS, 7, 40));
    a.push_tick(&agg(8 * MS, 12 * MS, 7, 80));
    a.push_tick(&agg(8 * MS, 12 * MS, 0, 8));
    let first = a.close_interval(10 * MS);
    assert_eq!(values(&first), [(7, 80.0)]);
    // It starts where its first counts do: the first period's start, not its record.
    assert_eq!(first.t_start_ns, 4 * MS);
    assert_eq!(first.packages[0].unattributed_counts[0], 4.0);
    assert_eq!(first.packages[0].slot_counts[0], 84.0);
    a.split_at(20 * MS);
    a.push_tick(&agg(12 * MS, 16 * MS, 7, 20));
    // The run ends before the next end: its last interval takes what is left.
    let last = a.finish(16 * MS);
    assert_eq!(values(&last), [(7, 60.0)]);
    assert_eq!(last.packages[0].slot_counts[0], 64.0);
}

/// A package counter's span across the point it is spread to: its reading interpolated
/// there, the part before spread now over the tasks that ran, the rest in the next
/// interval.
#[test]
fn a_package_span_across_the_end_is_split_by_time() {
    let specs = [slot(
        "read",
        SlotScope::Package,
        SlotRole::Traffic(Direction::Read),
    )];
    let mut a = Attributor::new(&specs, &topo(), "t").tick_hz(250);
    // pid 7 runs throughout (ticks every 2 ms); the package is read at 0 and 12 ms only.
    for k in 0..=6u64 {
        a.push_tick(&rec(k * 2 * MS, 7, None));
    }
    a.push_package_read(0, 0, 0, 1000);
    a.push_package_read(0, 0, 12 * MS, 2200);
    let first = a.close_interval(9 * MS);
    let bytes = |iv: &IntervalResult| iv.tasks.iter().map(|t| t.read_bytes).sum::<u64>();
    assert_eq!(bytes(&first), 900 * 64, "{first:?}");
    assert_eq!(first.packages[0].read_bytes, 900 * 64);
    let last = a.finish(12 * MS);
    assert_eq!(bytes(&last), 300 * 64, "{last:?}");
    assert_eq!(last.packages[0].read_bytes, 300 * 64);
}

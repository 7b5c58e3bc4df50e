use super::*;
use crate::model::result::PackageRow;

fn slot(event: &str, channel: &str, direction: Direction, bpc: Option<f64>) -> Option<SlotInfo> {
    Some(SlotInfo {
        event: event.into(),
        channel: channel.into(),
        direction,
        bytes_per_count: bpc,
        tier: crate::model::Tier::of_key(event),
    })
}

fn meta(slots: Vec<Option<SlotInfo>>, max_processes: usize) -> ExportMeta {
    ExportMeta {
        weighting: "traffic".into(),
        version: "0.1.0".into(),
        backend: "intel-uncore-imc".into(),
        source: "intel-uncore-imc".into(),
        tick: "cpu-clock:1000Hz".into(),
        slots,
        max_processes,
        max_cgroups: 100,
        peaks: Vec::new(),
        stalls: false,
        latency_read: false,
        latency_write: false,
    }
}

/// Two channels of one controller, read and write: slots 0..4; slot 4 is a weight.
fn imc_meta(max_processes: usize) -> ExportMeta {
    meta(
        vec![
            slot(
                "uncore_imc_0/read",
                "uncore_imc_0",
                Direction::Read,
                Some(64.0),
            ),
            slot(
                "uncore_imc_0/write",
                "uncore_imc_0",
                Direction::Write,
                Some(64.0),
            ),
            slot(
                "uncore_imc_1/read",
                "uncore_imc_1",
                Direction::Read,
                Some(64.0),
            ),
            slot(
                "uncore_imc_1/write",
                "uncore_imc_1",
                Direction::Write,
                Some(64.0),
            ),
            None,
        ],
        max_processes,
    )
}

fn task(pid: u32, tgid: u32, comm: &str, cgroup: u64, read: u64, write: u64) -> TaskRow {
    TaskRow {
        pid,
        tgid,
        comm: comm.into(),
        cgroup,
        read_bytes: read,
        write_bytes: write,
        ..TaskRow::default()
    }
}

fn faults(pid: u32, comm: &str, cgroup: u64, n: f64) -> TaskRow {
    TaskRow {
        pid,
        tgid: pid,
        comm: comm.into(),
        cgroup,
        values: [("page-faults".to_string(), n)].into(),
        ..TaskRow::default()
    }
}

/// (name, labels as written, value) of every sample line.
fn samples(text: &str) -> Vec<(String, String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            (name.to_string(), labels.to_string(), value.parse().unwrap())
        })
        .collect()
}

fn value(text: &str, name: &str, labels: &str) -> Option<f64> {
    samples(text)
        .into_iter()
        .find(|(n, l, _)| n == name && l == labels)
        .map(|(_, _, v)| v)
}

fn count(text: &str, name: &str) -> usize {
    samples(text).iter().filter(|(n, _, _)| n == name).count()
}

fn imc_interval() -> IntervalResult {
    IntervalResult {
        source: "intel-uncore-imc".into(),
        packages: vec![PackageRow {
            id: 0,
            read_bytes: (100 + 300) * 64,
            write_bytes: (10 + 30) * 64,
            slot_counts: vec![100.0, 10.0, 300.0, 30.0, 7.0],
            unattributed_counts: vec![5.0, 1.0, 20.0, 0.0, 0.0],
            ..PackageRow::default()
        }],
        tasks: vec![
            task(40, 40, "stream", 7, 9000, 1000),
            task(41, 40, "stream-worker", 7, 1000, 0),
            task(50, 50, "dd", 9, 2000, 640),
        ],
        unattributed_bytes: 26 * 64,
        lost_samples: 3,
        ..IntervalResult::default()
    }
}

#[test]
fn byte_families_carry_package_channel_and_direction() {
    let mut ex = Exporter::new(imc_meta(20));
    ex.add_interval(&imc_interval());
    let t = ex.encode();
    let dram = "imc_dram_bytes_total";
    let v = |l: &str| value(&t, dram, l);
    assert_eq!(
        v(r#"package="0",channel="uncore_imc_0",direction="read",tier="dram""#),
        Some(6400.0)
    );
    assert_eq!(
        v(r#"package="0",channel="uncore_imc_0",direction="write",tier="dram""#),
        Some(640.0)
    );
    assert_eq!(
        v(r#"package="0",channel="uncore_imc_1",direction="read",tier="dram""#),
        Some(19200.0)
    );
    assert_eq!(count(&t, dram), 4, "the weight slot is not traffic:\n{t}");
    // Unattributed: summed over the channels per direction.
    let u = "imc_unattributed_dram_bytes_total";
    assert_eq!(
        value(&t, u, r#"package="0",direction="read",tier="dram""#),
        Some(25.0 * 64.0)
    );
    assert_eq!(
        value(&t, u, r#"package="0",direction="write",tier="dram""#),
        Some(64.0)
    );
    // A process is its threads together, named by its main thread.
    let p = "imc_process_dram_bytes_total";
    let pl = r#"pid="40",comm="stream",cgroup="7",direction="read""#;
    assert_eq!(value(&t, p, pl), Some(10000.0));
    assert_eq!(
        value(
            &t,
            "imc_cgroup_dram_bytes_total",
            r#"cgroup="9",direction="write""#
        ),
        Some(640.0)
    );
    assert_eq!(value(&t, "imc_lost_records_total", ""), Some(3.0));
    assert_eq!(
        value(
            &t,
            "imc_info",
            r#"version="0.1.0",backend="intel-uncore-imc",source="intel-uncore-imc",tick="cpu-clock:1000Hz",weighting="traffic""#
        ),
        Some(1.0)
    );
    // No counts family has a sample when every counter has a byte size.
    assert!(
        !samples(&t)
            .iter()
            .any(|(n, _, _)| n.ends_with("_events_total")),
        "{t}"
    );
    assert!(t.ends_with("# EOF\n"));

    // Cumulative: a second interval adds to every counter.
    ex.add_interval(&imc_interval());
    let t = ex.encode();
    assert_eq!(value(&t, p, pl), Some(20000.0));
    assert_eq!(
        value(
            &t,
            dram,
            r#"package="0",channel="uncore_imc_0",direction="read",tier="dram""#
        ),
        Some(12800.0)
    );
    assert_eq!(value(&t, "imc_intervals_total", ""), Some(2.0));
}

#[test]
fn a_stand_in_is_counted_in_events_never_bytes() {
    let m = meta(
        vec![slot("page-faults", "software", Direction::Total, None)],
        20,
    );
    let mut ex = Exporter::new(m);
    let iv = IntervalResult {
        source: "proxy:page-faults".into(),
        packages: vec![PackageRow {
            id: 0,
            slot_counts: vec![1500.0],
            unattributed_counts: vec![12.0],
            ..PackageRow::default()
        }],
        tasks: vec![faults(7, "cc1", 3, 1200.0), faults(8, "ld", 3, 288.0)],
        ..IntervalResult::default()
    };
    ex.add_interval(&iv);
    let t = ex.encode();
    assert!(
        !samples(&t).iter().any(|(n, _, _)| n.contains("bytes")),
        "{t}"
    );
    assert_eq!(
        value(
            &t,
            "imc_dram_events_total",
            r#"package="0",channel="software",direction="total",event="page-faults",tier="dram""#
        ),
        Some(1500.0)
    );
    assert_eq!(
        value(
            &t,
            "imc_process_dram_events_total",
            r#"pid="7",comm="cc1",cgroup="3",direction="total",event="page-faults""#
        ),
        Some(1200.0)
    );
    assert_eq!(
        value(
            &t,
            "imc_cgroup_dram_events_total",
            r#"cgroup="3",direction="total",event="page-faults""#
        ),
        Some(1488.0)
    );
    assert_eq!(
        value(
            &t,
            "imc_unattributed_dram_events_total",
            r#"package="0",direction="total",event="page-faults",tier="dram""#
        ),
        Some(12.0)
    );
}

#[test]
fn only_the_top_processes_are_exported_and_dropouts_are_removed() {
    let m = meta(
        vec![slot("page-faults", "software", Direction::Total, None)],
        3,
    );
    let mut ex = Exporter::new(m);
    let steady = |n| faults(1, "steady", 1, n);
    // 200 intervals of 50 short-lived processes each, and one steady busy process.
    for i in 0..200u32 {
        let mut tasks = vec![steady(1000.0)];
        for j in 0..50u32 {
            tasks.push(faults(1000 + i * 50 + j, "short", 2, f64::from(1 + j)));
        }
        ex.add_interval(&IntervalResult {
            tasks,
            ..IntervalResult::default()
        });
        let t = ex.encode();
        assert!(count(&t, "imc_process_dram_events_total") <= 3, "{t}");
    }
    let t = ex.encode();
    assert_eq!(
        value(
            &t,
            "imc_process_dram_events_total",
            r#"pid="1",comm="steady",cgroup="1",direction="total",event="page-faults""#
        ),
        Some(200_000.0)
    );
    // The cgroup family keeps every process's traffic, exported or not.
    let per_interval: f64 = (1..=50).sum::<u32>().into();
    assert_eq!(
        value(
            &t,
            "imc_cgroup_dram_events_total",
            r#"cgroup="2",direction="total",event="page-faults""#
        ),
        Some(200.0 * per_interval)
    );
    // State is bounded: idle processes are forgotten.
    assert!(
        ex.tracked_processes() <= MAX_TRACKED,
        "{}",
        ex.tracked_processes()
    );

    // When the steady process stops, newer busy ones take its place and its series goes.
    for i in 0..20u32 {
        ex.add_interval(&IntervalResult {
            tasks: (0..4)
                .map(|j| faults(90_000 + i * 4 + j, "new", 2, 5000.0))
                .collect(),
            ..IntervalResult::default()
        });
    }
    let t = ex.encode();
    assert!(!t.contains(r#"comm="steady""#), "{t}");
    assert_eq!(count(&t, "imc_process_dram_events_total"), 3);
}

#[test]
fn cgroups_without_traffic_for_long_lose_their_series() {
    let m = meta(
        vec![slot("page-faults", "software", Direction::Total, None)],
        5,
    );
    let mut ex = Exporter::new(m);
    ex.add_interval(&IntervalResult {
        tasks: vec![faults(5, "a", 11, 100.0), faults(6, "b", 12, 10.0)],
        ..IntervalResult::default()
    });
    let series = |c: u64| format!(r#"cgroup="{c}",direction="total",event="page-faults""#);
    for _ in 1..FORGET_AFTER {
        ex.add_interval(&IntervalResult {
            tasks: vec![faults(5, "a", 11, 1.0)],
            ..IntervalResult::default()
        });
    }
    let t = ex.encode();
    assert_eq!(
        value(&t, "imc_cgroup_dram_events_total", &series(12)),
        Some(10.0)
    );
    ex.add_interval(&IntervalResult {
        tasks: vec![faults(5, "a", 11, 1.0)],
        ..IntervalResult::default()
    });
    let t = ex.encode();
    assert_eq!(
        value(&t, "imc_cgroup_dram_events_total", &series(12)),
        None,
        "{t}"
    );
    assert_eq!(
        value(&t, "imc_cgroup_dram_events_total", &series(11)),
        Some(100.0 + FORGET_AFTER as f64)
    );
    assert_eq!(ex.cgroup_series_count(), 1);
}

#[test]
fn a_returning_process_resumes_from_its_total() {
    let m = meta(
        vec![slot("page-faults", "software", Direction::Total, None)],
        1,
    );
    let mut ex = Exporter::new(m);
    let series = r#"pid="5",comm="a",cgroup="1",direction="total",event="page-faults""#;
    ex.add_interval(&IntervalResult {
        tasks: vec![faults(5, "a", 1, 100.0)],
        ..IntervalResult::default()
    });
    ex.add_interval(&IntervalResult {
        tasks: vec![faults(5, "a", 1, 10.0), faults(6, "b", 1, 1000.0)],
        ..IntervalResult::default()
    });
    let t = ex.encode();
    assert_eq!(value(&t, "imc_process_dram_events_total", series), None);
    for _ in 0..5 {
        ex.add_interval(&IntervalResult {
            tasks: vec![faults(5, "a", 1, 2000.0)],
            ..IntervalResult::default()
        });
    }
    let t = ex.encode();
    assert_eq!(
        value(&t, "imc_process_dram_events_total", series),
        Some(10_110.0)
    );
}

#[test]
fn classic_text_names_counters_with_their_suffix() {
    let mut ex = Exporter::new(imc_meta(20));
    ex.add_interval(&imc_interval());
    let om = ex.encode();
    let classic = to_classic_text(&om);
    assert!(
        classic.contains("# TYPE imc_dram_bytes_total counter\n"),
        "{classic}"
    );
    assert!(
        classic.contains("# HELP imc_dram_bytes_total "),
        "{classic}"
    );
    assert!(classic.contains("# TYPE imc_info gauge\n"), "{classic}");
    assert!(classic.contains("# TYPE imc_scrape_duration_seconds histogram\n"));
    assert!(!classic.contains("# EOF"));
    // The samples are the same.
    assert_eq!(samples(&om), samples(&classic));
    assert!(wants_openmetrics(Some(
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    )));
    assert!(!wants_openmetrics(Some("*/*")));
    assert!(!wants_openmetrics(None));
}

#[test]
fn health_counts_read_errors_and_durations() {
    let ex = Exporter::new(imc_meta(20));
    ex.add_read_errors(4);
    ex.observe_drain(Duration::from_micros(300));
    ex.observe_scrape(Duration::from_micros(50));
    let t = ex.encode();
    assert_eq!(value(&t, "imc_read_errors_total", ""), Some(4.0));
    assert_eq!(value(&t, "imc_drain_duration_seconds_count", ""), Some(1.0));
    assert_eq!(
        value(&t, "imc_scrape_duration_seconds_count", ""),
        Some(1.0)
    );
}

#[test]
fn a_process_is_one_series_whichever_threads_ran() {
    let m = meta(
        vec![slot("page-faults", "software", Direction::Total, None)],
        5,
    );
    let mut ex = Exporter::new(m);
    let thread = |pid, comm: &str, n: f64| TaskRow {
        tgid: 70,
        share: n / 1000.0,
        ..faults(pid, comm, 1, n)
    };
    // The main thread has not run: named after the busiest thread seen first.
    ex.add_interval(&IntervalResult {
        tasks: vec![thread(71, "worker 1", 10.0), thread(72, "worker 2", 30.0)],
        ..IntervalResult::default()
    });
    ex.add_interval(&IntervalResult {
        tasks: vec![thread(71, "worker 1", 5.0)],
        ..IntervalResult::default()
    });
    let t = ex.encode();
    assert_eq!(count(&t, "imc_process_dram_events_total"), 1, "{t}");
    let series = |comm: &str| {
        format!(r#"pid="70",comm="{comm}",cgroup="1",direction="total",event="page-faults""#)
    };
    assert_eq!(
        value(&t, "imc_process_dram_events_total", &series("worker 2")),
        Some(45.0)
    );
    // Its main thread runs (after an exec, under a new name): the series moves, total kept.
    ex.add_interval(&IntervalResult {
        tasks: vec![thread(70, "server", 100.0)],
        ..IntervalResult::default()
    });
    let t = ex.encode();
    assert_eq!(count(&t, "imc_process_dram_events_total"), 1, "{t}");
    assert_eq!(
        value(&t, "imc_process_dram_events_total", &series("server")),
        Some(145.0)
    );
}

#[test]
fn label_values_are_escaped() {
    let m = meta(
        vec![slot("page-faults", "software", Direction::Total, None)],
        5,
    );
    let mut ex = Exporter::new(m);
    ex.add_interval(&IntervalResult {
        tasks: vec![faults(9, "we\"ird\\name", 1, 10.0)],
        ..IntervalResult::default()
    });
    let t = ex.encode();
    assert!(t.contains(r#"comm="we\"ird\\name""#), "{t}");
}

#[test]
fn cgroups_are_labelled_by_their_path_and_by_id_where_it_did_not_resolve() {
    let mut ex = Exporter::new(imc_meta(20));
    let mut iv = imc_interval();
    let pod = "kubepods-pod0a1b2c3d_0000_4000_8000_00000000000a.slice";
    let path = format!(
        "/kubepods.slice/{pod}/cri-containerd-{}.scope",
        "a".repeat(64)
    );
    for t in iv.tasks.iter_mut().filter(|t| t.cgroup == 7) {
        t.set_cgroup_names(&crate::discovery::cgroup::names_of_path(&path));
    }
    ex.add_interval(&iv);
    let t = ex.encode();
    let c = "imc_cgroup_dram_bytes_total";
    // Both threads of cgroup 7 under its path; cgroup 9 (not resolved) under its id.
    assert_eq!(
        value(&t, c, &format!(r#"cgroup="{path}",direction="read""#)),
        Some(10000.0),
        "{t}"
    );
    assert_eq!(value(&t, c, r#"cgroup="9",direction="write""#), Some(640.0));
    assert!(!t.contains(r#"cgroup="7""#), "{t}");
    let p = "imc_process_dram_bytes_total";
    assert_eq!(
        value(
            &t,
            p,
            &format!(r#"pid="40",comm="stream",cgroup="{path}",direction="read""#)
        ),
        Some(10000.0)
    );
    // One series per cgroup and direction, as with ids.
    assert_eq!(count(&t, c), 4);
    assert_eq!(ex.cgroup_series_count(), 4);
}

#[test]
fn cgroup_series_are_bounded_by_count_keeping_the_busiest() {
    // Series stay bounded by count, not only by time: 550 short-lived cgroups must not give
    // 416 series.
    let mut m = meta(
        vec![slot("page-faults", "software", Direction::Total, None)],
        5,
    );
    m.max_cgroups = 5;
    let mut ex = Exporter::new(m);
    let busy = r#"cgroup="1",direction="total",event="page-faults""#;
    for i in 0..550u32 {
        // One busy cgroup throughout, and a new short-lived one each interval.
        ex.add_interval(&IntervalResult {
            tasks: vec![
                faults(1, "db", 1, 10_000.0),
                faults(100 + i, "job", 1000 + u64::from(i), 50.0),
            ],
            ..IntervalResult::default()
        });
        let t = ex.encode();
        assert!(
            count(&t, "imc_cgroup_dram_events_total") <= 5,
            "interval {i}: {t}"
        );
        assert!(ex.cgroup_series_count() <= 5);
    }
    let t = ex.encode();
    assert_eq!(
        value(&t, "imc_cgroup_dram_events_total", busy),
        Some(5_500_000.0)
    );
    // The newest short-lived cgroups are the ones shown beside it.
    assert!(t.contains(r#"cgroup="1549""#), "{t}");
    assert!(!t.contains(r#"cgroup="1000""#), "{t}");
}

#[test]
fn the_peak_is_exported_per_package_only_where_known() {
    let t = Exporter::new(imc_meta(5)).encode();
    assert_eq!(count(&t, "imc_dram_peak_bytes_per_second"), 0, "{t}");
    let mut m = imc_meta(5);
    m.peaks = vec![(0, 2.56e10), (1, 2.56e10)];
    let t = Exporter::new(m).encode();
    assert_eq!(
        value(&t, "imc_dram_peak_bytes_per_second", r#"package="1""#),
        Some(2.56e10)
    );
    assert!(
        t.contains("# TYPE imc_dram_peak_bytes_per_second gauge"),
        "{t}"
    );
}

#[test]
fn victims_stall_cycles_follow_the_exported_processes_and_cgroups() {
    let with_stalls = |r: &mut IntervalResult| {
        for (t, (st, cy)) in
            r.tasks
                .iter_mut()
                .zip([(100.0, 1000.0), (50.0, 500.0), (900.0, 1000.0)])
        {
            t.stall_cycles = Some(st);
            t.cycles = Some(cy);
            t.stall_seconds = Some(st / 1000.0);
        }
    };
    let mut r = imc_interval();
    with_stalls(&mut r);
    let mut ex = Exporter::new(ExportMeta {
        stalls: true,
        ..imc_meta(20)
    });
    ex.add_interval(&r);
    ex.add_interval(&r);
    let t = ex.encode();
    let p = |name: &str, l: &str| value(&t, name, l);
    // pid 40 is its two threads together: (100 + 50) per interval, twice.
    let stream = r#"pid="40",comm="stream",cgroup="7""#;
    assert_eq!(
        p("imc_process_memory_stall_cycles_total", stream),
        Some(300.0)
    );
    assert_eq!(p("imc_process_cycles_total", stream), Some(3000.0));
    let dd = r#"pid="50",comm="dd",cgroup="9""#;
    assert_eq!(p("imc_process_memory_stall_cycles_total", dd), Some(1800.0));
    assert_eq!(
        p("imc_cgroup_memory_stall_cycles_total", r#"cgroup="9""#),
        Some(1800.0)
    );
    assert_eq!(p("imc_cgroup_cycles_total", r#"cgroup="7""#), Some(3000.0));
    // Seconds: (0.1 + 0.05) per interval for pid 40, 0.9 for dd.
    let secs = p("imc_process_memory_stall_seconds_total", stream).unwrap();
    assert!((secs - 0.3).abs() < 1e-9, "{secs}");
    let secs = p("imc_cgroup_memory_stall_seconds_total", r#"cgroup="9""#).unwrap();
    assert!((secs - 1.8).abs() < 1e-9, "{secs}");
    // A process that drops out of the top N loses its stall series with its bytes.
    let mut ex = Exporter::new(ExportMeta {
        stalls: true,
        ..imc_meta(1)
    });
    ex.add_interval(&r);
    let t = ex.encode();
    assert_eq!(count(&t, "imc_process_memory_stall_cycles_total"), 1, "{t}");
    // Without the pair in the plan the families do not exist (never zeros made up).
    let mut ex = Exporter::new(imc_meta(20));
    ex.add_interval(&imc_interval());
    let t = ex.encode();
    assert!(!t.contains("stall"), "{t}");
}

#[test]
fn latency_gauges_per_channel_only_where_planned_and_only_when_measured() {
    use crate::model::result::ChannelLatency;
    let mut r = imc_interval();
    let ch = |c: &str, read_ns: Option<f64>| ChannelLatency {
        channel: c.into(),
        read_ns,
        write_ns: None,
    };
    r.packages[0].latency_channels = vec![ch("uncore_imc_0", Some(82.5)), ch("uncore_imc_1", None)];
    let mut ex = Exporter::new(ExportMeta {
        latency_read: true,
        ..imc_meta(20)
    });
    ex.add_interval(&r);
    let t = ex.encode();
    let read = |c: &str| {
        value(
            &t,
            "imc_dram_read_latency_seconds",
            &format!(r#"package="0",channel="{c}""#),
        )
    };
    let ns = read("uncore_imc_0").unwrap() * 1e9;
    assert!((ns - 82.5).abs() < 1e-6, "{t}");
    // A channel with nothing queued has no sample; writes are not planned: no family at all.
    assert_eq!(read("uncore_imc_1"), None, "{t}");
    assert!(
        t.contains("# TYPE imc_dram_read_latency_seconds gauge"),
        "{t}"
    );
    assert!(t.contains("# HELP imc_dram_read_latency_seconds Loaded DRAM read latency"));
    assert!(!t.contains("imc_dram_write_latency_seconds"), "{t}");
    // The next interval without a figure for channel 0 removes its stale sample.
    r.packages[0].latency_channels = vec![ch("uncore_imc_0", None)];
    ex.add_interval(&r);
    let t = ex.encode();
    assert_eq!(count(&t, "imc_dram_read_latency_seconds"), 0, "{t}");
    // Not planned (a VM): no family, never a made-up series.
    let mut ex = Exporter::new(imc_meta(20));
    r.packages[0].latency_channels = vec![ch("uncore_imc_0", Some(82.5))];
    ex.add_interval(&r);
    assert!(!ex.encode().contains("latency"));
}

#[test]
fn a_cxl_device_is_a_tier_of_its_own_beside_dram() {
    let m = meta(
        vec![
            slot("read", "uncore_imc_0", Direction::Read, Some(64.0)),
            slot("cxl_read", "cxl_pmu_mem0.0", Direction::Read, Some(64.0)),
        ],
        20,
    );
    let mut ex = Exporter::new(m);
    let iv = IntervalResult {
        source: "intel-uncore-imc".into(),
        packages: vec![PackageRow {
            id: 0,
            read_bytes: (100 + 300) * 64,
            slot_counts: vec![100.0, 300.0],
            unattributed_counts: vec![10.0, 30.0],
            ..PackageRow::default()
        }],
        ..IntervalResult::default()
    };
    ex.add_interval(&iv);
    let t = ex.encode();
    let (dram, u) = ("imc_dram_bytes_total", "imc_unattributed_dram_bytes_total");
    let at = |name: &str, labels: &str| value(&t, name, labels);
    assert_eq!(
        at(
            dram,
            r#"package="0",channel="uncore_imc_0",direction="read",tier="dram""#
        ),
        Some(6400.0)
    );
    assert_eq!(
        at(
            dram,
            r#"package="0",channel="cxl_pmu_mem0.0",direction="read",tier="cxl""#
        ),
        Some(19200.0)
    );
    // Unattributed traffic stays apart per tier too; one series per counter, no more.
    assert_eq!(
        at(u, r#"package="0",direction="read",tier="dram""#),
        Some(640.0)
    );
    assert_eq!(
        at(u, r#"package="0",direction="read",tier="cxl""#),
        Some(1920.0)
    );
    assert_eq!(count(&t, dram), 2, "{t}");
    assert_eq!(count(&t, u), 2, "{t}");
}

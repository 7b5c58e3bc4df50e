use super::run::ranked_alike;
use super::*;

/// What `imc record` uses for a one-second interval on the kernel's tick.
fn opts(weigh: Weigh) -> RunOptions {
    RunOptions {
        weigh,
        drain_ms: 100,
        batch_ms: Some(1000),
        precise: false,
    }
}

fn err(text: &str) -> String {
    parse(Path::new("/x/s.json"), text).unwrap_err().to_string()
}

const SMALL: &str = r#"{"name": "small", "packages": [[0, 1], [2, 3]],
    "kernel": "6.8.0", "hz": 250, "duration_s": 2, "interval_ms": 500,
    "dma_read_bps": [1e8, 3e8],
    "tasks": [
      {"pid": 10, "comm": "a", "cpus": [0], "read_bps": 4e9, "write_bps": 1e9},
      {"pid": 11, "comm": "b", "cpus": [0, 1], "cpu_share": 0.5, "read_bps": 1e9,
       "write_bps": 2e9, "memory_package": 1},
      {"pid": 12, "comm": "c", "cpus": [2], "read_bps": 1e7, "end_s": 1.1}
    ]}"#;

#[test]
fn bad_scenarios_name_the_file_and_the_field() {
    let cases = [
        (
            r#"{"name": "x", "bogus": 1}"#,
            "s.json: bogus: unknown field",
        ),
        (
            r#"{"name": "x", "packages": [[0]], "duration_s": 1,
               "tasks": [{"pid": 1, "comm": "a", "cpus": [0], "colour": 2}]}"#,
            "tasks[0].colour: unknown field `colour`",
        ),
        (
            r#"{"name": "x", "packages": [[0]], "duration_s": 1,
               "tasks": [{"pid": 1, "comm": "a", "cpus": [0], "read_bps": -5}]}"#,
            "tasks[0].read_bps: -5",
        ),
        (
            r#"{"name": "x", "packages": [[0]], "duration_s": 90000, "tasks": []}"#,
            "duration_s: 90000",
        ),
        (
            r#"{"name": "x", "packages": ["0-4096"], "duration_s": 1, "tasks": []}"#,
            "packages[0]: 4097 CPUs",
        ),
        (
            r#"{"name": "x", "packages": [[0, 1]], "duration_s": 1,
               "tasks": [{"pid": 1, "comm": "a", "cpus": [7]}]}"#,
            "tasks[0].cpus: CPU 7 does not exist",
        ),
        (
            r#"{"name": "x", "packages": [[0]], "duration_s": "long", "tasks": []}"#,
            "duration_s: invalid type",
        ),
        (r#"{"name": "x", "#, "s.json: (file): EOF"),
        (
            r#"{"name": "x", "duration_s": 1, "tasks": []}"#,
            "root: missing",
        ),
        (
            r#"{"name": "x", "packages": [[0]], "duration_s": 1, "dma_read_bps": [1, 2],
               "tasks": []}"#,
            "dma_read_bps: 2 values for 1 package",
        ),
        (
            r#"{"name": "x", "packages": [[0]], "duration_s": 1,
               "tasks": [{"pid": 1, "comm": "a", "cpus": [0], "memory_package": 3}]}"#,
            "tasks[0].memory_package: package 3 does not exist",
        ),
    ];
    for (text, want) in cases {
        let e = err(text);
        assert!(e.starts_with("/x/s.json: "), "{e}");
        assert!(e.contains(want), "{e:?} should contain {want:?}");
        assert!(!e.contains('\n'), "one line: {e:?}");
    }
    let missing = load(Path::new("/nonexistent/s.json"))
        .unwrap_err()
        .to_string();
    assert!(
        missing.starts_with("/nonexistent/s.json: cannot read"),
        "{missing}"
    );
}

#[test]
fn every_byte_is_a_tasks_or_unattributed() {
    let l = parse(Path::new("/x/s.json"), SMALL).unwrap();
    let modes = [
        (Weigh::Auto, true),
        (Weigh::CpuTime, true),
        (Weigh::Auto, false),
    ];
    for (weigh, precise) in modes {
        let o = l
            .run(
                &RunOptions {
                    precise,
                    ..opts(weigh)
                },
                &mut |_| {},
            )
            .unwrap();
        let attributed: f64 = o.tasks.iter().map(|t| t.attributed_bytes).sum();
        let sum = attributed + o.unattributed_bytes;
        // Rounding each interval's counts to whole ones is all that may differ: half a count
        // of 64 bytes per task, slot and interval at most.
        assert!(
            (sum - o.package_bytes).abs() <= 32.0 * 3.0 * 2.0 * 5.0,
            "{weigh:?}: tasks {attributed} + unattributed {} != counted {}",
            o.unattributed_bytes,
            o.package_bytes
        );
        // What was counted is what the controllers moved (whole counts of 64 bytes): every
        // package has a busy CPU at the start, whose first tick is the baseline. With
        // aggregates, the switch that idles package 1 reads no counter, and the hand-over
        // to userspace's reads loses a fraction of a millisecond of its DMA (52 KB here).
        let slack = if precise {
            64.0 * 8.0
        } else {
            1e-5 * o.total_bytes
        };
        assert!(
            (o.package_bytes - o.total_bytes).abs() <= slack,
            "{weigh:?} precise {precise}: counted {} of {}",
            o.package_bytes,
            o.total_bytes
        );
        let truth: f64 = o.tasks.iter().map(|t| t.truth_bytes).sum();
        // DMA: 0.1 + 0.3 GB/s for 2 s.
        assert!((o.total_bytes - truth - 0.8e9).abs() < 1e3, "{o:?}");
    }
}

#[test]
fn victims_are_charged_their_own_stalls_and_latency_follows_the_queue() {
    // The pointer chaser's stalls grow when the streamer fills its socket's channels from
    // 1 s on; the spinner touches no memory; the stall pair is no weight, so the bytes are
    // the weights' as before.
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/scenarios/victims-streamer-beside-a-chaser.json");
    let mut l = load(&path).unwrap();
    l.file.duration_s = 2.0;
    l.file.interval_ms = 500;
    l.file.tasks[0].start_s = 1.0;
    let o = l.run(&opts(Weigh::Auto), &mut |_| {}).unwrap();
    assert_eq!(o.victims_ranked_right, Some(true), "{}", o.render());
    let task = |comm: &str| o.tasks.iter().find(|t| t.comm == comm).unwrap();
    for t in &o.tasks {
        let (truth, charged) = (
            t.truth_stall_share.unwrap(),
            t.attributed_stall_share.unwrap(),
        );
        assert!(
            (truth - charged).abs() < 0.01,
            "{}: {truth} vs {charged}",
            t.comm
        );
    }
    assert_eq!(task("spin").attributed_stall_share, Some(0.0));
    // In seconds: the share of each tick's span times the span (cpu-clock), summed.
    for t in &o.tasks {
        let charged = t.attributed_stall_seconds.unwrap();
        assert!(
            (charged - t.truth_stall_seconds).abs() <= 0.01 * t.truth_stall_seconds + 1e-3,
            "{}: {charged} s against {} s",
            t.comm,
            t.truth_stall_seconds
        );
    }
    assert!(task("chaser").truth_stall_seconds > 0.3);
    // Idle 80 ns for the first second, 80 / (1 − 150/204.8) ns beside the streamer.
    let chaser = task("chaser").truth_stall_share.unwrap();
    let lines = 1e8 / 64.0;
    let loaded = 80e-9 / (1.0 - 150.0 / 204.8);
    assert!(
        (chaser - lines * (80e-9 + loaded) / 2.0).abs() < 1e-3,
        "{chaser}"
    );
    let lat = &o.latency[0];
    assert!(lat.error.unwrap() < 0.01, "{lat:?}");
    assert!(
        lat.truth_ns.unwrap() > 250.0,
        "{lat:?}: the streamer's reads dominate"
    );
    assert!(
        o.latency[1].measured_ns.is_none(),
        "no reads, no made-up latency"
    );
    assert!(o.max_error <= 0.005, "{}", o.render());
}

#[test]
fn a_ranking_is_right_only_when_every_clear_pair_keeps_its_order() {
    let t = |truth: f64, charged: f64| TaskResult {
        pid: 1,
        comm: "x".into(),
        truth_bytes: 0.0,
        attributed_bytes: 0.0,
        error: 0.0,
        truth_read_bytes: 0.0,
        truth_write_bytes: 0.0,
        attributed_read_bytes: 0.0,
        attributed_write_bytes: 0.0,
        truth_stall_share: Some(truth),
        attributed_stall_share: Some(charged),
        truth_stall_seconds: 0.0,
        attributed_stall_seconds: None,
    };
    assert!(ranked_alike(&[t(0.5, 0.4), t(0.2, 0.3), t(0.0, 0.0)]));
    assert!(!ranked_alike(&[t(0.5, 0.2), t(0.2, 0.3)]));
    // Truths within 0.01 of each other may come in either order.
    assert!(ranked_alike(&[t(0.205, 0.2), t(0.2, 0.3)]));
}

#[test]
fn the_streamer_gets_its_traffic_by_weights_and_a_sixteenth_by_time() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/scenarios/streamer.json");
    let mut l = load(&path).unwrap();
    // Two seconds are enough for the ordering; the shipped run is longer.
    l.file.duration_s = 2.0;
    l.file.interval_ms = 500;
    let share = |o: &Outcome, comm: &str| {
        let t = o.tasks.iter().find(|t| t.comm == comm).unwrap();
        t.attributed_bytes / o.package_bytes
    };
    let auto = l.run(&opts(Weigh::Auto), &mut |_| {}).unwrap();
    assert_eq!(auto.weighting.method, "traffic", "{:?}", auto.weighting);
    let s = share(&auto, "stream");
    assert!(s >= 0.95, "the streamer gets {s} by weights");
    assert!(auto.max_error <= 0.02, "{}", auto.render());
    let time = l.run(&opts(Weigh::CpuTime), &mut |_| {}).unwrap();
    assert_eq!(time.weighting.method, "cpu-time");
    let s = share(&time, "stream");
    assert!((0.04..0.09).contains(&s), "the streamer gets {s} by time");
    for spinner in time.tasks.iter().filter(|t| t.comm != "stream") {
        assert!(spinner.attributed_bytes > 10.0 * spinner.truth_bytes);
    }
}

#[test]
fn schedule_shares_and_staggers() {
    let l = parse(Path::new("/x/s.json"), SMALL).unwrap();
    let sched = l.schedule(4);
    // CPU 1: task b (index 1) half the time, staggered from CPU 0 by half a round.
    let run_time = |c: usize, who: usize| {
        let s = &sched[c];
        s.windows(2)
            .filter(|w| w[0].1 == Some(who))
            .map(|w| w[1].0 - w[0].0)
            .sum::<u64>() as f64
            / 2e9
    };
    assert!((run_time(1, 1) - 0.5).abs() < 0.01, "{}", run_time(1, 1));
    // CPU 0: a wants all, b half: two thirds and one third.
    assert!((run_time(0, 0) - 2.0 / 3.0).abs() < 0.01);
    assert!((run_time(0, 1) - 1.0 / 3.0).abs() < 0.01);
    // CPU 2: c runs only during its life.
    assert!((run_time(2, 2) - 0.55).abs() < 0.001);
    assert_eq!(sched[3], vec![(0, None)]);
}

use super::stats::{MeanSe, verdict};
use super::work::Tick;
use super::*;

#[test]
fn counts_the_cpu_scope_slots_of_a_plan() {
    let plan = r#"{"counters": [{"scope": "cpu"}], "slots": [
        {"event": "page-faults", "scope": "cpu", "sum": null},
        {"event": "uncore read", "scope": "package", "sum": ["a", "b"]},
        {"event": "weight", "scope": "cpu", "sum": null}
    ], "tick": {"scope": "cpu"}}"#;
    assert_eq!(cpu_slots(plan), 2);
    assert_eq!(cpu_slots(r#"{"slots": []}"#), 0);
    assert_eq!(cpu_slots("{}"), 0);
}

fn work(elapsed_s: f64, loc: u64, runs: u64) -> Work {
    Work {
        elapsed_s,
        cpu_s: 2.0 * elapsed_s,
        loc,
        parent_progs: 2,
        parent_cpu_s: 0.001,
        bpf_runs: runs,
        bpf_run_s: 0.0005,
        timer_runs: runs,
        timer_run_s: 0.0004,
        bare_runs: 0,
        bare_run_s: 0.0,
        drained: None,
        warmup_s: None,
        warmup_parent_cpu_s: None,
    }
}

#[test]
fn parses_the_workload_line() {
    let out = "noise\nimc-workload: mode=mem units=40 threads=2 pid=7 elapsed_ns=1500000000 \
               cpu_ns=2990000000 loc=751 parent_progs=1 parent_cpu_ns=15000000 \
               parent_bpf_runs=3001 parent_bpf_run_ns=2400000\n";
    let w = parse_work(out).unwrap();
    assert_eq!(w.elapsed_s, 1.5);
    assert_eq!(w.cpu_s, 2.99);
    assert_eq!(w.loc, 751);
    assert_eq!(w.parent_progs, 1);
    assert_eq!(w.parent_cpu_s, 0.015);
    assert_eq!(w.bpf_runs, 3001);
    assert_eq!(w.bpf_run_s, 0.0024);
    assert_eq!(w.warmup_parent_cpu_s, None);
    let warmed = parse_work(&out.replace(
        "\n",
        " warmup_ns=1500000000 warmup_parent_cpu_ns=104000000\n",
    ));
    let mut warmed = warmed.unwrap();
    assert_eq!(warmed.warmup_parent_cpu_s, Some(0.104));
    assert_eq!(warmed.warmup_s, Some(1.5));
    // imc's whole run drained its records over the warm-up and the window, not the window alone.
    assert_eq!(warmed.drained_per_s(), None);
    warmed.drained = Some(4500);
    assert_eq!(warmed.drained_per_s(), Some(1500.0));
    // Without the probe figures the line is refused: the check that imc sampled needs them.
    assert!(parse_work("imc-workload: elapsed_ns=1 cpu_ns=1 loc=1\n").is_err());
    assert!(parse_work("").is_err());
}

#[test]
fn reads_bare_figures_and_imcs_drained_records() {
    let out = "imc-workload: mode=switch units=9 threads=2 pid=7 elapsed_ns=1000000000 \
               cpu_ns=1 loc=1 parent_progs=0 parent_cpu_ns=0 parent_bpf_runs=0 \
               parent_bpf_run_ns=0 bare_runs=92000 bare_run_ns=14720000\n";
    let w = parse_work(out).unwrap();
    assert_eq!((w.bare_runs, w.bare_run_s), (92000, 0.01472));
    let stderr = "imc: something\nimc: recorded 2 intervals, 0 raw ticks around bursts, 900 \
                  bytes to /tmp/x.imc; 1234 records drained\n";
    assert_eq!(parse_drained(stderr), Some(1234));
    // What imc says of the command it ran follows the count.
    let stderr = "imc: recorded 2 intervals, 0 raw ticks around bursts, 900 bytes to /tmp/x.imc; \
                  4321 records drained; the command (pid 7) marked by its cgroup /sys/x\n";
    assert_eq!(parse_drained(stderr), Some(4321));
    assert_eq!(
        parse_drained("imc: recorded 2 intervals, 900 bytes to x"),
        None
    );
}

#[test]
fn reads_report_fields_and_the_plan_tick() {
    // Keys in any order: a burst's t_end_ns before the report's must not be taken for it.
    let j = r#"{"bursts":[{"t_end_ns":2,"t_start_ns":1}],"lost_samples":177,"packages":[{"id":0,"read_bytes":0}],"source":"proxy:page-faults","t_end_ns":730294921606,"t_start_ns":729223277578,"tasks":[{"comm":"a\"lost_samples\":9"}],"unattributed_bytes":0}"#;
    assert_eq!(json_field(j, "t_start_ns").as_deref(), Some("729223277578"));
    assert_eq!(json_field(j, "t_end_ns").as_deref(), Some("730294921606"));
    assert_eq!(
        json_field(j, "source").as_deref(),
        Some("proxy:page-faults")
    );
    assert_eq!(json_field(j, "lost_samples").as_deref(), Some("177"));
    assert_eq!(json_field(j, "missing"), None);
    let plan = r#"{"command":"record","source":"events:page-faults","counters":[{"pmu":"software","reader":{"kind":"tick"},"slot":0}],"tick":{"source":"kernel-tick","hz":250.0,"adds_interrupts":false,"switches":true,"reason":"x"},"refusals":[],"kernel":{"release":"6.18","hz":null}}"#;
    assert_eq!(
        parse_plan_tick(plan).unwrap(),
        Tick {
            source: "kernel-tick".into(),
            hz: 250.0,
            adds_interrupts: false
        }
    );
    assert!(parse_plan_tick(r#"{"tick":null}"#).is_err());
}

#[test]
fn tick_checks_follow_the_tick_source() {
    // --freq 1000 on 2 CPUs for 1 s: about 2000 ticks.
    let c = Kind::Cpu;
    assert!(check_ticks(&work(1.0, 500, 2000), c, Some(1000), 250.0, 2).is_ok());
    assert!(check_ticks(&work(1.0, 500, 1500), c, Some(1000), 250.0, 2).is_err());
    assert!(check_ticks(&work(1.0, 500, 4000), c, Some(1000), 250.0, 2).is_err());
    // CPUs idle between switches: a late timer passes, the kernel's tick rate does not.
    let s = Kind::Switch;
    assert!(check_ticks(&work(1.0, 500, 1500), s, Some(1000), 250.0, 2).is_ok());
    assert!(check_ticks(&work(1.0, 500, 500), s, Some(1000), 250.0, 2).is_err());
    // The kernel's tick: at least half of HZ × CPUs; context switches may add any number.
    assert!(check_ticks(&work(1.0, 500, 260), c, None, 250.0, 2).is_ok());
    assert!(check_ticks(&work(1.0, 500, 90_000), s, None, 250.0, 2).is_ok());
    assert!(check_ticks(&work(1.0, 500, 200), c, None, 250.0, 2).is_err());
    let mut none = work(1.0, 500, 600);
    none.parent_progs = 0;
    assert!(check_ticks(&none, c, None, 250.0, 2).is_err());
}

#[test]
fn freq_ticks_are_the_timer_runs_not_the_switch_runs() {
    // --freq also runs the switch program at every context switch: 1500 timer runs among
    // 137,600 pass; the same switch runs with a timer that did not fire do not.
    let mut w = work(1.0, 500, 137_600);
    w.bpf_run_s = 0.0364;
    w.timer_runs = 1500;
    w.timer_run_s = 0.0004;
    assert!(check_ticks(&w, Kind::Switch, Some(1000), 250.0, 2).is_ok());
    assert_eq!(w.switch_runs(), 136_100);
    assert!((w.ns_per_switch_run() - 0.036e9 / 136_100.0).abs() < 1e-6);
    w.timer_runs = 0;
    assert!(check_ticks(&w, Kind::Switch, Some(1000), 250.0, 2).is_err());
}

#[test]
fn reads_the_timer_share_of_the_parents_runs() {
    let out = "imc-workload: mode=switch units=9 threads=2 pid=7 elapsed_ns=1000000000 \
               cpu_ns=1 loc=1 parent_progs=3 parent_cpu_ns=0 parent_bpf_runs=90000 \
               parent_bpf_run_ns=9000000 parent_timer_runs=1900 parent_timer_run_ns=500000\n";
    let w = parse_work(out).unwrap();
    assert_eq!((w.timer_runs, w.timer_run_s), (1900, 0.0005));
    assert_eq!(w.switch_runs(), 88_100);
}

#[test]
fn every_side_takes_every_position() {
    let arms = Kind::Switch.arms(true);
    assert_eq!(arms.len(), 11);
    assert_eq!(Kind::Cpu.arms(true).len(), 6);
    assert_eq!(Kind::Switch.arms(false).len(), 9);
    assert_eq!(Kind::Cpu.arms(false).len(), 5);
    // The floor of the collector runs beside imc on the compute and memory workloads only.
    assert!(Kind::Mem.arms(false).contains(&Arm::BareHooks));
    assert!(!arms.contains(&Arm::BareHooks));
    for pos in 0..arms.len() {
        let at: Vec<Arm> = (0..arms.len())
            .map(|r| round_order(&arms, r)[pos])
            .collect();
        assert!(
            arms.iter().all(|a| at.contains(a)),
            "position {pos}: {at:?}"
        );
    }
}

#[test]
fn statistics_and_verdicts() {
    let m = mean_se(&[1.0, 2.0, 3.0]);
    assert_eq!(m.mean, 2.0);
    assert!((m.se - (1.0f64 / 3.0).sqrt()).abs() < 1e-12);
    assert!(mean_se(&[1.0]).se.is_nan());
    assert!((pct(1.005, 1.0) - 0.5).abs() < 1e-9);
    let v = |mean, se| MeanSe { mean, se };
    assert_eq!(verdict(v(0.1, 0.1), 0.5), "PASS");
    assert_eq!(verdict(v(0.9, 0.1), 0.5), "FAIL");
    assert_eq!(verdict(v(0.4, 0.1), 0.5), "UNRESOLVED");
    assert_eq!(verdict(v(0.6, 0.1), 0.5), "UNRESOLVED");
    assert_eq!(verdict(v(0.0, f64::NAN), 0.5), "UNRESOLVED");
}

#[test]
fn targets_are_paired_by_round() {
    let cpus = 2;
    // Alone: 250 interrupts per CPU-second; imc adds none and is 0.1% slower; perf's
    // cpu-clock adds 1000 and is 5% slower, every round.
    let alone = vec![work(1.0, 500, 0), work(1.2, 600, 0)];
    let imc = vec![work(1.001, 500, 600), work(1.2012, 600, 700)];
    let perf = vec![work(1.05, 2600, 0), work(1.26, 3120, 0)];
    let r = KindRuns {
        kind: Kind::Cpu,
        cpus,
        arms: vec![
            (Arm::Alone, alone),
            (Arm::ImcTick, imc),
            (Arm::PerfClock, perf),
        ],
    };
    let s = mean_se(&r.slowdowns(Arm::ImcTick).unwrap());
    assert!((s.mean - 0.1).abs() < 1e-9 && s.se < 1e-9, "{s:?}");
    let irq = mean_se(&r.irq_added_pct(Arm::ImcTick).unwrap());
    assert!(irq.mean.abs() < 0.2, "{irq:?}");
    // 2 × 0.0005 s of BPF over 1300 runs: 769 ns a run; perf's side has no BPF.
    let row = arm_row(&r, Arm::ImcTick, r.runs(Arm::ImcTick).unwrap());
    assert!(row.ends_with(" 769"), "{row}");
    let row = arm_row(&r, Arm::PerfClock, r.runs(Arm::PerfClock).unwrap());
    assert!(row.ends_with("—"), "{row}");
    let cs = checks(&[r]);
    let line = |what: &str| {
        cs.iter()
            .find(|c| c.what.contains(what))
            .map(check_line)
            .unwrap()
    };
    assert!(line("slowdown %").starts_with("PASS"));
    // 0.1 - 0.2 × 5 = -0.9 points.
    assert!(line("minus 0.2").starts_with("PASS"));
    // 0.0015 s of collector over 2 CPU-seconds: 0.075% of the machine, over the 0.03% a
    // compute-bound workload allows.
    assert!(
        line("collector").starts_with("FAIL"),
        "{}",
        line("collector")
    );
}

#[test]
fn the_floor_is_the_bare_programs_share_and_imc_is_read_above_it() {
    let cpus = 2;
    // The floor: 1000 runs taking 0.0004 s of 2 CPU-seconds each round: 0.02% of the machine,
    // 400 ns a run. imc: 0.0005 s of BPF over 600 and 700 runs (0.025%) and 0.001 s of its
    // process (0.05%).
    let bare = |elapsed_s: f64| Work {
        parent_progs: 0,
        parent_cpu_s: 0.0,
        bpf_runs: 0,
        bpf_run_s: 0.0,
        bare_runs: 1000,
        bare_run_s: 0.0004 * elapsed_s,
        ..work(elapsed_s, 500, 0)
    };
    let r = KindRuns {
        kind: Kind::Mem,
        cpus,
        arms: vec![
            (Arm::Alone, vec![work(1.0, 500, 0), work(1.0, 500, 0)]),
            (Arm::ImcTick, vec![work(1.0, 500, 600), work(1.0, 500, 700)]),
            (Arm::BareHooks, vec![bare(1.0), bare(1.0)]),
        ],
    };
    let c = floor_check(&r).unwrap();
    assert!((c.figure.mean - 0.02).abs() < 1e-9, "{:?}", c.figure);
    assert_eq!(c.target, TARGET_COLLECTOR_PCT);
    assert!(c.detail.starts_with("400 ns a run"), "{}", c.detail);
    assert!(c.detail.contains("+0.005 ± 0.000 points"), "{}", c.detail);
    assert!(c.detail.contains("its process 0.050"), "{}", c.detail);
    // Under the target: PASS, the target is reachable above this floor.
    assert!(check_line(&c).starts_with("PASS"), "{}", check_line(&c));
    // The bare arm's row shows its program's figures, not its parent's (which has none).
    let row = arm_row(&r, Arm::BareHooks, r.runs(Arm::BareHooks).unwrap());
    assert!(row.ends_with(" 400"), "{row}");
    assert!(row.contains("0.020%"), "{row}");
    // Without the floor's runs there is no check.
    let r = KindRuns {
        arms: r
            .arms
            .into_iter()
            .filter(|(a, _)| *a != Arm::BareHooks)
            .collect(),
        ..r
    };
    assert!(floor_check(&r).is_none());
}

#[test]
fn the_charge_floor_is_its_own_cost_over_the_reads() {
    // 1000 runs a round: the bare program 60 ns, charging 60 + 100 (read) + 50 (clock) + 30.
    let bare_work = |ns: f64| Work {
        bare_runs: 1000,
        bare_run_s: ns * 1000.0 / 1e9,
        ..work(1.0, 500, 0)
    };
    let bare = vec![bare_work(60.0), bare_work(60.0)];
    let charge = vec![bare_work(240.0), bare_work(240.0)];
    // imc: 250 and 270 ns a switch run (no timer runs).
    let imc_work = |ns: f64| Work {
        bpf_runs: 1000,
        bpf_run_s: ns * 1000.0 / 1e9,
        timer_runs: 0,
        timer_run_s: 0.0,
        ..work(1.0, 500, 0)
    };
    let imc = vec![imc_work(250.0), imc_work(270.0)];
    let c = switch::charge_check(&charge, &bare, (&[100.0, 100.0], &[50.0, 50.0]), Some(&imc));
    assert!((c.figure.mean - 30.0).abs() < 1e-6, "{:?}", c.figure);
    assert_eq!(c.target, TARGET_NS_OVER_READS);
    // 30 ns of naming and adding, over the 20 ns allowance, in every round: FAIL.
    assert!(check_line(&c).starts_with("FAIL"), "{}", check_line(&c));
    assert!(c.detail.contains("+20 ± 10 ns a run above"), "{}", c.detail);
    let c = switch::charge_check(&charge, &bare, (&[100.0, 100.0], &[50.0, 50.0]), None);
    assert_eq!(c.detail, "imc's switch was not run");
}

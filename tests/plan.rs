//! `--dry-run` on every fixture tree, through the real binary and without privileges: the plan that
//! `stat`, `top`, `record` and `serve` execute, as JSON, checked against what each tree's README
//! says a correct tool finds.
use imc_tests::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// A copy of a fixture tree anybody may read (a test's temp dir is private to root).
fn readable_copy(tree: &str) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let ok = Command::new("cp")
        .arg("-a")
        .arg(own_fixtures().join(tree))
        .arg(dir.path().join("root"))
        .status()
        .unwrap()
        .success();
    assert!(ok, "copying {tree}");
    dir
}

/// `imc --root TREE ARGS --dry-run --json` as nobody where this test may drop privileges, else
/// as whoever runs it; the plan object.
fn plan(root: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--root", root.to_str().unwrap()];
    all.extend_from_slice(args);
    all.extend(["--dry-run", "--json"]);
    let mut cmd = if is_root() {
        as_nobody(&all).unwrap_or_else(|| {
            let mut c = imc();
            c.args(&all);
            c
        })
    } else {
        let mut c = imc();
        c.args(&all);
        c
    };
    run_json(&mut cmd)
}

#[test]
fn every_tree_with_a_memory_controller_plans_every_channel_for_every_command() {
    // (tree, source, counters, (package, channel, direction) triples): every channel of every
    // package, read and write, or total where that is all the hardware has.
    let cases: [(&str, &str, usize); 10] = [
        ("skx-2socket", "intel-uncore-imc", 24),
        // 12 channels × 2 sub-channels (schedulers) × read/write × 2 packages.
        ("gnr-2socket", "intel-uncore-imc", 96),
        ("spr-2socket", "intel-uncore-imc", 32),
        ("icx-gaps", "intel-uncore-imc", 32),
        ("zen4-2socket", "amd-umc", 8),
        ("zen2-1socket", "amd-df", 8),
        ("zen3-ibs", "amd-df", 8),
        ("knl", "knl-edc", 28),
        ("power9-2chip", "power-nest-imc", 16),
        ("icl-client", "intel-client-imc", 2),
    ];
    for (tree, source, n) in cases {
        let copy = readable_copy(tree);
        let root = copy.path().join("root");
        for command in ["stat", "top", "record", "serve"] {
            let p = plan(&root, &[command]);
            let what = format!("{tree} {command}");
            assert_eq!(p["source"], source, "{what}");
            let all = p["counters"].as_array().unwrap();
            for c in all {
                let role = c["role"].as_str().unwrap_or("");
                assert!(
                    ["traffic", "weight", "stall", "latency"].contains(&role),
                    "{what}: {c}"
                );
                // Latency in the sampling commands: read by userspace at each interval.
                if role == "latency" && command != "stat" {
                    assert_eq!(c["reader"]["kind"], "interval", "{what}: {c}");
                }
                for k in ["type", "config", "config1", "config2"] {
                    assert!(c["encoding"][k].is_u64(), "{what}: no encoding {k} in {c}");
                }
            }
            check_weighting(&p, &what);
            let counters: Vec<&Value> = all.iter().filter(|c| c["role"] == "traffic").collect();
            assert_eq!(counters.len(), n, "{what}");
            let mut seen = BTreeSet::new();
            for c in &counters {
                for k in ["pmu", "event", "package", "channel", "direction", "reader"] {
                    assert!(c.get(k).is_some(), "{what}: no {k} in {c}");
                }
                let dir = c["direction"].as_str().unwrap_or("");
                assert!(["read", "write", "total"].contains(&dir), "{what}: {c}");
                assert!(
                    seen.insert((
                        c["package"].to_string(),
                        c["channel"].to_string(),
                        c["sub_channel"].to_string(),
                        c["pmu"].to_string(),
                        dir.to_string()
                    )),
                    "{what}: a counter twice: {c}"
                );
            }
            if tree == "gnr-2socket" {
                // Channels are channels: 0-11 a package, each with sub-channels 0 and 1.
                let chans: BTreeSet<u64> = counters
                    .iter()
                    .map(|c| c["channel"].as_u64().unwrap())
                    .collect();
                assert_eq!(chans, (0..12).collect(), "{what}");
                assert!(
                    counters
                        .iter()
                        .all(|c| c["sub_channel"].as_u64().unwrap() < 2)
                );
            } else {
                assert!(
                    counters.iter().all(|c| c.get("sub_channel").is_none()),
                    "{what}"
                );
            }
            let tick = &p["tick"];
            if command == "stat" {
                assert_eq!(tick["source"], "interval-timer", "{what}");
                assert!(counters.iter().all(|c| c["reader"]["kind"] == "userspace"));
                assert_eq!(all.len(), n, "{what}: stat reads no weights");
            } else {
                assert_eq!(tick["source"], "kernel-tick", "{what}");
                assert_eq!(tick["adds_interrupts"], false, "{what}");
                // Package counters are read by a package reader's tick (or by userspace where
                // the kernel multiplexes them); never by every CPU.
                for c in &counters {
                    let kind = c["reader"]["kind"].as_str().unwrap();
                    assert!(["package-tick", "userspace"].contains(&kind), "{what}: {c}");
                }
                let slots = p["slots"].as_array().unwrap();
                let traffic = slots.iter().filter(|s| s["role"] == "traffic").count();
                assert!(traffic > 0 && traffic <= 4, "{what}: {slots:?}");
                assert!(slots.len() <= 8, "{what}: {slots:?}");
                // The modes left on sleep a second between drains unless userspace reads a
                // counter at the interval's pace; the live view drains every interval.
                let userspace = counters.iter().any(|c| c["reader"]["kind"] == "userspace");
                let long = command != "top" && !userspace;
                let every = p["drain"]["every_ms"].as_u64().unwrap();
                assert_eq!(every == 1000, long, "{what}: {}", p["drain"]);
                assert_eq!(
                    p["drain"]["intervals_closed_after"],
                    command != "top",
                    "{what}"
                );
            }
            assert!(p["refusals"].is_array(), "{what}");
        }
    }
}

/// A sampling plan says how it divides package traffic: by the weight counters it lists (each a
/// per-CPU core counter read by every CPU's own tick), or by CPU time with a reason; stat,
/// which divides nothing, says nothing.
fn check_weighting(p: &Value, what: &str) {
    let w = &p["weighting"];
    if p["command"] == "stat" {
        assert!(w.is_null(), "{what}: {w}");
        return;
    }
    assert!(
        !w["reason"].as_str().unwrap_or("").is_empty(),
        "{what}: {w}"
    );
    let weights: Vec<&Value> = p["counters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["role"] == "weight")
        .collect();
    match w["method"].as_str() {
        Some("cpu-time") => {
            assert!(weights.is_empty(), "{what}: {weights:?}");
            assert!(w["read"].is_null() && w["write"].is_null(), "{what}: {w}");
        }
        Some("traffic") => {
            assert!(!weights.is_empty(), "{what}: {w}");
            assert!(w["read"].is_string(), "{what}: {w}");
            for c in weights {
                assert_eq!(c["reader"]["kind"], "tick", "{what}: {c}");
                assert_eq!(c["scope"], "cpu", "{what}: {c}");
                assert!(c["package"].is_null(), "{what}: {c}");
                let named = [&w["read"], &w["write"]]
                    .iter()
                    .filter_map(|v| v.as_str())
                    .any(|names| names.split('+').any(|n| n == c["event"]));
                assert!(named, "{what}: {c} not in {w}");
            }
        }
        _ => panic!("{what}: weighting {w}"),
    }
}

#[test]
fn weight_cpu_time_and_weight_events_are_what_the_plan_does() {
    let copy = readable_copy("skx-2socket");
    let root = copy.path().join("root");
    let p = plan(&root, &["top", "--weight", "cpu-time"]);
    assert_eq!(p["weighting"]["method"], "cpu-time");
    check_weighting(&p, "--weight cpu-time");
    // The user's own per-CPU events, one direction each.
    let p = plan(
        &root,
        &[
            "record",
            "--weight",
            "cpu/event=0x2e,umask=0x41/:read",
            "--weight",
            "page-faults:write",
        ],
    );
    let w = &p["weighting"];
    assert_eq!(w["method"], "traffic", "{w}");
    assert_eq!(w["read"], "cpu/event=0x2e,umask=0x41/", "{w}");
    assert_eq!(w["write"], "page-faults", "{w}");
    let slots = p["slots"].as_array().unwrap();
    let weight_dirs: Vec<&str> = slots
        .iter()
        .filter(|s| s["role"] == "weight")
        .map(|s| s["direction"].as_str().unwrap())
        .collect();
    assert_eq!(weight_dirs, ["read", "write"], "{slots:?}");
}

#[test]
fn a_bad_weight_is_one_line_and_exit_2() {
    let root = own_fixtures().join("skx-2socket");
    for (arg, says) in [
        ("uncore_imc_0/cas_count_read/", "not per CPU"),
        ("no-such-event", "--weight no-such-event"),
    ] {
        let o = imc()
            .arg("--root")
            .arg(&root)
            .args(["top", "--dry-run", "--weight", arg])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "--weight {arg}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(says), "--weight {arg}: {err}");
    }
    let o = imc()
        .arg("--root")
        .arg(&root)
        .args([
            "top",
            "--dry-run",
            "--weight",
            "auto",
            "--weight",
            "page-faults",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn freq_asks_for_imcs_own_timer_and_says_it_adds_interrupts() {
    let copy = readable_copy("skx-2socket");
    let root = copy.path().join("root");
    let p = plan(&root, &["record", "--freq", "1000"]);
    assert_eq!(p["tick"]["source"], "cpu-clock");
    assert_eq!(p["tick"]["adds_interrupts"], true);
    assert_eq!(p["tick"]["hz"], 1000.0);
    // The timer's ticks are added to the switches: the records stay per task between them.
    assert_eq!(p["tick"]["switches"], true);
    assert_eq!(p["records"], "aggregated");
    let p = plan(&root, &["record", "--freq", "1000", "--precise"]);
    assert_eq!(p["tick"]["switches"], true);
    assert_eq!(p["records"], "per-switch");
}

#[test]
fn events_narrow_the_plan_to_what_was_named() {
    let copy = readable_copy("spr-2socket");
    let root = copy.path().join("root");
    let p = plan(&root, &["top", "-e", "uncore_imc_0/cas_count_read/"]);
    let counters: Vec<&Value> = p["counters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["role"] == "traffic")
        .collect();
    assert_eq!(
        counters.len(),
        2,
        "uncore_imc_0 on each package: {counters:?}"
    );
    assert!(counters.iter().all(|c| c["pmu"] == "uncore_imc_0"));
}

#[test]
fn a_guest_plans_a_labelled_stand_in_and_says_why() {
    let copy = readable_copy("vm-guest");
    let root = copy.path().join("root");
    for command in ["stat", "top"] {
        let p = plan(&root, &[command]);
        assert!(
            p["source"].as_str().unwrap().starts_with("proxy:"),
            "{command}: {}",
            p["source"]
        );
        let refusals = p["refusals"].as_array().unwrap();
        assert!(
            refusals
                .iter()
                .any(|r| r["reason"].as_str().unwrap().contains("hypervisor")),
            "{command}: {refusals:?}"
        );
        assert!(
            p["counters"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["direction"].is_null())
        );
    }
}

#[test]
fn the_text_plan_names_every_channel_and_why_its_reader() {
    let o = run_ok(
        imc()
            .arg("--root")
            .arg(own_fixtures().join("skx-2socket"))
            .args(["top", "--dry-run"]),
    );
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("counters (66):"),
        "24 channels, three weights (local and remote reads, writes), the stall pair with \
         cpu-clock, and the read queue and DRAM clock of 12 channels: {text}"
    );
    assert!(
        text.contains("latency: read, from intel-imc-queues")
            && text.contains("userspace at the end of each 1000 ms interval"),
        "{text}"
    );
    assert!(
        text.contains("victims: stalls CYCLE_ACTIVITY.STALLS_L3_MISS ÷ CPU_CLK_UNHALTED.THREAD"),
        "{text}"
    );
    assert!(text.contains("weighting: by "), "{text}");
    assert!(text.contains("package 1 channel 5"), "{text}");
    assert!(text.contains("adds interrupts: no"), "{text}");
    assert!(text.contains("why: package 0:"), "{text}");
}

#[test]
fn the_text_plan_never_says_switches_both_read_and_not() {
    // `top --freq --dry-run` said "none at switches" of its records and "read by each CPU's
    // tick and context switches" of its counters.
    for args in [
        &["top", "--dry-run"][..],
        &["top", "--dry-run", "--freq", "1000"],
    ] {
        let o = run_ok(
            imc()
                .arg("--root")
                .arg(own_fixtures().join("vm-guest"))
                .args(args),
        );
        let text = String::from_utf8(o.stdout).unwrap();
        let none_at_switches = text.contains("none at switches");
        assert!(
            !(none_at_switches && text.contains("tick and context switches")),
            "{args:?}: {text}"
        );
    }
}

#[test]
fn the_json_plan_shows_a_stall_pair_per_cpu_or_says_in_one_line_why_none() {
    // (tree, stall event, its config, cycles event, its config): the encodings of the cited
    // tables (CYCLE_ACTIVITY.STALLS_L3_MISS 0xa3/0x06 cmask 6; ex_no_retire.load_not_complete
    // 0xd6/0xa2).
    let cases = [
        (
            "skx-2socket",
            "CYCLE_ACTIVITY.STALLS_L3_MISS",
            0x0600_06a3u64,
            "CPU_CLK_UNHALTED.THREAD",
            0x3cu64,
        ),
        (
            "spr-2socket",
            "CYCLE_ACTIVITY.STALLS_L3_MISS",
            0x0600_06a3,
            "CPU_CLK_UNHALTED.THREAD",
            0x3c,
        ),
        (
            "gnr-2socket",
            "CYCLE_ACTIVITY.STALLS_L3_MISS",
            0x0600_06a3,
            "CPU_CLK_UNHALTED.THREAD",
            0x3c,
        ),
        (
            "zen4-2socket",
            "ex_no_retire.load_not_complete",
            0xa2d6,
            "ls_not_halted_cyc",
            0x76,
        ),
    ];
    for (tree, stalled, sc, cycles, cc) in cases {
        let copy = readable_copy(tree);
        let p = plan(&copy.path().join("root"), &["top"]);
        assert_eq!(p["victims"]["stalled"], stalled, "{tree}");
        assert_eq!(p["victims"]["cycles"], cycles, "{tree}");
        let stalls: Vec<&Value> = p["counters"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["role"] == "stall")
            .collect();
        assert_eq!(stalls.len(), 3, "{tree}: the pair and cpu-clock");
        assert_eq!(stalls[2]["event"], "cpu-clock", "{tree}");
        assert_eq!(stalls[2]["stall"], "time", "{tree}");
        for (c, (event, part, config)) in stalls
            .iter()
            .zip([(stalled, "stalled", sc), (cycles, "cycles", cc)])
        {
            assert_eq!(c["event"], event, "{tree}");
            assert_eq!(c["stall"], part, "{tree}");
            assert_eq!(
                c["encoding"]["config"].as_u64(),
                Some(config),
                "{tree}: {c}"
            );
            assert_eq!(c["reader"]["kind"], "tick", "{tree}");
            assert!(c["package"].is_null(), "{tree}: per CPU");
        }
    }
    // A guest: one line, null events, no stall counter.
    let copy = readable_copy("vm-guest");
    let p = plan(&copy.path().join("root"), &["top"]);
    assert!(p["victims"]["stalled"].is_null() && p["victims"]["cycles"].is_null());
    let why = p["victims"]["reason"].as_str().unwrap();
    assert!(
        why.starts_with("no stall counters") && !why.contains('\n'),
        "{why}"
    );
    assert!(
        !p["counters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["role"] == "stall")
    );
}

//! `imc-bench-scale` (cargo xtask bench-scale), run for real at a tiny size: its JSON carries the
//! fields its verdicts are made of, the precise variant drains every record it generated, and the
//! aggregated one drains far fewer. Figures are not judged here: that is the benchmark's job.
use imc_tests::{imc_bin, run_ok};
use std::process::Command;

fn bench() -> Command {
    Command::new(imc_bin().with_file_name("imc-bench-scale"))
}

#[test]
fn json_has_one_object_per_variant_and_aggregation_drains_fewer_records() {
    let out = run_ok(bench().args([
        "--json",
        "--cpus",
        "4",
        "--seconds",
        "1.5",
        "--switches",
        "2000",
        "--runs",
        "2",
    ]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    for v in &lines {
        assert!(v["aggregated"].is_boolean(), "{v}");
        assert_eq!(v["cpus"], 4, "{v}");
        assert_eq!(v["switches_per_s_per_cpu"], 2000, "{v}");
        for k in ["userspace_ms_per_s", "machine_share", "peak_rss_mb"] {
            let x = v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v}"));
            assert!(x.is_finite() && x >= 0.0, "{k} in {v}");
        }
        // The share is the CPU time over the simulated machine's: ms/s over 1000 × CPUs.
        let ms = v["userspace_ms_per_s"].as_f64().unwrap();
        let share = v["machine_share"].as_f64().unwrap();
        assert!(
            (share - ms / 1000.0 / 4.0).abs() <= 1e-9 + share * 1e-6,
            "{v}"
        );
        assert_eq!(v["lost"], 0, "{v}");
    }
    let by = |agg: bool| {
        lines
            .iter()
            .find(|v| v["aggregated"] == agg)
            .unwrap_or_else(|| panic!("no aggregated={agg} line: {stdout}"))
    };
    let (precise, aggregated) = (by(false), by(true));
    let drained = |v: &serde_json::Value| v["records_drained"].as_f64().unwrap();
    let generated = |v: &serde_json::Value| v["records_generated"].as_f64().unwrap();
    // Both replay the same per-switch stream: 4 CPUs × 2000 switches/s × 1.5 s, plus ticks.
    assert_eq!(generated(precise), generated(aggregated));
    assert!(generated(precise) >= 4.0 * 2000.0 * 1.5 * 0.9, "{precise}");
    assert_eq!(drained(precise), generated(precise), "{precise}");
    // Three tasks and idle take turns on each CPU: a tick period (4 ms, 8 switches) folds into
    // at most 4 records.
    assert!(
        drained(aggregated) * 1.5 < drained(precise),
        "aggregated {aggregated} vs precise {precise}"
    );
    assert!(precise["intervals"].as_u64().unwrap() >= 1, "{precise}");
}

#[test]
fn a_bad_size_is_one_line_and_exit_2() {
    for args in [
        &["--cpus", "3"][..],
        &["--seconds", "nan"],
        &["--runs"],
        &["--bogus"],
    ] {
        let out = bench().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

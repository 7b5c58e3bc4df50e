//! `cargo xtask accuracy --live [--rounds R]`: `imc validate --json` R times on this machine
//! (the scenarios' `--weight` and `--precise` passed on), and per workload and event the mean
//! of each round's worst interval error ± its standard error, printed after the synthetic
//! scenarios' table.
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// `--live` and `--rounds R` taken out of `args`: Some(R) when live rounds were asked for.
pub fn take_live(args: &mut Vec<String>) -> Result<Option<u32>> {
    let Some(i) = args.iter().position(|a| a == "--live") else {
        if args.iter().any(|a| a == "--rounds") {
            bail!("--rounds goes with --live");
        }
        return Ok(None);
    };
    args.remove(i);
    let mut rounds = 5;
    if let Some(j) = args.iter().position(|a| a == "--rounds") {
        args.remove(j);
        if j >= args.len() {
            bail!("--rounds needs a number of rounds (1 or more)");
        }
        let v = args.remove(j);
        rounds = v
            .parse::<u32>()
            .ok()
            .filter(|&r| (1..=1000).contains(&r))
            .with_context(|| format!("--rounds {v}: give a whole number from 1 to 1000"))?;
    }
    Ok(Some(rounds))
}

/// The options of the synthetic run that validate understands too.
fn validate_args(scenario_args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = scenario_args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--precise" => out.push(a.clone()),
            "--weight" => {
                if let Some(w) = it.next() {
                    out.extend([a.clone(), w.clone()]);
                }
            }
            _ => {}
        }
    }
    out
}

/// Mean and standard error of the mean (0 for one value).
pub fn mean_se(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, (var / n).sqrt())
}

pub fn run(imc: &Path, rounds: u32, scenario_args: &[String]) -> Result<bool> {
    let extra = validate_args(scenario_args);
    // (workload, event) -> each round's worst interval error.
    let mut errors: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    let mut passed = 0;
    let mut source = String::new();
    for r in 1..=rounds {
        eprintln!(
            "xtask: live round {r} of {rounds}: imc validate --json {}",
            extra.join(" ")
        );
        let out = Command::new(imc)
            .args(["validate", "--json"])
            .args(&extra)
            .output()
            .with_context(|| format!("running {}", imc.display()))?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "imc validate gave no JSON (exit {:?}): {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })?;
        source = v["source"].as_str().unwrap_or("").to_string();
        if v["pass"] == true {
            passed += 1;
        }
        for w in v["workloads"].as_array().into_iter().flatten() {
            let key = (
                w["name"].as_str().unwrap_or("?").to_string(),
                w["event"].as_str().unwrap_or("?").to_string(),
            );
            errors
                .entry(key)
                .or_default()
                .push(w["error"].as_f64().unwrap_or(f64::NAN));
        }
    }
    println!();
    println!(
        "live: imc validate on this machine, {rounds} round(s), source {source}, {passed} within every bound"
    );
    println!(
        "{:<12} {:<40} {:>11} {:>10} {:>9}",
        "workload", "event", "mean error", "± s.e.", "worst"
    );
    for ((name, event), v) in &errors {
        let (mean, se) = mean_se(v);
        let worst = v.iter().copied().fold(0.0, f64::max);
        println!("{name:<12} {event:<40} {mean:>11.4} {se:>10.4} {worst:>9.4}");
    }
    Ok(passed == rounds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn live_and_rounds_are_taken_out_and_checked() {
        let mut a = strings(&["--live", "--rounds", "3", "a.json"]);
        assert_eq!(take_live(&mut a).unwrap(), Some(3));
        assert_eq!(a, ["a.json"]);
        let mut a = strings(&["--live"]);
        assert_eq!(take_live(&mut a).unwrap(), Some(5));
        assert!(take_live(&mut strings(&["--live", "--rounds", "0"])).is_err());
        assert!(take_live(&mut strings(&["--live", "--rounds"])).is_err());
        assert!(take_live(&mut strings(&["--rounds", "2"])).is_err());
        assert_eq!(take_live(&mut strings(&["a.json"])).unwrap(), None);
    }

    #[test]
    fn standard_error_of_the_mean() {
        assert_eq!(mean_se(&[0.5]), (0.5, 0.0));
        let (m, se) = mean_se(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(m, 2.5);
        // sample sd = sqrt(5/3); se = sd / 2
        assert!((se - (5.0f64 / 3.0).sqrt() / 2.0).abs() < 1e-12);
    }

    #[test]
    fn precise_and_weight_pass_on_to_validate() {
        let a = strings(&["--precise", "--weight", "cpu-time", "--json", "s.json"]);
        assert_eq!(validate_args(&a), ["--precise", "--weight", "cpu-time"]);
    }
}

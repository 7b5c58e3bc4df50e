//! `cargo xtask accuracy --live [--rounds R]`: `imc validate --json` R times on this machine
//! (the scenarios' `--weight` and `--precise` passed on), and per workload and event the mean
//! of each round's worst interval error ± its standard error, printed after the synthetic
//! scenarios' table.
//!
//! `cargo xtask accuracy --live --load [--rounds R]`: `imc validate` at its defaults, at
//! `-I 100`, with `--precise`, with `--freq 1000` and with `-e cpu-clock`, R rounds each (10
//! unless said) on this machine as it is, then R rounds each beside two CPU hogs and a
//! page-faulting process: per mode the rounds within every bound and the worst error, quiet
//! beside loaded.
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// What `--live` asks for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Live {
    pub rounds: u32,
    /// `--load`: every mode quiet and beside a load of its own.
    pub load: bool,
}

/// `--live`, `--load` and `--rounds R` taken out of `args`: Some when live rounds were asked
/// for.
pub fn take_live(args: &mut Vec<String>) -> Result<Option<Live>> {
    let load = args
        .iter()
        .position(|a| a == "--load")
        .map(|i| args.remove(i));
    let Some(i) = args.iter().position(|a| a == "--live") else {
        if args.iter().any(|a| a == "--rounds") || load.is_some() {
            bail!("--rounds and --load go with --live");
        }
        return Ok(None);
    };
    args.remove(i);
    let mut rounds = if load.is_some() { 10 } else { 5 };
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
    Ok(Some(Live {
        rounds,
        load: load.is_some(),
    }))
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

/// The modes `--load` compares: a name and validate's arguments.
pub const LOAD_MODES: [(&str, &[&str]); 5] = [
    ("defaults", &[]),
    ("-I 100", &["-I", "100"]),
    ("--precise", &["--precise"]),
    ("--freq 1000", &["--freq", "1000"]),
    ("-e cpu-clock", &["-e", "cpu-clock"]),
];

/// Two CPU hogs and a page-faulting process, killed when dropped.
struct Hogs(Vec<Child>);

impl Hogs {
    fn start() -> Result<Hogs> {
        let scripts = [
            "while :; do :; done",
            "while :; do :; done",
            "while :; do dd if=/dev/zero of=/dev/null bs=4M count=4 2>/dev/null; done",
        ];
        let mut hogs = Hogs(Vec::new());
        for s in scripts {
            let child = Command::new("sh")
                .args(["-c", s])
                .stdout(Stdio::null())
                .spawn()
                .context("starting a load process (sh)")?;
            hogs.0.push(child);
        }
        Ok(hogs)
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One mode's rounds: how many were within every bound, the worst workload error (and the
/// worst without the allowance for what imc said it could not place), and the mean of the
/// other runnable tasks validate saw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModeRounds {
    pub passed: u32,
    pub rounds: u32,
    pub worst: f64,
    pub worst_raw: f64,
    pub runnable: f64,
}

impl ModeRounds {
    /// One round's report (validate's JSON) added.
    pub fn add(&mut self, v: &serde_json::Value) {
        self.rounds += 1;
        if v["pass"] == true {
            self.passed += 1;
        }
        for w in v["workloads"].as_array().into_iter().flatten() {
            self.worst = self.worst.max(w["error"].as_f64().unwrap_or(f64::INFINITY));
            self.worst_raw = self
                .worst_raw
                .max(w["error_raw"].as_f64().unwrap_or(f64::INFINITY));
        }
        let r = v["load"]["others_runnable_mean"].as_f64().unwrap_or(0.0);
        self.runnable += (r - self.runnable) / f64::from(self.rounds);
    }
}

/// `imc validate --json ARGS` once.
fn validate_json(imc: &Path, args: &[&str]) -> Result<serde_json::Value> {
    let out = Command::new(imc)
        .args(["validate", "--json"])
        .args(args)
        .output()
        .with_context(|| format!("running {}", imc.display()))?;
    serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "imc validate {} gave no JSON (exit {:?}): {}",
            args.join(" "),
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })
}

/// Every mode `rounds` times; the report of a round outside its bounds is kept in `keep`
/// (its figures alone do not say which workload and interval parted from the truth).
fn rounds_of(
    imc: &Path,
    rounds: u32,
    (what, tag): (&str, &str),
    keep: &Path,
) -> Result<Vec<ModeRounds>> {
    let mut out = vec![ModeRounds::default(); LOAD_MODES.len()];
    for (k, (name, args)) in LOAD_MODES.iter().enumerate() {
        for r in 1..=rounds {
            eprintln!("xtask: {what} {name}, round {r} of {rounds}");
            let v = validate_json(imc, args)?;
            if v["pass"] != true {
                let path = keep.join(kept_name(tag, name, r));
                std::fs::create_dir_all(keep)
                    .and_then(|()| std::fs::write(&path, v.to_string()))
                    .with_context(|| format!("keeping {}", path.display()))?;
                eprintln!(
                    "xtask: outside its bounds; the report is {}",
                    path.display()
                );
            }
            out[k].add(&v);
        }
    }
    Ok(out)
}

/// The file a failed round's report is kept in: `quiet--I-100-3.json`.
fn kept_name(tag: &str, mode: &str, round: u32) -> String {
    let slug: String = mode
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("{tag}-{slug}-{round}.json")
}

/// `--live --load`: every mode quiet, then beside the hogs; true when every round of both
/// passed. The report of each round that did not is kept in a folder of this run's own in
/// `keep` (named by its start, seconds since the epoch), so no earlier run's is mixed in or
/// overwritten.
pub fn run_loaded(imc: &Path, rounds: u32, keep: &Path) -> Result<bool> {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let keep = &keep.join(format!("run-{started}"));
    let quiet = rounds_of(imc, rounds, ("as the machine is:", "quiet"), keep)?;
    let loaded = {
        let _hogs = Hogs::start()?;
        let what = ("beside two CPU hogs and a page faulter:", "loaded");
        rounds_of(imc, rounds, what, keep)?
    };
    println!();
    println!(
        "imc validate, {rounds} round(s) a mode, as this machine is and beside two CPU hogs and a \
         page-faulting process (worst: the bound's figure; raw: without the allowance for what imc \
         said it could not place; runnable: other tasks runnable beside the workloads)"
    );
    println!(
        "{:<14} {:>8} {:>8} {:>8} {:>9}   {:>8} {:>8} {:>8} {:>9}",
        "mode", "quiet", "worst", "raw", "runnable", "loaded", "worst", "raw", "runnable"
    );
    let mut all = true;
    for ((name, _), (q, l)) in LOAD_MODES.iter().zip(quiet.iter().zip(&loaded)) {
        all &= q.passed == q.rounds && l.passed == l.rounds;
        println!(
            "{name:<14} {:>8} {:>8.4} {:>8.4} {:>9.1}   {:>8} {:>8.4} {:>8.4} {:>9.1}",
            format!("{}/{}", q.passed, q.rounds),
            q.worst,
            q.worst_raw,
            q.runnable,
            format!("{}/{}", l.passed, l.rounds),
            l.worst,
            l.worst_raw,
            l.runnable
        );
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn live_and_rounds_are_taken_out_and_checked() {
        let live = |rounds, load| Some(Live { rounds, load });
        let mut a = strings(&["--live", "--rounds", "3", "a.json"]);
        assert_eq!(take_live(&mut a).unwrap(), live(3, false));
        assert_eq!(a, ["a.json"]);
        let mut a = strings(&["--live"]);
        assert_eq!(take_live(&mut a).unwrap(), live(5, false));
        assert!(take_live(&mut strings(&["--live", "--rounds", "0"])).is_err());
        assert!(take_live(&mut strings(&["--live", "--rounds"])).is_err());
        assert!(take_live(&mut strings(&["--rounds", "2"])).is_err());
        assert!(take_live(&mut strings(&["--load"])).is_err());
        assert_eq!(take_live(&mut strings(&["a.json"])).unwrap(), None);
        let mut a = strings(&["--load", "--live"]);
        assert_eq!(take_live(&mut a).unwrap(), live(10, true));
        assert!(a.is_empty());
        let mut a = strings(&["--live", "--load", "--rounds", "2"]);
        assert_eq!(take_live(&mut a).unwrap(), live(2, true));
    }

    #[test]
    fn a_failed_rounds_report_is_named_by_its_load_mode_and_round() {
        assert_eq!(kept_name("loaded", "-I 100", 3), "loaded--I-100-3.json");
        assert_eq!(kept_name("quiet", "defaults", 10), "quiet-defaults-10.json");
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
    fn a_mode_counts_its_passes_worst_error_and_mean_load() {
        let mut m = ModeRounds::default();
        m.add(&serde_json::json!({
            "pass": true,
            "workloads": [{"error": 0.002, "error_raw": 0.01}, {"error": 0.004, "error_raw": 0.004}],
            "load": {"others_runnable_mean": 3.0}
        }));
        m.add(&serde_json::json!({
            "pass": false,
            "workloads": [{"error": 0.03, "error_raw": 0.03}],
            "load": {"others_runnable_mean": 1.0}
        }));
        assert_eq!((m.passed, m.rounds, m.worst, m.runnable), (1, 2, 0.03, 2.0));
        assert_eq!(m.worst_raw, 0.03);
    }

    #[test]
    fn precise_and_weight_pass_on_to_validate() {
        let a = strings(&["--precise", "--weight", "cpu-time", "--json", "s.json"]);
        assert_eq!(validate_args(&a), ["--precise", "--weight", "cpu-time"]);
    }
}

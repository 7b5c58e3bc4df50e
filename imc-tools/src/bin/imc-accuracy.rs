//! `cargo xtask accuracy`: runs accuracy scenarios (tests/scenarios/README.md) through the real
//! plan, a synthesized record stream and the real attributor, and prints per task the truth,
//! the attributed bytes and the error.
//!
//!   imc-accuracy [--weight auto|cpu-time] [--json] SCENARIO.json...
//!
//! Text: a table per scenario and its summary lines. `--json`: one object per scenario per line.
//! Bad input (an unreadable or malformed scenario, an unknown field, an absurd value): one line
//! naming the file and the field on stderr, exit 2, before anything runs.
use imc::plan::drain::{BATCH_MS, period_ms};
use imc_sim::scenario::{self, RunOptions, Weigh};
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

const USAGE: &str =
    "usage: imc-accuracy [--weight auto|cpu-time] [--precise] [--json] SCENARIO.json...";

fn bad(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("imc-accuracy: {msg}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let Args {
        weigh,
        json,
        precise,
        files,
    } = match parse_args() {
        Ok(a) => a,
        Err(code) => return code,
    };
    // Every file is checked before any runs: a typo in the last does not cost the first's run.
    let mut loaded = Vec::new();
    for f in &files {
        match scenario::load(f) {
            Ok(l) => loaded.push(l),
            Err(e) => return bad(e),
        }
    }
    let mut out = std::io::stdout().lock();
    let mut worst = 0.0f64;
    for l in &loaded {
        let interval = l.file.interval_ms;
        let opts = RunOptions {
            weigh,
            drain_ms: u64::from(period_ms(interval, true)),
            batch_ms: Some(BATCH_MS),
            precise,
        };
        let outcome = match run_scenario(l, opts) {
            Ok(o) => o,
            Err(code) => return code,
        };
        worst = worst.max(outcome.max_error);
        let text = if json {
            match serde_json::to_string(&outcome) {
                Ok(s) => s + "\n",
                Err(e) => {
                    eprintln!("imc-accuracy: {e}");
                    return ExitCode::FAILURE;
                }
            }
        } else {
            outcome.render() + "\n"
        };
        if let Err(e) = out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
            eprintln!("imc-accuracy: writing the results: {e}");
            return ExitCode::FAILURE;
        }
    }
    if !json && loaded.len() > 1 {
        let _ = writeln!(
            out,
            "{} scenario(s), largest max_error {worst:.4}",
            loaded.len()
        );
    }
    ExitCode::SUCCESS
}

/// The command line.
struct Args {
    weigh: Weigh,
    json: bool,
    precise: bool,
    files: Vec<std::path::PathBuf>,
}

/// The command line, or the exit code to leave with (a bad one, or --help).
fn parse_args() -> Result<Args, ExitCode> {
    let mut weigh = Weigh::Auto;
    let mut json = false;
    let mut precise = false;
    let mut files = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => json = true,
            "--precise" => precise = true,
            "--weight" => match args.next().as_deref() {
                Some("auto") => weigh = Weigh::Auto,
                Some("cpu-time") => weigh = Weigh::CpuTime,
                Some(other) => {
                    return Err(bad(format!(
                        "--weight {other}: expected auto or cpu-time (the simulator has no \
                         core PMU to resolve an event name against)"
                    )));
                }
                None => return Err(bad("--weight needs a value: auto or cpu-time")),
            },
            "-h" | "--help" => {
                println!("{USAGE}");
                return Err(ExitCode::SUCCESS);
            }
            s if s.starts_with('-') && s.len() > 1 => {
                return Err(bad(format!("unknown option {s}; {USAGE}")));
            }
            _ => files.push(std::path::PathBuf::from(a)),
        }
    }
    if files.is_empty() {
        return Err(bad(format!("no scenario given; {USAGE}")));
    }
    Ok(Args {
        weigh,
        json,
        precise,
        files,
    })
}

/// One scenario's outcome; with the kernel's aggregates, also its max_error from a record per
/// switch on the same timeline. Long runs say where they are on stderr.
fn run_scenario(l: &scenario::Loaded, opts: RunOptions) -> Result<scenario::Outcome, ExitCode> {
    let started = Instant::now();
    let mut last_said = Instant::now();
    let name = l.file.name.clone();
    let mut progress = |done: f64| {
        // Long runs say where they are, at most every two seconds.
        if last_said.elapsed().as_secs_f64() >= 2.0 && done < 1.0 {
            eprintln!("imc-accuracy: {name}: {:.0}% simulated", done * 100.0);
            last_said = Instant::now();
        }
    };
    let mut outcome = match l.run(&opts, &mut progress) {
        Ok(o) => o,
        Err(e) => return Err(bad(e)),
    };
    // The kernel's aggregates against a record per switch, from the same timeline.
    if outcome.aggregated {
        let per_switch = RunOptions {
            precise: true,
            ..opts
        };
        match l.run(&per_switch, &mut progress) {
            Ok(o) => outcome.precise_max_error = Some(o.max_error),
            Err(e) => return Err(bad(e)),
        }
    }
    if started.elapsed().as_secs() >= 2 {
        eprintln!(
            "imc-accuracy: {}: done in {:.1} s",
            outcome.name,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(outcome)
}

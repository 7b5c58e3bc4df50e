//! `cargo xtask bench-report [--tasks N] [--runs R]`: `imc report`'s peak memory on recordings
//! of many tasks, in every output mode, against the same modes on a recording of few tasks
//! measured in the same run (what the program costs before any task: its code, its runtime,
//! its fixed tables).
//!
//! Two recordings of N tasks (default a million), written by the simulator's `churn`: one where
//! 100 new processes start in every 100 ms interval (process churn over hours), one with all N in
//! a single interval. The baseline is a churn recording of 1000 tasks. Each report runs R times
//! (default 2) as a child of this process, its peak resident set read from `wait4`'s rusage;
//! the figures are the mean and its standard error. The target: 200 MB in every mode.
//!
//! `--stacks N` measures instead the stack outputs (`--json`'s top functions, `--folded`,
//! `--flamegraph`, `--pprof`, `--perfetto`) on a recording with stacks holding N distinct
//! stacks of 16 frames (the simulator's `stacks`), against the same modes on 1000 distinct
//! stacks; the target there: 300 MB. It prints the recording's bytes per distinct stack too.
//!
//!   imc-bench-report IMC [--tasks N] [--runs R] [--stacks N]
use imc_sim::record::{churn, stacks};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

const TARGET_MB: f64 = 200.0;
const BASELINE_TASKS: u32 = 1000;

struct Opts {
    imc: PathBuf,
    tasks: u32,
    runs: usize,
    /// `--stacks N`: the stack outputs on N distinct stacks instead.
    stacks: Option<u32>,
}

fn opts() -> Result<Opts, String> {
    let mut args = std::env::args().skip(1);
    let imc = args
        .next()
        .ok_or("usage: imc-bench-report IMC [--tasks N] [--runs R] [--stacks N]")?;
    let mut o = Opts {
        imc: imc.into(),
        tasks: 1_000_000,
        runs: 2,
        stacks: None,
    };
    while let Some(a) = args.next() {
        let v = args.next().ok_or(format!("{a} needs a value"))?;
        let n: u64 = v.parse().map_err(|_| format!("{a} {v}: not a number"))?;
        match a.as_str() {
            "--tasks" if (1..=10_000_000).contains(&n) => o.tasks = n as u32,
            "--runs" if (1..=20).contains(&n) => o.runs = n as usize,
            "--stacks" if (1..=10_000_000).contains(&n) => o.stacks = Some(n as u32),
            _ => return Err(format!("{a} {v}: unknown, or out of range")),
        }
    }
    Ok(o)
}

/// Runs `imc report FILE ARGS` and returns its peak resident set (MB, 10^6 bytes).
fn peak_mb(imc: &Path, file: &Path, args: &[String]) -> Result<f64, String> {
    let child = Command::new(imc)
        .arg("report")
        .arg(file)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("running {}: {e}", imc.display()))?;
    let mut status = 0;
    // SAFETY: rusage is plain data, valid when zeroed.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pid is our own child's, status and usage valid for writes.
    let r = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    if r < 0 {
        return Err(format!("wait4: {}", std::io::Error::last_os_error()));
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(format!(
            "imc report {} {args:?} failed ({status:#x})",
            file.display()
        ));
    }
    // ru_maxrss is in KiB.
    Ok(usage.ru_maxrss as f64 * 1024.0 / 1e6)
}

/// A directory of this run's own under the system's temporary directory, removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch, String> {
        let p = std::env::temp_dir().join(format!("imc-bench-report.{}", std::process::id()));
        std::fs::create_dir(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(Scratch(p))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn mean_se(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, (var / n).sqrt())
}

fn modes(dir: &Path) -> Vec<(&'static str, Vec<String>)> {
    let out = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        ("text", vec![]),
        ("--json", v(&["--json"])),
        ("--bursts", v(&["--bursts", "--burst-threshold", "1"])),
        (
            "--perfetto",
            vec!["--perfetto".into(), out("t.pftrace"), "--force".into()],
        ),
        (
            "--plot",
            vec!["--plot".into(), out("p.svg"), "--force".into()],
        ),
        ("--by comm", v(&["--by", "comm"])),
        ("--by cgroup", v(&["--by", "cgroup"])),
    ]
}

/// Frames of each stack in the stacks recording.
const STACK_DEPTH: u32 = 16;
const STACK_TARGET_MB: f64 = 300.0;
const BASELINE_STACKS: u32 = 1000;

fn stack_modes(dir: &Path) -> Vec<(&'static str, Vec<String>)> {
    let out = |flag: &str, name: &str| {
        let path = dir.join(name).to_string_lossy().into_owned();
        vec![flag.to_string(), path, "--force".into()]
    };
    vec![
        ("--json", vec!["--json".into()]),
        ("--folded", out("--folded", "s.folded")),
        ("--flamegraph", out("--flamegraph", "s.svg")),
        ("--pprof", out("--pprof", "s.pb.gz")),
        ("--perfetto", out("--perfetto", "s.pftrace")),
    ]
}

/// Writes a recording in a child (`--write…` of this program): a child's peak resident set
/// starts from its parent's at fork.
fn write_in_child(args: &[String]) -> Result<(), String> {
    let me = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let st = Command::new(me)
        .args(args)
        .status()
        .map_err(|e| format!("writing {}: {e}", args[1]))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("writing {} failed: {st}", args[1]))
    }
}

/// The stack outputs' peak memory on `n` distinct stacks beside [`BASELINE_STACKS`].
fn run_stacks(o: &Opts, n: u32) -> Result<bool, String> {
    let dir = Scratch::new()?;
    let (base, many) = (dir.path().join("base.imc"), dir.path().join("many.imc"));
    eprintln!("bench-report: writing a recording of {n} distinct stacks");
    for (p, k) in [(&base, BASELINE_STACKS), (&many, n)] {
        let p = p.to_string_lossy().into_owned();
        write_in_child(&["--write-stacks".into(), p, k.to_string()])?;
    }
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    println!(
        "bench-report: recording of {n} distinct stacks of {STACK_DEPTH} frames: {:.1} MB, {:.0} B per distinct stack",
        size(&many) as f64 / 1e6,
        size(&many) as f64 / f64::from(n)
    );
    println!(
        "bench-report: peak RSS of imc report (MB, mean ± s.e. of {} runs); baseline: {BASELINE_STACKS} distinct stacks, same mode, same run; target <= {STACK_TARGET_MB} MB",
        o.runs
    );
    println!(
        "{:<14} {:>18} {:>24}",
        "mode",
        "baseline",
        format!("{n} stacks")
    );
    let rows = Rows {
        files: &[&base, &many],
        target_mb: STACK_TARGET_MB,
        widths: &[14, 18, 24],
    };
    rows.measure(o, stack_modes(dir.path()))
}

/// A table's rows: each mode's peak memory on each file (the first the baseline), and whether
/// every mode is within the target on every other file.
struct Rows<'a> {
    files: &'a [&'a Path],
    target_mb: f64,
    /// The mode column's width, then each file's.
    widths: &'a [usize],
}

impl Rows<'_> {
    fn measure(&self, o: &Opts, modes: Vec<(&str, Vec<String>)>) -> Result<bool, String> {
        let mut within = true;
        for (name, args) in modes {
            let mut line = format!("{name:<w$}", w = self.widths[0]);
            for (i, file) in self.files.iter().enumerate() {
                let runs: Vec<f64> = (0..o.runs)
                    .map(|_| peak_mb(&o.imc, file, &args))
                    .collect::<Result<_, _>>()?;
                let (m, se) = mean_se(&runs);
                within &= i == 0 || m <= self.target_mb;
                let cell = format!("{m:.1} ± {se:.1}");
                line.push_str(&format!(" {cell:>w$}", w = self.widths[i + 1]));
            }
            println!("{line}");
        }
        println!(
            "{}",
            if within {
                "every mode within the target"
            } else {
                "OVER the target in some mode"
            }
        );
        Ok(within)
    }
}

fn run() -> Result<bool, String> {
    let o = opts()?;
    if let Some(n) = o.stacks {
        return run_stacks(&o, n);
    }
    let dir = Scratch::new()?;
    let (base, churned, one) = (
        dir.path().join("base.imc"),
        dir.path().join("churn.imc"),
        dir.path().join("one.imc"),
    );
    eprintln!("bench-report: writing recordings of {} tasks", o.tasks);
    // The simulator's writer takes a gigabyte for a million tasks: written by children.
    let write = |p: &Path, tasks: u32, per: u32| {
        let p = p.to_string_lossy().into_owned();
        write_in_child(&["--write".into(), p, tasks.to_string(), per.to_string()])
    };
    write(&base, BASELINE_TASKS, 100)?;
    write(&churned, o.tasks, 100)?;
    write(&one, o.tasks, o.tasks)?;
    println!(
        "bench-report: peak RSS of imc report (MB, mean ± s.e. of {} run{}); baseline: {BASELINE_TASKS} tasks, same mode, same run; target <= {TARGET_MB} MB",
        o.runs,
        if o.runs == 1 { "" } else { "s" }
    );
    println!(
        "{:<12} {:>18} {:>26} {:>24}",
        "mode", "baseline", "churn (100 new / 100 ms)", "all in one interval"
    );
    let rows = Rows {
        files: &[&base, &churned, &one],
        target_mb: TARGET_MB,
        widths: &[12, 18, 26, 24],
    };
    rows.measure(&o, modes(dir.path()))
}

/// `--write PATH TASKS PER_INTERVAL`: one recording, in a process of its own.
fn write_recording(args: &[String]) -> Result<bool, String> {
    let [path, tasks, per] = args else {
        return Err("--write PATH TASKS PER_INTERVAL".into());
    };
    let n = |v: &String| v.parse::<u32>().map_err(|_| format!("{v}: not a number"));
    churn(Path::new(path), n(tasks)?, n(per)?).map_err(|e| format!("{path}: {e}"))?;
    Ok(true)
}

/// `--write-stacks PATH DISTINCT`: the stacks recording, in a process of its own.
fn write_stacks(args: &[String]) -> Result<bool, String> {
    let [path, distinct] = args else {
        return Err("--write-stacks PATH DISTINCT".into());
    };
    let n = distinct
        .parse::<u32>()
        .map_err(|_| format!("{distinct}: not a number"))?;
    stacks(Path::new(path), n, STACK_DEPTH).map_err(|e| format!("{path}: {e}"))?;
    Ok(true)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = if args.first().is_some_and(|a| a == "--write") {
        write_recording(&args[1..])
    } else if args.first().is_some_and(|a| a == "--write-stacks") {
        write_stacks(&args[1..])
    } else {
        run()
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("bench-report: {e}");
            ExitCode::from(2)
        }
    }
}

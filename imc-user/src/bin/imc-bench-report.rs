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
//!   imc-bench-report IMC [--tasks N] [--runs R]
use imc::simulator::record::churn;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

const TARGET_MB: f64 = 200.0;
const BASELINE_TASKS: u32 = 1000;

struct Opts {
    imc: PathBuf,
    tasks: u32,
    runs: usize,
}

fn opts() -> Result<Opts, String> {
    let mut args = std::env::args().skip(1);
    let imc = args
        .next()
        .ok_or("usage: imc-bench-report IMC [--tasks N] [--runs R]")?;
    let mut o = Opts {
        imc: imc.into(),
        tasks: 1_000_000,
        runs: 2,
    };
    while let Some(a) = args.next() {
        let v = args.next().ok_or(format!("{a} needs a value"))?;
        let n: u64 = v.parse().map_err(|_| format!("{a} {v}: not a number"))?;
        match a.as_str() {
            "--tasks" if (1..=10_000_000).contains(&n) => o.tasks = n as u32,
            "--runs" if (1..=20).contains(&n) => o.runs = n as usize,
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

fn run() -> Result<bool, String> {
    let o = opts()?;
    let dir = Scratch::new()?;
    let (base, churned, one) = (
        dir.path().join("base.imc"),
        dir.path().join("churn.imc"),
        dir.path().join("one.imc"),
    );
    eprintln!("bench-report: writing recordings of {} tasks", o.tasks);
    // Written by children: a child's peak resident set starts from its parent's at fork, and
    // the simulator's writer takes a gigabyte for a million tasks.
    let write = |p: &Path, tasks: u32, per: u32| {
        let me = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
        let st = Command::new(me)
            .arg("--write")
            .arg(p)
            .args([tasks.to_string(), per.to_string()])
            .status()
            .map_err(|e| format!("writing {}: {e}", p.display()))?;
        if st.success() {
            Ok(())
        } else {
            Err(format!("writing {} failed: {st}", p.display()))
        }
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
    let mut within = true;
    for (name, args) in modes(dir.path()) {
        let mut cells = Vec::new();
        for (i, file) in [&base, &churned, &one].into_iter().enumerate() {
            let runs: Vec<f64> = (0..o.runs)
                .map(|_| peak_mb(&o.imc, file, &args))
                .collect::<Result<_, _>>()?;
            let (m, se) = mean_se(&runs);
            within &= i == 0 || m <= TARGET_MB;
            cells.push(format!("{m:.1} ± {se:.1}"));
        }
        println!(
            "{name:<12} {:>18} {:>26} {:>24}",
            cells[0], cells[1], cells[2]
        );
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

/// `--write PATH TASKS PER_INTERVAL`: one recording, in a process of its own.
fn write_recording(args: &[String]) -> Result<bool, String> {
    let [path, tasks, per] = args else {
        return Err("--write PATH TASKS PER_INTERVAL".into());
    };
    let n = |v: &String| v.parse::<u32>().map_err(|_| format!("{v}: not a number"));
    churn(Path::new(path), n(tasks)?, n(per)?).map_err(|e| format!("{path}: {e}"))?;
    Ok(true)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = if args.first().is_some_and(|a| a == "--write") {
        write_recording(&args[1..])
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

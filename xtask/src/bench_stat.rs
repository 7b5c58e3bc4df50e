//! `cargo xtask bench-stat`: `imc stat -I 1 -e msr/tsc/ --duration 10` against
//! `perf stat -I 1 -a -e msr/tsc/ sleep 10`, one after the other on this machine.
//!
//! For each tool: CPU seconds (the schedstat run time of all the process's threads, sampled
//! until it exits, and its children-time in clock ticks after the wait), the fraction of the
//! 10 000 1-ms intervals actually printed, and the worst difference between an interval's
//! reported duration and its measured one. The measurement is the TSC itself: msr/tsc counts TSC ticks on every
//! CPU, so an interval's count / CPUs / TSC rate is how long it really lasted (the rate is
//! calibrated from the whole run). imc reports each interval's duration (the `ms` column); perf
//! reports none, so its users divide by the nominal interval — both that and perf's timestamp
//! differences are shown. imc runs twice: in its default (kernel-timed) mode and forced to read
//! at every deadline (`IMC_STAT_MODE=deadline`), the mode it falls back to when the kernel
//! refuses the grouping. A last short run measures output latency: when each `--json` line
//! reaches the pipe against the end of its interval. `IMC_BENCH_BUSY=1` keeps every CPU busy
//! with a spinning thread throughout (the other case: idle CPUs miss cpu-clock samples and are
//! read from userspace). Beside them, the floor of that design: `imc-workload wake`, a thread
//! per CPU that sleeps to every 1 ms boundary and does nothing else. std only: perf's and imc's text output are parsed here.
use crate::host::online_cpus;
use anyhow::{Context, Result, anyhow, bail};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SECONDS: u64 = 10;
const INTERVAL_MS: f64 = 1.0;
/// imc's CPU at `-I 1` against perf's, at most.
const TARGET_VS_PERF: f64 = 0.125;

/// One tool's run.
struct Run {
    name: &'static str,
    /// Run time from /proc/PID/schedstat, last sample before exit (ns precision).
    cpu_sched_s: f64,
    /// utime+stime of the reaped child from /proc/self/stat (clock ticks, 10 ms).
    cpu_ticks_s: f64,
    wall_s: f64,
    /// (reported duration in s, TSC count summed over CPUs) per interval.
    intervals: Vec<(f64, f64)>,
    /// perf only: the nominal duration users divide by.
    nominal: bool,
    /// imc only: intervals that say a counter was not counted (left out of the error).
    partial: Vec<usize>,
}

fn children_cpu_s() -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Fields after "(comm)": state is field 3; cutime and cstime are fields 16 and 17.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow!("/proc/self/stat: no ')'"))?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> Result<f64> {
        f.get(i - 3)
            .ok_or_else(|| anyhow!("/proc/self/stat: field {i} missing"))?
            .parse::<f64>()
            .context("/proc/self/stat")
    };
    // USER_HZ is 100 on every Linux architecture imc runs on.
    Ok((ticks(16)? + ticks(17)?) / 100.0)
}

/// Run time of every thread of `pid` (imc's readers are threads of their own).
fn schedstat_s(pid: u32) -> Option<f64> {
    let mut ns = 0.0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let Ok(s) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        ns += s.split_whitespace().next()?.parse::<f64>().ok()?;
    }
    Some(ns / 1e9)
}

/// Runs `cmd`, sampling its schedstat every 20 ms, and returns (stdout, stderr, run).
fn measure(name: &'static str, mut cmd: Command) -> Result<(String, String, Run)> {
    measure_lines(name, cmd.stdout(Stdio::piped()), &mut |_| {})
}

/// CLOCK_MONOTONIC of an `Instant`: on Linux std's Instant is a CLOCK_MONOTONIC timespec and its
/// Debug output shows it (`Instant { tv_sec: .., tv_nsec: .. }`); None where it does not.
fn mono_ns(i: Instant) -> Option<u64> {
    let d = format!("{i:?}");
    let field = |name: &str| -> Option<u64> {
        let rest = &d[d.find(name)? + name.len()..];
        let digits: String = rest
            .trim_start_matches([':', ' '])
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        digits.parse().ok()
    };
    Some(field("tv_sec")? * 1_000_000_000 + field("tv_nsec")?)
}

/// Every line of `out`, each sent to `tx` as it arrives: the whole text.
fn forward_lines(out: &mut impl Read, tx: &std::sync::mpsc::Sender<String>) -> String {
    use std::io::BufRead;
    let mut s = String::new();
    let mut r = std::io::BufReader::new(out);
    let mut line = String::new();
    while r.read_line(&mut line).unwrap_or(0) > 0 {
        let _ = tx.send(line.clone());
        s.push_str(&line);
        line.clear();
    }
    s
}

/// Like `measure`, calling `on_line` with each stdout line as it arrives.
fn measure_lines(
    name: &'static str,
    cmd: &mut Command,
    on_line: &mut (dyn FnMut(&str) + Send),
) -> Result<(String, String, Run)> {
    let before = children_cpu_s()?;
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {name}"))?;
    let pid = child.id();
    let mut out = child.stdout.take().context("stdout")?;
    let mut err = child.stderr.take().context("stderr")?;
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let out_t = std::thread::spawn(move || forward_lines(&mut out, &tx));
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut sched = 0.0;
    let mut last_sched = Instant::now() - Duration::from_secs(1);
    let status = loop {
        if last_sched.elapsed() >= Duration::from_millis(20) {
            if let Some(s) = schedstat_s(pid) {
                sched = s;
            }
            last_sched = Instant::now();
        }
        if let Some(st) = child.try_wait()? {
            break st;
        }
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(l) => on_line(&l),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(Duration::from_millis(5))
            }
        }
    };
    while let Ok(l) = rx.try_recv() {
        on_line(&l);
    }
    let wall_s = start.elapsed().as_secs_f64();
    let stdout = out_t
        .join()
        .map_err(|_| anyhow!("stdout reader panicked"))?;
    let stderr = err_t
        .join()
        .map_err(|_| anyhow!("stderr reader panicked"))?;
    if !status.success() {
        bail!("{name} failed ({status}): {}", stderr.trim());
    }
    let ticks = children_cpu_s()? - before;
    Ok((
        stdout,
        stderr,
        Run {
            name,
            cpu_sched_s: sched,
            cpu_ticks_s: ticks,
            wall_s,
            intervals: Vec::new(),
            nominal: false,
            partial: Vec::new(),
        },
    ))
}

fn count(s: &str) -> Option<f64> {
    s.replace(',', "").parse().ok()
}

/// imc's human lines: `time ms count event`; and which of them a `# not counted in this
/// interval:` line follows (a counter the kernel stopped: the count lacks its share).
fn parse_imc(text: &str) -> (Vec<(f64, f64)>, Vec<usize>) {
    let mut rows = Vec::new();
    let mut partial = Vec::new();
    for l in text.lines() {
        if l.starts_with("# not counted in this interval:") && !rows.is_empty() {
            partial.push(rows.len() - 1);
            continue;
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        if l.starts_with('#') || f.len() < 4 || f[3] != "msr/tsc/" {
            continue;
        }
        if let (Some(ms), Some(c)) = (f[1].parse::<f64>().ok(), count(f[2])) {
            rows.push((ms / 1e3, c));
        }
    }
    (rows, partial)
}

/// perf's interval lines: `timestamp count msr/tsc/`; the duration is the timestamp difference.
fn parse_perf(text: &str) -> Vec<(f64, f64, f64)> {
    let mut prev = 0.0;
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 3 || !f.contains(&"msr/tsc/") {
                return None;
            }
            let t: f64 = f[0].parse().ok()?;
            let c = count(f[1])?;
            let d = t - prev;
            prev = t;
            Some((t, d, c))
        })
        .collect()
}

struct Figures {
    cpu_s: f64,
    delivered: f64,
    /// Worst |reported − measured| in µs, and the same against the nominal 1 ms.
    worst_us: f64,
    worst_nominal_us: f64,
}

fn figures(run: &Run, cpus: usize) -> Figures {
    let expected = (SECONDS as f64 * 1e3 / INTERVAL_MS).round();
    let complete = || {
        run.intervals
            .iter()
            .enumerate()
            .filter(|(n, _)| !run.partial.contains(n))
            .map(|(_, i)| *i)
    };
    let tsc: f64 = complete().map(|i| i.1).sum();
    let secs: f64 = complete().map(|i| i.0).sum();
    // TSC ticks per second per CPU, from the whole run.
    let hz = if secs > 0.0 {
        tsc / cpus as f64 / secs
    } else {
        0.0
    };
    let mut worst: f64 = 0.0;
    let mut worst_nominal: f64 = 0.0;
    for (reported, c) in complete() {
        let measured = if hz > 0.0 { c / cpus as f64 / hz } else { 0.0 };
        worst = worst.max((reported - measured).abs());
        worst_nominal = worst_nominal.max((INTERVAL_MS / 1e3 - measured).abs());
    }
    Figures {
        cpu_s: run.cpu_sched_s.max(run.cpu_ticks_s),
        delivered: run.intervals.len() as f64 / expected,
        worst_us: worst * 1e6,
        worst_nominal_us: worst_nominal * 1e6,
    }
}

/// Spinning threads on every CPU until dropped.
struct Busy {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Busy {
    fn start(n: usize) -> Busy {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 1u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                        std::hint::black_box(x);
                    }
                })
            })
            .collect();
        Busy { stop, threads }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Output latency of `imc stat -I 1 --json`: per line, arrival at the pipe minus the line's
/// `t_end_ns` (both CLOCK_MONOTONIC), in ms; sorted.
fn latencies(imc_bin: &Path, secs: u64) -> Result<Vec<f64>> {
    let mut lat = Vec::new();
    let mut cmd = Command::new(imc_bin);
    cmd.args([
        "stat",
        "-I",
        "1",
        "-e",
        "msr/tsc/",
        "--json",
        "--duration",
        &secs.to_string(),
    ]);
    let mut on_line = |l: &str| {
        let Some(now) = mono_ns(Instant::now()) else {
            return;
        };
        let key = "\"t_end_ns\":";
        let Some(i) = l.find(key) else { return };
        let t: String = l[i + key.len()..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        if let Ok(t) = t.parse::<u64>() {
            lat.push(now.saturating_sub(t) as f64 / 1e6);
        }
    };
    measure_lines("imc", &mut cmd, &mut on_line)?;
    lat.sort_by(f64::total_cmp);
    Ok(lat)
}

/// `workload`: imc-workload (imc-tools), whose `wake` mode is the floor of a userspace design.
pub fn run(imc_bin: &Path, workload: &Path) -> Result<()> {
    let cpus = online_cpus()?;
    let secs = SECONDS.to_string();
    let busy = std::env::var("IMC_BENCH_BUSY").is_ok_and(|v| v == "1");
    let _spin = busy.then(|| Busy::start(cpus));

    let imc_args = ["stat", "-I", "1", "-e", "msr/tsc/", "--duration", &secs];
    let mut imc = Command::new(imc_bin);
    imc.args(imc_args);
    let (out, _, mut imc_run) = measure("imc", imc)?;
    (imc_run.intervals, imc_run.partial) = parse_imc(&out);

    let mut imc_dl = Command::new(imc_bin);
    imc_dl.env("IMC_STAT_MODE", "deadline").args(imc_args);
    let (out, _, mut dl_run) = measure("imc-dl", imc_dl)?;
    (dl_run.intervals, dl_run.partial) = parse_imc(&out);

    let mut perf = Command::new("perf");
    perf.args(["stat", "-I", "1", "-a", "-e", "msr/tsc/", "sleep", &secs]);
    let (_, err, mut perf_run) = measure("perf", perf)
        .context("perf stat (install Debian's linux-perf: apt-get install linux-perf)")?;
    let perf_lines = parse_perf(&err);
    perf_run.intervals = perf_lines.iter().map(|&(_, d, c)| (d, c)).collect();
    perf_run.nominal = true;

    let mut floor = Command::new(workload);
    floor.args(["wake", &secs]);
    let (_, _, floor_run) = measure("floor", floor)?;

    let lat = latencies(imc_bin, 3)?;

    println!(
        "bench-stat: {SECONDS} s at -I 1 with msr/tsc/ on {cpus} CPUs, {} (measured duration = \
         TSC count / CPUs / calibrated TSC rate; imc-dl = imc forced to deadline reads)",
        if busy {
            "every CPU kept busy by a spinning thread"
        } else {
            "no load added"
        }
    );
    let figs = print_runs([&imc_run, &dl_run, &perf_run], cpus);
    let (i, d, p) = (&figs[0], &figs[1], &figs[2]);
    let imc_partial = imc_run.partial.len();
    let ratio = |a: &Figures| {
        if p.cpu_s > 0.0 {
            a.cpu_s / p.cpu_s
        } else {
            f64::NAN
        }
    };
    println!(
        "ratios: imc/perf CPU = {:.3} (target <= {TARGET_VS_PERF}), imc-dl/perf = {:.3}; intervals \
         delivered imc {:.1}% vs perf {:.1}% (target imc >= 99%); worst interval-duration error \
         imc {:.1} µs vs perf {:.1} µs against its timestamps, {:.1} µs against the nominal 1 ms \
         ({} imc intervals said a counter was not counted, a kernel throttle: left out)",
        ratio(i),
        ratio(d),
        i.delivered * 100.0,
        p.delivered * 100.0,
        i.worst_us,
        p.worst_us,
        p.worst_nominal_us,
        imc_partial
    );
    print_floor(&floor_run, &figs[0], p.cpu_s, cpus);
    print_latency(&lat);
    Ok(())
}

/// The floor of any design that wakes a thread on every CPU at every boundary (imc's local
/// readers on idle CPUs are one): CPU seconds of threads that only sleep to each 1 ms boundary,
/// beside imc's and perf's in the same run, and the target's budget.
fn print_floor(floor: &Run, imc: &Figures, perf_cpu_s: f64, cpus: usize) {
    println!(
        "{}",
        floor_line(
            figures(floor, cpus).cpu_s,
            floor.wall_s,
            imc.cpu_s,
            perf_cpu_s,
            cpus
        )
    );
}

fn floor_line(floor_s: f64, wall_s: f64, imc_s: f64, perf_s: f64, cpus: usize) -> String {
    let budget = perf_s * TARGET_VS_PERF;
    format!(
        "floor: a thread pinned to each of the {cpus} CPUs, sleeping to every 1 ms boundary and \
         doing nothing else (imc-workload wake), used {floor_s:.4} CPU s in {wall_s:.2} s: \
         {:.3} of perf's CPU and {:.3} of imc's; the target's budget ({TARGET_VS_PERF} of \
         perf's) is {budget:.4} s{}",
        floor_s / perf_s,
        floor_s / imc_s,
        if floor_s > budget {
            "; the floor alone is over it, so no design that wakes userspace on every CPU every \
             millisecond meets the target here"
        } else {
            ""
        }
    )
}

/// The table of the three runs (imc, imc forced to deadline reads, perf): their figures.
fn print_runs(runs: [&Run; 3], cpus: usize) -> Vec<Figures> {
    println!(
        "{:<6} {:>10} {:>10} {:>9} {:>8} {:>13} {:>12} {:>11}",
        "tool", "cpu s", "ticks s", "% core", "wall s", "intervals", "worst |Δ| µs", "vs 1ms µs"
    );
    let mut figs = Vec::new();
    for r in runs {
        let f = figures(r, cpus);
        println!(
            "{:<6} {:>10.4} {:>10.2} {:>8.2}% {:>8.2} {:>6} {:>5.1}% {:>12.1} {:>11}",
            r.name,
            r.cpu_sched_s,
            r.cpu_ticks_s,
            f.cpu_s / r.wall_s * 100.0,
            r.wall_s,
            r.intervals.len(),
            f.delivered * 100.0,
            f.worst_us,
            if r.nominal {
                format!("{:.1}", f.worst_nominal_us)
            } else {
                "-".to_string()
            }
        );
        figs.push(f);
    }
    figs
}

/// imc's output latency at -I 1: median, p99 and max of `lat` (sorted, ms).
fn print_latency(lat: &[f64]) {
    if lat.is_empty() {
        println!("latency: not measured (no CLOCK_MONOTONIC from Instant here)");
    } else {
        let q = |f: f64| lat[((lat.len() - 1) as f64 * f) as usize];
        println!(
            "imc output latency at -I 1 (line at the pipe − interval end, {} lines): median \
             {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            lat.len(),
            q(0.5),
            q(0.99),
            lat[lat.len() - 1]
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_outputs() {
        let imc = "#       time        ms                count  event\n    0.001000     1.000            4,595,338  msr/tsc/\n";
        assert_eq!(parse_imc(imc), (vec![(0.001, 4595338.0)], vec![]));
        let throttled = format!(
            "{imc}    0.002000     1.000            1,000,000  msr/tsc/\n# not counted in this interval: msr msr/tsc/ on CPU 0\n"
        );
        assert_eq!(parse_imc(&throttled).1, vec![1]);
        let perf = "#           time             counts unit events\n     0.001105205            6431142      msr/tsc/\n     0.002633551          6,322,856      msr/tsc/\n";
        let p = parse_perf(perf);
        assert_eq!(p.len(), 2);
        assert!((p[1].1 - 0.001528346).abs() < 1e-12);
        assert_eq!(p[1].2, 6322856.0);
    }

    #[test]
    fn instants_are_clock_monotonic() {
        let a = mono_ns(Instant::now()).expect("Instant shows its timespec");
        std::thread::sleep(Duration::from_millis(5));
        let b = mono_ns(Instant::now()).unwrap();
        assert!(b - a >= 5_000_000 && b - a < 1_000_000_000, "{a} {b}");
    }

    #[test]
    fn the_floor_is_set_against_the_targets_budget() {
        // perf 0.96 s: a budget of 0.12 s. A floor of 0.31 s is over it.
        let over = floor_line(0.31, 10.0, 0.333, 0.96, 2);
        assert!(over.contains("used 0.3100 CPU s in 10.00 s"), "{over}");
        assert!(
            over.contains("0.323 of perf's CPU and 0.931 of imc's"),
            "{over}"
        );
        assert!(
            over.contains("is 0.1200 s; the floor alone is over it"),
            "{over}"
        );
        let under = floor_line(0.1, 10.0, 0.333, 0.96, 2);
        assert!(under.ends_with("is 0.1200 s"), "{under}");
    }
}

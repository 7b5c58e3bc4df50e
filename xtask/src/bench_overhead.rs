//! `cargo xtask bench-overhead`: what `imc record --freq 1000` costs the workload it watches.
//!
//! Two workloads (imc-user/src/bin/imc-workload.rs), each a fixed amount of work on one thread
//! per online CPU: memory-bound (streaming read-modify-write over 256 MiB) and compute-bound
//! (a register-only integer/FP chain). Each runs N rounds of "alone" and "under `imc record
//! --freq F -o FILE -- workload`", the order swapped every round so drift hits both sides. The
//! workload times its own work (wall and user+sys), so imc's start-up and tear-down are outside
//! the figure, and, just outside that window, reads its parent's CPU time and BPF program run
//! counts: under imc these are imc's own CPU and its ticks during exactly the measured work.
//!
//! A run under imc that did not sample (no BPF program, far fewer ticks than freq × CPUs ×
//! seconds, an empty recording or one `imc report` cannot read) stops the benchmark with an
//! error: a benchmark of nothing must not print a PASS. The PASS/FAIL against the 0.5% target
//! is a printed verdict, not the exit code. std only: the workload's line and the few fields of
//! `imc report --json` needed here are parsed by hand.
//!
//! Environment: IMC_BENCH_ROUNDS (6), IMC_BENCH_SECONDS of work per run (1.5), IMC_BENCH_FREQ
//! (1000), IMC_BENCH_RT=1 to run imc and the workload at SCHED_FIFO priority, above whatever
//! else keeps a shared machine busy (which otherwise decides the wall times, not imc),
//! IMC_BENCH_PERF=0 to leave out the reference side: the workload under `perf record` sampling
//! cpu-clock at the same rate, which tells imc's own cost from what the timer costs here.
use anyhow::{Context, Result, anyhow, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The issue's target: slowdown of the workload under `imc record` at most this.
const TARGET_PCT: f64 = 0.5;
/// Ticks counted over the window against freq × CPUs × seconds: below this imc was not
/// sampling the run (or not on every CPU); above, the count is not what it claims to be.
const TICKS_MIN_RATIO: f64 = 0.8;
const TICKS_MAX_RATIO: f64 = 1.25;
/// SCHED_FIFO priorities with IMC_BENCH_RT=1: imc above the workload, so that when it wakes it
/// takes its CPU time from the workload at once, as it would from a busy machine's fair share,
/// while other work on the machine (builds, other users) gets neither of their CPUs.
const RT_WORKLOAD: u32 = 10;
const RT_IMC: u32 = 20;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Mem,
    Cpu,
}

impl Kind {
    fn arg(self) -> &'static str {
        match self {
            Kind::Mem => "mem",
            Kind::Cpu => "cpu",
        }
    }
    fn label(self) -> &'static str {
        match self {
            Kind::Mem => "memory-bound (256 MiB read-modify-write passes)",
            Kind::Cpu => "compute-bound (register-only integer/FP chain)",
        }
    }
    /// Work for the calibration run, scaled afterwards to the target duration.
    fn probe_units(self) -> u64 {
        match self {
            Kind::Mem => 8,
            Kind::Cpu => 100,
        }
    }
}

/// The workload's own figures (its `imc-workload:` line).
#[derive(Clone, Debug, Default, PartialEq)]
struct Work {
    elapsed_s: f64,
    cpu_s: f64,
    parent_progs: u64,
    parent_cpu_s: f64,
    bpf_runs: u64,
    bpf_run_s: f64,
}

fn parse_work(stdout: &str) -> Result<Work> {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("imc-workload:"))
        .ok_or_else(|| anyhow!("the workload printed no 'imc-workload:' line: {stdout:?}"))?;
    let get = |k: &str| -> Result<u64> {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
            .ok_or_else(|| anyhow!("no {k}= in the workload's line: {line}"))?
            .parse::<u64>()
            .with_context(|| format!("{k}= in the workload's line: {line}"))
    };
    Ok(Work {
        elapsed_s: get("elapsed_ns")? as f64 / 1e9,
        cpu_s: get("cpu_ns")? as f64 / 1e9,
        parent_progs: get("parent_progs")?,
        parent_cpu_s: get("parent_cpu_ns")? as f64 / 1e9,
        bpf_runs: get("parent_bpf_runs")?,
        bpf_run_s: get("parent_bpf_run_ns")? as f64 / 1e9,
    })
}

/// The raw text of a top-level field of `imc report --json` (its first occurrence: the
/// top-level fields that matter here come before the task and burst lists, and a key in quotes
/// cannot occur inside a JSON string, whose quotes are escaped).
fn json_field<'a>(json: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("\"{key}\":");
    let rest = &json[json.find(&pat)? + pat.len()..];
    let rest = rest.trim_start();
    if let Some(s) = rest.strip_prefix('"') {
        return s.find('"').map(|e| &s[..e]);
    }
    let end = rest.find([',', '}', ']']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

/// What one run under imc showed besides the workload's figures.
#[derive(Clone, Debug, Default)]
struct Recording {
    bytes: u64,
    imc_wall_s: f64,
    source: String,
    lost: u64,
}

struct Bench {
    imc: PathBuf,
    workload: PathBuf,
    dir: PathBuf,
    freq: u32,
    cpus: usize,
    runs: usize,
    rt: bool,
    /// Also time the workload under `perf record` at the same rate (perf is installed).
    perf: bool,
}

impl Bench {
    /// `chrt -f PRIO` before a command when real-time priority was asked for, else nothing.
    fn rt_prefix(&self, prio: u32) -> Vec<String> {
        if self.rt {
            vec!["chrt".into(), "-f".into(), prio.to_string()]
        } else {
            Vec::new()
        }
    }

    fn workload_cmd(&self, kind: Kind, units: u64) -> Vec<String> {
        let mut v = self.rt_prefix(RT_WORKLOAD);
        v.extend([
            self.workload.display().to_string(),
            kind.arg().into(),
            units.to_string(),
            "--probe-parent".into(),
        ]);
        v
    }

    fn alone(&mut self, kind: Kind, units: u64) -> Result<Work> {
        let argv = self.workload_cmd(kind, units);
        let out = Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .with_context(|| format!("running {}", argv[0]))?;
        if !out.status.success() {
            bail!(
                "{} failed ({}): {}",
                argv.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let w = parse_work(&String::from_utf8_lossy(&out.stdout))?;
        if w.parent_progs != 0 {
            bail!(
                "the alone run saw {} BPF programs in its parent",
                w.parent_progs
            );
        }
        Ok(w)
    }

    fn under_imc(&mut self, kind: Kind, units: u64) -> Result<(Work, Recording)> {
        self.runs += 1;
        let file = self.dir.join(format!("run{}.imc", self.runs));
        let freq = self.freq.to_string();
        let mut argv = self.rt_prefix(RT_IMC);
        argv.extend([
            self.imc.display().to_string(),
            "record".into(),
            "--freq".into(),
            freq,
            "-o".into(),
            file.display().to_string(),
            "--".into(),
        ]);
        argv.extend(self.workload_cmd(kind, units));
        let t0 = std::time::Instant::now();
        let out = Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .with_context(|| format!("running {}", argv[0]))?;
        let imc_wall_s = t0.elapsed().as_secs_f64();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            bail!("imc record failed ({}): {}", out.status, stderr.trim());
        }
        let w = parse_work(&String::from_utf8_lossy(&out.stdout))
            .with_context(|| format!("imc record said: {}", stderr.trim()))?;
        // The proof that imc sampled the measured work: its tick program ran on every CPU at
        // the asked rate during the window.
        let expected = self.freq as f64 * self.cpus as f64 * w.elapsed_s;
        let ratio = w.bpf_runs as f64 / expected;
        if w.parent_progs == 0 || !(TICKS_MIN_RATIO..=TICKS_MAX_RATIO).contains(&ratio) {
            bail!(
                "imc record was not sampling the measured run: {} BPF programs, {} ticks in \
                 {:.3} s where {} Hz × {} CPUs makes {expected:.0} (ratio {ratio:.2}, accepted \
                 {TICKS_MIN_RATIO}..{TICKS_MAX_RATIO}); imc said: {}",
                w.parent_progs,
                w.bpf_runs,
                w.elapsed_s,
                self.freq,
                self.cpus,
                stderr.trim()
            );
        }
        let bytes = std::fs::metadata(&file)
            .with_context(|| format!("imc record wrote no {}", file.display()))?
            .len();
        let report = Command::new(&self.imc)
            .arg("report")
            .arg(&file)
            .arg("--json")
            .output()
            .context("running imc report")?;
        let json = String::from_utf8_lossy(&report.stdout);
        if !report.status.success() {
            bail!(
                "imc report {} --json failed ({}): {}",
                file.display(),
                report.status,
                String::from_utf8_lossy(&report.stderr).trim()
            );
        }
        let num = |k: &str| -> Result<u64> {
            json_field(&json, k)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| anyhow!("imc report --json has no numeric {k}: {json}"))
        };
        let covered_s = num("t_end_ns")?.saturating_sub(num("t_start_ns")?) as f64 / 1e9;
        if covered_s < 0.9 * w.elapsed_s {
            bail!(
                "the recording {} covers {covered_s:.3} s, less than the {:.3} s of work it \
                 should contain",
                file.display(),
                w.elapsed_s
            );
        }
        let rec = Recording {
            bytes,
            imc_wall_s,
            source: json_field(&json, "source").unwrap_or("?").to_string(),
            lost: num("lost_samples")?,
        };
        let _ = std::fs::remove_file(&file);
        Ok((w, rec))
    }
}

impl Bench {
    /// The workload under `perf record` sampling cpu-clock at the same rate on every CPU: what
    /// the timer interrupts and a sampler in user space cost here without imc's program.
    fn under_perf(&mut self, kind: Kind, units: u64) -> Result<Work> {
        self.runs += 1;
        let file = self.dir.join(format!("run{}.perf", self.runs));
        let mut argv = self.rt_prefix(RT_IMC);
        argv.extend([
            "perf".into(),
            "record".into(),
            "-q".into(),
            "-e".into(),
            "cpu-clock".into(),
            "-c".into(),
            (1_000_000_000 / self.freq).to_string(),
            "-a".into(),
            "-o".into(),
            file.display().to_string(),
            "--".into(),
        ]);
        argv.extend(self.workload_cmd(kind, units));
        let out = Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .with_context(|| format!("running {}", argv.join(" ")))?;
        let _ = std::fs::remove_file(&file);
        if !out.status.success() {
            bail!(
                "perf record failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        parse_work(&String::from_utf8_lossy(&out.stdout))
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// Coefficient of variation (sample standard deviation / mean).
fn cv(v: &[f64]) -> f64 {
    let n = v.len() as f64;
    if v.len() < 2 {
        return f64::NAN;
    }
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    var.sqrt() / mean
}

fn pct(under: f64, alone: f64) -> f64 {
    (under / alone - 1.0) * 100.0
}

/// Whether a slowdown measured with this standard error is told apart from the target.
fn resolved(slowdown_pct: f64, se_pct: f64) -> bool {
    se_pct.is_finite() && (slowdown_pct - TARGET_PCT).abs() > 2.0 * se_pct
}

fn env_num<T: std::str::FromStr>(name: &str, default: T) -> Result<T> {
    match std::env::var(name) {
        Ok(s) => s
            .trim()
            .parse()
            .map_err(|_| anyhow!("{name}={s:?} is not a valid number; unset it or fix it")),
        Err(_) => Ok(default),
    }
}

fn online_cpus() -> Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .context("/sys/devices/system/cpu/online")?;
    let mut n = 0;
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => b.parse::<usize>()? - a.parse::<usize>()? + 1,
            None => 1,
        };
    }
    Ok(n.max(1))
}

/// What one workload's rounds gave, for the closing lines.
struct Verdict {
    kind: Kind,
    slowdown_pct: f64,
    noise_pct: f64,
    cost_pct: f64,
    /// The same workload's slowdown under `perf record` at the same rate, when perf is here.
    perf_pct: Option<f64>,
}

/// The sides of a round; the order rotates every round so drift on a shared machine hits each
/// side in each position alike.
#[derive(Clone, Copy, PartialEq)]
enum Arm {
    Alone,
    Imc,
    Perf,
}

fn round_order(arms: &[Arm], round: usize) -> Vec<Arm> {
    let mut v = arms.to_vec();
    v.rotate_left(round % arms.len());
    v
}

fn bench_one(b: &mut Bench, kind: Kind, rounds: usize, target_s: f64) -> Result<Verdict> {
    // Scale the fixed work so one run lasts about target_s alone; this run also warms up.
    let probe = b.alone(kind, kind.probe_units())?;
    let units = ((kind.probe_units() as f64 * target_s / probe.elapsed_s).round() as u64).max(1);
    println!(
        "\n{}: {units} units (calibration: {} units in {:.3} s)",
        kind.label(),
        kind.probe_units(),
        probe.elapsed_s
    );
    println!(
        "{:>5} {:>9} {:>9} {:>8} {:>10} {:>10} {:>8} {:>12} {:>11} {:>10} {:>6}{}",
        "round",
        "alone s",
        "imc s",
        "Δ wall",
        "alone cpu",
        "imc cpu",
        "ticks/F",
        "imc ms cpu/s",
        "tick µs/s",
        "rec KiB/s",
        "lost",
        if b.perf {
            format!(" {:>9} {:>8}", "perf s", "Δ perf")
        } else {
            String::new()
        }
    );
    let arms: &[Arm] = if b.perf {
        &[Arm::Alone, Arm::Imc, Arm::Perf]
    } else {
        &[Arm::Alone, Arm::Imc]
    };
    let (mut alone, mut under, mut perf) = (Vec::new(), Vec::new(), Vec::new());
    let mut recs = Vec::new();
    for round in 1..=rounds {
        for arm in round_order(arms, round - 1) {
            match arm {
                Arm::Alone => alone.push(b.alone(kind, units)?),
                Arm::Imc => {
                    let (w, r) = b.under_imc(kind, units)?;
                    under.push(w);
                    recs.push(r);
                }
                Arm::Perf => perf.push(b.under_perf(kind, units)?),
            }
        }
        let (a, u, r) = (&alone[round - 1], &under[round - 1], &recs[round - 1]);
        let expected = b.freq as f64 * b.cpus as f64 * u.elapsed_s;
        println!(
            "{round:>5} {:>9.4} {:>9.4} {:>+7.2}% {:>10.4} {:>10.4} {:>8.3} {:>12.2} {:>11.1} {:>10.1} {:>6}{}",
            a.elapsed_s,
            u.elapsed_s,
            pct(u.elapsed_s, a.elapsed_s),
            a.cpu_s,
            u.cpu_s,
            u.bpf_runs as f64 / expected,
            u.parent_cpu_s / u.elapsed_s * 1e3,
            u.bpf_run_s / u.elapsed_s * 1e6,
            r.bytes as f64 / r.imc_wall_s / 1024.0,
            r.lost,
            perf.get(round - 1)
                .map(|p| format!(
                    " {:>9.4} {:>+7.2}%",
                    p.elapsed_s,
                    pct(p.elapsed_s, a.elapsed_s)
                ))
                .unwrap_or_default()
        );
    }
    let col = |v: &[Work], f: fn(&Work) -> f64| v.iter().map(f).collect::<Vec<f64>>();
    let (aw, uw) = (col(&alone, |w| w.elapsed_s), col(&under, |w| w.elapsed_s));
    let (ac, uc) = (col(&alone, |w| w.cpu_s), col(&under, |w| w.cpu_s));
    let paired: Vec<f64> = aw.iter().zip(&uw).map(|(a, u)| u / a).collect();
    let slowdown = pct(median(&uw), median(&aw));
    // Standard error of a difference of two medians of n runs each, from the alone runs'
    // spread (1.25 σ/√n per median): below it the slowdown is not resolved.
    let noise = 1.25 * cv(&aw) * 100.0 * (2.0 / rounds as f64).sqrt();
    let per_s = |f: fn(&Work) -> f64| median(&under.iter().map(f).collect::<Vec<f64>>());
    let imc_cpu = per_s(|w| w.parent_cpu_s / w.elapsed_s);
    let tick_cpu = per_s(|w| w.bpf_run_s / w.elapsed_s);
    let ns_per_tick = per_s(|w| w.bpf_run_s * 1e9 / w.bpf_runs.max(1) as f64);
    let rec_rate = median(
        &recs
            .iter()
            .map(|r| r.bytes as f64 / r.imc_wall_s)
            .collect::<Vec<f64>>(),
    );
    println!(
        "wall: median alone {:.4} s, under imc {:.4} s: slowdown {slowdown:+.2}% (min {:.4} vs \
         {:.4} s: {:+.2}%; median of paired rounds {:+.2}%)",
        median(&aw),
        median(&uw),
        min(&aw),
        min(&uw),
        pct(min(&uw), min(&aw)),
        (median(&paired) - 1.0) * 100.0
    );
    println!(
        "noise: alone runs σ/mean {:.2}%, spread (max-min)/median {:.2}%; standard error of the \
         slowdown ≈ {noise:.2}%",
        cv(&aw) * 100.0,
        (aw.iter().copied().fold(f64::MIN, f64::max) - min(&aw)) / median(&aw) * 100.0
    );
    println!(
        "cpu (user+sys of the workload): median alone {:.4} s, under imc {:.4} s: {:+.2}%",
        median(&ac),
        median(&uc),
        pct(median(&uc), median(&ac))
    );
    println!(
        "imc record itself: {:.2} ms CPU per second ({:.3}% of one CPU) in user space, plus \
         {:.1} µs/s in its tick program ({ns_per_tick:.0} ns per tick, charged to the workload); \
         recording {:.1} KiB/s",
        imc_cpu * 1e3,
        imc_cpu * 100.0,
        tick_cpu * 1e6,
        rec_rate / 1024.0
    );
    // What the measured costs alone take from a workload that keeps every CPU busy: imc's
    // threads and its tick program run on the workload's CPUs. A lower bound: the timer
    // interrupt around the program and cache effects are not in it.
    let cost_pct = (imc_cpu + tick_cpu) / b.cpus as f64 * 100.0;
    println!(
        "cost-based estimate: (imc CPU + tick program) / {} CPUs = {cost_pct:.3}% of the \
         workload's CPU capacity (lower bound, free of run-to-run noise)",
        b.cpus
    );
    // The workload's own CPU grows by the whole interrupt each tick costs it (entry, perf,
    // the program, exit; in a VM the timer's exits too), of which the program is a part.
    let ticks = per_s(|w| w.bpf_runs as f64);
    println!(
        "workload CPU added per tick: {:.2} µs (median cpu difference / median ticks), of which \
         imc's tick program {:.2} µs",
        (median(&uc) - median(&ac)) / ticks * 1e6,
        ns_per_tick / 1e3
    );
    let perf_pct = (!perf.is_empty()).then(|| {
        let pw = col(&perf, |w| w.elapsed_s);
        let pc = col(&perf, |w| w.cpu_s);
        let pct_wall = pct(median(&pw), median(&aw));
        println!(
            "reference, `perf record -e cpu-clock -c {} -a` (the same timer, no eBPF): median \
             {:.4} s: slowdown {pct_wall:+.2}%; workload cpu {:+.2}%; perf itself {:.2} ms CPU \
             per second",
            1_000_000_000 / b.freq,
            median(&pw),
            pct(median(&pc), median(&ac)),
            median(&col(&perf, |w| w.parent_cpu_s / w.elapsed_s)) * 1e3
        );
        pct_wall
    });
    Ok(Verdict {
        kind,
        slowdown_pct: slowdown,
        noise_pct: noise,
        cost_pct,
        perf_pct,
    })
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

pub fn run(imc: &Path) -> Result<()> {
    let workload = imc.with_file_name("imc-workload");
    if !workload.is_file() {
        bail!(
            "{} missing: it is built with imc (cargo build --release -p imc-user)",
            workload.display()
        );
    }
    let rounds: usize = env_num("IMC_BENCH_ROUNDS", 6)?;
    let target_s: f64 = env_num("IMC_BENCH_SECONDS", 1.5)?;
    let freq: u32 = env_num("IMC_BENCH_FREQ", 1000)?;
    if rounds < 2 || target_s <= 0.0 || freq == 0 {
        bail!("IMC_BENCH_ROUNDS must be >= 2, IMC_BENCH_SECONDS > 0 and IMC_BENCH_FREQ >= 1");
    }
    let rt = std::env::var("IMC_BENCH_RT").is_ok_and(|v| v == "1");
    if rt && Command::new("chrt").arg("--help").output().is_err() {
        bail!("IMC_BENCH_RT=1 runs imc and the workload under chrt: install util-linux");
    }
    let perf = std::env::var("IMC_BENCH_PERF").map_or(true, |v| v != "0")
        && Command::new("perf").arg("--version").output().is_ok();
    let cpus = online_cpus()?;
    let dir = std::env::temp_dir().join(format!("imc-bench-overhead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut b = Bench {
        imc: imc.to_path_buf(),
        workload,
        dir: dir.clone(),
        freq,
        cpus,
        runs: 0,
        rt,
        perf,
    };
    let load = loadavg();
    println!(
        "bench-overhead: workload alone vs under `imc record --freq {freq} -o FILE -- workload`, \
         {rounds} rounds alternating (order rotated each round), {cpus} CPUs, ~{target_s} s of \
         fixed work per run, load average {load} at start{}",
        if rt {
            format!(", SCHED_FIFO: imc {RT_IMC}, workload {RT_WORKLOAD}")
        } else {
            String::new()
        }
    );
    if !rt && load.parse::<f64>().is_ok_and(|l| l > cpus as f64 * 0.5) {
        println!(
            "warning: the machine is busy (load {load} on {cpus} CPUs): other work competes with \
             the workload and the figures below are mostly its noise (IMC_BENCH_RT=1 runs imc and \
             the workload at real-time priority, above it)"
        );
    }
    let result = (|| -> Result<Vec<Verdict>> {
        // One run first, to learn and state the source imc uses here.
        let (_, rec) = b.under_imc(Kind::Cpu, Kind::Cpu.probe_units())?;
        if rec.source.starts_with("proxy:") {
            println!(
                "source: {} — this machine has no memory-controller counters, so imc record \
                 samples its stand-in; the tick, drain and recording costs are the same",
                rec.source
            );
        } else {
            println!("source: {}", rec.source);
        }
        [Kind::Mem, Kind::Cpu]
            .into_iter()
            .map(|k| bench_one(&mut b, k, rounds, target_s))
            .collect()
    })();
    let _ = std::fs::remove_dir_all(&dir);
    let verdicts = result?;
    println!();
    for v in &verdicts {
        println!(
            "verdict {}: {} — slowdown {:+.2}% against the target <= {TARGET_PCT}% ({}; \
             standard error ≈ {:.2}%; cost-based lower bound {:.3}%; perf record at the same \
             rate {})",
            v.kind.arg(),
            if v.slowdown_pct <= TARGET_PCT {
                "PASS"
            } else {
                "FAIL"
            },
            v.slowdown_pct,
            if resolved(v.slowdown_pct, v.noise_pct) {
                "resolved: more than 2 standard errors from the target"
            } else {
                "NOT resolved: within 2 standard errors of the target, run again on a quieter \
                 machine or with more rounds"
            },
            v.noise_pct,
            v.cost_pct,
            v.perf_pct
                .map(|p| format!("{p:+.2}%"))
                .unwrap_or_else(|| "not run".into()),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_workload_line() {
        let out = "noise\nimc-workload: mode=mem units=40 threads=2 pid=7 elapsed_ns=1500000000 \
                   cpu_ns=2990000000 parent_progs=1 parent_cpu_ns=15000000 \
                   parent_bpf_runs=3001 parent_bpf_run_ns=2400000\n";
        let w = parse_work(out).unwrap();
        assert_eq!(w.elapsed_s, 1.5);
        assert_eq!(w.cpu_s, 2.99);
        assert_eq!(w.parent_progs, 1);
        assert_eq!(w.parent_cpu_s, 0.015);
        assert_eq!(w.bpf_runs, 3001);
        assert_eq!(w.bpf_run_s, 0.0024);
        // Without the probe figures the line is refused: the check that imc sampled needs them.
        assert!(parse_work("imc-workload: elapsed_ns=1 cpu_ns=1\n").is_err());
        assert!(parse_work("").is_err());
    }

    #[test]
    fn reads_top_level_report_fields() {
        let j = r#"{"t_start_ns":729223277578,"t_end_ns":730294921606,"source":"proxy:page-faults","packages":[{"id":0,"read_bytes":0}],"tasks":[{"comm":"a\"lost_samples\":9"}],"unattributed_bytes":0,"lost_samples":177,"bursts":[{"t_start_ns":1}]}"#;
        assert_eq!(json_field(j, "t_start_ns"), Some("729223277578"));
        assert_eq!(json_field(j, "t_end_ns"), Some("730294921606"));
        assert_eq!(json_field(j, "source"), Some("proxy:page-faults"));
        assert_eq!(json_field(j, "lost_samples"), Some("177"));
        assert_eq!(json_field(j, "missing"), None);
    }

    #[test]
    fn every_side_takes_every_position() {
        let arms = [Arm::Alone, Arm::Imc, Arm::Perf];
        let firsts: Vec<Arm> = (0..3).map(|r| round_order(&arms, r)[0]).collect();
        assert!(arms.iter().all(|a| firsts.contains(a)));
        let two = [Arm::Alone, Arm::Imc];
        assert!(round_order(&two, 0) == [Arm::Alone, Arm::Imc]);
        assert!(round_order(&two, 1) == [Arm::Imc, Arm::Alone]);
    }

    #[test]
    fn statistics() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(min(&[3.0, 1.0, 2.0]), 1.0);
        assert!((cv(&[1.0, 1.0, 1.0])).abs() < 1e-12);
        assert!((cv(&[9.0, 11.0]) - 2f64.sqrt() / 10.0).abs() < 1e-12);
        assert!((pct(1.005, 1.0) - 0.5).abs() < 1e-9);
        assert!(resolved(2.94, 0.71));
        assert!(resolved(-1.0, 0.5));
        assert!(!resolved(0.9, 0.3));
        assert!(!resolved(5.5, 14.0));
        assert!(!resolved(0.0, f64::NAN));
    }
}

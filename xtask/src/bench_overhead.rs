//! `cargo xtask bench-overhead`: what continuous recording costs the workloads it watches, imc
//! against perf, in one run.
//!
//! Three workloads (imc-tools/src/bin/imc-workload.rs), each a fixed amount of work: compute-bound
//! (a register-only chain on one thread per CPU), memory-bound (read-modify-write passes over 256
//! MiB, one thread per CPU) and context-switch-heavy (two threads passing a byte back and forth
//! through pipes). Each runs under every arm:
//!
//! - alone;
//! - `imc record` — the default tick: imc's program on the kernel's own timer tick and on
//!   sched_switch, no interrupt of its own;
//! - `imc record --stacks` — the same, taking the call stack of every charged slice;
//! - `imc record --freq 1000` — imc's own cpu-clock timer on every CPU;
//! - `perf record -e cpu-clock -F 1000 -a` (cpu-clock: there may be no hardware PMU);
//! - for the context-switch workload, `perf record -e sched:sched_switch -a`.
//!
//! Where the machine has no memory-controller counters (imc's plan falls back to a proxy), imc
//! records `-e page-faults` as a stand-in: the tick, drain and recording work are the same.
//!
//! Every imc arm is measured after a warm-up of the same work (`WARM_UP_MS`): a collector is
//! left on, so the figure is what it costs from then on; what its first seconds cost (with
//! `--stacks`, reading the workload's symbols once) is printed apart.
//!
//! Rounds interleave the arms, the order rotated every round so that drift on a shared machine
//! hits every arm in every position alike; a figure is the mean over the rounds of the per-round
//! difference to that round's alone run, ± its standard error. The workload times its own work
//! and, just outside that window, reads the local timer interrupts (/proc/interrupts LOC) and its
//! parent's CPU time and BPF programs' run statistics: under a collector the parent is the
//! collector, so these are its CPU and (for imc) its programs' runs during exactly the measured
//! work.
//!
//! Per arm: slowdown (%), timer interrupts added per CPU-second (the LOC rate minus the same
//! round's alone run's), and collector CPU as a share of the machine ((the collector process's
//! CPU + its BPF run time) / (wall × CPUs); perf's in-kernel sampling is not in its figure). The
//! overhead targets are printed beside them: PASS or FAIL when the figure is more than 2 standard
//! errors from the target, else UNRESOLVED. The verdict is not the exit code, which is nonzero
//! only when the benchmark could not measure — among others when a run under imc did not sample
//! (no BPF program, too few ticks, a recording `imc report` cannot read): a benchmark of nothing
//! must not print a PASS. std only: the few JSON fields needed here are picked out by hand.
//!
//! The context-switch workload has four more arms: `imc record --precise` (a record per switch),
//! and the workload alone with one of the benchmark object's bare sched_switch programs attached:
//! doing nothing (`imc-workload --bare-switch`, the floor of a program on that hook), reading one
//! counter of its CPU (`--bare-switch-read`) and reading the clock (`--bare-switch-clock`), all
//! measured in the same rounds. For it the benchmark prints switches/s beside the records/s imc
//! drained (its `imc record` summary line says how many), imc's CPU split into BPF (run-time
//! statistics) and userspace (its process CPU), and its ns per program run against the bare
//! program's plus the reads it must make plus 20 ns (a counter read's and the clock's cost are the
//! bare programs' differences, per round).
//!
//! Environment: IMC_BENCH_ROUNDS (15), IMC_BENCH_SECONDS of work per run (1.5), IMC_BENCH_RT=1
//! to run the collectors (SCHED_FIFO 20) and the workload (10) at real-time priority, above
//! whatever else keeps a shared machine busy (which otherwise decides the wall times),
//! IMC_BENCH_KINDS=cpu,mem,switch (all three) to run only some workloads.
mod arms;
mod stats;
mod switch;
mod work;

use crate::host::{env_num, loadavg, online_cpus};
use anyhow::{Context, Result, anyhow, bail};
use arms::{Arm, Kind, round_order};
use stats::{Check, check_line, mean_se, pct};
use std::path::{Path, PathBuf};
use std::process::Command;
use work::{Work, json_field, parse_drained, parse_plan_tick, parse_work};

/// The rate of imc's own timer (`--freq`) and of perf's cpu-clock sampling.
const FREQ: u32 = 1000;
/// The overhead targets for the default `imc record`.
const TARGET_IRQ_PCT: f64 = 1.0;
const TARGET_CPU_SLOWDOWN_PCT: f64 = 0.5;
const TARGET_VS_PERF_CLOCK: f64 = 0.2;
const TARGET_VS_PERF_SWITCH: f64 = 0.5;
/// Collector CPU (its process and its BPF run time) as a share (%) of the machine: on the
/// compute and memory workloads, and on the switch-heavy one, where every switch runs the
/// program.
const TARGET_COLLECTOR_PCT: f64 = 0.03;
const TARGET_COLLECTOR_SWITCH_PCT: f64 = 0.1;
/// Switch-heavy: imc's userspace CPU as a share (%) of the machine; the program's ns per switch
/// against the bare program's plus the reads it must make (its counters and the clock) plus
/// this many ns; records drained per second against this many times CPUs × HZ.
const TARGET_USERSPACE_PCT: f64 = 0.1;
const TARGET_NS_OVER_READS: f64 = 20.0;
const TARGET_RECORDS_PER_TICK: f64 = 2.0;
/// `--stacks`: the collector's CPU at most twice its CPU without stacks, and at most 0.1% of
/// the machine.
const TARGET_STACKS_RATIO: f64 = 2.0;
const TARGET_STACKS_PCT: f64 = 0.1;
/// Every imc arm runs its workload this long (ms) before the measured window: a collector is left
/// on, so what it costs from then on is the figure, and what its first seconds cost is printed
/// apart. Long enough for imc to learn its burst threshold's first figures and name the
/// machine's processes, and, with `--stacks`, to drain the workload's first stacks and read and
/// index its symbols (about 0.1 s of CPU for the 170 MB benchmark binary with its debug info).
const WARM_UP_MS: &str = "1500";
/// --freq: ticks counted over the window against FREQ × CPUs × seconds above this: the count
/// is not what it claims to be (the least is per kind, `Kind::freq_min_ratio`).
const TICKS_MAX_RATIO: f64 = 1.25;
/// The default tick: at least this share of the kernel's HZ × CPUs × seconds (busy CPUs tick at
/// HZ; context switches only add program runs).
const KERNEL_TICKS_MIN_RATIO: f64 = 0.5;
/// SCHED_FIFO priorities with IMC_BENCH_RT=1: the collector above the workload, so that when it
/// wakes it takes its CPU time from the workload at once, as it would from a busy machine's fair
/// share, while other work on the machine gets neither's CPUs.
const RT_WORKLOAD: u32 = 10;
const RT_COLLECTOR: u32 = 20;

/// Whether a run under imc sampled the measured work: its programs ran on every CPU at the
/// rate its tick promises (imc's timer: `freq`, less on CPUs that go idle; the kernel's: at
/// least half of HZ, plus context switches).
fn check_ticks(
    w: &Work,
    kind: Kind,
    freq: Option<u32>,
    kernel_hz: f64,
    cpus: usize,
) -> Result<(), String> {
    if w.parent_progs == 0 {
        return Err("no BPF program in imc during the run".into());
    }
    let cpu_s = cpus as f64 * w.elapsed_s;
    match freq {
        Some(f) => {
            // The timer's runs alone: the switch program runs at every context switch besides.
            let expected = f as f64 * cpu_s;
            let ratio = w.timer_runs as f64 / expected;
            let min = kind.freq_min_ratio();
            if !(min..=TICKS_MAX_RATIO).contains(&ratio) {
                return Err(format!(
                    "{} timer ticks in {:.3} s where {f} Hz × {cpus} CPUs makes {expected:.0} \
                     (ratio {ratio:.2}, accepted {min}..{TICKS_MAX_RATIO})",
                    w.timer_runs, w.elapsed_s
                ));
            }
        }
        None => {
            let least = KERNEL_TICKS_MIN_RATIO * kernel_hz * cpu_s;
            if (w.bpf_runs as f64) < least {
                return Err(format!(
                    "{} program runs in {:.3} s where the kernel's tick alone ({kernel_hz} Hz × \
                     {cpus} CPUs) makes {:.0}; at least {least:.0} accepted",
                    w.bpf_runs,
                    w.elapsed_s,
                    kernel_hz * cpu_s
                ));
            }
        }
    }
    Ok(())
}

struct Bench {
    imc: PathBuf,
    workload: PathBuf,
    dir: PathBuf,
    cpus: usize,
    runs: usize,
    rt: bool,
    /// perf is installed: the reference arms run.
    perf: bool,
    /// `-e EVENT` for imc record when the machine has no memory-controller counters.
    imc_events: Vec<String>,
    /// The kernel tick's rate per busy CPU, from imc's plan.
    kernel_hz: f64,
    /// The benchmark's eBPF object (the `bench` feature): the bare sched_switch program.
    bench_object: PathBuf,
}

/// Where imc and imc-workload find an eBPF object that is not the embedded one.
const OBJECT_ENV: &str = "IMC_BPF_OBJECT";

impl Bench {
    /// `chrt -f PRIO` before a command when real-time priority was asked for, else nothing.
    fn rt_prefix(&self, prio: u32) -> Vec<String> {
        if self.rt {
            vec!["chrt".into(), "-f".into(), prio.to_string()]
        } else {
            Vec::new()
        }
    }

    /// `bare`: the workload's flag that attaches a bare sched_switch program, if any.
    fn workload_cmd(&self, kind: Kind, units: u64, extra: &[&str]) -> Vec<String> {
        let mut v = self.rt_prefix(RT_WORKLOAD);
        v.extend([
            self.workload.display().to_string(),
            kind.arg().into(),
            units.to_string(),
            "--probe-parent".into(),
        ]);
        v.extend(extra.iter().map(|f| f.to_string()));
        v
    }

    /// Runs `collector -- workload` (or the workload alone) and returns its figures and what
    /// the command said on stderr.
    fn execute(
        &self,
        collector: Vec<String>,
        kind: Kind,
        units: u64,
        extra: &[&str],
    ) -> Result<(Work, String)> {
        let mut argv = collector;
        argv.extend(self.workload_cmd(kind, units, extra));
        let mut cmd = Command::new(&argv[0]);
        if extra.iter().any(|f| f.starts_with("--bare-")) {
            cmd.env(OBJECT_ENV, &self.bench_object);
        }
        let out = cmd
            .args(&argv[1..])
            .output()
            .with_context(|| format!("running {}", argv.join(" ")))?;
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if !out.status.success() {
            bail!("{} failed ({}): {stderr}", argv.join(" "), out.status);
        }
        let w = parse_work(&String::from_utf8_lossy(&out.stdout))
            .with_context(|| format!("{} said: {stderr}", argv[0]))?;
        Ok((w, stderr))
    }

    fn run_arm(&mut self, arm: Arm, kind: Kind, units: u64) -> Result<Work> {
        match arm {
            Arm::Alone => {
                let (w, _) = self.execute(Vec::new(), kind, units, &[])?;
                if w.parent_progs != 0 {
                    bail!(
                        "the alone run saw {} BPF programs in its parent",
                        w.parent_progs
                    );
                }
                Ok(w)
            }
            Arm::ImcTick => self.under_imc(kind, units, None, &[]),
            Arm::ImcStacks => self.under_imc(kind, units, None, &["--stacks"]),
            Arm::ImcFreq => self.under_imc(kind, units, Some(FREQ), &[]),
            Arm::ImcPrecise => self.under_imc(kind, units, None, &["--precise"]),
            Arm::BareSwitch
            | Arm::BareSwitchRead
            | Arm::BareSwitchClock
            | Arm::BareSwitchCharge
            | Arm::BareHooks => {
                let flag = arm.bare_flag().unwrap_or_default();
                let hz = (self.kernel_hz.round() as u32).to_string();
                let args: &[&str] = if arm == Arm::BareHooks {
                    &[flag, &hz]
                } else {
                    &[flag]
                };
                let (w, stderr) = self.execute(Vec::new(), kind, units, args)?;
                if w.bare_runs == 0 {
                    bail!("the {} never ran: {stderr}", arm.label());
                }
                Ok(w)
            }
            Arm::PerfClock => self.under_perf(kind, units, &["-e", "cpu-clock", "-F", "1000"]),
            Arm::PerfSwitch => self.under_perf(kind, units, &["-e", "sched:sched_switch"]),
        }
    }

    /// The workload under `imc record FLAGS`, measured after imc's warm-up (`WARM_UP_MS`).
    fn under_imc(
        &mut self,
        kind: Kind,
        units: u64,
        freq: Option<u32>,
        flags: &[&str],
    ) -> Result<Work> {
        self.runs += 1;
        let file = self.dir.join(format!("run{}.imc", self.runs));
        let mut argv = self.rt_prefix(RT_COLLECTOR);
        argv.extend([self.imc.display().to_string(), "record".into()]);
        if let Some(f) = freq {
            argv.extend(["--freq".into(), f.to_string()]);
        }
        argv.extend(flags.iter().map(|f| f.to_string()));
        for e in &self.imc_events {
            argv.extend(["-e".into(), e.clone()]);
        }
        argv.extend(["-o".into(), file.display().to_string(), "--".into()]);
        let (mut w, stderr) = self.execute(argv, kind, units, &["--warm-up-ms", WARM_UP_MS])?;
        w.drained = parse_drained(&stderr);
        check_ticks(&w, kind, freq, self.kernel_hz, self.cpus).map_err(|e| {
            anyhow!("imc record was not sampling the measured run: {e}; imc said: {stderr}")
        })?;
        self.check_recording(&file, w.elapsed_s)?;
        let _ = std::fs::remove_file(&file);
        Ok(w)
    }

    /// The recording is readable by `imc report` and covers the measured work.
    fn check_recording(&self, file: &Path, elapsed_s: f64) -> Result<()> {
        let report = Command::new(&self.imc)
            .arg("report")
            .arg(file)
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
        if covered_s < 0.9 * elapsed_s {
            bail!(
                "the recording {} covers {covered_s:.3} s, less than the {elapsed_s:.3} s of work \
                 it should contain",
                file.display()
            );
        }
        Ok(())
    }

    /// The workload under `perf record -a EVENT…`, writing to a file of the run's directory.
    fn under_perf(&mut self, kind: Kind, units: u64, event: &[&str]) -> Result<Work> {
        self.runs += 1;
        let file = self.dir.join(format!("run{}.perf", self.runs));
        let mut argv = self.rt_prefix(RT_COLLECTOR);
        argv.extend(["perf".into(), "record".into(), "-q".into()]);
        argv.extend(event.iter().map(|s| s.to_string()));
        argv.extend([
            "-a".into(),
            "-o".into(),
            file.display().to_string(),
            "--".into(),
        ]);
        let result = self.execute(argv, kind, units, &[]);
        let bytes = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
        let _ = std::fs::remove_file(&file);
        let (w, stderr) = result?;
        if bytes == 0 {
            bail!("perf record wrote nothing to {}: {stderr}", file.display());
        }
        Ok(w)
    }
}

/// One workload's runs, arm by arm, in round order.
struct KindRuns {
    kind: Kind,
    cpus: usize,
    arms: Vec<(Arm, Vec<Work>)>,
}

impl KindRuns {
    fn runs(&self, arm: Arm) -> Option<&[Work]> {
        self.arms
            .iter()
            .find(|(a, _)| *a == arm)
            .map(|(_, v)| v.as_slice())
    }

    /// A per-round figure of `arm` against the same round's alone run.
    fn paired(&self, arm: Arm, f: impl Fn(&Work, &Work) -> f64) -> Option<Vec<f64>> {
        let alone = self.runs(Arm::Alone)?;
        let under = self.runs(arm)?;
        Some(alone.iter().zip(under).map(|(a, u)| f(u, a)).collect())
    }

    fn slowdowns(&self, arm: Arm) -> Option<Vec<f64>> {
        self.paired(arm, |u, a| pct(u.elapsed_s, a.elapsed_s))
    }

    /// Timer interrupts added per CPU-second, as a share (%) of the alone run's rate.
    fn irq_added_pct(&self, arm: Arm) -> Option<Vec<f64>> {
        let c = self.cpus;
        self.paired(arm, |u, a| {
            (u.irq_rate(c) - a.irq_rate(c)) / a.irq_rate(c) * 100.0
        })
    }
}

fn bench_kind(b: &mut Bench, kind: Kind, rounds: usize, target_s: f64) -> Result<KindRuns> {
    // Scale the fixed work so one run lasts about target_s alone; this run also warms up.
    let probe = b.run_arm(Arm::Alone, kind, kind.probe_units())?;
    let units = ((kind.probe_units() as f64 * target_s / probe.elapsed_s).round() as u64).max(1);
    println!(
        "\n{}: {units} units per run (calibration: {} units in {:.3} s)",
        kind.label(),
        kind.probe_units(),
        probe.elapsed_s
    );
    let arms = kind.arms(b.perf);
    let mut runs = KindRuns {
        kind,
        cpus: b.cpus,
        arms: arms.iter().map(|&a| (a, Vec::new())).collect(),
    };
    for round in 0..rounds {
        for arm in round_order(&arms, round) {
            let w = b.run_arm(arm, kind, units)?;
            if let Some((_, v)) = runs.arms.iter_mut().find(|(a, _)| *a == arm) {
                v.push(w);
            }
        }
        let walls: Vec<String> = runs
            .arms
            .iter()
            .map(|(a, v)| format!("{} {:.4}", a.short(), v[round].elapsed_s))
            .collect();
        println!("  round {:>2}: wall s: {}", round + 1, walls.join("  "));
    }
    print_table(&runs);
    for (arm, v) in &runs.arms {
        let once: Vec<f64> = v.iter().filter_map(|w| w.warmup_parent_cpu_s).collect();
        if !once.is_empty() {
            let m = mean_se(&once.iter().map(|s| s * 1e3).collect::<Vec<_>>());
            println!(
                "  {}, its first {WARM_UP_MS} ms (before the window): {:.1} ± {:.1} ms of imc's \
                 CPU{}",
                arm.label(),
                m.mean,
                m.se,
                if *arm == Arm::ImcStacks {
                    " (its first stacks drained, the workload's symbols read and indexed)"
                } else {
                    ""
                }
            );
        }
    }
    Ok(runs)
}

fn print_table(r: &KindRuns) {
    println!(
        "  {:<30} {:>8} {:>17} {:>24} {:>18} {:>9} {:>10} {:>7}",
        "arm",
        "wall s",
        "slowdown",
        "timer irq added /CPU-s",
        "collector CPU",
        "of it BPF",
        "BPF runs/s",
        "ns/run"
    );
    for (arm, runs) in &r.arms {
        println!("  {}", arm_row(r, *arm, runs));
    }
}

/// One arm's line of the table: means over its rounds ± standard errors.
fn arm_row(r: &KindRuns, arm: Arm, runs: &[Work]) -> String {
    let c = r.cpus;
    let each = |f: &dyn Fn(&Work) -> f64| mean_se(&runs.iter().map(f).collect::<Vec<_>>());
    let wall = each(&|w| w.elapsed_s);
    if arm == Arm::Alone {
        let base = each(&|w| w.irq_rate(c));
        let base = format!("(base {:.1} ± {:.1})", base.mean, base.se);
        return format!(
            "{:<30} {:>8.4} {:>17} {base:>24} {:>18} {:>9} {:>10} {:>7}",
            arm.label(),
            wall.mean,
            "—",
            "—",
            "—",
            "—",
            "—"
        );
    }
    let slow = mean_se(&r.slowdowns(arm).unwrap_or_default());
    let added = mean_se(
        &r.paired(arm, |u, a| u.irq_rate(c) - a.irq_rate(c))
            .unwrap_or_default(),
    );
    let added_pct = mean_se(&r.irq_added_pct(arm).unwrap_or_default());
    // A bare arm's collector is its program alone: the workload's, not its parent's.
    let bare = arm.bare_flag().is_some();
    let coll = each(&|w| {
        if bare {
            w.bare_pct(c)
        } else {
            w.collector_pct(c)
        }
    });
    let programs = |w: &Work| {
        if bare {
            (w.bare_runs, w.bare_run_s)
        } else {
            (w.bpf_runs, w.bpf_run_s)
        }
    };
    let (bpf_share, bpf_rate, ns_per_run) = if runs.iter().any(|w| programs(w).0 > 0) {
        let share = each(&|w| w.machine_pct(programs(w).1, c)).mean;
        let rate = each(&|w| programs(w).0 as f64 / w.elapsed_s).mean;
        let total_s: f64 = runs.iter().map(|w| programs(w).1).sum();
        let total_runs: u64 = runs.iter().map(|w| programs(w).0).sum();
        (
            format!("{share:.3}%"),
            format!("{rate:.0}"),
            format!("{:.0}", total_s * 1e9 / total_runs as f64),
        )
    } else {
        ("—".into(), "—".into(), "—".into())
    };
    format!(
        "{:<30} {:>8.4} {:>17} {:>24} {:>18} {bpf_share:>9} {bpf_rate:>10} {ns_per_run:>7}",
        arm.label(),
        wall.mean,
        format!("{:+.2}% ± {:.2}%", slow.mean, slow.se),
        format!(
            "{:+.1} ± {:.1} ({:+.1}%)",
            added.mean, added.se, added_pct.mean
        ),
        format!("{:.3}% ± {:.3}%", coll.mean, coll.se),
    )
}

/// The overhead targets for the default `imc record`, from the runs of every workload.
fn checks(all: &[KindRuns]) -> Vec<Check> {
    let mut out = Vec::new();
    for r in all {
        if let Some(v) = r.irq_added_pct(Arm::ImcTick) {
            out.push(Check {
                what: format!("{}: timer interrupts added, % of baseline", r.kind.arg()),
                figure: mean_se(&v),
                target: TARGET_IRQ_PCT,
                detail: "LOC per CPU-second against the alone run's".into(),
            });
        }
        if let Some(runs) = r.runs(Arm::ImcTick) {
            let v: Vec<f64> = runs.iter().map(|w| w.collector_pct(r.cpus)).collect();
            out.push(Check {
                what: format!("{}: collector CPU, % of the machine", r.kind.arg()),
                figure: mean_se(&v),
                target: if r.kind == Kind::Switch {
                    TARGET_COLLECTOR_SWITCH_PCT
                } else {
                    TARGET_COLLECTOR_PCT
                },
                detail: "imc's CPU + its BPF run time, over wall × CPUs".into(),
            });
        }
        if let Some(check) = floor_check(r) {
            out.push(check);
        }
        if let (Some(with), Some(without)) = (r.runs(Arm::ImcStacks), r.runs(Arm::ImcTick)) {
            // Per round: the collector's CPU with stacks over the same round's without.
            let ratio: Vec<f64> = with
                .iter()
                .zip(without)
                .map(|(w, o)| w.collector_pct(r.cpus) / o.collector_pct(r.cpus).max(1e-9))
                .collect();
            out.push(Check {
                what: format!("{}: collector CPU with --stacks / without", r.kind.arg()),
                figure: mean_se(&ratio),
                target: TARGET_STACKS_RATIO,
                detail: "per round, the same workload's runs; --stacks after its warm-up".into(),
            });
            let v: Vec<f64> = with.iter().map(|w| w.collector_pct(r.cpus)).collect();
            out.push(Check {
                what: format!(
                    "{}: collector CPU with --stacks, % of the machine",
                    r.kind.arg()
                ),
                figure: mean_se(&v),
                target: TARGET_STACKS_PCT,
                detail: "imc's CPU + its BPF run time, over wall × CPUs".into(),
            });
        }
        if r.kind == Kind::Cpu
            && let Some(v) = r.slowdowns(Arm::ImcTick)
        {
            out.push(Check {
                what: "cpu: slowdown %".into(),
                figure: mean_se(&v),
                target: TARGET_CPU_SLOWDOWN_PCT,
                detail: "wall of the fixed work against the alone run's".into(),
            });
        }
        let relative = match r.kind {
            Kind::Cpu => Some((Arm::PerfClock, TARGET_VS_PERF_CLOCK)),
            Kind::Switch => Some((Arm::PerfSwitch, TARGET_VS_PERF_SWITCH)),
            Kind::Mem => None,
        };
        if let Some((perf_arm, k)) = relative
            && let (Some(imc), Some(perf)) = (r.slowdowns(Arm::ImcTick), r.slowdowns(perf_arm))
        {
            // Per round, so the drift both share cancels: imc's slowdown minus k × perf's.
            let d: Vec<f64> = imc.iter().zip(&perf).map(|(i, p)| i - k * p).collect();
            out.push(Check {
                what: format!(
                    "{}: slowdown minus {k} × {}'s, points",
                    r.kind.arg(),
                    perf_arm.label()
                ),
                figure: mean_se(&d),
                target: 0.0,
                detail: format!(
                    "imc {:+.2}% ± {:.2}%, perf {:+.2}% ± {:.2}%",
                    mean_se(&imc).mean,
                    mean_se(&imc).se,
                    mean_se(&perf).mean,
                    mean_se(&perf).se
                ),
            });
        }
    }
    out
}

/// The collector target against its floor on the same workload: the bare program on imc's
/// hooks (the clock at every run; a counter read at every switch and once a tick period, as
/// imc reads; nothing else) as a share of the machine, with
/// what imc's programs and its process cost above it, per round. A floor over the target says
/// that no program on these hooks, reading what the tick must, can meet it on this machine.
fn floor_check(r: &KindRuns) -> Option<Check> {
    let (floor, imc) = (r.runs(Arm::BareHooks)?, r.runs(Arm::ImcTick)?);
    let c = r.cpus;
    let per_round = |f: &dyn Fn(&Work, &Work) -> f64| {
        mean_se(
            &floor
                .iter()
                .zip(imc)
                .map(|(b, i)| f(b, i))
                .collect::<Vec<_>>(),
        )
    };
    let bpf_over = per_round(&|b, i| i.bpf_pct(c) - b.bare_pct(c));
    let user = per_round(&|_, i| i.user_pct(c));
    let ns = |runs: u64, s: f64| s * 1e9 / runs.max(1) as f64;
    let floor_ns = ns(
        floor.iter().map(|w| w.bare_runs).sum(),
        floor.iter().map(|w| w.bare_run_s).sum(),
    );
    let imc_ns = ns(
        imc.iter().map(|w| w.bpf_runs).sum(),
        imc.iter().map(|w| w.bpf_run_s).sum(),
    );
    Some(Check {
        what: format!(
            "{}: the floor alone (bare programs on imc's hooks making the reads it makes: the \
             clock, and a counter at each switch and tick period), % of the machine: at most the \
             collector target, or no program there meets it",
            r.kind.arg()
        ),
        figure: mean_se(&floor.iter().map(|w| w.bare_pct(c)).collect::<Vec<_>>()),
        target: TARGET_COLLECTOR_PCT,
        detail: format!(
            "{floor_ns:.0} ns a run; in the same rounds imc's programs {imc_ns:.0} ns a run, \
             {:+.3} ± {:.3} points of the machine above the floor, and its process {:.3} ± {:.3}",
            bpf_over.mean, bpf_over.se, user.mean, user.se
        ),
    })
}

/// `imc record --dry-run --json ARGS`: the plan's JSON.
fn dry_run(imc: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new(imc)
        .args(["record", "--dry-run", "--json"])
        .args(args)
        .output()
        .context("running imc record --dry-run")?;
    if !out.status.success() {
        bail!(
            "imc record --dry-run --json {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What imc plans here: the events to record (the stand-in where there are no memory-controller
/// counters), the kernel tick's rate and how many CPU-scope counters a context switch reads.
/// Stops when either arm's tick is not the one it names.
fn plan(imc: &Path) -> Result<(Vec<String>, f64, usize)> {
    let default = dry_run(imc, &[])?;
    let source = json_field(&default, "source").unwrap_or_else(|| "?".into());
    let events: Vec<String> = if source.starts_with("proxy:") {
        vec!["page-faults".into()]
    } else {
        Vec::new()
    };
    let ev: Vec<&str> = events.iter().flat_map(|e| ["-e", e.as_str()]).collect();
    let recorded = dry_run(imc, &ev)?;
    let tick = parse_plan_tick(&recorded)?;
    let cpu_reads = cpu_slots(&recorded);
    let freq_args: Vec<&str> = ["--freq", "1000"].into_iter().chain(ev.clone()).collect();
    let freq_tick = parse_plan_tick(&dry_run(imc, &freq_args)?)?;
    if tick.adds_interrupts || !freq_tick.adds_interrupts {
        bail!(
            "imc's plan does not match the arms: default tick {tick:?}, --freq tick {freq_tick:?}"
        );
    }
    println!(
        "imc's plan: source {source}{}; default tick {} at HZ={} (adds no interrupt), --freq \
         1000: {} (adds interrupts)",
        if events.is_empty() {
            String::new()
        } else {
            format!(
                " (no memory-controller counters here: recording -e {} as a stand-in, same \
                 tick, drain and recording work)",
                events.join(",")
            )
        },
        tick.source,
        tick.hz,
        freq_tick.source
    );
    Ok((events, tick.hz, cpu_reads))
}

/// The CPU-scope slots of a plan's JSON (`"slots": [{.., "scope": "cpu", ..}, ..]`): the
/// counters each context switch reads on its CPU.
fn cpu_slots(plan_json: &str) -> usize {
    let compact: String = plan_json.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(start) = compact.find("\"slots\":[") else {
        return 0;
    };
    let rest = &compact[start + "\"slots\":".len()..];
    let mut depth = 0usize;
    let end = rest
        .char_indices()
        .find(|&(_, c)| {
            match c {
                '[' | '{' => depth += 1,
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
            depth == 0
        })
        .map_or(rest.len(), |(i, _)| i);
    rest[..end].matches("\"scope\":\"cpu\"").count()
}

/// `workload`: the imc-workload binary (imc-tools); `bench_object`: the benchmark's eBPF object
/// (the bare sched_switch program).
pub fn run(imc: &Path, workload: &Path, bench_object: &Path) -> Result<()> {
    let rounds: usize = env_num("IMC_BENCH_ROUNDS", 15)?;
    let target_s: f64 = env_num("IMC_BENCH_SECONDS", 1.5)?;
    if rounds < 2 || target_s <= 0.0 {
        bail!("IMC_BENCH_ROUNDS must be >= 2 and IMC_BENCH_SECONDS > 0");
    }
    let rt = std::env::var("IMC_BENCH_RT").is_ok_and(|v| v == "1");
    if rt && Command::new("chrt").arg("--help").output().is_err() {
        bail!("IMC_BENCH_RT=1 runs the collectors and the workload under chrt: install util-linux");
    }
    let perf = Command::new("perf").arg("--version").output().is_ok();
    let cpus = online_cpus()?;
    let (imc_events, kernel_hz, cpu_reads) = plan(imc)?;
    let dir = std::env::temp_dir().join(format!("imc-bench-overhead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut b = Bench {
        imc: imc.to_path_buf(),
        workload: workload.to_path_buf(),
        dir: dir.clone(),
        cpus,
        runs: 0,
        rt,
        perf,
        imc_events,
        kernel_hz,
        bench_object: bench_object.to_path_buf(),
    };
    let load = loadavg();
    println!(
        "bench-overhead: {rounds} rounds, arms interleaved (order rotated each round), {cpus} \
         CPUs, ~{target_s} s of fixed work per run, load average {load} at start{}",
        if rt {
            format!(", SCHED_FIFO: collectors {RT_COLLECTOR}, workload {RT_WORKLOAD}")
        } else {
            String::new()
        }
    );
    if !perf {
        println!(
            "perf is not installed: the perf arms and the targets relative to them are left out"
        );
    }
    if !rt && load.parse::<f64>().is_ok_and(|l| l > cpus as f64 * 0.5) {
        println!(
            "warning: the machine is busy (load {load} on {cpus} CPUs): other work competes with \
             the workload and the figures below are mostly its noise (IMC_BENCH_RT=1 runs the \
             collectors and the workload at real-time priority, above it)"
        );
    }
    let kinds = bench_kinds()?;
    let result = kinds
        .into_iter()
        .map(|k| bench_kind(&mut b, k, rounds, target_s))
        .collect::<Result<Vec<KindRuns>>>();
    let _ = std::fs::remove_dir_all(&dir);
    let all = result?;
    println!(
        "\nfigures: mean over rounds ± standard error; slowdown and interrupts added are per \
         round against that round's alone run; collector CPU is the collector process's CPU plus \
         its BPF programs' run time (perf's in-kernel sampling is not in perf's)\ntargets for \
         the default `imc record` (PASS/FAIL: more than 2 standard errors from the \
         target):"
    );
    for c in checks(&all) {
        println!("  {}", check_line(&c));
    }
    for r in all.iter().filter(|r| r.kind == Kind::Switch) {
        switch::print_switch_split(r, kernel_hz, cpu_reads);
    }
    Ok(())
}

/// The workload kinds IMC_BENCH_KINDS names (default: cpu, mem and switch).
fn bench_kinds() -> Result<Vec<Kind>> {
    let kinds = std::env::var("IMC_BENCH_KINDS").unwrap_or_else(|_| "cpu,mem,switch".into());
    kinds
        .split(',')
        .map(|k| match k.trim() {
            "cpu" => Ok(Kind::Cpu),
            "mem" => Ok(Kind::Mem),
            "switch" => Ok(Kind::Switch),
            other => Err(anyhow!(
                "IMC_BENCH_KINDS: unknown workload '{other}' (cpu, mem, switch, comma-separated)"
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests;

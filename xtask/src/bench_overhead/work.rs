//! What one run reports: the workload's own line, imc's drained-record count, the plan's
//! tick.

use anyhow::{Context, Result, anyhow};

/// The workload's own figures (its `imc-workload:` line).
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Work {
    pub(super) elapsed_s: f64,
    pub(super) cpu_s: f64,
    /// Local timer interrupts on all CPUs during the timed work.
    pub(super) loc: u64,
    pub(super) parent_progs: u64,
    pub(super) parent_cpu_s: f64,
    pub(super) bpf_runs: u64,
    pub(super) bpf_run_s: f64,
    /// Of those, the runs and run time of its perf-event programs: its own timer's (`--freq`),
    /// apart from the runs at context switches.
    pub(super) timer_runs: u64,
    pub(super) timer_run_s: f64,
    /// `--bare-switch`: the bare sched_switch program's runs (the window's context switches)
    /// and run time.
    pub(super) bare_runs: u64,
    pub(super) bare_run_s: f64,
    /// Under imc: records it drained from the kernel's rings over its whole run (its summary).
    pub(super) drained: Option<u64>,
    /// With a warm-up before the window: its length, and the parent's CPU over it.
    pub(super) warmup_s: Option<f64>,
    pub(super) warmup_parent_cpu_s: Option<f64>,
}

impl Work {
    /// Local timer interrupts per CPU-second of the window.
    pub(super) fn irq_rate(&self, cpus: usize) -> f64 {
        self.loc as f64 / (self.elapsed_s * cpus as f64)
    }
    /// The program runs at context switches (and at the kernel's tick): all but the timer's.
    pub(super) fn switch_runs(&self) -> u64 {
        self.bpf_runs.saturating_sub(self.timer_runs)
    }
    /// ns per run of the programs that run at context switches (all but the timer's).
    pub(super) fn ns_per_switch_run(&self) -> f64 {
        (self.bpf_run_s - self.timer_run_s).max(0.0) / self.switch_runs().max(1) as f64 * 1e9
    }
    /// A bare arm's program: ns a run.
    pub(super) fn bare_ns_per_run(&self) -> f64 {
        self.bare_run_s / self.bare_runs.max(1) as f64 * 1e9
    }
    /// `seconds` of CPU over the window, as a share (%) of the machine's `cpus`.
    pub(super) fn machine_pct(&self, seconds: f64, cpus: usize) -> f64 {
        seconds / (self.elapsed_s * cpus as f64) * 100.0
    }
    /// The parent's BPF programs' run time, as a share (%) of the machine.
    pub(super) fn bpf_pct(&self, cpus: usize) -> f64 {
        self.machine_pct(self.bpf_run_s, cpus)
    }
    /// The parent's own CPU (its process, without its BPF programs), as a share (%) of the
    /// machine.
    pub(super) fn user_pct(&self, cpus: usize) -> f64 {
        self.machine_pct(self.parent_cpu_s, cpus)
    }
    /// A bare arm's program run time, as a share (%) of the machine.
    pub(super) fn bare_pct(&self, cpus: usize) -> f64 {
        self.machine_pct(self.bare_run_s, cpus)
    }
    /// Records imc drained a second: its whole run's over the warm-up and the window (an upper
    /// bound on the window's rate: imc also drains the few records before and after them).
    pub(super) fn drained_per_s(&self) -> Option<f64> {
        Some(self.drained? as f64 / (self.elapsed_s + self.warmup_s.unwrap_or(0.0)))
    }
    /// The parent's CPU and its BPF programs' run time, as a share (%) of the machine.
    pub(super) fn collector_pct(&self, cpus: usize) -> f64 {
        self.machine_pct(self.parent_cpu_s + self.bpf_run_s, cpus)
    }
}

pub(super) fn parse_work(stdout: &str) -> Result<Work> {
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
        loc: get("loc")?,
        parent_progs: get("parent_progs")?,
        parent_cpu_s: get("parent_cpu_ns")? as f64 / 1e9,
        bpf_runs: get("parent_bpf_runs")?,
        bpf_run_s: get("parent_bpf_run_ns")? as f64 / 1e9,
        timer_runs: get("parent_timer_runs").unwrap_or(0),
        timer_run_s: get("parent_timer_run_ns").unwrap_or(0) as f64 / 1e9,
        bare_runs: get("bare_runs").unwrap_or(0),
        bare_run_s: get("bare_run_ns").unwrap_or(0) as f64 / 1e9,
        drained: None,
        warmup_s: get("warmup_ns").ok().map(|n| n as f64 / 1e9),
        warmup_parent_cpu_s: get("warmup_parent_cpu_ns").ok().map(|n| n as f64 / 1e9),
    })
}

/// The records imc drained, from its `imc record` summary line ("…; N records drained", and
/// what the command said after it, if anything).
pub(super) fn parse_drained(stderr: &str) -> Option<u64> {
    let line = stderr.lines().find(|l| l.starts_with("imc: recorded"))?;
    let (before, _) = line.split_once(" records drained")?;
    before.rsplit(' ').next()?.parse().ok()
}

/// A top-level field of a JSON object (imc's report or plan), as text: a string's contents,
/// or a number's or boolean's digits. Parsed, not searched: nested objects (bursts, tasks) have
/// fields of the same names.
pub(super) fn json_field(json: &str, key: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    match v.get(key)? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// The tick of one `imc record` plan (`--dry-run --json`).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Tick {
    pub(super) source: String,
    pub(super) hz: f64,
    pub(super) adds_interrupts: bool,
}

pub(super) fn parse_plan_tick(json: &str) -> Result<Tick> {
    let v: serde_json::Value =
        serde_json::from_str(json).with_context(|| format!("the plan is not JSON: {json}"))?;
    let tick = v
        .get("tick")
        .ok_or_else(|| anyhow!("the plan has no tick: {json}"))?;
    Ok(Tick {
        source: tick["source"]
            .as_str()
            .ok_or_else(|| anyhow!("the plan's tick has no source: {tick}"))?
            .to_string(),
        hz: tick["hz"]
            .as_f64()
            .ok_or_else(|| anyhow!("the plan's tick has no hz: {tick}"))?,
        adds_interrupts: tick["adds_interrupts"]
            .as_bool()
            .ok_or_else(|| anyhow!("the plan's tick has no adds_interrupts: {tick}"))?,
    })
}

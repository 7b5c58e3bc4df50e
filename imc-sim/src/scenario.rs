//! Accuracy scenarios: a machine (a fixture tree, or a shape of packages), a kernel, and tasks
//! with known bandwidths, run through the real plan, a synthesized record stream of exactly
//! what the eBPF program and userspace would read ([`super`] with a [`Layout`] of the
//! plan's slots), and the real [`Attributor`], so that each task's attributed bytes can be
//! compared with the truth on machines this one cannot be.
//!
//! The file format is documented in `tests/scenarios/README.md`; `cargo xtask accuracy` runs
//! it (the `imc-accuracy` binary).
use super::{Layout, QueueTruth, Scenario, SynthItem, SynthSlot, SynthTask, TaskTraits};
use imc::attribution::Attributor;
use imc::model::result::IntervalResult;
use imc::model::{Direction, SlotRole, SlotScope, SlotSpec};
use imc::plan::{self, CommandKind, Plan, Reader, Request};
use imc::sampler::aggregate_twin::Aggregator;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

mod check;
mod file;
mod render;
mod run;
#[cfg(test)]
mod tests;

pub use check::{PACKAGES_BASE, packages_base};
use file::field_error;
pub use file::{CpuList, Loaded, MAX_CPUS, ScenarioError, ScenarioFile, TaskFile};

/// How the plan is told to divide traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weigh {
    /// The plan's choice (`--weight auto`).
    Auto,
    /// `--weight cpu-time`.
    CpuTime,
}

/// How the sampling loop would run: the caller's (`imc record`'s) drain rule.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    pub weigh: Weigh,
    /// `Request::drain_ms` for the scenario's interval.
    pub drain_ms: u64,
    /// `Request::batch_ms` (record's long sleep).
    pub batch_ms: Option<u64>,
    /// `--precise`: the program's record per context switch reaches the attributor as it is;
    /// otherwise (imc's default on the kernel's tick) the switches are folded into per-task
    /// aggregates at each tick, as the kernel does ([`imc::sampler::aggregate_twin`]).
    pub precise: bool,
}

/// One task's result (entries with the same pid and comm are one task).
#[derive(Clone, Debug, Serialize)]
pub struct TaskResult {
    pub pid: u32,
    pub comm: String,
    pub truth_bytes: f64,
    pub attributed_bytes: f64,
    /// |attributed − truth| / the run's total controller bytes.
    pub error: f64,
    pub truth_read_bytes: f64,
    pub truth_write_bytes: f64,
    pub attributed_read_bytes: f64,
    pub attributed_write_bytes: f64,
    /// Victims: its cycles stalled on memory as a share of its cycles, true and as charged
    /// (null where it ran no cycle, or the plan counts no stalls).
    pub truth_stall_share: Option<f64>,
    pub attributed_stall_share: Option<f64>,
    /// Seconds of its on-CPU time it stalled, true and as charged (null where not counted).
    pub truth_stall_seconds: f64,
    pub attributed_stall_seconds: Option<f64>,
}

/// One package's loaded read latency over the run: the truth (its reads' mean latency) and
/// what its read queue's counts give through `stat --latency`'s own arithmetic.
#[derive(Clone, Debug, Serialize)]
pub struct LatencyResult {
    pub package: u32,
    pub truth_ns: Option<f64>,
    pub measured_ns: Option<f64>,
    /// |measured − truth| / truth.
    pub error: Option<f64>,
}

/// A scenario's result.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub name: String,
    /// The plan's weighting: `method` `traffic` (per-CPU weights) or `cpu-time`, the events,
    /// NUMA, why.
    pub weighting: imc::model::Weighting,
    /// Every package's controller bytes over the whole run (tasks and DMA), the truth.
    pub total_bytes: f64,
    pub tasks: Vec<TaskResult>,
    pub max_error: f64,
    /// The attributor read per-task aggregates of each tick (the kernel's default), not a
    /// record per context switch (`--precise`).
    pub aggregated: bool,
    /// With aggregates: the same timeline's max_error from a record per switch, when it was run
    /// too (`imc-accuracy` runs both unless `--precise`): the two may differ by 0.005 at most.
    pub precise_max_error: Option<f64>,
    /// What the attributor counted: every package's bytes, and the part no task took.
    pub package_bytes: f64,
    pub unattributed_bytes: f64,
    /// The part of `unattributed_bytes` imc named device traffic (no core counter saw it),
    /// the devices' true bytes (`dma_read_bps` over the run), and |device − truth| / total.
    pub device_bytes: f64,
    pub truth_device_bytes: f64,
    pub device_error: f64,
    /// The plan's weight slots, as `event (role)`.
    pub weights: Vec<String>,
    /// Whether the tasks' charged stall shares rank them as their true ones do (every pair
    /// whose truths differ by more than 0.01 in the same order); null where the plan counts
    /// no stalls.
    pub victims_ranked_right: Option<bool>,
    /// Per package: loaded latency, true and measured; and the largest error.
    pub latency: Vec<LatencyResult>,
    pub latency_max_error: Option<f64>,
}

/// Reads and validates a scenario file: one error naming the file and the field.
pub fn load(path: &Path) -> Result<Loaded, ScenarioError> {
    let text = read_regular(path).map_err(|source| ScenarioError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(path, &text)
}

/// A regular file's text, at most 64 MiB (a FIFO or a directory is refused, not waited on).
fn read_regular(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut buf = Vec::new();
    f.take(64 << 20).read_to_end(&mut buf)?;
    String::from_utf8(buf)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// Parses and validates the scenario text of `path` (relative roots are resolved beside it).
pub fn parse(path: &Path, text: &str) -> Result<Loaded, ScenarioError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    let file: ScenarioFile = serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner();
        let field = if matches!(field.as_str(), "." | "?" | "") {
            unknown_field(&inner.to_string()).unwrap_or_else(|| "(file)".into())
        } else {
            field
        };
        field_error(path, field, inner.to_string())
    })?;
    check::validate(path, file)
}

/// The field serde names in an "unknown field `x`" message at the top level.
fn unknown_field(msg: &str) -> Option<String> {
    let rest = msg.strip_prefix("unknown field `")?;
    Some(rest.split('`').next()?.to_string())
}

impl Loaded {
    /// What `imc record` would ask the plan for on this machine.
    pub fn request(&self, opts: &RunOptions) -> Request {
        Request {
            command: CommandKind::Record,
            events: Vec::new(),
            backend: None,
            exclude: Vec::new(),
            freq: None,
            precise: false,
            interval_ms: self.file.interval_ms,
            drain_ms: opts.drain_ms,
            batch_ms: opts.batch_ms,
            stand_in: Vec::new(),
            latency: None,
            weight: match opts.weigh {
                Weigh::Auto => plan::WeightRequest::Auto,
                Weigh::CpuTime => plan::WeightRequest::CpuTime,
            },
            stacks: None,
        }
    }

    /// The real plan for this machine, or why there is none (a machine without a memory
    /// controller has nothing to attribute).
    pub fn plan(&self, opts: &RunOptions) -> Result<Plan, ScenarioError> {
        let mut p =
            plan::plan(&self.found, &self.kernel, &self.request(opts)).map_err(|source| {
                ScenarioError::Plan {
                    path: self.path.clone(),
                    source,
                }
            })?;
        plan::weights::apply_fidelity(&mut p, &self.file.fidelity);
        if !p.slots.iter().any(|s| s.scope == SlotScope::Package) {
            return Err(ScenarioError::NoPackageCounters {
                path: self.path.clone(),
                plan_source: p.source.to_string(),
            });
        }
        Ok(p)
    }
}

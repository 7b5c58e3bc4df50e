//! The scenario file as written (see `tests/scenarios/README.md`), its limits and its
//! errors, and a scenario once its values are checked.

use imc::discovery::DiscoveryError;
use imc::model::Discovery;
use imc::plan::{Kernel, PlanError};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Longest run a scenario may ask for: a day of simulated time.
pub(super) const MAX_DURATION_S: f64 = 86_400.0;

/// Most CPUs a scenario's machine may have.
pub const MAX_CPUS: usize = 4096;

/// Most task entries in one scenario.
pub(super) const MAX_TASKS: usize = 100_000;

/// Bandwidth beyond any memory system (bytes/s): 10 TB/s.
pub(super) const MAX_BPS: f64 = 1e13;

#[derive(Debug, Error)]
pub enum ScenarioError {
    #[error("{path}: cannot read the scenario: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Malformed JSON, an unknown field, a value of the wrong type or out of range: `field` is
    /// its path (`tasks[3].read_bps`).
    #[error("{path}: {field}: {message}")]
    Field {
        path: PathBuf,
        field: String,
        message: String,
    },
    #[error("{path}: root {root}: {source}")]
    Discovery {
        path: PathBuf,
        root: PathBuf,
        #[source]
        source: Box<DiscoveryError>,
    },
    #[error("{path}: the plan: {source}")]
    Plan {
        path: PathBuf,
        #[source]
        source: PlanError,
    },
    /// The plan reads no memory controller (its source is another): nothing to attribute.
    #[error("{path}: the plan: no memory-controller counters to attribute (source {plan_source})")]
    NoPackageCounters { path: PathBuf, plan_source: String },
}

/// A list of CPUs: `[0, 1, 2]` or the kernel's text form `"0-15,32"`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum CpuList {
    Numbers(Vec<u32>),
    Text(String),
}

/// A scenario file as written (see `tests/scenarios/README.md`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    pub name: String,
    /// A fixture tree, relative to the scenario file.
    #[serde(default)]
    pub root: Option<PathBuf>,
    /// Packages, each a list of its CPUs.
    #[serde(default)]
    pub packages: Option<Vec<CpuList>>,
    /// The kernel release (which CPUs may read a package counter).
    #[serde(default)]
    pub kernel: Option<String>,
    #[serde(default)]
    pub hz: Option<u32>,
    pub duration_s: f64,
    #[serde(default = "default_interval_ms")]
    pub interval_ms: u64,
    /// DMA read bandwidth per package, in package order.
    #[serde(default)]
    pub dma_read_bps: Vec<f64>,
    /// Measured fidelity of weight events (`{"<event>": f}`, as `imc validate --save` keeps
    /// it): handed to the plan as imc would read it; events not named stay at 1.
    #[serde(default)]
    pub fidelity: BTreeMap<String, f64>,
    /// Peak bandwidth per package (bytes/s), in package order: its memory's latency grows with
    /// its utilisation (`idle_latency_ns / (1 − u)`); missing: the idle latency throughout.
    #[serde(default)]
    pub peak_bps: Vec<f64>,
    /// The memory's latency with nothing else in the queues.
    #[serde(default = "default_idle_latency_ns")]
    pub idle_latency_ns: f64,
    pub tasks: Vec<TaskFile>,
}

pub(super) fn default_idle_latency_ns() -> f64 {
    80.0
}

pub(super) fn default_interval_ms() -> u64 {
    1000
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskFile {
    pub pid: u32,
    pub comm: String,
    pub cpus: CpuList,
    #[serde(default = "one")]
    pub cpu_share: f64,
    #[serde(default = "default_slice_ms")]
    pub slice_ms: f64,
    #[serde(default)]
    pub read_bps: f64,
    #[serde(default)]
    pub write_bps: f64,
    #[serde(default)]
    pub memory_package: Option<u32>,
    #[serde(default = "per_line")]
    pub read_weight_per_byte: f64,
    #[serde(default = "per_line")]
    pub write_weight_per_byte: f64,
    #[serde(default)]
    pub start_s: f64,
    #[serde(default)]
    pub end_s: Option<f64>,
    /// The part of its read lines whose latency stalls its core (1: a pointer chaser).
    #[serde(default)]
    pub stall_per_miss: f64,
}

pub(super) fn one() -> f64 {
    1.0
}

pub(super) fn default_slice_ms() -> f64 {
    4.0
}

pub(super) fn per_line() -> f64 {
    1.0 / 64.0
}

/// A validated scenario, ready to plan and run.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub path: PathBuf,
    pub file: ScenarioFile,
    pub found: Discovery,
    pub kernel: Kernel,
    /// Per task entry: its CPUs.
    pub task_cpus: Vec<Vec<u32>>,
    /// Per task entry: the index (into the topology's packages) of its memory, if given.
    pub task_memory: Vec<Option<usize>>,
}

pub(super) fn field_error(
    path: &Path,
    field: impl Into<String>,
    message: impl Into<String>,
) -> ScenarioError {
    ScenarioError::Field {
        path: path.to_path_buf(),
        field: field.into(),
        message: message.into(),
    }
}

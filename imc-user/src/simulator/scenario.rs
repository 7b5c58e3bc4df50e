//! Accuracy scenarios: a machine (a fixture tree, or a shape of packages), a kernel, and tasks
//! with known bandwidths, run through the real plan, a synthesized record stream of exactly
//! what the eBPF program and userspace would read ([`super`] with a [`Layout`] of the
//! plan's slots), and the real [`Attributor`], so that each task's attributed bytes can be
//! compared with the truth on machines this one cannot be.
//!
//! The file format is documented in `tests/scenarios/README.md`; `cargo xtask accuracy` runs
//! it (the `imc-accuracy` binary).
use super::{Layout, QueueTruth, Scenario, SynthItem, SynthSlot, SynthTask, TaskTraits};
use crate::attribution::Attributor;
use crate::discovery::DiscoveryError;
use crate::model::result::IntervalResult;
use crate::model::{Direction, Discovery, SlotRole, SlotScope, SlotSpec};
use crate::plan::{self, Command, Kernel, Plan, PlanError, Reader, Request};
use crate::sampler::aggregate_twin::Aggregator;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Longest run a scenario may ask for: a day of simulated time.
const MAX_DURATION_S: f64 = 86_400.0;
/// Most CPUs a scenario's machine may have.
pub const MAX_CPUS: usize = 4096;
/// Most task entries in one scenario.
const MAX_TASKS: usize = 100_000;
/// Bandwidth beyond any memory system (bytes/s): 10 TB/s.
const MAX_BPS: f64 = 1e13;
/// The fixture tree whose machine a `packages` scenario reshapes (a Skylake-SP server).
pub const PACKAGES_BASE: &str = "skx-2socket";

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

fn default_idle_latency_ns() -> f64 {
    80.0
}

fn default_interval_ms() -> u64 {
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

fn one() -> f64 {
    1.0
}
fn default_slice_ms() -> f64 {
    4.0
}
fn per_line() -> f64 {
    1.0 / 64.0
}

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
    /// aggregates at each tick, as the kernel does ([`crate::sampler::aggregate_twin`]).
    pub precise: bool,
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
    pub weighting: crate::model::Weighting,
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

fn field_error(path: &Path, field: impl Into<String>, message: impl Into<String>) -> ScenarioError {
    ScenarioError::Field {
        path: path.to_path_buf(),
        field: field.into(),
        message: message.into(),
    }
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
    validate(path, file)
}

/// The field serde names in an "unknown field `x`" message at the top level.
fn unknown_field(msg: &str) -> Option<String> {
    let rest = msg.strip_prefix("unknown field `")?;
    Some(rest.split('`').next()?.to_string())
}

fn finite_in(
    path: &Path,
    field: &str,
    v: f64,
    lo: f64,
    hi: f64,
    what: &str,
) -> Result<(), ScenarioError> {
    if !v.is_finite() || v < lo || v > hi {
        return Err(field_error(path, field, format!("{v}: expected {what}")));
    }
    Ok(())
}

fn cpus_of(path: &Path, field: &str, list: &CpuList) -> Result<Vec<u32>, ScenarioError> {
    let mut cpus = match list {
        CpuList::Numbers(v) => v.clone(),
        CpuList::Text(t) => crate::discovery::cpulist::parse_cpulist(t)
            .map_err(|e| field_error(path, field, format!("'{t}': {e}")))?,
    };
    if cpus.is_empty() {
        return Err(field_error(path, field, "no CPUs: list at least one"));
    }
    if cpus.len() > MAX_CPUS {
        return Err(field_error(
            path,
            field,
            format!("{} CPUs: at most {MAX_CPUS}", cpus.len()),
        ));
    }
    if let Some(&c) = cpus.iter().find(|&&c| c as usize >= MAX_CPUS) {
        return Err(field_error(
            path,
            field,
            format!("CPU {c}: CPU numbers go up to {}", MAX_CPUS - 1),
        ));
    }
    let n = cpus.len();
    cpus.sort_unstable();
    cpus.dedup();
    if cpus.len() != n {
        return Err(field_error(path, field, "a CPU is listed twice"));
    }
    Ok(cpus)
}

fn validate(path: &Path, file: ScenarioFile) -> Result<Loaded, ScenarioError> {
    if file.name.trim().is_empty() {
        return Err(field_error(path, "name", "empty: name the scenario"));
    }
    finite_in(
        path,
        "duration_s",
        file.duration_s,
        0.001,
        MAX_DURATION_S,
        "seconds, more than 0 and at most a day (86400)",
    )?;
    let duration_ms = file.duration_s * 1e3;
    if file.interval_ms == 0 || file.interval_ms as f64 > duration_ms {
        return Err(field_error(
            path,
            "interval_ms",
            format!(
                "{}: expected at least 1 and at most the run ({} ms)",
                file.interval_ms, duration_ms
            ),
        ));
    }
    if let Some(hz) = file.hz
        && !(24..=10_000).contains(&hz)
    {
        return Err(field_error(
            path,
            "hz",
            format!("{hz}: expected the kernel's tick rate, 24 to 10000"),
        ));
    }
    if let Some(k) = &file.kernel
        && (k.is_empty() || k.len() > 256 || k.contains(char::is_whitespace))
    {
        return Err(field_error(
            path,
            "kernel",
            format!("'{k}': expected a release string such as 6.8.0-45-generic"),
        ));
    }
    let kernel = Kernel {
        release: file.kernel.clone(),
        hz: file.hz,
        hz_source: file.hz.map(|_| "the scenario".to_string()),
        // As distributions ship: the hard-lockup detector holds one core counter per CPU.
        nmi_watchdog: true,
    };
    let found = match (&file.root, &file.packages) {
        (Some(_), Some(_)) => {
            return Err(field_error(
                path,
                "packages",
                "give either root or packages, not both",
            ));
        }
        (None, None) => {
            return Err(field_error(
                path,
                "root",
                "missing: give a fixture tree (root) or the packages' CPU lists (packages)",
            ));
        }
        (Some(root), None) => {
            let dir = path.parent().unwrap_or(Path::new(".")).join(root);
            let found =
                crate::discovery::discover(&dir).map_err(|source| ScenarioError::Discovery {
                    path: path.to_path_buf(),
                    root: dir.clone(),
                    source: Box::new(source),
                })?;
            let n = found.topology.online.len();
            if n > MAX_CPUS {
                return Err(field_error(
                    path,
                    "root",
                    format!("{n} CPUs online: at most {MAX_CPUS}"),
                ));
            }
            found
        }
        (None, Some(pkgs)) => shaped_machine(path, pkgs)?,
    };
    let npkg = found.topology.packages.len();
    if file.dma_read_bps.len() > npkg {
        return Err(field_error(
            path,
            "dma_read_bps",
            format!(
                "{} values for {npkg} package(s): one per package",
                file.dma_read_bps.len()
            ),
        ));
    }
    for (i, &v) in file.dma_read_bps.iter().enumerate() {
        finite_in(
            path,
            &format!("dma_read_bps[{i}]"),
            v,
            0.0,
            MAX_BPS,
            "bytes/s, 0 to 1e13",
        )?;
    }
    if file.peak_bps.len() > npkg {
        return Err(field_error(
            path,
            "peak_bps",
            format!(
                "{} values for {npkg} package(s): one per package",
                file.peak_bps.len()
            ),
        ));
    }
    for (i, &v) in file.peak_bps.iter().enumerate() {
        finite_in(
            path,
            &format!("peak_bps[{i}]"),
            v,
            0.0,
            MAX_BPS,
            "bytes/s, 0 to 1e13",
        )?;
    }
    finite_in(
        path,
        "idle_latency_ns",
        file.idle_latency_ns,
        1.0,
        10_000.0,
        "ns, 1 to 10000",
    )?;
    for (event, &f) in &file.fidelity {
        finite_in(
            path,
            &format!("fidelity.{event}"),
            f,
            1e-3,
            10.0,
            "a measured fidelity, 0.001 to 10",
        )?;
    }
    if file.tasks.len() > MAX_TASKS {
        return Err(field_error(
            path,
            "tasks",
            format!("{} tasks: at most {MAX_TASKS}", file.tasks.len()),
        ));
    }
    let online = &found.topology.online;
    let mut task_cpus = Vec::new();
    let mut task_memory = Vec::new();
    let mut comm_of: BTreeMap<u32, &str> = BTreeMap::new();
    for (i, t) in file.tasks.iter().enumerate() {
        let f = |name: &str| format!("tasks[{i}].{name}");
        if t.pid == 0 || t.pid > 4_194_304 {
            return Err(field_error(
                path,
                f("pid"),
                format!("{}: expected 1 to 4194304 (0 is the idle task)", t.pid),
            ));
        }
        if t.comm.is_empty() || t.comm.len() > 15 || t.comm.contains('\0') {
            return Err(field_error(
                path,
                f("comm"),
                format!("'{}': expected 1 to 15 bytes, as the kernel keeps", t.comm),
            ));
        }
        if let Some(other) = comm_of.insert(t.pid, &t.comm)
            && other != t.comm
        {
            return Err(field_error(
                path,
                f("comm"),
                format!(
                    "pid {} is '{other}' in an earlier entry: entries of one task share its comm",
                    t.pid
                ),
            ));
        }
        let cpus = cpus_of(path, &f("cpus"), &t.cpus)?;
        if let Some(c) = cpus.iter().find(|c| !online.contains(c)) {
            return Err(field_error(
                path,
                f("cpus"),
                format!(
                    "CPU {c} does not exist on this machine (online: {})",
                    crate::discovery::cpulist::format_cpulist(online)
                ),
            ));
        }
        finite_in(
            path,
            &f("cpu_share"),
            t.cpu_share,
            1e-6,
            1.0,
            "a fraction of each CPU's time, more than 0 and at most 1",
        )?;
        finite_in(
            path,
            &f("slice_ms"),
            t.slice_ms,
            0.01,
            1000.0,
            "milliseconds, 0.01 to 1000",
        )?;
        finite_in(
            path,
            &f("read_bps"),
            t.read_bps,
            0.0,
            MAX_BPS,
            "bytes/s, 0 to 1e13",
        )?;
        finite_in(
            path,
            &f("write_bps"),
            t.write_bps,
            0.0,
            MAX_BPS,
            "bytes/s, 0 to 1e13",
        )?;
        finite_in(
            path,
            &f("read_weight_per_byte"),
            t.read_weight_per_byte,
            0.0,
            1.0,
            "weight counts per byte, 0 to 1 (1/64: one per line)",
        )?;
        finite_in(
            path,
            &f("write_weight_per_byte"),
            t.write_weight_per_byte,
            0.0,
            1.0,
            "weight counts per byte, 0 to 1 (1/64: one per line)",
        )?;
        finite_in(
            path,
            &f("stall_per_miss"),
            t.stall_per_miss,
            0.0,
            1.0,
            "the part of its read lines that stall the core, 0 to 1",
        )?;
        finite_in(
            path,
            &f("start_s"),
            t.start_s,
            0.0,
            file.duration_s,
            "seconds from the start, within the run",
        )?;
        let end = t.end_s.unwrap_or(file.duration_s);
        if !end.is_finite() || end <= t.start_s || end > file.duration_s {
            return Err(field_error(
                path,
                f("end_s"),
                format!(
                    "{end}: expected after start_s ({}) and at most duration_s ({})",
                    t.start_s, file.duration_s
                ),
            ));
        }
        let memory = match t.memory_package {
            None => None,
            Some(id) => Some(
                found
                    .topology
                    .packages
                    .iter()
                    .position(|p| p.id == id)
                    .ok_or_else(|| {
                        field_error(
                            path,
                            f("memory_package"),
                            format!("package {id} does not exist ({npkg} package(s))"),
                        )
                    })?,
            ),
        };
        task_cpus.push(cpus);
        task_memory.push(memory);
    }
    Ok(Loaded {
        path: path.to_path_buf(),
        file,
        found,
        kernel,
        task_cpus,
        task_memory,
    })
}

/// The machine of a `packages` scenario: the [`PACKAGES_BASE`] fixture's (its memory
/// controller, its core and their events), reshaped to these packages: the CPUs, a NUMA node
/// per package, and each controller PMU opened on each package's first CPU.
fn shaped_machine(path: &Path, pkgs: &[CpuList]) -> Result<Discovery, ScenarioError> {
    if pkgs.is_empty() {
        return Err(field_error(
            path,
            "packages",
            "empty: list at least one package",
        ));
    }
    let mut packages = Vec::new();
    let mut all: Vec<u32> = Vec::new();
    for (i, l) in pkgs.iter().enumerate() {
        let cpus = cpus_of(path, &format!("packages[{i}]"), l)?;
        if let Some(c) = cpus.iter().find(|c| all.contains(c)) {
            return Err(field_error(
                path,
                format!("packages[{i}]"),
                format!("CPU {c} is in two packages"),
            ));
        }
        all.extend(&cpus);
        if all.len() > MAX_CPUS {
            return Err(field_error(
                path,
                "packages",
                format!("more than {MAX_CPUS} CPUs"),
            ));
        }
        packages.push(crate::model::Package { id: i as u32, cpus });
    }
    all.sort_unstable();
    let base = packages_base();
    let mut found =
        crate::discovery::discover(&base).map_err(|source| ScenarioError::Discovery {
            path: path.to_path_buf(),
            root: base.clone(),
            source: Box::new(source),
        })?;
    let firsts: Vec<u32> = packages.iter().map(|p| p.cpus[0]).collect();
    for s in found
        .sources
        .iter_mut()
        .filter(|s| s.backend.is_memory_controller())
    {
        for p in &mut s.pmus {
            p.cpus = firsts.clone();
        }
    }
    // The core PMU counts on every CPU of the new shape.
    for core in &mut found.cores {
        core.cpus = all.clone();
    }
    found.topology.nodes = packages
        .iter()
        .map(|p| crate::model::NumaNode {
            id: p.id,
            cpus: p.cpus.clone(),
        })
        .collect();
    found.topology.online = all.clone();
    found.topology.possible = all;
    found.topology.packages = packages;
    Ok(found)
}

/// Where the [`PACKAGES_BASE`] fixture tree is: the source tree's tests/fixtures.
pub fn packages_base() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(PACKAGES_BASE)
}

impl Loaded {
    /// What `imc record` would ask the plan for on this machine.
    pub fn request(&self, opts: &RunOptions) -> Request {
        Request {
            command: Command::Record,
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
            return Err(ScenarioError::Plan {
                path: self.path.clone(),
                source: PlanError::Unavailable(format!(
                    "no memory-controller counters to attribute (source {})",
                    p.source
                )),
            });
        }
        Ok(p)
    }

    /// The synthetic timeline of this scenario under `plan`.
    pub fn synth(&self, plan: &Plan) -> Scenario {
        let specs = crate::sampler::from_plan::slot_specs(plan);
        let topo = &self.found.topology;
        let hz = plan
            .tick
            .hz
            .map_or(self.kernel.hz_or_default(), |h| h.round() as u32)
            .max(1);
        let duration_ns = (self.file.duration_s * 1e9).round() as u64;
        let slots = specs.iter().map(|s| synth_slot(s, &specs)).collect();
        let readers = topo
            .packages
            .iter()
            .map(|p| {
                plan.counters
                    .iter()
                    .filter(|c| c.package == Some(p.id) && c.slot.is_some())
                    .find_map(|c| match &c.reader {
                        Reader::PackageTick { cpus, .. } => Some(cpus.clone()),
                        _ => None,
                    })
                    .unwrap_or_default()
            })
            .collect();
        let drain_ms = plan.drain.as_ref().map_or(100, |d| d.every_ms).max(1);
        let layout = Layout {
            slots,
            package_ids: topo.packages.iter().map(|p| p.id).collect(),
            readers,
            // The program's rule (sampler: once per tick period, with a margin).
            min_gap_ns: 900_000_000 / u64::from(hz),
            drain_ns: drain_ms * 1_000_000,
            max_age_ns: crate::sampler::fallback::max_age_ns(hz, drain_ms as u32),
        };
        let ncpu = topo.online.iter().max().map_or(0, |&m| m as usize + 1);
        let mut sc = Scenario::busy(0, hz, duration_ns);
        sc.packages = topo.packages.iter().map(|p| p.cpus.clone()).collect();
        sc.tasks = self
            .file
            .tasks
            .iter()
            .map(|t| SynthTask {
                pid: t.pid,
                tgid: t.pid,
                comm: t.comm.clone(),
                cgroup: 1,
                read_bps: t.read_bps,
                write_bps: t.write_bps,
            })
            .collect();
        sc.traits = self
            .file
            .tasks
            .iter()
            .zip(&self.task_memory)
            .map(|(t, &m)| TaskTraits {
                memory_package: m,
                read_weight_per_byte: t.read_weight_per_byte,
                write_weight_per_byte: t.write_weight_per_byte,
                stall_per_miss: t.stall_per_miss,
            })
            .collect();
        sc.schedule = self.schedule(ncpu);
        sc.dma_bps = (0..topo.packages.len())
            .map(|i| self.file.dma_read_bps.get(i).copied().unwrap_or(0.0))
            .collect();
        sc.peak_bps = self.file.peak_bps.clone();
        sc.latency.idle_ns = self.file.idle_latency_ns;
        sc.precise = plan.tick.switches;
        sc.weights = false;
        sc.nohz = true;
        // Package sums start where an earlier run left the kernel's counts, not at zero.
        sc.counter_start = 1 << 40;
        sc.mark_every_ns = Some(self.file.interval_ms * 1_000_000);
        sc.layout = Some(layout);
        sc
    }

    /// Every CPU's schedule: the tasks alive on it take turns in rounds, each running its
    /// share of the round; the round is as long as makes the most demanding task's run one
    /// slice. A task on n CPUs runs on its k-th one k/n of a round later, so one that wants
    /// 1/n of each migrates among them.
    fn schedule(&self, ncpu: usize) -> Vec<Vec<(u64, Option<usize>)>> {
        let ns = |s: f64| (s * 1e9).round() as u64;
        let end_ns = ns(self.file.duration_s);
        let mut on_cpu: Vec<Vec<usize>> = vec![Vec::new(); ncpu];
        for (i, cpus) in self.task_cpus.iter().enumerate() {
            for &c in cpus {
                on_cpu[c as usize].push(i);
            }
        }
        let tasks = &self.file.tasks;
        let life = |i: usize| {
            let t = &tasks[i];
            (ns(t.start_s), t.end_s.map_or(end_ns, ns))
        };
        (0..ncpu)
            .map(|c| {
                let mine = &on_cpu[c];
                let mut bounds: Vec<u64> = vec![0, end_ns];
                for &i in mine {
                    let (a, b) = life(i);
                    bounds.push(a);
                    bounds.push(b);
                }
                bounds.sort_unstable();
                bounds.dedup();
                let mut out: Vec<(u64, Option<usize>)> = Vec::new();
                let mut push = |t: u64, who: Option<usize>| {
                    if out.last().is_some_and(|&(_, w)| w == who) {
                        return;
                    }
                    if out.last().is_some_and(|&(lt, _)| lt == t) {
                        out.pop();
                        if out.last().is_some_and(|&(_, w)| w == who) {
                            return;
                        }
                    }
                    out.push((t, who));
                };
                push(0, None);
                for w in bounds.windows(2) {
                    let (e0, e1) = (w[0], w[1]);
                    if e0 >= end_ns {
                        break;
                    }
                    // Alive through the whole epoch; a task on several CPUs first, as the
                    // one whose runs are staggered.
                    let mut alive: Vec<usize> = mine
                        .iter()
                        .copied()
                        .filter(|&i| {
                            let (a, b) = life(i);
                            a <= e0 && b >= e1
                        })
                        .collect();
                    alive.sort_by_key(|&i| std::cmp::Reverse(self.task_cpus[i].len() > 1));
                    if alive.is_empty() {
                        push(e0, None);
                        continue;
                    }
                    let want: f64 = alive.iter().map(|&i| tasks[i].cpu_share).sum();
                    let scale = if want > 1.0 { 1.0 / want } else { 1.0 };
                    let frac: Vec<f64> =
                        alive.iter().map(|&i| tasks[i].cpu_share * scale).collect();
                    let round = alive
                        .iter()
                        .zip(&frac)
                        .map(|(&i, &f)| tasks[i].slice_ms * 1e6 / f)
                        .fold(f64::INFINITY, f64::min)
                        .max(1_000.0);
                    let first = alive[0];
                    let n = self.task_cpus[first].len();
                    let k = self.task_cpus[first]
                        .iter()
                        .position(|&x| x as usize == c)
                        .unwrap_or(0);
                    let phase = round * k as f64 / n as f64;
                    // Rounds start at e0 + phase + (r - 1)·round, clipped to the epoch.
                    let mut r = 0u64;
                    loop {
                        let start = e0 as f64 + phase + (r as f64 - 1.0) * round;
                        if start >= e1 as f64 {
                            break;
                        }
                        let mut t = start;
                        for (&i, &f) in alive.iter().zip(&frac) {
                            let run_end = t + f * round;
                            let (a, b) = (t.max(e0 as f64), run_end.min(e1 as f64));
                            if b > a {
                                push(a.round() as u64, Some(i));
                            }
                            t = run_end;
                        }
                        let round_end = start + round;
                        let (a, b) = (t.max(e0 as f64), round_end.min(e1 as f64));
                        if b - a >= 1.0 {
                            push(a.round() as u64, None);
                        }
                        r += 1;
                    }
                }
                push(end_ns, None);
                out
            })
            .collect()
    }

    /// Plans, synthesizes and attributes the scenario; `progress` is told the fraction of the
    /// simulated time done at every interval.
    pub fn run(
        &self,
        opts: &RunOptions,
        progress: &mut dyn FnMut(f64),
    ) -> Result<Outcome, ScenarioError> {
        let plan = self.plan(opts)?;
        let specs = crate::sampler::from_plan::slot_specs(&plan);
        let mut sc = self.synth(&plan);
        sc.aggregate = sc.precise && !opts.precise;
        let duration_ns = sc.duration_ns;
        let mut attr = Attributor::new(&specs, &self.found.topology, plan.source.clone())
            .tick_hz(sc.freq_hz)
            .weighting(plan.weighting.clone());
        let mut acc = Accumulated::default();
        // The kernel folds switches into per-task aggregates unless asked for each one.
        let mut fold = sc.aggregate.then(|| Aggregator::new(&specs, sc.freq_hz));
        let mut folded = Vec::new();
        let mut stream = sc.stream();
        for item in stream.by_ref() {
            match item {
                SynthItem::Tick(r) => match fold.as_mut() {
                    Some(agg) => {
                        agg.push(&r, &mut folded);
                        for a in folded.drain(..) {
                            attr.push_tick(&a);
                        }
                    }
                    None => attr.push_tick(&r),
                },
                SynthItem::PackageRead(p, s, t, v) => attr.push_package_read(p, s, t, v),
                SynthItem::Mark(t) => {
                    acc.add(&attr.close_interval(t));
                    progress(t as f64 / duration_ns.max(1) as f64);
                }
            }
        }
        // As imc does before its last interval: every package read, then everything spread.
        for item in stream.read_all_packages() {
            if let SynthItem::PackageRead(p, s, t, v) = item {
                attr.push_package_read(p, s, t, v);
            }
        }
        acc.add(&attr.finish(duration_ns));
        progress(1.0);

        let truth = &stream.truth;
        let total_bytes: f64 = stream.controller_bytes().iter().map(|(r, w)| r + w).sum();
        let truth_device_bytes: f64 = truth.dma.iter().sum();
        // Entries of one task (pid, comm) are one task.
        let mut by_task: BTreeMap<(u32, String), TaskResult> = BTreeMap::new();
        let mut stall_truth: BTreeMap<(u32, String), [f64; 2]> = BTreeMap::new();
        let stalls = crate::model::Victims::keys(&specs).is_some();
        for (i, t) in self.file.tasks.iter().enumerate() {
            let e = by_task
                .entry((t.pid, t.comm.clone()))
                .or_insert_with(|| TaskResult {
                    pid: t.pid,
                    comm: t.comm.clone(),
                    truth_bytes: 0.0,
                    attributed_bytes: 0.0,
                    error: 0.0,
                    truth_read_bytes: 0.0,
                    truth_write_bytes: 0.0,
                    attributed_read_bytes: 0.0,
                    attributed_write_bytes: 0.0,
                    truth_stall_share: None,
                    attributed_stall_share: None,
                    truth_stall_seconds: 0.0,
                    attributed_stall_seconds: None,
                });
            e.truth_read_bytes += truth.task_read[i];
            e.truth_write_bytes += truth.task_write[i];
            let st = stall_truth.entry((t.pid, t.comm.clone())).or_default();
            st[0] += truth.task_stall[i];
            st[1] += truth.task_cycles[i];
            e.truth_stall_seconds += truth.task_stall[i] / sc.latency.cpu_hz;
        }
        for (key, e) in by_task.iter_mut() {
            e.truth_bytes = e.truth_read_bytes + e.truth_write_bytes;
            if let Some(a) = acc.tasks.get(key) {
                e.attributed_read_bytes = a[0];
                e.attributed_write_bytes = a[1];
                e.attributed_bytes = a[0] + a[1] + a[2];
            }
            let st = stall_truth.get(key).copied().unwrap_or_default();
            e.truth_stall_share = crate::model::result::stall_share(Some(st[0]), Some(st[1]));
            if stalls {
                let a = acc.stalls.get(key).copied().unwrap_or_default();
                e.attributed_stall_share =
                    crate::model::result::stall_share(Some(a[0]), Some(a[1]));
                e.attributed_stall_seconds = acc.stall_seconds.get(key).copied();
            }
            e.error = if total_bytes > 0.0 {
                (e.attributed_bytes - e.truth_bytes).abs() / total_bytes
            } else {
                0.0
            };
        }
        let tasks: Vec<TaskResult> = by_task.into_values().collect();
        let max_error = tasks.iter().map(|t| t.error).fold(0.0, f64::max);
        let victims_ranked_right = stalls.then(|| ranked_alike(&tasks));
        let latency: Vec<LatencyResult> = truth
            .queues
            .iter()
            .zip(&self.found.topology.packages)
            .map(|(q, p)| latency_result(p.id, q, duration_ns))
            .collect();
        let latency_max_error = latency
            .iter()
            .filter_map(|l| l.error)
            .fold(None, |m: Option<f64>, e| Some(m.map_or(e, |m| m.max(e))));
        let weights = specs
            .iter()
            .filter(|s| {
                s.scope == SlotScope::Cpu
                    && matches!(s.role, SlotRole::Weight(_) | SlotRole::RemoteWeight(_))
            })
            .map(|s| format!("{} ({})", s.event, role_name(s.role)))
            .collect::<Vec<_>>();
        let weighting = plan
            .weighting
            .clone()
            .unwrap_or_else(|| crate::model::Weighting::cpu_time("the plan chose no weighting"));
        Ok(Outcome {
            name: self.file.name.clone(),
            weighting,
            total_bytes,
            tasks,
            max_error,
            aggregated: fold.is_some(),
            precise_max_error: None,
            package_bytes: acc.package_bytes,
            unattributed_bytes: acc.unattributed,
            device_bytes: acc.device,
            truth_device_bytes,
            device_error: if total_bytes > 0.0 {
                (acc.device - truth_device_bytes).abs() / total_bytes
            } else {
                0.0
            },
            weights,
            victims_ranked_right,
            latency,
            latency_max_error,
        })
    }
}

/// Whether the charged stall shares order the tasks as the true ones do: every pair whose
/// true shares differ by more than 0.01 is in the same order (a task charged no cycles ranks
/// last).
fn ranked_alike(tasks: &[TaskResult]) -> bool {
    let charged = |t: &TaskResult| t.attributed_stall_share.unwrap_or(-1.0);
    tasks.iter().all(|a| {
        tasks.iter().all(|b| {
            let (Some(ta), Some(tb)) = (a.truth_stall_share, b.truth_stall_share) else {
                return true;
            };
            ta <= tb + 0.01 || charged(a) > charged(b)
        })
    })
}

/// A package's read latency from its queue's whole counts, as `stat --latency` computes it
/// (occupancy ÷ inserts in DRAM clocks, in ns through the clock's measured rate), against the
/// mean latency its reads had.
fn latency_result(package: u32, q: &QueueTruth, duration_ns: u64) -> LatencyResult {
    let sums = crate::counting::latency::Sums {
        read_occupancy: q.occupancy.floor(),
        read_inserts: q.inserts.floor(),
        dram_clocks: q.dram_clocks.floor(),
        clock_boxes: 1,
        ..Default::default()
    };
    let measured_ns = sums.figures(duration_ns).read_ns;
    let truth_ns = q.latency_ns();
    let error = match (measured_ns, truth_ns) {
        (Some(m), Some(t)) if t > 0.0 => Some((m - t).abs() / t),
        _ => None,
    };
    LatencyResult {
        package,
        truth_ns,
        measured_ns,
        error,
    }
}

fn role_name(role: SlotRole) -> String {
    match role {
        SlotRole::Traffic(d) => format!("traffic {d:?}").to_lowercase(),
        SlotRole::Weight(None) => "weight".into(),
        SlotRole::Weight(Some(d)) => format!("weight {d:?}").to_lowercase(),
        SlotRole::RemoteWeight(None) => "remote weight".into(),
        SlotRole::RemoteWeight(Some(d)) => format!("remote weight {d:?}").to_lowercase(),
        SlotRole::Other => "other".into(),
        SlotRole::Stall(part) => format!("stall {}", part.as_str()),
    }
}

/// What a plan's slot holds in the synthetic records (`all`: every slot of the plan).
fn synth_slot(spec: &SlotSpec, all: &[SlotSpec]) -> SynthSlot {
    // A local weight whose direction has a remote counterpart counts local traffic only.
    let remote_beside = |d: Option<Direction>| {
        all.iter().any(|o| match o.role {
            SlotRole::RemoteWeight(od) => od == d || od.is_none() || d.is_none(),
            _ => false,
        })
    };
    // Events of one role add up: each counts its part of the traffic, in its own lines (a
    // task's weight per byte is given in 64-byte lines: 1/64 is faithful; POWER's are 128).
    let line = spec.bytes_per_count.filter(|&b| b > 0.0).unwrap_or(64.0);
    let share = 64.0
        / line
        / all
            .iter()
            .filter(|o| o.scope == SlotScope::Cpu && o.role == spec.role)
            .count()
            .max(1) as f64;
    match (spec.scope, spec.role) {
        (SlotScope::Package, SlotRole::Traffic(direction)) => SynthSlot::Traffic {
            direction,
            bytes_per_count: spec.bytes_per_count.unwrap_or(64.0),
        },
        (SlotScope::Package, _) => SynthSlot::Traffic {
            direction: Direction::Total,
            bytes_per_count: spec.bytes_per_count.unwrap_or(64.0),
        },
        (SlotScope::Cpu, SlotRole::Weight(direction)) => SynthSlot::Weight {
            direction,
            remote: false,
            sees_remote: !remote_beside(direction),
            share,
        },
        (SlotScope::Cpu, SlotRole::RemoteWeight(direction)) => SynthSlot::Weight {
            direction,
            remote: true,
            sees_remote: false,
            share,
        },
        (SlotScope::Cpu, SlotRole::Stall(part)) => SynthSlot::Stall(part),
        (SlotScope::Cpu, _) => SynthSlot::Other,
    }
}

/// The intervals' sums: per task (pid, comm) its read, write and total bytes; every package's
/// bytes and the unattributed part.
#[derive(Default)]
struct Accumulated {
    tasks: BTreeMap<(u32, String), [f64; 3]>,
    /// Per task: the stalled cycles and cycles charged to it, and its stall seconds.
    stalls: BTreeMap<(u32, String), [f64; 2]>,
    stall_seconds: BTreeMap<(u32, String), f64>,
    package_bytes: f64,
    unattributed: f64,
    device: f64,
}

impl Accumulated {
    fn add(&mut self, iv: &IntervalResult) {
        for t in &iv.tasks {
            let e = self.tasks.entry((t.pid, t.comm.clone())).or_default();
            e[0] += t.read_bytes as f64;
            e[1] += t.write_bytes as f64;
            e[2] += t.total_bytes as f64;
            if let (Some(st), Some(cy)) = (t.stall_cycles, t.cycles) {
                let e = self.stalls.entry((t.pid, t.comm.clone())).or_default();
                e[0] += st;
                e[1] += cy;
            }
            if let Some(secs) = t.stall_seconds {
                *self
                    .stall_seconds
                    .entry((t.pid, t.comm.clone()))
                    .or_default() += secs;
            }
        }
        self.package_bytes += iv.package_bytes() as f64;
        self.unattributed += iv.unattributed_bytes as f64;
        self.device += iv.unattributed.device_bytes as f64;
    }
}

impl Outcome {
    /// The text table: per task its truth, attributed bytes and error; then summary lines.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "scenario {}: weighting {}{}",
            self.name,
            self.weighting.method,
            if self.weights.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.weights.join(", "))
            }
        );
        let _ = writeln!(s, "  {}", self.weighting.reason);
        let _ = writeln!(
            s,
            "  {:>8} {:<16} {:>14} {:>14} {:>8} {:>8}",
            "pid", "comm", "truth", "attributed", "share", "error"
        );
        let mut rows: Vec<&TaskResult> = self.tasks.iter().collect();
        rows.sort_by(|a, b| {
            b.truth_bytes
                .total_cmp(&a.truth_bytes)
                .then(a.pid.cmp(&b.pid))
        });
        let limit = 20;
        for t in rows.iter().take(limit) {
            let share = if self.package_bytes > 0.0 {
                t.attributed_bytes / self.package_bytes
            } else {
                0.0
            };
            let _ = writeln!(
                s,
                "  {:>8} {:<16} {:>14} {:>14} {:>7.2}% {:>8.4}",
                t.pid,
                t.comm,
                crate::text::fmt_bytes(t.truth_bytes),
                crate::text::fmt_bytes(t.attributed_bytes),
                share * 100.0,
                t.error
            );
        }
        if rows.len() > limit {
            let worst = rows[limit..].iter().map(|t| t.error).fold(0.0, f64::max);
            let _ = writeln!(
                s,
                "  … {} more task(s), largest error among them {:.4}",
                rows.len() - limit,
                worst
            );
        }
        let _ = writeln!(
            s,
            "  total {} (controllers, tasks and DMA); counted {}, unattributed {}",
            crate::text::fmt_bytes(self.total_bytes),
            crate::text::fmt_bytes(self.package_bytes),
            crate::text::fmt_bytes(self.unattributed_bytes)
        );
        let _ = writeln!(
            s,
            "  device/unseen (no core counter saw it) {}, devices' truth {}: error {:.4}",
            crate::text::fmt_bytes(self.device_bytes),
            crate::text::fmt_bytes(self.truth_device_bytes),
            self.device_error
        );
        let _ = writeln!(
            s,
            "  max_error {:.4}{}",
            self.max_error,
            if self.aggregated {
                " (per-task aggregates at each tick, the kernel's default)"
            } else {
                " (a record per context switch)"
            }
        );
        if let Some(p) = self.precise_max_error {
            let _ = writeln!(
                s,
                "  max_error {p:.4} from a record per context switch (--precise): difference {:.4}",
                (self.max_error - p).abs()
            );
        }
        self.render_victims(&mut s);
        s
    }

    /// Victims (each task's stall share, true and charged, the most stalled first) and the
    /// packages' loaded latency.
    fn render_victims(&self, s: &mut String) {
        use std::fmt::Write;
        let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.1}%", v * 100.0));
        match self.victims_ranked_right {
            None => {
                let _ = writeln!(s, "  victims: the plan counts no stalls");
            }
            Some(right) => {
                let mut rows: Vec<&TaskResult> = self.tasks.iter().collect();
                rows.sort_by(|a, b| {
                    b.truth_stall_share
                        .unwrap_or(-1.0)
                        .total_cmp(&a.truth_stall_share.unwrap_or(-1.0))
                        .then(a.pid.cmp(&b.pid))
                });
                let _ = writeln!(
                    s,
                    "  victims (stalled share of cycles, truth / charged), ranked {}:",
                    if right { "right" } else { "WRONG" }
                );
                for t in rows.iter().take(5) {
                    let _ = writeln!(
                        s,
                        "  {:>8} {:<16} {:>7} {:>7}",
                        t.pid,
                        t.comm,
                        pct(t.truth_stall_share),
                        pct(t.attributed_stall_share)
                    );
                }
            }
        }
        for l in &self.latency {
            let ns = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1} ns"));
            let _ = writeln!(
                s,
                "  package {} read latency: truth {}, from its queue's counts {}, error {}",
                l.package,
                ns(l.truth_ns),
                ns(l.measured_ns),
                l.error.map_or("-".to_string(), |e| format!("{e:.5}"))
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `imc record` uses for a one-second interval on the kernel's tick.
    fn opts(weigh: Weigh) -> RunOptions {
        RunOptions {
            weigh,
            drain_ms: 100,
            batch_ms: Some(1000),
            precise: false,
        }
    }

    fn err(text: &str) -> String {
        parse(Path::new("/x/s.json"), text).unwrap_err().to_string()
    }

    const SMALL: &str = r#"{"name": "small", "packages": [[0, 1], [2, 3]],
        "kernel": "6.8.0", "hz": 250, "duration_s": 2, "interval_ms": 500,
        "dma_read_bps": [1e8, 3e8],
        "tasks": [
          {"pid": 10, "comm": "a", "cpus": [0], "read_bps": 4e9, "write_bps": 1e9},
          {"pid": 11, "comm": "b", "cpus": [0, 1], "cpu_share": 0.5, "read_bps": 1e9,
           "write_bps": 2e9, "memory_package": 1},
          {"pid": 12, "comm": "c", "cpus": [2], "read_bps": 1e7, "end_s": 1.1}
        ]}"#;

    #[test]
    fn bad_scenarios_name_the_file_and_the_field() {
        let cases = [
            (
                r#"{"name": "x", "bogus": 1}"#,
                "s.json: bogus: unknown field",
            ),
            (
                r#"{"name": "x", "packages": [[0]], "duration_s": 1,
                   "tasks": [{"pid": 1, "comm": "a", "cpus": [0], "colour": 2}]}"#,
                "tasks[0].colour: unknown field `colour`",
            ),
            (
                r#"{"name": "x", "packages": [[0]], "duration_s": 1,
                   "tasks": [{"pid": 1, "comm": "a", "cpus": [0], "read_bps": -5}]}"#,
                "tasks[0].read_bps: -5",
            ),
            (
                r#"{"name": "x", "packages": [[0]], "duration_s": 90000, "tasks": []}"#,
                "duration_s: 90000",
            ),
            (
                r#"{"name": "x", "packages": ["0-4096"], "duration_s": 1, "tasks": []}"#,
                "packages[0]: 4097 CPUs",
            ),
            (
                r#"{"name": "x", "packages": [[0, 1]], "duration_s": 1,
                   "tasks": [{"pid": 1, "comm": "a", "cpus": [7]}]}"#,
                "tasks[0].cpus: CPU 7 does not exist",
            ),
            (
                r#"{"name": "x", "packages": [[0]], "duration_s": "long", "tasks": []}"#,
                "duration_s: invalid type",
            ),
            (r#"{"name": "x", "#, "s.json: (file): EOF"),
            (
                r#"{"name": "x", "duration_s": 1, "tasks": []}"#,
                "root: missing",
            ),
            (
                r#"{"name": "x", "packages": [[0]], "duration_s": 1, "dma_read_bps": [1, 2],
                   "tasks": []}"#,
                "dma_read_bps: 2 values for 1 package",
            ),
            (
                r#"{"name": "x", "packages": [[0]], "duration_s": 1,
                   "tasks": [{"pid": 1, "comm": "a", "cpus": [0], "memory_package": 3}]}"#,
                "tasks[0].memory_package: package 3 does not exist",
            ),
        ];
        for (text, want) in cases {
            let e = err(text);
            assert!(e.starts_with("/x/s.json: "), "{e}");
            assert!(e.contains(want), "{e:?} should contain {want:?}");
            assert!(!e.contains('\n'), "one line: {e:?}");
        }
        let missing = load(Path::new("/nonexistent/s.json"))
            .unwrap_err()
            .to_string();
        assert!(
            missing.starts_with("/nonexistent/s.json: cannot read"),
            "{missing}"
        );
    }

    #[test]
    fn every_byte_is_a_tasks_or_unattributed() {
        let l = parse(Path::new("/x/s.json"), SMALL).unwrap();
        let modes = [
            (Weigh::Auto, true),
            (Weigh::CpuTime, true),
            (Weigh::Auto, false),
        ];
        for (weigh, precise) in modes {
            let o = l
                .run(
                    &RunOptions {
                        precise,
                        ..opts(weigh)
                    },
                    &mut |_| {},
                )
                .unwrap();
            let attributed: f64 = o.tasks.iter().map(|t| t.attributed_bytes).sum();
            let sum = attributed + o.unattributed_bytes;
            // Rounding each interval's counts to whole ones is all that may differ: half a count
            // of 64 bytes per task, slot and interval at most.
            assert!(
                (sum - o.package_bytes).abs() <= 32.0 * 3.0 * 2.0 * 5.0,
                "{weigh:?}: tasks {attributed} + unattributed {} != counted {}",
                o.unattributed_bytes,
                o.package_bytes
            );
            // What was counted is what the controllers moved (whole counts of 64 bytes): every
            // package has a busy CPU at the start, whose first tick is the baseline. With
            // aggregates, the switch that idles package 1 reads no counter, and the hand-over
            // to userspace's reads loses a fraction of a millisecond of its DMA (52 KB here).
            let slack = if precise {
                64.0 * 8.0
            } else {
                1e-5 * o.total_bytes
            };
            assert!(
                (o.package_bytes - o.total_bytes).abs() <= slack,
                "{weigh:?} precise {precise}: counted {} of {}",
                o.package_bytes,
                o.total_bytes
            );
            let truth: f64 = o.tasks.iter().map(|t| t.truth_bytes).sum();
            // DMA: 0.1 + 0.3 GB/s for 2 s.
            assert!((o.total_bytes - truth - 0.8e9).abs() < 1e3, "{o:?}");
        }
    }

    #[test]
    fn victims_are_charged_their_own_stalls_and_latency_follows_the_queue() {
        // The pointer chaser's stalls grow when the streamer fills its socket's channels from
        // 1 s on; the spinner touches no memory; the stall pair is no weight, so the bytes are
        // the weights' as before.
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/scenarios/victims-streamer-beside-a-chaser.json");
        let mut l = load(&path).unwrap();
        l.file.duration_s = 2.0;
        l.file.interval_ms = 500;
        l.file.tasks[0].start_s = 1.0;
        let o = l.run(&opts(Weigh::Auto), &mut |_| {}).unwrap();
        assert_eq!(o.victims_ranked_right, Some(true), "{}", o.render());
        let task = |comm: &str| o.tasks.iter().find(|t| t.comm == comm).unwrap();
        for t in &o.tasks {
            let (truth, charged) = (
                t.truth_stall_share.unwrap(),
                t.attributed_stall_share.unwrap(),
            );
            assert!(
                (truth - charged).abs() < 0.01,
                "{}: {truth} vs {charged}",
                t.comm
            );
        }
        assert_eq!(task("spin").attributed_stall_share, Some(0.0));
        // In seconds: the share of each tick's span times the span (cpu-clock), summed.
        for t in &o.tasks {
            let charged = t.attributed_stall_seconds.unwrap();
            assert!(
                (charged - t.truth_stall_seconds).abs() <= 0.01 * t.truth_stall_seconds + 1e-3,
                "{}: {charged} s against {} s",
                t.comm,
                t.truth_stall_seconds
            );
        }
        assert!(task("chaser").truth_stall_seconds > 0.3);
        // Idle 80 ns for the first second, 80 / (1 − 150/204.8) ns beside the streamer.
        let chaser = task("chaser").truth_stall_share.unwrap();
        let lines = 1e8 / 64.0;
        let loaded = 80e-9 / (1.0 - 150.0 / 204.8);
        assert!(
            (chaser - lines * (80e-9 + loaded) / 2.0).abs() < 1e-3,
            "{chaser}"
        );
        let lat = &o.latency[0];
        assert!(lat.error.unwrap() < 0.01, "{lat:?}");
        assert!(
            lat.truth_ns.unwrap() > 250.0,
            "{lat:?}: the streamer's reads dominate"
        );
        assert!(
            o.latency[1].measured_ns.is_none(),
            "no reads, no made-up latency"
        );
        assert!(o.max_error <= 0.005, "{}", o.render());
    }

    #[test]
    fn a_ranking_is_right_only_when_every_clear_pair_keeps_its_order() {
        let t = |truth: f64, charged: f64| TaskResult {
            pid: 1,
            comm: "x".into(),
            truth_bytes: 0.0,
            attributed_bytes: 0.0,
            error: 0.0,
            truth_read_bytes: 0.0,
            truth_write_bytes: 0.0,
            attributed_read_bytes: 0.0,
            attributed_write_bytes: 0.0,
            truth_stall_share: Some(truth),
            attributed_stall_share: Some(charged),
            truth_stall_seconds: 0.0,
            attributed_stall_seconds: None,
        };
        assert!(ranked_alike(&[t(0.5, 0.4), t(0.2, 0.3), t(0.0, 0.0)]));
        assert!(!ranked_alike(&[t(0.5, 0.2), t(0.2, 0.3)]));
        // Truths within 0.01 of each other may come in either order.
        assert!(ranked_alike(&[t(0.205, 0.2), t(0.2, 0.3)]));
    }

    #[test]
    fn the_streamer_gets_its_traffic_by_weights_and_a_sixteenth_by_time() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/scenarios/streamer.json");
        let mut l = load(&path).unwrap();
        // Two seconds are enough for the ordering; the shipped run is longer.
        l.file.duration_s = 2.0;
        l.file.interval_ms = 500;
        let share = |o: &Outcome, comm: &str| {
            let t = o.tasks.iter().find(|t| t.comm == comm).unwrap();
            t.attributed_bytes / o.package_bytes
        };
        let auto = l.run(&opts(Weigh::Auto), &mut |_| {}).unwrap();
        assert_eq!(auto.weighting.method, "traffic", "{:?}", auto.weighting);
        let s = share(&auto, "stream");
        assert!(s >= 0.95, "the streamer gets {s} by weights");
        assert!(auto.max_error <= 0.02, "{}", auto.render());
        let time = l.run(&opts(Weigh::CpuTime), &mut |_| {}).unwrap();
        assert_eq!(time.weighting.method, "cpu-time");
        let s = share(&time, "stream");
        assert!((0.04..0.09).contains(&s), "the streamer gets {s} by time");
        for spinner in time.tasks.iter().filter(|t| t.comm != "stream") {
            assert!(spinner.attributed_bytes > 10.0 * spinner.truth_bytes);
        }
    }

    #[test]
    fn schedule_shares_and_staggers() {
        let l = parse(Path::new("/x/s.json"), SMALL).unwrap();
        let sched = l.schedule(4);
        // CPU 1: task b (index 1) half the time, staggered from CPU 0 by half a round.
        let run_time = |c: usize, who: usize| {
            let s = &sched[c];
            s.windows(2)
                .filter(|w| w[0].1 == Some(who))
                .map(|w| w[1].0 - w[0].0)
                .sum::<u64>() as f64
                / 2e9
        };
        assert!((run_time(1, 1) - 0.5).abs() < 0.01, "{}", run_time(1, 1));
        // CPU 0: a wants all, b half: two thirds and one third.
        assert!((run_time(0, 0) - 2.0 / 3.0).abs() < 0.01);
        assert!((run_time(0, 1) - 1.0 / 3.0).abs() < 0.01);
        // CPU 2: c runs only during its life.
        assert!((run_time(2, 2) - 0.55).abs() < 0.001);
        assert_eq!(sched[3], vec![(0, None)]);
    }
}

//! A scenario file's values checked one by one, each refusal naming the field and what it
//! expects, and the machine it names (a fixture tree, or a shape of packages) discovered.

use super::file::{
    CpuList, Loaded, MAX_BPS, MAX_CPUS, MAX_DURATION_S, MAX_TASKS, ScenarioError, ScenarioFile,
    TaskFile, field_error,
};
use imc::model::Discovery;
use imc::plan::Kernel;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
        CpuList::Text(t) => imc::discovery::cpulist::parse_cpulist(t)
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

pub(super) fn validate(path: &Path, file: ScenarioFile) -> Result<Loaded, ScenarioError> {
    let kernel = check_run(path, &file)?;
    let found = machine(path, &file)?;
    check_memory(path, &file, found.topology.packages.len())?;
    if file.tasks.len() > MAX_TASKS {
        return Err(field_error(
            path,
            "tasks",
            format!("{} tasks: at most {MAX_TASKS}", file.tasks.len()),
        ));
    }
    let mut task_cpus = Vec::new();
    let mut task_memory = Vec::new();
    let mut comm_of: BTreeMap<u32, &str> = BTreeMap::new();
    for i in 0..file.tasks.len() {
        let (cpus, memory) = check_task(path, &file, &found, i, &mut comm_of)?;
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

/// The run's name, length, interval and kernel (release, tick rate).
fn check_run(path: &Path, file: &ScenarioFile) -> Result<Kernel, ScenarioError> {
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
    Ok(Kernel {
        release: file.kernel.clone(),
        hz: file.hz,
        hz_source: file.hz.map(|_| "the scenario".to_string()),
        // As distributions ship: the hard-lockup detector holds one core counter per CPU.
        nmi_watchdog: true,
    })
}

/// The machine the scenario names: its fixture tree, or the shape of its packages.
fn machine(path: &Path, file: &ScenarioFile) -> Result<Discovery, ScenarioError> {
    Ok(match (&file.root, &file.packages) {
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
                imc::discovery::discover(&dir).map_err(|source| ScenarioError::Discovery {
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
    })
}

/// The packages' memory: DMA and peak bandwidth per package, idle latency, the weights'
/// fidelity.
fn check_memory(path: &Path, file: &ScenarioFile, npkg: usize) -> Result<(), ScenarioError> {
    per_package(path, "dma_read_bps", &file.dma_read_bps, npkg)?;
    per_package(path, "peak_bps", &file.peak_bps, npkg)?;
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
    Ok(())
}

/// A bandwidth per package (`field`): at most one per package, each within any memory's.
fn per_package(path: &Path, field: &str, values: &[f64], npkg: usize) -> Result<(), ScenarioError> {
    if values.len() > npkg {
        return Err(field_error(
            path,
            field,
            format!(
                "{} values for {npkg} package(s): one per package",
                values.len()
            ),
        ));
    }
    for (i, &v) in values.iter().enumerate() {
        finite_in(
            path,
            &format!("{field}[{i}]"),
            v,
            0.0,
            MAX_BPS,
            "bytes/s, 0 to 1e13",
        )?;
    }
    Ok(())
}

/// Task entry `i`: its pid, comm (one per pid), CPUs (online ones), share, slice, rates and
/// lifetime; returns its CPUs and the index of its memory's package.
fn check_task<'a>(
    path: &Path,
    file: &'a ScenarioFile,
    found: &Discovery,
    i: usize,
    comm_of: &mut BTreeMap<u32, &'a str>,
) -> Result<(Vec<u32>, Option<usize>), ScenarioError> {
    let t = &file.tasks[i];
    let online = &found.topology.online;
    let npkg = found.topology.packages.len();
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
                imc::discovery::cpulist::format_cpulist(online)
            ),
        ));
    }
    check_task_rates(path, &f, t, file.duration_s)?;
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
    Ok((cpus, memory))
}

/// A task entry's CPU share, slice, bandwidths, weights per byte, stalls and start.
fn check_task_rates(
    path: &Path,
    f: &dyn Fn(&str) -> String,
    t: &TaskFile,
    duration_s: f64,
) -> Result<(), ScenarioError> {
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
        duration_s,
        "seconds from the start, within the run",
    )?;
    Ok(())
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
        packages.push(imc::model::Package { id: i as u32, cpus });
    }
    all.sort_unstable();
    let base = packages_base();
    let mut found = imc::discovery::discover(&base).map_err(|source| ScenarioError::Discovery {
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
        .map(|p| imc::model::NumaNode {
            id: p.id,
            cpus: p.cpus.clone(),
        })
        .collect();
    found.topology.online = all.clone();
    found.topology.possible = all;
    found.topology.packages = packages;
    Ok(found)
}

/// The fixture tree whose machine a `packages` scenario reshapes (a Skylake-SP server).
pub const PACKAGES_BASE: &str = "skx-2socket";

/// Where the [`PACKAGES_BASE`] fixture tree is: the source tree's tests/fixtures.
pub fn packages_base() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(PACKAGES_BASE)
}

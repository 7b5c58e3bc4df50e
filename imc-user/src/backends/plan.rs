//! Which counters to open: from a discovery `Source` (the default read/write events of each PMU
//! instance on each designated CPU) or from `-e` encodings.
use super::{BackendError, CounterSpec, Memory};
use crate::model::{BackendKind, Direction, Encoded, Scope, Source, Topology};

/// A counter to open through perf_event_open.
#[derive(Clone, Debug, PartialEq)]
pub struct PerfCounter {
    pub spec: CounterSpec,
    pub pmu_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub exclude_user: bool,
    pub exclude_kernel: bool,
}

/// A counter read from physical memory.
#[derive(Clone, Debug, PartialEq)]
pub struct MchbarCounter {
    pub spec: CounterSpec,
    pub address: u64,
    pub width: u8,
}

/// The memory a source measures.
pub fn memory_of(backend: BackendKind) -> Memory {
    match backend {
        BackendKind::KnlEdc => Memory::Mcdram,
        _ => Memory::Dram,
    }
}

/// The direction of a bandwidth event named `read`/`write`/`total` by discovery.
fn direction_of_name(name: &str) -> Option<Direction> {
    match name {
        "read" => Some(Direction::Read),
        "write" => Some(Direction::Write),
        "total" => Some(Direction::Total),
        _ => None,
    }
}

/// The key of `values` for a default event: its name, prefixed for MCDRAM so KNL's two memories
/// stay apart.
fn value_key(memory: Memory, name: &str) -> String {
    match memory {
        Memory::Dram => name.to_string(),
        Memory::Mcdram => format!("mcdram_{name}"),
    }
}

/// The package of a designated CPU; a PMU's cpumask lists one CPU per package in package order,
/// so the position is the fallback when the topology does not know the CPU.
fn package_of(topo: &Topology, cpu: u32, position: usize) -> u32 {
    topo.package_of(cpu).unwrap_or_else(|| {
        topo.packages
            .get(position)
            .map_or(position as u32, |p| p.id)
    })
}

/// Scope of a PMU instance's counter on one package: each instance is a channel when the source
/// has several per package (SKX's six uncore_imc_N, POWER's nest_mbaN), else the package.
fn scope_for(source: &Source, pmu: &str, package: u32) -> Scope {
    if source.pmus.len() > 1 {
        let channel = source.pmus.iter().position(|p| p.name == pmu).unwrap_or(0) as u32;
        Scope::Channel { package, channel }
    } else {
        Scope::Package(package)
    }
}

/// The read/write events of a perf-backed source, on each designated CPU of each PMU instance.
pub fn perf_counters(source: &Source, topo: &Topology) -> Result<Vec<PerfCounter>, BackendError> {
    let memory = memory_of(source.backend);
    let mut out = Vec::new();
    for ev in &source.events {
        let direction = ev.direction.or_else(|| direction_of_name(&ev.name));
        // Auxiliary events of a memory controller (clock ticks) are not bandwidth and are left
        // out; a stand-in source's events (msr tsc, page-faults) are counted as plain values.
        let stand_in = !source.backend.is_memory_controller();
        if direction.is_none() && !stand_in {
            continue;
        }
        let Some(config) = ev.config else { continue };
        let Some(pmu) = source.pmus.iter().find(|p| p.name == ev.pmu) else {
            return Err(BackendError::Plan(format!(
                "{}: event {} names PMU {} that the source does not list",
                source.backend.as_str(),
                ev.name,
                ev.pmu
            )));
        };
        for (i, &cpu) in pmu.cpus.iter().enumerate() {
            let package = package_of(topo, cpu, i);
            out.push(PerfCounter {
                spec: CounterSpec {
                    event: value_key(memory, &ev.name),
                    pmu: ev.pmu.clone(),
                    cpu: Some(cpu),
                    scope: if stand_in {
                        Scope::Cpu(cpu)
                    } else {
                        scope_for(source, &ev.pmu, package)
                    },
                    package: Some(package),
                    direction: direction.filter(|_| !stand_in),
                    memory,
                    bytes_per_count: (!stand_in).then(|| ev.bytes_per_count.unwrap_or(1.0)),
                    scale: 1.0,
                    counter_bits: ev.counter_bits,
                    config,
                },
                pmu_type: pmu.pmu_type,
                config1: ev.config1.unwrap_or(0),
                config2: 0,
                exclude_user: false,
                exclude_kernel: false,
            });
        }
    }
    if out.is_empty() {
        return Err(BackendError::Plan(format!(
            "{}: discovery found no read/write events to open",
            source.backend.as_str()
        )));
    }
    Ok(out)
}

/// The counters of the intel-client-mchbar source: one package, addresses from discovery.
pub fn mchbar_counters(
    source: &Source,
    topo: &Topology,
) -> Result<Vec<MchbarCounter>, BackendError> {
    let package = topo.packages.first().map_or(0, |p| p.id);
    let mut out = Vec::new();
    for ev in &source.events {
        let Some(direction) = ev.direction.or_else(|| direction_of_name(&ev.name)) else {
            continue;
        };
        let (Some(address), Some(width)) = (ev.address, ev.width) else {
            continue;
        };
        out.push(MchbarCounter {
            spec: CounterSpec {
                event: ev.name.clone(),
                pmu: if ev.pmu.is_empty() {
                    "mchbar".to_string()
                } else {
                    ev.pmu.clone()
                },
                cpu: None,
                scope: Scope::Package(package),
                package: Some(package),
                direction: Some(direction),
                memory: Memory::Dram,
                bytes_per_count: Some(ev.bytes_per_count.unwrap_or(64.0)),
                scale: 1.0,
                // The backend unwraps the hardware width itself and reports 64-bit totals.
                counter_bits: 64,
                config: 0,
            },
            address,
            width,
        });
    }
    if out.is_empty() {
        return Err(BackendError::Plan(
            "intel-client-mchbar: discovery found no counter addresses".to_string(),
        ));
    }
    Ok(out)
}

/// Guesses the direction of a user's bandwidth event from its name (`cas_count_read`,
/// `UNC_M_CAS_COUNT.WR`, `data_writes`): everything else counts as total traffic.
fn guess_direction(event: &str) -> Direction {
    let e = event.to_ascii_lowercase();
    let has = |w: &[&str]| w.iter().any(|w| e.contains(w));
    if has(&["read", ".rd", "_rd"]) {
        Direction::Read
    } else if has(&["write", ".wr", "_wr"]) {
        Direction::Write
    } else {
        Direction::Total
    }
}

/// The counters for `-e` events: on each CPU of the PMU's cpumask (one per package), or on every
/// online CPU for PMUs without one (software, msr, core), as `perf stat -a` does.
pub fn encoded_counters(encs: &[Encoded], topo: &Topology) -> Vec<PerfCounter> {
    let mut out = Vec::new();
    for enc in encs {
        let cpus: &[u32] = enc.cpus.as_deref().unwrap_or(&topo.online);
        for (i, &cpu) in cpus.iter().enumerate() {
            let (scope, package) = if enc.cpus.is_some() {
                let p = package_of(topo, cpu, i);
                (Scope::Package(p), Some(p))
            } else {
                (Scope::Cpu(cpu), topo.package_of(cpu))
            };
            out.push(PerfCounter {
                spec: CounterSpec {
                    event: enc.event.clone(),
                    pmu: enc.pmu.clone(),
                    cpu: Some(cpu),
                    scope,
                    package,
                    direction: enc.bytes_per_count.map(|_| guess_direction(&enc.event)),
                    memory: Memory::Dram,
                    bytes_per_count: enc.bytes_per_count,
                    scale: enc.scale.unwrap_or(1.0),
                    counter_bits: 64,
                    config: enc.config,
                },
                pmu_type: enc.pmu_type,
                config1: enc.config1,
                config2: enc.config2,
                exclude_user: enc.exclude_user,
                exclude_kernel: enc.exclude_kernel,
            });
        }
    }
    out
}

//! A [`Plan`] of `imc stat` turned into the counters its backends open: perf counters, or the
//! MCHBAR's physical addresses.
use super::{BackendError, CounterSpec, Memory};
use crate::model::{BackendKind, Scope};
use crate::plan::{Counter, Plan};

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

/// The memory a counter measures: KNL's EDC counters are MCDRAM, a CXL device's are CXL.
fn memory_of(c: &Counter) -> Memory {
    if c.tier == crate::model::Tier::Cxl {
        Memory::Cxl
    } else if c.pmu.starts_with("uncore_edc") || c.value_key.starts_with("mcdram_") {
        Memory::Mcdram
    } else {
        Memory::Dram
    }
}

fn scope_of(c: &Counter) -> Scope {
    match (c.package, c.channel) {
        (Some(package), Some(channel)) => Scope::Channel { package, channel },
        (Some(package), None) => Scope::Package(package),
        _ => Scope::Cpu(c.cpus.first().copied().unwrap_or(0)),
    }
}

/// The perf counters of a plan: each counter on each CPU it is opened on (a CPU-scope counter
/// on every online CPU).
pub fn perf_counters(plan: &Plan, topo: &crate::model::Topology) -> Vec<PerfCounter> {
    let stand_in = plan.backend.is_some_and(|b| !b.is_memory_controller());
    let mut out = Vec::new();
    for c in plan.counters.iter().filter(|c| c.address.is_none()) {
        for &cpu in &c.cpus {
            let scope = if c.package.is_some() {
                scope_of(c)
            } else {
                Scope::Cpu(cpu)
            };
            let package = c.package.or_else(|| topo.package_of(cpu));
            out.push(PerfCounter {
                spec: CounterSpec {
                    event: c.value_key.clone(),
                    pmu: c.pmu.clone(),
                    cpu: Some(cpu),
                    scope,
                    package,
                    direction: c.direction.filter(|_| !stand_in),
                    memory: memory_of(c),
                    bytes_per_count: c.bytes_per_count.filter(|_| !stand_in),
                    scale: c.encoded.scale.unwrap_or(1.0),
                    counter_bits: if plan.backend.is_some() {
                        c.counter_bits
                    } else {
                        64
                    },
                    config: c.encoded.config,
                    sub_channel: c.sub_channel,
                },
                pmu_type: c.encoded.pmu_type,
                config1: c.encoded.config1,
                config2: c.encoded.config2,
                exclude_user: c.encoded.exclude_user,
                exclude_kernel: c.encoded.exclude_kernel,
            });
        }
    }
    out
}

/// The counters of the intel-client-mchbar source.
pub fn mchbar_counters(plan: &Plan) -> Result<Vec<MchbarCounter>, BackendError> {
    let out: Vec<MchbarCounter> = plan
        .counters
        .iter()
        .filter_map(|c| {
            let (address, width) = (c.address?, c.width?);
            let package = c.package.unwrap_or(0);
            Some(MchbarCounter {
                spec: CounterSpec {
                    event: c.value_key.clone(),
                    pmu: c.pmu.clone(),
                    cpu: None,
                    scope: Scope::Package(package),
                    package: Some(package),
                    direction: c.direction,
                    memory: Memory::Dram,
                    bytes_per_count: c.bytes_per_count,
                    scale: 1.0,
                    // The backend unwraps the hardware width itself and reports 64-bit totals.
                    counter_bits: 64,
                    config: 0,
                    sub_channel: c.sub_channel,
                },
                address,
                width,
            })
        })
        .collect();
    if out.is_empty() {
        return Err(BackendError::Plan(
            "intel-client-mchbar: discovery found no counter addresses".to_string(),
        ));
    }
    Ok(out)
}

/// Whether the plan is executed by the /dev/mem backend.
pub fn is_mchbar(plan: &Plan) -> bool {
    plan.backend == Some(BackendKind::IntelClientMchbar)
}

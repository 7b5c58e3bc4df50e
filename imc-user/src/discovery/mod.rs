//! Discovery: topology, PMUs and the backends they make possible, as pure functions of a root
//! directory (`--root DIR`: DIR/sys and DIR/proc, never the host's / directly).
//!
//! - [`cpulist`], [`format`]: the kernel's text formats (also fuzzed).
//! - [`sysfs`]: PMUs from `sys/bus/event_source/devices` (symlinks followed).
//! - [`topology`], [`machine`]: CPUs/packages/NUMA nodes; vendor, model, hypervisor.
//! - [`mchbar`]: the Intel client MCHBAR counter layout.
//! - [`cgroup`]: cgroup v2 ids → paths → systemd unit, container id, pod UID.
//! - [`dmi`]: SMBIOS memory devices, for the theoretical peak bandwidth.
//! - `catalogue`: every backend, available or not, with the reason (one file per vendor).
//! - [`other`]: PMUs that are not bandwidth sources (AMD IBS, POWER core/thread/trace IMC),
//!   with the facts a planner needs, and [`non_bandwidth::power_imc_plan_notes`].
mod catalogue;
pub mod cgroup;
pub mod cpulist;
pub mod dmi;
pub mod format;
pub mod kernel_config;
pub mod machine;
pub mod mchbar;
pub mod non_bandwidth;
pub mod process_tree;
pub mod resctrl;
pub mod sysfs;
pub mod topology;

pub use catalogue::pmu_limits;
pub use cpulist::{CpuListError, parse_cpulist};
pub use format::{AttrWords, FormatError, encode_terms, parse_format, place_value};
pub use machine::Machine;
pub use sysfs::{DiscoveryError, read_pmu, read_pmus};
pub use topology::read_topology;

use crate::model::{CorePmu, Discovery, Pmu, Topology};
use std::path::Path;

/// Everything `imc list` shows: the discovery result plus the machine facts behind it.
#[derive(Clone, Debug)]
pub struct Report {
    pub discovery: Discovery,
    pub machine: Machine,
}

/// Discovers topology, PMUs and every backend under `root`.
pub fn discover(root: &Path) -> Result<Discovery, DiscoveryError> {
    discover_report(root).map(|r| r.discovery)
}

/// `discover` plus the machine facts (vendor, model, hypervisor source).
pub fn discover_report(root: &Path) -> Result<Report, DiscoveryError> {
    let sys = root.join("sys");
    if !sys.is_dir() {
        return Err(DiscoveryError::Missing {
            path: sys,
            expected: "a sysfs tree (DIR/sys)".into(),
        });
    }
    let machine = machine::read_machine(root)?;
    let topology = read_topology(root)?;
    let pmus = read_pmus(root)?;
    let ctx = catalogue::Ctx {
        root,
        topo: &topology,
        machine: &machine,
        pmus: &pmus,
    };
    let sources = catalogue::catalogue(&ctx)?;
    let queues = catalogue::queues(&ctx);
    let other_sources = non_bandwidth::other_sources(root, &pmus)?;
    let cores = core_pmus(&pmus, &topology)?;
    Ok(Report {
        discovery: Discovery {
            hypervisor: machine.hypervisor,
            topology,
            sources,
            other_sources,
            machine: machine.clone(),
            cores,
            queues,
        },
        machine,
    })
}

/// The core PMUs among `pmus`: `cpu_core` and `cpu_atom` on hybrid Intel parts (each on the
/// CPUs of its `cpus` file), else `cpu` on every online CPU, or on Arm the arm_pmuv3 PMUs
/// (`armv8_pmuv3_0`, `armv9_neoverse_v2`, each on its `cpus`). A PMU without the `event` format
/// term (a VM's software-only `cpu` stand-in) cannot count core events and is left out.
pub fn core_pmus(pmus: &[Pmu], topo: &Topology) -> Result<Vec<CorePmu>, DiscoveryError> {
    let hybrid = pmus
        .iter()
        .any(|p| p.name == "cpu_core" || p.name == "cpu_atom");
    pmus.iter()
        .filter(|p| {
            if hybrid {
                p.name == "cpu_core" || p.name == "cpu_atom"
            } else {
                p.name == "cpu" || is_arm_core(&p.name)
            }
        })
        .filter(|p| p.formats.contains_key("event"))
        .map(|p| {
            Ok(CorePmu {
                cpus: p.cpumask.clone().unwrap_or_else(|| topo.online.clone()),
                pmu_name: sysfs::read_optional(&p.path.join("caps/pmu_name"))?,
                pmu: p.clone(),
            })
        })
        .collect()
}

/// An arm_pmuv3 core PMU, named `armv8_*` or `armv9_*` by drivers/perf/arm_pmuv3.c.
pub fn is_arm_core(name: &str) -> bool {
    name.starts_with("armv8_") || name.starts_with("armv9_")
}

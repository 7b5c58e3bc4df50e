//! CPUs, packages and NUMA nodes from `sys/devices/system/{cpu,node}` under a root.
use super::sysfs::{DiscoveryError, read_cpulist_file, read_optional, read_u32};
use crate::model::{NumaNode, Package, Topology};
use std::collections::BTreeMap;
use std::path::Path;

/// One die of a package (`die_id`); only multi-die parts (Cascade Lake-AP, …) have more than one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Die {
    pub package: u32,
    pub id: u32,
    pub cpus: Vec<u32>,
}

/// The online CPUs' numbers under `root` (`sys/devices/system/cpu/online`).
pub fn online_cpus(root: &Path) -> Result<Vec<u32>, DiscoveryError> {
    read_cpulist_file(&root.join("sys/devices/system/cpu/online"))
}

pub fn read_topology(root: &Path) -> Result<Topology, DiscoveryError> {
    let cpu_dir = root.join("sys/devices/system/cpu");
    let online = online_cpus(root)?;
    // `possible` is informational; older or trimmed trees may lack it.
    let possible = match read_optional(&cpu_dir.join("possible"))? {
        Some(_) => read_cpulist_file(&cpu_dir.join("possible"))?,
        None => online.clone(),
    };

    let mut by_pkg: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for &cpu in &online {
        let path = cpu_dir.join(format!("cpu{cpu}/topology/physical_package_id"));
        // A CPU without topology (a minimal tree, or an architecture that does not export it)
        // belongs to package 0: one package is the safe assumption for counting.
        let pkg = if path.exists() {
            read_u32(&path, "a decimal physical package id")?
        } else {
            0
        };
        by_pkg.entry(pkg).or_default().push(cpu);
    }
    let packages = by_pkg
        .into_iter()
        .map(|(id, cpus)| Package { id, cpus })
        .collect();

    Ok(Topology {
        online,
        possible,
        packages,
        nodes: read_nodes(root)?,
    })
}

/// Dies per package from `topology/die_id`, when the tree has it.
pub fn read_dies(root: &Path, topo: &Topology) -> Result<Vec<Die>, DiscoveryError> {
    let cpu_dir = root.join("sys/devices/system/cpu");
    let mut by_die: BTreeMap<(u32, u32), Vec<u32>> = BTreeMap::new();
    for pkg in &topo.packages {
        for &cpu in &pkg.cpus {
            let path = cpu_dir.join(format!("cpu{cpu}/topology/die_id"));
            let die = if path.exists() {
                read_u32(&path, "a decimal die id")?
            } else {
                0
            };
            by_die.entry((pkg.id, die)).or_default().push(cpu);
        }
    }
    Ok(by_die
        .into_iter()
        .map(|((package, id), cpus)| Die { package, id, cpus })
        .collect())
}

/// NUMA nodes `nodeN/cpulist`. Ids need not be contiguous (POWER9 uses the chip id: 0 and 8)
/// and a memory-only node (KNL MCDRAM in flat mode) has an empty cpulist.
fn read_nodes(root: &Path) -> Result<Vec<NumaNode>, DiscoveryError> {
    let dir = root.join("sys/devices/system/node");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        // No NUMA support compiled in: no nodes, not an error.
        return Ok(Vec::new());
    };
    let mut nodes = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_prefix("node"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let cpulist = entry.path().join("cpulist");
        let cpus = if cpulist.exists() {
            read_cpulist_file(&cpulist)?
        } else {
            Vec::new()
        };
        nodes.push(NumaNode { id, cpus });
    }
    nodes.sort_by_key(|n| n.id);
    Ok(nodes)
}

/// The first CPU of `cpumask` in each package: the CPU a package-scope event is opened on.
/// The kernel keeps one CPU per package in an uncore PMU's cpumask (uncore.c
/// uncore_event_cpu_online); should a mask list several, the first wins.
pub fn designated_cpus(topo: &Topology, cpumask: &[u32]) -> Vec<u32> {
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for &cpu in cpumask {
        let pkg = topo.package_of(cpu);
        if pkg.is_none() || !seen.contains(&pkg) {
            seen.push(pkg);
            out.push(cpu);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_designated_cpu_per_package() {
        let topo = Topology {
            online: (0..8).collect(),
            possible: (0..8).collect(),
            packages: vec![
                Package {
                    id: 0,
                    cpus: vec![0, 1, 2, 3],
                },
                Package {
                    id: 8,
                    cpus: vec![4, 5, 6, 7],
                },
            ],
            nodes: vec![],
        };
        assert_eq!(designated_cpus(&topo, &[0, 4]), [0, 4]);
        // A mask listing several CPUs of one package keeps the first of each.
        assert_eq!(designated_cpus(&topo, &[1, 2, 5, 6]), [1, 5]);
        assert_eq!(designated_cpus(&topo, &[]), Vec::<u32>::new());
    }

    #[test]
    fn nodes_sparse_and_empty() {
        let d = tempfile::tempdir().unwrap();
        let cpu = d.path().join("sys/devices/system/cpu");
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::write(cpu.join("online"), "0-1\n").unwrap();
        for (n, list) in [(0, "0-1\n"), (8, "\n")] {
            let nd = d.path().join(format!("sys/devices/system/node/node{n}"));
            std::fs::create_dir_all(&nd).unwrap();
            std::fs::write(nd.join("cpulist"), list).unwrap();
        }
        let t = read_topology(d.path()).unwrap();
        assert_eq!(t.possible, [0, 1]);
        assert_eq!(t.packages.len(), 1);
        assert_eq!(t.nodes.iter().map(|n| n.id).collect::<Vec<_>>(), [0, 8]);
        assert!(t.nodes[1].cpus.is_empty());
        assert_eq!(read_dies(d.path(), &t).unwrap().len(), 1);
    }
}

//! Record slots and package readers of a sampling plan: which slot each counter is read into
//! (package counters of one event summed per package), and which CPUs' ticks (or userspace)
//! read each package's counters.
use super::kernel::Kernel;
use super::types::{Counter, CounterRole, PlanError, Reader, Request, Slot};
use crate::model::{Direction, Discovery, SlotRole, SlotScope, Topology};
use imc_common::{MAX_PKG_COUNTERS, MAX_SLOTS};

/// Whether the kernel lets any CPU of a package read this PMU's counters (Intel uncore since
/// Linux 6.7, PERF_EV_CAP_READ_ACTIVE_PKG); elsewhere only the CPU it is opened on may.
pub(super) fn any_cpu_of_package_reads(pmu: &str, kernel: &Kernel) -> bool {
    kernel.at_least(6, 7) && pmu.starts_with("uncore_")
}

/// The record slot a counter shares with others of the same key: package counters of one event
/// (or one direction) are summed per package; weights of one role share a slot (a hybrid
/// part's two core PMUs, each on its own CPUs); every other CPU counter has its own.
pub(super) fn slot_key(c: &Counter, req: &Request, index: usize) -> String {
    if let Some(w) = c.weight {
        return format!("weight:{:?}:{}:{}", w.direction, w.remote, w.ordinal);
    }
    if let Some(part) = c.stall {
        return format!("stall:{}", part.as_str());
    }
    match (c.package, c.direction) {
        (Some(_), Some(d)) if req.events.is_empty() => format!("pkg:{d:?}:{}", c.value_key),
        (Some(_), _) => format!("pkg:{}", c.value_key),
        (None, _) => format!("cpu:{}:{index}", c.value_key),
    }
}

/// How many record slots `counters` take.
pub(super) fn slot_count(counters: &[Counter], req: &Request) -> usize {
    let mut keys: Vec<String> = counters
        .iter()
        .enumerate()
        .map(|(i, c)| slot_key(c, req, i))
        .collect();
    keys.sort();
    keys.dedup();
    keys.len()
}

/// Gives every counter its record slot and reader: CPU counters a slot each, read by every CPU
/// for itself; package counters summed per package into one slot per event (per direction for
/// a memory controller), read by one reader per package. Returns the slots.
pub(super) fn assign_slots(
    counters: &mut [Counter],
    found: &Discovery,
    kernel: &Kernel,
    req: &Request,
    notes: &mut Vec<String>,
) -> Result<Vec<Slot>, PlanError> {
    let mut slots = slots_of(counters, req);
    if slots.len() > MAX_SLOTS {
        return Err(PlanError::TooManySlots {
            have: slots.len(),
            max: MAX_SLOTS,
        });
    }
    say_package_sums(&mut slots, counters);
    let nr_package = counters.iter().filter(|c| c.package.is_some()).count();
    let possible = found
        .topology
        .possible
        .len()
        .max(found.topology.online.len());
    if nr_package > possible {
        notes.push(format!(
            "{nr_package} package counters and {possible} CPUs: their array is longer than the \
             CPU count that aya gives such arrays, so imc makes it on a private bpffs mount \
             (needs root or CAP_SYS_ADMIN) and removes the mount once loaded"
        ));
    }
    for pkg in packages_of(counters) {
        assign_package_readers(counters, pkg, found, kernel, req, notes)?;
    }
    Ok(slots)
}

/// One slot per distinct [`slot_key`], in first-appearance order; each counter told its slot
/// and its slot's role.
pub(super) fn slots_of(counters: &mut [Counter], req: &Request) -> Vec<Slot> {
    let mut slots: Vec<Slot> = Vec::new();
    let mut keys: Vec<String> = Vec::new();
    for (i, c) in counters.iter_mut().enumerate() {
        let key = slot_key(c, req, i);
        let index = match keys.iter().position(|k| *k == key) {
            Some(i) => i,
            None => {
                keys.push(key);
                slots.push(new_slot(c, slots.is_empty()));
                keys.len() - 1
            }
        };
        c.slot = Some(index);
        c.role = CounterRole::of_slot(slots[index].role);
    }
    slots
}

/// The slot `c` is the first counter of (`first`: the first slot of the plan).
pub(super) fn new_slot(c: &Counter, first: bool) -> Slot {
    Slot {
        event: c.value_key.clone(),
        scope: if c.package.is_some() {
            SlotScope::Package
        } else {
            SlotScope::Cpu
        },
        direction: match c.weight {
            Some(w) => w.direction,
            None => c.direction,
        },
        role: match (c.weight, c.stall) {
            (Some(w), _) if w.remote => SlotRole::RemoteWeight(w.direction),
            (Some(w), _) => SlotRole::Weight(w.direction),
            (None, Some(part)) => SlotRole::Stall(part),
            // A traffic slot without a direction (a stand-in's count) weighs every direction.
            (None, None) if c.bytes_per_count.is_some() || first => {
                SlotRole::Traffic(c.direction.unwrap_or(Direction::Total))
            }
            (None, None) => SlotRole::Other,
        },
        bytes_per_count: c.bytes_per_count,
        sum: None,
    }
}

/// Each package slot says how many counters a package sums into it (the most of any package).
pub(super) fn say_package_sums(slots: &mut [Slot], counters: &[Counter]) {
    for (i, slot) in slots.iter_mut().enumerate() {
        if slot.scope != SlotScope::Package {
            continue;
        }
        let per_pkg = counters.iter().filter(|c| c.slot == Some(i)).fold(
            std::collections::BTreeMap::new(),
            |mut m, c| {
                *m.entry(c.package).or_insert(0usize) += 1;
                m
            },
        );
        let most = per_pkg.values().copied().max().unwrap_or(0);
        slot.sum = Some(format!("sum of {most} counter(s) per package"));
    }
}

/// Who reads package `pkg`'s counters: the tick of one CPU per reader, or userspace every
/// drain where a PMU holds more events than it has counters (the kernel multiplexes them).
pub(super) fn assign_package_readers(
    counters: &mut [Counter],
    pkg: u32,
    found: &Discovery,
    kernel: &Kernel,
    req: &Request,
    notes: &mut Vec<String>,
) -> Result<(), PlanError> {
    let idle_every_ms = 2 * req.drain_ms;
    let in_pkg: Vec<usize> = (0..counters.len())
        .filter(|&i| counters[i].package == Some(pkg))
        .collect();
    if in_pkg.len() > MAX_PKG_COUNTERS as usize {
        return Err(PlanError::TooManyPackageCounters {
            package: pkg,
            have: in_pkg.len(),
            max: MAX_PKG_COUNTERS,
        });
    }
    let crowded = crowded_pmus(counters, &in_pkg);
    let readers = if crowded.is_empty() {
        let r = package_readers(counters, &in_pkg, pkg, &found.topology, kernel);
        notes.push(reader_note(counters, &in_pkg, pkg, &r, kernel));
        r
    } else {
        notes.push(format!(
            "package {pkg}: {} counts {} events with {} hardware counters, so the kernel \
             takes turns and each count must be scaled by its time enabled/running, which \
             a tick's sum cannot do: userspace reads and scales them every {} ms",
            crowded[0].0, crowded[0].1, crowded[0].2, req.drain_ms
        ));
        Vec::new()
    };
    for i in in_pkg {
        counters[i].reader = if readers.is_empty() {
            Reader::Userspace {
                every_ms: req.drain_ms,
            }
        } else {
            Reader::PackageTick {
                cpus: readers.clone(),
                idle_every_ms,
            }
        };
    }
    Ok(())
}

/// Hardware counters of one instance of a package PMU, where fewer than the events imc may put
/// on it: AMD's data fabric counts 4 events at once without PerfMonV2 (amd/uncore.c
/// NUM_COUNTERS_NB), and Zen 2/3 have 8 DRAM channel events; Intel uncore boxes and AMD UMCs
/// have 4 for imc's 2, POWER's nest counters are memory the firmware fills.
pub(super) fn hardware_counters(pmu: &str) -> Option<usize> {
    (pmu == "amd_df").then_some(4)
}

/// (PMU instance, events, hardware counters) for each instance of this package that has more
/// events than counters: the kernel multiplexes them.
pub(super) fn crowded_pmus(counters: &[Counter], in_pkg: &[usize]) -> Vec<(String, usize, usize)> {
    let mut per: std::collections::BTreeMap<&str, usize> = Default::default();
    for &i in in_pkg {
        *per.entry(counters[i].pmu.as_str()).or_default() += 1;
    }
    per.into_iter()
        .filter_map(|(pmu, n)| {
            let hw = hardware_counters(pmu)?;
            (n > hw).then(|| (pmu.to_string(), n, hw))
        })
        .collect()
}

/// Why package `pkg`'s counters have the readers they have.
pub(super) fn reader_note(
    counters: &[Counter],
    in_pkg: &[usize],
    pkg: u32,
    readers: &[u32],
    kernel: &Kernel,
) -> String {
    let pmu = &counters[in_pkg[0]].pmu;
    let release = kernel.release.as_deref().unwrap_or("unknown");
    let list = crate::discovery::cpulist::format_cpulist(readers);
    if readers.is_empty() {
        format!(
            "package {pkg}: its counters are opened on several CPUs and this kernel ({release}) \
             lets only that CPU read each: userspace reads them at every drain"
        )
    } else if readers.len() > 1 {
        format!(
            "package {pkg}: Linux 6.7+ (here {release}) lets any CPU of the package read {pmu}'s \
             counters: the first of CPUs {list} to tick in a period reads them all"
        )
    } else if pmu.starts_with("uncore_") && kernel.release.is_none() {
        format!(
            "package {pkg}: the kernel's release is unknown (no proc/sys/kernel/osrelease under \
             --root), so as before Linux 6.7 only the CPU {pmu} is opened on may read it: CPU \
             {list}'s ticks read all of the package's counters"
        )
    } else if pmu.starts_with("uncore_") {
        format!(
            "package {pkg}: before Linux 6.7 (here {release}) only the CPU {pmu} is opened on may \
             read it: CPU {list}'s ticks read all of the package's counters"
        )
    } else {
        format!(
            "package {pkg}: only the CPU {pmu} is opened on may read it: CPU {list}'s ticks read \
             all of the package's counters"
        )
    }
}

pub(super) fn packages_of(counters: &[Counter]) -> Vec<u32> {
    let mut v: Vec<u32> = counters.iter().filter_map(|c| c.package).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The CPUs whose ticks may read every counter of package `pkg`: all its online CPUs where the
/// kernel allows any CPU of the package to read each of them; else the one CPU they are all
/// opened on; else none (counters opened on several CPUs of the package, one per die, on a
/// kernel where only that CPU may read each): userspace reads them.
pub(super) fn package_readers(
    counters: &[Counter],
    in_pkg: &[usize],
    pkg: u32,
    topo: &Topology,
    kernel: &Kernel,
) -> Vec<u32> {
    let anyone = in_pkg
        .iter()
        .all(|&i| any_cpu_of_package_reads(&counters[i].pmu, kernel));
    if anyone && let Some(p) = topo.packages.iter().find(|p| p.id == pkg) {
        let cpus: Vec<u32> = p
            .cpus
            .iter()
            .copied()
            .filter(|c| topo.online.contains(c))
            .collect();
        if !cpus.is_empty() {
            return cpus;
        }
    }
    let mut open: Vec<u32> = in_pkg
        .iter()
        .flat_map(|&i| counters[i].cpus.iter().copied())
        .collect();
    open.sort_unstable();
    open.dedup();
    if open.len() == 1 { open } else { Vec::new() }
}

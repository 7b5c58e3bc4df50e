//! Counters from what discovery found: a memory controller's bandwidth events on every channel
//! of every package, a stand-in's per-CPU count, a /dev/mem counter, `-e` events; channels
//! numbered within each package.
use super::types::{Counter, CounterRole, CounterScope, Reader};
use crate::model::{
    BackendKind, Direction, Encoded, Scope, Source, SourceEvent, SourcePmu, Tier, Topology,
};

pub(super) fn direction_of_name(name: &str) -> Option<Direction> {
    match name {
        "read" => Some(Direction::Read),
        "write" => Some(Direction::Write),
        "total" => Some(Direction::Total),
        _ => None,
    }
}

/// Guesses the direction of a user's bandwidth event from its name (`cas_count_read`,
/// `UNC_M_CAS_COUNT.WR`, `data_writes`): everything else counts as total traffic.
pub fn guess_direction(event: &str) -> Direction {
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

/// The package of a PMU's designated CPU; a cpumask lists one CPU per package in package order,
/// so the position is the fallback when the topology does not know the CPU.
pub(super) fn package_of(topo: &Topology, cpu: u32, position: usize) -> u32 {
    topo.package_of(cpu).unwrap_or_else(|| {
        topo.packages
            .get(position)
            .map_or(position as u32, |p| p.id)
    })
}

impl From<Scope> for CounterScope {
    fn from(scope: Scope) -> CounterScope {
        match scope {
            Scope::Cpu(_) => CounterScope::Cpu,
            Scope::Package(_) => CounterScope::Package,
            Scope::Channel { .. } => CounterScope::Channel,
        }
    }
}

/// The value key of a default event: its name, prefixed for MCDRAM and CXL memory so that a
/// machine's two memories stay apart.
pub(super) fn value_key(backend: BackendKind, name: &str) -> String {
    match backend {
        BackendKind::KnlEdc => format!("mcdram_{name}"),
        BackendKind::CxlPmu => format!("{}{name}", Tier::CXL_PREFIX),
        _ => name.to_string(),
    }
}

/// A memory controller's bandwidth events, on every channel (PMU instance) of every package.
/// Auxiliary events (clock ticks) are not bandwidth and are left out.
pub fn source_counters(source: &Source, topo: &Topology) -> Vec<Counter> {
    let mut out = Vec::new();
    // PMU by name (the first of a name, as a search would find): thousands of PMUs with two
    // events each must not make this quadratic.
    let mut by_name: std::collections::HashMap<&str, usize> = Default::default();
    for (i, p) in source.pmus.iter().enumerate() {
        by_name.entry(p.name.as_str()).or_insert(i);
    }
    let pmu_of = |ev: &SourceEvent| by_name.get(ev.pmu.as_str()).map(|&i| &source.pmus[i]);
    // A stand-in source's events (msr tsc, page-faults) are counted as plain values per CPU.
    let stand_in = !source.backend.is_memory_controller();
    for ev in &source.events {
        let direction = ev.direction.or_else(|| direction_of_name(&ev.name));
        if stand_in {
            out.extend(stand_in_counter(ev, pmu_of(ev)));
            continue;
        }
        let Some(direction) = direction else {
            continue;
        };
        let channel = by_name.get(ev.pmu.as_str()).copied().unwrap_or(0) as u32;
        let several = source.pmus.len() > 1;
        if let (Some(address), Some(width)) = (ev.address, ev.width) {
            out.push(mchbar_counter(ev, direction, topo, address, width));
            continue;
        }
        let Some(config) = ev.config else { continue };
        let Some(pmu) = pmu_of(ev) else {
            continue;
        };
        let channel = several.then_some(channel);
        out.extend(pmu.cpus.iter().enumerate().map(|(i, &cpu)| {
            let package = package_of(topo, cpu, i);
            channel_counter(source, ev, pmu, config, direction, package, channel, cpu)
        }));
    }
    out
}

/// A stand-in's event (msr tsc, page-faults): a plain value per CPU, no bytes.
pub(super) fn stand_in_counter(ev: &SourceEvent, pmu: Option<&SourcePmu>) -> Option<Counter> {
    let (Some(config), Some(pmu)) = (ev.config, pmu) else {
        return None;
    };
    let enc = Encoded {
        event: format!("{}/{}", ev.pmu, ev.name),
        pmu: ev.pmu.clone(),
        pmu_type: pmu.pmu_type,
        config,
        config1: ev.config1.unwrap_or(0),
        ..Default::default()
    };
    let mut c = event_counter(&ev.name, &enc, None, None, pmu.cpus.clone(), None);
    c.bytes_per_count = None;
    Some(c)
}

/// A /dev/mem counter (MCHBAR): one package, no perf encoding.
pub(super) fn mchbar_counter(
    ev: &SourceEvent,
    direction: Direction,
    topo: &Topology,
    address: u64,
    width: u8,
) -> Counter {
    let package = topo.packages.first().map_or(0, |p| p.id);
    Counter {
        pmu: if ev.pmu.is_empty() {
            "mchbar".into()
        } else {
            ev.pmu.clone()
        },
        event: ev.name.clone(),
        package: Some(package),
        channel: None,
        sub_channel: None,
        queue: None,
        pseudo_channel: None,
        direction: Some(direction),
        scope: CounterScope::Package,
        cpus: Vec::new(),
        reader: Reader::Tick,
        bytes_per_count: Some(ev.bytes_per_count.unwrap_or(64.0)),
        slot: None,
        role: CounterRole::Traffic,
        weight: None,
        stall: None,
        counter_mask: None,
        value_key: ev.name.clone(),
        encoded: Encoded::default(),
        counter_bits: 64,
        address: Some(address),
        width: Some(width),
        tier: Tier::Dram,
        limits: None,
    }
}

/// A PMU event read on `cpu` for `package`: the channel's counter where the source has one
/// PMU per channel (`channel`), else the package's.
#[allow(clippy::too_many_arguments)]
pub(super) fn channel_counter(
    source: &Source,
    ev: &SourceEvent,
    pmu: &SourcePmu,
    config: u64,
    direction: Direction,
    package: u32,
    channel: Option<u32>,
    cpu: u32,
) -> Counter {
    let scope = match channel {
        Some(channel) => Scope::Channel { package, channel },
        None => Scope::Package(package),
    };
    Counter {
        pmu: ev.pmu.clone(),
        event: ev.name.clone(),
        package: Some(package),
        channel,
        sub_channel: ev.sub_channel,
        queue: None,
        pseudo_channel: None,
        direction: Some(direction),
        scope: scope.into(),
        cpus: vec![cpu],
        reader: Reader::Tick,
        bytes_per_count: Some(ev.bytes_per_count.unwrap_or(1.0)),
        slot: None,
        role: CounterRole::Traffic,
        weight: None,
        stall: None,
        counter_mask: None,
        value_key: value_key(source.backend, &ev.name),
        encoded: Encoded {
            event: format!("{}/{}", ev.pmu, ev.name),
            pmu: ev.pmu.clone(),
            pmu_type: pmu.pmu_type,
            config,
            config1: ev.config1.unwrap_or(0),
            config2: ev.config2.unwrap_or(0),
            bytes_per_count: ev.bytes_per_count,
            cpus: Some(vec![cpu]),
            ..Default::default()
        },
        counter_bits: ev.counter_bits,
        address: None,
        width: None,
        tier: source.backend.tier(),
        limits: crate::discovery::pmu_limits(&ev.pmu),
    }
}

/// Channels numbered in order within each package and direction (and memory), where a package
/// has several counters of one direction: a PMU instance each (SKX's uncore_imc_N), or several
/// events of one PMU (AMD DF's per-channel events, POWER's nest MCS pairs).
pub(super) fn number_channels(counters: &mut [Counter]) {
    // Counted in one pass and numbered in a second, so thousands of PMUs plan in linear time.
    // Where events carry sub-channels (GNR: one PMU per channel, an event per scheduler), the
    // PMU instance is the channel and its events share its number.
    let key = |c: &Counter| (c.package, c.direction, c.value_key.clone());
    let mut same: std::collections::HashMap<_, u32> = Default::default();
    let mut seen: std::collections::HashSet<_> = Default::default();
    for c in counters.iter() {
        if c.sub_channel.is_none() || seen.insert((key(c), c.pmu.clone())) {
            *same.entry(key(c)).or_default() += 1;
        }
    }
    let mut before: std::collections::HashMap<_, u32> = Default::default();
    let mut of_pmu: std::collections::HashMap<_, u32> = Default::default();
    for c in counters.iter_mut() {
        let k = key(c);
        let index = if c.sub_channel.is_some() {
            match of_pmu.get(&(k.clone(), c.pmu.clone())) {
                Some(&i) => i,
                None => {
                    let n = before.entry(k.clone()).or_default();
                    let i = *n;
                    *n += 1;
                    of_pmu.insert((k.clone(), c.pmu.clone()), i);
                    i
                }
            }
        } else {
            let n = before.entry(k.clone()).or_default();
            let i = *n;
            *n += 1;
            i
        };
        if c.address.is_some() {
            continue;
        }
        if same[&k] > 1 {
            c.channel = Some(index);
            c.scope = CounterScope::Channel;
        } else {
            c.channel = None;
            c.scope = CounterScope::Package;
        }
    }
}

/// The counters of `-e` events: a PMU with a cpumask (uncore) on each of its CPUs (one per
/// package, each instance a channel), else on every online CPU, as `perf stat -a` does.
pub fn event_counters(events: &[(String, Vec<Encoded>)], topo: &Topology) -> Vec<Counter> {
    let mut out = Vec::new();
    for (text, encs) in events {
        let instances = encs.len();
        for (channel, enc) in encs.iter().enumerate() {
            let direction = enc.bytes_per_count.map(|_| guess_direction(&enc.event));
            match enc.cpus.as_deref() {
                Some(cpus) => {
                    for (i, &cpu) in cpus.iter().enumerate() {
                        let package = package_of(topo, cpu, i);
                        out.push(event_counter(
                            text,
                            enc,
                            Some(package),
                            (instances > 1).then_some(channel as u32),
                            vec![cpu],
                            direction,
                        ));
                    }
                }
                None if !topo.online.is_empty() => out.push(event_counter(
                    text,
                    enc,
                    None,
                    None,
                    topo.online.clone(),
                    direction,
                )),
                None => {}
            }
        }
    }
    out
}

pub(crate) fn event_counter(
    text: &str,
    enc: &Encoded,
    package: Option<u32>,
    channel: Option<u32>,
    cpus: Vec<u32>,
    direction: Option<Direction>,
) -> Counter {
    let scope = match (package, channel) {
        (None, _) => CounterScope::Cpu,
        (Some(_), None) => CounterScope::Package,
        (Some(_), Some(_)) => CounterScope::Channel,
    };
    Counter {
        pmu: enc.pmu.clone(),
        event: text.to_string(),
        package,
        channel,
        sub_channel: None,
        queue: None,
        pseudo_channel: None,
        direction,
        scope,
        cpus,
        reader: Reader::Tick,
        bytes_per_count: enc.bytes_per_count,
        slot: None,
        role: CounterRole::Other,
        weight: None,
        stall: None,
        counter_mask: None,
        value_key: text.to_string(),
        encoded: enc.clone(),
        counter_bits: if package.is_some() { 48 } else { 64 },
        address: None,
        width: None,
        tier: Tier::Dram,
        limits: None,
    }
}

//! Loaded latency in a plan: `stat --latency` (KNL's offcore-response pair, elsewhere the memory
//! controller's queues, or AMD's L3 sampled DRAM latency) and, in the sampling commands (`top`,
//! `record`, `serve`), the same queue counters beside the bandwidth counters where each PMU has
//! room, read by userspace once per interval ([`Reader::Interval`]): latency is a figure per
//! interval per package and channel, so the eBPF tick never reads them.
//!
//! The budget rule is one: a PMU instance's generic counters are never over-asked (imc does not
//! multiplex), a group of latency events that does not fit is dropped whole and said. `stat
//! --latency` puts the first rank of latency events before the bandwidth counters (which it then
//! drops if they do not fit); the sampling commands keep bandwidth first, since it is what they
//! attribute.
use super::counters::{event_counters, number_channels, package_of, source_counters};
use super::types::{
    Counter, CounterRole, CounterScope, LoadedLatency, PlanError, PlanSource, Reader, Refusal,
};
use crate::model::{BackendKind, Discovery, Encoded, QueueEvent, Queues, Source, SourcePmu};

/// Which comes first in a PMU's generic counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Room {
    /// `stat --latency`: the first rank of latency events, then bandwidth, then further ranks.
    LatencyFirst,
    /// The sampling commands: bandwidth, then the latency ranks that fit.
    BandwidthFirst,
}
/// `stat --latency`: KNL's DDR and MCDRAM channels, then the offcore-response pair on every
/// online CPU (the core PMU has no cpumask).
pub(super) fn latency_counters(
    found: &Discovery,
    (outstanding, requests): &(Encoded, Encoded),
) -> Result<(PlanSource, Option<BackendKind>, Vec<Counter>), PlanError> {
    let knl: Vec<&Source> = [BackendKind::KnlImc, BackendKind::KnlEdc]
        .iter()
        .filter_map(|k| found.sources.iter().find(|s| s.backend == *k))
        .collect();
    if let Some(s) = knl.iter().find(|s| !s.available) {
        return Err(PlanError::LatencyBackendUnavailable {
            backend: s.backend.as_str(),
            why: s.reason.as_deref().unwrap_or("no reason given").to_string(),
        });
    }
    if knl.is_empty() {
        return Err(PlanError::NoLatencyCounters);
    }
    let mut counters = Vec::new();
    for s in knl {
        counters.extend(source_counters(s, &found.topology));
    }
    number_channels(&mut counters);
    let pair: Vec<(String, Vec<Encoded>)> = [outstanding, requests]
        .into_iter()
        .map(|e| {
            let mut one = e.clone();
            one.cpus = None;
            (e.event.clone(), vec![one])
        })
        .collect();
    counters.extend(event_counters(&pair, &found.topology));
    Ok((PlanSource::KnlLatency, Some(BackendKind::KnlImc), counters))
}

/// `--latency` where the machine has no queues: one line with the reason (exit 2).
pub(super) fn no_queues(found: &Discovery) -> PlanError {
    PlanError::NoQueues(
        found
            .queues
            .reason
            .as_deref()
            .unwrap_or("none found")
            .to_string(),
    )
}

/// A dropped group of counters: (whether it is the PMU's bandwidth, the PMU, the refusal).
pub(super) type Dropped = (bool, String, Option<Refusal>);

/// `stat --latency` beside bandwidth: the queue counters, latency first, added to `counters`,
/// and the bandwidth counters a PMU has no room for beside them dropped; what was left out and
/// the note.
pub(super) fn for_stat(
    found: &Discovery,
    counters: &mut Vec<Counter>,
) -> Result<(Vec<Refusal>, String), PlanError> {
    let (kept, refused, note) = queue_counters(found, counters, Room::LatencyFirst)?;
    counters.retain(|c| {
        !refused
            .iter()
            .any(|r| r.0 && r.1 == c.pmu && c.direction.is_some())
    });
    counters.extend(kept);
    Ok((refused.into_iter().filter_map(|r| r.2).collect(), note))
}

/// The machine's loaded-latency events on every channel (or CCX), fitted into each PMU
/// instance's generic counters beside the `bandwidth` counters already planned, in the order
/// `room` says; a group that does not fit is dropped whole and said (the first PMU speaks for
/// all: every instance has the same events and counters), never multiplexed. The DRAM clock
/// takes the box's fixed counter.
pub(super) fn queue_counters(
    found: &Discovery,
    bandwidth: &[Counter],
    room: Room,
) -> Result<(Vec<Counter>, Vec<Dropped>, String), PlanError> {
    let q = &found.queues;
    if q.events.is_empty() {
        return Err(no_queues(found));
    }
    let mut out = Vec::new();
    let mut dropped: Vec<Dropped> = Vec::new();
    let mut ranks: Vec<u8> = q.events.iter().map(|e| e.rank).collect();
    ranks.sort_unstable();
    ranks.dedup();
    for (pi, pmu) in q.pmus.iter().enumerate() {
        let events: Vec<&QueueEvent> = q.events.iter().filter(|e| e.pmu == pmu.name).collect();
        // Generic counters the bandwidth plan already puts on one instance of this PMU.
        let first_cpu = pmu.cpus.first().copied();
        let bw = bandwidth
            .iter()
            .filter(|c| c.pmu == pmu.name && c.cpus.first().copied() == first_cpu)
            .count();
        let fit = Fit {
            q,
            events: &events,
            pmu: &pmu.name,
            speaks: pi == 0,
        };
        let keep_ranks = fit.ranks(&ranks, bw, room, &mut dropped);
        out.extend(place(found, pi, pmu, &events, &keep_ranks));
    }
    Ok((out, dropped, latency_note(q)))
}

/// One PMU's latency events against its generic counters.
struct Fit<'a> {
    q: &'a Queues,
    events: &'a [&'a QueueEvent],
    pmu: &'a str,
    /// The first PMU says the refusals for every instance.
    speaks: bool,
}

impl Fit<'_> {
    /// Generic counters the events of rank `r` need.
    fn need(&self, r: u8) -> usize {
        self.events
            .iter()
            .filter(|e| e.rank == r && !e.fixed)
            .count()
    }

    /// The ranks kept beside `bw` bandwidth counters; the dropped groups pushed to `dropped`.
    fn ranks(&self, ranks: &[u8], bw: usize, room: Room, dropped: &mut Vec<Dropped>) -> Vec<u8> {
        let generic = self.q.generic_counters;
        let mut used = if room == Room::BandwidthFirst { bw } else { 0 };
        let mut keep = Vec::new();
        for (i, &r) in ranks.iter().enumerate() {
            if used + self.need(r) <= generic {
                used += self.need(r);
                keep.push(r);
            } else if self.speaks {
                let mut refusal = rank_refusal(self.q, self.events, r, used);
                if room == Room::BandwidthFirst && bw > 0 {
                    refusal.reason.push_str(&format!(
                        "; {bw} of them count bandwidth, which comes first here (imc stat \
                         --latency counts latency first)"
                    ));
                }
                dropped.push((false, self.pmu.to_string(), Some(refusal)));
            }
            if i == 0 && room == Room::LatencyFirst {
                if used + bw <= generic {
                    used += bw;
                } else if bw > 0 {
                    dropped.push(self.bandwidth_dropped(bw, r));
                }
            }
        }
        keep
    }

    /// `stat --latency`: the bandwidth counters left out for the first latency events.
    fn bandwidth_dropped(&self, bw: usize, first: u8) -> Dropped {
        (
            true,
            self.pmu.to_string(),
            self.speaks.then(|| Refusal {
                pmu: Some(self.pmu.to_string()),
                event: Some("read,write".into()),
                reason: format!(
                    "bandwidth on {} (and every instance alike): its {} generic counters hold \
                     the first latency events ({} of them), so its {bw} CAS counters are left \
                     out under --latency rather than multiplexed: run imc stat without \
                     --latency for bandwidth",
                    self.pmu,
                    self.q.generic_counters,
                    self.need(first)
                ),
            }),
        )
    }
}

/// The kept events of PMU `pi` on each of its CPUs: Intel's PMU is the channel; AMD's L3 CCX is
/// its place among the package's CPUs in the cpumask.
fn place(
    found: &Discovery,
    pi: usize,
    pmu: &SourcePmu,
    events: &[&QueueEvent],
    keep_ranks: &[u8],
) -> Vec<Counter> {
    let q = &found.queues;
    let several = q.pmus.len() > 1;
    let mut out = Vec::new();
    for (i, &cpu) in pmu.cpus.iter().enumerate() {
        let package = package_of(&found.topology, cpu, i);
        let channel = if q.kind == "amd-l3-sampled-latency" {
            let ccx = pmu.cpus[..i]
                .iter()
                .filter(|&&c| found.topology.package_of(c) == Some(package))
                .count();
            Some(ccx as u32)
        } else {
            several.then_some(pi as u32)
        };
        for e in events.iter().filter(|e| keep_ranks.contains(&e.rank)) {
            out.push(queue_counter(e, pmu, package, channel, cpu));
        }
    }
    out
}

/// The plan's line on how latency is counted.
fn latency_note(q: &Queues) -> String {
    let pmu = q.pmus.first().map_or("PMU", |p| p.name.as_str());
    if q.kind == "amd-l3-sampled-latency" {
        // amdzen4/amdzen5 recommended.json, l3_read_miss_latency: sampled latency ÷ sampled
        // requests × 10 ns.
        return format!(
            "latency ({}): {} generic counter(s) per {pmu} instance, one per CCX. Average DRAM fill latency = sampled latency ÷ sampled requests × 10 ns",
            q.kind, q.generic_counters
        );
    }
    format!(
        "latency ({}): {} generic counter(s) per {pmu} instance; the DRAM clock on its fixed \
         counter. Average latency = occupancy ÷ inserts (in DRAM clocks; in ns through the \
         measured clock rate)",
        q.kind, q.generic_counters
    )
}

/// The sampling commands' latency: the queue counters that fit beside `counters`' bandwidth,
/// read by userspace at each `interval_ms`, with what was left out and why. Only beside a
/// memory controller's own bandwidth counters (not `-e` events or a stand-in, whose counters
/// the budget does not know).
pub(super) fn sampling(
    found: &Discovery,
    backend: Option<BackendKind>,
    counters: &[Counter],
    interval_ms: u64,
) -> (Vec<Counter>, Vec<Refusal>, LoadedLatency) {
    let none = |reason: String| (Vec::new(), Vec::new(), LoadedLatency::none(reason));
    let q = &found.queues;
    if q.events.is_empty() {
        return none(format!(
            "no loaded latency: {}",
            q.reason
                .as_deref()
                .unwrap_or("no memory-controller queues found")
        ));
    }
    if !backend.is_some_and(|b| b.is_memory_controller()) {
        return none(
            "no loaded latency: the queue counters are planned beside the memory controller's \
             own bandwidth counters, not beside -e events or a stand-in"
                .into(),
        );
    }
    let bandwidth: Vec<Counter> = counters
        .iter()
        .filter(|c| c.package.is_some() && c.direction.is_some())
        .cloned()
        .collect();
    let Ok((mut kept, dropped, note)) = queue_counters(found, &bandwidth, Room::BandwidthFirst)
    else {
        return none("no loaded latency: no queues".into());
    };
    for c in &mut kept {
        c.reader = Reader::Interval {
            every_ms: interval_ms,
        };
    }
    let refusals: Vec<Refusal> = dropped.into_iter().filter_map(|d| d.2).collect();
    let summary = LoadedLatency::of(q, &kept, &refusals, note);
    (kept, refusals, summary)
}

impl LoadedLatency {
    fn none(reason: String) -> LoadedLatency {
        LoadedLatency {
            reason,
            ..LoadedLatency::default()
        }
    }

    /// What `kept` counts, and why (the note, or the refusals' first reason when nothing fits).
    fn of(q: &Queues, kept: &[Counter], refusals: &[Refusal], note: String) -> LoadedLatency {
        use crate::model::QueuePart as P;
        let has = |p: &[P]| kept.iter().any(|c| c.queue.is_some_and(|x| p.contains(&x)));
        let read = has(&[P::ReadInserts, P::SampledRequests { remote: false }]);
        let write = has(&[P::WriteInserts]);
        let reason = match refusals.first() {
            None => format!("{note}; read by userspace at each interval"),
            Some(r) if !read => format!("no loaded latency: {}", r.reason),
            Some(r) => format!(
                "{note}; read by userspace at each interval; not all: {}",
                r.reason
            ),
        };
        LoadedLatency {
            source: read.then(|| q.kind.to_string()),
            read,
            write,
            utilisation: false,
            reason,
        }
    }
}

/// Why the latency events of rank `r` are left out.
fn rank_refusal(
    q: &crate::model::Queues,
    events: &[&crate::model::QueueEvent],
    r: u8,
    used: usize,
) -> Refusal {
    let names: Vec<String> = events
        .iter()
        .filter(|e| e.rank == r && !e.fixed)
        .map(|e| {
            let mut n = e.part.key().to_string();
            if let Some(s) = e.sub_channel {
                n.push_str(&format!(":sch{s}"));
            }
            if let Some(p) = e.pseudo_channel {
                n.push_str(&format!(":pch{p}"));
            }
            n
        })
        .collect();
    let pmu = events.first().map(|e| e.pmu.clone());
    Refusal {
        pmu: pmu.clone(),
        event: Some(names.join(",")),
        // The events in the line, so each group left out reads as its own.
        reason: format!(
            "{} has {} generic counters and {used} are taken: these {} latency events ({}) are \
             not counted (imc does not multiplex them)",
            pmu.as_deref().unwrap_or("the PMU"),
            q.generic_counters,
            names.len(),
            names.join(", ")
        ),
    }
}

/// One latency counter, read on `cpu` for `package`.
fn queue_counter(
    e: &crate::model::QueueEvent,
    pmu: &SourcePmu,
    package: u32,
    channel: Option<u32>,
    cpu: u32,
) -> Counter {
    let key = e.part.key();
    Counter {
        pmu: e.pmu.clone(),
        event: key.to_string(),
        package: Some(package),
        channel,
        sub_channel: e.sub_channel,
        queue: Some(e.part),
        pseudo_channel: e.pseudo_channel,
        direction: None,
        scope: if channel.is_some() {
            CounterScope::Channel
        } else {
            CounterScope::Package
        },
        cpus: vec![cpu],
        reader: Reader::Tick,
        bytes_per_count: None,
        slot: None,
        role: CounterRole::Latency,
        weight: None,
        stall: None,
        counter_mask: None,
        value_key: key.to_string(),
        encoded: Encoded {
            event: format!("{}/{key}", e.pmu),
            pmu: e.pmu.clone(),
            pmu_type: pmu.pmu_type,
            config: e.config,
            config1: e.config1,
            cpus: Some(vec![cpu]),
            ..Default::default()
        },
        counter_bits: 48,
        address: None,
        width: None,
        tier: crate::model::Tier::Dram,
        limits: None,
    }
}

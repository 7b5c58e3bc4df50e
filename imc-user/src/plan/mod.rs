//! The one place that decides what imc reads: a pure function from discovery, the kernel's facts
//! and the request to a [`Plan`] — every counter, the package and channel it belongs to, who
//! reads it and how often, how counters are summed, what runs the sampler, and why, including
//! what was refused. `stat`, `top`, `record` and `serve` execute a plan (`counting::from_plan` turns
//! it into stat's counters, `sampler::from_plan` into the sampler's configuration); `--dry-run`
//! prints it.
//!
//! - [`kernel`]: the facts of the running kernel that shape a plan (release, HZ), read under
//!   `--root`.
//! - [`text`]: the plan as a person reads it.
mod counters;
pub mod drain;
pub mod fidelity;
pub mod kernel;
pub mod latency;
mod slots;
pub mod stacks;
pub mod stalls;
pub mod stand_in;
pub mod text;
mod tick;
mod types;
pub mod weights;

use crate::model::{
    BackendKind, Discovery, Encoded, SlotRole, SlotSpec, Source, Victims, Weighting,
};
use counters::number_channels;
pub use counters::{event_counters, guess_direction, source_counters};
use imc_common::MAX_SLOTS;
pub use kernel::Kernel;
use slots::{assign_slots, slot_count};
use std::fmt;
use tick::tick_of;
pub use types::*;

impl CommandKind {
    pub fn samples(self) -> bool {
        self != CommandKind::Stat
    }
}

impl CounterRole {
    /// The role of every counter read into a slot of `role`.
    pub fn of_slot(role: SlotRole) -> CounterRole {
        match role {
            SlotRole::Traffic(_) => CounterRole::Traffic,
            SlotRole::Weight(_) | SlotRole::RemoteWeight(_) => CounterRole::Weight,
            SlotRole::Stall(_) => CounterRole::Stall,
            SlotRole::Other => CounterRole::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CounterRole::Traffic => "traffic",
            CounterRole::Weight => "weight",
            CounterRole::Latency => "latency",
            CounterRole::Stall => "stall",
            CounterRole::Other => "other",
        }
    }
}

impl fmt::Display for CounterRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Plan {
    /// Whether the run measures bytes, or only counts (a stand-in): as the attributor decides.
    pub fn measures_bytes(&self) -> bool {
        self.slots.iter().any(|s| s.spec().counts_bytes())
    }
}

impl Slot {
    /// What attribution needs of it. Package slots carry sums of the kernel's 64-bit counts.
    pub fn spec(&self) -> SlotSpec {
        SlotSpec {
            event: self.event.clone(),
            scope: self.scope,
            role: self.role,
            bytes_per_count: self.bytes_per_count,
            counter_bits: 64,
        }
    }
}

/// POWER's core, thread and trace IMC: planned per core (core IMC on each core's designated
/// CPU), per task (thread IMC) or not at all, with the kernel's reasons.
fn other_uses(found: &Discovery) -> Vec<OtherUse> {
    found
        .other_sources
        .iter()
        .flat_map(|s| {
            crate::discovery::non_bandwidth::power_imc_plan_notes(s)
                .into_iter()
                .map(move |n| OtherUse {
                    pmu: s.pmu.clone(),
                    what: n.what,
                    reason: n.reason,
                    refused: n.refused,
                })
        })
        .collect()
}

impl Plan {
    /// How a counter's channel is named where channels are shown one by one (`imc serve`'s
    /// `channel` label): its PMU instance (`uncore_imc_3`), with the channel's number where one
    /// PMU has an event per channel (`amd_df#2`, POWER's MCS pairs).
    pub fn channel_label(&self, c: &Counter) -> String {
        let shared_pmu = c.sub_channel.is_none()
            && self
                .counters
                .iter()
                .filter(|o| o.package == c.package && o.slot == c.slot && o.pmu == c.pmu)
                .count()
                > 1;
        match c.channel {
            Some(ch) if shared_pmu => format!("{}#{ch}", c.pmu),
            _ => c.pmu.clone(),
        }
    }
}

/// Plans `req` on the machine `found` describes.
pub fn plan(found: &Discovery, kernel: &Kernel, req: &Request) -> Result<Plan, PlanError> {
    let Some(batch_ms) = req.batch_ms.filter(|_| req.command.samples()) else {
        let mut p = plan_draining(found, kernel, req)?;
        if req.command.samples() {
            p.drain = Some(Drain {
                every_ms: req.drain_ms,
                intervals_closed_after: false,
                reason: format!(
                    "every {} ms, to close each {} ms interval on time",
                    req.drain_ms, req.interval_ms
                ),
            });
        }
        return Ok(p);
    };
    // Sleep long unless a counter must be read from userspace at the interval's pace.
    let batched = Request {
        drain_ms: batch_ms.max(req.drain_ms),
        ..req.clone()
    };
    let p = plan_draining(found, kernel, &batched)?;
    let userspace = p
        .counters
        .iter()
        .any(|c| matches!(c.reader, Reader::Userspace { .. }));
    if !userspace {
        return Ok(Plan {
            drain: Some(Drain {
                every_ms: batched.drain_ms,
                intervals_closed_after: true,
                reason: format!(
                    "every {} ms or when a CPU's ring is half full: every counter comes in the \
                     records, so each {} ms interval is closed on their clock afterwards, and \
                     imc wakes rarely",
                    batched.drain_ms, req.interval_ms
                ),
            }),
            ..p
        });
    }
    let mut p = plan_draining(found, kernel, req)?;
    p.drain = Some(Drain {
        every_ms: req.drain_ms,
        intervals_closed_after: true,
        reason: format!(
            "every {} ms: userspace reads counters at that pace, so that each {} ms interval \
             holds its own traffic",
            req.drain_ms, req.interval_ms
        ),
    });
    Ok(p)
}

/// The plan for a loop that drains every `req.drain_ms`.
fn plan_draining(found: &Discovery, kernel: &Kernel, req: &Request) -> Result<Plan, PlanError> {
    let mut refusals = source_refusals(found, req);
    if req.latency == Some(LatencyRequest::Queues) && found.queues.events.is_empty() {
        return Err(latency::no_queues(found));
    }
    let (source, backend, mut counters) = choose_counters(found, req)?;
    let mut notes = tier_notes(found, &counters, req);
    if req.latency == Some(LatencyRequest::Queues) {
        let (refused, note) = latency::for_stat(found, &mut counters)?;
        refusals.extend(refused);
        notes.push(note);
    }
    let mut parts = Sampled::default();
    if req.command.samples() {
        parts = sampled(found, kernel, req, backend, &mut counters, &mut notes)?;
        refusals.append(&mut parts.refusals);
    } else {
        read_at_each_interval(&mut counters, req.interval_ms);
    }
    let tick = tick_of(kernel, req);
    let records = req.command.samples().then(|| Records::of(req.precise));
    let stacks = match (&req.stacks, req.command.samples()) {
        (Some(s), true) => {
            let kernel_tick = tick.source == TickSource::KernelTick;
            Some(stacks::plan_stacks(s, records, kernel_tick, &parts.slots)?)
        }
        _ => None,
    };
    Ok(Plan {
        command: req.command,
        source,
        backend,
        counters,
        weighting: parts.weighting,
        victims: parts.victims,
        latency: parts.latency,
        slots: parts.slots,
        records,
        stacks,
        tick,
        drain: None,
        refusals,
        notes,
        other_sources: other_uses(found),
        kernel: kernel.clone(),
    })
}

/// What a sampling command adds to its counters.
#[derive(Default)]
struct Sampled {
    slots: Vec<Slot>,
    weighting: Option<Weighting>,
    victims: Option<Victims>,
    latency: Option<LoadedLatency>,
    refusals: Vec<Refusal>,
}

/// A sampling command's weights and stall counters in the record slots left beside
/// `counters`, the slots and readers of them all, then the latency counters that fit (read at
/// each interval, in no slot: the tick never reads them).
fn sampled(
    found: &Discovery,
    kernel: &Kernel,
    req: &Request,
    backend: Option<BackendKind>,
    counters: &mut Vec<Counter>,
    notes: &mut Vec<String>,
) -> Result<Sampled, PlanError> {
    let mut refusals = Vec::new();
    let free = MAX_SLOTS.saturating_sub(slot_count(counters, req));
    let chosen = weights::choose(found, kernel, req, counters, free)?;
    counters.extend(chosen.counters);
    refusals.extend(chosen.refusals);
    notes.extend(chosen.notes);
    let free = MAX_SLOTS.saturating_sub(slot_count(counters, req));
    let stalls = stalls::choose(found, kernel, counters, free);
    counters.extend(stalls.counters);
    refusals.extend(stalls.refusals);
    notes.extend(stalls.notes);
    let slots = assign_slots(counters, found, kernel, req, notes)?;
    let (kept, refused, summary) = latency::sampling(found, backend, counters, req.interval_ms);
    counters.extend(kept);
    refusals.extend(refused);
    Ok(Sampled {
        slots,
        weighting: Some(chosen.weighting),
        victims: Some(stalls.victims),
        latency: Some(summary),
        refusals,
    })
}

/// `stat`: every counter read by userspace at each interval, its role from what it counts.
fn read_at_each_interval(counters: &mut [Counter], interval_ms: u64) {
    for c in counters {
        c.reader = Reader::Userspace {
            every_ms: interval_ms,
        };
        c.role = if c.queue.is_some() {
            CounterRole::Latency
        } else if c.direction.is_some() {
            CounterRole::Traffic
        } else {
            CounterRole::Other
        };
    }
}

/// The counters: `-e` events as given, else the first available memory controller's read,
/// write (or total) events on every channel of every package, else a labelled stand-in.
fn choose_counters(
    found: &Discovery,
    req: &Request,
) -> Result<(PlanSource, Option<BackendKind>, Vec<Counter>), PlanError> {
    if let Some(LatencyRequest::Offcore(pair)) = &req.latency {
        return latency::latency_counters(found, pair);
    }
    if !req.events.is_empty() {
        refuse_uncountable(found, &req.events)?;
        let counters = event_counters(&req.events, &found.topology);
        if counters.is_empty() {
            return Err(PlanError::NoOnlineCpu);
        }
        let bytes = counters.iter().any(|c| c.bytes_per_count.is_some());
        let source = if bytes || !req.command.samples() {
            PlanSource::Events
        } else {
            PlanSource::SampledEvents(req.events.iter().map(|(t, _)| t.clone()).collect())
        };
        return Ok((source, None, counters));
    }
    if let Some(src) = memory_controller(found, req)? {
        let mut counters = Vec::new();
        for s in with_companions(found, src) {
            counters.extend(source_counters(s, &found.topology));
        }
        number_channels(&mut counters);
        if !counters.is_empty() {
            return Ok((
                PlanSource::Backend(src.backend),
                Some(src.backend),
                counters,
            ));
        }
    }
    if let Some(w) = req.backend {
        let why = found
            .sources
            .iter()
            .find(|s| s.backend == w)
            .and_then(|s| s.reason.clone())
            .unwrap_or_else(|| "not found on this machine".into());
        return Err(PlanError::BackendUnavailable {
            backend: w.as_str(),
            why,
        });
    }
    let why = no_controller_reason(found);
    let Some((name, encs)) = req.stand_in.first() else {
        return Err(PlanError::NothingToRead(why));
    };
    let counters = event_counters(&[(name.clone(), encs.clone())], &found.topology);
    Ok((PlanSource::StandIn(name.clone()), None, counters))
}

/// Sampling-only PMUs (IBS, POWER trace IMC) and per-task ones (thread IMC) cannot be counted
/// CPU-wide: said before anything opens.
fn refuse_uncountable(
    found: &Discovery,
    events: &[(String, Vec<Encoded>)],
) -> Result<(), PlanError> {
    for (text, encs) in events {
        for e in encs {
            if let Some(why) = crate::discovery::non_bandwidth::cpu_wide_count_refusal(
                &found.other_sources,
                &e.pmu,
                text,
            ) {
                return Err(PlanError::Uncountable(why));
            }
        }
    }
    Ok(())
}

fn no_controller_reason(found: &Discovery) -> String {
    if found.hypervisor {
        return "running under a hypervisor, which exposes no memory controller".into();
    }
    found
        .sources
        .iter()
        .filter(|s| s.backend.is_memory_controller())
        .find_map(|s| s.reason.clone())
        .unwrap_or_else(|| "no memory-controller PMU found".into())
}

/// The memory controller to read: `--backend`, else the first available one, the kernel's
/// PMUs before the /dev/mem mapping (which the sampler cannot read at ticks).
fn memory_controller<'a>(
    found: &'a Discovery,
    req: &Request,
) -> Result<Option<&'a Source>, PlanError> {
    if let Some(w) = req.backend {
        let Some(s) = found.sources.iter().find(|s| s.backend == w) else {
            return Ok(None);
        };
        if !s.available {
            return Ok(None);
        }
        if req.command.samples() && w == BackendKind::IntelClientMchbar {
            return Err(PlanError::NotSampledAtTicks);
        }
        return Ok(Some(s));
    }
    let mut candidates: Vec<&Source> = found
        .sources
        .iter()
        .filter(|s| s.available && s.backend.is_memory_controller())
        .filter(|s| !req.exclude.contains(&s.backend))
        .filter(|s| !(req.command.samples() && s.backend == BackendKind::IntelClientMchbar))
        .collect();
    // A CXL device is a second tier, measured beside the DRAM controller; alone only where
    // nothing counts DRAM.
    candidates.sort_by_key(|s| {
        (
            s.backend == BackendKind::IntelClientMchbar,
            s.backend == BackendKind::CxlPmu,
        )
    });
    Ok(candidates.first().copied())
}

/// KNL's DDR (knl-imc) and MCDRAM (knl-edc) are measured side by side, DDR first; CXL memory
/// devices beside whichever controller counts DRAM, as the second tier.
fn with_companions<'a>(found: &'a Discovery, s: &'a Source) -> Vec<&'a Source> {
    let partner = match s.backend {
        BackendKind::KnlImc => Some(BackendKind::KnlEdc),
        BackendKind::KnlEdc => Some(BackendKind::KnlImc),
        _ => None,
    };
    let other = partner.and_then(|p| found.sources.iter().find(|o| o.backend == p && o.available));
    let mut out = match other {
        Some(o) if o.backend == BackendKind::KnlImc => vec![o, s],
        Some(o) => vec![s, o],
        None => vec![s],
    };
    if s.backend != BackendKind::CxlPmu
        && let Some(cxl) = found
            .sources
            .iter()
            .find(|o| o.backend == BackendKind::CxlPmu && o.available)
    {
        out.push(cxl);
    }
    out
}

/// Where CXL memory is counted: its devices and nodes, and, for the sampling commands, how its
/// bytes reach tasks. No core event tells a task's CXL traffic from its DRAM traffic, so the
/// tier's bytes are divided by the same weights as DRAM's, and the plan says so.
fn tier_notes(found: &Discovery, counters: &[Counter], req: &Request) -> Vec<String> {
    if !counters.iter().any(|c| c.tier == crate::model::Tier::Cxl) {
        return Vec::new();
    }
    let devices = found
        .sources
        .iter()
        .find(|s| s.backend == BackendKind::CxlPmu && s.available)
        .and_then(|s| s.reason.clone())
        .unwrap_or_else(|| "second memory tier".into());
    let mut out = vec![format!("tier cxl: {devices}")];
    if req.command.samples() {
        out.push(
            "tier cxl: no core event of this machine tells a task's CXL traffic from its DRAM \
             traffic, so each package's CXL bytes are divided among tasks by the DRAM weights"
                .into(),
        );
    }
    out
}

/// Why each memory-controller source is not used (and, for sampling, that /dev/mem counters
/// cannot be read at ticks).
fn source_refusals(found: &Discovery, req: &Request) -> Vec<Refusal> {
    let mut out: Vec<Refusal> = Vec::new();
    for s in &found.sources {
        if !s.backend.is_memory_controller() {
            continue;
        }
        // A source with no PMU here is not refused, merely absent; under a hypervisor the
        // first says why for all.
        if s.pmus.is_empty() && !(found.hypervisor && out.is_empty()) {
            continue;
        }
        let pmu = s.pmus.first().map(|p| p.name.clone());
        if !s.available {
            out.push(Refusal {
                pmu,
                event: None,
                reason: format!(
                    "{}: {}",
                    s.backend.as_str(),
                    s.reason.as_deref().unwrap_or("not available")
                ),
            });
        } else if req.command.samples() && s.backend == BackendKind::IntelClientMchbar {
            out.push(Refusal {
                pmu: Some("mchbar".into()),
                event: None,
                reason: "intel-client-mchbar: /dev/mem counters cannot be read at the sampler's \
                         ticks (imc stat reads them)"
                    .into(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests;

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
pub mod stalls;
pub mod stand_in;
pub mod text;
mod tick;
pub mod weights;

use crate::model::{
    BackendKind, Direction, Discovery, Encoded, QueuePart, SlotRole, SlotScope, SlotSpec, Source,
    StallPart, Victims, Weighting,
};
pub(crate) use counters::event_counter;
pub use counters::{event_counters, guess_direction, source_counters};
use counters::{number_channels, package_of};
use imc_common::MAX_SLOTS;
pub use kernel::Kernel;
use serde::Serialize;
use slots::{assign_slots, slot_count};
use std::fmt;
use thiserror::Error;
use tick::tick_of;
pub use tick::{Records, Tick, TickSource};
pub use weights::{WeightEvent, WeightRequest, WeightRole};

/// Which command the plan is for: `stat` reads from userspace at each interval; the sampling
/// commands run the eBPF sampler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Command {
    Stat,
    Top,
    Record,
    Serve,
}

impl Command {
    pub fn samples(self) -> bool {
        self != Command::Stat
    }
}

/// What the user asked for.
#[derive(Clone, Debug)]
pub struct Request {
    pub command: Command,
    /// `-e` events, resolved: the text as given and what it encodes to (every PMU instance).
    pub events: Vec<(String, Vec<Encoded>)>,
    /// `--backend` other than `auto`.
    pub backend: Option<BackendKind>,
    /// Backends already tried and failed to open (stat falls through to the next).
    pub exclude: Vec<BackendKind>,
    /// `--freq`: imc's own cpu-clock timer instead of the kernel's tick.
    pub freq: Option<u32>,
    /// `--precise` with `--freq`: context switches too (always on with the kernel's tick).
    pub precise: bool,
    /// The interval (stat reads at each one; the sampler drains four times per interval).
    pub interval_ms: u64,
    /// How often the sampling loop drains the rings (and reads idle packages) when it must keep
    /// up with the interval: a live view, or counters read from userspace.
    pub drain_ms: u64,
    /// How long the loop may sleep otherwise (`record`, `serve`: intervals are closed afterwards
    /// on the records' own clock); None: always `drain_ms`.
    pub batch_ms: Option<u64>,
    /// The stand-in to use without a memory controller: `LLC-load-misses` where the core PMU
    /// encodes it, else `page-faults` (resolved by the caller, who reads the root).
    pub stand_in: Vec<(String, Vec<Encoded>)>,
    /// `stat --latency`: on KNL the checked OFFCORE_RESPONSE pair, elsewhere the memory
    /// controller's queues (or AMD's L3 sampled DRAM latency).
    pub latency: Option<LatencyRequest>,
    /// `--weight`: how package traffic is divided among tasks (sampling commands).
    pub weight: WeightRequest,
}

/// What `stat --latency` counts.
#[derive(Clone, Debug, PartialEq)]
pub enum LatencyRequest {
    /// KNL: the checked OFFCORE_RESPONSE pair (outstanding, requests), counted on every CPU
    /// beside DDR and MCDRAM bandwidth.
    Offcore(Box<(Encoded, Encoded)>),
    /// The machine's loaded-latency events ([`crate::model::Queues`]) beside the bandwidth
    /// counters, as many as each PMU has counters for.
    Queues,
}

#[derive(Debug, Error, PartialEq)]
pub enum PlanError {
    /// The request cannot be met as asked: exit 2.
    #[error("{0}")]
    BadRequest(String),
    /// Nothing on this machine can be read: exit 1.
    #[error("{0}")]
    Unavailable(String),
}

/// Who reads a counter, and when.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Reader {
    /// Each CPU's program reads its own counter at its ticks and context switches.
    Tick,
    /// The program of whichever of `cpus` ticks first in a tick period reads every counter of
    /// the package (once per period); userspace reads them when none of those CPUs ticked
    /// within two drain periods (an idle package's DMA).
    PackageTick { cpus: Vec<u32>, idle_every_ms: u64 },
    /// imc reads it with read(2) every `every_ms` (from the CPU it is opened on, by IPI where
    /// that is another CPU).
    Userspace { every_ms: u64 },
    /// imc reads it with read(2) once at the end of each `every_ms` interval, apart from the
    /// sampler's records: a figure per interval (loaded latency in the sampling commands).
    Interval { every_ms: u64 },
}

/// One counter to open.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Counter {
    pub pmu: String,
    /// The event's name (`read`, `write`, `total`), or the `-e` text.
    pub event: String,
    pub package: Option<u32>,
    /// The memory channel (a PMU instance, or one of a PMU's per-channel events); on AMD's L3
    /// latency counters, the CCX within the package.
    pub channel: Option<u32>,
    /// The channel's sub-channel (Granite Rapids' scheduler), where the hardware has them: its
    /// bandwidth and latency roll up to `channel`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sub_channel: Option<u32>,
    /// What a `latency` counter counts (`read-occupancy`, `read-inserts`, `dram-clocks` …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueuePart>,
    /// The pseudo-channel whose queue a latency counter counts (ICX, SPR, GNR).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pseudo_channel: Option<u32>,
    /// Bandwidth direction; None for counters that are not bytes.
    pub direction: Option<Direction>,
    /// One counter per CPU, per package, or per memory channel.
    pub scope: CounterScope,
    /// Where it is opened: its PMU's CPU for this package, or every online CPU.
    pub cpus: Vec<u32>,
    pub reader: Reader,
    pub bytes_per_count: Option<f64>,
    /// The record slot it is read into (sampling commands); package counters of one slot and
    /// package are summed there.
    pub slot: Option<usize>,
    /// What its counts are for: memory traffic, a per-CPU weight of package traffic, a
    /// loaded-latency count, a stall count (cycles stalled on memory, or the cycles they are a
    /// share of), or counted and shown.
    pub role: CounterRole,
    /// What a weight counter weighs (None: not a weight).
    #[serde(skip)]
    pub weight: Option<WeightRole>,
    /// Which of the stall pair a `stall` counter is (`stalled` or `cycles`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stall: Option<StallPart>,
    /// The generic counters of its core PMU it may use (bit n: counter n; None: any), for
    /// the core's counter budget.
    #[serde(skip)]
    pub counter_mask: Option<u64>,
    /// The key of `values` in JSON output.
    #[serde(skip)]
    pub value_key: String,
    /// What is programmed: the event's one encoding, shown in the plan's JSON as `encoding`
    /// (the perf_event_attr words `type`, `config`, `config1`, `config2`).
    #[serde(rename = "encoding", serialize_with = "attr_words")]
    pub encoded: Encoded,
    #[serde(skip)]
    pub counter_bits: u8,
    /// Physical address and width (intel-client-mchbar).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub width: Option<u8>,
}

/// A counter's encoding as the plan's JSON shows it: the perf_event_attr words it is opened
/// with.
fn attr_words<S: serde::Serializer>(e: &Encoded, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeStruct;
    let mut st = s.serialize_struct("Encoding", 4)?;
    st.serialize_field("type", &e.pmu_type)?;
    st.serialize_field("config", &e.config)?;
    st.serialize_field("config1", &e.config1)?;
    st.serialize_field("config2", &e.config2)?;
    st.end()
}

/// One counter per CPU, per package, or per memory channel (`scope` in the plan's JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CounterScope {
    Cpu,
    Package,
    Channel,
}

/// What a counter's counts are for (`role` in the plan's JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CounterRole {
    /// Memory traffic (bytes where it has bytes per count).
    Traffic,
    /// A per-CPU weight of package traffic.
    Weight,
    /// A loaded-latency count (a controller queue's occupancy, inserts or clock).
    Latency,
    /// A per-CPU stall count, or the cycles or time it is a share of (victims).
    Stall,
    /// Counted and shown.
    Other,
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

/// What a sampling record carries in one slot: the model's own slot types, executed as they
/// are by the sampler, the attributor and the recording.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(into = "SlotJson")]
pub struct Slot {
    pub event: String,
    /// A counter per CPU, or a per-package sum.
    pub scope: SlotScope,
    /// What the counters count, as planned (None: a count that is not of a direction).
    pub direction: Option<Direction>,
    /// What the slot's counts mean to attribution.
    pub role: SlotRole,
    pub bytes_per_count: Option<f64>,
    /// How a package slot is formed: `sum of 12 counters per package`.
    pub sum: Option<String>,
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

/// A slot as the command-line contract spells it in the plan's JSON.
#[derive(Serialize)]
struct SlotJson {
    event: String,
    scope: SlotScope,
    direction: Option<Direction>,
    /// `traffic`, `weight` or `other`.
    role: CounterRole,
    /// A weight of traffic to other packages' memory.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    remote: bool,
    /// Which of the stall pair a `stall` slot holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    stall: Option<StallPart>,
    bytes_per_count: Option<f64>,
    sum: Option<String>,
}

impl From<Slot> for SlotJson {
    fn from(s: Slot) -> SlotJson {
        SlotJson {
            role: CounterRole::of_slot(s.role),
            remote: matches!(s.role, SlotRole::RemoteWeight(_)),
            stall: match s.role {
                SlotRole::Stall(part) => Some(part),
                _ => None,
            },
            event: s.event,
            scope: s.scope,
            direction: s.direction,
            bytes_per_count: s.bytes_per_count,
            sum: s.sum,
        }
    }
}

/// When imc's own thread wakes to drain the rings: every `every_ms`, and earlier whenever a
/// CPU's ring is half full (the kernel says so), so the rings never overflow for want of a
/// timer. Each wake-up costs imc a scheduling round trip, so the continuous modes sleep long.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Drain {
    pub every_ms: u64,
    /// Intervals are closed on the records' clock after the drain that passes their end
    /// (`record`, `serve`), rather than at the wake-up that ends them.
    pub intervals_closed_after: bool,
    pub reason: String,
}

/// Something the plan could have read and does not, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Refusal {
    pub pmu: Option<String>,
    pub event: Option<String>,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    pub command: Command,
    /// What is measured: a backend name, `events`, or a stand-in `proxy:EVENT`.
    pub source: String,
    /// The backend executing it (`None` for `-e` and stand-ins).
    #[serde(skip)]
    pub backend: Option<BackendKind>,
    pub counters: Vec<Counter>,
    /// How package traffic is divided among tasks (sampling commands).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weighting: Option<Weighting>,
    /// Which per-CPU counters tell how long each task stalled on memory, or why none does
    /// (sampling commands).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub victims: Option<Victims>,
    /// What loaded latency the sampling commands read at each interval, or why none
    /// (sampling commands).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<latency::LoadedLatency>,
    /// The record's slots (sampling commands; empty for stat).
    pub slots: Vec<Slot>,
    pub tick: Tick,
    /// What the sampler's records are (sampling commands).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records: Option<Records>,
    /// How often the sampling loop wakes to drain (sampling commands).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain: Option<Drain>,
    pub refusals: Vec<Refusal>,
    /// Why the readers are what they are (one line each).
    pub notes: Vec<String>,
    /// How the sources that are not bandwidth (POWER core/thread/trace IMC) could be used here,
    /// and what the kernel refuses of them.
    pub other_sources: Vec<OtherUse>,
    pub kernel: Kernel,
}

/// One use of a non-bandwidth source: allowed (`refused: false`) or refused, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OtherUse {
    pub pmu: String,
    pub what: String,
    pub reason: String,
    pub refused: bool,
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
    let mut notes = Vec::new();
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
    Ok(Plan {
        command: req.command,
        source,
        backend,
        counters,
        weighting: parts.weighting,
        victims: parts.victims,
        latency: parts.latency,
        slots: parts.slots,
        records: req
            .command
            .samples()
            .then(|| Records::of(&tick, req.precise)),
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
    latency: Option<latency::LoadedLatency>,
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
) -> Result<(String, Option<BackendKind>, Vec<Counter>), PlanError> {
    if let Some(LatencyRequest::Offcore(pair)) = &req.latency {
        return latency::latency_counters(found, pair);
    }
    if !req.events.is_empty() {
        refuse_uncountable(found, &req.events)?;
        let counters = event_counters(&req.events, &found.topology);
        if counters.is_empty() {
            return Err(PlanError::Unavailable(
                "-e: no CPU to open the events on (no online CPUs found under --root)".into(),
            ));
        }
        let bytes = counters.iter().any(|c| c.bytes_per_count.is_some());
        let source = if bytes || !req.command.samples() {
            "events".to_string()
        } else {
            let names: Vec<&str> = req.events.iter().map(|(t, _)| t.as_str()).collect();
            format!("events:{}", names.join(","))
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
                src.backend.as_str().to_string(),
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
        return Err(PlanError::Unavailable(format!(
            "--backend {}: unavailable: {why}",
            w.as_str()
        )));
    }
    let why = no_controller_reason(found);
    let Some((name, encs)) = req.stand_in.first() else {
        return Err(PlanError::Unavailable(format!(
            "no memory-controller counters ({why}) and no stand-in event encodes here"
        )));
    };
    let counters = event_counters(&[(name.clone(), encs.clone())], &found.topology);
    Ok((format!("proxy:{name}"), None, counters))
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
                return Err(PlanError::BadRequest(why));
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
            return Err(PlanError::BadRequest(
                "--backend intel-client-mchbar: the sampler cannot read /dev/mem counters at \
                 its ticks; use it with imc stat"
                    .into(),
            ));
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
    candidates.sort_by_key(|s| s.backend == BackendKind::IntelClientMchbar);
    Ok(candidates.first().copied())
}

/// KNL's DDR (knl-imc) and MCDRAM (knl-edc) are measured side by side, DDR first.
fn with_companions<'a>(found: &'a Discovery, s: &'a Source) -> Vec<&'a Source> {
    let partner = match s.backend {
        BackendKind::KnlImc => Some(BackendKind::KnlEdc),
        BackendKind::KnlEdc => Some(BackendKind::KnlImc),
        _ => None,
    };
    let other = partner.and_then(|p| found.sources.iter().find(|o| o.backend == p && o.available));
    match other {
        Some(o) if o.backend == BackendKind::KnlImc => vec![o, s],
        Some(o) => vec![s, o],
        None => vec![s],
    }
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

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
pub mod drain;
pub mod fidelity;
pub mod kernel;
pub mod latency;
pub mod stalls;
pub mod stand_in;
pub mod text;
pub mod weights;

use crate::model::{
    BackendKind, Direction, Discovery, Encoded, QueuePart, Scope, SlotRole, SlotScope, SlotSpec,
    Source, SourceEvent, SourcePmu, StallPart, Topology, Victims, Weighting,
};
use imc_common::{MAX_PKG_COUNTERS, MAX_SLOTS};
pub use kernel::Kernel;
use serde::Serialize;
use std::fmt;
use thiserror::Error;
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

/// What runs the sampler, or times stat's reads (`tick.source` in the plan's JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TickSource {
    /// The kernel's own timer tracepoint and sched_switch.
    KernelTick,
    /// imc's own cpu-clock timer (`--freq`).
    CpuClock,
    /// stat's userspace reads at each interval.
    IntervalTimer,
}

impl TickSource {
    pub fn as_str(self) -> &'static str {
        match self {
            TickSource::KernelTick => "kernel-tick",
            TickSource::CpuClock => "cpu-clock",
            TickSource::IntervalTimer => "interval-timer",
        }
    }
}

impl fmt::Display for TickSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the sampler's records are (`records` in the plan's JSON; sampling commands only),
/// decided once here and executed as it is by the sampler, the pipeline and the recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Records {
    /// Per task at each tick: context switches add to the CPU's accumulator in the kernel.
    Aggregated,
    /// A record at every context switch and tick (`--precise`).
    PerSwitch,
    /// A record at every tick of imc's own timer, none at switches (`--freq` alone).
    PerTick,
}

impl Records {
    /// The records a sampling command gets from its tick and `--precise`.
    fn of(tick: &Tick, precise: bool) -> Records {
        match (tick.source, tick.switches, precise) {
            (_, false, _) => Records::PerTick,
            (TickSource::KernelTick, true, false) => Records::Aggregated,
            _ => Records::PerSwitch,
        }
    }

    /// What such records are, in a few words (`--dry-run`).
    pub fn meaning(self) -> &'static str {
        match self {
            Records::Aggregated => {
                "one per task that ran, at each tick; switches add up in the kernel (--precise: a \
                 record per switch)"
            }
            Records::PerSwitch => "one at every context switch and tick",
            Records::PerTick => "one at every tick of imc's timer, none at switches",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Records::Aggregated => "aggregated",
            Records::PerSwitch => "per-switch",
            Records::PerTick => "per-tick",
        }
    }
}

/// What runs the sampler (or times stat's reads).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Tick {
    pub source: TickSource,
    /// Runs per second on a busy CPU (the kernel's HZ, `--freq`, or stat's interval rate).
    pub hz: Option<f64>,
    pub adds_interrupts: bool,
    /// Context switches run the program too.
    pub switches: bool,
    pub reason: String,
}

impl Tick {
    /// The tick as one label (`imc_info{tick}`): `kernel-tick:250Hz+sched_switch`,
    /// `cpu-clock:1000Hz`.
    pub fn label(&self) -> String {
        let mut t = self.source.as_str().to_string();
        if let Some(hz) = self.hz {
            t.push_str(&format!(":{}Hz", hz.round()));
        }
        if self.switches {
            t.push_str("+sched_switch");
        }
        t
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
        let (kept, refused, note) =
            latency::queue_counters(found, &counters, latency::Room::LatencyFirst)?;
        // Bandwidth counters a PMU has no room for beside its latency counters are dropped.
        counters.retain(|c| {
            !refused
                .iter()
                .any(|r| r.0 && r.1 == c.pmu && c.direction.is_some())
        });
        counters.extend(kept);
        refusals.extend(refused.into_iter().filter_map(|r| r.2));
        notes.push(note);
    }
    let mut weighting = None;
    let mut victims = None;
    let mut loaded_latency = None;
    let slots = if req.command.samples() {
        let free = MAX_SLOTS.saturating_sub(slot_count(&counters, req));
        let chosen = weights::choose(found, kernel, req, &counters, free)?;
        counters.extend(chosen.counters);
        refusals.extend(chosen.refusals);
        notes.extend(chosen.notes);
        weighting = Some(chosen.weighting);
        let free = MAX_SLOTS.saturating_sub(slot_count(&counters, req));
        let stalls = stalls::choose(found, kernel, &counters, free);
        counters.extend(stalls.counters);
        refusals.extend(stalls.refusals);
        notes.extend(stalls.notes);
        victims = Some(stalls.victims);
        let slots = assign_slots(&mut counters, found, kernel, req, &mut notes)?;
        // After the slots: latency counters take none, the tick never reads them.
        let (kept, refused, summary) =
            latency::sampling(found, backend, &counters, req.interval_ms);
        counters.extend(kept);
        refusals.extend(refused);
        loaded_latency = Some(summary);
        slots
    } else {
        for c in &mut counters {
            c.reader = Reader::Userspace {
                every_ms: req.interval_ms,
            };
            c.role = if c.queue.is_some() {
                CounterRole::Latency
            } else if c.direction.is_some() {
                CounterRole::Traffic
            } else {
                CounterRole::Other
            };
        }
        Vec::new()
    };
    let tick = tick_of(kernel, req);
    Ok(Plan {
        command: req.command,
        source,
        backend,
        counters,
        weighting,
        victims,
        latency: loaded_latency,
        slots,
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

fn direction_of_name(name: &str) -> Option<Direction> {
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
fn package_of(topo: &Topology, cpu: u32, position: usize) -> u32 {
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

/// The value key of a default event: its name, prefixed for MCDRAM so KNL's two memories stay
/// apart.
fn value_key(backend: BackendKind, name: &str) -> String {
    match backend {
        BackendKind::KnlEdc => format!("mcdram_{name}"),
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
fn stand_in_counter(ev: &SourceEvent, pmu: Option<&SourcePmu>) -> Option<Counter> {
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
fn mchbar_counter(
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
    }
}

/// A PMU event read on `cpu` for `package`: the channel's counter where the source has one
/// PMU per channel (`channel`), else the package's.
#[allow(clippy::too_many_arguments)]
fn channel_counter(
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
            bytes_per_count: ev.bytes_per_count,
            cpus: Some(vec![cpu]),
            ..Default::default()
        },
        counter_bits: ev.counter_bits,
        address: None,
        width: None,
    }
}

/// Channels numbered in order within each package and direction (and memory), where a package
/// has several counters of one direction: a PMU instance each (SKX's uncore_imc_N), or several
/// events of one PMU (AMD DF's per-channel events, POWER's nest MCS pairs).
fn number_channels(counters: &mut [Counter]) {
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
    }
}

/// Whether the kernel lets any CPU of a package read this PMU's counters (Intel uncore since
/// Linux 6.7, PERF_EV_CAP_READ_ACTIVE_PKG); elsewhere only the CPU it is opened on may.
fn any_cpu_of_package_reads(pmu: &str, kernel: &Kernel) -> bool {
    kernel.at_least(6, 7) && pmu.starts_with("uncore_")
}

/// The record slot a counter shares with others of the same key: package counters of one event
/// (or one direction) are summed per package; weights of one role share a slot (a hybrid
/// part's two core PMUs, each on its own CPUs); every other CPU counter has its own.
fn slot_key(c: &Counter, req: &Request, index: usize) -> String {
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
fn slot_count(counters: &[Counter], req: &Request) -> usize {
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
fn assign_slots(
    counters: &mut [Counter],
    found: &Discovery,
    kernel: &Kernel,
    req: &Request,
    notes: &mut Vec<String>,
) -> Result<Vec<Slot>, PlanError> {
    let mut slots = slots_of(counters, req);
    if slots.len() > MAX_SLOTS {
        return Err(PlanError::BadRequest(format!(
            "{} counters to read per tick, at most {MAX_SLOTS} (a package event counts once, \
             whatever its channels): name fewer with -e",
            slots.len()
        )));
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
fn slots_of(counters: &mut [Counter], req: &Request) -> Vec<Slot> {
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
fn new_slot(c: &Counter, first: bool) -> Slot {
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
fn say_package_sums(slots: &mut [Slot], counters: &[Counter]) {
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
fn assign_package_readers(
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
        return Err(PlanError::BadRequest(format!(
            "package {pkg}: {} counters, more than the {MAX_PKG_COUNTERS} one reader reads \
             at a tick: name fewer with -e",
            in_pkg.len()
        )));
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
fn hardware_counters(pmu: &str) -> Option<usize> {
    (pmu == "amd_df").then_some(4)
}

/// (PMU instance, events, hardware counters) for each instance of this package that has more
/// events than counters: the kernel multiplexes them.
fn crowded_pmus(counters: &[Counter], in_pkg: &[usize]) -> Vec<(String, usize, usize)> {
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
fn reader_note(
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

fn packages_of(counters: &[Counter]) -> Vec<u32> {
    let mut v: Vec<u32> = counters.iter().filter_map(|c| c.package).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The CPUs whose ticks may read every counter of package `pkg`: all its online CPUs where the
/// kernel allows any CPU of the package to read each of them; else the one CPU they are all
/// opened on; else none (counters opened on several CPUs of the package, one per die, on a
/// kernel where only that CPU may read each): userspace reads them.
fn package_readers(
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

/// What runs the program: the kernel's tick unless `--freq` asks for a timer of imc's own.
fn tick_of(kernel: &Kernel, req: &Request) -> Tick {
    if !req.command.samples() {
        return Tick {
            source: TickSource::IntervalTimer,
            hz: Some(1000.0 / req.interval_ms.max(1) as f64),
            adds_interrupts: true,
            switches: false,
            reason: format!(
                "imc stat reads every counter from userspace at each {} ms interval (a timer \
                 wake-up per interval; kernel-timed reads up to 100 ms)",
                req.interval_ms
            ),
        };
    }
    match req.freq {
        Some(f) => Tick {
            source: TickSource::CpuClock,
            hz: Some(f64::from(f)),
            adds_interrupts: true,
            switches: req.precise,
            reason: format!(
                "--freq {f}: imc's own cpu-clock timer on every CPU, finer than the kernel's \
                 tick; it adds a timer interrupt per CPU every {} us",
                1_000_000 / u64::from(f.max(1))
            ),
        },
        None => Tick {
            source: TickSource::KernelTick,
            hz: Some(f64::from(kernel.hz_or_default())),
            adds_interrupts: false,
            switches: true,
            reason: format!(
                "the kernel's own timer interrupt (tracepoint local_timer_entry, else \
                 hrtimer_expire_entry) and sched_switch: no interrupt of imc's own; busy CPUs \
                 tick at HZ={}{}, idle ones are described by their context switches",
                kernel.hz_or_default(),
                match (&kernel.hz, &kernel.hz_source) {
                    (Some(_), Some(src)) => format!(" (CONFIG_HZ in {src})"),
                    _ => " (assumed: no proc/config.gz or boot/config-RELEASE under --root)"
                        .to_string(),
                }
            ),
        },
    }
}

#[cfg(test)]
mod tests;

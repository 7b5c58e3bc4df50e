//! The plan's nouns: what a command asks for ([`Request`]), what the plan decides ([`Plan`]: its
//! counters, slots, tick, records, drain and refusals) and the errors of planning. Data only,
//! below every step file of the plan, which all build on it; the steps and the rules live beside
//! it (mod.rs, counters.rs, slots.rs, tick.rs, weights.rs, stalls.rs, latency.rs).

use super::kernel::Kernel;
use crate::model::{
    BackendKind, Direction, Encoded, PmuLimits, QueuePart, SlotRole, SlotScope, StallPart, Tier,
    Victims, Weighting,
};
use serde::Serialize;
use std::fmt;
use thiserror::Error;

/// Which command the plan is for: `stat` reads from userspace at each interval; the sampling
/// commands run the eBPF sampler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CommandKind {
    Stat,
    Top,
    Record,
    Serve,
}

/// What the user asked for.
#[derive(Clone, Debug)]
pub struct Request {
    pub command: CommandKind,
    /// `-e` events, resolved: the text as given and what it encodes to (every PMU instance).
    pub events: Vec<(String, Vec<Encoded>)>,
    /// `--backend` other than `auto`.
    pub backend: Option<BackendKind>,
    /// Backends already tried and failed to open (stat falls through to the next).
    pub exclude: Vec<BackendKind>,
    /// `--freq`: imc's own cpu-clock timer instead of the kernel's tick.
    pub freq: Option<u32>,
    /// `--precise`: a record at every context switch (else each task's slices add up in the
    /// kernel, flushed at each tick).
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
    /// `--stacks`: the call stacks traffic is charged in (sampling commands).
    pub stacks: Option<StackRequest>,
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

/// Why no plan was made: a request that cannot be met as asked (exit 2, see
/// [`PlanError::is_bad_request`]), or a machine with nothing to read (exit 1).
#[derive(Debug, Error, PartialEq)]
pub enum PlanError {
    /// An event only sampled or counted per task (IBS, trace or thread IMC) asked to be
    /// counted CPU-wide: the discovery's sentence why.
    #[error("{0}")]
    Uncountable(String),
    #[error(
        "--backend intel-client-mchbar: the sampler cannot read /dev/mem counters at its ticks; \
         use it with imc stat"
    )]
    NotSampledAtTicks,
    #[error(
        "{have} counters to read per tick, at most {max} (a package event counts once, \
         whatever its channels): name fewer with -e"
    )]
    TooManySlots { have: usize, max: usize },
    #[error(
        "package {package}: {have} counters, more than the {max} one reader reads at a tick: \
         name fewer with -e"
    )]
    TooManyPackageCounters { package: u32, have: usize, max: u32 },
    #[error(
        "--weight {event}: {pmu} counts for a whole package or device, not per CPU: a weight \
         must be a core or software event each CPU counts for itself"
    )]
    WeightNotPerCpu { event: String, pmu: String },
    #[error("--weight: {weights} weights and {free} free counter slots: name fewer")]
    TooManyWeights { weights: usize, free: usize },
    #[error(
        "--stacks takes stacks where the kernel's tick and switches charge slices, adding no \
         interrupt: drop --freq and --precise, or sample with --stack-period N"
    )]
    StacksOffTheTick,
    #[error("--stack-period 0: give the events between two samples, 1 or more")]
    StackPeriodZero,
    #[error(
        "--stack-period samples on a weight counter's overflow, and this plan has none \
         (--weight cpu-time, or no core counter): use --stacks alone"
    )]
    StackPeriodWithoutWeight,
    /// `--latency` where the machine has no memory-controller queues: why none were found.
    #[error("--latency: this machine has no memory-controller queues to measure latency with: {0}")]
    NoQueues(String),
    #[error("-e: no CPU to open the events on (no online CPUs found under --root)")]
    NoOnlineCpu,
    #[error("--backend {backend}: unavailable: {why}")]
    BackendUnavailable { backend: &'static str, why: String },
    /// No memory controller (why) and no stand-in event.
    #[error("no memory-controller counters ({0}) and no stand-in event encodes here")]
    NothingToRead(String),
    #[error(
        "--latency needs Knights Landing/Mill memory counters; {backend} is unavailable ({why})"
    )]
    LatencyBackendUnavailable { backend: &'static str, why: String },
    #[error("--latency needs Knights Landing/Mill memory counters (knl-imc, knl-edc)")]
    NoLatencyCounters,
    /// The stand-in event could not be read or did not encode.
    #[error(transparent)]
    StandIn(Box<crate::events::EventError>),
    #[error("page-faults did not encode")]
    StandInEmpty,
}

impl PlanError {
    /// The request cannot be met as asked (exit 2); else nothing here can be read (exit 1).
    pub fn is_bad_request(&self) -> bool {
        use PlanError::*;
        matches!(
            self,
            Uncountable(_)
                | NotSampledAtTicks
                | TooManySlots { .. }
                | TooManyPackageCounters { .. }
                | WeightNotPerCpu { .. }
                | TooManyWeights { .. }
                | StacksOffTheTick
                | StackPeriodZero
                | StackPeriodWithoutWeight
                | NoQueues(_)
        )
    }
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
    /// The memory tier a traffic counter counts: absent for DRAM, `cxl` for a CXL device.
    #[serde(skip_serializing_if = "Tier::is_dram")]
    pub tier: Tier,
    /// What the PMU's driver allows (counters, group size, width), where it says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<PmuLimits>,
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

/// What a plan measures (`source` in its JSON and text, as the word of [`fmt::Display`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanSource {
    /// A memory-controller backend (with its companions): its name.
    Backend(BackendKind),
    /// Knights Landing/Mill's DDR and MCDRAM counters with the latency pair:
    /// `knl-imc+knl-edc+latency`.
    KnlLatency,
    /// `-e` events counted as they are (stat) or measuring bytes: `events`.
    Events,
    /// `-e` events the sampler weighs tasks by: `events:A,B`.
    SampledEvents(Vec<String>),
    /// A stand-in event where no memory controller is counted: `proxy:NAME`.
    StandIn(String),
}

impl PlanSource {
    /// Whether `-e` events are measured (counted or sampled).
    pub fn is_events(&self) -> bool {
        matches!(self, PlanSource::Events | PlanSource::SampledEvents(_))
    }

    /// The stand-in event's name, when a stand-in is measured.
    pub fn stand_in(&self) -> Option<&str> {
        match self {
            PlanSource::StandIn(name) => Some(name),
            _ => None,
        }
    }
}

impl fmt::Display for PlanSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanSource::Backend(b) => f.write_str(b.as_str()),
            PlanSource::KnlLatency => f.write_str("knl-imc+knl-edc+latency"),
            PlanSource::Events => f.write_str("events"),
            PlanSource::SampledEvents(names) => write!(f, "events:{}", names.join(",")),
            PlanSource::StandIn(name) => write!(f, "proxy:{name}"),
        }
    }
}

impl Serialize for PlanSource {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    pub command: CommandKind,
    /// What is measured: a backend, `-e` events, or a stand-in.
    pub source: PlanSource,
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
    pub latency: Option<LoadedLatency>,
    /// The record's slots (sampling commands; empty for stat).
    pub slots: Vec<Slot>,
    pub tick: Tick,
    /// What the sampler's records are (sampling commands).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records: Option<Records>,
    /// Where call stacks are taken and what the kernel keeps of them (`--stacks`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stacks: Option<StackPlan>,
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

/// What the sampler's records are (`records` in the plan's JSON; sampling commands only),
/// decided once here and executed as it is by the sampler, the pipeline and the recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Records {
    /// Per task at each tick: context switches add to the CPU's accumulator in the kernel.
    Aggregated,
    /// A record at every context switch and tick (`--precise`).
    PerSwitch,
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

/// `--weight`: how package traffic is divided.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum WeightRequest {
    /// The core counters this CPU model has for its own memory traffic, else CPU time.
    #[default]
    Auto,
    /// On-CPU time alone.
    CpuTime,
    /// The user's events (`EVENT[:read|:write]`), resolved by the caller.
    Events(Vec<WeightEvent>),
}

/// One `--weight EVENT[:read|:write]`.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightEvent {
    pub text: String,
    /// Which direction of package traffic it weighs (None: every direction).
    pub direction: Option<Direction>,
    pub encoded: Vec<Encoded>,
}

/// What a weight counter weighs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct WeightRole {
    pub direction: Option<Direction>,
    /// Traffic to other packages' memory (weighs their controllers' counts).
    pub remote: bool,
    /// Which of its core PMU's events of this direction and locality it is: several add up
    /// (Zen's DRAM fills and L2-prefetcher misses), each in a slot of its own; the n-th of a
    /// hybrid part's `cpu_core` and `cpu_atom` share one, each on its own CPUs.
    pub ordinal: u8,
}

/// What the plan measures of loaded latency (`latency` in a sampling plan's JSON): the queue
/// kind and which directions are counted, or null kind with the reason none is.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LoadedLatency {
    /// `intel-imc-queues`, `amd-l3-sampled-latency`; null where nothing is counted.
    pub source: Option<String>,
    /// Read (and write) latency counted on every channel (or CCX).
    pub read: bool,
    pub write: bool,
    /// Whether each channel's own busy share is counted: not yet (imc would need its DRAM
    /// clocks per burst). A package's utilisation (its bytes over its SMBIOS peak) is in each
    /// interval wherever the peak is known, whatever this says.
    pub utilisation: bool,
    pub reason: String,
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

/// `--stacks` and its options, as asked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StackRequest {
    /// `--kernel-stacks`: the kernel stack too.
    pub kernel: bool,
    /// `--stack-period N`.
    pub period: Option<u64>,
}

/// How stacks are sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StackMode {
    /// At the slices the sampler charges (tick and switches).
    Slices,
    /// On the weight counter's overflow every `period` events.
    Overflow,
}

/// The plan's `stacks` object.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StackPlan {
    pub mode: StackMode,
    pub user: bool,
    pub kernel: bool,
    /// Where they are taken: `tick`, `switch`, or `overflow`.
    pub taken_at: Vec<&'static str>,
    /// Distinct (process, cgroup, stack) entries the kernel holds between two drains; a slice past
    /// them is counted (`stacks_dropped`), its traffic still charged to its process.
    pub map_entries: u32,
    /// Distinct stacks each of the kernel's two stack maps holds (one takes the stacks of a
    /// drain's interval while the other's are read and emptied); a stack past them (or one
    /// whose bucket another holds in this map and in the spare map) is charged under
    /// `[stack not recorded]`.
    pub stack_entries: u32,
    /// Stacks each of the two spare maps holds: a stack whose bucket another holds in its
    /// generation's map is stored in that generation's spare map instead, so of two stacks
    /// that share a bucket neither loses its frames.
    pub spare_entries: u32,
    /// New (process, cgroup, stack) entries of a drain's interval after which the kernel wakes imc to
    /// drain early, so a stack map is never far past that many stacks (a power of two).
    pub wake_after: u32,
    /// Frames a stack keeps at most (the innermost): deeper ones are marked cut short.
    pub depth: u32,
    /// The slots whose counts are charged to stacks (indices into `slots`); empty: on-CPU
    /// time is the weight.
    pub weight_slots: Vec<usize>,
    /// `--stack-period`: events between two samples, and the event.
    pub period: Option<u64>,
    pub event: Option<String>,
    pub adds_interrupts: bool,
    /// imc's own stacks are not taken: its traffic is charged under one frame, `[imc itself]`
    /// (imc never resolves its own stacks, so walking them would cost for nothing).
    pub skips_imc_stacks: bool,
    pub reason: String,
}

//! The eBPF tick sampler: opens the counters of each slot and each package, loads the program,
//! attaches it to the kernel's own tick and to sched_switch (or, with `--freq`, to a cpu-clock
//! timer on every CPU), and drains its records.
//!
//! Lifetime is ownership: dropping a [`Sampler`] detaches every link and closes every program,
//! map and counter fd, so nothing stays loaded after `imc` exits, however it exits.
pub mod fallback;
pub mod loopback;
pub mod object;
pub mod planned;
mod rings;

use crate::model::{Encoded, SlotScope, SlotSpec};
use crate::sys::bpf::{BpfSys, MappedMap, RealBpf};
use crate::sys::perf::{self, CounterValue, PerfEventAttr, PerfSys, RealPerf};
use aya::maps::Array;
use aya::maps::{MapData, PerCpuArray, RingBuf};
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::programs::{PerfEvent, RawTracePoint};
use aya::{Ebpf, EbpfLoader};
use fallback::IdleFallback;
use imc_common::{
    AGGREGATE_GLOBAL, CpuHead, GROUP_LAST_MAP_NAME, HEADS_MAP_NAME, LONG_SLICE_GLOBAL,
    MAX_PKG_COUNTERS, MAX_SLOTS, MIN_FLUSH_GLOBAL, NR_SLOTS_GLOBAL, NR_STATS, PKG_MAP_NAME,
    PKG_MIN_GAP_GLOBAL, PKG_SLOT_MAP_NAME, PKG_SLOTS_GLOBAL, READERS_MAP_NAME, RING_LEN_GLOBAL,
    ReaderCfg, SLOT_MAP_NAMES, STAT_PKG_READS, STAT_READ_ERROR, STAT_SLOT_ABSENT, STATS_MAP_NAME,
    SWITCH_PROGRAM, TICK_PROGRAM, TICK_TP_PROGRAM, TICKS_MAP_NAME, TIMED_SLOTS_GLOBAL, TickRecord,
    WAKE_EVERY_GLOBAL, WAKE_MAP_NAME, tick_rules,
};
use rings::Rings;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum SamplerError {
    #[error(
        "this imc was built without its eBPF program: build it with `cargo xtask build` (or set {env} to the object file)",
        env = object::OBJECT_ENV
    )]
    NoObject,
    #[error("cannot read the eBPF object {}: {source}", path.display())]
    ObjectRead { path: PathBuf, source: io::Error },
    #[error(
        "the eBPF object is of record ABI {}, this imc reads ABI {expected}: rebuild both with \
         `cargo xtask build` (or unset {env})",
        found.map_or_else(|| "unknown (no IMC_ABI_VERSION)".to_string(), |v| v.to_string()),
        env = object::OBJECT_ENV
    )]
    Abi { found: Option<u32>, expected: u32 },
    #[error("loading the eBPF sampler needs root, or CAP_BPF and CAP_PERFMON: run imc with sudo")]
    NotPrivileged,
    #[error("at most {MAX_SLOTS} counters can be read per tick; {0} were asked for")]
    TooManySlots(usize),
    #[error(
        "package {package}: {count} counters for one reader, at most {MAX_PKG_COUNTERS}: name fewer with -e"
    )]
    TooManyPackageCounters { package: u32, count: usize },
    #[error("no CPUs to sample (is {0} the right --root?)")]
    NoCpus(String),
    #[error("{message}")]
    OpenCounter {
        message: String,
        #[source]
        source: io::Error,
    },
    #[error("the kernel refused the eBPF program: {}", on_one_line(.message, .source.as_deref()))]
    Load {
        message: String,
        #[source]
        source: Option<Cause>,
    },
    #[error("attaching the sampler to {what}: {}", on_one_line(.message, .source.as_deref()))]
    Attach {
        what: String,
        message: String,
        #[source]
        source: Option<Cause>,
    },
    #[error("setting up map {map}: {}", on_one_line(.message, .source.as_deref()))]
    Map {
        map: String,
        message: String,
        #[source]
        source: Option<Cause>,
    },
}

/// The cause an error of the sampler keeps: aya's and the kernel's errors as they came.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

impl SamplerError {
    /// The kernel refused `source` (loading, verifying).
    fn load(source: impl Into<Cause>) -> SamplerError {
        SamplerError::Load {
            message: String::new(),
            source: Some(source.into()),
        }
    }

    /// Map `map` could not be set up: `message` says what was being done, `source` why not.
    fn map(map: &str, message: impl Into<String>, source: impl Into<Cause>) -> SamplerError {
        SamplerError::Map {
            map: map.into(),
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// Map `map` is not as the object should have it (no cause beyond the message).
    fn map_shape(map: &str, message: impl Into<String>) -> SamplerError {
        SamplerError::Map {
            map: map.into(),
            message: message.into(),
            source: None,
        }
    }
}

/// `message` and the cause's chain on one line, as the errors here are shown.
fn on_one_line(message: &str, source: Option<&(dyn std::error::Error + Send + Sync)>) -> String {
    match (message.is_empty(), source) {
        (_, None) => message.to_string(),
        (true, Some(e)) => error_chain(e),
        (false, Some(e)) => format!("{message}: {}", error_chain(e)),
    }
}

impl SamplerError {
    /// Missing privileges are a runtime failure (exit 1), like every error here.
    pub fn is_privilege(&self) -> bool {
        matches!(self, SamplerError::NotPrivileged)
    }
}

/// One slot to configure: what to count and where to open it.
#[derive(Clone, Debug)]
pub struct SlotPlan {
    pub spec: SlotSpec,
    pub attr: PerfEventAttr,
    /// A CPU slot's counters: the CPU each is opened on and the CPUs whose array entry gets its
    /// fd (itself). Empty for a package slot, whose counters are in [`ReaderGroup`]s.
    pub instances: Vec<(u32, Vec<u32>)>,
    /// Read enabled/running times at each tick (core PMU events, which can be multiplexed);
    /// otherwise the value alone is read, which is cheaper.
    pub may_multiplex: bool,
    /// CPUs whose counter differs from `attr` (hybrid parts), with their own.
    pub attr_on: Vec<(u32, PerfEventAttr)>,
}

impl SlotPlan {
    /// A CPU-scope counter opened on every CPU of `cpus`, each read by its own CPU.
    pub fn per_cpu(spec: SlotSpec, encoded: &Encoded, cpus: &[u32]) -> SlotPlan {
        SlotPlan {
            spec,
            attr: counting_attr(encoded),
            instances: cpus.iter().map(|&c| (c, vec![c])).collect(),
            may_multiplex: may_multiplex(encoded),
            attr_on: Vec::new(),
        }
    }

    /// A CPU-scope slot whose counter differs by CPU (a hybrid part's `cpu_core` and
    /// `cpu_atom` events): each part opened on its own CPUs.
    pub fn per_cpu_parts(spec: SlotSpec, parts: &[(&Encoded, Vec<u32>)]) -> SlotPlan {
        let Some((first, _)) = parts.first() else {
            return SlotPlan::per_cpu(spec, &Encoded::default(), &[]);
        };
        let mut plan = SlotPlan::per_cpu(spec, first, &[]);
        for (enc, cpus) in parts {
            plan.may_multiplex |= may_multiplex(enc);
            for &c in cpus {
                plan.instances.push((c, vec![c]));
                if counting_attr(enc) != plan.attr {
                    plan.attr_on.push((c, counting_attr(enc)));
                }
            }
        }
        plan
    }

    /// The attribute the counter on `cpu` is opened with.
    pub fn attr_for(&self, cpu: u32) -> &PerfEventAttr {
        self.attr_on
            .iter()
            .find(|(c, _)| *c == cpu)
            .map_or(&self.attr, |(_, a)| a)
    }

    /// A package slot: the per-package sum of the [`PackageCounter`]s that name it.
    pub fn package(spec: SlotSpec) -> SlotPlan {
        SlotPlan {
            spec,
            attr: PerfEventAttr::counter(0, [0; 3], false, false),
            instances: Vec::new(),
            may_multiplex: false,
            attr_on: Vec::new(),
        }
    }
}

/// One package counter (a memory channel's read or write counter): summed into `slot`.
#[derive(Clone, Debug)]
pub struct PackageCounter {
    pub slot: usize,
    /// The CPU it is opened on (its PMU's cpumask CPU for this package).
    pub open_cpu: u32,
    pub attr: PerfEventAttr,
    /// For messages: `uncore_imc_3/read`.
    pub name: String,
    /// The memory channel it counts, as exported: its PMU instance (`uncore_imc_3`), or the PMU
    /// and the channel's number where one PMU has an event per channel (`amd_df#2`).
    pub channel: String,
}

/// One package counter's own reading (`Sampler::read_channels`).
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelReading {
    pub package: u32,
    pub slot: usize,
    pub channel: String,
    /// Cumulative count, scaled for multiplexing.
    pub value: f64,
}

/// The package counters of one package and who reads them: each of `readers` may read all of
/// them at its tick (the group is read at most once per tick period, by whichever reader ticks
/// first); with no readers, userspace reads them at every drain.
#[derive(Clone, Debug)]
pub struct ReaderGroup {
    pub package: u32,
    pub readers: Vec<u32>,
    pub counters: Vec<PackageCounter>,
}

/// What runs the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TickSource {
    /// The kernel's own timer tick (a tracepoint of its timer interrupt) and sched_switch: adds
    /// no interrupt. Resolution is the kernel's HZ on busy CPUs, and every context switch.
    Kernel,
    /// imc's own cpu-clock timer at `freq` per CPU (adds a timer interrupt per CPU per
    /// period); sched_switch too when `switches`.
    CpuClock { freq: u32, switches: bool },
}

/// Which tracepoint carries the kernel's tick, in order of preference: x86's local APIC timer
/// interrupt (the tick and every other hrtimer expiring in hard interrupt context), else every
/// hrtimer expiry (any architecture).
pub const KERNEL_TICK_TRACEPOINTS: [&str; 2] = ["local_timer_entry", "hrtimer_expire_entry"];

/// How the program came to run, once attached (for `-v` and `imc_info`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TickAttached {
    /// `tracepoint:irq_vectors:local_timer_entry + sched_switch`, `cpu-clock 1000 Hz`.
    pub source: String,
    pub adds_interrupts: bool,
    /// Why this one: the tracepoints tried before it and what the kernel said.
    pub why: String,
}

/// Whether an event lives on a PMU that shares counters between events (the core PMU), where
/// the kernel multiplexes when too many are open.
pub fn may_multiplex(e: &Encoded) -> bool {
    matches!(
        e.pmu_type,
        perf::TYPE_HARDWARE | perf::TYPE_HW_CACHE | perf::TYPE_RAW
    ) || e.pmu == "cpu"
        || e.pmu.starts_with("cpu_")
}

/// The counting `perf_event_attr` for an encoded event.
pub fn counting_attr(e: &Encoded) -> PerfEventAttr {
    PerfEventAttr::counter(
        e.pmu_type,
        [e.config, e.config1, e.config2],
        e.exclude_user,
        e.exclude_kernel,
    )
}

/// Which program the cpu-clock timer runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TickProgram {
    /// imc's tick: read the slots, emit a record.
    #[default]
    Imc,
    /// Benchmark baseline: a per-CPU hash count per pid, as bpftrace's `@[pid] = count()`
    /// (only in the benchmark's object).
    BaselinePidCount,
    /// Benchmark cost probe: one piece of the tick's work alone (`probe_*` in the benchmark's
    /// object).
    Probe(&'static str),
}

impl TickProgram {
    pub fn name(self) -> &'static str {
        match self {
            TickProgram::Imc => TICK_PROGRAM,
            TickProgram::BaselinePidCount => "baseline_pid_count",
            TickProgram::Probe(name) => name,
        }
    }
}

#[derive(Clone, Debug)]
pub struct SamplerConfig {
    pub tick: TickSource,
    /// CPU slots and package slots (slot index = position).
    pub slots: Vec<SlotPlan>,
    /// The package slots' counters, one group per package.
    pub groups: Vec<ReaderGroup>,
    /// CPUs to attach the tick to (the online CPUs).
    pub cpus: Vec<u32>,
    /// Records per CPU ring (rounded up to a power of two); None: sized for `drain_period_ms`
    /// at the tick rate with a wide margin.
    pub ring_bytes: Option<u32>,
    /// How often the caller drains; sizes the per-CPU rings.
    pub drain_period_ms: u32,
    /// Forward the program's aya-log lines to the `log` crate (debug only: costs time per run).
    pub bpf_log: bool,
    /// imc's tick, or the benchmark's baseline (cpu-clock only).
    pub tick_program: TickProgram,
    /// Context switches add to a per-CPU, per-task accumulator in the kernel that each tick
    /// flushes as KIND_AGGREGATE records (records per second: ticks × tasks per tick, whatever
    /// the switch rate); false: a record per switch (`--precise`).
    pub aggregate: bool,
}

impl SamplerConfig {
    /// Timer ticks per second per busy CPU: `freq`, or the kernel's HZ (250 where unknown).
    pub fn tick_hz(&self, kernel_hz: Option<u32>) -> u32 {
        match self.tick {
            TickSource::CpuClock { freq, .. } => freq.max(1),
            TickSource::Kernel => kernel_hz.unwrap_or(250).max(1),
        }
    }

    fn switches(&self) -> bool {
        match self.tick {
            TickSource::Kernel => true,
            TickSource::CpuClock { switches, .. } => switches,
        }
    }
}

/// Per-CPU program statistics, from the STATS map.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuStats {
    pub cpu: u32,
    pub runs: u64,
    pub lost: u64,
    pub read_errors: [u64; MAX_SLOTS],
    /// Reads that found no counter in this CPU's entry (-ENOENT).
    pub absent: [u64; MAX_SLOTS],
    /// Times this CPU read its package's counters as their reader.
    pub pkg_reads: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SamplerStats {
    pub per_cpu: Vec<CpuStats>,
}

impl SamplerStats {
    pub fn runs(&self) -> u64 {
        self.per_cpu.iter().map(|c| c.runs).sum()
    }
    pub fn lost(&self) -> u64 {
        self.per_cpu.iter().map(|c| c.lost).sum()
    }
    pub fn read_errors(&self, slot: usize) -> u64 {
        self.per_cpu.iter().map(|c| c.read_errors[slot]).sum()
    }
}

/// A counter fd the sampler opened, kept open for the program's lifetime.
struct OpenCounter {
    slot: usize,
    cpu: u32,
    fd: OwnedFd,
}

/// An opened package counter: index `i` of these is entry `i` of the PKG array.
struct OpenPackageCounter {
    slot: usize,
    group: usize,
    channel: String,
    fd: OwnedFd,
}

pub struct Sampler {
    // Field order is drop order: the links and programs (inside `ebpf`) go first, then the
    // maps we took out of it, then the counter fds.
    ebpf: Ebpf,
    logger: Option<aya_log::EbpfLogger<&'static dyn log::Log>>,
    rings: Rings,
    stats: PerCpuArray<MapData, u64>,
    /// The kernel's "a ring is half full" notices (see imc_common::WAKE_MAP_NAME).
    wake: RingBuf<MapData>,
    /// One drain's records for [`drain`](Self::drain) (kept to reuse its allocation).
    scratch: Vec<TickRecord>,
    counters: Vec<OpenCounter>,
    package_counters: Vec<OpenPackageCounter>,
    /// Package of each reader group.
    group_package: Vec<u32>,
    slots: Vec<SlotSpec>,
    cpus: Vec<u32>,
    fallback: IdleFallback,
    attached: TickAttached,
    /// The program that runs at the tick (for its run-time statistics).
    tick_prog_name: &'static str,
}

/// Effective capabilities of this process (CapEff in /proc/self/status).
fn effective_caps() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line["CapEff:".len()..].trim(), 16).ok()
}

/// Root, or CAP_SYS_ADMIN, or CAP_BPF together with CAP_PERFMON.
pub fn privileged() -> bool {
    const CAP_SYS_ADMIN: u64 = 1 << 21;
    const CAP_PERFMON: u64 = 1 << 38;
    const CAP_BPF: u64 = 1 << 39;
    match effective_caps() {
        Some(c) => c & CAP_SYS_ADMIN != 0 || (c & CAP_BPF != 0 && c & CAP_PERFMON != 0),
        None => {
            // SAFETY: geteuid has no preconditions.
            unsafe { libc::geteuid() == 0 }
        }
    }
}

/// All CPUs' rings together stay within this (a 192-CPU server would otherwise map 750 MB).
const RINGS_MAX_BYTES: u64 = 128 << 20;

/// Records per CPU ring: eight drain periods' worth at the tick rate plus, where context switches
/// write records too (`--precise`), 20 000 switches a second (a busy server's rate; a burst
/// beyond it within one drain period is what may be lost), a power of two between 64 (2048 with
/// switches: a drain a loaded machine delays must not lose a switch burst) and 16384, and no
/// more than [`RINGS_MAX_BYTES`] over the `possible` CPUs allow (at least 256). Aggregating, the
/// rate is four tasks a tick and two drain periods' worth within a quarter of that budget: a
/// 192-CPU server maps 25 MB of rings rather than 100 MB. A ring half full wakes
/// userspace early (see [`wake_every`]), so a long drain period does not need a ring that long.
fn ring_len(cfg: &SamplerConfig, possible: u32) -> u32 {
    if let Some(n) = cfg.ring_bytes {
        return n.clamp(2, 1 << 20).next_power_of_two();
    }
    // The kernel tick fires at up to 1000 Hz, plus other hrtimers on the local-timer tracepoint.
    let hz = u64::from(cfg.tick_hz(Some(1000)));
    let aggregating = cfg.aggregate && cfg.switches();
    let (per_second, least, periods, max_bytes) = if aggregating {
        // Aggregates: a record per task per tick, whatever the switch rate (a few tasks a tick;
        // more flush early, eight at a time). The ring wakes userspace when half full.
        (hz * 4, 256, 2, RINGS_MAX_BYTES / 4)
    } else if cfg.switches() {
        (hz + 20_000, 2048, 8, RINGS_MAX_BYTES)
    } else {
        (hz, 64, 8, RINGS_MAX_BYTES)
    };
    let per_period = per_second * u64::from(cfg.drain_period_ms.max(1)) / 1000 + 1;
    let wanted = (per_period * periods)
        .clamp(least, 16384)
        .next_power_of_two();
    let entry = TickRecord::entry_size(cfg.slots.len()) as u64;
    let budget = max_bytes / (u64::from(possible.max(1)) * entry);
    // Largest power of two within the budget.
    let affordable = 1u64 << (63 - budget.max(256).leading_zeros());
    wanted.min(affordable) as u32
}

/// Records of one CPU between two wake-ups of userspace: half its ring, so a drain the kernel
/// asks for has the other half's time to come before anything is overwritten.
fn wake_every(ring_len: u32) -> u32 {
    (ring_len / 2).max(1)
}

/// Takes the map `name` out of `ebpf` as its typed handle.
fn take_map<T>(ebpf: &mut Ebpf, name: &str) -> Result<T, SamplerError>
where
    T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    ebpf.take_map(name)
        .ok_or_else(|| map_missing(name))?
        .try_into()
        .map_err(|e: aya::maps::MapError| SamplerError::map(name, "", e))
}

/// The map of `ebpf` named `name`, or why not.
fn map_missing(name: &str) -> SamplerError {
    SamplerError::map_shape(
        name,
        "not in the eBPF object (object and imc built from different sources?)",
    )
}

fn perf_array<'a>(ebpf: &'a Ebpf, name: &str) -> Result<BorrowedFd<'a>, SamplerError> {
    match ebpf.map(name) {
        Some(aya::maps::Map::PerfEventArray(data)) => Ok(data.fd().as_fd()),
        Some(_) => Err(SamplerError::map_shape(name, "is not a PERF_EVENT_ARRAY")),
        None => Err(map_missing(name)),
    }
}

fn open_error(what: &str, cpu: u32, e: io::Error) -> SamplerError {
    SamplerError::OpenCounter {
        message: perf::explain_open_error(&format!("opening '{what}' on CPU {cpu}"), &e),
        source: e,
    }
}

impl Sampler {
    /// Opens the counters, loads and attaches the program. Nothing stays loaded on error.
    pub fn start(cfg: &SamplerConfig) -> Result<Sampler, SamplerError> {
        Self::start_with(cfg, &RealPerf, Arc::new(RealBpf))
    }

    /// The steps of [`start`](Self::start): check the configuration, open the counters
    /// (before the program, so a counter the user got wrong is reported first), load the
    /// program sized for them, hand it the counters, map its rings, attach it.
    pub fn start_with(
        cfg: &SamplerConfig,
        perf_sys: &dyn PerfSys,
        bpf_sys: Arc<dyn BpfSys>,
    ) -> Result<Sampler, SamplerError> {
        Self::check(cfg)?;
        let bytes = object::program_bytes()?;
        let counters = open_slot_counters(cfg, perf_sys)?;
        let package_counters = open_package_counters(cfg, perf_sys)?;

        let max_cpu = cfg.cpus.iter().copied().max().unwrap_or(0);
        let possible = aya::util::nr_cpus()
            .map(|n| n as u32)
            .unwrap_or(max_cpu + 1)
            .max(max_cpu + 1);
        let ring_len = ring_len(cfg, possible);
        let mut ebpf = load(cfg, &bytes, possible, ring_len, package_counters.len())?;
        let logger = if cfg.bpf_log {
            // The program logs only on rare paths (a package counter a CPU cannot read, once
            // per CPU and slot); under -vv those lines show.
            aya_log::EbpfLogger::init(&mut ebpf).ok()
        } else {
            None
        };
        fill_slot_arrays(&ebpf, cfg, &counters, bpf_sys.as_ref())?;
        fill_package_maps(&mut ebpf, cfg, &package_counters, bpf_sys.as_ref())?;
        let entry = TickRecord::entry_size(cfg.slots.len());
        let rings = map_rings(&ebpf, possible, ring_len, entry)?;
        let stats: PerCpuArray<MapData, u64> = take_map(&mut ebpf, STATS_MAP_NAME)?;
        let wake: RingBuf<MapData> = take_map(&mut ebpf, WAKE_MAP_NAME)?;
        let (attached, tick_prog_name) = attach(&mut ebpf, cfg)?;

        Ok(Sampler {
            ebpf,
            logger,
            rings,
            stats,
            wake,
            scratch: Vec::new(),
            counters,
            package_counters,
            group_package: cfg.groups.iter().map(|g| g.package).collect(),
            slots: cfg.slots.iter().map(|p| p.spec.clone()).collect(),
            cpus: cfg.cpus.clone(),
            fallback: idle_fallback(cfg),
            attached,
            tick_prog_name,
        })
    }

    fn check(cfg: &SamplerConfig) -> Result<(), SamplerError> {
        if cfg.slots.len() > MAX_SLOTS {
            return Err(SamplerError::TooManySlots(cfg.slots.len()));
        }
        if cfg.cpus.is_empty() {
            return Err(SamplerError::NoCpus("/".into()));
        }
        if let Some(g) = cfg
            .groups
            .iter()
            .find(|g| g.counters.len() > MAX_PKG_COUNTERS as usize)
        {
            return Err(SamplerError::TooManyPackageCounters {
                package: g.package,
                count: g.counters.len(),
            });
        }
        if !privileged() {
            return Err(SamplerError::NotPrivileged);
        }
        Ok(())
    }

    /// How the program runs: the tick source attached and why.
    pub fn attached(&self) -> &TickAttached {
        &self.attached
    }

    pub fn slots(&self) -> &[SlotSpec] {
        &self.slots
    }

    pub fn cpus(&self) -> &[u32] {
        &self.cpus
    }

    /// Hands every record waiting in the rings to `f`; returns how many. The fallback learns
    /// from them which packages a tick has read.
    pub fn drain(&mut self, f: impl FnMut(&TickRecord)) -> usize {
        let mut batch = std::mem::take(&mut self.scratch);
        batch.clear();
        let n = self.drain_append(&mut batch);
        batch.iter().for_each(f);
        self.scratch = batch;
        n
    }

    /// Like [`drain`](Self::drain), appending the records to `out` (each CPU's in time
    /// order, CPU after CPU) instead of handing them one by one: one copy out of the rings.
    pub fn drain_append(&mut self, out: &mut Vec<TickRecord>) -> usize {
        if let Some(l) = self.logger.as_mut() {
            l.flush();
        }
        drain_rings(&mut self.rings, &mut self.fallback, out)
    }

    /// The fd that turns readable when a CPU's ring is half full: poll it beside the drain
    /// timer, and call [`take_wakes`](Self::take_wakes) once woken.
    pub fn wake_fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// Consumes the pending "ring half full" notices; returns the CPUs that sent them.
    pub fn take_wakes(&mut self) -> Vec<u32> {
        let mut cpus = Vec::new();
        while let Some(item) = self.wake.next() {
            if let Ok(b) = <[u8; 4]>::try_from(&item[..]) {
                cpus.push(u32::from_ne_bytes(b));
            }
        }
        cpus
    }

    /// Records per CPU ring.
    pub fn ring_len(&self) -> u32 {
        self.rings.ring_len()
    }

    /// The package of each reader group (group index = position).
    pub fn group_packages(&self) -> &[u32] {
        &self.group_package
    }

    /// Reads from userspace every package no reader's tick has read within two drain periods
    /// (every package when `all`), handing `f(package, slot, t_ns, sum)` for each package slot:
    /// the fallback that keeps idle packages' traffic (DMA) and its timing, and the reader of
    /// packages whose kernel lets no tick read them. A slot one of whose counters fails to read
    /// is skipped (its next reading covers the span). Returns how many sums were handed out.
    pub fn read_idle_packages(
        &mut self,
        all: bool,
        mut f: impl FnMut(u32, usize, u64, u64),
    ) -> usize {
        let mut n = 0;
        for (i, slot, group) in self.fallback.due(monotonic_ns(), all) {
            let before = monotonic_ns();
            let mut sum = 0u64;
            let mut ok = true;
            for c in self
                .package_counters
                .iter()
                .filter(|c| c.slot == slot && c.group == group as usize)
            {
                // Scaled for multiplexing (a PMU with more events than counters): the same
                // value where the counter ran all along.
                match perf::read_counter(&RealPerf, c.fd.as_fd()) {
                    Ok(v) => sum = sum.wrapping_add(v.scaled().0.round() as u64),
                    Err(_) => ok = false,
                }
            }
            if !ok {
                continue;
            }
            // The reads cross to the counters' CPU; their middle is the best time to give them.
            let t = before + (monotonic_ns() - before) / 2;
            self.fallback.mark_read(i, t);
            f(self.group_package[group as usize], slot, t, sum);
            n += 1;
        }
        n
    }

    /// Every package counter read on its own from userspace (for per-channel figures, once an
    /// interval): one reading each, in plan order; a counter that fails to read is left out.
    pub fn read_channels(&self) -> Vec<ChannelReading> {
        self.package_counters
            .iter()
            .filter_map(|c| {
                let v = perf::read_counter(&RealPerf, c.fd.as_fd()).ok()?;
                Some(ChannelReading {
                    package: self.group_package[c.group],
                    slot: c.slot,
                    channel: c.channel.clone(),
                    value: v.scaled().0,
                })
            })
            .collect()
    }

    /// Records the reader found overwritten before it got to them, all CPUs together: no
    /// syscall (the full [`stats`](Self::stats) reads the STATS map, one lookup per counter).
    pub fn lost_records(&self) -> u64 {
        self.rings.lost.iter().sum()
    }

    /// Program statistics summed per CPU.
    pub fn stats(&self) -> Result<SamplerStats, SamplerError> {
        let mut per_cpu: Vec<CpuStats> = Vec::new();
        for index in 0..NR_STATS {
            let values = self
                .stats
                .get(&index, 0)
                .map_err(|e| SamplerError::map(STATS_MAP_NAME, "", e))?;
            if per_cpu.is_empty() {
                per_cpu = (0..values.len() as u32)
                    .map(|cpu| CpuStats {
                        cpu,
                        ..Default::default()
                    })
                    .collect();
            }
            for (cpu, v) in values.iter().enumerate() {
                let s = &mut per_cpu[cpu];
                match index {
                    STAT_PKG_READS => s.pkg_reads = *v,
                    i if i < STAT_READ_ERROR => {}
                    i if (STAT_READ_ERROR..STAT_SLOT_ABSENT).contains(&i) => {
                        s.read_errors[(i - STAT_READ_ERROR) as usize] = *v
                    }
                    i => s.absent[(i - STAT_SLOT_ABSENT) as usize] = *v,
                }
            }
        }
        // Runs are the rings' heads; lost records are the ones the reader found overwritten.
        for s in &mut per_cpu {
            let cpu = s.cpu as usize;
            if cpu < self.rings.tails.len() {
                s.runs = self.rings.head(cpu);
                s.lost = self.rings.lost[cpu];
            }
        }
        Ok(SamplerStats { per_cpu })
    }

    /// Reads a CPU slot's counter from userspace (`read(2)` on the same fd the program reads):
    /// a cross-check in tests.
    pub fn read_counter(&self, slot: usize, open_cpu: u32) -> io::Result<CounterValue> {
        let c = self
            .counters
            .iter()
            .find(|c| c.slot == slot && c.cpu == open_cpu)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no counter for slot {slot} on CPU {open_cpu}"),
                )
            })?;
        perf::read_counter(&RealPerf, c.fd.as_fd())
    }

    /// Total run time and run count of the tick program, as the kernel accounts them while
    /// run-time statistics are enabled (`sys::bpf::enable_run_time_stats`).
    pub fn tick_run_stats(&self) -> Result<(std::time::Duration, u64), SamplerError> {
        self.program_run_stats(self.tick_prog_name)
    }

    /// Run time and count of every loaded program of the sampler together (the tick and the
    /// context-switch program): what the collector costs in the kernel.
    pub fn all_run_stats(&self) -> Result<(std::time::Duration, u64), SamplerError> {
        let mut total = (std::time::Duration::ZERO, 0);
        for (_, prog) in self.ebpf.programs() {
            if let Ok(info) = prog.info() {
                total.0 += info.run_time();
                total.1 += info.run_count();
            }
        }
        Ok(total)
    }

    fn program_run_stats(&self, name: &str) -> Result<(std::time::Duration, u64), SamplerError> {
        let prog = self.ebpf.program(name).ok_or_else(|| SamplerError::Load {
            message: format!("program {name} missing"),
            source: None,
        })?;
        let info = prog.info().map_err(SamplerError::load)?;
        Ok((info.run_time(), info.run_count()))
    }

    /// Program ids of the loaded programs (for checking that they are gone after drop).
    pub fn program_ids(&self) -> Vec<u32> {
        self.ebpf
            .programs()
            .filter_map(|(_, p)| p.info().ok().map(|i| i.id()))
            .collect()
    }
}

/// A package nobody's tick read lately is read from userspace; see `fallback`. Each (package
/// slot, group) is one instance, its "CPU" the group's index.
fn idle_fallback(cfg: &SamplerConfig) -> IdleFallback {
    let max_age = fallback::max_age_ns(cfg.tick_hz(None), cfg.drain_period_ms);
    let instances: Vec<(usize, u32, Vec<u32>)> = cfg
        .groups
        .iter()
        .enumerate()
        .flat_map(|(g, grp)| {
            let mut slots: Vec<usize> = grp.counters.iter().map(|c| c.slot).collect();
            slots.sort_unstable();
            slots.dedup();
            slots
                .into_iter()
                .map(move |s| (s, g as u32, grp.readers.clone()))
        })
        .collect();
    IdleFallback::new(&instances, max_age)
}

/// What every drain does, whoever produced the rings: copy each new record out (comm and cgroup
/// filled in), and tell the idle-package fallback which package slots the ticks read.
fn drain_rings(rings: &mut Rings, fallback: &mut IdleFallback, out: &mut Vec<TickRecord>) -> usize {
    let first = out.len();
    let n = rings.drain_append(out);
    for r in &out[first..] {
        fallback.observe(r);
    }
    n
}

/// What the sampling loop's pump drains (`pipeline::Drainer`): the [`Sampler`], or a
/// [`loopback::Loopback`] whose rings a benchmark fills instead of the kernel.
pub trait RecordSource {
    /// The slots the records carry.
    fn slots(&self) -> &[SlotSpec];
    /// Appends every waiting record to `out` (each CPU's in time order, CPU after CPU).
    fn drain_append(&mut self, out: &mut Vec<TickRecord>) -> usize;
    /// Records overwritten before they were read, all CPUs together.
    fn lost_records(&self) -> u64;
    /// Userspace reads of the packages no tick read lately (see [`Sampler::read_idle_packages`]).
    fn read_idle_packages(&mut self, all: bool, f: impl FnMut(u32, usize, u64, u64)) -> usize;
    /// Every package counter read on its own (see [`Sampler::read_channels`]).
    fn read_channels(&self) -> Vec<ChannelReading>;
    /// The CPUs whose rings asked for a drain since the last call.
    fn take_wakes(&mut self) -> Vec<u32>;
}

impl RecordSource for Sampler {
    fn slots(&self) -> &[SlotSpec] {
        Sampler::slots(self)
    }
    fn drain_append(&mut self, out: &mut Vec<TickRecord>) -> usize {
        Sampler::drain_append(self, out)
    }
    fn lost_records(&self) -> u64 {
        Sampler::lost_records(self)
    }
    fn read_idle_packages(&mut self, all: bool, f: impl FnMut(u32, usize, u64, u64)) -> usize {
        Sampler::read_idle_packages(self, all, f)
    }
    fn read_channels(&self) -> Vec<ChannelReading> {
        Sampler::read_channels(self)
    }
    fn take_wakes(&mut self) -> Vec<u32> {
        Sampler::take_wakes(self)
    }
}

/// Every CPU slot's counter, on each CPU it is opened on.
fn open_slot_counters(
    cfg: &SamplerConfig,
    perf_sys: &dyn PerfSys,
) -> Result<Vec<OpenCounter>, SamplerError> {
    let mut counters = Vec::new();
    for (slot, plan) in cfg.slots.iter().enumerate() {
        for (open_cpu, _) in &plan.instances {
            let fd = perf_sys
                .open(plan.attr_for(*open_cpu), -1, *open_cpu as i32, None)
                .map_err(|e| open_error(&plan.spec.event, *open_cpu, e))?;
            counters.push(OpenCounter {
                slot,
                cpu: *open_cpu,
                fd,
            });
        }
    }
    Ok(counters)
}

/// Every package counter, group after group (their PKG array order).
fn open_package_counters(
    cfg: &SamplerConfig,
    perf_sys: &dyn PerfSys,
) -> Result<Vec<OpenPackageCounter>, SamplerError> {
    let mut out = Vec::new();
    for (group, g) in cfg.groups.iter().enumerate() {
        for c in &g.counters {
            let fd = perf_sys
                .open(&c.attr, -1, c.open_cpu as i32, None)
                .map_err(|e| open_error(&c.name, c.open_cpu, e))?;
            out.push(OpenPackageCounter {
                slot: c.slot,
                group,
                channel: c.channel.clone(),
                fd,
            });
        }
    }
    Ok(out)
}

/// AYA_LOG_LEVEL with every level off.
static LOG_OFF: u8 = 0;

/// Loads the object with its globals and map sizes set for this configuration.
fn load(
    cfg: &SamplerConfig,
    bytes: &[u8],
    possible: u32,
    ring_len: u32,
    nr_package_counters: usize,
) -> Result<Ebpf, SamplerError> {
    object::check_abi(bytes)?;
    // Ring entries carry the configured slots only.
    let entry = TickRecord::entry_size(cfg.slots.len()) as u32;
    let sized = object::with_value_size(bytes, TICKS_MAP_NAME, entry).ok_or_else(|| {
        SamplerError::map_shape(
            TICKS_MAP_NAME,
            "the object has no such map definition to size: rebuild it with `cargo xtask \
                 build`",
        )
    })?;
    let nr_slots = cfg.slots.len() as u32;
    let mut loader = EbpfLoader::new();
    loader.override_global(NR_SLOTS_GLOBAL, &nr_slots, true);
    for name in SLOT_MAP_NAMES {
        loader.map_max_entries(name, possible);
    }
    // Core PMU events (type 0, 3, 4 and the "cpu" PMU) share counters and can be multiplexed;
    // uncore, msr and software counters cannot.
    let timed: u32 = cfg
        .slots
        .iter()
        .enumerate()
        .filter(|(_, p)| p.may_multiplex)
        .fold(0, |m, (i, _)| m | 1 << i);
    loader.override_global(TIMED_SLOTS_GLOBAL, &timed, true);
    let pkg_slots: u32 = cfg
        .slots
        .iter()
        .enumerate()
        .filter(|(_, p)| p.spec.scope == SlotScope::Package)
        .fold(0, |m, (i, _)| m | 1 << i);
    loader.override_global(PKG_SLOTS_GLOBAL, &pkg_slots, true);
    let hz = cfg.tick_hz(None);
    let min_gap: u64 = tick_rules::pkg_min_gap_ns(hz);
    loader.override_global(PKG_MIN_GAP_GLOBAL, &min_gap, true);
    loader.override_global(RING_LEN_GLOBAL, &ring_len, true);
    let aggregate = u32::from(cfg.aggregate && cfg.switches());
    loader.override_global(AGGREGATE_GLOBAL, &aggregate, true);
    let long_slice: u64 = tick_rules::long_slice_ns(hz);
    loader.override_global(LONG_SLICE_GLOBAL, &long_slice, true);
    let min_flush: u64 = tick_rules::min_flush_ns(hz);
    loader.override_global(MIN_FLUSH_GLOBAL, &min_flush, true);
    let wake = wake_every(ring_len);
    loader.override_global(WAKE_EVERY_GLOBAL, &wake, true);
    // The program's rare-path lines (aya-log) are written only when -vv reads them.
    if !cfg.bpf_log {
        loader.override_global(aya_log::LEVEL, &LOG_OFF, true);
    }
    loader.map_max_entries(TICKS_MAP_NAME, possible * ring_len);
    loader.map_max_entries(HEADS_MAP_NAME, possible);
    let n = (nr_package_counters as u32).max(1);
    loader.map_max_entries(PKG_MAP_NAME, n);
    // aya makes a PERF_EVENT_ARRAY no longer than the CPU count; a longer PKG array is made
    // here and handed to the loader by pin path (the pin and its mount go once loaded).
    let pinned = if n > possible {
        let p = crate::sys::bpf::PinnedPerfArray::create(&std::env::temp_dir(), PKG_MAP_NAME, n)
            .map_err(|e| {
                SamplerError::map_shape(
                    PKG_MAP_NAME,
                    format!(
                        "{n} package counters need an array longer than the {possible} CPUs, \
                         made on a private bpffs mount, which failed ({e}): run imc as root, or \
                         name fewer counters with -e"
                    ),
                )
            })?;
        loader.map_pin_path(PKG_MAP_NAME, p.path().to_path_buf());
        Some(p)
    } else {
        None
    };
    loader.map_max_entries(PKG_SLOT_MAP_NAME, n);
    loader.map_max_entries(READERS_MAP_NAME, possible);
    loader.map_max_entries(GROUP_LAST_MAP_NAME, (cfg.groups.len() as u32).max(1));
    let loaded = loader.load(&sized).map_err(SamplerError::load);
    drop(pinned);
    loaded
}

/// Each CPU slot's counter fd into the entries of the CPUs that read it.
fn fill_slot_arrays(
    ebpf: &Ebpf,
    cfg: &SamplerConfig,
    counters: &[OpenCounter],
    bpf_sys: &dyn BpfSys,
) -> Result<(), SamplerError> {
    for (slot, plan) in cfg.slots.iter().enumerate() {
        let name = SLOT_MAP_NAMES[slot];
        let map = perf_array(ebpf, name)?;
        for (open_cpu, readers) in &plan.instances {
            let c = counters
                .iter()
                .find(|c| c.slot == slot && c.cpu == *open_cpu)
                .expect("every instance was opened");
            for &reader in readers {
                bpf_sys
                    .perf_array_set(map, reader, c.fd.as_fd())
                    .map_err(|e| {
                        SamplerError::map(
                            name,
                            format!("storing the counter of CPU {open_cpu} at index {reader}"),
                            e,
                        )
                    })?;
            }
        }
    }
    Ok(())
}

/// The package counters into PKG, their slots into PKG_SLOT, and each reader CPU's range into
/// READERS.
fn fill_package_maps(
    ebpf: &mut Ebpf,
    cfg: &SamplerConfig,
    counters: &[OpenPackageCounter],
    bpf_sys: &dyn BpfSys,
) -> Result<(), SamplerError> {
    if counters.is_empty() {
        return Ok(());
    }
    {
        let pkg = perf_array(ebpf, PKG_MAP_NAME)?;
        for (i, c) in counters.iter().enumerate() {
            bpf_sys
                .perf_array_set(pkg, i as u32, c.fd.as_fd())
                .map_err(|e| SamplerError::map(PKG_MAP_NAME, format!("entry {i}"), e))?;
        }
    }
    {
        let mut slots: Array<_, u32> = Array::try_from(
            ebpf.map_mut(PKG_SLOT_MAP_NAME)
                .ok_or_else(|| map_missing(PKG_SLOT_MAP_NAME))?,
        )
        .map_err(|e| SamplerError::map(PKG_SLOT_MAP_NAME, "", e))?;
        for (i, c) in counters.iter().enumerate() {
            slots
                .set(i as u32, c.slot as u32, 0)
                .map_err(|e| SamplerError::map(PKG_SLOT_MAP_NAME, "", e))?;
        }
    }
    let mut readers: Array<_, ReaderCfg> = Array::try_from(
        ebpf.map_mut(READERS_MAP_NAME)
            .ok_or_else(|| map_missing(READERS_MAP_NAME))?,
    )
    .map_err(|e| SamplerError::map(READERS_MAP_NAME, "", e))?;
    let mut first = 0u32;
    for (group, g) in cfg.groups.iter().enumerate() {
        let count = g.counters.len() as u32;
        for &cpu in &g.readers {
            let entry = ReaderCfg {
                first,
                count,
                group: group as u32,
                _pad: 0,
            };
            readers
                .set(cpu, entry, 0)
                .map_err(|e| SamplerError::map(READERS_MAP_NAME, "", e))?;
        }
        first += count;
    }
    Ok(())
}

/// The per-CPU rings (of `entry`-byte records) and heads, mapped read-only.
fn map_rings(
    ebpf: &Ebpf,
    possible: u32,
    ring_len: u32,
    entry: usize,
) -> Result<Rings, SamplerError> {
    let map_bytes = |name: &str, bytes: usize| -> Result<MappedMap, SamplerError> {
        let Some(aya::maps::Map::Array(data)) = ebpf.map(name) else {
            return Err(SamplerError::map_shape(name, "missing or not an array"));
        };
        MappedMap::map(data.fd().as_fd(), bytes)
            .map_err(|e| SamplerError::map(name, format!("mmap of {bytes} bytes"), e))
    };
    Ok(Rings::new(
        map_bytes(TICKS_MAP_NAME, (possible * ring_len) as usize * entry)?,
        map_bytes(
            HEADS_MAP_NAME,
            possible as usize * std::mem::size_of::<CpuHead>(),
        )?,
        ring_len,
        entry,
        possible as usize,
    ))
}

fn load_program<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T, SamplerError>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or_else(|| SamplerError::Load {
            message: format!("program {name} missing from the object"),
            source: None,
        })?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| SamplerError::load(e))
}

/// Attaches the tick (and sched_switch): the kernel's tick through the first tracepoint of
/// [`KERNEL_TICK_TRACEPOINTS`] that attaches, or the cpu-clock timer with `--freq`.
fn attach(
    ebpf: &mut Ebpf,
    cfg: &SamplerConfig,
) -> Result<(TickAttached, &'static str), SamplerError> {
    let (attached, name) = match cfg.tick {
        TickSource::Kernel => {
            let prog: &mut RawTracePoint = load_program(ebpf, TICK_TP_PROGRAM)?;
            prog.load().map_err(SamplerError::load)?;
            let mut tried = Vec::new();
            let mut chosen = None;
            for tp in KERNEL_TICK_TRACEPOINTS {
                match prog.attach(tp) {
                    Ok(_) => {
                        chosen = Some(tp);
                        break;
                    }
                    Err(e) => tried.push(format!("{tp}: {}", error_chain(&e))),
                }
            }
            let Some(tp) = chosen else {
                return Err(SamplerError::Attach {
                    what: "the kernel's tick".into(),
                    message: format!(
                        "{} (use --freq HZ for a timer of imc's own)",
                        tried.join("; ")
                    ),
                    source: None,
                });
            };
            let why = if tried.is_empty() {
                format!("{tp} fires at the kernel's own timer interrupt")
            } else {
                format!("{tp}, since {}", tried.join("; "))
            };
            (
                TickAttached {
                    source: format!("tracepoint:{tp}+sched_switch"),
                    adds_interrupts: false,
                    why,
                },
                TICK_TP_PROGRAM,
            )
        }
        TickSource::CpuClock { freq, .. } => {
            // A period in ns (not a frequency) gives exactly `freq` ticks per busy second, with
            // no adaptive period for the kernel to tune.
            let period_ns = 1_000_000_000u64 / u64::from(freq.max(1));
            let name = cfg.tick_program.name();
            let prog: &mut PerfEvent = load_program(ebpf, name)?;
            prog.load().map_err(SamplerError::load)?;
            for &cpu in &cfg.cpus {
                prog.attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Period(period_ns),
                    false,
                )
                .map_err(|e| SamplerError::Attach {
                    what: format!("the cpu-clock timer of CPU {cpu}"),
                    message: String::new(),
                    source: Some(e.into()),
                })?;
            }
            (
                TickAttached {
                    source: format!("cpu-clock:{freq}Hz"),
                    adds_interrupts: true,
                    why: format!(
                        "--freq {freq} asks for imc's own timer: one interrupt per CPU every {} us",
                        period_ns / 1000
                    ),
                },
                name,
            )
        }
    };
    if cfg.switches() {
        let prog: &mut RawTracePoint = load_program(ebpf, SWITCH_PROGRAM)?;
        prog.load().map_err(SamplerError::load)?;
        prog.attach("sched_switch")
            .map_err(|e| SamplerError::Attach {
                what: "sched/sched_switch".into(),
                message: String::new(),
                source: Some(e.into()),
            })?;
    }
    Ok((attached, name))
}

/// An error and its sources on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(src) = cur {
        let t = src.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = src.source();
    }
    // The verifier log can be hundreds of lines; keep the first and the last few for one line.
    let lines: Vec<&str> = s.lines().collect();
    if lines.len() > 6 {
        let mut short = lines[..2].join(" | ");
        short.push_str(" | … | ");
        short.push_str(&lines[lines.len() - 3..].join(" | "));
        return short;
    }
    s.replace('\n', " | ")
}

/// CLOCK_MONOTONIC in ns: the clock `bpf_ktime_get_ns` reads, so userspace readings and tick
/// records share one time line.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is valid to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn errors_keep_their_cause_and_say_it_on_one_line() {
        let e = SamplerError::map(
            TICKS_MAP_NAME,
            "mmap of 4096 bytes",
            io::Error::from_raw_os_error(libc::EPERM),
        );
        assert_eq!(
            e.to_string(),
            format!(
                "setting up map TICKS: mmap of 4096 bytes: {}",
                io::Error::from_raw_os_error(libc::EPERM)
            )
        );
        let cause = e.source().expect("the cause is kept");
        assert_eq!(
            cause.downcast_ref::<io::Error>().map(|c| c.raw_os_error()),
            Some(Some(libc::EPERM))
        );
        // Without a message of its own, the cause is the whole story; without a cause, the
        // message is.
        let bare = SamplerError::load(io::Error::other("invalid argument\nverifier log"));
        assert_eq!(
            bare.to_string(),
            "the kernel refused the eBPF program: invalid argument | verifier log"
        );
        let shape = SamplerError::map_shape("PKG", "is not a PERF_EVENT_ARRAY");
        assert_eq!(
            shape.to_string(),
            "setting up map PKG: is not a PERF_EVENT_ARRAY"
        );
        assert!(shape.source().is_none());
        let open = open_error("page-faults", 3, io::Error::from_raw_os_error(libc::ENOENT));
        assert!(
            open.to_string().contains("opening 'page-faults' on CPU 3"),
            "{open}"
        );
        assert!(open.source().is_some());
    }
}

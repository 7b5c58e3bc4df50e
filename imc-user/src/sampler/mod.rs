//! The eBPF tick sampler: opens the counters of each slot, loads the program, attaches it to a
//! cpu-clock timer on every CPU (and to sched_switch in precise mode), and drains its records.
//!
//! Lifetime is ownership: dropping a [`Sampler`] detaches every link and closes every program,
//! map and counter fd, so nothing stays loaded after `imc` exits, however it exits.
pub mod fallback;
pub mod object;
pub mod probe;
mod rings;

use crate::model::{Encoded, SlotScope, SlotSpec};
use crate::sys::bpf::{BpfSys, MappedMap, RealBpf};
use crate::sys::perf::{self, CounterValue, PerfEventAttr, PerfSys, RealPerf};
use aya::maps::{MapData, PerCpuArray};
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::programs::{PerfEvent, RawTracePoint};
use aya::{Ebpf, EbpfLoader};
use fallback::IdleFallback;
use imc_common::{
    CpuHead, HEADS_MAP_NAME, MAX_SLOTS, NR_SLOTS_GLOBAL, NR_STATS, RING_LEN_GLOBAL, SLOT_MAP_NAMES,
    STAT_READ_ERROR, STAT_SLOT_ABSENT, STATS_MAP_NAME, TICKS_MAP_NAME, TIMED_SLOTS_GLOBAL,
    TickRecord,
};
use probe::{ReadMode, ReaderProbe};
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
    #[error("loading the eBPF sampler needs root, or CAP_BPF and CAP_PERFMON: run imc with sudo")]
    NotPrivileged,
    #[error("at most {MAX_SLOTS} counters can be read per tick; {0} were asked for")]
    TooManySlots(usize),
    #[error("no CPUs to sample (is {0} the right --root?)")]
    NoCpus(String),
    #[error("{0}")]
    OpenCounter(String),
    #[error("the kernel refused the eBPF program: {0}")]
    Load(String),
    #[error("attaching the sampler to {what}: {message}")]
    Attach { what: String, message: String },
    #[error("setting up map {map}: {message}")]
    Map { map: String, message: String },
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
    /// For each counter of this slot: the CPU it is opened on and the CPUs whose array entry
    /// gets its fd (a CPU-scope counter: itself; a package counter: the CPUs allowed to read it).
    pub instances: Vec<(u32, Vec<u32>)>,
    /// Read enabled/running times at each tick (core PMU events, which can be multiplexed);
    /// otherwise the value alone is read, which is cheaper.
    pub may_multiplex: bool,
}

impl SlotPlan {
    /// A CPU-scope counter opened on every CPU of `cpus`, each read by its own CPU.
    pub fn per_cpu(spec: SlotSpec, encoded: &Encoded, cpus: &[u32]) -> SlotPlan {
        SlotPlan {
            spec,
            attr: counting_attr(encoded),
            instances: cpus.iter().map(|&c| (c, vec![c])).collect(),
            may_multiplex: may_multiplex(encoded),
        }
    }

    /// A package-scope counter: one instance per (CPU it is opened on, CPUs whose ticks are
    /// given it). Readers other than the opening CPU are probed at the first ticks and
    /// dropped if they cannot read it (see [`probe`]).
    pub fn package(spec: SlotSpec, encoded: &Encoded, instances: Vec<(u32, Vec<u32>)>) -> SlotPlan {
        SlotPlan {
            spec,
            attr: counting_attr(encoded),
            instances,
            may_multiplex: may_multiplex(encoded),
        }
    }
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
    /// Benchmark baseline: a per-CPU hash count per pid, as bpftrace's `@[pid] = count()`.
    BaselinePidCount,
    /// Benchmark cost probe: one piece of the tick's work alone (`probe_*` in the object).
    Probe(&'static str),
}

impl TickProgram {
    pub fn name(self) -> &'static str {
        match self {
            TickProgram::Imc => "imc_tick",
            TickProgram::BaselinePidCount => "baseline_pid_count",
            TickProgram::Probe(name) => name,
        }
    }
}

#[derive(Clone, Debug)]
pub struct SamplerConfig {
    /// Timer ticks per second per CPU (1..=10000).
    pub freq: u32,
    pub slots: Vec<SlotPlan>,
    /// CPUs to attach the tick to (the online CPUs).
    pub cpus: Vec<u32>,
    /// Also run at every context switch.
    pub precise: bool,
    /// Records per CPU ring (rounded up to a power of two); None: sized for `drain_period_ms`
    /// at `freq` with a wide margin.
    pub ring_bytes: Option<u32>,
    /// How often the caller drains; sizes the ring buffer.
    pub drain_period_ms: u32,
    /// Forward the program's aya-log lines to the `log` crate (debug only: costs time per run).
    pub bpf_log: bool,
    /// imc's tick, or the benchmark's baseline.
    pub tick_program: TickProgram,
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
    /// Failed reads while this CPU was being tried for a package counter it turned out not
    /// to be able to read (or is still being tried for): not read errors (see `probe`).
    pub probe_failures: [u64; MAX_SLOTS],
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

pub struct Sampler {
    tick_program: TickProgram,
    // Field order is drop order: the links and programs (inside `ebpf`) go first, then the
    // maps we took out of it, then the counter fds.
    ebpf: Ebpf,
    logger: Option<aya_log::EbpfLogger<&'static dyn log::Log>>,
    rings: Rings,
    stats: PerCpuArray<MapData, u64>,
    counters: Vec<OpenCounter>,
    slots: Vec<SlotSpec>,
    cpus: Vec<u32>,
    bpf_sys: Arc<dyn BpfSys>,
    probe: ReaderProbe,
    fallback: IdleFallback,
    /// The last failure to remove a probed entry, reported once.
    probe_error: Option<String>,
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

/// Records per CPU ring: enough for 8 drain periods at the tick rate (32 in precise mode, where
/// context switches add records), a power of two between 64 and 16384.
fn ring_len(cfg: &SamplerConfig) -> u32 {
    if let Some(n) = cfg.ring_bytes {
        return n.clamp(2, 1 << 20).next_power_of_two();
    }
    let per_period = u64::from(cfg.freq) * u64::from(cfg.drain_period_ms.max(1)) / 1000 + 1;
    let want = per_period * if cfg.precise { 32 } else { 8 };
    want.clamp(64, 16384).next_power_of_two() as u32
}

impl Sampler {
    /// Opens the counters, loads and attaches the program. Nothing stays loaded on error.
    pub fn start(cfg: &SamplerConfig) -> Result<Sampler, SamplerError> {
        Self::start_with(cfg, &RealPerf, Arc::new(RealBpf))
    }

    pub fn start_with(
        cfg: &SamplerConfig,
        perf_sys: &dyn PerfSys,
        bpf_sys: Arc<dyn BpfSys>,
    ) -> Result<Sampler, SamplerError> {
        if cfg.slots.len() > MAX_SLOTS {
            return Err(SamplerError::TooManySlots(cfg.slots.len()));
        }
        if cfg.cpus.is_empty() {
            return Err(SamplerError::NoCpus("/".into()));
        }
        if !privileged() {
            return Err(SamplerError::NotPrivileged);
        }
        let bytes = object::program_bytes()?;

        // Counters first: an event that does not open is the user's most likely mistake, and
        // it should be reported before the program is even loaded.
        let mut counters = Vec::new();
        for (slot, plan) in cfg.slots.iter().enumerate() {
            for (open_cpu, _) in &plan.instances {
                let fd = perf_sys
                    .open(&plan.attr, -1, *open_cpu as i32, None)
                    .map_err(|e| {
                        SamplerError::OpenCounter(perf::explain_open_error(
                            &format!("opening '{}' on CPU {open_cpu}", plan.spec.event),
                            &e,
                        ))
                    })?;
                counters.push(OpenCounter {
                    slot,
                    cpu: *open_cpu,
                    fd,
                });
            }
        }

        let max_cpu = cfg.cpus.iter().copied().max().unwrap_or(0);
        let possible = aya::util::nr_cpus()
            .map(|n| n as u32)
            .unwrap_or(max_cpu + 1)
            .max(max_cpu + 1);
        let nr_slots = cfg.slots.len() as u32;
        let mut loader = EbpfLoader::new();
        loader.override_global(NR_SLOTS_GLOBAL, &nr_slots, true);
        for name in SLOT_MAP_NAMES {
            loader.map_max_entries(name, possible);
        }
        // Core PMU events (type 0, 3, 4 and the "cpu" PMU) share counters and can be
        // multiplexed; uncore, msr and software counters cannot.
        let timed: u32 = cfg
            .slots
            .iter()
            .enumerate()
            .filter(|(_, p)| p.may_multiplex)
            .fold(0, |m, (i, _)| m | 1 << i);
        loader.override_global(TIMED_SLOTS_GLOBAL, &timed, true);
        let ring_len = ring_len(cfg);
        loader.override_global(RING_LEN_GLOBAL, &ring_len, true);
        loader.map_max_entries(TICKS_MAP_NAME, possible * ring_len);
        loader.map_max_entries(HEADS_MAP_NAME, possible);
        let mut ebpf = loader
            .load(&bytes)
            .map_err(|e| SamplerError::Load(error_chain(&e)))?;

        let logger = if cfg.bpf_log {
            // No log statements on the hot path yet; the logger is here so that debug lines
            // added to the program show up under -vv without further plumbing.
            aya_log::EbpfLogger::init(&mut ebpf).ok()
        } else {
            None
        };

        // Insert the counter fds into the slot arrays.
        for (slot, plan) in cfg.slots.iter().enumerate() {
            let name = SLOT_MAP_NAMES[slot];
            let map = ebpf.map(name).ok_or_else(|| SamplerError::Map {
                map: name.into(),
                message: "not in the eBPF object (object and imc built from different sources?)"
                    .into(),
            })?;
            let aya::maps::Map::PerfEventArray(data) = map else {
                return Err(SamplerError::Map {
                    map: name.into(),
                    message: "is not a PERF_EVENT_ARRAY".into(),
                });
            };
            for (open_cpu, readers) in &plan.instances {
                let c = counters
                    .iter()
                    .find(|c| c.slot == slot && c.cpu == *open_cpu)
                    .expect("every instance was opened above");
                for &reader in readers {
                    bpf_sys
                        .perf_array_set(data.fd().as_fd(), reader, c.fd.as_fd())
                        .map_err(|e| SamplerError::Map {
                            map: name.into(),
                            message: format!(
                                "storing the counter of CPU {open_cpu} at index {reader}: {e}"
                            ),
                        })?;
                }
            }
        }

        let map_bytes = |name: &str, bytes: usize| -> Result<MappedMap, SamplerError> {
            let Some(aya::maps::Map::Array(data)) = ebpf.map(name) else {
                return Err(SamplerError::Map {
                    map: name.into(),
                    message: "missing or not an array".into(),
                });
            };
            MappedMap::map(data.fd().as_fd(), bytes).map_err(|e| SamplerError::Map {
                map: name.into(),
                message: format!("mmap of {bytes} bytes: {e}"),
            })
        };
        let rings = Rings::new(
            map_bytes(
                TICKS_MAP_NAME,
                (possible * ring_len) as usize * TickRecord::SIZE,
            )?,
            map_bytes(
                HEADS_MAP_NAME,
                possible as usize * std::mem::size_of::<CpuHead>(),
            )?,
            ring_len,
            possible as usize,
        );
        let stats: PerCpuArray<MapData, u64> = ebpf
            .take_map(STATS_MAP_NAME)
            .ok_or_else(|| SamplerError::Map {
                map: STATS_MAP_NAME.into(),
                message: "missing".into(),
            })?
            .try_into()
            .map_err(|e: aya::maps::MapError| SamplerError::Map {
                map: STATS_MAP_NAME.into(),
                message: e.to_string(),
            })?;

        // The tick: a cpu-clock timer per CPU. A period in ns (not a frequency) gives exactly
        // `freq` ticks per busy second, with no adaptive period for the kernel to tune.
        let period_ns = 1_000_000_000u64 / u64::from(cfg.freq.max(1));
        {
            let name = cfg.tick_program.name();
            let prog: &mut PerfEvent = ebpf
                .program_mut(name)
                .ok_or_else(|| {
                    SamplerError::Load(format!("program {name} missing from the object"))
                })?
                .try_into()
                .map_err(|e: aya::programs::ProgramError| SamplerError::Load(error_chain(&e)))?;
            prog.load()
                .map_err(|e| SamplerError::Load(error_chain(&e)))?;
            for &cpu in &cfg.cpus {
                prog.attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Period(period_ns),
                    false,
                )
                .map_err(|e| SamplerError::Attach {
                    what: format!("the cpu-clock timer of CPU {cpu}"),
                    message: error_chain(&e),
                })?;
            }
        }
        if cfg.precise {
            let prog: &mut RawTracePoint = ebpf
                .program_mut("imc_switch")
                .ok_or_else(|| {
                    SamplerError::Load("program imc_switch missing from the object".into())
                })?
                .try_into()
                .map_err(|e: aya::programs::ProgramError| SamplerError::Load(error_chain(&e)))?;
            prog.load()
                .map_err(|e| SamplerError::Load(error_chain(&e)))?;
            prog.attach("sched_switch")
                .map_err(|e| SamplerError::Attach {
                    what: "sched/sched_switch".into(),
                    message: error_chain(&e),
                })?;
        }

        // A package counter no tick read lately is read from userspace; see `fallback`.
        let max_age = fallback::max_age_ns(cfg.freq, cfg.drain_period_ms);
        let package_instances: Vec<(usize, u32, Vec<u32>)> = cfg
            .slots
            .iter()
            .enumerate()
            .filter(|(_, p)| p.spec.scope == SlotScope::Package)
            .flat_map(|(s, p)| p.instances.iter().map(move |(c, r)| (s, *c, r.clone())))
            .collect();
        Ok(Sampler {
            tick_program: cfg.tick_program,
            ebpf,
            logger,
            rings,
            stats,
            counters,
            slots: cfg.slots.iter().map(|p| p.spec.clone()).collect(),
            cpus: cfg.cpus.clone(),
            bpf_sys,
            probe: ReaderProbe::new(&cfg.slots),
            fallback: IdleFallback::new(&package_instances, max_age),
            probe_error: None,
        })
    }

    pub fn slots(&self) -> &[SlotSpec] {
        &self.slots
    }

    pub fn cpus(&self) -> &[u32] {
        &self.cpus
    }

    /// Hands every record waiting in the ring buffer to `f`; returns how many. Also where the
    /// probe of package readers learns from the ticks and removes the entries of CPUs that
    /// cannot read their counter.
    pub fn drain(&mut self, mut f: impl FnMut(&TickRecord)) -> usize {
        if let Some(l) = self.logger.as_mut() {
            l.flush();
        }
        let (probe, fallback) = (&mut self.probe, &mut self.fallback);
        let n = self.rings.drain(&mut |r: &TickRecord| {
            probe.observe(r);
            fallback.observe(r);
            f(r)
        });
        if self.probe.has_work() {
            let maps: Vec<BorrowedFd<'_>> = SLOT_MAP_NAMES[..self.slots.len()]
                .iter()
                .filter_map(|name| match self.ebpf.map(name) {
                    Some(aya::maps::Map::PerfEventArray(data)) => Some(data.fd().as_fd()),
                    _ => None,
                })
                .collect();
            if maps.len() == self.slots.len()
                && let Err(e) = self.probe.apply(self.bpf_sys.as_ref(), &maps)
                && self.probe_error.is_none()
            {
                log::warn!("{e}");
                self.probe_error = Some(e.to_string());
            }
        }
        n
    }

    /// (slot, CPU the counter is opened on) of every package counter.
    pub fn package_instances(&self) -> Vec<(usize, u32)> {
        self.fallback.instances()
    }

    /// How each package slot is read at the ticks, as probed so far (None: not a probed slot).
    pub fn read_modes(&self) -> Vec<Option<ReadMode>> {
        (0..self.slots.len()).map(|s| self.probe.mode(s)).collect()
    }

    /// Reads from userspace every package counter no tick has read within two drain periods
    /// (every package counter when `all`), handing `f(slot, open_cpu, t_ns, value)` each: the
    /// fallback that keeps idle packages' traffic (DMA) and its timing. Failed reads are
    /// skipped (the counter's next reading covers the span). Returns how many were read.
    pub fn read_idle_packages(
        &mut self,
        all: bool,
        mut f: impl FnMut(usize, u32, u64, CounterValue),
    ) -> usize {
        let mut n = 0;
        for (i, slot, cpu) in self.fallback.due(monotonic_ns(), all) {
            let before = monotonic_ns();
            let Ok(v) = self.read_counter(slot, cpu) else {
                continue;
            };
            // The read crosses to the counter's CPU; its middle is the best time to give it.
            let t = before + (monotonic_ns() - before) / 2;
            self.fallback.mark_read(i, t);
            f(slot, cpu, t, v);
            n += 1;
        }
        n
    }

    /// Program statistics summed per CPU.
    pub fn stats(&self) -> Result<SamplerStats, SamplerError> {
        let mut per_cpu: Vec<CpuStats> = Vec::new();
        for index in 0..NR_STATS {
            let values = self.stats.get(&index, 0).map_err(|e| SamplerError::Map {
                map: STATS_MAP_NAME.into(),
                message: e.to_string(),
            })?;
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
                    i if i < STAT_READ_ERROR => {}
                    i if (STAT_READ_ERROR..STAT_SLOT_ABSENT).contains(&i) => {
                        s.read_errors[(i - STAT_READ_ERROR) as usize] = *v
                    }
                    i => s.absent[(i - STAT_SLOT_ABSENT) as usize] = *v,
                }
            }
        }
        // Failures of CPUs probed for a package counter they may not be able to read are the
        // probe's, not read errors.
        for s in &mut per_cpu {
            for slot in 0..self.slots.len() {
                if self.probe.is_probe(s.cpu, slot) {
                    s.probe_failures[slot] = std::mem::take(&mut s.read_errors[slot]);
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

    /// Reads a slot's counter from userspace (`read(2)` on the same fd the program reads): the
    /// fallback for package counters whose CPUs are idle, and a cross-check in tests.
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
        let name = self.tick_program.name();
        let prog = self
            .ebpf
            .program(name)
            .ok_or_else(|| SamplerError::Load(format!("program {name} missing")))?;
        let info = prog
            .info()
            .map_err(|e| SamplerError::Load(error_chain(&e)))?;
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

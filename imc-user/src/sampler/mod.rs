//! The eBPF tick sampler: opens the counters of each slot and each package, loads the program,
//! attaches it to the kernel's own tick and to sched_switch (or, with `--freq`, to a cpu-clock
//! timer on every CPU), and drains its records.
//!
//! Lifetime is ownership: dropping a [`Sampler`] detaches every link and closes every program,
//! map and counter fd, so nothing stays loaded after `imc` exits, however it exits.
pub mod aggregate_twin;
pub mod fallback;
pub mod from_plan;
pub mod loopback;
pub mod object;
mod rings;
pub mod stacks;

mod attach;
mod config;
mod counters;
mod error;
mod load;
mod maps;
mod stats;

use attach::*;
pub use config::*;
use counters::*;
pub use error::*;
use load::*;
use maps::*;
pub use stats::*;

use crate::model::SlotSpec;
use crate::sys::bpf::{BpfSys, RealBpf};
use crate::sys::perf::{self, CounterValue, PerfSys, RealPerf};
use aya::Ebpf;
use aya::maps::{MapData, PerCpuArray, RingBuf};
use fallback::IdleFallback;
use imc_common::{
    MAX_PKG_COUNTERS, MAX_SLOTS, NR_STATS, Record, STAT_PKG_READS, STAT_READ_ERROR,
    STAT_SLOT_ABSENT, STAT_STACK_DROPPED, STAT_UNSEEN_SWITCH, STATS_MAP_NAME, WAKE_MAP_NAME,
};
use rings::Rings;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

/// How far ahead of now the run's last interval end is set (see [`Sampler::end_open_slices`]).
const END_AHEAD_NS: u64 = 200_000;

/// One package counter's own reading (`Sampler::read_channels`).
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelReading {
    pub package: u32,
    pub slot: usize,
    pub channel: String,
    /// Cumulative count, scaled for multiplexing.
    pub value: f64,
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
    scratch: Vec<Record>,
    counters: Vec<OpenCounter>,
    package_counters: Vec<OpenPackageCounter>,
    /// Package of each reader group.
    group_package: Vec<u32>,
    slots: Vec<SlotSpec>,
    cpus: Vec<u32>,
    /// The interval clock's period (0: none written), kept so the run's end can be made one.
    interval_period_ns: u64,
    fallback: IdleFallback,
    attached: TickAttached,
    /// The program that runs at the tick (for its run-time statistics).
    tick_prog_name: &'static str,
    /// The stack maps, where stacks are taken.
    stacks: Option<stacks::StackMaps>,
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
        let entry = Record::entry_size(cfg.slots.len());
        let rings = map_rings(&ebpf, possible, ring_len, entry)?;
        let stats: PerCpuArray<MapData, u64> = take_map(&mut ebpf, STATS_MAP_NAME)?;
        let wake: RingBuf<MapData> = take_map(&mut ebpf, WAKE_MAP_NAME)?;
        let (attached, tick_prog_name) = attach(&mut ebpf, cfg)?;
        let stacks = match &cfg.stacks {
            Some(sc) => Some(stacks::StackMaps::start(&mut ebpf, cfg, sc, perf_sys)?),
            None => None,
        };

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
            interval_period_ns: 0,
            fallback: idle_fallback(cfg),
            attached,
            tick_prog_name,
            stacks,
        })
    }

    /// The stack maps, where the plan takes stacks.
    pub fn stacks(&mut self) -> Option<&mut stacks::StackMaps> {
        self.stacks.as_mut()
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
    pub fn drain(&mut self, f: impl FnMut(&Record)) -> usize {
        let mut batch = std::mem::take(&mut self.scratch);
        batch.clear();
        let n = self.drain_append(&mut batch);
        batch.iter().for_each(f);
        self.scratch = batch;
        n
    }

    /// Like [`drain`](Self::drain), appending the records to `out` (each CPU's in time
    /// order, CPU after CPU) instead of handing them one by one: one copy out of the rings.
    pub fn drain_append(&mut self, out: &mut Vec<Record>) -> usize {
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
    /// Writes the interval clock into the program (imc_common::INTERVALS_MAP_NAME): from then
    /// on its aggregating path ends a flush period at each interval end's last switch, and makes
    /// the one slice across the end a period of its own.
    pub fn set_interval_clock(
        &mut self,
        origin_ns: u64,
        period_ns: u64,
    ) -> Result<(), SamplerError> {
        write_interval_clock(&mut self.ebpf, origin_ns, period_ns)?;
        self.interval_period_ns = period_ns;
        Ok(())
    }

    /// Ends every CPU's open slice now, at the run's end: the clock gets an interval end at
    /// this instant (so the aggregating path flushes what it holds at each CPU's next run) and
    /// a thread of imc's visits each CPU, whose switch is that run. Without it, what a CPU
    /// accumulated since its last flush (up to a tick; an idle CPU's since it went idle) would
    /// reach no interval. Per-switch records end each running slice at the same visit. Returns
    /// the CPUs that could not be visited.
    pub fn end_open_slices(&mut self) -> Result<usize, SamplerError> {
        let period = self.interval_period_ns;
        if period > 0 {
            // The end is set a little ahead and the visits wait for it: a CPU's run between
            // reading the clock here and the map's update would otherwise start its slice past
            // an end already behind it, and the visit's slice would cross no end (no flush).
            let end = monotonic_ns() + END_AHEAD_NS;
            write_interval_clock(&mut self.ebpf, end.saturating_sub(period), period)?;
            while monotonic_ns() <= end {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
        crate::sys::thread::visit_cpus(&self.cpus).map_err(SamplerError::VisitCpus)
    }

    pub fn lost_records(&self) -> u64 {
        self.rings.lost.iter().sum()
    }

    /// Takes stacks as a kernel without the batch and take commands makes it (one entry a
    /// call; stacks read, then removed in one sweep): tests run that path on any kernel.
    #[doc(hidden)]
    pub fn stacks_one_at_a_time(&mut self) {
        if let Some(s) = self.stacks.as_mut() {
            s.one_at_a_time();
        }
    }

    /// How many stacks the map of the generation that ended at the last drain still holds
    /// (None without stacks).
    #[doc(hidden)]
    pub fn stacks_left_in_ended_map(&self) -> Option<usize> {
        self.stacks
            .as_ref()
            .map(stacks::StackMaps::left_in_ended_map)
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
                    STAT_UNSEEN_SWITCH => s.unseen_switches = *v,
                    STAT_STACK_DROPPED => s.stacks_dropped = *v,
                    i if (STAT_SLOT_ABSENT..STAT_UNSEEN_SWITCH).contains(&i) => {
                        s.absent[(i - STAT_SLOT_ABSENT) as usize] = *v
                    }
                    _ => {}
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

    /// The verifier's and the JIT's figures of every loaded program, by name.
    pub fn program_costs(&self) -> Result<Vec<ProgramCost>, SamplerError> {
        let mut costs = Vec::new();
        for (name, prog) in self.ebpf.programs() {
            // A program of the object this configuration does not load has no info.
            let Ok(info) = prog.info() else {
                continue;
            };
            costs.push(ProgramCost {
                name: name.to_string(),
                verified_insns: info.verified_instruction_count(),
                translated_bytes: info.size_translated(),
                jitted_bytes: Some(info.size_jitted()).filter(|&n| n > 0),
            });
        }
        costs.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(costs)
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
fn drain_rings(rings: &mut Rings, fallback: &mut IdleFallback, out: &mut Vec<Record>) -> usize {
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
    fn drain_append(&mut self, out: &mut Vec<Record>) -> usize;
    /// Records overwritten before they were read, all CPUs together.
    fn lost_records(&self) -> u64;
    /// Userspace reads of the packages no tick read lately (see [`Sampler::read_idle_packages`]).
    fn read_idle_packages(&mut self, all: bool, f: impl FnMut(u32, usize, u64, u64)) -> usize;
    /// Every package counter read on its own (see [`Sampler::read_channels`]).
    fn read_channels(&self) -> Vec<ChannelReading>;
    /// The CPUs whose rings asked for a drain since the last call.
    fn take_wakes(&mut self) -> Vec<u32>;
    /// Hands the interval clock (origin and period, CLOCK_MONOTONIC ns) to whatever cuts
    /// records into periods, so none runs across an interval end; nothing to do by default.
    fn set_interval_clock(&mut self, _origin_ns: u64, _period_ns: u64) -> Result<(), SamplerError> {
        Ok(())
    }
    /// Ends every CPU's open slice at the run's end (see [`Sampler::end_open_slices`]), so
    /// the last interval gets it; nothing to do by default. Returns the CPUs left open.
    fn end_open_slices(&mut self) -> Result<usize, SamplerError> {
        Ok(0)
    }
    /// Takes out every (process, cgroup, stack) entry charged since the last call, with its stacks'
    /// addresses (see [`stacks::StackMaps::drain`]); none where no stacks are taken.
    fn drain_stacks(&mut self, _out: &mut Vec<stacks::StackEntry>) -> usize {
        0
    }
    /// Charged slices the kernel had no stack entry for, so far (all CPUs).
    fn stacks_dropped(&self) -> u64 {
        0
    }
}

impl RecordSource for Sampler {
    fn slots(&self) -> &[SlotSpec] {
        Sampler::slots(self)
    }
    fn drain_append(&mut self, out: &mut Vec<Record>) -> usize {
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
    fn end_open_slices(&mut self) -> Result<usize, SamplerError> {
        Sampler::end_open_slices(self)
    }
    fn set_interval_clock(&mut self, origin_ns: u64, period_ns: u64) -> Result<(), SamplerError> {
        Sampler::set_interval_clock(self, origin_ns, period_ns)
    }
    fn drain_stacks(&mut self, out: &mut Vec<stacks::StackEntry>) -> usize {
        self.stacks.as_mut().map_or(0, |s| s.drain(out))
    }
    fn stacks_dropped(&self) -> u64 {
        // Asked at every drain: the one statistic, not all of them (a syscall each).
        self.stats
            .get(&STAT_STACK_DROPPED, 0)
            .map_or(0, |per_cpu| per_cpu.iter().sum())
    }
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

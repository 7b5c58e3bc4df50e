//! Userspace counting for `imc stat`: every backend (perf, MCHBAR) turns into the same thing for
//! the interval loop — a fixed list of counters, each with a scope, read all at once into a
//! preallocated slice of cumulative readings.
//!
//! - [`from_plan`]: which counters to open, from a discovery `Source` or from `-e` encodings.
//! - [`perf`]: counters through `perf_event_open` (uncore, client imc, POWER nest, KNL, msr,
//!   software), grouped per PMU instance and CPU where the PMU allows.
//! - [`mchbar`]: Intel client DRAM counters read from a read-only /dev/mem mapping, with a
//!   poller that folds 32-bit wraps into 64-bit totals.
//! - [`counter`]: deltas modulo the counter width, multiplexing scaling.
//! - [`stat_loop`]: the interval loops (absolute deadlines, or kernel-timed) and the per-interval
//!   aggregate.
//! - [`timed`]: kernel-timed boundaries: which reading closes which interval, when to wake, and
//!   which groups of idle CPUs to read from userspace.
//! - [`local`]: the threads that read those groups on their own CPUs.
//! - [`ibs`]: `top --ibs`: AMD IBS op samples, which loads DRAM served, per process.
//! - [`latency`]: `stat --latency` on KNL: the offcore-response pair and average latency.
//! - [`clock`]: CLOCK_MONOTONIC and absolute sleeps, behind a trait tests replace.
use crate::model::{Direction, Scope};
use std::time::Duration;

pub mod clock;
pub mod counter;
pub mod from_plan;
pub mod ibs;
pub mod latency;
pub mod local;
pub mod mchbar;
pub mod perf;
pub mod stat_loop;
pub mod timed;

/// What memory a counter measures, so KNL's DDR and MCDRAM, and a package's DRAM and CXL
/// memory, can be shown apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Memory {
    Dram,
    Mcdram,
    /// A CXL memory expander: the second tier.
    Cxl,
}

impl Memory {
    pub fn as_str(self) -> &'static str {
        match self {
            Memory::Dram => "DDR",
            Memory::Mcdram => "MCDRAM",
            Memory::Cxl => "CXL",
        }
    }
}

/// One counter a backend reads: where it is, what it means, how to turn counts into bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct CounterSpec {
    /// The key of `values` in JSON: the event string the user gave, or the default event's name.
    pub event: String,
    /// The PMU instance (`uncore_imc_3`), or `mchbar` for the /dev/mem backend.
    pub pmu: String,
    /// The CPU the counter is opened on (None for MCHBAR).
    pub cpu: Option<u32>,
    pub scope: Scope,
    /// The package this counter's traffic belongs to (None for CPU counters without topology).
    pub package: Option<u32>,
    /// Memory traffic in this direction, when the event measures bandwidth.
    pub direction: Option<Direction>,
    pub memory: Memory,
    /// Bytes per count for bandwidth events.
    pub bytes_per_count: Option<f64>,
    /// Multiplier for the count reported in `values` (a sysfs `.scale`, as perf applies it).
    pub scale: f64,
    /// Width of the hardware counter: deltas are taken modulo 2^bits.
    pub counter_bits: u8,
    /// perf `config` (for messages and tests).
    pub config: u64,
    /// The sub-channel of its channel this counter counts (Granite Rapids' schedulers); its
    /// bytes also roll up to the channel.
    pub sub_channel: Option<u32>,
}

impl CounterSpec {
    /// How the counter is named in messages: `uncore_imc_0/read on CPU 20 (package 1)`.
    pub fn describe(&self) -> String {
        let mut s = format!("{} {}", self.pmu, self.event);
        if let Some(cpu) = self.cpu {
            s.push_str(&format!(" on CPU {cpu}"));
        }
        if let Some(p) = self.package {
            s.push_str(&format!(" (package {p})"));
        }
        s
    }
}

/// A cumulative reading of one counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawReading {
    /// Cumulative count (the backend may unwrap narrow hardware counters into 64 bits).
    pub value: u64,
    /// perf time_enabled / time_running (both 0 when the backend has no such notion).
    pub enabled: u64,
    pub running: u64,
    /// False when the counter could not be read this time (see `Backend::take_failures`).
    pub ok: bool,
}

/// A counter that failed to open or stopped counting; the others keep going.
#[derive(Clone, Debug, PartialEq)]
pub struct CounterFailure {
    /// Index into `Backend::counters()` (None: the failure concerns a counter never opened).
    pub counter: Option<usize>,
    pub message: String,
}

/// Errors a backend returns when it cannot work at all.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error(transparent)]
    DevMem(#[from] crate::sys::devmem::DevMemError),
    /// No counter of the plan could be opened; the message explains the first failure.
    #[error("{message}")]
    NothingOpened { message: String, errno: Option<i32> },
    #[error("{0}")]
    Plan(String),
}

/// What the interval loop sees of a backend.
pub trait Backend {
    /// The `source` of the output (`intel-uncore-imc`, `intel-client-mchbar`, `perf`, ...).
    fn source(&self) -> &str;
    /// The counters, in the order `read` fills its slice.
    fn counters(&self) -> &[CounterSpec];
    /// Reads every counter (`out.len() == counters().len()`). Must not allocate in the steady
    /// state: it runs up to 1000 times a second.
    fn read(&mut self, out: &mut [RawReading]);
    /// When the hardware counters are narrow enough to wrap between two intervals, how often
    /// `poll` must run whatever the interval is.
    fn poll_period(&self) -> Option<Duration> {
        None
    }
    /// Folds the hardware counters into the backend's wide totals (see `poll_period`).
    fn poll(&mut self) {}
    /// Kernel-timed backends (perf sampling with PERF_SAMPLE_READ): the interval at which the
    /// kernel itself reads the counters. The loop then wakes when `advance_timed` says, instead
    /// of reading at every boundary.
    fn timed_period(&self) -> Option<u64> {
        None
    }
    /// Kernel-timed backends: collects what the kernel sampled, reads from userspace what it
    /// missed at the boundary just passed, calls `f(k, t_ns, readings)` for every boundary
    /// complete since the last call (k counts periods; a boundary some counter missed is left
    /// out, so the interval around it is longer), and returns the CLOCK_MONOTONIC time at which
    /// to call again. `final_k` is a boundary that must close on time (the end of `--duration`).
    fn advance_timed(
        &mut self,
        _clock: &dyn clock::Clock,
        _final_k: Option<u64>,
        _f: &mut dyn FnMut(u64, u64, &[RawReading]),
    ) -> u64 {
        u64::MAX
    }
    /// What the run cost, for `-v` (kernel-timed backends: wake-ups and userspace reads).
    fn run_stats(&self) -> Option<String> {
        None
    }
    /// Failures since the last call: counters that failed to open or stopped counting.
    fn take_failures(&mut self) -> Vec<CounterFailure>;
}

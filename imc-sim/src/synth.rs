//! A synthetic scenario: its tasks (bandwidths, CPU shares, traits), its machine (packages,
//! tick rate, readers), its latency model and the slot layout it is read through; the stream
//! it generates is the simulator's (`super::SynthStream`).

use imc::model::{Direction, Package, SlotRole, SlotScope, SlotSpec, StallPart, Topology};

/// A task with a constant memory bandwidth while it runs.
#[derive(Clone, Debug)]
pub struct SynthTask {
    pub pid: u32,
    pub tgid: u32,
    pub comm: String,
    pub cgroup: u64,
    pub read_bps: f64,
    pub write_bps: f64,
}

/// Which CPUs can read the package counters at their ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readers {
    /// Every CPU of the package (Intel uncore since Linux 6.7).
    All,
    /// Only the package's first CPU (the PMU's cpumask CPU: older kernels, AMD).
    First,
    /// None: package counters only come from userspace reads.
    None,
}

/// How a task's traffic reaches the counters, beyond its bandwidth (with [`Scenario::layout`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TaskTraits {
    /// Index (into `Scenario::packages`) of the package whose memory serves the task; None:
    /// the package of the CPU it runs on.
    pub memory_package: Option<usize>,
    /// Weight counts per byte read / written (1/64: one per cache line; 0: invisible).
    pub read_weight_per_byte: f64,
    pub write_weight_per_byte: f64,
    /// The part of its read lines whose whole latency stalls the core (1: a pointer chaser,
    /// each load waiting on the last; near 0: a streamer whose prefetches hide it). Its
    /// stalled share of cycles is `stall_per_miss × lines/s × latency` (at most 1), so it grows
    /// with the occupancy of the queues its memory is served from.
    pub stall_per_miss: f64,
}

impl Default for TaskTraits {
    fn default() -> TaskTraits {
        TaskTraits {
            memory_package: None,
            read_weight_per_byte: 1.0 / 64.0,
            write_weight_per_byte: 1.0 / 64.0,
            stall_per_miss: 0.0,
        }
    }
}

/// The memory's loaded latency: `idle_ns / (1 − u)` at utilisation `u` (traffic ÷ peak, at
/// most 0.9), the queueing delay of a single server; with no peak, the idle latency.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencyModel {
    pub idle_ns: f64,
    /// The DRAM clock (its queue counters count per clock).
    pub dram_hz: f64,
    /// The core clock (its stall and cycle counters).
    pub cpu_hz: f64,
}

impl Default for LatencyModel {
    fn default() -> LatencyModel {
        LatencyModel {
            idle_ns: 80.0,
            dram_hz: 1.6e9,
            cpu_hz: 2.0e9,
        }
    }
}

impl LatencyModel {
    /// The highest utilisation the model queues at.
    const MAX_UTILISATION: f64 = 0.9;

    pub fn latency_ns(&self, bytes_per_s: f64, peak: Option<f64>) -> f64 {
        let u = peak
            .filter(|p| *p > 0.0)
            .map_or(0.0, |p| (bytes_per_s / p).clamp(0.0, Self::MAX_UTILISATION));
        self.idle_ns / (1.0 - u)
    }

    /// The highest latency [`Self::latency_ns`] gives (at the highest utilisation).
    pub fn max_latency_ns(&self) -> f64 {
        self.idle_ns / (1.0 - Self::MAX_UTILISATION)
    }
}

/// What one slot of a plan-driven record holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SynthSlot {
    /// A package slot: the controller's counts of that direction (DMA counts as reads).
    Traffic {
        direction: Direction,
        bytes_per_count: f64,
    },
    /// A CPU slot: the weight counts of the running task's traffic of that direction (None or
    /// Total: both) to the CPU's own package's memory, or with `remote` to other packages'.
    Weight {
        direction: Option<Direction>,
        remote: bool,
        /// A local weight that also counts traffic to other packages' memory: with no remote
        /// weight of its direction beside it, the event cannot tell them apart (LLC misses,
        /// L2 writebacks count both).
        sees_remote: bool,
        /// The part of that traffic this event counts: several events of one direction and
        /// locality add up to the weight (Zen's DRAM fills and L2-prefetcher misses count
        /// disjoint lines), so each of n counts 1/n of it; and a count is a line of the
        /// event's own size (64 bytes / its bytes per count of what a 64-byte-line weight
        /// would count).
        share: f64,
    },
    /// A CPU slot of the stall pair: the running task's stalled cycles, or its cycles.
    Stall(StallPart),
    /// A CPU slot attribution does not weigh by: reads zero.
    Other,
}

/// The records of a real plan: its slots and who reads its package counters.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub slots: Vec<SynthSlot>,
    /// Package id of each entry of `Scenario::packages`.
    pub package_ids: Vec<u32>,
    /// Per package (index into `Scenario::packages`): the CPUs whose ticks read its package
    /// slots, at most once per `min_gap_ns` between them (the program's rule); empty: only
    /// userspace reads them.
    pub readers: Vec<Vec<u32>>,
    pub min_gap_ns: u64,
    /// Userspace drains every `drain_ns` and then reads every package counter no record read
    /// within `max_age_ns` (and always those no tick reads).
    pub drain_ns: u64,
    pub max_age_ns: u64,
}

#[derive(Clone, Debug)]
pub struct Scenario {
    /// Packages and their CPUs (CPU numbers index `schedule`).
    pub packages: Vec<Vec<u32>>,
    pub freq_hz: u32,
    pub duration_ns: u64,
    pub tasks: Vec<SynthTask>,
    /// Per CPU: (from t_ns, task index or None = idle), sorted by time; idle before the first.
    pub schedule: Vec<Vec<(u64, Option<usize>)>>,
    /// DMA bytes/s per package (reads), traffic no CPU makes.
    pub dma_bps: Vec<f64>,
    /// Emit a KIND_SWITCH record at every schedule change.
    pub precise: bool,
    /// Layout mode with `precise`: the switch records are to be folded into per-task aggregates
    /// as the kernel does by default ([`super::replay::Aggregator`]), so, like the aggregating
    /// program, a switch reads no package counter unless it ends a slice longer than two tick
    /// periods (a flush of its own); the ticks read them.
    pub aggregate: bool,
    /// Include an LLC-miss Weight slot (one miss per 64 bytes of the running task's traffic).
    pub weights: bool,
    /// With `weights`: split it by direction, a read weight (one per 64 bytes read) in slot 2
    /// and a write weight (one per 64 bytes written) in slot 3, as LLC misses and writebacks.
    pub directed_weights: bool,
    /// Idle CPUs do not tick (NOHZ), as on real systems.
    pub nohz: bool,
    pub readers: Readers,
    /// Userspace reads of every package counter this often (the idle-package fallback).
    pub fallback_every_ns: Option<u64>,
    /// Package counters start here (set near 2^48 to exercise the wrap).
    pub counter_start: u64,
    /// The weight counter is multiplexed: it runs this fraction of the time (1.0: always).
    pub weight_running: f64,
    /// Every n-th record of CPU `fail_cpu` has every slot failed.
    pub fail_every: Option<(u32, u64)>,
    /// Yield a [`SynthItem::Mark`] at every multiple of this (after every record of that
    /// instant): where a driver closes intervals, with the truth up to date.
    pub mark_every_ns: Option<u64>,
    /// Per task (index of `tasks`; missing: the default).
    pub traits: Vec<TaskTraits>,
    /// The slots of a real plan instead of [`Scenario::specs`]; `readers`, `fallback_every_ns`
    /// and `weights` are then ignored.
    pub layout: Option<Layout>,
    /// Per package: its peak bandwidth (bytes/s), where its latency grows with utilisation;
    /// missing or 0: the idle latency throughout.
    pub peak_bps: Vec<f64>,
    pub latency: LatencyModel,
}

impl Scenario {
    /// `ncpus` CPUs in one package, each running its own streaming task for the whole run.
    pub fn busy(ncpus: u32, freq_hz: u32, duration_ns: u64) -> Scenario {
        let tasks = (0..ncpus)
            .map(|i| SynthTask {
                pid: 1000 + i,
                tgid: 1000 + i / 4,
                comm: format!("stream{}", i % 7),
                cgroup: 1 + u64::from(i % 3),
                read_bps: 2.0e8 * f64::from(1 + i % 5),
                write_bps: 1.0e8 * f64::from(1 + i % 3),
            })
            .collect();
        Scenario {
            packages: vec![(0..ncpus).collect()],
            freq_hz,
            duration_ns,
            tasks,
            schedule: (0..ncpus as usize).map(|i| vec![(0, Some(i))]).collect(),
            dma_bps: vec![0.0],
            precise: false,
            aggregate: false,
            weights: true,
            directed_weights: false,
            nohz: true,
            readers: Readers::All,
            fallback_every_ns: None,
            counter_start: 0,
            weight_running: 1.0,
            fail_every: None,
            mark_every_ns: None,
            traits: Vec::new(),
            layout: None,
            peak_bps: Vec::new(),
            latency: LatencyModel::default(),
        }
    }

    /// The traits of task `i`.
    pub fn traits_of(&self, i: usize) -> TaskTraits {
        self.traits.get(i).copied().unwrap_or_default()
    }

    /// The package (index into `packages`) whose memory serves task `i` while on `cpu`.
    pub fn memory_of(&self, i: usize, cpu: u32) -> Option<usize> {
        self.traits_of(i)
            .memory_package
            .or_else(|| self.packages.iter().position(|cpus| cpus.contains(&cpu)))
    }

    pub fn topology(&self) -> Topology {
        Topology::of_packages(
            self.packages
                .iter()
                .enumerate()
                .map(|(i, c)| Package {
                    id: i as u32,
                    cpus: c.clone(),
                })
                .collect(),
        )
    }

    /// Slots: 0 package read (64 B/count, 48 bits), 1 package write, 2 LLC misses (weight; the
    /// read weight with `directed_weights`), 3 the write weight with `directed_weights`.
    pub fn specs(&self) -> Vec<SlotSpec> {
        let mut v = vec![
            SlotSpec {
                event: "uncore_imc/cas_count_read/".into(),
                scope: SlotScope::Package,
                role: SlotRole::Traffic(Direction::Read),
                bytes_per_count: Some(64.0),
                counter_bits: 48,
            },
            SlotSpec {
                event: "uncore_imc/cas_count_write/".into(),
                scope: SlotScope::Package,
                role: SlotRole::Traffic(Direction::Write),
                bytes_per_count: Some(64.0),
                counter_bits: 48,
            },
        ];
        if self.weights && self.directed_weights {
            v.push(SlotSpec {
                event: "LLC-load-misses".into(),
                scope: SlotScope::Cpu,
                role: SlotRole::Weight(Some(Direction::Read)),
                bytes_per_count: None,
                counter_bits: 64,
            });
            v.push(SlotSpec {
                event: "LLC-writebacks".into(),
                scope: SlotScope::Cpu,
                role: SlotRole::Weight(Some(Direction::Write)),
                bytes_per_count: None,
                counter_bits: 64,
            });
        } else if self.weights {
            v.push(SlotSpec {
                event: "LLC-load-misses".into(),
                scope: SlotScope::Cpu,
                role: SlotRole::Weight(None),
                bytes_per_count: None,
                counter_bits: 64,
            });
        }
        v
    }
}

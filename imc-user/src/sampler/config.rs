//! What the sampler is asked to do: the slots, the package counters and their readers, the
//! tick, and how their counters are opened.
use crate::model::{Encoded, SlotSpec};
use crate::sys::perf::{self, PerfEventAttr};
use imc_common::{STACK_KERNEL, STACK_SAMPLED, STACK_USER, TICK_PROGRAM};

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
    /// The call stacks charged slices (or sampled overflows) are added to; None: none taken.
    pub stacks: Option<StackConfig>,
}

impl SamplerConfig {
    /// Timer ticks per second per busy CPU: `freq`, or the kernel's HZ (250 where unknown).
    pub fn tick_hz(&self, kernel_hz: Option<u32>) -> u32 {
        match self.tick {
            TickSource::CpuClock { freq, .. } => freq.max(1),
            TickSource::Kernel => kernel_hz.unwrap_or(250).max(1),
        }
    }

    pub(super) fn switches(&self) -> bool {
        match self.tick {
            TickSource::Kernel => true,
            TickSource::CpuClock { switches, .. } => switches,
        }
    }
}

/// What the sampler is asked to take of stacks.
#[derive(Clone, Debug, PartialEq)]
pub struct StackConfig {
    pub user: bool,
    pub kernel: bool,
    /// Bit `s`: slot `s`'s deltas are charged to stacks.
    pub slots_mask: u32,
    pub map_entries: u32,
    pub stack_entries: u32,
    /// Stacks each spare map holds (those a main map refused for a bucket another stack held).
    pub spare_entries: u32,
    /// Entries of a generation after which the program wakes userspace to drain (a power of
    /// two; 0: never).
    pub wake_after: u32,
    /// `--stack-period`: the events between two samples and the slot they count in.
    pub overflow: Option<(u64, usize)>,
}

impl StackConfig {
    /// The program's STACK_MODE.
    pub fn mode(&self) -> u32 {
        let mut m = 0;
        if self.user {
            m |= STACK_USER;
        }
        if self.kernel {
            m |= STACK_KERNEL;
        }
        if self.overflow.is_some() {
            m |= STACK_SAMPLED;
        }
        m
    }
}

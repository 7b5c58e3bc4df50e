//! Attribution: counter readings of the sampler → bytes per task, per interval.
//!
//! Input is the stream of [`Record`]s (one per program run on one CPU, cumulative counter values)
//! and userspace reads of package counters. Rules:
//! - CPU-scope slots: the delta between two consecutive records of one CPU belongs to the task
//!   of the later record (a `KIND_SWITCH` record describes the task switched out, so in precise
//!   mode that is exact). Deltas are taken modulo 2^counter_bits and scaled by
//!   Δenabled/Δrunning. A failed read breaks that slot's chain (the delta across it is lost,
//!   never guessed); the first record of a CPU only sets the baseline.
//! - Package-scope slots: every reading (from whichever CPU, or from userspace) is one point of
//!   the package counter; deltas between consecutive points are spread over the package's CPUs
//!   by Weight deltas, else by on-CPU time, and from CPUs to tasks (see [`spread`]). What falls
//!   on the idle task or on spans nobody ran in is unattributed.
//! - Which Weight counters weigh a package counter: those of its direction when there are any
//!   (`Weight(Some(Read))` for read traffic, `Weight(Some(Write))` for write traffic), else the
//!   undirected ones, else all; total traffic is weighed by undirected weights, else by all. So
//!   with a read and a write weight, a task's read/write split is measured, not the package's.
//! - A CPU silent for longer than two tick periods (NOHZ idle) is not assumed busy: only the
//!   last two periods before its next record belong to that record's task.
//! - Interval ends: where the caller says where the interval being filled ends
//!   ([`Attributor::split_at`]), a CPU-scope delta whose span crosses that end is divided by
//!   time, the part after it kept for the next interval (the counts are assumed even over the
//!   span: a task's own slice, or an aggregate's flush period); a package span across the
//!   point up to which it is spread is divided the same way, its reading interpolated there.
//!   So an interval holds what happened in it, not what was reported in it, and attributed +
//!   unattributed still equals the source's total every interval. The last interval holds
//!   everything.
//! - Weights are counts of lines: where every weight of a package slot's class counts bytes of
//!   its direction, their bytes (bytes per count ÷ the event's measured fidelity) are set against
//!   the controller's over the spans being spread. When they account for less, each task is
//!   charged its weights' bytes and the rest is unattributed as device/unseen traffic (no core
//!   saw it), as is a span in which no CPU of the package ran; when they account for more, the
//!   delta is divided in proportion, as without bytes.
//! - A weight of one direction with no remote counterpart beside remote weights of the other
//!   (Skylake-SP's L2 writebacks) counts traffic to every package: each segment's rate is
//!   split by the locality the task's other-direction weights show (its last, else local).
//! - With three or more packages a task's remote weight is routed among the others by what
//!   their local weights leave unexplained (see `routes`).
//!
//! Per-record work is O(1) amortised and allocation-free once buffers and the task table have
//! grown; the package spread runs when an interval is closed.
mod classes;
mod cpu;
mod interval;
pub mod names;
mod package;
mod results;
mod routes;
pub mod spread;
pub mod stack_window;
pub mod stacks;
mod state;
pub mod summary;
pub mod tasks;
#[cfg(test)]
mod tests;
pub mod timeline;
pub mod victims;

pub use package::scaled_delta;
pub use results::{bytes_of, tier_bytes, traffic_counts};
pub use state::Attributor;
pub use summary::{Summary, compare, find_bursts, group_rows, percentile, traffic_amount};
pub use tasks::TaskKey;

use crate::model::{SlotRole, SlotScope, SlotSpec, Topology, Weighting};
use classes::{accounting, weight_byte_scales, weight_classes};
use imc_common::MAX_SLOTS;
use package::{package_states, width_mask};
use spread::Scratch;
use std::collections::BTreeMap;
use tasks::TaskTable;

impl Attributor {
    /// `specs`: the sampler's slots (slot index = position); `source`: what was measured
    /// (`"intel-uncore-imc"`, `"proxy:page-faults"`), copied to every result.
    pub fn new(specs: &[SlotSpec], topology: &Topology, source: impl Into<String>) -> Attributor {
        let specs: Vec<SlotSpec> = specs.iter().take(MAX_SLOTS).cloned().collect();
        let (masks, cpu_mask, weight_mask, pkg_mask) = slot_masks(&specs);
        let (classes, slot_class, blind) = weight_classes(&specs);
        let wscale = weight_byte_scales(&specs);
        let accounts = accounting(&specs, &classes, &slot_class);
        let numa = classes.iter().any(|c| c.remote != 0);
        let (packages, cpu_pkg_init) = package_states(topology, specs.len(), pkg_mask);
        Attributor {
            weighting: Weighting::from_slots(&specs),
            specs,
            source: source.into(),
            masks,
            cpu_mask,
            weight_mask,
            pkg_mask,
            classes,
            numa,
            slot_class,
            blind,
            wscale,
            accounts,
            device_acc: [0.0; MAX_SLOTS],
            packages,
            cpus: Vec::new(),
            all_cpus: topology
                .packages
                .iter()
                .flat_map(|p| p.cpus.iter().copied())
                .collect(),
            cpu_pkg_init,
            tasks: TaskTable::default(),
            idle_acc: [0.0; MAX_SLOTS],
            tick_only: false,
            max_gap_ns: 2_000_000,
            t_start: None,
            lost: 0,
            time_fallbacks: 0,
            records: 0,
            switches: 0,
            events: Vec::new(),
            scratch: Scratch::default(),
            boundary: None,
            closed_any: false,
            after: Vec::new(),
            placed: Vec::new(),
        }
    }

    /// The sampler's tick frequency: a CPU silent for more than two periods was idle (NOHZ),
    /// not running the task its next record names. Default 1000 Hz.
    pub fn tick_hz(mut self, hz: u32) -> Attributor {
        self.max_gap_ns = 2_000_000_000 / u64::from(hz.max(1));
        self
    }

    /// How the plan said it divides package traffic (default: what the slots show).
    pub fn weighting(mut self, w: Option<Weighting>) -> Attributor {
        if let Some(w) = w {
            let fidelity = w.fidelity.clone();
            self.weighting = w;
            self.fidelity(&fidelity);
        }
        self
    }

    /// Each weight event's measured fidelity (by event string; 1 for those not named): a count
    /// of it stands for its bytes per count / f.
    pub fn fidelity(&mut self, by_event: &BTreeMap<String, f64>) {
        for (s, spec) in self.specs.iter().enumerate() {
            if let (Some(&f), Some(b)) = (by_event.get(&spec.event), spec.bytes_per_count)
                && self.weight_mask & (1 << s) != 0
                && f.is_finite()
                && f > 0.0
                && b > 0.0
            {
                self.wscale[s] = b / f;
            }
        }
    }

    /// Ignore `KIND_SWITCH` records: the answer the tick alone would give on the same run, for
    /// the precise-vs-tick comparison.
    pub fn tick_only(mut self, yes: bool) -> Attributor {
        self.tick_only = yes;
        self
    }

    pub fn specs(&self) -> &[SlotSpec] {
        &self.specs
    }

    /// Records dropped by the kernel (ring buffer full), reported as `lost_samples`.
    pub fn add_lost_samples(&mut self, n: u64) {
        self.lost = self.lost.saturating_add(n);
    }

    /// Whether every CPU that has reported at all has reported past `t_ns` (its records
    /// describe the time up to there).
    pub fn reported_past(&self, t_ns: u64) -> bool {
        self.cpus.iter().all(|c| !c.have_t || c.t_last >= t_ns)
    }

    /// (timer records, switch records) used so far.
    pub fn record_counts(&self) -> (u64, u64) {
        (self.records - self.switches, self.switches)
    }
}

/// Per slot its counter's width mask, and the bits of the CPU-scope slots, of the weights among
/// them and of the package-scope slots.
fn slot_masks(specs: &[SlotSpec]) -> ([u64; MAX_SLOTS], u8, u8, u8) {
    let mut masks = [u64::MAX; MAX_SLOTS];
    let (mut cpu_mask, mut weight_mask, mut pkg_mask) = (0u8, 0u8, 0u8);
    for (s, spec) in specs.iter().enumerate() {
        masks[s] = width_mask(spec.counter_bits);
        match spec.scope {
            SlotScope::Cpu => {
                cpu_mask |= 1 << s;
                if matches!(spec.role, SlotRole::Weight(_) | SlotRole::RemoteWeight(_)) {
                    weight_mask |= 1 << s;
                }
            }
            SlotScope::Package => pkg_mask |= 1 << s,
        }
    }
    (masks, cpu_mask, weight_mask, pkg_mask)
}

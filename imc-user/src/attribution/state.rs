//! The attributor's state: per CPU its record chain and open segment, per package its
//! counter readings, spans and segments, the counts kept for after an interval's end, and the
//! settings every step reads. The steps are in the files beside (`cpu`, `package`, `routes`,
//! `interval`, `results`).

use super::classes::WeightClass;
use super::spread::{Event, MAX_CLASSES, Scratch, Segment, Span};
use super::tasks::{TaskKey, TaskTable};
use crate::model::{SlotSpec, Weighting};
use imc_common::{MAX_SLOTS, SlotReading};

/// CPU numbers above this are treated as corrupt records (a fuzzed recording must not make the
/// per-CPU table allocate gigabytes).
pub(super) const MAX_CPU: u32 = 1 << 16;

/// Turns the record stream into per-interval, per-task results.
pub struct Attributor {
    pub(super) specs: Vec<SlotSpec>,
    pub(super) source: String,
    /// How package traffic is divided, copied to every result.
    pub(super) weighting: Weighting,
    pub(super) masks: [u64; MAX_SLOTS],
    pub(super) cpu_mask: u8,
    pub(super) weight_mask: u8,
    pub(super) pkg_mask: u8,
    /// The Weight slots of each weight class (see [`weight_classes`]): the local ones weigh
    /// the segments of a package's own CPUs, the remote ones (RemoteWeight slots) the segments
    /// of other packages' CPUs.
    pub(super) classes: [WeightClass; MAX_CLASSES],
    /// Some class has remote weights: every CPU's segments are handed to every package.
    pub(super) numa: bool,
    /// Per slot: the weight class a package slot is spread by.
    pub(super) slot_class: [u8; MAX_SLOTS],
    /// Per class: the weights are blind to locality (no remote weight of their direction):
    /// the (local, remote) slots of the other direction whose ratio says each task's locality.
    pub(super) blind: [Option<(u8, u8)>; MAX_CLASSES],
    /// Per weight slot: bytes one count stands for over its fidelity (1 where unknown), so
    /// weights are compared in bytes.
    pub(super) wscale: [f64; MAX_SLOTS],
    /// Per package slot: count of its weights' bytes in its own counts (1 / its bytes per
    /// count) where its class's weights count bytes of its direction, else None (a weight of
    /// another direction, a --weight event of unknown size, a stand-in source).
    pub(super) accounts: [Option<f64>; MAX_SLOTS],
    /// Counts no core counter saw, per slot, this interval (part of `idle_acc`).
    pub(super) device_acc: [f64; MAX_SLOTS],
    /// Slots whose values are multiplexing-scaled (all of them; kept as a mask for symmetry).
    pub(super) packages: Vec<PkgState>,
    pub(super) cpus: Vec<CpuState>,
    pub(super) cpu_pkg_init: Vec<u32>,
    /// Every CPU of every package.
    pub(super) all_cpus: Vec<u32>,
    pub(super) tasks: TaskTable,
    /// Counts no task could take, per slot, this interval.
    pub(super) idle_acc: [f64; MAX_SLOTS],
    pub(super) tick_only: bool,
    pub(super) max_gap_ns: u64,
    pub(super) t_start: Option<u64>,
    pub(super) lost: u64,
    /// Spans of this interval whose weights were unknown (not running, unreadable), spread by
    /// on-CPU time instead.
    pub(super) time_fallbacks: u64,
    pub(super) records: u64,
    pub(super) switches: u64,
    pub(super) events: Vec<Event>,
    pub(super) scratch: Scratch,
    /// The end of the interval being filled, where the caller said it ([`Self::split_at`]).
    pub(super) boundary: Option<u64>,
    /// An interval has been closed (the next starts where it ended).
    pub(super) closed_any: bool,
    /// CPU-scope counts of time after `boundary`, for the next interval.
    pub(super) after: Vec<Later>,
    /// Counts of the interval being filled placed without knowing when they were made:
    /// (task, slot, how).
    pub(super) placed: Vec<(u32, u8, Placed)>,
}

/// How a count was placed in an interval without knowing when it was made.
#[derive(Clone, Copy, Debug)]
pub(super) enum Placed {
    /// Split at one of the interval's ends by time: the larger part of the count.
    ByTime(f64),
    /// Read after the interval its span began in was closed: the count, and the span's start.
    Late(f64, u64),
}

#[derive(Clone, Copy, Default)]
pub(super) struct CpuState {
    pub(super) have_t: bool,
    pub(super) t_last: u64,
    /// Task of the last record (IDLE for the idle task).
    pub(super) prev_task: u32,
    /// Every record after this time belongs to `prev_task`: a slot delta whose baseline is at
    /// or after it has one owner, even across failed reads in between.
    pub(super) owner_since: u64,
    /// Start of the segment not yet handed to the package (held open while the Weight
    /// counters cannot be read, so the next clean read closes it with a real delta).
    pub(super) seg_start: u64,
    /// Time of the weight baseline the open segment's weight is measured from.
    pub(super) seg_base_t: u64,
    /// Bit s: `last[s]`, read at `base_t[s]`, is a valid baseline for slot s.
    pub(super) base_ok: u8,
    pub(super) base_t: [u64; MAX_SLOTS],
    pub(super) last: [SlotReading; MAX_SLOTS],
    /// Last task seen on this CPU, to skip the hash lookup while the same task keeps running.
    pub(super) cache_key: TaskKey,
    pub(super) cache_idx: u32,
    /// Index into `packages`, or u32::MAX for a CPU outside the topology.
    pub(super) pkg: u32,
    /// The last task whose reads said where its memory is, and the local fraction they said
    /// (for a blind weight's segments in which the task read nothing).
    pub(super) loc_task: u32,
    pub(super) loc: f64,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Reading {
    pub(super) t: u64,
    pub(super) r: SlotReading,
    /// enabled/running are meaningful (tick reads); userspace fallback reads may not have them.
    pub(super) times: bool,
}

pub(super) struct PkgSlot {
    pub(super) slot: usize,
    pub(super) pending: Vec<Reading>,
    /// Last reading already used: the chain continues from here, and spans before it are done.
    pub(super) base: Option<Reading>,
    pub(super) spans: Vec<Span>,
}

pub(super) struct PkgState {
    pub(super) id: u32,
    pub(super) cpus: Vec<u32>,
    pub(super) slots: Vec<PkgSlot>,
    pub(super) segs: Vec<Segment>,
    /// Counts per slot in the current interval (package totals).
    pub(super) acc: [f64; MAX_SLOTS],
    /// The part of `acc` no task took.
    pub(super) idle: [f64; MAX_SLOTS],
    /// The part of `idle` no core counter saw (device traffic).
    pub(super) device: [f64; MAX_SLOTS],
}

/// A CPU-scope count that belongs after the end of the interval being filled.
#[derive(Clone, Copy, Debug)]
pub(super) struct Later {
    pub(super) task: u32,
    pub(super) pkg: u32,
    pub(super) slot: u8,
    pub(super) amount: f64,
    /// The larger part of the count this was split from: what the split placed by time.
    pub(super) by_time: f64,
}

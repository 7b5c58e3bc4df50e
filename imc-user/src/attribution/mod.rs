//! Attribution: counter readings of the sampler → bytes per task, per interval.
//!
//! Input is the stream of [`Record`]s (one per program run on one CPU, cumulative counter
//! values) and userspace reads of package counters. Rules (shared/design.md, issue 5):
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
pub mod names;
pub mod spread;
pub mod summary;
pub mod tasks;
pub mod timeline;
pub mod victims;

pub use summary::{Summary, compare, find_bursts, group_rows, percentile, traffic_amount};
pub use tasks::TaskKey;

use crate::model::result::{IntervalResult, PackageRow, ShareBasis, TaskRow, package_bytes};
use crate::model::{Direction, SlotRole, SlotScope, SlotSpec, Topology, Weighting};
use imc_common::{KIND_AGGREGATE, KIND_SWITCH, MAX_SLOTS, Record, SlotReading};
use spread::{Event, MAX_CLASSES, SHARE_ONE, Scratch, Segment, Span};
use std::collections::BTreeMap;
use tasks::{IDLE, TaskTable};

/// CPU numbers above this are treated as corrupt records (a fuzzed recording must not make the
/// per-CPU table allocate gigabytes).
const MAX_CPU: u32 = 1 << 16;
/// Package segments older than this behind the interval end are dropped even if no package
/// reading has come to spread over them (a package counter nobody can read).
const MAX_LAG_NS: u64 = 5_000_000_000;

/// Delta of a cumulative counter between two readings: modulo the counter width, scaled by
/// Δenabled/Δrunning when the counter was multiplexed in between.
#[inline]
pub fn scaled_delta(prev: &SlotReading, cur: &SlotReading, mask: u64, times: bool) -> f64 {
    let dv = cur.value.wrapping_sub(prev.value) & mask;
    if !times || cur.enabled < prev.enabled || cur.running < prev.running {
        return dv as f64;
    }
    let de = cur.enabled - prev.enabled;
    let dr = cur.running - prev.running;
    if dr > 0 && de > dr {
        dv as f64 * (de as f64 / dr as f64)
    } else {
        dv as f64
    }
}

fn width_mask(bits: u8) -> u64 {
    if bits == 0 || bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

#[derive(Clone, Copy, Default)]
struct CpuState {
    have_t: bool,
    t_last: u64,
    /// Task of the last record (IDLE for the idle task).
    prev_task: u32,
    /// Every record after this time belongs to `prev_task`: a slot delta whose baseline is at
    /// or after it has one owner, even across failed reads in between.
    owner_since: u64,
    /// Start of the segment not yet handed to the package (held open while the Weight
    /// counters cannot be read, so the next clean read closes it with a real delta).
    seg_start: u64,
    /// Time of the weight baseline the open segment's weight is measured from.
    seg_base_t: u64,
    /// Bit s: `last[s]`, read at `base_t[s]`, is a valid baseline for slot s.
    base_ok: u8,
    base_t: [u64; MAX_SLOTS],
    last: [SlotReading; MAX_SLOTS],
    /// Last task seen on this CPU, to skip the hash lookup while the same task keeps running.
    cache_key: TaskKey,
    cache_idx: u32,
    /// Index into `packages`, or u32::MAX for a CPU outside the topology.
    pkg: u32,
    /// The last task whose reads said where its memory is, and the local fraction they said
    /// (for a blind weight's segments in which the task read nothing).
    loc_task: u32,
    loc: f64,
}

#[derive(Clone, Copy, Debug)]
struct Reading {
    t: u64,
    r: SlotReading,
    /// enabled/running are meaningful (tick reads); userspace fallback reads may not have them.
    times: bool,
}

struct PkgSlot {
    slot: usize,
    pending: Vec<Reading>,
    /// Last reading already used: the chain continues from here, and spans before it are done.
    base: Option<Reading>,
    spans: Vec<Span>,
}

struct PkgState {
    id: u32,
    cpus: Vec<u32>,
    slots: Vec<PkgSlot>,
    segs: Vec<Segment>,
    /// Counts per slot in the current interval (package totals).
    acc: [f64; MAX_SLOTS],
    /// The part of `acc` no task took.
    idle: [f64; MAX_SLOTS],
    /// The part of `idle` no core counter saw (device traffic).
    device: [f64; MAX_SLOTS],
}

impl PkgSlot {
    /// Chains the pending readings up to `limit` into spans (each from the last reading
    /// used), dropping late and overlapping readings. Returns the count of zero-length spans
    /// at the end that no later span carries yet.
    fn chain_spans(&mut self, limit: u64, mask: u64) -> f64 {
        self.spans.clear();
        self.pending.sort_unstable_by_key(|r| r.t);
        let upto = self.pending.partition_point(|r| r.t <= limit);
        let mut carry = 0.0;
        for r in self.pending.drain(..upto) {
            let Some(b) = self.base else {
                self.base = Some(r);
                continue;
            };
            if r.t < b.t {
                continue; // late reading of an already spread span
            }
            if mask == u64::MAX && r.r.value < b.r.value {
                // A 64-bit count (the kernel's, or a sum of them) never wraps: a smaller
                // one is a reading that overlapped the previous (a userspace read whose
                // counters were read around a tick's), not a wrap. Keep the base.
                continue;
            }
            let d = scaled_delta(&b.r, &r.r, mask, b.times && r.times);
            if r.t == b.t {
                carry += d; // zero-length span: the next one carries it
            } else {
                self.spans.push(Span {
                    t0: b.t,
                    t1: r.t,
                    d: d + carry,
                });
                carry = 0.0;
            }
            self.base = Some(r);
        }
        // The span across the limit (the interval end, or as far as every CPU is known): its
        // part before the limit by time, the reading interpolated there as the new base, so
        // the rest is the next interval's and nothing is counted twice or lost.
        if let (Some(b), Some(r)) = (self.base, self.pending.first().copied())
            && b.t < limit
            && r.t > limit
            && !(mask == u64::MAX && r.r.value < b.r.value)
        {
            let f = (limit - b.t) as f64 / (r.t - b.t) as f64;
            let times = b.times && r.times;
            let mid = Reading {
                t: limit,
                r: interpolate(&b.r, &r.r, mask, f),
                times,
            };
            let d = scaled_delta(&b.r, &mid.r, mask, times);
            self.spans.push(Span {
                t0: b.t,
                t1: limit,
                d: d + carry,
            });
            carry = 0.0;
            self.base = Some(mid);
        }
        carry
    }
}

/// The reading a fraction `f` of the way from `a` to `b` (counts and times alike, so the
/// multiplexing scale of either part is the whole span's).
fn interpolate(a: &SlotReading, b: &SlotReading, mask: u64, f: f64) -> SlotReading {
    let part = |from: u64, to: u64, m: u64| {
        let d = to.wrapping_sub(from) & m;
        from.wrapping_add((d as f64 * f) as u64) & m
    };
    let time = |from: u64, to: u64| {
        if to >= from {
            from + ((to - from) as f64 * f) as u64
        } else {
            from
        }
    };
    SlotReading {
        value: part(a.value, b.value, mask),
        enabled: time(a.enabled, b.enabled),
        running: time(a.running, b.running),
    }
}

impl PkgState {
    /// Keeps segments that reach past some slot's frontier: their later part is spread when
    /// the next readings arrive.
    fn keep_unspread_segments(&mut self, t_end: u64) {
        let frontier = self
            .slots
            .iter()
            .map(|ps| ps.base.map_or(0, |b| b.t))
            .min()
            .unwrap_or(u64::MAX);
        let floor = t_end.saturating_sub(MAX_LAG_NS);
        self.segs.retain(|s| s.end > frontier && s.end > floor);
    }
}

/// Turns the record stream into per-interval, per-task results.
pub struct Attributor {
    specs: Vec<SlotSpec>,
    source: String,
    /// How package traffic is divided, copied to every result.
    weighting: Weighting,
    masks: [u64; MAX_SLOTS],
    cpu_mask: u8,
    weight_mask: u8,
    pkg_mask: u8,
    /// The Weight slots of each weight class (see [`weight_classes`]): the local ones weigh
    /// the segments of a package's own CPUs, the remote ones (RemoteWeight slots) the segments
    /// of other packages' CPUs.
    classes: [WeightClass; MAX_CLASSES],
    /// Some class has remote weights: every CPU's segments are handed to every package.
    numa: bool,
    /// Per slot: the weight class a package slot is spread by.
    slot_class: [u8; MAX_SLOTS],
    /// Per class: the weights are blind to locality (no remote weight of their direction):
    /// the (local, remote) slots of the other direction whose ratio says each task's locality.
    blind: [Option<(u8, u8)>; MAX_CLASSES],
    /// Per weight slot: bytes one count stands for over its fidelity (1 where unknown), so
    /// weights are compared in bytes.
    wscale: [f64; MAX_SLOTS],
    /// Per package slot: count of its weights' bytes in its own counts (1 / its bytes per
    /// count) where its class's weights count bytes of its direction, else None (a weight of
    /// another direction, a --weight event of unknown size, a stand-in source).
    accounts: [Option<f64>; MAX_SLOTS],
    /// Counts no core counter saw, per slot, this interval (part of `idle_acc`).
    device_acc: [f64; MAX_SLOTS],
    /// Slots whose values are multiplexing-scaled (all of them; kept as a mask for symmetry).
    packages: Vec<PkgState>,
    cpus: Vec<CpuState>,
    cpu_pkg_init: Vec<u32>,
    /// Every CPU of every package.
    all_cpus: Vec<u32>,
    tasks: TaskTable,
    /// Counts no task could take, per slot, this interval.
    idle_acc: [f64; MAX_SLOTS],
    tick_only: bool,
    max_gap_ns: u64,
    t_start: Option<u64>,
    lost: u64,
    /// Spans of this interval whose weights were unknown (not running, unreadable), spread by
    /// on-CPU time instead.
    time_fallbacks: u64,
    records: u64,
    switches: u64,
    events: Vec<Event>,
    scratch: Scratch,
    /// The end of the interval being filled, where the caller said it ([`Self::split_at`]).
    boundary: Option<u64>,
    /// An interval has been closed (the next starts where it ended).
    closed_any: bool,
    /// CPU-scope counts of time after `boundary`, for the next interval.
    after: Vec<Later>,
}

/// A CPU-scope count that belongs after the end of the interval being filled.
#[derive(Clone, Copy, Debug)]
struct Later {
    task: u32,
    pkg: u32,
    slot: u8,
    amount: f64,
}

impl Attributor {
    /// `specs`: the sampler's slots (slot index = position); `source`: what was measured
    /// (`"intel-uncore-imc"`, `"proxy:page-faults"`), copied to every result.
    pub fn new(specs: &[SlotSpec], topology: &Topology, source: impl Into<String>) -> Attributor {
        let specs: Vec<SlotSpec> = specs.iter().take(MAX_SLOTS).cloned().collect();
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
        let (classes, slot_class, blind) = weight_classes(&specs);
        let mut wscale = [1.0; MAX_SLOTS];
        for (s, spec) in specs.iter().enumerate() {
            if let (SlotScope::Cpu, Some(b)) = (spec.scope, spec.bytes_per_count)
                && matches!(spec.role, SlotRole::Weight(_) | SlotRole::RemoteWeight(_))
                && b > 0.0
            {
                wscale[s] = b;
            }
        }
        let accounts = accounting(&specs, &classes, &slot_class);
        let numa = classes.iter().any(|c| c.remote != 0);
        let mut cpu_pkg_init = Vec::new();
        let packages = topology
            .packages
            .iter()
            .enumerate()
            .map(|(pi, p)| {
                for &c in &p.cpus {
                    if c < MAX_CPU {
                        let c = c as usize;
                        if cpu_pkg_init.len() <= c {
                            cpu_pkg_init.resize(c + 1, u32::MAX);
                        }
                        cpu_pkg_init[c] = pi as u32;
                    }
                }
                PkgState {
                    id: p.id,
                    cpus: p.cpus.clone(),
                    slots: (0..specs.len())
                        .filter(|s| pkg_mask & (1 << s) != 0)
                        .map(|slot| PkgSlot {
                            slot,
                            pending: Vec::new(),
                            base: None,
                            spans: Vec::new(),
                        })
                        .collect(),
                    segs: Vec::new(),
                    acc: [0.0; MAX_SLOTS],
                    idle: [0.0; MAX_SLOTS],
                    device: [0.0; MAX_SLOTS],
                }
            })
            .collect();
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

    /// The interval being filled ends at `t_end_ns` (set before the records that cross it are
    /// pushed): a CPU-scope delta whose span crosses it is divided by time, the part after it
    /// kept for the next interval, so that [`close_interval`](Self::close_interval) at exactly
    /// this end holds what happened before it. Closing at another time (or [`finish`]
    /// (Self::finish)) holds everything pushed. Cleared by every close.
    pub fn split_at(&mut self, t_end_ns: u64) {
        self.boundary = Some(t_end_ns);
    }

    /// Whether every CPU that has reported at all has reported past `t_ns` (its records
    /// describe the time up to there).
    pub fn reported_past(&self, t_ns: u64) -> bool {
        self.cpus.iter().all(|c| !c.have_t || c.t_last >= t_ns)
    }

    /// A CPU-scope delta `d` of slot `s`, made by `task` (IDLE: nobody) on a CPU of package
    /// index `pkg` over `t0 .. t1`: the part up to the interval's end now, the rest later.
    fn charge(&mut self, task: u32, pkg: u32, s: usize, d: f64, t0: u64, t1: u64) {
        if d == 0.0 {
            return;
        }
        let now = match self.boundary {
            Some(b) if t1 > b => {
                let f = if t0 < b && t1 > t0 {
                    (b - t0) as f64 / (t1 - t0) as f64
                } else {
                    0.0
                };
                let later = d * (1.0 - f);
                if later != 0.0 {
                    self.after.push(Later {
                        task,
                        pkg,
                        slot: s as u8,
                        amount: later,
                    });
                }
                d * f
            }
            _ => d,
        };
        self.add_count(task, pkg, s, now);
    }

    fn add_count(&mut self, task: u32, pkg: u32, s: usize, d: f64) {
        if d == 0.0 {
            return;
        }
        if task == IDLE {
            self.idle_acc[s] += d;
        } else {
            self.tasks.add(task, s, d);
        }
        if let Some(p) = self.packages.get_mut(pkg as usize) {
            p.acc[s] += d;
            if task == IDLE {
                p.idle[s] += d;
            }
        }
    }

    /// The counts kept for after the interval's end become the new interval's.
    fn roll_after(&mut self) {
        let after = std::mem::take(&mut self.after);
        for l in &after {
            self.add_count(l.task, l.pkg, usize::from(l.slot), l.amount);
        }
        self.after = after;
        self.after.clear();
    }

    /// (timer records, switch records) used so far.
    pub fn record_counts(&self) -> (u64, u64) {
        (self.records - self.switches, self.switches)
    }

    /// One program run on one CPU. Records of one CPU must come in time order; CPUs may
    /// interleave arbitrarily.
    ///
    /// The steps: admit the record (and the CPU), name its task, give its package readings to
    /// the package, then on the CPU's own time line close what the record ends (the CPU-scope
    /// deltas to their owner, the segment that weighs the package's traffic) and make it the
    /// CPU's new baseline.
    pub fn push_tick(&mut self, rec: &Record) {
        let Some(cpu) = self.admit(rec) else {
            return;
        };
        let nslots = (rec.nr_slots as usize).min(self.specs.len());
        let valid: u8 = (((1u16 << nslots) - 1) as u8) & !rec.failed_mask;
        let task = self.task_of(cpu, rec);
        if rec.kind == KIND_AGGREGATE {
            self.push_aggregate(cpu, rec, task, valid);
            return;
        }
        self.push_package_points(cpu, rec, valid & self.pkg_mask);
        let cpu_valid = valid & self.cpu_mask;
        let st = &mut self.cpus[cpu];
        if !st.have_t {
            // First record (or a restart): only baselines.
            st.owner_since = rec.t_ns;
            st.seg_start = rec.t_ns;
            st.seg_base_t = rec.t_ns;
        } else if rec.t_ns > st.t_last {
            let held = self.close_held_segment(cpu, task, rec.t_ns);
            let (wdelta, w_ok) = self.cpu_deltas(cpu, rec, task, cpu_valid);
            let ended = self.end_segment(cpu, rec.t_ns, task, cpu_valid, &wdelta, w_ok);
            self.hand_segments(cpu, held, ended, (&wdelta, w_ok));
        }
        self.rebase(cpu, rec, task, cpu_valid);
    }

    /// A task's aggregate of one flush period `t0_ns .. t_ns` of its CPU (KIND_AGGREGATE): its
    /// CPU-scope deltas are its own; for the package it is a segment over the whole period
    /// whose weight rates are its weight deltas over the period and whose claim by time is its
    /// on-CPU share of it. The aggregates of one period overlap: the kernel kept each task's
    /// time and weight in the period, not their order, so both are spread evenly over it
    /// (at thousands of switches a second the tasks interleave finely within a tick).
    fn push_aggregate(&mut self, cpu: usize, rec: &Record, task: u32, valid: u8) {
        self.push_package_points(cpu, rec, valid & self.pkg_mask);
        let cpu_valid = valid & self.cpu_mask;
        let mut wdelta = [0.0f64; MAX_SLOTS];
        let mut w_ok = 0u8;
        let pkg = self.cpus[cpu].pkg;
        let mut bits = cpu_valid;
        while bits != 0 {
            let s = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            // Σvalue scaled by Σenabled / Σrunning over the task's slices, spread evenly over
            // the period as its time is.
            let d = scaled_delta(&SlotReading::default(), &rec.slots[s], self.masks[s], true);
            self.charge(task, pkg, s, d, rec.t0_ns.min(rec.t_ns), rec.t_ns);
            if self.weight_mask & (1 << s) != 0 {
                wdelta[s] = d;
                // A multiplexed weight that never ran in the task's slices knows nothing.
                let r = &rec.slots[s];
                if r.running > 0 || r.enabled == 0 {
                    w_ok |= 1 << s;
                }
            }
        }
        // Per-switch chains (a `--precise` run's) restart after aggregates.
        let st = &mut self.cpus[cpu];
        st.base_ok = 0;
        st.prev_task = task;
        st.owner_since = rec.t_ns;
        st.seg_start = rec.t_ns.max(st.seg_start);
        st.seg_base_t = st.seg_start;
        st.t_last = rec.t_ns;
        st.have_t = true;
        if self.pkg_mask == 0 || rec.t0_ns >= rec.t_ns {
            return;
        }
        let dt = (rec.t_ns - rec.t0_ns) as f64;
        let mut wrate = [0.0; MAX_CLASSES];
        let mut weight_ok = 0u8;
        for (c, class) in self.classes.iter().enumerate() {
            if let Some(rate) = class_rate(class.local, &wdelta, w_ok, dt, &self.wscale) {
                weight_ok |= 1 << c;
                wrate[c] = rate;
            }
        }
        let share = (rec.on_ns as f64 / dt).clamp(0.0, 1.0);
        let seg = Segment {
            start: rec.t0_ns,
            end: rec.t_ns,
            wrate,
            task,
            weight_ok,
            foreign: false,
            time_share: (share * f64::from(SHARE_ONE)).round() as u32,
        };
        self.hand_segments(cpu, None, Some(seg), (&wdelta, w_ok));
    }

    /// Counts the record and makes room for its CPU; None for a record to leave out (a switch
    /// record in tick-only mode, a corrupt CPU number). A CPU whose time went backwards
    /// restarts its chain rather than invent a delta.
    fn admit(&mut self, rec: &Record) -> Option<usize> {
        if self.tick_only && rec.kind == KIND_SWITCH {
            return None;
        }
        if rec.cpu >= MAX_CPU {
            self.lost += 1;
            return None;
        }
        self.records += 1;
        if rec.kind == KIND_SWITCH {
            self.switches += 1;
        }
        // The first interval starts where the first counts it holds begin: an aggregate's
        // period began before its record (the time the program first ran on its CPU).
        let begins = if rec.kind == KIND_AGGREGATE {
            rec.t0_ns.min(rec.t_ns)
        } else {
            rec.t_ns
        };
        self.t_start = match self.t_start {
            Some(t) if self.closed_any => Some(t),
            Some(t) => Some(t.min(begins)),
            None => Some(begins),
        };
        let cpu = rec.cpu as usize;
        if cpu >= self.cpus.len() {
            let old = self.cpus.len();
            self.cpus.resize(cpu + 1, CpuState::default());
            for (c, st) in self.cpus.iter_mut().enumerate().skip(old) {
                st.pkg = self.cpu_pkg_init.get(c).copied().unwrap_or(u32::MAX);
                st.cache_idx = IDLE;
                st.loc_task = IDLE;
            }
        }
        let st = &mut self.cpus[cpu];
        if st.have_t && rec.t_ns < st.t_last {
            st.have_t = false;
            st.base_ok = 0;
        }
        Some(cpu)
    }

    /// The record's task index (IDLE for the idle task), skipping the table lookup while the
    /// same task keeps running on the CPU.
    fn task_of(&mut self, cpu: usize, rec: &Record) -> u32 {
        if rec.pid == 0 {
            return IDLE;
        }
        let key = TaskKey {
            pid: rec.pid,
            tgid: rec.tgid,
            cgroup: rec.cgroup_id,
            comm: rec.comm,
        };
        let st = &mut self.cpus[cpu];
        if st.cache_idx != IDLE && st.cache_key == key {
            return st.cache_idx;
        }
        let i = self.tasks.lookup(&key);
        st.cache_key = key;
        st.cache_idx = i;
        i
    }

    /// Package readings: the record of a CPU that read its package's slots is a point of
    /// each.
    fn push_package_points(&mut self, cpu: usize, rec: &Record, pkg_valid: u8) {
        if pkg_valid == 0 {
            return;
        }
        let Some(p) = self.packages.get_mut(self.cpus[cpu].pkg as usize) else {
            return;
        };
        for ps in &mut p.slots {
            if pkg_valid & (1 << ps.slot) != 0 {
                ps.pending.push(Reading {
                    t: rec.t_ns,
                    r: rec.slots[ps.slot],
                    times: true,
                });
            }
        }
    }

    /// The segment held open since before a silence or a change of task, closed for its owner
    /// up to the last record; moves the open segment's start for what follows.
    fn close_held_segment(&mut self, cpu: usize, task: u32, t: u64) -> Option<Segment> {
        let max_gap_ns = self.max_gap_ns;
        let st = &mut self.cpus[cpu];
        let held = |st: &CpuState| {
            (st.seg_start < st.t_last).then_some(Segment {
                start: st.seg_start,
                end: st.t_last,
                wrate: [0.0; MAX_CLASSES],
                task: st.prev_task,
                weight_ok: 0,
                foreign: false,
                time_share: SHARE_ONE,
            })
        };
        let mut out = None;
        if t - st.t_last > max_gap_ns {
            // Silent longer than two ticks (NOHZ idle): only the last stretch is known to be
            // this record's task; the open part before the silence is closed as is.
            out = held(st);
            st.seg_base_t = st.t_last;
            st.seg_start = t - max_gap_ns;
        } else if task != st.prev_task && st.seg_start < st.t_last {
            out = held(st);
            st.seg_start = st.t_last;
            st.seg_base_t = st.t_last;
        }
        if task != st.prev_task {
            st.owner_since = st.t_last;
        }
        out
    }

    /// CPU-scope deltas since the baseline go to this record's task when every record since
    /// the baseline was this task's; otherwise the delta spans two owners and is dropped, not
    /// split by guess. Returns each Weight slot's delta, and the bits of those measured over
    /// exactly the open segment (a clean baseline of this owner at the segment's start).
    fn cpu_deltas(
        &mut self,
        cpu: usize,
        rec: &Record,
        task: u32,
        cpu_valid: u8,
    ) -> ([f64; MAX_SLOTS], u8) {
        let mut wdelta = [0.0f64; MAX_SLOTS];
        let mut w_ok: u8 = 0;
        let (pkg, t_last) = (self.cpus[cpu].pkg, self.cpus[cpu].t_last);
        // After a silence longer than two ticks only its last stretch is the task's (as for
        // the segments).
        let silent = rec.t_ns - t_last > self.max_gap_ns;
        let mut bits = cpu_valid;
        while bits != 0 {
            let s = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let st = &self.cpus[cpu];
            let usable = st.base_ok & (1 << s) != 0 && st.base_t[s] >= st.owner_since;
            if !usable {
                continue;
            }
            let (prev, cur) = (&st.last[s], &rec.slots[s]);
            let d = scaled_delta(prev, cur, self.masks[s], true);
            // A multiplexed weight that never ran in the segment knows nothing of it.
            let ran = cur.running > prev.running || cur.enabled <= prev.enabled;
            let whole_segment = st.base_t[s] == st.seg_base_t;
            let t0 = if silent {
                st.base_t[s].max(rec.t_ns - self.max_gap_ns)
            } else {
                st.base_t[s]
            };
            self.charge(task, pkg, s, d, t0, rec.t_ns);
            if self.weight_mask & (1 << s) != 0 {
                wdelta[s] = d;
                if whole_segment && ran {
                    w_ok |= 1 << s;
                }
            }
        }
        (wdelta, w_ok)
    }

    /// The open segment, ended at this record with its weight rates, when its Weight counters
    /// were read (else it stays open until a clean read closes it with a real delta).
    fn end_segment(
        &mut self,
        cpu: usize,
        t: u64,
        task: u32,
        cpu_valid: u8,
        wdelta: &[f64; MAX_SLOTS],
        w_ok: u8,
    ) -> Option<Segment> {
        let weights_read = cpu_valid & self.weight_mask == self.weight_mask;
        if !(weights_read || self.weight_mask == 0) {
            return None;
        }
        let st = &mut self.cpus[cpu];
        let dt = (t - st.seg_start) as f64;
        let mut wrate = [0.0; MAX_CLASSES];
        let mut weight_ok = 0u8;
        for (c, class) in self.classes.iter().enumerate() {
            if let Some(rate) = class_rate(class.local, wdelta, w_ok, dt, &self.wscale) {
                weight_ok |= 1 << c;
                wrate[c] = rate;
            }
        }
        let seg = Segment {
            start: st.seg_start,
            end: t,
            wrate,
            task,
            weight_ok,
            foreign: false,
            time_share: SHARE_ONE,
        };
        st.seg_start = t;
        st.seg_base_t = t;
        Some(seg)
    }

    /// Closed segments to the CPU's package, which spreads its traffic over them; with remote
    /// weights, also to every other package, weighed there by what the CPU sent to remote
    /// memory.
    fn hand_segments(
        &mut self,
        cpu: usize,
        held: Option<Segment>,
        ended: Option<Segment>,
        weights: (&[f64; MAX_SLOTS], u8),
    ) {
        if self.pkg_mask == 0 {
            return;
        }
        let own = self.cpus[cpu].pkg as usize;
        for (seg, w) in [(held, None), (ended, Some(weights))] {
            let Some(mut seg) = seg.filter(|s| s.end > s.start) else {
                continue;
            };
            // A blind weight's rate is split by where the task's memory is: its local part
            // weighs this package, the rest the others.
            let mut blind_remote = [None; MAX_CLASSES];
            if let Some((wdelta, w_ok)) = w {
                let blind = self.blind;
                for (c, (b, out)) in blind.iter().zip(blind_remote.iter_mut()).enumerate() {
                    if let Some(masks) = *b
                        && seg.weight_ok & (1 << c) != 0
                    {
                        let loc = self.locality(cpu, seg.task, masks, wdelta, w_ok);
                        let full = seg.wrate[c];
                        seg.wrate[c] = full * loc;
                        *out = Some(full * (1.0 - loc));
                    }
                }
            }
            if self.numa {
                let mut remote = self.remote_segment(&seg, w);
                for (c, r) in blind_remote.iter().enumerate() {
                    if let Some(r) = *r {
                        remote.wrate[c] = r;
                    }
                }
                for (i, p) in self.packages.iter_mut().enumerate() {
                    if i != own {
                        p.segs.push(remote);
                    }
                }
            }
            if let Some(p) = self.packages.get_mut(own) {
                p.segs.push(seg);
            }
        }
    }

    /// A segment as another package sees it: the rates of its remote weights, and no claim
    /// by time (the CPU's time is never a claim on another package's traffic). A class without
    /// remote weights gives it no weight, cleanly; `wdelta`/`w_ok` None: the weights are
    /// unknown (a held segment).
    fn remote_segment(&self, seg: &Segment, weights: Option<(&[f64; MAX_SLOTS], u8)>) -> Segment {
        let mut out = Segment {
            foreign: true,
            wrate: [0.0; MAX_CLASSES],
            weight_ok: 0,
            ..*seg
        };
        let dt = (seg.end - seg.start) as f64;
        for (c, class) in self.classes.iter().enumerate() {
            if class.remote == 0 {
                out.weight_ok |= 1 << c;
            } else if let Some((wdelta, w_ok)) = weights
                && let Some(rate) = class_rate(class.remote, wdelta, w_ok, dt, &self.wscale)
            {
                out.weight_ok |= 1 << c;
                out.wrate[c] = rate;
            }
        }
        out
    }

    /// The local fraction of a task's memory traffic, from its weights of the other direction
    /// over the segment (`masks`: their local and remote slots); when it moved none there, the
    /// fraction it last showed on this CPU, else local.
    fn locality(
        &mut self,
        cpu: usize,
        task: u32,
        masks: (u8, u8),
        wdelta: &[f64; MAX_SLOTS],
        w_ok: u8,
    ) -> f64 {
        let l = class_rate(masks.0, wdelta, w_ok, 1.0, &self.wscale);
        let r = class_rate(masks.1, wdelta, w_ok, 1.0, &self.wscale);
        let st = &mut self.cpus[cpu];
        if let (Some(l), Some(r)) = (l, r)
            && l + r > 0.0
        {
            st.loc_task = task;
            st.loc = l / (l + r);
            return st.loc;
        }
        if st.loc_task == task && task != IDLE {
            st.loc
        } else {
            1.0
        }
    }

    /// The record becomes the CPU's baseline for the slots it read.
    fn rebase(&mut self, cpu: usize, rec: &Record, task: u32, cpu_valid: u8) {
        let st = &mut self.cpus[cpu];
        let mut bits = cpu_valid;
        while bits != 0 {
            let s = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            st.last[s] = rec.slots[s];
            st.base_t[s] = rec.t_ns;
        }
        st.base_ok |= cpu_valid;
        if !st.have_t {
            st.base_ok = cpu_valid;
        }
        st.prev_task = task;
        st.t_last = rec.t_ns;
        st.have_t = true;
    }

    /// A userspace read of a package counter (the fallback while every CPU of the package is
    /// idle and no tick reads it). `package` is the package id; readings without
    /// enabled/running are used unscaled.
    pub fn push_package_read(&mut self, package: u32, slot: usize, t_ns: u64, value: u64) {
        self.push_package_reading(
            package,
            slot,
            t_ns,
            SlotReading {
                value,
                enabled: 0,
                running: 0,
            },
        );
    }

    /// Like [`push_package_read`](Self::push_package_read) with enabled/running (from
    /// `read()` with PERF_FORMAT_TOTAL_TIME_ENABLED|RUNNING); zero times mean "unknown".
    pub fn push_package_reading(&mut self, package: u32, slot: usize, t_ns: u64, r: SlotReading) {
        if self.t_start.is_none() {
            self.t_start = Some(t_ns);
        }
        let times = r.enabled != 0 || r.running != 0;
        if let Some(p) = self.packages.iter_mut().find(|p| p.id == package)
            && let Some(ps) = p.slots.iter_mut().find(|ps| ps.slot == slot)
        {
            ps.pending.push(Reading { t: t_ns, r, times });
        }
    }

    /// Ends the interval at `t_end_ns` and returns what it held. Package readings after
    /// `t_end_ns` (a CPU running ahead) wait for the next interval; a span is counted in the
    /// interval where it ends.
    ///
    /// Package traffic is spread only up to the point where every CPU of the package has
    /// reported what ran (at most two tick periods before `t_end_ns`: a CPU's next record
    /// still describes the time before it); the rest is counted in the next interval.
    pub fn close_interval(&mut self, t_end_ns: u64) -> IntervalResult {
        self.close(t_end_ns, false)
    }

    /// The last interval of a run: spreads everything read up to `t_end_ns`, since no record
    /// will come to describe it better.
    pub fn finish(&mut self, t_end_ns: u64) -> IntervalResult {
        self.close(t_end_ns, true)
    }

    fn close(&mut self, t_end_ns: u64, last: bool) -> IntervalResult {
        // Closed at the end the records were split at: what came after it waits for the next
        // interval; closed anywhere else (the run's end), the interval holds all of it.
        let split = !last && self.boundary == Some(t_end_ns);
        if !split {
            self.roll_after();
        }
        self.boundary = None;
        let t_start = self.t_start.unwrap_or(t_end_ns).min(t_end_ns);
        self.spread_packages(t_end_ns, last);
        let result = self.build_result(t_start, t_end_ns);
        self.t_start = Some(t_end_ns);
        self.closed_any = true;
        self.lost = 0;
        self.maybe_compact();
        self.roll_after();
        result
    }

    /// Spreads each package's counter readings up to `t_end` (the run's end when `last`) over
    /// the tasks that ran on its CPUs.
    fn spread_packages(&mut self, t_end: u64, last: bool) {
        // Out of self while spread: the steps below take the rest of self.
        let mut packages = std::mem::take(&mut self.packages);
        for p in &mut packages {
            let limit = if last {
                t_end
            } else {
                self.spread_limit(p, t_end)
            };
            // Chain each slot's readings up to the limit into spans.
            for ps in &mut p.slots {
                let carry = ps.chain_spans(limit, width_mask(self.specs[ps.slot].counter_bits));
                if carry != 0.0 {
                    // Nothing after it yet: count it without a task (it has no time to spread
                    // over) rather than lose it.
                    self.idle_acc[ps.slot] += carry;
                    p.acc[ps.slot] += carry;
                    p.idle[ps.slot] += carry;
                }
            }
        }
        let routes = self.routes(&packages);
        for (pi, p) in packages.iter_mut().enumerate() {
            if p.slots.iter().any(|ps| !ps.spans.is_empty()) {
                spread::build_events(&p.segs, &mut self.events, &mut self.scratch);
            }
            self.scratch.route.clear();
            if let Some(r) = routes.get(pi) {
                self.scratch.route.extend_from_slice(r);
            }
            self.apportion_spans(p);
            p.keep_unspread_segments(t_end);
        }
        self.scratch.route.clear();
        self.packages = packages;
    }

    /// With three or more packages a remote weight does not say whose memory it read: per
    /// target package (index), the part of each task's remote weight that goes to it (indexed
    /// by task). Estimated from the spans about to be spread: each package's traffic its own
    /// CPUs' local weights do not account for is what remote weights may claim there; each
    /// task's remote weight is divided among the packages it could have read, fitted
    /// iteratively so that no package is given more than its unexplained traffic while
    /// another can take it, preferring few targets per task (a task's memory is mostly on one
    /// package). Empty (all of it everywhere) with two packages, where it is exact, or when
    /// the weights count no bytes to compare.
    fn routes(&self, packages: &[PkgState]) -> Vec<Vec<f64>> {
        let n = packages.len();
        if n < 3 || !self.numa {
            return Vec::new();
        }
        let Some((slot, class, price)) = (0..self.specs.len()).find_map(|s| {
            let c = usize::from(self.slot_class[s]).min(MAX_CLASSES - 1);
            let price = self.accounts[s]?;
            (self.classes[c].remote != 0).then_some((s, c, price))
        }) else {
            return Vec::new();
        };
        // Rows: tasks with remote weight somewhere; supply[row][p] their weight (bytes) over
        // package p's spans.
        let mut row_of: BTreeMap<u32, usize> = BTreeMap::new();
        let mut supply: Vec<Vec<f64>> = Vec::new();
        let mut unexplained = vec![0.0f64; n];
        for (pi, p) in packages.iter().enumerate() {
            let Some(ps) = p.slots.iter().find(|ps| ps.slot == slot) else {
                continue;
            };
            let (Some(first), Some(last)) = (ps.spans.first(), ps.spans.last()) else {
                continue;
            };
            let (f0, f1) = (first.t0, last.t1);
            let counted: f64 = ps.spans.iter().map(|sp| sp.d).sum::<f64>() / price;
            let mut local = 0.0;
            for sg in &p.segs {
                let overlap = sg.end.min(f1).saturating_sub(sg.start.max(f0)) as f64;
                let w = sg.wrate[class] * overlap;
                if !sg.foreign {
                    local += w;
                } else if w > 0.0 && sg.task != IDLE {
                    let r = *row_of.entry(sg.task).or_insert_with(|| {
                        supply.push(vec![0.0; n]);
                        supply.len() - 1
                    });
                    supply[r][pi] += w;
                }
            }
            unexplained[pi] = (counted - local).max(0.0);
        }
        // x[row][p]: the part of the row's remote weight that is package p's.
        let mut x: Vec<Vec<f64>> = supply
            .iter()
            .map(|row| {
                row.iter()
                    .zip(&unexplained)
                    .map(|(&w, &u)| if w > 0.0 { u } else { 0.0 })
                    .collect()
            })
            .collect();
        let normalise = |x: &mut Vec<Vec<f64>>| {
            for (row, sup) in x.iter_mut().zip(&supply) {
                let tot: f64 = row.iter().sum();
                let could = sup.iter().filter(|&&w| w > 0.0).count().max(1) as f64;
                for (v, &w) in row.iter_mut().zip(sup) {
                    *v = if w <= 0.0 {
                        0.0
                    } else if tot > 0.0 {
                        *v / tot
                    } else {
                        1.0 / could
                    };
                }
            }
        };
        normalise(&mut x);
        for _ in 0..64 {
            // Sharpen (fewer targets per task), then cap each package at what it can take.
            for row in x.iter_mut() {
                for v in row.iter_mut() {
                    *v *= *v;
                }
            }
            normalise(&mut x);
            for p in 0..n {
                let got: f64 = x.iter().zip(&supply).map(|(r, s)| r[p] * s[p]).sum();
                if got > unexplained[p] && got > 0.0 {
                    let k = unexplained[p] / got;
                    for row in x.iter_mut() {
                        row[p] *= k;
                    }
                }
            }
            normalise(&mut x);
        }
        let ntasks = row_of.keys().next_back().map_or(0, |&t| t as usize + 1);
        (0..n)
            .map(|p| {
                let mut r = vec![1.0; ntasks];
                for (&t, &row) in &row_of {
                    r[t as usize] = x[row][p];
                }
                r
            })
            .collect()
    }

    /// How far a package's readings can be spread now: up to where every CPU whose segments
    /// weigh its traffic is known (no further back than the longest gap allowed).
    fn spread_limit(&self, p: &PkgState, t_end: u64) -> u64 {
        let floor = t_end.saturating_sub(self.max_gap_ns);
        // With remote weights every CPU's segments weigh this package's traffic.
        let cpus: &[u32] = if self.numa { &self.all_cpus } else { &p.cpus };
        cpus.iter()
            .map(|&c| {
                let known = match self.cpus.get(c as usize) {
                    Some(st) if st.have_t => st.seg_start,
                    _ => 0,
                };
                known.max(floor)
            })
            .min()
            .unwrap_or(t_end)
            .min(t_end)
    }

    /// Each slot's spans apportioned to the tasks by the segments' weights: the package's
    /// totals, the tasks' shares, and what no task took.
    fn apportion_spans(&mut self, p: &mut PkgState) {
        let nslots = self.specs.len();
        // (slot list index, class) whose weighing is in the scratch buffers: a read and a
        // write counter read at the same ticks share it, which halves the first sweep.
        let mut weighed: Option<(usize, usize)> = None;
        for (k, ps) in p.slots.iter().enumerate() {
            if ps.spans.is_empty() || ps.slot >= nslots {
                continue;
            }
            let s = ps.slot;
            let total: f64 = ps.spans.iter().map(|sp| sp.d).sum();
            p.acc[s] += total;
            let class = usize::from(self.slot_class[s]);
            let reuse = weighed.is_some_and(|(j, c)| {
                c == class && spread::same_bounds(&p.slots[j].spans, &ps.spans)
            });
            if !reuse {
                spread::weigh(&ps.spans, &p.segs, &self.events, class, &mut self.scratch);
                weighed = Some((k, class));
            }
            // Weights that account for fewer bytes than the controller counted are charged
            // their bytes; the rest no core saw.
            self.scratch.fixed_price = self.accounts[s].filter(|&price| {
                let (w, d) = spread::weighed_totals(&ps.spans, &self.scratch);
                w * price < d
            });
            let tasks = &mut self.tasks;
            let idle_before = self.idle_acc[s];
            let idle = &mut self.idle_acc[s];
            let un = spread::apportion(
                &ps.spans,
                &p.segs,
                &self.events,
                class,
                &mut self.scratch,
                |task, amount| {
                    if task == IDLE {
                        *idle += amount;
                    } else {
                        tasks.add(task, s, amount);
                    }
                },
            );
            let unseen = std::mem::take(&mut self.scratch.unseen);
            self.scratch.fixed_price = None;
            *idle += un + unseen;
            // Spans in which no CPU ran and what the weights did not see: device traffic.
            self.device_acc[s] += un + unseen;
            p.device[s] += un + unseen;
            p.idle[s] += self.idle_acc[s] - idle_before;
            // Spans priced by time although this class has weights: counted, not silent.
            let fell_back = std::mem::take(&mut self.scratch.time_fallbacks);
            if self.classes[class].local != 0 {
                self.time_fallbacks += fell_back;
            }
        }
    }

    fn build_result(&mut self, t_start: u64, t_end: u64) -> IntervalResult {
        let packages = self.take_package_rows();
        let idle_counts = rounded(&mut self.idle_acc, self.specs.len());
        let (ur, uw, ut) = bytes_of(&self.specs, &idle_counts);
        let unattributed_bytes = ur + uw + ut;
        let device_counts = rounded(&mut self.device_acc, self.specs.len());
        let (dr, dw, dt) = bytes_of(&self.specs, &device_counts);
        let device_bytes = (dr + dw + dt).min(unattributed_bytes);
        let unattributed = crate::model::result::Unattributed {
            device_bytes,
            other_bytes: unattributed_bytes - device_bytes,
        };
        let mut traffic_total = traffic_counts(&self.specs, &idle_counts);
        let rows = self.take_task_rows(&mut traffic_total);
        let basis = if crate::model::measures_bytes(&self.specs) {
            ShareBasis::Bytes(package_bytes(&packages))
        } else {
            ShareBasis::Counts(traffic_total)
        };
        let mut tasks: Vec<TaskRow> = rows
            .into_iter()
            .map(|(tc, mut row)| {
                row.share = basis.share(row.bytes(), tc);
                row
            })
            .collect();
        summary::sort_rows(&mut tasks);
        IntervalResult {
            t_start_ns: t_start,
            t_end_ns: t_end,
            source: self.source.clone(),
            packages,
            tasks,
            unattributed_bytes,
            unattributed,
            lost_samples: self.lost,
            weighting: Some(self.weighting.clone()),
            weight_fallbacks: std::mem::take(&mut self.time_fallbacks),
        }
    }

    /// Each package's row of the interval, its counts taken (the next interval starts at 0).
    fn take_package_rows(&mut self) -> Vec<PackageRow> {
        let specs = &self.specs;
        self.packages
            .iter_mut()
            .map(|p| {
                let counts = rounded(&mut p.acc, specs.len());
                let unattributed_counts = p.idle[..specs.len()]
                    .iter()
                    .map(|&v| round_count(v))
                    .collect();
                p.idle = [0.0; MAX_SLOTS];
                let device_counts = p.device[..specs.len()]
                    .iter()
                    .map(|&v| round_count(v))
                    .collect();
                p.device = [0.0; MAX_SLOTS];
                let (read_bytes, write_bytes, total_bytes) = bytes_of(specs, &counts);
                PackageRow {
                    id: p.id,
                    read_bytes,
                    write_bytes,
                    total_bytes,
                    slot_counts: counts[..specs.len()].to_vec(),
                    unattributed_counts,
                    device_counts,
                    channels: Vec::new(),
                    ..PackageRow::default()
                }
            })
            .collect()
    }

    /// The row of every task that counted anything this interval, with its traffic count (for
    /// its share, added to `traffic_total`); its counts taken.
    fn take_task_rows(&mut self, traffic_total: &mut f64) -> Vec<(f64, TaskRow)> {
        let specs = &self.specs;
        let mut rows = Vec::with_capacity(self.tasks.touched.len());
        for &ti in &self.tasks.touched {
            let Some(e) = self.tasks.entries.get_mut(ti as usize) else {
                continue;
            };
            let counts = rounded(&mut e.acc, specs.len());
            e.touched = false;
            if counts.iter().all(|&c| c == 0.0) {
                continue;
            }
            *traffic_total += traffic_counts(specs, &counts);
            rows.push((traffic_counts(specs, &counts), task_row(specs, e, &counts)));
        }
        self.tasks.touched.clear();
        rows
    }

    /// Drops tasks nothing refers to any more once the table is large, so that hours of
    /// short-lived threads do not grow it without bound.
    fn maybe_compact(&mut self) {
        let n = self.tasks.entries.len();
        if n < 4096 {
            return;
        }
        let mut keep = vec![false; n];
        for c in &self.cpus {
            if let Some(k) = keep.get_mut(c.cache_idx as usize) {
                *k = true;
            }
        }
        for p in &self.packages {
            for s in &p.segs {
                if let Some(k) = keep.get_mut(s.task as usize) {
                    *k = true;
                }
            }
        }
        for l in &self.after {
            if let Some(k) = keep.get_mut(l.task as usize) {
                *k = true;
            }
        }
        if keep.iter().filter(|&&k| k).count() * 2 > n {
            return;
        }
        let map = self.tasks.compact(&keep);
        let remap = |i: u32| map.get(i as usize).copied().unwrap_or(IDLE);
        for c in &mut self.cpus {
            c.cache_idx = remap(c.cache_idx);
        }
        for p in &mut self.packages {
            for s in &mut p.segs {
                s.task = remap(s.task);
            }
        }
        for l in &mut self.after {
            l.task = remap(l.task);
        }
    }
}

/// One weight class: the Weight slots whose deltas weigh a package's own CPUs' segments, and
/// the RemoteWeight slots whose deltas weigh the other packages' CPUs' segments (0: none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct WeightClass {
    local: u8,
    remote: u8,
}

/// The rate of a class's slots over a segment of `dt` ns, when every one of them was measured
/// over exactly that segment.
fn class_rate(
    mask: u8,
    wdelta: &[f64; MAX_SLOTS],
    w_ok: u8,
    dt: f64,
    scale: &[f64; MAX_SLOTS],
) -> Option<f64> {
    if mask == 0 || w_ok & mask != mask {
        return None;
    }
    let mut w = 0.0;
    let mut b = mask;
    while b != 0 {
        let s = b.trailing_zeros() as usize;
        w += wdelta[s] * scale[s];
        b &= b - 1;
    }
    Some(w / dt)
}

/// Weight slots of one locality, by direction.
#[derive(Default)]
struct ByDirection {
    read: u8,
    write: u8,
    undirected: u8,
    all: u8,
}

impl ByDirection {
    fn add(&mut self, s: usize, dir: Option<Direction>) {
        self.all |= 1 << s;
        match dir {
            Some(Direction::Read) => self.read |= 1 << s,
            Some(Direction::Write) => self.write |= 1 << s,
            None | Some(Direction::Total) => self.undirected |= 1 << s,
        }
    }

    /// The slots of exactly this direction.
    fn of(&self, dir: Direction) -> u8 {
        match dir {
            Direction::Read => self.read,
            Direction::Write => self.write,
            Direction::Total => self.undirected,
        }
    }

    /// The slots that weigh traffic of `dir`: those of its direction when there are any, else
    /// the undirected ones, else all.
    fn weighing(&self, dir: Direction) -> u8 {
        let fallback = if self.undirected != 0 {
            self.undirected
        } else {
            self.all
        };
        match dir {
            Direction::Read if self.read != 0 => self.read,
            Direction::Write if self.write != 0 => self.write,
            _ => fallback,
        }
    }
}

/// The weight classes of a slot list (at most [`MAX_CLASSES`] distinct ones) and, per slot, the
/// class a package slot is weighed by: for its own CPUs the Weight slots of its direction when
/// there are any, else the undirected ones, else all; for other packages' CPUs the RemoteWeight
/// slots chosen the same way.
#[allow(clippy::type_complexity)]
fn weight_classes(
    specs: &[SlotSpec],
) -> (
    [WeightClass; MAX_CLASSES],
    [u8; MAX_SLOTS],
    [Option<(u8, u8)>; MAX_CLASSES],
) {
    let (mut local, mut remote) = (ByDirection::default(), ByDirection::default());
    for (s, spec) in specs.iter().enumerate().take(MAX_SLOTS) {
        if spec.scope != SlotScope::Cpu {
            continue;
        }
        match spec.role {
            SlotRole::Weight(dir) => local.add(s, dir),
            SlotRole::RemoteWeight(dir) => remote.add(s, dir),
            _ => {}
        }
    }
    let mut classes = [WeightClass::default(); MAX_CLASSES];
    let mut slot_class = [0u8; MAX_SLOTS];
    let mut blind = [None; MAX_CLASSES];
    let mut n = 0;
    for (s, spec) in specs.iter().enumerate().take(MAX_SLOTS) {
        if spec.scope != SlotScope::Package {
            continue;
        }
        let dir = match spec.role {
            SlotRole::Traffic(d) => d,
            _ => Direction::Total,
        };
        let mut want = WeightClass {
            local: local.weighing(dir),
            remote: remote.weighing(dir),
        };
        // A weight of this direction with no remote one beside it, where the other direction
        // has both (Skylake-SP's L2 writebacks beside local and remote DRAM reads), counts the
        // CPU's traffic to every package's memory: it is split by the locality the task's
        // other-direction weights show, not stood in for by other-direction remote counts.
        let other = match dir {
            Direction::Read => Some(Direction::Write),
            Direction::Write => Some(Direction::Read),
            Direction::Total => None,
        };
        let mut blind_of = None;
        if let Some(o) = other
            && local.of(dir) != 0
            && remote.of(dir) == 0
            && local.of(o) != 0
            && remote.of(o) != 0
        {
            want.remote = 0;
            blind_of = Some((local.of(o), remote.of(o)));
        }
        // Three classes at most exist (read, write, the fallback), so a free one is found.
        let c = match classes[..n].iter().position(|&m| m == want) {
            Some(c) => c,
            None if n < MAX_CLASSES => {
                classes[n] = want;
                n += 1;
                n - 1
            }
            None => MAX_CLASSES - 1,
        };
        slot_class[s] = c as u8;
        if blind_of.is_some() {
            blind[c] = blind_of;
        }
    }
    (classes, slot_class, blind)
}

/// Per package slot: the price of one byte of weight in the slot's counts (1 / its bytes per
/// count) where every weight of its class counts bytes of the slot's direction (a total slot:
/// of any direction), so what they account for can be set against what the controller
/// counted; None elsewhere.
fn accounting(
    specs: &[SlotSpec],
    classes: &[WeightClass; MAX_CLASSES],
    slot_class: &[u8; MAX_SLOTS],
) -> [Option<f64>; MAX_SLOTS] {
    let mut out = [None; MAX_SLOTS];
    for (s, spec) in specs.iter().enumerate().take(MAX_SLOTS) {
        let (SlotScope::Package, SlotRole::Traffic(dir), Some(bpc)) =
            (spec.scope, spec.role, spec.bytes_per_count)
        else {
            continue;
        };
        let class = classes[usize::from(slot_class[s]).min(MAX_CLASSES - 1)];
        if class.local == 0 || bpc <= 0.0 {
            continue;
        }
        let mut bits = class.local | class.remote;
        let mut sized = true;
        while bits != 0 {
            let w = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let wd = match specs.get(w).map(|x| x.role) {
                Some(SlotRole::Weight(d) | SlotRole::RemoteWeight(d)) => d,
                _ => None,
            };
            let same = dir == Direction::Total || wd == Some(dir);
            sized &= same && specs.get(w).and_then(|x| x.bytes_per_count).is_some();
        }
        if sized {
            out[s] = Some(1.0 / bpc);
        }
    }
    out
}

/// A count as the results give it: whole, never negative.
fn round_count(v: f64) -> f64 {
    if v > 0.0 { v.round() } else { 0.0 }
}

/// The first `n` of `acc`, rounded, and `acc` emptied for the next interval.
fn rounded(acc: &mut [f64; MAX_SLOTS], n: usize) -> [f64; MAX_SLOTS] {
    let mut counts = [0.0; MAX_SLOTS];
    for (s, c) in counts.iter_mut().enumerate().take(n) {
        *c = round_count(acc[s]);
    }
    *acc = [0.0; MAX_SLOTS];
    counts
}

/// A task's row of the interval from its rounded counts (its share is set by the caller).
fn task_row(specs: &[SlotSpec], e: &tasks::TaskEntry, counts: &[f64; MAX_SLOTS]) -> TaskRow {
    let (read_bytes, write_bytes, total_bytes) = bytes_of(specs, counts);
    let values: BTreeMap<String, f64> = specs
        .iter()
        .enumerate()
        .map(|(s, spec)| (spec.event.clone(), counts[s]))
        .collect();
    let mut row = TaskRow {
        pid: e.key.pid,
        tgid: e.key.tgid,
        comm: e.key.comm_str(),
        cgroup: e.key.cgroup,
        read_bytes,
        write_bytes,
        total_bytes,
        share: 0.0,
        values,
        ..TaskRow::default()
    };
    // The stall pair is charged like any CPU count (its `values`), never weighs traffic.
    row.set_stalls(
        crate::model::Victims::keys(specs),
        crate::model::Victims::key(specs, crate::model::StallPart::Time),
    );
    row
}

/// (read, write, total) bytes of whole counts per slot: Traffic slots with a byte size.
pub fn bytes_of(specs: &[SlotSpec], counts: &[f64; MAX_SLOTS]) -> (u64, u64, u64) {
    let (mut r, mut w, mut t) = (0.0, 0.0, 0.0);
    for (s, spec) in specs.iter().enumerate().take(MAX_SLOTS) {
        if let (SlotRole::Traffic(dir), Some(bpc)) = (spec.role, spec.bytes_per_count) {
            let b = counts[s] * bpc;
            match dir {
                Direction::Read => r += b,
                Direction::Write => w += b,
                Direction::Total => t += b,
            }
        }
    }
    (r.round() as u64, w.round() as u64, t.round() as u64)
}

/// Sum of the Traffic slots' counts (the share basis of stand-in sources without bytes).
pub fn traffic_counts(specs: &[SlotSpec], counts: &[f64; MAX_SLOTS]) -> f64 {
    specs
        .iter()
        .enumerate()
        .take(MAX_SLOTS)
        .filter(|(_, s)| matches!(s.role, SlotRole::Traffic(_)))
        .map(|(i, _)| counts[i])
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Package;
    use imc_common::KIND_TICK;

    fn specs() -> Vec<SlotSpec> {
        vec![SlotSpec {
            event: "instructions".into(),
            scope: SlotScope::Cpu,
            role: SlotRole::Other,
            bytes_per_count: None,
            counter_bits: 64,
        }]
    }

    fn topo() -> Topology {
        Topology {
            packages: vec![Package {
                id: 0,
                cpus: vec![0],
            }],
            ..Topology::default()
        }
    }

    fn rec(t: u64, pid: u32, value: Option<u64>) -> Record {
        let mut r = Record {
            t_ns: t,
            cgroup_id: 0,
            cpu: 0,
            pid,
            tgid: pid,
            kind: KIND_TICK,
            nr_slots: 1,
            failed_mask: u8::from(value.is_none()),
            flags: 0,
            comm: [0; 16],
            t0_ns: 0,
            on_ns: 0,
            slots: [SlotReading::default(); MAX_SLOTS],
        };
        r.slots[0].value = value.unwrap_or(0);
        r
    }

    fn values(iv: &IntervalResult) -> Vec<(u32, f64)> {
        iv.tasks
            .iter()
            .map(|t| (t.pid, t.values["instructions"]))
            .collect()
    }

    #[test]
    fn wrap_and_multiplex_scaling() {
        let a = SlotReading {
            value: (1 << 48) - 10,
            enabled: 100,
            running: 50,
        };
        let b = SlotReading {
            value: 30,
            enabled: 300,
            running: 100,
        };
        // 40 counts in 50 ns of running out of 200 enabled: 160.
        assert_eq!(scaled_delta(&a, &b, width_mask(48), true), 160.0);
        assert_eq!(scaled_delta(&a, &b, width_mask(48), false), 40.0);
    }

    #[test]
    fn failed_read_between_two_tasks_loses_the_delta() {
        let mut a = Attributor::new(&specs(), &topo(), "t");
        // A record's delta belongs to its task: (1000, 2000] is task 7's, (2000, 3000] task 8's.
        a.push_tick(&rec(1000, 7, Some(100)));
        a.push_tick(&rec(2000, 7, None)); // unreadable
        a.push_tick(&rec(3000, 8, Some(400))); // 300 since 1000, over two owners: dropped
        a.push_tick(&rec(4000, 8, Some(420))); // 20 to task 8
        assert_eq!(values(&a.close_interval(5000)), [(8, 20.0)]);
    }

    #[test]
    fn failed_read_inside_one_tasks_run_keeps_the_real_delta() {
        let mut a = Attributor::new(&specs(), &topo(), "t");
        a.push_tick(&rec(1000, 7, Some(100)));
        a.push_tick(&rec(2000, 7, None));
        a.push_tick(&rec(3000, 7, Some(400))); // both readings are task 7's: 300 is exact
        assert_eq!(values(&a.close_interval(4000)), [(7, 300.0)]);
    }

    #[test]
    fn an_overlapping_smaller_package_sum_is_skipped_not_wrapped() {
        // A package slot of summed 64-bit counts: a userspace reading dated after a tick's may
        // hold a smaller sum (its counters were read around the tick). It must not count as a
        // wrap of 2^64.
        let spec = SlotSpec {
            event: "read".into(),
            scope: SlotScope::Package,
            role: SlotRole::Traffic(crate::model::Direction::Read),
            bytes_per_count: Some(1.0),
            counter_bits: 64,
        };
        let mut a = Attributor::new(&[spec], &topo(), "test");
        for (t, v) in [(1_000, 100), (2_000, 200), (3_000, 150), (4_000, 300)] {
            a.push_package_read(0, 0, t, v);
        }
        let r = a.finish(5_000);
        assert_eq!(r.packages[0].read_bytes, 200);
    }

    /// A 64-bit slot; a package slot counts 64-byte lines.
    fn slot(event: &str, scope: SlotScope, role: SlotRole) -> SlotSpec {
        SlotSpec {
            event: event.into(),
            scope,
            role,
            bytes_per_count: (scope == SlotScope::Package).then_some(64.0),
            counter_bits: 64,
        }
    }

    #[test]
    fn remote_weights_charge_another_packages_traffic_to_the_task_that_made_it() {
        // Package 0 (CPU 0) runs pid 7, which reads package 1's memory at 3 lines/µs; package 1
        // (CPU 1) runs pid 8, which reads its own at 1 line/µs. Package 0's controller sees
        // nothing; package 1's sees both.
        let specs = [
            slot(
                "read",
                SlotScope::Package,
                SlotRole::Traffic(Direction::Read),
            ),
            slot(
                "local",
                SlotScope::Cpu,
                SlotRole::Weight(Some(Direction::Read)),
            ),
            slot(
                "remote",
                SlotScope::Cpu,
                SlotRole::RemoteWeight(Some(Direction::Read)),
            ),
        ];
        let topo = Topology {
            packages: vec![
                Package {
                    id: 0,
                    cpus: vec![0],
                },
                Package {
                    id: 1,
                    cpus: vec![1],
                },
            ],
            ..Topology::default()
        };
        for numa in [true, false] {
            let specs: Vec<SlotSpec> = specs
                .iter()
                .filter(|s| numa || !matches!(s.role, SlotRole::RemoteWeight(_)))
                .cloned()
                .collect();
            let mut a = Attributor::new(&specs, &topo, "t");
            for k in 0..=100u64 {
                let t = 1_000_000 + k * 1000;
                for (cpu, pid, local, remote, pkg) in [(0, 7, 0, 3 * k, 0), (1, 8, k, 0, 4 * k)] {
                    let mut r = rec(t, pid, Some(0));
                    r.cpu = cpu;
                    r.nr_slots = specs.len() as u8;
                    r.slots[0].value = pkg;
                    r.slots[1].value = local;
                    r.slots[2].value = remote;
                    a.push_tick(&r);
                }
            }
            let iv = a.finish(1_000_000 + 100 * 1000);
            let bytes = |pid| {
                iv.tasks
                    .iter()
                    .find(|t| t.pid == pid)
                    .map_or(0, |t| t.read_bytes)
            };
            if numa {
                assert_eq!((bytes(7), bytes(8)), (300 * 64, 100 * 64), "{iv:?}");
            } else {
                // Without remote weights, package 1's traffic is all its own CPU's task's.
                assert_eq!((bytes(7), bytes(8)), (0, 400 * 64), "{iv:?}");
            }
            assert_eq!(iv.unattributed_bytes, 0);
        }
    }

    #[test]
    fn a_weight_that_did_not_run_falls_back_to_time_and_is_counted() {
        let specs = [
            slot(
                "read",
                SlotScope::Package,
                SlotRole::Traffic(Direction::Read),
            ),
            slot(
                "misses",
                SlotScope::Cpu,
                SlotRole::Weight(Some(Direction::Read)),
            ),
        ];
        let topo = Topology {
            packages: vec![Package {
                id: 0,
                cpus: vec![0, 1],
            }],
            ..Topology::default()
        };
        for multiplexed_out in [false, true] {
            let mut a = Attributor::new(&specs, &topo, "t");
            for k in 0..=100u64 {
                let t = 1_000_000 + k * 1000;
                // CPU 0's task makes 3 of every 4 lines, CPU 1's one.
                for (cpu, pid, w) in [(0, 7, 3 * k), (1, 8, k)] {
                    let mut r = rec(t, pid, Some(0));
                    r.cpu = cpu;
                    r.nr_slots = 2;
                    r.slots[0].value = 4 * k;
                    r.slots[1] = SlotReading {
                        value: w,
                        enabled: t,
                        // CPU 1's counter is scheduled out the whole time.
                        running: if multiplexed_out && cpu == 1 { 0 } else { t },
                    };
                    a.push_tick(&r);
                }
            }
            let iv = a.finish(1_000_000 + 100 * 1000);
            let bytes = |pid| {
                iv.tasks
                    .iter()
                    .find(|t| t.pid == pid)
                    .map_or(0, |t| t.read_bytes)
            };
            if multiplexed_out {
                assert!(iv.weight_fallbacks > 0, "{iv:?}");
                assert_eq!(
                    (bytes(7), bytes(8)),
                    (200 * 64, 200 * 64),
                    "by time: {iv:?}"
                );
            } else {
                assert_eq!(iv.weight_fallbacks, 0);
                assert_eq!(
                    (bytes(7), bytes(8)),
                    (300 * 64, 100 * 64),
                    "by weight: {iv:?}"
                );
            }
        }
    }

    #[test]
    fn first_record_is_a_baseline_and_idle_is_nobodys() {
        let mut a = Attributor::new(&specs(), &topo(), "t");
        a.push_tick(&rec(1000, 7, Some(1_000_000)));
        a.push_tick(&rec(2000, 0, Some(1_000_100)));
        a.push_tick(&rec(3000, 7, Some(1_000_300)));
        let iv = a.close_interval(4000);
        assert_eq!(values(&iv), [(7, 200.0)]);
        assert_eq!(iv.t_start_ns, 1000);
    }

    const MS: u64 = 1_000_000;

    /// A task's counts over a span that crosses the interval's end: the part before the end
    /// by time is the interval's, the rest the next's; whole where the end was not said.
    #[test]
    fn a_span_across_the_interval_end_is_split_by_time() {
        // A record per tick at 4 ms (HZ=250), pid 7 counting 100 per tick; the end at 10 ms
        // falls in the tick 8..12 ms.
        for split in [true, false] {
            let mut a = Attributor::new(&specs(), &topo(), "t").tick_hz(250);
            if split {
                a.split_at(10 * MS);
            }
            for k in 0..=3u64 {
                a.push_tick(&rec(k * 4 * MS, 7, Some(k * 100)));
            }
            let first = a.close_interval(10 * MS);
            a.push_tick(&rec(16 * MS, 7, Some(400)));
            let second = a.finish(16 * MS);
            let (f, s) = (values(&first), values(&second));
            if split {
                assert_eq!(f, [(7, 250.0)], "8..10 ms of 8..12 ms is half a tick's");
                assert_eq!(s, [(7, 150.0)]);
            } else {
                assert_eq!(f, [(7, 300.0)], "counted where its span ends");
                assert_eq!(s, [(7, 100.0)]);
            }
            // Nothing lost or counted twice, and each interval conserved.
            for iv in [&first, &second] {
                let tasks: f64 = values(iv).iter().map(|v| v.1).sum();
                let p = &iv.packages[0];
                assert_eq!(p.slot_counts[0], tasks + p.unattributed_counts[0], "{iv:?}");
            }
        }
    }

    /// An aggregate of a flush period `t0 .. t` across the end is split by its period's time,
    /// and the run's last interval holds everything even when an end was said.
    #[test]
    fn an_aggregate_across_the_end_is_split_and_the_last_interval_is_whole() {
        let agg = |t0: u64, t: u64, pid: u32, v: u64| {
            let mut r = rec(t, pid, Some(v));
            r.kind = KIND_AGGREGATE;
            r.t0_ns = t0;
            r.on_ns = (t - t0) / 2;
            r
        };
        let mut a = Attributor::new(&specs(), &topo(), "t").tick_hz(250);
        a.split_at(10 * MS);
        a.push_tick(&agg(4 * MS, 8 * MS, 7, 40));
        a.push_tick(&agg(8 * MS, 12 * MS, 7, 80));
        a.push_tick(&agg(8 * MS, 12 * MS, 0, 8));
        let first = a.close_interval(10 * MS);
        assert_eq!(values(&first), [(7, 80.0)]);
        // It starts where its first counts do: the first period's start, not its record.
        assert_eq!(first.t_start_ns, 4 * MS);
        assert_eq!(first.packages[0].unattributed_counts[0], 4.0);
        assert_eq!(first.packages[0].slot_counts[0], 84.0);
        a.split_at(20 * MS);
        a.push_tick(&agg(12 * MS, 16 * MS, 7, 20));
        // The run ends before the next end: its last interval takes what is left.
        let last = a.finish(16 * MS);
        assert_eq!(values(&last), [(7, 60.0)]);
        assert_eq!(last.packages[0].slot_counts[0], 64.0);
    }

    /// A package counter's span across the point it is spread to: its reading interpolated
    /// there, the part before spread now over the tasks that ran, the rest in the next
    /// interval.
    #[test]
    fn a_package_span_across_the_end_is_split_by_time() {
        let specs = [slot(
            "read",
            SlotScope::Package,
            SlotRole::Traffic(Direction::Read),
        )];
        let mut a = Attributor::new(&specs, &topo(), "t").tick_hz(250);
        // pid 7 runs throughout (ticks every 2 ms); the package is read at 0 and 12 ms only.
        for k in 0..=6u64 {
            a.push_tick(&rec(k * 2 * MS, 7, None));
        }
        a.push_package_read(0, 0, 0, 1000);
        a.push_package_read(0, 0, 12 * MS, 2200);
        let first = a.close_interval(9 * MS);
        let bytes = |iv: &IntervalResult| iv.tasks.iter().map(|t| t.read_bytes).sum::<u64>();
        assert_eq!(bytes(&first), 900 * 64, "{first:?}");
        assert_eq!(first.packages[0].read_bytes, 900 * 64);
        let last = a.finish(12 * MS);
        assert_eq!(bytes(&last), 300 * 64, "{last:?}");
        assert_eq!(last.packages[0].read_bytes, 300 * 64);
    }
}

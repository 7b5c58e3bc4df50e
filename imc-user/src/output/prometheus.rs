//! The Prometheus/OpenMetrics exposition of `imc serve`: cumulative counters built from the
//! sampling loop's intervals, encoded by `prometheus-client`.
//!
//! Families (names are a contract, the README's table in "Run it on a fleet"):
//! - `imc_dram_bytes_total{package,channel,direction,tier}`: the memory controller's counters;
//! - `imc_cgroup_dram_bytes_total{cgroup,direction}`: attributed bytes per cgroup (its path),
//!   the top N cgroups only;
//! - `imc_process_dram_bytes_total{pid,comm,cgroup,direction}`: the top N processes only;
//! - `imc_unattributed_dram_bytes_total{package,direction,tier}`: traffic no task could take;
//! - `imc_unattributed_device_dram_bytes_total{package,direction,tier}`: the part of it no core
//!   counter saw (device/DMA traffic, or what the weights do not see).
//!
//! `tier` is the memory the counter's traffic goes to: `dram` (a package's own DRAM, MCDRAM or
//! HBM) or `cxl` (a CXL memory expander), one value per counter, so it adds no series:
//! `sum without (tier)` is a package's memory traffic, `{tier="cxl"}` its CXL part.
//!
//! A counter without bytes per count (a stand-in such as page faults, or a raw `-e` event)
//! goes to the same families ending in `_events_total`, with the event in an `event` label:
//! never bytes that are not bytes. Only traffic counters are exported; weights and other
//! counters shape the attribution but are not DRAM traffic.
//!
//! `imc_dram_peak_bytes_per_second{package}` is the theoretical peak from the SMBIOS memory
//! speeds (absent where they are unknown), for utilisation.
//!
//! Where the plan counts each task's cycles stalled on memory (victims), the same top processes
//! and cgroups also have `imc_process_memory_stall_cycles_total{pid,comm,cgroup}` and
//! `imc_process_cycles_total{…}`, `imc_cgroup_memory_stall_cycles_total{cgroup}` and
//! `imc_cgroup_cycles_total{cgroup}`: core cycles, whose rates' ratio is the share of a task's
//! time it waited on memory; and `imc_process_memory_stall_seconds_total{pid,comm,cgroup}` /
//! `imc_cgroup_memory_stall_seconds_total{cgroup}`, that share of their on-CPU time, where the
//! plan also counts the CPU's time (`cpu-clock`).
//!
//! Where the plan reads the memory controller's queues (loaded latency),
//! `imc_dram_read_latency_seconds{package,channel}` and `imc_dram_write_latency_seconds{…}` are
//! gauges: the average time a read (write) waited in the channel's queue over the last
//! interval (a CCX's sampled DRAM-fill latency on AMD, `channel` `amd_l3@cpuN`). A family
//! exists only where its direction is planned, and a channel with nothing queued in an
//! interval has no sample then, never a made-up one.
//!
//! `imc_info{version,backend,source,tick,weighting}` is 1; collector health is `imc_lost_records_total`,
//! `imc_read_errors_total`, `imc_intervals_total` and the `imc_scrape_duration_seconds` and
//! `imc_drain_duration_seconds` histograms.
use crate::attribution::group_rows;
use crate::model::GroupBy;
use crate::model::result::{IntervalResult, TaskRow};
use crate::model::{Direction, Tier};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

/// A label set in a fixed order (the family's label names, then their values).
type Labels = Vec<(&'static str, String)>;
type Counters = Family<Labels, Counter>;

/// The content type of [`Exporter::encode`].
pub const OPENMETRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The content type of [`to_classic_text`].
pub const CLASSIC_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Per-process state is kept for at most this many processes (the busiest by recent traffic).
const MAX_TRACKED: usize = 4096;
/// A process with no traffic for this many intervals is forgotten unless it is exported.
const FORGET_AFTER: u64 = 300;
/// Weight of the past in a process's recent-traffic score, per interval.
const DECAY: f64 = 0.7;

/// One traffic counter of the sampler (by slot index): how it is labelled.
#[derive(Clone, Debug, PartialEq)]
pub struct SlotInfo {
    /// The event string (the key of a task's `values`).
    pub event: String,
    /// The PMU instance the counter belongs to (a memory channel for controller counters).
    pub channel: String,
    pub direction: Direction,
    pub bytes_per_count: Option<f64>,
    /// The memory tier its traffic goes to (the `tier` label).
    pub tier: crate::model::Tier,
}

/// What the exporter is told once: `imc_info`'s labels and the sampler's slots.
#[derive(Clone, Debug)]
pub struct ExportMeta {
    pub version: String,
    pub backend: String,
    pub source: String,
    pub tick: String,
    /// How package traffic is divided among tasks (`traffic`, `traffic+numa`, `cpu-time`).
    pub weighting: String,
    /// Per slot index: `Some` for a traffic counter, `None` for others (not exported).
    pub slots: Vec<Option<SlotInfo>>,
    pub max_processes: usize,
    pub max_cgroups: usize,
    /// Theoretical peak bytes/s by package id, where SMBIOS gives the memory speeds.
    pub peaks: Vec<(u32, f64)>,
    /// The plan counts each task's stalled cycles and cycles (the victims' families exist).
    pub stalls: bool,
    /// The plan reads read (write) loaded latency: its gauge family exists.
    pub latency_read: bool,
    pub latency_write: bool,
}

pub fn direction_label(d: Direction) -> &'static str {
    match d {
        Direction::Read => "read",
        Direction::Write => "write",
        Direction::Total => "total",
    }
}

/// The `cgroup` label of a task: its cgroup v2 path (`/system.slice/nginx.service`, resolved by
/// the sampling loop), else the numeric id (a cgroup gone before it was resolved, or no cgroup2
/// mount). One label per cgroup either way, so the series stay as bounded as the cgroups are.
pub fn cgroup_label(row: &TaskRow) -> String {
    row.cgroup_path
        .clone()
        .unwrap_or_else(|| row.cgroup.to_string())
}

/// One family in its two units: bytes for counters with a byte size, events for the rest.
struct Pair {
    bytes: Counters,
    events: Counters,
}

impl Pair {
    fn register(reg: &mut Registry, stem: &str, help: &str) -> Pair {
        let pair = Pair {
            bytes: Counters::default(),
            events: Counters::default(),
        };
        reg.register(
            format!("{stem}_bytes"),
            format!("{help}, in bytes"),
            pair.bytes.clone(),
        );
        reg.register(
            format!("{stem}_events"),
            format!("{help}, in counts of a stand-in or raw event (label event)"),
            pair.events.clone(),
        );
        pair
    }
}

/// One tracked key of a top-N family (a process, a cgroup): its cumulative amounts and how
/// busy it has been lately. A process is everything attributed to its pid, whatever its threads
/// are called, labelled by its main thread's name and cgroup as last seen (a process whose main
/// thread has not run yet: the first thread seen); when labels change (an exec, a move to
/// another cgroup) its series move to the new labels with the same totals.
#[derive(Default)]
struct Tracked {
    /// The key's labels (before direction and event).
    labels: Labels,
    /// Labels its series are exported under now, if exported.
    shown: Option<Labels>,
    /// Cumulative amounts by (direction, event): event is empty for bytes.
    totals: BTreeMap<(Direction, String), u64>,
    /// Cumulative stalled cycles and cycles, and seconds stalled, where the plan counts them.
    stalls: Option<[u64; 2]>,
    stall_seconds: Option<f64>,
    score: f64,
    last_seen: u64,
}

type SecondCounters = Family<Labels, Counter<f64, std::sync::atomic::AtomicU64>>;
type SecondGauges = Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>;

/// A latency gauge family (`imc_dram_read_latency_seconds`) registered where planned.
fn latency_family(reg: &mut Registry, planned: bool, what: &str) -> Option<SecondGauges> {
    if !planned {
        return None;
    }
    let f = SecondGauges::default();
    reg.register(
        format!("imc_dram_{what}_latency_seconds"),
        format!(
            "Loaded DRAM {what} latency: the average time a {what} waited in the memory \
             controller's queue over the last interval (queue occupancy / inserts at the \
             measured DRAM clock; AMD: the L3's sampled DRAM-fill latency per CCX), per package \
             and channel"
        ),
        f.clone(),
    );
    Some(f)
}

/// The victims' families of a top-N family: cycles stalled on memory and cycles, and the
/// seconds stalled (the stalled share of the on-CPU time), per key.
struct Stalls {
    stalled: Counters,
    cycles: Counters,
    seconds: SecondCounters,
}

impl Stalls {
    fn register(reg: &mut Registry, stem: &str, what: &str) -> Stalls {
        let s = Stalls {
            stalled: Counters::default(),
            cycles: Counters::default(),
            seconds: SecondCounters::default(),
        };
        reg.register(
            format!("{stem}_memory_stall_seconds"),
            format!(
                "Seconds {what} spent stalled on a memory (L3-miss) load: its stalled share of \
                 cycles times its on-CPU time"
            ),
            s.seconds.clone(),
        );
        reg.register(
            format!("{stem}_memory_stall_cycles"),
            format!("Core cycles {what} spent stalled on a memory (L3-miss) load"),
            s.stalled.clone(),
        );
        reg.register(
            format!("{stem}_cycles"),
            format!("Core cycles {what} ran (the stalls' denominator)"),
            s.cycles.clone(),
        );
        s
    }

    fn remove(&self, labels: &Labels) {
        self.stalled.remove(labels);
        self.cycles.remove(labels);
        self.seconds.remove(labels);
    }

    fn show_seconds(&self, labels: &Labels, total: f64) {
        let c = self.seconds.get_or_create(labels);
        let shown = c.get();
        if total > shown {
            c.inc_by(total - shown);
        }
    }

    fn show(&self, labels: &Labels, totals: [u64; 2]) {
        for (f, total) in [(&self.stalled, totals[0]), (&self.cycles, totals[1])] {
            let c = f.get_or_create(labels);
            let shown = c.get();
            if total > shown {
                c.inc_by(total - shown);
            }
        }
    }
}

/// The busiest keys of a family, exported; the rest only tracked, within bounds. The rule of
/// both per-process and per-cgroup series:
/// - the top `max_shown` by recent traffic (a decaying sum) with traffic in the last
///   [`FORGET_AFTER`] intervals are exported, and a key that drops out loses its series (so
///   the series count stays bounded whatever the churn);
/// - a key that comes back resumes from its total while it is still tracked;
/// - at most [`MAX_TRACKED`] keys are tracked, idle ones forgotten after [`FORGET_AFTER`].
struct Ranked<K> {
    keys: HashMap<K, Tracked>,
    max_shown: usize,
}

impl<K: std::hash::Hash + Eq + Clone + Ord> Ranked<K> {
    fn new(max_shown: usize) -> Self {
        Ranked {
            keys: HashMap::new(),
            max_shown,
        }
    }

    fn decay(&mut self) {
        for st in self.keys.values_mut() {
            st.score *= DECAY;
        }
    }

    /// Adds one interval's amounts of `key` (labels: `Some` to relabel it, else it keeps the
    /// ones it has, or gets `first` when new).
    fn add(
        &mut self,
        key: K,
        labels: Option<Labels>,
        first: impl FnOnce() -> Labels,
        amounts: Vec<(Direction, String, u64)>,
        stalls: Option<([u64; 2], Option<f64>)>,
        now: u64,
    ) {
        let fresh = !self.keys.contains_key(&key);
        let st = self.keys.entry(key).or_default();
        if let Some(l) = labels {
            st.labels = l;
        } else if fresh {
            st.labels = first();
        }
        let mut recent = 0u64;
        for (dir, event, amount) in amounts {
            *st.totals.entry((dir, event)).or_default() += amount;
            recent = recent.saturating_add(amount);
        }
        if let Some(([s, c], secs)) = stalls {
            let t = st.stalls.get_or_insert([0, 0]);
            t[0] = t[0].saturating_add(s);
            t[1] = t[1].saturating_add(c);
            if let Some(secs) = secs {
                *st.stall_seconds.get_or_insert(0.0) += secs;
            }
        }
        st.score += recent as f64;
        st.last_seen = now;
    }

    /// Exports the top keys in `pair`, removes the series of those that dropped out (or changed
    /// labels), and forgets idle keys so that the state stays bounded too.
    fn choose(&mut self, pair: &Pair, stalls: Option<&Stalls>, now: u64) {
        let mut ranked: Vec<(&K, f64)> = self
            .keys
            .iter()
            .filter(|(_, s)| s.score > 0.0 && now.saturating_sub(s.last_seen) < FORGET_AFTER)
            .map(|(k, s)| (k, s.score))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
        let top: HashSet<K> = ranked
            .iter()
            .take(self.max_shown)
            .map(|(k, _)| (*k).clone())
            .collect();
        for (key, st) in self.keys.iter_mut() {
            let wanted = top.contains(key).then(|| st.labels.clone());
            if let Some(old) = st.shown.take_if(|old| Some(&*old) != wanted.as_ref()) {
                for (dir, event) in st.totals.keys() {
                    let (f, labels) = series(pair, &old, *dir, event);
                    f.remove(&labels);
                }
                if let Some(s) = stalls {
                    s.remove(&old);
                }
            }
            let Some(labels) = wanted else {
                continue;
            };
            for ((dir, event), &total) in &st.totals {
                let (f, series) = series(pair, &labels, *dir, event);
                let c = f.get_or_create(&series);
                let shown = c.get();
                if total > shown {
                    c.inc_by(total - shown);
                }
            }
            if let (Some(s), Some(totals)) = (stalls, st.stalls) {
                s.show(&labels, totals);
                if let Some(secs) = st.stall_seconds {
                    s.show_seconds(&labels, secs);
                }
            }
            st.shown = Some(labels);
        }
        self.forget_idle(now);
    }

    fn forget_idle(&mut self, now: u64) {
        self.keys
            .retain(|_, s| s.shown.is_some() || now.saturating_sub(s.last_seen) < FORGET_AFTER);
        if self.keys.len() > MAX_TRACKED {
            let mut scores: Vec<f64> = self.keys.values().map(|s| s.score).collect();
            scores.sort_by(|a, b| b.total_cmp(a));
            let floor = scores[MAX_TRACKED - 1];
            self.keys
                .retain(|_, s| s.shown.is_some() || s.score >= floor);
        }
    }

    /// Series exported now (all directions and events).
    fn shown_series(&self) -> usize {
        self.keys
            .values()
            .filter(|s| s.shown.is_some())
            .map(|s| s.totals.len())
            .sum()
    }
}

/// The exporter's registry and the per-process state behind the top-N family.
pub struct Exporter {
    registry: Registry,
    meta: ExportMeta,
    dram: Pair,
    cgroup: Pair,
    process: Pair,
    unattributed: Pair,
    unattributed_device: Pair,
    lost: Counter,
    read_errors: Counter,
    intervals: Counter,
    scrape: Histogram,
    drain: Histogram,
    /// The victims' families of processes and cgroups, where the plan counts stalls.
    process_stalls: Option<Stalls>,
    cgroup_stalls: Option<Stalls>,
    /// Loaded latency per channel, read and write, where planned.
    latency: [Option<SecondGauges>; 2],
    /// By pid (thread group id).
    procs: Ranked<u32>,
    /// By `cgroup` label.
    cgroups: Ranked<String>,
    n_intervals: u64,
}

impl Exporter {
    pub fn new(meta: ExportMeta) -> Exporter {
        let mut registry = Registry::default();
        register_info(&mut registry, &meta);
        let [dram, cgroup, process, unattributed, unattributed_device] =
            register_traffic(&mut registry);
        let (lost, read_errors, intervals, scrape, drain) = register_health(&mut registry);
        register_peaks(&mut registry, &meta);
        let (procs, cgroups) = (
            Ranked::new(meta.max_processes),
            Ranked::new(meta.max_cgroups),
        );
        let process_stalls = meta
            .stalls
            .then(|| Stalls::register(&mut registry, "imc_process", "each top process"));
        let cgroup_stalls = meta
            .stalls
            .then(|| Stalls::register(&mut registry, "imc_cgroup", "each top cgroup"));
        let latency = [
            latency_family(&mut registry, meta.latency_read, "read"),
            latency_family(&mut registry, meta.latency_write, "write"),
        ];
        Exporter {
            registry,
            meta,
            dram,
            cgroup,
            process,
            unattributed,
            unattributed_device,
            lost,
            read_errors,
            intervals,
            scrape,
            drain,
            process_stalls,
            cgroup_stalls,
            latency,
            procs,
            cgroups,
            n_intervals: 0,
        }
    }

    /// Adds one interval to every counter and picks the processes exported from now on.
    pub fn add_interval(&mut self, r: &IntervalResult) {
        self.n_intervals += 1;
        self.add_packages(r);
        self.add_latency(r);
        let groups = group_rows(r.tasks.clone(), GroupBy::Tgid);
        self.add_cgroups(&r.tasks);
        self.add_processes(&groups, &r.tasks);
        self.procs.choose(
            &self.process,
            self.process_stalls.as_ref(),
            self.n_intervals,
        );
        self.cgroups
            .choose(&self.cgroup, self.cgroup_stalls.as_ref(), self.n_intervals);
        self.lost.inc_by(r.lost_samples);
        self.intervals.inc();
    }

    /// Failed counter reads seen in the record stream.
    pub fn add_read_errors(&self, n: u64) {
        if n > 0 {
            self.read_errors.inc_by(n);
        }
    }

    pub fn observe_drain(&self, d: Duration) {
        self.drain.observe(d.as_secs_f64());
    }

    pub fn observe_scrape(&self, d: Duration) {
        self.scrape.observe(d.as_secs_f64());
    }

    /// The OpenMetrics text of every family.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail; a label that could not be encoded would be a bug
        // here, and an empty scrape says so more plainly than a panic in a service.
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// The traffic slots, by index.
    fn traffic(&self) -> impl Iterator<Item = (usize, &SlotInfo)> {
        self.meta
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
    }

    fn add_packages(&mut self, r: &IntervalResult) {
        for p in &r.packages {
            let package = p.id.to_string();
            // Unattributed traffic is summed over channels: per direction (and event).
            let mut unattributed: BTreeMap<(Direction, String, bool, Tier), (f64, f64)> =
                BTreeMap::new();
            for (s, info) in self.traffic() {
                let counts = p.slot_counts.get(s).copied().unwrap_or(0.0);
                let idle = p.unattributed_counts.get(s).copied().unwrap_or(0.0);
                let device = p.device_counts.get(s).copied().unwrap_or(0.0);
                let (idle, device, event, is_bytes) = match info.bytes_per_count {
                    Some(b) => (idle * b, device * b, String::new(), true),
                    None => (idle, device, info.event.clone(), false),
                };
                // Each channel on its own where the loop read them, else the slot's sum.
                let mut per_channel: Vec<(String, f64)> = p
                    .channels
                    .iter()
                    .filter(|c| c.slot == s)
                    .map(|c| (c.channel.clone(), c.counts))
                    .collect();
                if per_channel.is_empty() {
                    per_channel.push((info.channel.clone(), counts));
                }
                for (channel, counts) in per_channel {
                    let amount = info.bytes_per_count.map_or(counts, |b| counts * b);
                    let mut labels = vec![
                        ("package", package.clone()),
                        ("channel", channel),
                        ("direction", direction_label(info.direction).to_string()),
                    ];
                    let family = if is_bytes {
                        &self.dram.bytes
                    } else {
                        labels.push(("event", event.clone()));
                        &self.dram.events
                    };
                    labels.push(("tier", info.tier.as_str().to_string()));
                    family.get_or_create(&labels).inc_by(whole(amount));
                }
                let e = unattributed
                    .entry((info.direction, event, is_bytes, info.tier))
                    .or_default();
                e.0 += idle;
                e.1 += device;
            }
            for ((dir, event, is_bytes, tier), (amount, device)) in unattributed {
                let mut labels = vec![
                    ("package", package.clone()),
                    ("direction", direction_label(dir).to_string()),
                ];
                let (family, device_family) = if is_bytes {
                    (&self.unattributed.bytes, &self.unattributed_device.bytes)
                } else {
                    labels.push(("event", event));
                    (&self.unattributed.events, &self.unattributed_device.events)
                };
                labels.push(("tier", tier.as_str().to_string()));
                family.get_or_create(&labels).inc_by(whole(amount));
                device_family
                    .get_or_create(&labels)
                    .inc_by(whole(device.min(amount)));
            }
        }
    }

    /// Each channel's latency of this interval; a channel without one (nothing queued, a
    /// counter that did not count) loses its sample rather than keep a stale one.
    fn add_latency(&self, r: &IntervalResult) {
        for p in &r.packages {
            for c in &p.latency_channels {
                let labels = vec![
                    ("package", p.id.to_string()),
                    ("channel", c.channel.clone()),
                ];
                for (family, ns) in self.latency.iter().zip([c.read_ns, c.write_ns]) {
                    let Some(f) = family else { continue };
                    match ns.filter(|v| v.is_finite()) {
                        Some(ns) => {
                            f.get_or_create(&labels).set(ns / 1e9);
                        }
                        None => {
                            f.remove(&labels);
                        }
                    }
                }
            }
        }
    }

    /// (direction, event, amount) of one task row: bytes per direction the source has, then
    /// each event without a byte size.
    fn amounts(&self, row: &TaskRow) -> Vec<(Direction, String, u64)> {
        let mut out = Vec::new();
        let mut dirs: Vec<Direction> = Vec::new();
        let mut events: Vec<(&str, Direction)> = Vec::new();
        for (_, info) in self.traffic() {
            if info.bytes_per_count.is_some() {
                if !dirs.contains(&info.direction) {
                    dirs.push(info.direction);
                }
            } else if !events.iter().any(|(e, _)| *e == info.event) {
                events.push((&info.event, info.direction));
            }
        }
        for d in dirs {
            let b = match d {
                Direction::Read => row.read_bytes,
                Direction::Write => row.write_bytes,
                Direction::Total => row.total_bytes,
            };
            out.push((d, String::new(), b));
        }
        for (e, d) in events {
            let v = row.values.get(e).copied().unwrap_or(0.0);
            out.push((d, e.to_string(), whole(v)));
        }
        out
    }

    /// Adds each task's traffic to its cgroup's (the busiest [`ExportMeta::max_cgroups`] are
    /// exported, as processes are; containers come and go).
    fn add_cgroups(&mut self, rows: &[TaskRow]) {
        let now = self.n_intervals;
        let mut per_cgroup: BTreeMap<String, BTreeMap<(Direction, String), u64>> = BTreeMap::new();
        let mut stalls: BTreeMap<String, ([u64; 2], Option<f64>)> = BTreeMap::new();
        for row in rows {
            let key = cgroup_label(row);
            if let Some(([s, c], secs)) = stall_amounts(row) {
                let e = stalls.entry(key.clone()).or_default();
                e.0[0] += s;
                e.0[1] += c;
                if let Some(secs) = secs {
                    *e.1.get_or_insert(0.0) += secs;
                }
            }
            let sums = per_cgroup.entry(key).or_default();
            for (dir, event, amount) in self.amounts(row) {
                *sums.entry((dir, event)).or_default() += amount;
            }
        }
        self.cgroups.decay();
        for (cgroup, sums) in per_cgroup {
            let labels = vec![("cgroup", cgroup.clone())];
            let amounts = sums.into_iter().map(|((d, e), a)| (d, e, a)).collect();
            let st = stalls.get(&cgroup).copied();
            self.cgroups
                .add(cgroup, Some(labels), Vec::new, amounts, st, now);
        }
    }

    /// Cgroup series exported now (all directions and events).
    pub fn cgroup_series_count(&self) -> usize {
        self.cgroups.shown_series()
    }

    /// `groups`: the interval's rows summed per thread group; `threads`: the rows themselves,
    /// for the main threads' names.
    fn add_processes(&mut self, groups: &[TaskRow], threads: &[TaskRow]) {
        let now = self.n_intervals;
        self.procs.decay();
        for row in groups {
            let amounts = self.amounts(row);
            let labels_of = |t: &TaskRow| {
                vec![
                    ("pid", row.tgid.to_string()),
                    ("comm", t.comm.clone()),
                    ("cgroup", cgroup_label(t)),
                ]
            };
            let main = threads
                .iter()
                .find(|t| t.pid == row.tgid && t.tgid == row.tgid)
                .map(labels_of);
            self.procs.add(
                row.tgid,
                main,
                || labels_of(row),
                amounts,
                stall_amounts(row),
                now,
            );
        }
    }

    /// Processes whose state is kept (exported or not).
    pub fn tracked_processes(&self) -> usize {
        self.procs.keys.len()
    }
}

/// The family and labels of one series of a top-N family: the key's labels, then direction
/// (and the event, for a count that is not bytes).
fn series<'a>(
    family: &'a Pair,
    key: &Labels,
    dir: Direction,
    event: &str,
) -> (&'a Counters, Labels) {
    let mut labels = key.clone();
    labels.push(("direction", direction_label(dir).to_string()));
    if event.is_empty() {
        (&family.bytes, labels)
    } else {
        labels.push(("event", event.to_string()));
        (&family.events, labels)
    }
}

/// A row's stalled cycles and cycles as whole counts, and its seconds stalled, where the plan
/// counts them.
fn stall_amounts(row: &TaskRow) -> Option<([u64; 2], Option<f64>)> {
    let secs = row.stall_seconds.filter(|s| s.is_finite() && *s >= 0.0);
    Some(([whole(row.stall_cycles?), whole(row.cycles?)], secs))
}

/// A non-negative amount as a whole count (amounts are sums of whole counts already; this
/// only guards against rounding noise and negative values).
fn whole(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 {
        v.round() as u64
    } else {
        0
    }
}

/// The same exposition in Prometheus's classic text format (version 0.0.4), for scrapers and
/// linters that do not read OpenMetrics (Debian's `promtool check metrics` among them). The two
/// differ, for what this exporter writes, in three ways: a counter family is named with its
/// `_total` suffix in HELP and TYPE, there is no `# UNIT` line and no `# EOF` line.
pub fn to_classic_text(openmetrics: &str) -> String {
    let counters: HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 64);
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                if counters.contains(name) {
                    out.push_str(&format!("{prefix}{name}_total {tail}"));
                } else {
                    out.push_str(line);
                }
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Whether an HTTP `Accept` header asks for OpenMetrics (Prometheus's scraper does).
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("application/openmetrics-text"))
}

/// `imc_info`: what imc measures, as one gauge set to 1.
fn register_info(registry: &mut Registry, meta: &ExportMeta) {
    let info = Family::<Labels, Gauge>::default();
    info.get_or_create(&vec![
        ("version", meta.version.clone()),
        ("backend", meta.backend.clone()),
        ("source", meta.source.clone()),
        ("tick", meta.tick.clone()),
        ("weighting", meta.weighting.clone()),
    ])
    .set(1);
    registry.register(
        "imc_info",
        "What imc measures: version, backend, source of the counts, tick source and how traffic is divided among tasks",
        info,
    );
}

/// The traffic families, read and write each: the packages' channels, cgroups, top processes,
/// the unattributed and its device part.
fn register_traffic(registry: &mut Registry) -> [Pair; 5] {
    [
        Pair::register(
            registry,
            "imc_dram",
            "Memory-controller traffic per package, channel and direction",
        ),
        Pair::register(
            registry,
            "imc_cgroup_dram",
            "Traffic attributed to each cgroup",
        ),
        Pair::register(
            registry,
            "imc_process_dram",
            "Traffic attributed to each of the top processes by recent traffic",
        ),
        Pair::register(
            registry,
            "imc_unattributed_dram",
            "Traffic no task could take (DMA, idle CPUs, the controller's own)",
        ),
        Pair::register(
            registry,
            "imc_unattributed_device_dram",
            "The part of the unattributed traffic no core counter saw: device (DMA) traffic, or what the weights do not see",
        ),
    ]
}

/// imc's own health: lost records, failed reads, intervals, and the time of a scrape and of a
/// drain.
fn register_health(registry: &mut Registry) -> (Counter, Counter, Counter, Histogram, Histogram) {
    let lost = Counter::default();
    registry.register(
        "imc_lost_records",
        "Sampler records the kernel dropped (ring buffer full)",
        lost.clone(),
    );
    let read_errors = Counter::default();
    registry.register(
        "imc_read_errors",
        "Counter reads that failed at a tick (the delta across them is dropped)",
        read_errors.clone(),
    );
    let intervals = Counter::default();
    registry.register(
        "imc_intervals",
        "Intervals closed and added to these counters",
        intervals.clone(),
    );
    let scrape = Histogram::new(exponential_buckets(0.0001, 4.0, 8));
    registry.register(
        "imc_scrape_duration_seconds",
        "Time to encode one scrape of /metrics",
        scrape.clone(),
    );
    let drain = Histogram::new(exponential_buckets(0.00005, 4.0, 8));
    registry.register(
        "imc_drain_duration_seconds",
        "Time of one drain of the sampler's rings into the attribution",
        drain.clone(),
    );
    (lost, read_errors, intervals, scrape, drain)
}

/// `imc_dram_peak_bytes_per_second`: each package's theoretical peak, set once.
fn register_peaks(registry: &mut Registry, meta: &ExportMeta) {
    let peak = Family::<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    registry.register(
        "imc_dram_peak_bytes_per_second",
        "Theoretical peak DRAM bandwidth of each package, from the SMBIOS memory speeds",
        peak.clone(),
    );
    for (package, bytes) in &meta.peaks {
        peak.get_or_create(&vec![("package", package.to_string())])
            .set(*bytes);
    }
}

#[cfg(test)]
mod tests;

//! The interval loop of `imc stat` and the per-interval aggregate.
//!
//! Deadlines are absolute (start + k × interval on CLOCK_MONOTONIC) so intervals do not drift;
//! each interval runs from one counter read to the next, timestamped at the read, and rates
//! divide by that real elapsed time, so a late wake-up yields a longer interval, never an
//! inflated rate. A wake-up later than a whole interval skips the missed deadlines rather than
//! producing a burst of near-empty intervals. Everything the loop touches per interval is
//! preallocated.
use super::clock::{Clock, Wake};
use super::counter::{Delta, delta};
use super::{Backend, CounterFailure, CounterSpec, Memory, RawReading};
use crate::model::{Direction, Scope};

/// Bytes of one row (a package, a package's memory kind, or a channel) in one interval.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Bytes {
    pub read: f64,
    pub write: f64,
    /// Traffic from events that count both directions together.
    pub total_only: f64,
}

impl Bytes {
    pub fn total(&self) -> f64 {
        self.read + self.write + self.total_only
    }
    fn add(&mut self, direction: Direction, bytes: f64) {
        match direction {
            Direction::Read => self.read += bytes,
            Direction::Write => self.write += bytes,
            Direction::Total => self.total_only += bytes,
        }
    }
}

/// One package's rows in `imc stat`'s output: its memories and its channels (the sampling
/// pipeline's per-interval package figures are [`crate::model::PackageRow`]).
#[derive(Clone, Debug, PartialEq)]
pub struct PackageLayout {
    pub id: u32,
    /// The memory kinds of this package with their channels, in order (KNL: DDR then MCDRAM).
    pub memories: Vec<Memory>,
    /// Channel rows: (memory, PMU instance name).
    pub channels: Vec<(Memory, String)>,
    /// Theoretical peak in bytes/s, where imc can know it.
    pub peak_bytes_per_s: Option<f64>,
    /// Theoretical peak of one channel row, where imc can know it.
    pub channel_peak_bytes_per_s: Option<f64>,
}

/// The distinct `values` keys in first-appearance order, and each counter's index in them.
fn value_keys_of(counters: &[CounterSpec]) -> (Vec<String>, Vec<usize>) {
    let mut value_keys: Vec<String> = Vec::new();
    let mut value_of = Vec::with_capacity(counters.len());
    for c in counters {
        let v = match value_keys.iter().position(|k| *k == c.event) {
            Some(v) => v,
            None => {
                value_keys.push(c.event.clone());
                value_keys.len() - 1
            }
        };
        value_of.push(v);
    }
    (value_keys, value_of)
}

/// The package a counter's row belongs to (a CPU counter without one: package 0).
fn package_id(c: &CounterSpec) -> u32 {
    c.package.unwrap_or(match c.scope {
        Scope::Package(p) | Scope::Channel { package: p, .. } => p,
        Scope::Cpu(_) => 0,
    })
}

/// Bandwidth counters go to their package rows, with their memory kinds and channels; packages
/// sorted by id for stable output.
fn package_rows(counters: &[CounterSpec]) -> Vec<PackageLayout> {
    let mut packages: Vec<PackageLayout> = Vec::new();
    for c in counters {
        if c.direction.is_none() || c.bytes_per_count.is_none() {
            continue;
        }
        let id = package_id(c);
        let row = match packages.iter().position(|p| p.id == id) {
            Some(r) => r,
            None => {
                packages.push(PackageLayout {
                    id,
                    memories: Vec::new(),
                    channels: Vec::new(),
                    peak_bytes_per_s: None,
                    channel_peak_bytes_per_s: None,
                });
                packages.len() - 1
            }
        };
        let p = &mut packages[row];
        if !p.memories.contains(&c.memory) {
            p.memories.push(c.memory);
        }
        let ch = (c.memory, c.pmu.clone());
        if !p.channels.contains(&ch) {
            p.channels.push(ch);
        }
    }
    packages.sort_by_key(|p| p.id);
    for p in &mut packages {
        p.memories.sort();
        p.channels.sort_by_key(|c| c.0);
    }
    packages
}

/// Where a bandwidth counter's bytes go: (package row, memory index in that row, channel index).
fn place_of(c: &CounterSpec, packages: &[PackageLayout]) -> Option<(usize, usize, usize)> {
    c.direction?;
    c.bytes_per_count?;
    let id = package_id(c);
    let row = packages.iter().position(|p| p.id == id)?;
    let m = packages[row].memories.iter().position(|m| *m == c.memory)?;
    let ch = packages[row]
        .channels
        .iter()
        .position(|(mm, pmu)| *mm == c.memory && *pmu == c.pmu)?;
    Some((row, m, ch))
}

/// How counters map onto rows and values; built once.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub source: String,
    pub packages: Vec<PackageLayout>,
    /// Distinct `values` keys, in first-appearance order.
    pub value_keys: Vec<String>,
    /// Per counter: (package row, memory index in that row, channel index) for bandwidth
    /// counters.
    slots: Vec<Option<(usize, usize, usize)>>,
    /// Per counter: index into `value_keys`.
    value_of: Vec<usize>,
    /// Per counter: its description for messages.
    pub describe: Vec<String>,
    /// Why no package has a peak, when imc could not know it (shown instead of utilisation).
    pub peak_unknown: Option<String>,
    /// Per counter: its sub-channel and bytes (direction, bytes per count), where channels have
    /// sub-channels (Granite Rapids); empty elsewhere.
    sub_of: Vec<Option<(u32, Direction, f64)>>,
}

impl Layout {
    pub fn new(backend: &dyn Backend) -> Layout {
        let counters = backend.counters();
        let (value_keys, value_of) = value_keys_of(counters);
        let packages = package_rows(counters);
        let slots = counters.iter().map(|c| place_of(c, &packages)).collect();
        Layout {
            source: backend.source().to_string(),
            packages,
            value_keys,
            slots,
            value_of,
            describe: counters.iter().map(|c| c.describe()).collect(),
            peak_unknown: None,
            sub_of: if counters.iter().any(|c| c.sub_channel.is_some()) {
                counters
                    .iter()
                    .map(|c| Some((c.sub_channel?, c.direction?, c.bytes_per_count?)))
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    /// Whether channels have sub-channels here.
    pub fn has_sub_channels(&self) -> bool {
        self.sub_of.iter().any(Option::is_some)
    }

    /// The bytes of each sub-channel of channel `ch` of package row `row` in this interval, by
    /// sub-channel number (empty where channels have none): they sum to the channel's.
    pub fn sub_channel_bytes(
        &self,
        r: &IntervalReport,
        row: usize,
        ch: usize,
    ) -> Vec<(u32, Bytes)> {
        let mut out: Vec<(u32, Bytes)> = Vec::new();
        for (i, sub) in self.sub_of.iter().enumerate() {
            let (Some((s, dir, bpc)), Some(Some((prow, _, pch)))) = (sub, self.slots.get(i)) else {
                continue;
            };
            if (*prow, *pch) != (row, ch) {
                continue;
            }
            let Some(Some(n)) = r.counts.get(i) else {
                continue;
            };
            let at = match out.iter().position(|(x, _)| x == s) {
                Some(k) => k,
                None => {
                    out.push((*s, Bytes::default()));
                    out.len() - 1
                }
            };
            out[at].1.add(*dir, n * bpc);
        }
        out.sort_by_key(|(s, _)| *s);
        out
    }

    /// A report sized for this layout, reused for every interval.
    pub fn new_report(&self) -> IntervalReport {
        IntervalReport {
            t_start_ns: 0,
            t_end_ns: 0,
            packages: self
                .packages
                .iter()
                .map(|p| PackageBytes {
                    bytes: Bytes::default(),
                    memories: vec![Bytes::default(); p.memories.len()],
                    channels: vec![Bytes::default(); p.channels.len()],
                })
                .collect(),
            values: vec![0.0; self.value_keys.len()],
            value_fraction: vec![1.0; self.value_keys.len()],
            value_counted: vec![false; self.value_keys.len()],
            missing: Vec::with_capacity(self.slots.len()),
            multiplexed: false,
            counts: vec![None; self.slots.len()],
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct PackageBytes {
    pub bytes: Bytes,
    pub memories: Vec<Bytes>,
    pub channels: Vec<Bytes>,
}

/// One interval's numbers, indexed like its `Layout`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IntervalReport {
    pub t_start_ns: u64,
    pub t_end_ns: u64,
    pub packages: Vec<PackageBytes>,
    /// Sum of each `values` key over its counters, scaled for multiplexing and by `.scale`.
    pub values: Vec<f64>,
    /// Smallest running/enabled fraction among each key's counters (1.0: not multiplexed).
    pub value_fraction: Vec<f64>,
    /// Whether any counter of the key counted in this interval.
    pub value_counted: Vec<bool>,
    /// Counters that did not count in this interval (indices into the backend's counters).
    pub missing: Vec<usize>,
    /// Whether any counter was multiplexed (scaled) in this interval.
    pub multiplexed: bool,
    /// Each counter's own count in this interval, scaled for multiplexing but not by `.scale`
    /// (None: it did not count): what per-channel figures beyond the channel's bytes
    /// (sub-channels, `stat --latency`) are made of.
    pub counts: Vec<Option<f64>>,
}

impl IntervalReport {
    pub fn elapsed_ns(&self) -> u64 {
        self.t_end_ns.saturating_sub(self.t_start_ns)
    }

    /// Per-second rate of `bytes` over this interval's real elapsed time.
    pub fn rate(&self, bytes: f64) -> f64 {
        let ns = self.elapsed_ns();
        if ns == 0 {
            0.0
        } else {
            bytes * 1e9 / ns as f64
        }
    }

    /// Fills the report from two consecutive readings.
    pub fn compute(
        &mut self,
        layout: &Layout,
        counters: &[CounterSpec],
        prev: &[RawReading],
        now: &[RawReading],
        t_start_ns: u64,
        t_end_ns: u64,
    ) {
        self.t_start_ns = t_start_ns;
        self.t_end_ns = t_end_ns;
        for p in &mut self.packages {
            p.bytes = Bytes::default();
            p.memories.iter_mut().for_each(|b| *b = Bytes::default());
            p.channels.iter_mut().for_each(|b| *b = Bytes::default());
        }
        self.values.iter_mut().for_each(|v| *v = 0.0);
        self.value_fraction.iter_mut().for_each(|v| *v = 1.0);
        self.value_counted.iter_mut().for_each(|v| *v = false);
        self.missing.clear();
        self.multiplexed = false;
        self.counts.iter_mut().for_each(|v| *v = None);
        for (i, c) in counters.iter().enumerate() {
            let (Some(p), Some(n)) = (prev.get(i), now.get(i)) else {
                continue;
            };
            let d: Delta = delta(p, n, c.counter_bits);
            if !d.counted {
                self.missing.push(i);
                continue;
            }
            if d.running_fraction < 1.0 {
                self.multiplexed = true;
            }
            let v = layout.value_of[i];
            if let Some(slot) = self.counts.get_mut(i) {
                *slot = Some(d.count);
            }
            self.values[v] += d.count * c.scale;
            self.value_counted[v] = true;
            if d.running_fraction < self.value_fraction[v] {
                self.value_fraction[v] = d.running_fraction;
            }
            if let (Some((row, m, ch)), Some(dir), Some(bpc)) =
                (layout.slots[i], c.direction, c.bytes_per_count)
            {
                let bytes = d.count * bpc;
                let pkg = &mut self.packages[row];
                pkg.bytes.add(dir, bytes);
                pkg.memories[m].add(dir, bytes);
                pkg.channels[ch].add(dir, bytes);
            }
        }
    }
}

/// Where `imc stat`'s intervals go (the sampling pipeline, above, has a `Sink` of its own).
pub trait StatSink {
    fn interval(&mut self, layout: &Layout, report: &IntervalReport) -> std::io::Result<()>;
    /// Called after each interval (woken mode) or each batch of intervals (kernel-timed mode).
    fn flush(&mut self) -> std::io::Result<()>;
}

impl<F: FnMut(&Layout, &IntervalReport) -> std::io::Result<()>> StatSink for F {
    fn interval(&mut self, layout: &Layout, report: &IntervalReport) -> std::io::Result<()> {
        self(layout, report)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// When the loop stops besides its duration.
pub trait Stop {
    /// Checked after every wake-up: true ends the run after one last (partial) interval.
    fn stop(&mut self) -> bool;
}

impl<F: FnMut() -> bool> Stop for F {
    fn stop(&mut self) -> bool {
        self()
    }
}

/// Longest sleep between two looks at the stop condition: bounds how long a stop signal that
/// arrives just before a long sleep goes unnoticed.
pub const STOP_CHECK_NS: u64 = 50_000_000;

/// What the run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunSummary {
    pub intervals: u64,
    /// Deadlines skipped because a wake-up came later than a whole interval.
    pub skipped: u64,
    pub t_start_ns: u64,
    pub t_end_ns: u64,
}

/// Reads all counters and returns the read's timestamp: the midpoint of the clock around the
/// read, so the timestamp sits where the counters were sampled.
fn timed_read(backend: &mut dyn Backend, clock: &dyn Clock, out: &mut [RawReading]) -> u64 {
    let a = clock.now_ns();
    backend.read(out);
    let b = clock.now_ns();
    a + (b.saturating_sub(a)) / 2
}

/// Runs intervals of `interval_ns` until `duration_ns` has passed (None: until `stop`), calling
/// `sink` with every interval and `failed` with each counter failure as it happens. `layout` is
/// `Layout::new(backend)`, possibly with peaks filled in.
#[allow(clippy::too_many_arguments)]
pub fn run(
    backend: &mut dyn Backend,
    clock: &dyn Clock,
    layout: &Layout,
    interval_ns: u64,
    duration_ns: Option<u64>,
    stop: &mut dyn Stop,
    sink: &mut dyn StatSink,
    failed: &mut dyn FnMut(&CounterFailure),
) -> std::io::Result<RunSummary> {
    let interval_ns = interval_ns.max(1);
    let timed = backend.timed_period();
    let r = StatRun {
        backend,
        clock,
        layout,
        duration_ns,
        stop,
        sink,
        failed,
    };
    match timed {
        Some(period) => run_timed(r, period),
        None => run_woken(r, interval_ns),
    }
}

/// What both loops of [`run`] work with: the counters, the clock, where the intervals go.
struct StatRun<'a> {
    backend: &'a mut dyn Backend,
    clock: &'a dyn Clock,
    layout: &'a Layout,
    duration_ns: Option<u64>,
    stop: &'a mut dyn Stop,
    sink: &'a mut dyn StatSink,
    failed: &'a mut dyn FnMut(&CounterFailure),
}

/// The loop for backends imc reads itself: it wakes at every interval boundary (and between
/// them to poll counters too narrow to go a whole interval unread) and reads every counter.
fn run_woken(r: StatRun<'_>, interval_ns: u64) -> std::io::Result<RunSummary> {
    let counters = r.backend.counters().to_vec();
    let mut report = r.layout.new_report();
    let n = r.backend.counters().len();
    let mut prev = vec![RawReading::default(); n];
    let mut now = vec![RawReading::default(); n];
    // Counters already reported missing, so each stop is reported once.
    let mut reported_missing = vec![false; n];
    let poll_ns = r
        .backend
        .poll_period()
        .map(|d| (d.as_nanos() as u64).max(1));

    let start = timed_read(r.backend, r.clock, &mut prev);
    for f in r.backend.take_failures() {
        (r.failed)(&f);
    }
    let end_at = r.duration_ns.map(|d| start.saturating_add(d));
    let mut summary = RunSummary {
        t_start_ns: start,
        t_end_ns: start,
        ..RunSummary::default()
    };
    let mut t_prev = start;
    let mut last_poll = start;
    let mut k: u64 = 1;
    loop {
        let next = start.saturating_add(k.saturating_mul(interval_ns));
        let target = end_at.map_or(next, |e| e.min(next));
        let stopping = sleep_to_target(
            r.backend,
            r.clock,
            r.stop,
            target,
            t_prev,
            poll_ns,
            &mut last_poll,
        );
        let t = timed_read(r.backend, r.clock, &mut now);
        last_poll = t;
        for f in r.backend.take_failures() {
            (r.failed)(&f);
        }
        if t > t_prev {
            report.compute(r.layout, &counters, &prev, &now, t_prev, t);
            report_missing(
                &report,
                r.layout,
                &prev,
                &now,
                &mut reported_missing,
                r.failed,
            );
            r.sink.interval(r.layout, &report)?;
            r.sink.flush()?;
            summary.intervals += 1;
            std::mem::swap(&mut prev, &mut now);
            t_prev = t;
            summary.t_end_ns = t;
        }
        if stopping || end_at.is_some_and(|e| t >= e) {
            break;
        }
        k = next_boundary(t, start, interval_ns, k, &mut summary.skipped);
    }
    Ok(summary)
}

/// Sleeps to `target`, waking early only to poll narrow counters (every `poll_ns`, the last
/// poll at `last_poll`) and to notice a stop whose signal slipped in just before the sleep.
/// Returns whether the run is stopping.
fn sleep_to_target(
    backend: &mut dyn Backend,
    clock: &dyn Clock,
    stop: &mut dyn Stop,
    target: u64,
    t_prev: u64,
    poll_ns: Option<u64>,
    last_poll: &mut u64,
) -> bool {
    let mut t_now = t_prev;
    loop {
        if stop.stop() {
            return true;
        }
        let mut wake_at = target.min(t_now.saturating_add(STOP_CHECK_NS));
        if let Some(p) = poll_ns {
            wake_at = wake_at.min(last_poll.saturating_add(p));
        }
        let woke = clock.sleep_until(wake_at);
        t_now = clock.now_ns();
        if t_now >= target {
            return false;
        }
        if woke == Wake::Deadline && poll_ns.is_some_and(|p| t_now >= *last_poll + p) {
            backend.poll();
            *last_poll = t_now;
        }
    }
}

/// The next boundary (k since `start`) strictly after `t`: a wake-up later than a whole
/// interval skips the deadlines it missed, counted in `skipped`.
fn next_boundary(t: u64, start: u64, interval_ns: u64, k: u64, skipped: &mut u64) -> u64 {
    let behind = (t - start) / interval_ns + 1;
    if behind > k + 1 {
        *skipped += behind - (k + 1);
    }
    (k + 1).max(behind)
}

/// Reports newly missing counters once each.
fn report_missing(
    report: &IntervalReport,
    layout: &Layout,
    prev: &[RawReading],
    now: &[RawReading],
    reported: &mut [bool],
    failed: &mut dyn FnMut(&CounterFailure),
) {
    for &i in &report.missing {
        // Only a counter whose time_enabled stopped was turned off: one with no running time
        // was stopped for a while (a throttle) or never got a counter, and JSON lists it under
        // `missing` for that interval.
        let turned_off = now[i].enabled == prev[i].enabled;
        if !reported[i] && prev[i].ok && now[i].ok && turned_off {
            failed(&CounterFailure {
                counter: Some(i),
                message: format!(
                    "{} is not counting (disabled by the kernel: its CPU went offline?)",
                    layout.describe[i]
                ),
            });
            reported[i] = true;
        }
    }
}

/// The loop for kernel-timed backends: the kernel samples the counters at every boundary; imc
/// sleeps until the backend's next wake-up and turns the boundaries into intervals. Stopping
/// early (signal, child exit) or a duration that is not a whole number of intervals ends with
/// one direct read for the last, partial interval.
fn run_timed(r: StatRun<'_>, interval_ns: u64) -> std::io::Result<RunSummary> {
    let mut run = TimedRun::new(
        r.layout,
        r.backend.counters().to_vec(),
        r.duration_ns.map(|d| d / interval_ns),
    );
    let t_open = r.clock.now_ns();
    let mut next_wake = t_open;
    let mut last_flush = t_open;
    loop {
        let Some(stopping) = sleep_to_wake(r.clock, r.stop, next_wake) else {
            continue;
        };
        next_wake = r
            .backend
            .advance_timed(r.clock, run.final_k(), &mut |k, t, readings| {
                run.boundary(k, t, readings, &mut *r.sink, &mut *r.failed)
            });
        if let Some(e) = run.err.take() {
            return Err(e);
        }
        // While a watched group makes imc wake at every boundary, the output still goes out
        // once per collect period: one write per 10 ms instead of one per interval.
        let t = r.clock.now_ns();
        if run.done
            || stopping
            || t >= last_flush.saturating_add(crate::counting::timed::COLLECT_NS)
        {
            r.sink.flush()?;
            last_flush = t;
        }
        for f in r.backend.take_failures() {
            (r.failed)(&f);
        }
        // Safety net: counters that stopped delivering must not keep a --duration run alive.
        let overdue = r.duration_ns.is_some_and(|d| {
            r.clock.now_ns()
                > t_open
                    .saturating_add(d)
                    .saturating_add(interval_ns + 1_000_000_000)
        });
        if run.done || stopping || overdue {
            break;
        }
    }
    r.sink.flush()?;
    if let Some(end) = run.last_end(r.clock, interval_ns, r.duration_ns) {
        run.last_interval(r.backend, r.clock, r.stop, end, r.sink)?;
    }
    Ok(run.summary)
}

/// Sleeps to the backend's wake-up, looking at the stop condition at least every
/// STOP_CHECK_NS so a signal that slipped in just before the sleep is not missed. Returns
/// whether the run is stopping, or None when it is not and the wake-up is still ahead.
fn sleep_to_wake(clock: &dyn Clock, stop: &mut dyn Stop, next_wake: u64) -> Option<bool> {
    if stop.stop() {
        return Some(true);
    }
    let now = clock.now_ns();
    if now < next_wake {
        clock.sleep_until(next_wake.min(now.saturating_add(STOP_CHECK_NS)));
    }
    let stopping = stop.stop();
    if !stopping && clock.now_ns() < next_wake {
        return None;
    }
    Some(stopping)
}

/// What [`run_timed`] carries from one of the kernel's boundaries to the next.
struct TimedRun<'a> {
    layout: &'a Layout,
    counters: Vec<CounterSpec>,
    report: IntervalReport,
    prev: Vec<RawReading>,
    reported_missing: Vec<bool>,
    /// Whole intervals in --duration.
    full: Option<u64>,
    summary: RunSummary,
    /// (k of the first boundary, k of the previous one), once the first sample is in.
    ks: Option<(u64, u64)>,
    t_prev: u64,
    /// --duration's whole intervals are all out.
    done: bool,
    /// The sink failed: the run ends with this.
    err: Option<std::io::Error>,
}

impl<'a> TimedRun<'a> {
    fn new(layout: &'a Layout, counters: Vec<CounterSpec>, full: Option<u64>) -> TimedRun<'a> {
        let n = counters.len();
        TimedRun {
            layout,
            counters,
            report: layout.new_report(),
            prev: vec![RawReading::default(); n],
            reported_missing: vec![false; n],
            full,
            summary: RunSummary::default(),
            ks: None,
            t_prev: 0,
            done: false,
            err: None,
        }
    }

    /// The boundary that ends --duration's last whole interval, once the first is known.
    fn final_k(&self) -> Option<u64> {
        match (self.ks, self.full) {
            (Some((k0, _)), Some(f)) => Some(k0.saturating_add(f)),
            _ => None,
        }
    }

    /// Boundary `k` sampled at `t`: the first is the baseline; each later one closes the
    /// interval since the previous and hands it to the sink.
    fn boundary(
        &mut self,
        k: u64,
        t: u64,
        readings: &[RawReading],
        sink: &mut dyn StatSink,
        failed: &mut dyn FnMut(&CounterFailure),
    ) {
        if self.done || self.err.is_some() {
            return;
        }
        let Some((k0, kp)) = self.ks else {
            self.prev.copy_from_slice(readings);
            self.t_prev = t;
            self.summary.t_start_ns = t;
            self.summary.t_end_ns = t;
            self.ks = Some((k, k));
            return;
        };
        if t <= self.t_prev {
            return;
        }
        let layout = self.layout;
        self.report
            .compute(layout, &self.counters, &self.prev, readings, self.t_prev, t);
        report_missing(
            &self.report,
            layout,
            &self.prev,
            readings,
            &mut self.reported_missing,
            failed,
        );
        if let Err(e) = sink.interval(layout, &self.report) {
            self.err = Some(e);
            return;
        }
        self.summary.intervals += 1;
        self.summary.skipped += k.saturating_sub(kp + 1);
        self.summary.t_end_ns = t;
        self.prev.copy_from_slice(readings);
        self.t_prev = t;
        self.ks = Some((k0, k));
        if self.full.is_some_and(|f| k.saturating_sub(k0) >= f) {
            self.done = true;
        }
    }

    /// Where the last, partial interval ends: at the end of --duration when that is not a
    /// whole number of intervals, or now when stopped early; None without one (or without
    /// any sample).
    fn last_end(
        &self,
        clock: &dyn Clock,
        interval_ns: u64,
        duration_ns: Option<u64>,
    ) -> Option<u64> {
        self.ks?;
        match (self.done, duration_ns) {
            (true, Some(d)) if d % interval_ns != 0 => {
                Some(self.summary.t_start_ns.saturating_add(d))
            }
            (true, _) => None,
            (false, _) => Some(clock.now_ns()),
        }
    }

    /// The last, partial interval up to `end`, read directly from the counters.
    fn last_interval(
        &mut self,
        backend: &mut dyn Backend,
        clock: &dyn Clock,
        stop: &mut dyn Stop,
        end: u64,
        sink: &mut dyn StatSink,
    ) -> std::io::Result<()> {
        while clock.now_ns() < end {
            if clock.sleep_until(end) == Wake::Interrupted && stop.stop() {
                break;
            }
        }
        let mut now = vec![RawReading::default(); self.counters.len()];
        let t = timed_read(backend, clock, &mut now);
        if t > self.t_prev {
            self.report.compute(
                self.layout,
                &self.counters,
                &self.prev,
                &now,
                self.t_prev,
                t,
            );
            sink.interval(self.layout, &self.report)?;
            sink.flush()?;
            self.summary.intervals += 1;
            self.summary.t_end_ns = t;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counting::{CounterSpec, Memory};
    use std::cell::Cell;

    /// A clock whose wake-ups are late by a scripted amount.
    struct LateClock {
        now: Cell<u64>,
        lateness: Vec<u64>,
        wakes: Cell<usize>,
    }

    impl Clock for LateClock {
        fn now_ns(&self) -> u64 {
            self.now.get()
        }
        fn sleep_until(&self, deadline: u64) -> Wake {
            let i = self.wakes.get();
            self.wakes.set(i + 1);
            let late = self.lateness.get(i).copied().unwrap_or(0);
            self.now.set(self.now.get().max(deadline) + late);
            Wake::Deadline
        }
    }

    /// A counter advancing at exactly 1 count per ns of the clock.
    struct ClockCounter<'a> {
        clock: &'a LateClock,
        specs: Vec<CounterSpec>,
    }

    impl Backend for ClockCounter<'_> {
        fn source(&self) -> &str {
            "test"
        }
        fn counters(&self) -> &[CounterSpec] {
            &self.specs
        }
        fn read(&mut self, out: &mut [RawReading]) {
            out[0] = RawReading {
                value: self.clock.now_ns(),
                enabled: 0,
                running: 0,
                ok: true,
            };
        }
        fn take_failures(&mut self) -> Vec<CounterFailure> {
            Vec::new()
        }
    }

    fn spec() -> CounterSpec {
        CounterSpec {
            event: "read".into(),
            pmu: "p".into(),
            cpu: None,
            scope: Scope::Package(0),
            package: Some(0),
            direction: Some(Direction::Read),
            memory: Memory::Dram,
            bytes_per_count: Some(64.0),
            scale: 1.0,
            counter_bits: 64,
            config: 0,
            sub_channel: None,
        }
    }

    #[test]
    fn late_wakeups_lengthen_intervals_without_inflating_rates() {
        let clock = LateClock {
            now: Cell::new(1_000_000_000),
            // Late by 0.5 ms, 3.2 ms (more than three whole intervals), then on time.
            lateness: vec![500_000, 3_200_000],
            wakes: Cell::new(0),
        };
        let mut b = ClockCounter {
            clock: &clock,
            specs: vec![spec()],
        };
        let mut rates = Vec::new();
        let mut elapsed = Vec::new();
        let layout = Layout::new(&b);
        let summary = run(
            &mut b,
            &clock,
            &layout,
            1_000_000,
            Some(10_000_000),
            &mut || false,
            &mut |_: &Layout, r: &IntervalReport| {
                rates.push(r.rate(r.packages[0].bytes.read));
                elapsed.push(r.elapsed_ns());
                Ok(())
            },
            &mut |_| {},
        )
        .unwrap();
        // 64 bytes per ns whatever the interval's length.
        assert!(rates.iter().all(|&r| (r - 64e9).abs() < 1.0), "{rates:?}");
        assert_eq!(elapsed[0], 1_500_000);
        // The second wake-up came at 5.2 ms: deadlines 3, 4 and 5 ms were skipped.
        assert_eq!(elapsed[1], 3_700_000);
        assert_eq!(summary.skipped, 3);
        // No drift: the following intervals end on the absolute boundaries.
        assert_eq!(elapsed[2], 800_000);
        assert_eq!(summary.t_end_ns - summary.t_start_ns, 10_000_000);
        assert_eq!(elapsed.iter().sum::<u64>(), 10_000_000);
    }
}

//! The sampler drained into the attributor: one drain and one interval end, apart from timers,
//! signals and output.
use super::{IntervalEnds, Sink};
use crate::attribution::Attributor;
use crate::counting::latency::{IntervalLatency, PackageLatency};
use crate::model::Topology;
use crate::model::result::IntervalResult;
use crate::sampler::{RecordSource, Sampler, SamplerError};
use imc_common::Record;

/// The one line said the first time package traffic had to be divided by on-CPU time although
/// weights were planned.
fn fallback_notice(r: &IntervalResult) -> String {
    format!(
        "{} span(s) of package traffic divided by on-CPU time: the weight counters did not run \
         (the core's counters are shared, and the kernel multiplexed them) or could not be read; \
         every interval counts them (JSON weight_fallbacks)",
        r.weight_fallbacks
    )
}

/// Drains the sampler's rings into the attributor and closes intervals: the sampler and the
/// attributor joined the way every sampling command runs them, what one drain and one interval
/// end do, apart from timers, signals and output, so that tests can run
/// exactly this path against the real program with counters of their choosing, and the replay
/// benchmark against a [`crate::sampler::loopback::Loopback`] of a machine it does not have.
pub struct Drainer<S: RecordSource = Sampler> {
    sampler: S,
    attr: Attributor,
    lost_seen: u64,
    /// Each package counter's reading at the last interval end, when per-channel figures are
    /// wanted (`imc serve`): one userspace read per counter per interval.
    channels: Option<Vec<f64>>,
    /// The plan's loaded-latency counters, read by userspace at each interval end (None: the
    /// plan reads none, or they did not open).
    latency: Option<IntervalLatency>,
    /// Each package's theoretical peak (package id, bytes/s), for its utilisation.
    peaks: Vec<(u32, f64)>,
    /// One drain's records, merged by time (kept to reuse its allocation).
    batch: Vec<Record>,
    /// (time, index in `batch`) of each record, sorted.
    order: Vec<(u64, u32)>,
    /// The weights' fallback to time has been said.
    fallbacks_said: bool,
    /// How long an interval is held open past its end for the CPUs' records that describe the
    /// time before it (two tick periods: a busy CPU reports at every tick).
    hold_ns: u64,
    /// Where stacks are taken: each drain's, resolved and handed to the sink.
    stacks: Option<super::stacks::StackResolver>,
}

impl<S: RecordSource> Drainer<S> {
    /// `tick_hz`: the tick rate of a busy CPU (the kernel's HZ, or `--freq`).
    pub fn new(sampler: S, topology: &Topology, source: String, tick_hz: u32) -> Drainer<S> {
        let attr = Attributor::new(sampler.slots(), topology, source).tick_hz(tick_hz);
        let mut drainer = Drainer {
            sampler,
            attr,
            lost_seen: 0,
            channels: None,
            latency: None,
            peaks: Vec::new(),
            batch: Vec::new(),
            order: Vec::new(),
            fallbacks_said: false,
            hold_ns: 2_000_000_000 / u64::from(tick_hz.max(1)),
            stacks: None,
        };
        // Every package's counters read once now: a package whose CPUs are idle is otherwise
        // first read at the first drain (a second in), and its traffic before that would be lost.
        drainer.read_packages(true);
        drainer
    }

    /// The run's end: the stacks still being resolved, waited for and handed on.
    pub fn finish_stacks(&mut self, sink: &mut dyn Sink) -> std::io::Result<()> {
        if let Some(r) = self.stacks.as_mut() {
            for b in r.finish(&mut |line| sink.notice(line)) {
                sink.stacks(&b)?;
            }
        }
        Ok(())
    }

    /// What resolving the stacks met over the run, in one line (`-v`).
    pub fn stacks_summary(&self) -> Option<String> {
        self.stacks.as_ref()?.summary()
    }

    /// Resolve and hand on the stacks the sampler takes, at every drain.
    pub fn stacks(mut self, resolver: Option<super::stacks::StackResolver>) -> Drainer<S> {
        self.stacks = resolver;
        self
    }

    /// Also read every package counter on its own at each interval end, so each result carries
    /// per-channel counts (`PackageRow::channels`).
    pub fn per_channel(mut self, yes: bool) -> Drainer<S> {
        self.channels = yes.then(Vec::new);
        self
    }

    /// Read these latency counters at each interval end, into each package's row.
    pub fn latency(mut self, l: Option<IntervalLatency>) -> Drainer<S> {
        self.latency = l;
        self
    }

    /// Each package's theoretical peak (package id, bytes/s): every interval then says how much
    /// of it the package used.
    pub fn peaks(mut self, peaks: Vec<(u32, f64)>) -> Drainer<S> {
        self.peaks = peaks;
        self
    }

    /// How the plan divides package traffic, said in every interval.
    pub fn weighting(mut self, w: Option<crate::model::Weighting>) -> Drainer<S> {
        self.attr = self.attr.weighting(w);
        self
    }

    pub fn sampler(&self) -> &S {
        &self.sampler
    }

    /// The source itself (the replay benchmark fills a loopback's rings through it).
    pub fn sampler_mut(&mut self) -> &mut S {
        &mut self.sampler
    }

    pub fn attributor(&self) -> &Attributor {
        &self.attr
    }

    /// Drains every record into the attributor (and `tick`), then reads from userspace the
    /// packages no reader's tick has read lately, so an idle package's traffic keeps its time.
    pub fn drain(&mut self, mut tick: impl FnMut(&Record)) -> usize {
        let mut batch = std::mem::take(&mut self.batch);
        batch.clear();
        let n = self.sampler.drain_append(&mut batch);
        for r in &batch {
            self.attr.push_tick(r);
            tick(r);
        }
        self.batch = batch;
        self.read_packages(false);
        n
    }

    /// Starts the interval clock `ends` in the sampler too, so the kernel cuts its aggregates at
    /// the same ends the intervals close at.
    pub fn start_intervals(&mut self, ends: &IntervalEnds) -> Result<(), SamplerError> {
        self.sampler
            .set_interval_clock(ends.start_ns(), ends.every_ns)
    }

    /// At the run's end, before its last drain: every CPU's open slice is ended now, so the
    /// last interval holds what ran up to its end (see [`Sampler::end_open_slices`]). Should
    /// that fail, the run ends as before, the slices since each CPU's last flush not given to
    /// any task (their traffic counted as unattributed), and `-v` says so.
    pub fn end_open_slices(&mut self) {
        match self.sampler.end_open_slices() {
            Ok(0) => {}
            Ok(n) => log::info!(
                "{n} CPUs could not be visited at the run's end: their slices since their last flush reach no task"
            ),
            Err(e) => log::info!("{}", crate::text::error_line(&e)),
        }
    }

    /// The kernel's notices since the last call, consumed: the processes that made their first
    /// stack have their maps read now; returns whether any notice asks for a drain (a ring or a
    /// generation's stacks filling).
    pub fn take_wakes(&mut self) -> bool {
        let mut drain = false;
        for item in self.sampler.take_wakes() {
            match imc_common::Wake::of(item) {
                imc_common::Wake::Drain => drain = true,
                imc_common::Wake::Process(tgid) => {
                    if let Some(r) = self.stacks.as_mut() {
                        r.announced(tgid);
                    }
                }
            }
        }
        drain
    }

    /// How long past its end the interval ending at `ends.next_ns` is held open: two tick
    /// periods, at most half an interval (so the next end is never passed while waiting).
    fn hold(&self, ends: &IntervalEnds) -> u64 {
        self.hold_ns.min(ends.every_ns / 2)
    }

    /// When the interval ending at `ends.next_ns` can be closed at the latest (its end plus the
    /// hold): the loop wakes then to deliver it on time.
    pub fn close_due_ns(&self, ends: &IntervalEnds) -> u64 {
        ends.next_ns.saturating_add(self.hold(ends))
    }

    /// Drains every record in time order into the attributor and the sink, closing each
    /// interval on the records' clock, however late the drain (the loop can sleep for several
    /// intervals). An interval is held open past its end until every CPU has reported past it
    /// (its records split at the end by time, see [`Attributor::split_at`]) or the hold has
    /// passed ([`Self::close_due_ns`]: an idle CPU is quiet, not late). Returns the records
    /// drained and whether to go on (false: the sink asked to stop).
    pub fn drain_into(
        &mut self,
        sink: &mut dyn Sink,
        ends: &mut IntervalEnds,
        now_ns: u64,
    ) -> std::io::Result<(usize, bool)> {
        self.attr.split_at(ends.next_ns);
        let mut batch = std::mem::take(&mut self.batch);
        let mut order = std::mem::take(&mut self.order);
        batch.clear();
        order.clear();
        let n = self.sampler.drain_append(&mut batch);
        order.extend(batch.iter().enumerate().map(|(i, r)| (r.t_ns, i as u32)));
        // Each CPU's records come in order; across CPUs they are merged by time (a CPU's
        // records of one instant keep their drain order). Keys are sorted, not the 240-byte
        // records: at a switch storm's 100k records a second, moving those cost more than the
        // rest of the drain. The stable sort finds the CPUs' runs already in order and merges
        // them (n log CPUs), where an unstable one sorts from scratch (n log n).
        order.sort_by_key(|&(t, _)| t);
        let mut go_on = true;
        let mut result = Ok(());
        for r in order.iter().map(|&(_, i)| &batch[i as usize]) {
            // Every CPU's records up to here are in: one that has none since the end is
            // quiet for longer than the hold.
            while go_on && r.t_ns > self.close_due_ns(ends) && ends.next_ns <= now_ns {
                go_on = self.close_at(ends, sink)?;
            }
            if !go_on {
                break;
            }
            self.attr.push_tick(r);
            if let Err(e) = sink.tick(r) {
                result = Err(e);
                break;
            }
        }
        self.batch = batch;
        self.order = order;
        result?;
        if let Some(r) = self.stacks.as_mut() {
            for b in r.drain(&mut self.sampler, now_ns) {
                sink.stacks(&b)?;
            }
        }
        self.read_packages(false);
        while go_on
            && ends.next_ns <= now_ns
            && (self.close_due_ns(ends) <= now_ns || self.attr.reported_past(ends.next_ns))
        {
            go_on = self.close_at(ends, sink)?;
        }
        Ok((n, go_on))
    }

    /// Closes the interval ending at `ends.next_ns`, hands it to the sink and moves the end on.
    fn close_at(&mut self, ends: &mut IntervalEnds, sink: &mut dyn Sink) -> std::io::Result<bool> {
        self.count_lost();
        let mut result = self.attr.close_interval(ends.next_ns);
        self.add_channels(&mut result);
        self.add_latency(&mut result);
        result.set_utilisation(&self.peaks);
        ends.advance();
        self.attr.split_at(ends.next_ns);
        self.say_fallbacks(&result, sink);
        sink.interval(&result)
    }

    /// Tells the sink, once a run, that weights fell back to time.
    pub fn say_fallbacks(&mut self, r: &IntervalResult, sink: &mut dyn Sink) {
        if r.weight_fallbacks > 0 && !self.fallbacks_said {
            self.fallbacks_said = true;
            sink.notice(&fallback_notice(r));
        }
    }

    fn count_lost(&mut self) {
        let lost = self.sampler.lost_records();
        self.attr
            .add_lost_samples(lost.saturating_sub(self.lost_seen));
        self.lost_seen = lost;
    }

    /// Ends the interval now (the run when `last`): every package is read first, so the
    /// interval holds its traffic up to its end.
    pub fn close(&mut self, last: bool) -> IntervalResult {
        self.read_packages(true);
        self.count_lost();
        let t = crate::sampler::monotonic_ns();
        let mut result = if last {
            self.attr.finish(t)
        } else {
            self.attr.close_interval(t)
        };
        self.add_channels(&mut result);
        self.add_latency(&mut result);
        result.set_utilisation(&self.peaks);
        result
    }

    /// Each channel's counts since the last interval end into its package's row (nothing the
    /// first time: that reading is the baseline).
    fn add_channels(&mut self, result: &mut IntervalResult) {
        let Some(last) = self.channels.as_mut() else {
            return;
        };
        let now = self.sampler.read_channels();
        if last.len() == now.len() {
            for (c, prev) in now.iter().zip(last.iter()) {
                if let Some(p) = result.packages.iter_mut().find(|p| p.id == c.package) {
                    p.channels.push(crate::model::result::ChannelRow {
                        channel: c.channel.clone(),
                        slot: c.slot,
                        counts: (c.value - prev).max(0.0),
                    });
                }
            }
        }
        *last = now.iter().map(|c| c.value).collect();
    }

    /// The latency counters read now, since the last interval end, into the packages' rows.
    fn add_latency(&mut self, result: &mut IntervalResult) {
        if let Some(l) = self.latency.as_mut() {
            fill_latency(result, &l.read(crate::sampler::monotonic_ns()));
        }
    }

    fn read_packages(&mut self, all: bool) {
        let attr = &mut self.attr;
        self.sampler.read_idle_packages(all, |pkg, slot, t, sum| {
            attr.push_package_read(pkg, slot, t, sum)
        });
    }
}

/// Each package's latency figures into its row of `result` (a package without a row has no
/// traffic counters either: nothing to show its latency beside).
fn fill_latency(result: &mut IntervalResult, read: &[PackageLatency]) {
    for p in read {
        let Some(row) = result.packages.iter_mut().find(|r| r.id == p.package) else {
            continue;
        };
        row.read_latency_ns = p.figures.read_ns;
        row.write_latency_ns = p.figures.write_ns;
        row.latency_channels = p
            .channels
            .iter()
            .map(|(label, f)| crate::model::result::ChannelLatency {
                channel: label.clone(),
                read_ns: f.read_ns,
                write_ns: f.write_ns,
            })
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Package, SlotRole, SlotScope, SlotSpec};
    use crate::sampler::ChannelReading;
    use imc_common::{KIND_TICK, MAX_SLOTS, SlotReading};

    const MS: u64 = 1_000_000;

    /// Records handed out drain by drain, as the rings would.
    struct Fake {
        slots: Vec<SlotSpec>,
        next: Vec<Record>,
    }

    impl RecordSource for Fake {
        fn slots(&self) -> &[SlotSpec] {
            &self.slots
        }
        fn drain_append(&mut self, out: &mut Vec<Record>) -> usize {
            let n = self.next.len();
            out.append(&mut self.next);
            n
        }
        fn lost_records(&self) -> u64 {
            0
        }
        fn read_idle_packages(&mut self, _: bool, _: impl FnMut(u32, usize, u64, u64)) -> usize {
            0
        }
        fn read_channels(&self) -> Vec<ChannelReading> {
            Vec::new()
        }
        fn take_wakes(&mut self) -> Vec<u32> {
            Vec::new()
        }
    }

    #[derive(Default)]
    struct Closed(Vec<IntervalResult>);

    impl Sink for Closed {
        fn interval(&mut self, r: &IntervalResult) -> std::io::Result<bool> {
            self.0.push(r.clone());
            Ok(true)
        }
    }

    fn rec(cpu: u32, t: u64, pid: u32, value: u64) -> Record {
        let mut slots = [SlotReading::default(); MAX_SLOTS];
        slots[0].value = value;
        Record {
            t_ns: t,
            cgroup_id: 0,
            cpu,
            pid,
            tgid: pid,
            kind: KIND_TICK,
            nr_slots: 1,
            failed_mask: 0,
            flags: 0,
            comm: [0; 16],
            t0_ns: 0,
            on_ns: 0,
            slots,
        }
    }

    fn counts(iv: &IntervalResult, pid: u32) -> f64 {
        iv.tasks
            .iter()
            .find(|t| t.pid == pid)
            .map_or(0.0, |t| t.values["faults"])
    }

    /// A drain just after an interval's end does not close it while a busy CPU has not yet
    /// reported past the end: the next drain brings that CPU's tick, whose counts are split at
    /// the end by time. An idle CPU (no record since) holds it no longer than two ticks.
    #[test]
    fn an_interval_waits_for_the_cpus_records_past_its_end_for_two_ticks_at_most() {
        let slots = vec![SlotSpec {
            event: "faults".into(),
            scope: SlotScope::Cpu,
            role: SlotRole::Traffic(crate::model::Direction::Total),
            bytes_per_count: None,
            counter_bits: 64,
        }];
        let topo = Topology {
            packages: vec![Package {
                id: 0,
                cpus: vec![0, 1],
            }],
            ..Topology::default()
        };
        let fake = Fake {
            slots,
            next: Vec::new(),
        };
        let mut d = Drainer::new(fake, &topo, "t".into(), 250);
        let mut ends = IntervalEnds::starting(0, 100);
        let mut out = Closed::default();
        // CPU 0 runs pid 7 (10 faults a ms, a tick every 4 ms), CPU 1 pid 8 then goes idle.
        let tick = |k: u64| rec(0, k * 4 * MS, 7, k * 40);
        d.sampler_mut().next = (0..=25).map(tick).collect();
        d.sampler_mut().next.push(rec(1, 0, 8, 0));
        d.sampler_mut().next.push(rec(1, 50 * MS, 8, 500));
        // 100 ms is between CPU 0's ticks at 100 and 104 ms: at 101 ms CPU 0 has not reported
        // past it and the hold (8 ms) has not passed.
        d.drain_into(&mut out, &mut ends, 101 * MS).unwrap();
        assert!(
            out.0.is_empty(),
            "closed before CPU 0 reported: {:?}",
            out.0
        );
        // CPU 0's tick at 104 ms is past the end, CPU 1 is quiet: closed at 108 ms.
        d.sampler_mut().next.push(tick(26));
        d.drain_into(&mut out, &mut ends, 105 * MS).unwrap();
        assert!(out.0.is_empty(), "closed while the hold ran: {:?}", out.0);
        d.drain_into(&mut out, &mut ends, 108 * MS + 1).unwrap();
        assert_eq!(out.0.len(), 1);
        let first = &out.0[0];
        assert_eq!(first.t_end_ns, 100 * MS);
        // 0..100 ms of pid 7's faults, the tick 96..104 ms split at the end.
        assert_eq!(counts(first, 7), 1000.0, "{first:?}");
        assert_eq!(counts(first, 8), 500.0);
        // A tick of every CPU past the end closes it at once, no hold.
        d.sampler_mut().next = (27..=51).map(tick).collect();
        d.sampler_mut().next.push(rec(1, 201 * MS, 8, 500));
        d.drain_into(&mut out, &mut ends, 204 * MS + 1).unwrap();
        assert_eq!(out.0.len(), 2);
        assert_eq!(counts(&out.0[1], 7), 1000.0, "{:?}", out.0[1]);
        assert_eq!(d.close_due_ns(&ends), 308 * MS);
    }

    #[test]
    fn latency_goes_into_its_packages_row_and_nowhere_else() {
        use crate::counting::latency::{LatencyFigures, PackageLatency};
        let mut r = IntervalResult {
            packages: vec![
                crate::model::PackageRow {
                    id: 0,
                    ..Default::default()
                },
                crate::model::PackageRow {
                    id: 1,
                    ..Default::default()
                },
            ],
            ..IntervalResult::default()
        };
        let figures = LatencyFigures {
            read_ns: Some(81.5),
            write_ns: None,
            ..LatencyFigures::default()
        };
        fill_latency(
            &mut r,
            &[PackageLatency {
                package: 1,
                figures,
                channels: vec![("uncore_imc_2".into(), figures)],
            }],
        );
        assert_eq!(r.packages[0].read_latency_ns, None);
        assert!(r.packages[0].latency_channels.is_empty());
        assert_eq!(r.packages[1].read_latency_ns, Some(81.5));
        assert_eq!(r.packages[1].write_latency_ns, None);
        assert_eq!(r.packages[1].latency_channels[0].channel, "uncore_imc_2");
        // In JSON: the fields are there, null where not counted.
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["packages"][1]["read_latency_ns"], 81.5);
        assert!(v["packages"][0]["read_latency_ns"].is_null());
        assert!(v["packages"][1]["write_latency_ns"].is_null());
        assert!(v["packages"][1]["utilisation"].is_null());
    }
}

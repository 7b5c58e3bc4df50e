//! The sampler drained into the attributor: one drain and one interval end, apart from timers,
//! signals and output.
use super::{IntervalEnds, Sink};
use crate::attribution::Attributor;
use crate::model::Topology;
use crate::model::result::IntervalResult;
use crate::sampler::{RecordSource, Sampler};
use imc_common::TickRecord;

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
    /// One drain's records, merged by time (kept to reuse its allocation).
    batch: Vec<TickRecord>,
    /// (time, index in `batch`) of each record, sorted.
    order: Vec<(u64, u32)>,
    /// The weights' fallback to time has been said.
    fallbacks_said: bool,
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
            batch: Vec::new(),
            order: Vec::new(),
            fallbacks_said: false,
        };
        // Every package's counters read once now: a package whose CPUs are idle is otherwise
        // first read at the first drain (a second in), and its traffic before that was lost.
        drainer.read_packages(true);
        drainer
    }

    /// Also read every package counter on its own at each interval end, so each result carries
    /// per-channel counts (`PackageRow::channels`).
    pub fn per_channel(mut self, yes: bool) -> Drainer<S> {
        self.channels = yes.then(Vec::new);
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
    pub fn drain(&mut self, mut tick: impl FnMut(&TickRecord)) -> usize {
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

    /// The kernel's "ring half full" notices since the last call, consumed (the drain that
    /// follows is what they ask for).
    pub fn take_wakes(&mut self) -> usize {
        self.sampler.take_wakes().len()
    }

    /// Drains every record in time order into the attributor and the sink, closing each
    /// interval whose end the records pass, then the ends up to `now_ns` that no record
    /// passed: an interval is closed on the records' clock however late the drain, so the
    /// loop can sleep for several intervals. Returns the records drained and whether to go on
    /// (false: the sink asked to stop).
    pub fn drain_into(
        &mut self,
        sink: &mut dyn Sink,
        ends: &mut IntervalEnds,
        now_ns: u64,
    ) -> std::io::Result<(usize, bool)> {
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
            while go_on && r.t_ns > ends.next_ns && ends.next_ns <= now_ns {
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
        self.read_packages(false);
        while go_on && ends.next_ns <= now_ns {
            go_on = self.close_at(ends, sink)?;
        }
        Ok((n, go_on))
    }

    /// Closes the interval ending at `ends.next_ns`, hands it to the sink and moves the end on.
    fn close_at(&mut self, ends: &mut IntervalEnds, sink: &mut dyn Sink) -> std::io::Result<bool> {
        self.count_lost();
        let mut result = self.attr.close_interval(ends.next_ns);
        self.add_channels(&mut result);
        ends.advance();
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

    fn read_packages(&mut self, all: bool) {
        let attr = &mut self.attr;
        self.sampler.read_idle_packages(all, |pkg, slot, t, sum| {
            attr.push_package_read(pkg, slot, t, sum)
        });
    }
}

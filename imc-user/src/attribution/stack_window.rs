//! The last minute or so of a running sampler's intervals and stack batches, from which a
//! profile of any span within it is made (`imc serve --stacks`: `/debug/pprof/dram?seconds=N`,
//! `imc top --stacks`). Bounded by time: what ends before the window is dropped.
use super::stacks::StackTotals;
use crate::model::SlotSpec;
use crate::model::result::IntervalResult;
use crate::model::stacks::{StackBatch, StackProfile};
use std::collections::VecDeque;

/// The longest span kept, and so the most `seconds` a profile may ask for.
pub const WINDOW_S: u64 = 60;

pub struct StackWindow {
    specs: Vec<SlotSpec>,
    intervals: VecDeque<IntervalResult>,
    batches: VecDeque<StackBatch>,
}

impl StackWindow {
    pub fn new(specs: Vec<SlotSpec>) -> StackWindow {
        StackWindow {
            specs,
            intervals: VecDeque::new(),
            batches: VecDeque::new(),
        }
    }

    /// Keeps an interval (its task rows; the rest is not needed).
    pub fn add_interval(&mut self, iv: &IntervalResult) {
        self.intervals.push_back(IntervalResult {
            t_start_ns: iv.t_start_ns,
            t_end_ns: iv.t_end_ns,
            tasks: iv.tasks.clone(),
            ..Default::default()
        });
        self.trim(iv.t_end_ns);
    }

    pub fn add_batch(&mut self, b: &StackBatch) {
        self.batches.push_back(b.clone());
        self.trim(b.t_ns);
    }

    fn trim(&mut self, now_ns: u64) {
        let from = now_ns.saturating_sub((WINDOW_S + 10) * 1_000_000_000);
        while self.intervals.front().is_some_and(|i| i.t_end_ns < from) {
            self.intervals.pop_front();
        }
        while self.batches.front().is_some_and(|b| b.t_ns < from) {
            self.batches.pop_front();
        }
    }

    /// The profile of `from_ns .. to_ns` (CLOCK_MONOTONIC): the intervals that end in it and
    /// the batches drained in it. `realtime_of` turns a monotonic instant into CLOCK_REALTIME.
    pub fn profile(
        &self,
        from_ns: u64,
        to_ns: u64,
        realtime_of: impl Fn(u64) -> u64,
    ) -> StackProfile {
        let mut t = StackTotals::new(&self.specs);
        let within = |x: u64| x > from_ns && x <= to_ns;
        self.intervals
            .iter()
            .filter(|i| within(i.t_end_ns))
            .for_each(|i| t.add_interval(i));
        self.batches
            .iter()
            .filter(|b| within(b.t_ns))
            .for_each(|b| t.add_batch(b));
        t.profile(realtime_of(from_ns), to_ns.saturating_sub(from_ns))
    }
}

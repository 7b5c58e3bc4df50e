//! Interval ends: a CPU-scope count across the end the caller said is divided by time, the
//! part after it kept for the next interval; closing an interval spreads the packages, builds
//! its result and starts the next where it ended.

use super::state::{Attributor, Later, Placed};
use super::tasks::IDLE;
use crate::model::result::IntervalResult;

impl Attributor {
    /// The interval being filled ends at `t_end_ns` (set before the records that cross it are
    /// pushed): a CPU-scope delta whose span crosses it is divided by time, the part after it
    /// kept for the next interval, so that [`close_interval`](Self::close_interval) at exactly
    /// this end holds what happened before it. Closing at another time (or [`finish`]
    /// (Self::finish)) holds everything pushed. Cleared by every close.
    pub fn split_at(&mut self, t_end_ns: u64) {
        self.boundary = Some(t_end_ns);
    }

    /// A CPU-scope delta `d` of slot `s`, made by `task` (IDLE: nobody) on a CPU of package
    /// index `pkg` over `t0 .. t1`: the part up to the interval's end now, the rest later.
    ///
    /// A delta whose span began before an interval already closed (its CPU reported late: the
    /// host took it away across the end, past the hold) cannot go back: it is charged here,
    /// and said to be late, since any of it may be a closed interval's.
    pub(super) fn charge(&mut self, task: u32, pkg: u32, s: usize, d: f64, t0: u64, t1: u64) {
        if d == 0.0 {
            return;
        }
        if task != IDLE && self.closed_any && self.t_start.is_some_and(|start| t0 < start) {
            self.placed.push((task, s as u8, Placed::Late(d.abs(), t0)));
        }
        let now = match self.boundary {
            Some(b) if t1 > b => {
                let f = if t0 < b && t1 > t0 {
                    (b - t0) as f64 / (t1 - t0) as f64
                } else {
                    0.0
                };
                let later = d * (1.0 - f);
                // A count read across the end is divided by time: up to its larger part may
                // belong to the other interval.
                let by_time = if f > 0.0 && task != IDLE {
                    d.abs() * f.max(1.0 - f)
                } else {
                    0.0
                };
                if by_time != 0.0 {
                    self.placed.push((task, s as u8, Placed::ByTime(by_time)));
                }
                if later != 0.0 {
                    self.after.push(Later {
                        task,
                        pkg,
                        slot: s as u8,
                        amount: later,
                        by_time,
                    });
                }
                d * f
            }
            _ => d,
        };
        self.add_count(task, pkg, s, now);
    }

    pub(super) fn add_count(&mut self, task: u32, pkg: u32, s: usize, d: f64) {
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
            if l.by_time != 0.0 {
                self.placed
                    .push((l.task, l.slot, Placed::ByTime(l.by_time)));
            }
        }
        self.after = after;
        self.after.clear();
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

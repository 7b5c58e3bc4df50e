//! The interval clock: when each interval ends, on the records' own clock.

/// Interval ends on the records' clock (CLOCK_MONOTONIC ns): every `every_ns` from the start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IntervalEnds {
    pub next_ns: u64,
    pub every_ns: u64,
}

impl IntervalEnds {
    pub fn starting(now_ns: u64, interval_ms: u64) -> IntervalEnds {
        let every_ns = interval_ms.max(1).saturating_mul(1_000_000);
        IntervalEnds {
            next_ns: now_ns.saturating_add(every_ns),
            every_ns,
        }
    }

    /// The start of the interval ending at `next_ns` (an origin of the clock: every end is one
    /// more period on).
    pub fn start_ns(&self) -> u64 {
        self.next_ns.saturating_sub(self.every_ns)
    }

    pub(super) fn advance(&mut self) {
        self.next_ns = self.next_ns.saturating_add(self.every_ns);
    }
}

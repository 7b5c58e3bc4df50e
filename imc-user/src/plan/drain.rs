//! How often the sampling loop wakes to drain the rings: the one rule, which the plan states
//! (`Plan::drain`) and the loop follows.
use super::types::Plan;

/// How long `record` and `serve` sleep between drains when every counter comes in the records
/// (see [`super::Drain`]): a second, and earlier whenever a CPU's ring is half full.
pub const BATCH_MS: u64 = 1000;

/// How often the loop drains the rings. Each drain wakes imc, a timer interrupt of its own on a
/// CPU that was not going to take one, and most of imc's own CPU use: on the kernel's tick (the
/// continuous mode meant to be left on) once per interval, at most every 100 ms (the rings
/// hold that long at a busy server's switch rate), and with a timer slack of a quarter of that,
/// so the wake-up can ride on an interrupt the CPU takes anyway. With `--freq` (asked-for
/// resolution) a quarter of the interval, between 10 and 50 ms, so an interval closes at most a
/// quarter late.
pub fn period_ms(interval_ms: u64, kernel_tick: bool) -> u32 {
    if kernel_tick {
        interval_ms.clamp(10, 100) as u32
    } else {
        (interval_ms / 4).clamp(10, 50) as u32
    }
}

/// Whether a loop draining every `period_ms` closes several intervals of `interval_ms` a
/// wake-up (the batched drain of `record` and `serve`) rather than waking for each interval as
/// it falls due, as a live view does to show each on time.
pub fn batches_intervals(period_ms: u64, interval_ms: u64) -> bool {
    period_ms > interval_ms
}

impl Plan {
    /// The drain period of this plan's loop, in ms: the plan's own [`super::Drain`] where it
    /// has one, else [`period_ms`] for `interval_ms` (on the kernel's tick unless the plan's
    /// tick adds interrupts).
    pub fn drain_period_ms(&self, interval_ms: u64) -> u32 {
        self.drain.as_ref().map_or_else(
            || period_ms(interval_ms, !self.tick.adds_interrupts),
            |d| d.every_ms.min(u64::from(u32::MAX)) as u32,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{BATCH_MS, batches_intervals, period_ms};

    /// The modes left on (`record`, `serve` at 100 ms intervals) sleep a whole batch and close
    /// ten intervals a wake-up; a live view and a finer `--freq` wake for each interval.
    #[test]
    fn only_a_loop_draining_less_often_than_its_intervals_batches_them() {
        assert!(batches_intervals(BATCH_MS, 100));
        assert!(!batches_intervals(BATCH_MS, 1000));
        for (interval, kernel_tick) in [(1000, true), (100, true), (40, false), (10, false)] {
            let period = u64::from(period_ms(interval, kernel_tick));
            assert!(
                !batches_intervals(period, interval),
                "{interval} ms: drained every {period} ms"
            );
        }
    }
}

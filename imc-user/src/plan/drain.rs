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

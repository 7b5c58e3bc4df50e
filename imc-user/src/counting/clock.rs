//! CLOCK_MONOTONIC and absolute-deadline sleeping.
//!
//! Intervals are scheduled on absolute deadlines (`clock_nanosleep(TIMER_ABSTIME)`) so they do
//! not drift by the loop's own run time, and every interval is timestamped with the clock read
//! at the counter read, so a late wake-up makes a longer interval rather than an inflated rate.
//! Tests substitute a clock whose wake-ups are late by a scripted amount.

/// How a sleep ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// The deadline passed.
    Deadline,
    /// A signal interrupted the sleep (the caller checks why).
    Interrupted,
}

pub trait Clock {
    /// CLOCK_MONOTONIC in nanoseconds (the clock of perf and eBPF timestamps).
    fn now_ns(&self) -> u64;
    /// Sleeps until the absolute CLOCK_MONOTONIC time `deadline_ns`.
    fn sleep_until(&self, deadline_ns: u64) -> Wake;
}

/// The kernel's CLOCK_MONOTONIC (clock_gettime is a vDSO call: no syscall per interval).
#[derive(Clone, Copy, Debug, Default)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: ts is a valid timespec to write; CLOCK_MONOTONIC always exists on Linux.
        unsafe {
            libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        }
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    fn sleep_until(&self, deadline_ns: u64) -> Wake {
        let ts = libc::timespec {
            tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: ts is a valid timespec; a null remainder is allowed with TIMER_ABSTIME.
        let r = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        // clock_nanosleep returns the error number rather than setting errno.
        if r == libc::EINTR {
            Wake::Interrupted
        } else {
            Wake::Deadline
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeps_until_an_absolute_deadline() {
        let c = MonotonicClock;
        let t0 = c.now_ns();
        assert_eq!(c.sleep_until(t0 + 2_000_000), Wake::Deadline);
        assert!(c.now_ns() >= t0 + 2_000_000);
        // A deadline in the past returns at once.
        assert_eq!(c.sleep_until(t0), Wake::Deadline);
    }
}

//! Counter arithmetic: deltas modulo the hardware width, and multiplexing scaling.
use super::RawReading;

/// `now - prev` modulo 2^bits: a counter that wrapped between the two readings still yields the
/// true (positive) difference, provided it wrapped at most once.
pub fn wrapping_delta(prev: u64, now: u64, bits: u8) -> u64 {
    let d = now.wrapping_sub(prev);
    if bits == 0 || bits >= 64 {
        d
    } else {
        d & ((1u64 << bits) - 1)
    }
}

/// One counter over one interval.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Delta {
    /// The count, scaled for multiplexing (`raw × enabled / running`).
    pub count: f64,
    /// The count as read.
    pub raw: u64,
    /// `running / enabled` over the interval: 1.0 when the counter was on the hardware the whole
    /// time (or the backend has no notion of multiplexing).
    pub running_fraction: f64,
    /// False when the counter did not count at all in this interval: unreadable, disabled by
    /// the kernel (its CPU went offline), or never scheduled.
    pub counted: bool,
}

/// The delta between two cumulative readings of a counter `bits` wide.
pub fn delta(prev: &RawReading, now: &RawReading, bits: u8) -> Delta {
    if !prev.ok || !now.ok {
        return Delta::default();
    }
    let raw = wrapping_delta(prev.value, now.value, bits);
    if now.enabled == 0 && now.running == 0 && prev.enabled == 0 {
        // A backend without time accounting (MCHBAR): always counting.
        return Delta {
            count: raw as f64,
            raw,
            running_fraction: 1.0,
            counted: true,
        };
    }
    let enabled = now.enabled.wrapping_sub(prev.enabled);
    let running = now.running.wrapping_sub(prev.running);
    if enabled == 0 || running == 0 {
        // time_enabled stops advancing when the kernel turns the event off (its CPU went
        // offline); time_running stays put when it never got a hardware counter.
        return Delta {
            raw,
            ..Delta::default()
        };
    }
    if running >= enabled {
        return Delta {
            count: raw as f64,
            raw,
            running_fraction: 1.0,
            counted: true,
        };
    }
    Delta {
        count: raw as f64 * enabled as f64 / running as f64,
        raw,
        running_fraction: running as f64 / enabled as f64,
        counted: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(value: u64, enabled: u64, running: u64) -> RawReading {
        RawReading {
            value,
            enabled,
            running,
            ok: true,
        }
    }

    #[test]
    fn wraps_modulo_width() {
        assert_eq!(wrapping_delta(0xffff_fff0, 0x10, 32), 0x20);
        assert_eq!(wrapping_delta(10, 30, 32), 20);
        assert_eq!(wrapping_delta((1 << 48) - 5, 5, 48), 10);
        assert_eq!(wrapping_delta(u64::MAX, 4, 64), 5);
    }

    #[test]
    fn scales_multiplexed_counts() {
        let d = delta(&r(100, 1000, 1000), &r(200, 2000, 1500), 64);
        assert!(d.counted);
        assert_eq!(d.raw, 100);
        assert_eq!(d.count, 200.0);
        assert_eq!(d.running_fraction, 0.5);
    }

    #[test]
    fn unscaled_when_fully_running() {
        let d = delta(&r(100, 1000, 1000), &r(300, 2000, 2000), 64);
        assert_eq!((d.count, d.running_fraction, d.counted), (200.0, 1.0, true));
    }

    #[test]
    fn stopped_counter_is_not_counted() {
        // CPU offline: the kernel turns the event off and time_enabled stops.
        let d = delta(&r(100, 1000, 1000), &r(100, 1000, 1000), 64);
        assert!(!d.counted);
        let mut bad = r(5, 5, 5);
        bad.ok = false;
        assert!(!delta(&r(1, 1, 1), &bad, 64).counted);
    }

    #[test]
    fn timeless_backend_counts() {
        let d = delta(&r(0xffff_ff00, 0, 0), &r(0x100, 0, 0), 32);
        assert_eq!((d.raw, d.counted), (0x200, true));
    }
}

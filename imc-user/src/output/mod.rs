//! Rendering: human tables, CSV, JSON lines and the live view, one module per command family.
pub mod ibs_top;
pub mod json;
pub mod latency;
pub mod list;
pub mod perfetto;
pub mod perfetto_proto;
pub mod plot;
pub mod prometheus;
pub mod report;
pub mod stacks;
pub mod stat;
pub mod top;

/// Whether an event counts nanoseconds (the software clocks), so its rate is ns/s, not a
/// count per second: `cpu-clock`, `task-clock`, with or without modifiers (`cpu-clock:u`).
pub fn counts_nanoseconds(event: &str) -> bool {
    let name = event.split(':').next().unwrap_or(event);
    let name = name
        .strip_prefix("software/")
        .map_or(name, |n| n.trim_end_matches('/'));
    matches!(name, "cpu-clock" | "task-clock")
}

/// A column or label for a rate of an event's counts: `page-faults/s`, `cpu-clock ns/s`.
pub fn rate_title(event: &str) -> String {
    if counts_nanoseconds(event) {
        format!("{event} ns/s")
    } else {
        format!("{event}/s")
    }
}

pub use crate::text::fixed;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_never_prints_with_a_sign() {
        assert_eq!(fixed(-0.0, 0), "0");
        assert_eq!(fixed(-0.3, 0), "0");
        assert_eq!(fixed(-0.04, 1), "0.0");
        assert_eq!(fixed(-0.6, 0), "-1");
        assert_eq!(fixed(12.345, 2), "12.35");
        assert_eq!(top::per_s(-0.0, 1.0), "0");
        assert_eq!(top::mb_per_s(0, 1.0), "0.0");
        assert_eq!(
            perfetto::fmt_rate(
                &crate::attribution::timeline::Unit::Counts(vec!["page-faults".into()]),
                -0.0
            ),
            "0 page-faults/s"
        );
    }

    #[test]
    fn clocks_are_rates_of_nanoseconds() {
        assert_eq!(rate_title("cpu-clock"), "cpu-clock ns/s");
        assert_eq!(rate_title("task-clock:u"), "task-clock:u ns/s");
        assert_eq!(
            rate_title("software/cpu-clock/"),
            "software/cpu-clock/ ns/s"
        );
        assert_eq!(rate_title("page-faults"), "page-faults/s");
        assert!(!counts_nanoseconds("cpu-cycles"));
    }
}

//! The report: every section in one object (JSON) or its text.

use super::bytes::{BytesSection, Fidelity, MbmSection};
use super::counts::{Bound, IntervalRow, WorkloadRow};
use serde::Serialize;

#[derive(Serialize)]
pub(super) struct Report {
    pub(super) source: String,
    pub(super) records: &'static str,
    pub(super) interval_ms: u64,
    pub(super) duration_s: f64,
    /// Truth samples the kernel lost or throttled (0: the truth is exact).
    pub(super) truth_lost: u64,
    /// Each truth sample carried its thread's count (false: counted as one period each, short
    /// by the periods a late timer skipped).
    pub(super) truth_counts_read: bool,
    /// How loaded the machine was while the workloads ran.
    pub(super) load: super::load::Load,
    pub(super) workloads: Vec<WorkloadRow>,
    pub(super) intervals: Vec<IntervalRow>,
    pub(super) bytes: BytesSection,
    pub(super) mbm: MbmSection,
    pub(super) fidelity: Option<Fidelity>,
    /// `--stacks`: each workload's traffic by call stack (null without).
    pub(super) stacks: Option<Vec<super::stacks::StackRow>>,
    pub(super) bounds: Vec<Bound>,
    pub(super) pass: bool,
    /// A signal ended the run before --duration: no verdict (exit 1).
    pub(super) cut_short: bool,
}

/// `4 intervals (3 of 1000 ms, 1 of 136 ms)`, `1 interval of 1000 ms`: each length as it
/// was (within 5 % of -I counts as -I), in the order they came.
fn intervals_text(rows: &[IntervalRow], interval_ms: u64) -> String {
    let mut groups: Vec<(u64, usize)> = Vec::new();
    for r in rows {
        let ms = r.t_end_ns.saturating_sub(r.t_start_ns) as f64 / 1e6;
        let ms = if (ms - interval_ms as f64).abs() <= interval_ms as f64 * 0.05 {
            interval_ms
        } else {
            ms.round() as u64
        };
        match groups.iter_mut().find(|g| g.0 == ms) {
            Some(g) => g.1 += 1,
            None => groups.push((ms, 1)),
        }
    }
    let n = rows.len();
    let noun = if n == 1 { "interval" } else { "intervals" };
    match groups[..] {
        [] => format!("0 intervals of {interval_ms} ms"),
        [(ms, _)] => format!("{n} {noun} of {ms} ms"),
        _ => {
            let parts: Vec<String> = groups
                .iter()
                .map(|(ms, k)| format!("{k} of {ms} ms"))
                .collect();
            format!("{n} {noun} ({})", parts.join(", "))
        }
    }
}

pub(super) fn render_report(r: &Report) -> String {
    let mut s = format!(
        "imc validate: {}, {} records, source {}\n",
        intervals_text(&r.intervals, r.interval_ms),
        r.records,
        r.source
    );
    s += &format!(
        "{:<10} {:>8}  {:<16} {:>12} {:>12} {:>10} {:>9}\n",
        "WORKLOAD", "PID", "EVENT", "TRUTH", "ATTRIBUTED", "WORST ERR", "INTERVAL"
    );
    for w in &r.workloads {
        s += &format!(
            "{:<10} {:>8}  {:<16} {:>12.0} {:>12.0} {:>10.4} {:>9}\n",
            w.name, w.pid, w.event, w.truth, w.attributed, w.error, w.worst_interval
        );
    }
    s += "bounds:\n";
    for b in &r.bounds {
        let mark = if b.pass == Some(false) { "BAD" } else { "ok " };
        s += &format!("  {mark} {}\n", b.text());
    }
    s += &format!("bytes: {}\n", r.bytes.reason);
    for k in &r.bytes.kernels {
        s += &format!(
            "  {:<10} passes {:>5}  expected {:.0} MB  imc {:.0} MB\n",
            k.name,
            k.passes.map_or("?".into(), |p| p.to_string()),
            (k.expected_read + k.expected_write) / 1e6,
            (k.imc_read + k.imc_write + k.imc_total) / 1e6
        );
    }
    if let Some(f) = &r.fidelity {
        for (e, v) in &f.weights {
            s += &format!("  fidelity of {e}: {v:.3}\n");
        }
        s += &format!("  error bound the fidelity implies: {:.3}\n", f.bound);
    }
    if let Some(rows) = &r.stacks {
        s += "stacks: share of each workload's charged traffic in stacks through its function\n";
        for w in rows {
            s += &format!(
                "  {:<10} {:<22} charged {:>10.0}  through {:>10.0}  unresolved {:>8.0}  share {}\n",
                w.name,
                w.function,
                w.charged,
                w.through,
                w.unresolved,
                w.share.map_or("-".into(), |v| format!("{v:.4}"))
            );
        }
    }
    s += &format!("mbm: {}\n", r.mbm.reason);
    s += &format!("{}\n", r.load.text());
    s += if r.pass {
        if r.cut_short {
            "cut short by a signal: no verdict\n"
        } else {
            "within every bound\n"
        }
    } else {
        "OUTSIDE a bound\n"
    };
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(ms: &[u64]) -> Vec<IntervalRow> {
        let mut t = 0;
        ms.iter()
            .enumerate()
            .map(|(index, &m)| {
                let r = IntervalRow {
                    index,
                    t_start_ns: t,
                    t_end_ns: t + m * 1_000_000,
                    host_stolen_ms: 0.0,
                    events: Vec::new(),
                    workloads: Vec::new(),
                };
                t = r.t_end_ns;
                r
            })
            .collect()
    }

    #[test]
    fn the_header_counts_each_interval_at_its_own_length() {
        assert_eq!(
            intervals_text(&rows(&[1000, 1003, 998, 136]), 1000),
            "4 intervals (3 of 1000 ms, 1 of 136 ms)"
        );
        // --duration 1 at -I 3000: one interval, of the second it lasted.
        assert_eq!(
            intervals_text(&rows(&[1000]), 3000),
            "1 interval of 1000 ms"
        );
        assert_eq!(
            intervals_text(&rows(&[100, 101]), 100),
            "2 intervals of 100 ms"
        );
    }
}

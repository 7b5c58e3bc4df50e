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
    pub(super) load: super::live::Load,
    pub(super) workloads: Vec<WorkloadRow>,
    pub(super) intervals: Vec<IntervalRow>,
    pub(super) bytes: BytesSection,
    pub(super) mbm: MbmSection,
    pub(super) fidelity: Option<Fidelity>,
    /// `--stacks`: each workload's traffic by call stack (null without).
    pub(super) stacks: Option<Vec<super::stacks::StackRow>>,
    pub(super) bounds: Vec<Bound>,
    pub(super) pass: bool,
}

pub(super) fn render_report(r: &Report) -> String {
    let mut s = format!(
        "imc validate: {} intervals of {} ms, {} records, source {}\n",
        r.intervals.len(),
        r.interval_ms,
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
        "within every bound\n"
    } else {
        "OUTSIDE a bound\n"
    };
    s
}

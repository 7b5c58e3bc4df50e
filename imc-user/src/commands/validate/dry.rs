//! `imc validate --dry-run`: the workloads, the truth events and the bounds the plan would
//! judge, printed with no privileges.

use super::comparable::{
    Availability, BytesPlan, MBM_BOUND, ZERO_CHARGE_BOUND, error_bound, mbm_availability, records,
};
use super::counts::Bound;
use super::truth::TruthEvent;
use super::workloads::Kind;
use crate::cli::ValidateArgs;
use crate::discovery::resctrl::Resctrl;
use crate::plan::{Plan, PlanSource};
use serde::Serialize;

#[derive(Serialize)]
pub(super) struct DryWorkload {
    pub(super) name: &'static str,
    pub(super) what: &'static str,
    /// Expected DRAM bytes per pass: read, write.
    pub(super) expected_bytes_per_pass: Option<[f64; 2]>,
}

#[derive(Serialize)]
pub(super) struct DryEvent {
    pub(super) event: String,
    pub(super) encodings: Vec<crate::model::Encoded>,
}

#[derive(Serialize)]
pub(super) struct DryRun<'a> {
    pub(super) command: &'static str,
    pub(super) source: &'a PlanSource,
    pub(super) records: &'static str,
    pub(super) interval_ms: u64,
    pub(super) duration_s: f64,
    pub(super) workloads: Vec<DryWorkload>,
    pub(super) truth: Vec<DryEvent>,
    pub(super) bounds: Vec<Bound>,
    pub(super) bytes: Availability,
    pub(super) mbm: Availability,
    pub(super) plan: &'a Plan,
}

impl<'a> DryRun<'a> {
    pub(super) fn new(
        args: &ValidateArgs,
        plan: &'a Plan,
        events: &[TruthEvent],
        kinds: &[&'static Kind],
        bytes: &BytesPlan,
        rdt: &Resctrl,
    ) -> DryRun<'a> {
        let mut bounds = Vec::new();
        for e in events {
            bounds.push(Bound::planned("error", &e.event, error_bound(&e.event)));
            bounds.push(Bound::planned("zero-charge", &e.event, ZERO_CHARGE_BOUND));
            bounds.push(Bound::planned("conservation", &e.event, 0.0));
        }
        let mbm = mbm_availability(rdt, kinds.len());
        if mbm.available && bytes.real {
            bounds.push(Bound::planned("mbm", "bytes", MBM_BOUND));
        }
        DryRun {
            command: "validate",
            source: &plan.source,
            records: records(plan),
            interval_ms: args.interval_ms,
            duration_s: args.duration,
            workloads: kinds
                .iter()
                .map(|k| DryWorkload {
                    name: k.name,
                    what: k.what,
                    expected_bytes_per_pass: k.per_pass.map(|(r, w)| [r, w]),
                })
                .collect(),
            truth: events
                .iter()
                .map(|e| DryEvent {
                    event: e.event.clone(),
                    encodings: e.encodings.clone(),
                })
                .collect(),
            bounds,
            bytes: Availability {
                available: bytes.real,
                reason: bytes.reason.clone(),
            },
            mbm,
            plan,
        }
    }
}

pub(super) fn render_dry(d: &DryRun<'_>) -> String {
    let mut s = format!(
        "imc validate would run {} workloads for {} s, {} records, {} ms intervals, source {}\n",
        d.workloads.len(),
        d.duration_s,
        d.records,
        d.interval_ms,
        d.source
    );
    for w in &d.workloads {
        s += &format!("  {:<10} {}\n", w.name, w.what);
    }
    let truth: Vec<&str> = d.truth.iter().map(|e| e.event.as_str()).collect();
    s += &format!(
        "truth: the kernel's count per workload of {}\n",
        if truth.is_empty() {
            "nothing (the plan counts nothing per CPU)".to_string()
        } else {
            truth.join(", ")
        }
    );
    s += "bounds:\n";
    for b in &d.bounds {
        s += &format!("  {}\n", b.text());
    }
    s += &format!("bytes: {}\nmbm: {}\n", d.bytes.reason, d.mbm.reason);
    s
}

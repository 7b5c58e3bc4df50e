//! `imc validate --stacks`: each workload makes its traffic in a function of its own
//! (`validate_<kind>`); of the traffic imc charged to the workload's stacks, the share whose
//! stack runs through that function, beside the bound a frame-pointer walk must meet.
use super::comparable::ZERO_CHARGE_BOUND;
use super::counts::{Bound, Ident, owner};
use super::workloads::function_of;
use crate::attribution::stacks::StackTotals;
use crate::model::SlotSpec;
use crate::model::result::IntervalResult;
use crate::model::stacks::{LOST_STACK_FRAME, StackBatch, UNRESOLVED_FRAME};
use serde::Serialize;

/// The least share of a workload's charged traffic that must land in stacks through its
/// function, where the binary keeps frame pointers (imc's own build does).
pub(super) const SHARE_BOUND: f64 = 0.98;

/// One workload's stacks.
#[derive(Clone, Debug, Serialize)]
pub(super) struct StackRow {
    pub(super) name: &'static str,
    pub(super) pid: u32,
    pub(super) function: String,
    /// Traffic charged to the workload's stacks (its processes', short-lived children too).
    pub(super) charged: f64,
    /// Of which in stacks through `function`.
    pub(super) through: f64,
    /// Of which in no stack it could tell: frames not resolved (a process gone before its
    /// drain) or no user stack taken (a task's last slice ends after it has left its memory:
    /// its stack is gone by its final switch).
    pub(super) unresolved: f64,
    /// `through / (charged − unresolved)`: of the traffic whose frames were resolved, the
    /// share through `function` (null: nothing resolved was charged).
    pub(super) share: Option<f64>,
}

/// Each workload's stack share, from the run's intervals and stack batches.
pub(super) fn stack_rows(
    specs: &[SlotSpec],
    intervals: &[IntervalResult],
    batches: &[StackBatch],
    idents: &[Ident],
) -> Vec<StackRow> {
    let mut totals = StackTotals::new(specs);
    intervals.iter().for_each(|iv| totals.add_interval(iv));
    batches.iter().for_each(|b| totals.add_batch(b));
    let p = totals.profile(0, 0);
    let mut rows: Vec<StackRow> = idents
        .iter()
        .map(|i| StackRow {
            name: i.name,
            pid: i.pid,
            function: function_of(i.name),
            charged: 0.0,
            through: 0.0,
            unresolved: 0.0,
            share: None,
        })
        .collect();
    for s in &p.samples {
        let Some(w) = owner(idents, s.tgid, &s.comm) else {
            continue;
        };
        let Some(stack) = p.stacks.get(s.stack as usize) else {
            continue;
        };
        let names = || {
            stack
                .frames
                .iter()
                .filter_map(|&f| p.frames.get(f as usize)?.function.as_deref())
        };
        let v = s.total() as f64;
        let row = &mut rows[w];
        row.charged += v;
        if names().any(|n| n == row.function || n.ends_with(&format!("::{}", row.function))) {
            row.through += v;
        } else if names().any(|n| n == UNRESOLVED_FRAME || n == LOST_STACK_FRAME) {
            row.unresolved += v;
        }
    }
    for r in &mut rows {
        let resolved = r.charged - r.unresolved;
        r.share = (resolved > 0.0).then(|| r.through / resolved);
    }
    rows
}

/// The bound per workload whose stacks could be told (see the filter): of what its resolved
/// stacks were charged, the share outside its function (1 − share) at most 1 − [`SHARE_BOUND`].
/// A workload whose traffic is mostly in no stack it can tell (the burst's children live for a
/// millisecond and are charged after leaving their memory) is shown, not held.
pub(super) fn stack_bounds(rows: &[StackRow]) -> Vec<Bound> {
    rows.iter()
        // Held where the stacks could be told: the traffic in resolved stacks is past what a
        // workload that makes none may be charged, and at least half of what it was charged.
        .filter(|r| {
            let resolved = r.charged - r.unresolved;
            resolved > ZERO_CHARGE_BOUND && resolved >= r.charged / 2.0
        })
        .filter_map(|r| {
            let share = r.share?;
            Some(Bound::measured(
                "stacks",
                "traffic",
                1.0 - SHARE_BOUND,
                1.0 - share,
                Some(r.name),
                None,
            ))
        })
        .collect()
}

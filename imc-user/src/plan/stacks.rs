//! Where call stacks are taken (`--stacks`, `--stack-period`), what they are charged with and
//! what the kernel keeps of them: the plan's `stacks` object.
//!
//! By default a stack is taken where the aggregating path already charges a slice (the
//! kernel's tick and every context switch), and only for a slice that counted something on a
//! weight slot: no interrupt is added. `--stack-period N` instead samples on the weight
//! counter's own overflow every N events (perf's `-c N`), for code whose phases are shorter
//! than a tick: an interrupt per N events on each CPU.
use super::types::{PlanError, Records, Slot};
use crate::model::{SlotRole, SlotScope};
use serde::Serialize;

/// `--stacks` and its options, as asked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StackRequest {
    /// `--kernel-stacks`: the kernel stack too.
    pub kernel: bool,
    /// `--stack-period N`.
    pub period: Option<u64>,
}

/// How stacks are sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StackMode {
    /// At the slices the sampler charges (tick and switches).
    Slices,
    /// On the weight counter's overflow every `period` events.
    Overflow,
}

/// The plan's `stacks` object.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StackPlan {
    pub mode: StackMode,
    pub user: bool,
    pub kernel: bool,
    /// Where they are taken: `tick`, `switch`, or `overflow`.
    pub taken_at: Vec<&'static str>,
    /// Distinct (process, stack) entries the kernel holds between two drains; a slice past
    /// them is counted (`stacks_dropped`), its traffic still charged to its process.
    pub map_entries: u32,
    /// Distinct stacks the kernel's stack map holds for the run; a stack past them (or one
    /// whose bucket another holds) is charged under `[stack not recorded]`.
    pub stack_entries: u32,
    /// Frames a stack keeps at most (the innermost): deeper ones are marked cut short.
    pub depth: u32,
    /// The slots whose counts are charged to stacks (indices into `slots`); empty: on-CPU
    /// time is the weight.
    pub weight_slots: Vec<usize>,
    /// `--stack-period`: events between two samples, and the event.
    pub period: Option<u64>,
    pub event: Option<String>,
    pub adds_interrupts: bool,
    pub reason: String,
}

/// Distinct (process, stack) entries between two drains.
pub const MAP_ENTRIES: u32 = 16_384;
/// Distinct stacks per run (each holds [`imc_common::STACK_DEPTH`] addresses: about 8 MiB).
pub const STACK_ENTRIES: u32 = 8_192;

/// The slots whose per-CPU counts weigh traffic (weights, and a stand-in's own per-CPU traffic
/// count): what a slice's stack is charged with.
pub fn weight_slots(slots: &[Slot]) -> Vec<usize> {
    slots
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            s.scope == SlotScope::Cpu
                && matches!(
                    s.role,
                    SlotRole::Weight(_) | SlotRole::RemoteWeight(_) | SlotRole::Traffic(_)
                )
        })
        .map(|(i, _)| i)
        .collect()
}

/// The stacks a sampling plan takes for `req`, or why it cannot.
pub fn plan_stacks(
    req: &StackRequest,
    records: Option<Records>,
    slots: &[Slot],
) -> Result<StackPlan, PlanError> {
    let weights = weight_slots(slots);
    if let Some(period) = req.period {
        return overflow(req, period, slots, weights);
    }
    if records != Some(Records::Aggregated) {
        return Err(PlanError::BadRequest(
            "--stacks takes stacks where the kernel's tick and switches charge slices, and \
             --freq or --precise records each tick or switch apart: drop them, or sample with \
             --stack-period N"
                .into(),
        ));
    }
    let reason = match weights.first() {
        Some(&i) => format!(
            "at the kernel's tick and at every context switch, for each slice that counted \
             {}: no interrupt added",
            slots[i].event
        ),
        None => "at the kernel's tick and at every context switch, weighed by on-CPU time (no \
                 weight counter): no interrupt added"
            .to_string(),
    };
    Ok(StackPlan {
        mode: StackMode::Slices,
        user: true,
        kernel: req.kernel,
        taken_at: vec!["tick", "switch"],
        map_entries: MAP_ENTRIES,
        stack_entries: STACK_ENTRIES,
        depth: imc_common::STACK_DEPTH as u32,
        weight_slots: weights,
        period: None,
        event: None,
        adds_interrupts: false,
        reason,
    })
}

/// `--stack-period N`: a sample every N events of the first weight slot's event.
fn overflow(
    req: &StackRequest,
    period: u64,
    slots: &[Slot],
    weights: Vec<usize>,
) -> Result<StackPlan, PlanError> {
    if period == 0 {
        return Err(PlanError::BadRequest(
            "--stack-period 0: give the events between two samples, 1 or more".into(),
        ));
    }
    let Some(&slot) = weights.first() else {
        return Err(PlanError::BadRequest(
            "--stack-period samples on a weight counter's overflow, and this plan has none \
             (--weight cpu-time, or no core counter): use --stacks alone"
                .into(),
        ));
    };
    let event = slots[slot].event.clone();
    Ok(StackPlan {
        mode: StackMode::Overflow,
        user: true,
        kernel: req.kernel,
        taken_at: vec!["overflow"],
        map_entries: MAP_ENTRIES,
        stack_entries: STACK_ENTRIES,
        depth: imc_common::STACK_DEPTH as u32,
        weight_slots: vec![slot],
        period: Some(period),
        reason: format!(
            "on every {period}th {event} of each CPU: an interrupt per {period} events per CPU \
             (a CPU counting 1,000,000 a second takes {} interrupts a second more)",
            1_000_000u64.div_ceil(period)
        ),
        event: Some(event),
        adds_interrupts: true,
    })
}

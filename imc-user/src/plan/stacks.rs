//! Where call stacks are taken (`--stacks`, `--stack-period`), what they are charged with and
//! what the kernel keeps of them: the plan's `stacks` object.
//!
//! By default a stack is taken where the aggregating path already charges a slice (the
//! kernel's tick and every context switch), and only for a slice that counted something on a
//! weight slot: no interrupt is added. `--stack-period N` instead samples on the weight
//! counter's own overflow every N events (perf's `-c N`), for code whose phases are shorter
//! than a tick: an interrupt per N events on each CPU.
use super::types::{PlanError, Records, Slot, StackMode, StackPlan, StackRequest};
use crate::model::{SlotRole, SlotScope};

/// Distinct (process, cgroup, stack) entries between two drains.
pub const MAP_ENTRIES: u32 = 16_384;
/// Distinct stacks per generation (about one interval: the stack maps are emptied in turn),
/// in each of the two stack maps (each stack holds [`imc_common::STACK_DEPTH`] addresses:
/// about 8 MiB a map).
pub const STACK_ENTRIES: u32 = 8_192;
/// Distinct stacks per generation in each spare map: only stacks their generation's map
/// refused come here (a few percent of a generation's stacks at most, see [`WAKE_AFTER`]),
/// about 1 MiB a map.
pub const SPARE_ENTRIES: u32 = STACK_ENTRIES / 8;
/// New (process, cgroup, stack) entries of a generation after which the kernel wakes imc to drain
/// it early: a stack map is then about a sixteenth full at most when its generation ends, so
/// about 3% of new stacks at most find their hash bucket taken (about 8% at 1,400 new stacks
/// a second drained once a second).
pub const WAKE_AFTER: u32 = STACK_ENTRIES / 16;
const _: () = assert!(WAKE_AFTER.is_power_of_two());

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
/// `kernel_tick`: the sampler runs on the kernel's tick (no `--freq`).
pub fn plan_stacks(
    req: &StackRequest,
    records: Option<Records>,
    kernel_tick: bool,
    slots: &[Slot],
) -> Result<StackPlan, PlanError> {
    let weights = weight_slots(slots);
    if let Some(period) = req.period {
        return overflow(req, period, slots, weights);
    }
    if records != Some(Records::Aggregated) || !kernel_tick {
        return Err(PlanError::StacksOffTheTick);
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
        spare_entries: SPARE_ENTRIES,
        wake_after: WAKE_AFTER,
        depth: imc_common::STACK_DEPTH as u32,
        weight_slots: weights,
        period: None,
        event: None,
        adds_interrupts: false,
        skips_imc_stacks: true,
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
        return Err(PlanError::StackPeriodZero);
    }
    let Some(&slot) = weights.first() else {
        return Err(PlanError::StackPeriodWithoutWeight);
    };
    let event = slots[slot].event.clone();
    Ok(StackPlan {
        mode: StackMode::Overflow,
        user: true,
        kernel: req.kernel,
        taken_at: vec!["overflow"],
        map_entries: MAP_ENTRIES,
        stack_entries: STACK_ENTRIES,
        spare_entries: SPARE_ENTRIES,
        wake_after: WAKE_AFTER,
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
        skips_imc_stacks: true,
    })
}

//! A process's top functions by traffic, for a report's or `top`'s "where in the code" table:
//! per function (by its frame label, so unsymbolized code and the marker frames such as
//! `[stack not recorded]` are rows too), its traffic in its own frames and in everything it
//! called.
use super::common::{Stacks, sample_total};
use crate::model::stacks::{FunctionShare, StackProfile};
use std::collections::HashMap;

/// The `n` functions of process `tgid` with the most traffic in their stacks:
/// - `self_value`: the traffic of stacks whose leaf frame is the function;
/// - `total_value`: the traffic of stacks the function is anywhere in, counted once per stack
///   however often it recurs there;
/// - `share`: `total_value` over the process's traffic in the profile (0 where it has none).
///
/// Sorted by `total_value`, largest first, then by name. Empty where the process has no
/// samples.
pub fn top_functions(profile: &StackProfile, tgid: u32, n: usize) -> Vec<FunctionShare> {
    let stacks = Stacks::new(profile);
    // Function index per frame slot, assigned on first use; one row per function.
    let mut slot_function: Vec<Option<usize>> = vec![None; stacks.slot_count()];
    let mut by_name: HashMap<String, usize> = HashMap::new();
    let mut rows: Vec<FunctionShare> = Vec::new();
    // The last stack (by its number among the process's samples) each function was counted
    // in: a function recurring in one stack is counted once.
    let mut counted_in: Vec<usize> = Vec::new();
    let mut process_total: u64 = 0;
    let samples = profile.samples.iter().filter(|s| s.tgid == tgid);
    for (number, sample) in samples.enumerate() {
        let value = sample_total(sample);
        if value == 0 {
            continue;
        }
        process_total = process_total.saturating_add(value);
        for (depth, slot) in stacks.slots(sample.stack).enumerate() {
            let function = *slot_function[slot].get_or_insert_with(|| {
                let name = stacks.frame(slot).label();
                *by_name.entry(name.clone()).or_insert_with(|| {
                    rows.push(FunctionShare {
                        function: name,
                        self_value: 0,
                        total_value: 0,
                        share: 0.0,
                    });
                    counted_in.push(usize::MAX);
                    rows.len() - 1
                })
            });
            let row = &mut rows[function];
            if depth == 0 {
                row.self_value = row.self_value.saturating_add(value);
            }
            if counted_in[function] != number {
                counted_in[function] = number;
                row.total_value = row.total_value.saturating_add(value);
            }
        }
    }
    for row in &mut rows {
        row.share = if process_total > 0 {
            row.total_value as f64 / process_total as f64
        } else {
            0.0
        };
    }
    rows.sort_by(|a, b| {
        b.total_value
            .cmp(&a.total_value)
            .then_with(|| a.function.cmp(&b.function))
    });
    rows.truncate(n);
    rows
}

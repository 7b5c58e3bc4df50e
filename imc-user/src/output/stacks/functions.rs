//! A process's top functions in a stack profile: the traffic in each function's own frames
//! (`self`, where it is the leaf) and in everything it called (`total`, anywhere in the stack,
//! counted once per stack however often it recurs), as a profiler's "top" view shows them.
use crate::model::stacks::{FunctionShare, StackProfile};
use std::collections::{HashMap, HashSet};

/// The `n` functions of process `tgid` with the most traffic in total (then by name), each
/// with its share of the process's traffic in the profile.
pub fn top_functions(profile: &StackProfile, tgid: u32, n: usize) -> Vec<FunctionShare> {
    let labels: Vec<String> = profile.frames.iter().map(|f| f.label()).collect();
    let mut by: HashMap<&str, (u64, u64)> = HashMap::new();
    let mut all = 0u64;
    for s in profile.samples.iter().filter(|s| s.tgid == tgid) {
        let Some(stack) = profile.stacks.get(s.stack as usize) else {
            continue;
        };
        let v = s.total();
        all += v;
        let mut seen: HashSet<&str> = HashSet::new();
        for (i, &f) in stack.frames.iter().enumerate() {
            let Some(name) = labels.get(f as usize) else {
                continue;
            };
            let e = by.entry(name.as_str()).or_insert((0, 0));
            if i == 0 {
                e.0 += v;
            }
            if seen.insert(name.as_str()) {
                e.1 += v;
            }
        }
    }
    let mut out: Vec<FunctionShare> = by
        .into_iter()
        .map(|(name, (own, total))| FunctionShare {
            function: name.to_string(),
            self_value: own,
            total_value: total,
            share: if all > 0 {
                total as f64 / all as f64
            } else {
                0.0
            },
        })
        .collect();
    out.sort_by(|a, b| {
        b.total_value
            .cmp(&a.total_value)
            .then_with(|| a.function.cmp(&b.function))
    });
    out.truncate(n);
    out
}

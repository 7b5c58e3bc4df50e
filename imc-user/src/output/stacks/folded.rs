//! Folded stacks: one line per (process, stack), `comm;root;...;leaf COUNT`, the format
//! flamegraph.pl, inferno and speedscope read (what `perf script | stackcollapse-perf.pl`
//! writes with pids off). The flame graph is drawn from these same lines.
//!
//! A line's frames run root first, the process's comm as the outermost frame; COUNT is the
//! traffic of every sample with that text (see [`super::common::sample_total`]), so two processes of
//! one name in one stack share a line. Lines are sorted by their text; lines that count 0 are
//! left out.
//!
//! Labels are escaped so that no name can break a line apart (see [`escape_label`]).
use super::common::{Stacks, sample_total};
use crate::model::stacks::StackProfile;
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

/// Writes the profile's folded lines, each ending in `\n`.
pub fn write_folded(profile: &StackProfile, out: &mut impl Write) -> io::Result<()> {
    let mut out = io::BufWriter::new(out);
    for (line, count) in folded_lines(profile) {
        writeln!(out, "{line} {count}")?;
    }
    out.flush()
}

/// The profile's folded stacks without their counts, each with its count: sorted, merged,
/// none counting 0.
pub fn folded_lines(profile: &StackProfile) -> BTreeMap<String, u64> {
    let stacks = Stacks::new(profile);
    // Traffic by (comm, stack) first, so each distinct stack's text is built once.
    let mut by_stack: HashMap<(&str, u32), u64> = HashMap::new();
    for sample in &profile.samples {
        let total = sample_total(sample);
        if total > 0 {
            let sum = by_stack.entry((&sample.comm, sample.stack)).or_insert(0);
            *sum = sum.saturating_add(total);
        }
    }
    let mut labels: Vec<Option<String>> = vec![None; stacks.slot_count()];
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for ((comm, stack), total) in by_stack {
        let mut line = escape_label(comm, true);
        for slot in stacks.slots(stack).rev() {
            let label = labels[slot]
                .get_or_insert_with(|| escape_label(&stacks.frame(slot).label(), false));
            line.push(';');
            line.push_str(label);
        }
        let sum = lines.entry(line).or_insert(0);
        *sum = sum.saturating_add(total);
    }
    lines
}

/// A name as one frame of a folded line. The rules:
/// - `;` (the frame separator) becomes `:`, and a control character (a newline, a tab) `?`;
/// - an empty name becomes `?`;
/// - in the process's name (`root`), spaces become `_` (as stackcollapse-perf writes comms)
///   and a leading `#` becomes `?` (a line that starts with `#` is a comment to readers);
/// - a space followed only by digits and dots to the name's end becomes `_`: a reader takes
///   a line's last two space-separated numbers as a differential's two counts, so a leaf such
///   as `worker 2` must not end in a number after a space.
pub fn escape_label(name: &str, root: bool) -> String {
    let mut out: String = name
        .chars()
        .map(|c| match c {
            ';' => ':',
            ' ' if root => '_',
            c if c.is_control() => '?',
            c => c,
        })
        .collect();
    if out.is_empty() {
        out.push('?');
    }
    if root && out.starts_with('#') {
        out.replace_range(..1, "?");
    }
    if let Some(space) = out.rfind(' ')
        && out[space + 1..]
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.')
    {
        out.replace_range(space..space + 1, "_");
    }
    out
}

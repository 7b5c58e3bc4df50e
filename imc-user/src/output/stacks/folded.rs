//! Folded stacks: one line per (process, stack), `comm;root;…;leaf COUNT`, root first, as
//! `stackcollapse-perf.pl` writes them and flamegraph.pl and inferno read them.
//!
//! A frame's label is written as it is except for the characters that would break the line:
//! `;` (the frame separator) becomes `:`, and a control character (a newline, a tab) `?`.
//! Lines of equal text are merged, lines are sorted, and a line that counts nothing is left
//! out, so the output is the same for the same profile.
use crate::model::stacks::StackProfile;
use std::collections::BTreeMap;
use std::io::{self, Write};

/// A label made safe for a folded line.
pub fn clean(label: &str) -> String {
    label
        .chars()
        .map(|c| match c {
            ';' => ':',
            c if c.is_control() => '?',
            c => c,
        })
        .collect()
}

/// The folded lines of `profile`, text → count (merged, sorted).
pub fn lines(profile: &StackProfile) -> BTreeMap<String, u64> {
    let labels: Vec<String> = profile.frames.iter().map(|f| clean(&f.label())).collect();
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    for s in &profile.samples {
        let count = s.total();
        if count == 0 {
            continue;
        }
        let Some(stack) = profile.stacks.get(s.stack as usize) else {
            continue;
        };
        let mut line = clean(&s.comm);
        for &f in stack.frames.iter().rev() {
            if let Some(l) = labels.get(f as usize) {
                line.push(';');
                line.push_str(l);
            }
        }
        *out.entry(line).or_insert(0) += count;
    }
    out
}

/// Writes `profile` as folded lines.
pub fn write_folded(profile: &StackProfile, out: &mut impl Write) -> io::Result<()> {
    for (line, count) in lines(profile) {
        writeln!(out, "{line} {count}")?;
    }
    Ok(())
}

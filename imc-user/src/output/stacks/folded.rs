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

/// Writes the profile's folded lines, each ending in `\n`, as they are made.
pub fn write_folded(profile: &StackProfile, out: &mut impl Write) -> io::Result<()> {
    let mut out = io::BufWriter::new(out);
    for_each_line(profile, |line, count| writeln!(out, "{line} {count}"))?;
    out.flush()
}

/// The profile's folded stacks without their counts, each with its count: sorted, merged,
/// none counting 0.
pub fn folded_lines(profile: &StackProfile) -> BTreeMap<String, u64> {
    let mut lines = BTreeMap::new();
    let _ = for_each_line(profile, |line, count| {
        lines.insert(line.to_string(), count);
        Ok(())
    });
    lines
}

/// Calls `f` with each folded line (without its count) and its count, sorted by the line's
/// text, equal texts merged, none counting 0. The texts are built one at a time, and the lines
/// are ordered as (comm, stack) numbers whose labels are read as they are compared: what is
/// held besides the profile is each label's text once and a few numbers per line.
pub fn for_each_line(
    profile: &StackProfile,
    mut f: impl FnMut(&str, u64) -> io::Result<()>,
) -> io::Result<()> {
    let lines = SampleLines::new(profile);
    let mut order = lines.numbers();
    order.sort_unstable_by(|&a, &b| lines.text(a).cmp(lines.text(b)));
    let mut bytes = Vec::new();
    let mut i = 0;
    while i < order.len() {
        let first = order[i];
        let mut count = 0u64;
        while i < order.len() && lines.key(order[i]).eq(lines.key(first)) {
            count = count.saturating_add(lines.totals[order[i] as usize]);
            i += 1;
        }
        bytes.clear();
        bytes.extend(lines.text(first));
        f(&String::from_utf8_lossy(&bytes), count)?;
    }
    Ok(())
}

/// As [`for_each_line`], with every frame whose stacks together count less than `min_share`
/// of all (a fraction) cut off its lines, their counts going to the frame below: the lines a
/// flame graph that leaves out boxes narrower than `min_share` draws the same. A line keeps
/// at least its process's name.
pub fn for_each_line_cut(
    profile: &StackProfile,
    min_share: f64,
    mut f: impl FnMut(&str, u64) -> io::Result<()>,
) -> io::Result<()> {
    let lines = SampleLines::new(profile);
    let total = lines.totals.iter().fold(0u64, |s, c| s.saturating_add(*c));
    let min = (total as f64 * min_share).floor() as u64;
    let mut cut: Vec<(Box<[u32]>, u64)> = cut_below(&lines, min).into_iter().collect();
    let text = |k: &[u32]| lines.labels.text(k).collect::<Vec<u8>>();
    cut.sort_by_cached_key(|(k, _)| text(k));
    for (key, count) in cut {
        f(&String::from_utf8_lossy(&text(&key)), count)?;
    }
    Ok(())
}

/// A profile's samples read as folded lines: the samples of one comm and one stack together,
/// each such line its comm's label, then its frames' labels root first (label numbers stand
/// for equal texts; two stacks may still read the same, and are merged where ordered).
struct SampleLines<'a> {
    stacks: Stacks<'a>,
    labels: Labels,
    slot_label: Vec<u32>,
    /// (comm label, stack) of each line.
    lines: Vec<(u32, u32)>,
    totals: Vec<u64>,
}

impl<'a> SampleLines<'a> {
    fn new(profile: &'a StackProfile) -> SampleLines<'a> {
        let stacks = Stacks::new(profile);
        let mut labels = Labels::default();
        let slot_label: Vec<u32> = (0..stacks.slot_count())
            .map(|slot| labels.id(escape_label(&stacks.frame(slot).label(), false)))
            .collect();
        let mut by_line: HashMap<(u32, u32), u64> = HashMap::new();
        for sample in &profile.samples {
            let total = sample_total(sample);
            if total > 0 {
                let comm = labels.id(escape_label(&sample.comm, true));
                let sum = by_line.entry((comm, sample.stack)).or_insert(0);
                *sum = sum.saturating_add(total);
            }
        }
        let (lines, totals) = by_line.into_iter().unzip();
        SampleLines {
            stacks,
            labels,
            slot_label,
            lines,
            totals,
        }
    }

    /// Every line's number.
    fn numbers(&self) -> Vec<u32> {
        (0..self.lines.len() as u32).collect()
    }

    fn key(&self, line: u32) -> impl Iterator<Item = u32> + '_ {
        let (comm, stack) = self.lines[line as usize];
        let frames = self.stacks.slots(stack).rev();
        std::iter::once(comm).chain(frames.map(|f| self.slot_label[f]))
    }

    fn text(&self, line: u32) -> impl Iterator<Item = u8> + '_ {
        self.labels.joined(self.key(line))
    }
}

/// Each line cut after its longest prefix whose lines together count at least `min`, the
/// lines that become equal merged. Ordered by label numbers, the lines under one prefix are
/// next to each other, so one pass finds each prefix's total when the prefix ends.
fn cut_below(lines: &SampleLines, min: u64) -> HashMap<Box<[u32]>, u64> {
    let mut order = lines.numbers();
    order.sort_unstable_by(|&a, &b| lines.key(a).cmp(lines.key(b)));
    let mut keep: Vec<usize> = order.iter().map(|&i| lines.key(i).count()).collect();
    // The prefixes of the current line: where each began and what its lines count so far.
    let mut open: Vec<(usize, u64)> = Vec::new();
    for i in 0..=order.len() {
        let common = match (i.checked_sub(1), order.get(i)) {
            (Some(prev), Some(&cur)) => {
                let pairs = lines.key(order[prev]).zip(lines.key(cur));
                pairs.take_while(|(a, b)| a == b).count()
            }
            _ => 0,
        };
        while open.len() > common {
            let depth = open.len() - 1;
            let Some((start, total)) = open.pop() else {
                break;
            };
            if total < min {
                for k in &mut keep[start..i] {
                    *k = (*k).min(depth.max(1));
                }
            }
        }
        let Some(&sample) = order.get(i) else {
            break;
        };
        while open.len() < keep[i] {
            open.push((i, 0));
        }
        for o in &mut open {
            o.1 = o.1.saturating_add(lines.totals[sample as usize]);
        }
    }
    let mut merged: HashMap<Box<[u32]>, u64> = HashMap::new();
    for (&sample, len) in order.iter().zip(keep) {
        let key: Box<[u32]> = lines.key(sample).take(len).collect();
        let sum = merged.entry(key).or_insert(0);
        *sum = sum.saturating_add(lines.totals[sample as usize]);
    }
    merged
}

/// Escaped labels, each text once, numbered.
#[derive(Default)]
struct Labels {
    ids: HashMap<String, u32>,
    texts: Vec<String>,
}

impl Labels {
    fn id(&mut self, label: String) -> u32 {
        if let Some(&id) = self.ids.get(&label) {
            return id;
        }
        let id = self.texts.len() as u32;
        self.texts.push(label.clone());
        self.ids.insert(label, id);
        id
    }

    /// A line's bytes: its labels joined by `;` (labels are valid UTF-8 and `;` is ASCII, so
    /// the bytes compare as the text does and make valid text back).
    fn joined<'a>(&'a self, key: impl Iterator<Item = u32> + 'a) -> impl Iterator<Item = u8> + 'a {
        key.enumerate().flat_map(move |(i, id)| {
            let sep = (i > 0).then_some(b';');
            sep.into_iter().chain(self.texts[id as usize].bytes())
        })
    }

    fn text<'a>(&'a self, key: &'a [u32]) -> impl Iterator<Item = u8> + 'a {
        self.joined(key.iter().copied())
    }
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

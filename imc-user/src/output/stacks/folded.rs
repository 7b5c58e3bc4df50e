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
/// text, equal texts merged, none counting 0. The texts are built one at a time: what is held
/// is each distinct line as label numbers, never all the text at once.
pub fn for_each_line(
    profile: &StackProfile,
    f: impl FnMut(&str, u64) -> io::Result<()>,
) -> io::Result<()> {
    let (labels, lines) = keyed_lines(profile);
    emit_sorted(&labels, lines, f)
}

/// As [`for_each_line`], with every frame whose stacks together count less than `min_share`
/// of all (a fraction) cut off its lines, their counts going to the frame below: the lines a
/// flame graph that leaves out boxes narrower than `min_share` draws the same. A line keeps
/// at least its process's name.
pub fn for_each_line_cut(
    profile: &StackProfile,
    min_share: f64,
    f: impl FnMut(&str, u64) -> io::Result<()>,
) -> io::Result<()> {
    let (labels, lines) = keyed_lines(profile);
    let total = lines.iter().fold(0u64, |s, (_, c)| s.saturating_add(*c));
    let min = (total as f64 * min_share).floor() as u64;
    emit_sorted(&labels, cut_below(lines, min), f)
}

/// A line as label numbers (the comm's label, then the frames' labels root first) and its count.
type Line = (Box<[u32]>, u64);

/// Traffic by line.
fn keyed_lines(profile: &StackProfile) -> (Labels, Vec<Line>) {
    let stacks = Stacks::new(profile);
    let mut labels = Labels::default();
    let slot_label: Vec<u32> = (0..stacks.slot_count())
        .map(|slot| labels.id(escape_label(&stacks.frame(slot).label(), false)))
        .collect();
    let mut by_line: HashMap<Box<[u32]>, u64> = HashMap::new();
    for sample in &profile.samples {
        let total = sample_total(sample);
        if total == 0 {
            continue;
        }
        let comm = labels.id(escape_label(&sample.comm, true));
        let frames = stacks.slots(sample.stack).rev().map(|s| slot_label[s]);
        let key: Box<[u32]> = std::iter::once(comm).chain(frames).collect();
        let sum = by_line.entry(key).or_insert(0);
        *sum = sum.saturating_add(total);
    }
    (labels, by_line.into_iter().collect())
}

fn emit_sorted(
    labels: &Labels,
    mut lines: Vec<Line>,
    mut f: impl FnMut(&str, u64) -> io::Result<()>,
) -> io::Result<()> {
    lines.sort_unstable_by(|a, b| labels.text(&a.0).cmp(labels.text(&b.0)));
    let mut bytes = Vec::new();
    for (key, count) in lines {
        bytes.clear();
        bytes.extend(labels.text(&key));
        f(&String::from_utf8_lossy(&bytes), count)?;
    }
    Ok(())
}

/// Cuts each line after its longest prefix whose lines together count at least `min`, and
/// merges the lines that become equal. Ordered frame by frame, the lines under one prefix are
/// next to each other, so one pass finds each prefix's total when the prefix ends.
fn cut_below(mut lines: Vec<Line>, min: u64) -> Vec<Line> {
    // Label numbers stand for equal labels: ordered by them, a prefix's lines are together.
    lines.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut keep: Vec<usize> = lines.iter().map(|(k, _)| k.len()).collect();
    // The prefixes of the current line: where each began and what its lines count so far.
    let mut open: Vec<(usize, u64)> = Vec::new();
    for i in 0..=lines.len() {
        let common = match (i.checked_sub(1), lines.get(i)) {
            (Some(prev), Some(cur)) => common_len(&lines[prev].0, &cur.0),
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
        let Some((key, count)) = lines.get(i) else {
            break;
        };
        while open.len() < key.len() {
            open.push((i, 0));
        }
        for o in &mut open {
            o.1 = o.1.saturating_add(*count);
        }
    }
    let mut merged: HashMap<Box<[u32]>, u64> = HashMap::new();
    for ((key, count), len) in lines.into_iter().zip(keep) {
        let key: Box<[u32]> = if len < key.len() {
            key[..len].into()
        } else {
            key
        };
        let sum = merged.entry(key).or_insert(0);
        *sum = sum.saturating_add(count);
    }
    merged.into_iter().collect()
}

fn common_len(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
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
    fn text<'a>(&'a self, key: &'a [u32]) -> impl Iterator<Item = u8> + 'a {
        key.iter().enumerate().flat_map(move |(i, &id)| {
            let sep = (i > 0).then_some(b';');
            sep.into_iter().chain(self.texts[id as usize].bytes())
        })
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

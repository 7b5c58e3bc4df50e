//! A flame graph of traffic by call stack, drawn by inferno (the Rust port of flamegraph.pl)
//! from the folded lines.
use super::folded;
use crate::model::stacks::StackProfile;
use std::io::{self, Write};

/// The title: what the widths count (DRAM bytes, or the stand-in's event).
pub fn title_of(profile: &StackProfile) -> String {
    match profile.sample_types.first() {
        Some(t) if t.unit == "bytes" => "DRAM traffic (bytes) by call stack".to_string(),
        Some(t) => format!(
            "{} by call stack (no memory controller: a stand-in)",
            t.name
        ),
        None => "traffic by call stack".to_string(),
    }
}

/// Draws `profile` as an SVG flame graph. A profile with no traffic is an error (inferno draws
/// nothing from no lines): the caller says so in one line.
pub fn write_flamegraph(profile: &StackProfile, title: &str, out: impl Write) -> io::Result<()> {
    let lines: Vec<String> = folded::lines(profile)
        .into_iter()
        .map(|(l, c)| format!("{l} {c}"))
        .collect();
    if lines.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "no traffic was charged to any stack",
        ));
    }
    let mut opt = inferno::flamegraph::Options::default();
    opt.title = title.to_string();
    opt.count_name = match profile.sample_types.first() {
        Some(t) if t.unit == "bytes" => "bytes".to_string(),
        Some(t) => t.name.clone(),
        None => "samples".to_string(),
    };
    inferno::flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), out)
}

//! A flame graph SVG of a profile, drawn by inferno (the maintained Rust port of
//! flamegraph.pl) from the profile's folded lines ([`super::folded`]): one box per function in
//! a stack, as wide as its traffic, the process's name at the bottom of each of its stacks.
//! Colours follow each function's name (the same name, the same colour, in every graph).
//!
//! A profile with no traffic draws nothing: it is [`FlamegraphError::Empty`] ("no stacks
//! recorded"), for the caller to print as one line, and nothing is written.
use super::common::{count_name, default_title};
use super::folded::for_each_line;
use crate::model::stacks::StackProfile;
use inferno::flamegraph::{self, Options};
use std::io::{self, Write};

#[derive(Debug, thiserror::Error)]
pub enum FlamegraphError {
    /// No sample counted anything: there is nothing to draw.
    #[error("no stacks recorded")]
    Empty,
    /// The counts together do not fit in 64 bits (the flame graph's widths are their shares
    /// of that sum).
    #[error("the profile's counts together exceed 2^64; no flame graph drawn")]
    CountOverflow,
    #[error("writing the flame graph: {source}")]
    Write {
        #[source]
        source: io::Error,
    },
}

/// Writes the profile as a flame graph SVG titled `title` (the profile's
/// [`default_title`] where `title` is empty); hovering a box says its count in the profile's
/// unit ([`count_name`]: bytes, or the stand-in event's counts).
pub fn write_flamegraph(
    profile: &StackProfile,
    title: &str,
    out: impl Write,
) -> Result<(), FlamegraphError> {
    let (mut lines, mut sum) = (Vec::new(), Some(0u64));
    let _ = for_each_line(profile, |line, count| {
        sum = sum.and_then(|s| s.checked_add(count));
        lines.push(format!("{line} {count}"));
        Ok(())
    });
    match sum {
        None => return Err(FlamegraphError::CountOverflow),
        Some(0) => return Err(FlamegraphError::Empty),
        Some(_) => {}
    }
    let mut options = Options::default();
    options.title = if title.is_empty() {
        default_title(profile)
    } else {
        title.to_string()
    };
    options.subtitle = subtitle(profile);
    options.count_name = count_name(&profile.sample_types);
    options.name_type = "Function:".to_string();
    options.hash = true;
    let mut out = io::BufWriter::new(out);
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut out)
        .and_then(|()| out.flush())
        .map_err(|source| FlamegraphError::Write { source })
}

/// What the graph does not show: traffic whose stack was not recorded or was cut short.
fn subtitle(profile: &StackProfile) -> Option<String> {
    let mut parts = Vec::new();
    if profile.lost_stacks > 0 {
        parts.push(format!(
            "{} slices without a recorded stack",
            profile.lost_stacks
        ));
    }
    if profile.truncated_stacks > 0 {
        parts.push(format!("{} stacks cut short", profile.truncated_stacks));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

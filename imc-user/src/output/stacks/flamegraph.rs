//! A flame graph SVG of a profile, drawn by inferno (the maintained Rust port of
//! flamegraph.pl) from the profile's folded lines ([`super::folded`]): one box per function in
//! a stack, as wide as its traffic, the process's name at the bottom of each of its stacks;
//! boxes narrower than inferno draws are cut from the lines first.
//! Colours follow each function's name (the same name, the same colour, in every graph).
//!
//! A profile with no traffic draws nothing: it is [`FlamegraphError::Empty`] ("no stacks
//! recorded"), for the caller to print as one line, and nothing is written.
use super::common::{count_name, default_title};
use super::folded::for_each_line_cut;
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
    #[error("writing the flame graph")]
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
    let mut options = options(profile, title);
    let (mut lines, mut sum) = (Vec::new(), Some(0u64));
    // inferno leaves out boxes narrower than `min_width` percent of the whole: what they
    // would have held is cut before inferno reads it (a million tiny stacks draw no box, and
    // held as text they took gigabytes).
    let _ = for_each_line_cut(profile, options.min_width / 100.0, |line, count| {
        sum = sum.and_then(|s| s.checked_add(count));
        lines.push(format!("{line} {count}"));
        Ok(())
    });
    match sum {
        None => return Err(FlamegraphError::CountOverflow),
        Some(0) => return Err(FlamegraphError::Empty),
        Some(_) => {}
    }
    draw(&mut options, &lines, out)
}

/// How the profile's graph is drawn: its title, subtitle, unit and colours.
fn options(profile: &StackProfile, title: &str) -> Options<'static> {
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
    options
}

/// Draws folded `lines` (each with its count).
fn draw(options: &mut Options, lines: &[String], out: impl Write) -> Result<(), FlamegraphError> {
    let mut out = io::BufWriter::new(out);
    flamegraph::from_lines(options, lines.iter().map(String::as_str), &mut out)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::stacks::{Frame, FrameKind, Stack, StackSample};

    /// Cutting what inferno would not draw draws the same graph: one wide stack with deep
    /// callees, and thousands of stacks each far narrower than a box, some under it.
    #[test]
    fn cutting_invisible_boxes_draws_the_same_graph() {
        let frame = |name: String| Frame {
            kind: FrameKind::User,
            function: Some(name),
            module: None,
            offset: 0,
            build_id: None,
            file: None,
            line: None,
        };
        let mut p = StackProfile::default();
        let mut add = |comm: &str, names: Vec<String>, count: u64| {
            let first = p.frames.len() as u32;
            p.frames.extend(names.into_iter().map(frame));
            let frames = (first..p.frames.len() as u32).collect();
            p.stacks.push(Stack { frames });
            p.samples.push(StackSample {
                tgid: 1,
                comm: comm.into(),
                cgroup: None,
                stack: p.stacks.len() as u32 - 1,
                values: smallvec::smallvec![count],
            });
        };
        add(
            "app",
            vec!["leaf".into(), "work".into(), "main".into()],
            1_000_000,
        );
        add("app", vec!["other".into(), "main".into()], 400_000);
        for i in 0..3000 {
            add(
                "app",
                vec![format!("tiny{i}"), "work".into(), "main".into()],
                1 + i % 3,
            );
            add("noise", vec![format!("n{i}"), format!("m{}", i % 7)], 2);
        }
        let mut cut = Vec::new();
        write_flamegraph(&p, "", &mut cut).expect("draws");
        let mut whole = Vec::new();
        let mut lines = Vec::new();
        super::super::folded::for_each_line(&p, |line, count| {
            lines.push(format!("{line} {count}"));
            Ok(())
        })
        .expect("lines");
        assert!(lines.len() > 6000);
        let mut kept = 0;
        super::super::folded::for_each_line_cut(&p, options(&p, "").min_width / 100.0, |_, _| {
            kept += 1;
            Ok(())
        })
        .expect("lines");
        // app;main;work;leaf, app;main;work (its cut callees), app;main;other, noise;m0..m6.
        assert_eq!(kept, 10);
        draw(&mut options(&p, ""), &lines, &mut whole).expect("draws");
        // The same boxes, each as wide and counting the same (a box may sit further along its
        // parent, past the blank its cut siblings leave).
        let boxes = |svg: &[u8]| {
            let text = String::from_utf8_lossy(svg).into_owned();
            let mut found: Vec<String> = text
                .split("<title>")
                .skip(1)
                .map(|t| {
                    let title = t.split("</title>").next().unwrap_or_default();
                    let width = t.split("fg:w=\"").nth(1).and_then(|w| w.split('"').next());
                    format!("{title} {width:?}")
                })
                .collect();
            found.sort();
            found
        };
        let drawn = boxes(&cut);
        assert!(
            drawn
                .iter()
                .any(|b| b.starts_with("leaf (1,000,000 samples")),
            "{drawn:?}"
        );
        assert!(!drawn.iter().any(|b| b.starts_with("tiny")), "{drawn:?}");
        assert_eq!(drawn, boxes(&whole));
    }
}

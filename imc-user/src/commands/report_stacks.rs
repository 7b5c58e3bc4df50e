//! `imc report FILE --folded OUT --flamegraph OUT.svg --pprof OUT`: the recording's traffic by
//! call stack (a recording made with `--stacks`), in the formats profilers read. One more pass
//! over the run: each process's attributed traffic from the intervals, spread over its stacks
//! by the rule of `attribution::stacks`.
use crate::attribution::stacks::StackTotals;
use crate::cli::ReportArgs;
use crate::error::{CliError, CliResult};
use crate::model::stacks::{StackProfile, TimedSample};
use crate::output::stacks as out;
use crate::record::{Item, Reader};
use crate::text::escape;
use std::path::Path;

/// Whether any stack output is asked for.
pub fn wanted(args: &ReportArgs) -> bool {
    args.folded.is_some() || args.flamegraph.is_some() || args.pprof.is_some()
}

/// Refuses, before anything is read, an output that exists without --force, or a flame
/// graph not named `.svg`.
pub fn check_outputs(args: &ReportArgs) -> CliResult<()> {
    if let Some(p) = &args.flamegraph {
        let ext = p.extension().map(|e| e.to_string_lossy().to_lowercase());
        if ext.as_deref() != Some("svg") {
            return Err(CliError::bad_input(format!(
                "{}: --flamegraph writes SVG: give a name ending in .svg",
                escape(&p.display().to_string())
            )));
        }
    }
    for (p, flag, what) in [
        (&args.folded, "--folded", "the folded stacks"),
        (&args.flamegraph, "--flamegraph", "the flame graph"),
        (&args.pprof, "--pprof", "the pprof profile"),
    ] {
        if let Some(p) = p {
            super::record::check_output_of(p, args.force, flag, what)?;
        }
    }
    Ok(())
}

/// A run's traffic by call stack.
#[derive(Default)]
pub struct RunStacks {
    pub profile: StackProfile,
    /// The profile's samples placed at their drains (where asked: the Perfetto trace's).
    pub placed: Vec<TimedSample>,
    /// Whether the run was recorded with stacks.
    pub any: bool,
}

/// What a report needs of the run's stacks, its stack outputs written: the profile for
/// `--json`'s top functions, placed in time for the Perfetto trace's callstack samples;
/// nothing where neither is asked.
pub fn for_report(
    args: &ReportArgs,
    open: &dyn Fn() -> CliResult<Vec<Reader>>,
) -> CliResult<RunStacks> {
    if !(wanted(args) || args.json || args.perfetto.is_some()) {
        return Ok(RunStacks::default());
    }
    let stacks = profile_of(open, args.perfetto.is_some())?;
    if wanted(args) {
        write(args, &stacks)?;
    }
    Ok(stacks)
}

/// The run's stack profile, read from the files `open` gives (oldest first), its samples
/// placed in time where `timed`. Two passes, so that memory follows the processes that have
/// stacks, never every task of the run: the stack batches first (and which processes they
/// name), then the intervals' rows of those processes alone.
pub fn profile_of(open: &dyn Fn() -> CliResult<Vec<Reader>>, timed: bool) -> CliResult<RunStacks> {
    let readers = open()?;
    let specs = readers
        .last()
        .map(|r| r.specs().to_vec())
        .unwrap_or_default();
    let start = readers
        .first()
        .map(|r| (r.header().start_realtime_ns, r.header().start_monotonic_ns));
    let mut totals = StackTotals::new(&specs);
    if timed {
        totals = totals.keep_times();
    }
    let mut named: std::collections::HashSet<u32> = std::collections::HashSet::new();
    let (mut first, mut last) = (u64::MAX, 0u64);
    for mut r in readers {
        // Task rows are not needed in this pass: the reader skips building them.
        r.keep_rows(|_| false);
        while let Some(item) = r.next_item() {
            match item {
                Item::Interval(iv) => {
                    first = first.min(iv.t_start_ns);
                    last = last.max(iv.t_end_ns);
                }
                Item::Stacks(b) => {
                    named.extend(b.charges.iter().map(|c| c.tgid));
                    totals.add_batch(&b);
                }
                Item::Ticks(_) => {}
            }
        }
    }
    if named.is_empty() {
        return Ok(RunStacks::default());
    }
    for mut r in open()? {
        let keep = named.clone();
        r.keep_rows(move |k| keep.contains(&k.tgid));
        while let Some(item) = r.next_item() {
            if let Item::Interval(iv) = item {
                totals.add_interval(&iv);
            }
        }
    }
    let duration = last.saturating_sub(first.min(last));
    let realtime = start.map_or(0, |(rt, mono)| {
        rt.saturating_add(first.saturating_sub(mono))
    });
    let (profile, placed) = totals.timed_profile(realtime, duration);
    Ok(RunStacks {
        profile,
        placed,
        any: true,
    })
}

/// Writes each stack output asked for.
pub fn write(args: &ReportArgs, stacks: &RunStacks) -> CliResult<()> {
    let name = args.file.display().to_string();
    let file = escape(&name);
    let profile = &stacks.profile;
    if !stacks.any {
        return Err(CliError::bad_input(format!(
            "{file}: recorded without stacks: record with `imc record --stacks` for \
             --folded, --flamegraph or --pprof"
        )));
    }
    if let Some(p) = &args.folded {
        stream(p, |mut w| out::write_folded(profile, &mut w))?;
    }
    if let Some(p) = &args.flamegraph {
        let mut buf = Vec::new();
        out::write_flamegraph(profile, "", &mut buf).map_err(|e| match e {
            out::FlamegraphError::Empty => CliError::bad_input(format!(
                "{file}: no traffic was charged to any stack: no flame graph to draw"
            )),
            e => write_error(p, e),
        })?;
        replace(p, &buf)?;
    }
    if let Some(p) = &args.pprof {
        stream(p, |w| out::write_pprof(profile, w))?;
    }
    Ok(())
}

/// Writes `p` as `write` makes it (the folded lines and pprof of a run of a million stacks
/// are never held whole), replacing it once complete.
fn stream(
    p: &Path,
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> CliResult<()> {
    crate::sys::file::replace_by(p, write).map_err(|e| write_error(p, e))
}

fn replace(p: &Path, bytes: &[u8]) -> CliResult<()> {
    crate::sys::file::replace_with(p, bytes).map_err(|e| write_error(p, e))
}

fn write_error(p: &Path, e: impl std::error::Error + Send + Sync + 'static) -> CliError {
    CliError::runtime_because(
        format!("cannot write {}", escape(&p.display().to_string())),
        e,
    )
}

/// Functions listed per task in `report --json`.
const TOP_FUNCTIONS: usize = 10;

/// `report --json` of a recording with stacks: each task row gains `top_functions` (its
/// process's, by traffic in total: `function`, `self_value`, `total_value`, `share`), and the
/// report a `stacks` object (`sample_types`, `lost_stacks`, `truncated_stacks`).
pub fn add_json(v: &mut serde_json::Value, p: &StackProfile) {
    use crate::output::stacks::top_functions;
    for row in v
        .get_mut("tasks")
        .and_then(serde_json::Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        let Some(tgid) = row.get("tgid").and_then(serde_json::Value::as_u64) else {
            continue;
        };
        let top = top_functions(p, tgid as u32, TOP_FUNCTIONS);
        row["top_functions"] = serde_json::json!(top);
    }
    v["stacks"] = serde_json::json!({
        "sample_types": p.sample_types,
        "lost_stacks": p.lost_stacks,
        "truncated_stacks": p.truncated_stacks,
    });
}

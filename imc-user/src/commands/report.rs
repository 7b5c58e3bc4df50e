//! `imc report FILE`: the attribution table and the bursts of a recording.
//!
//! Two passes over the file: the first sums every interval and notes each interval's
//! bandwidth (enough to choose the burst threshold); the second, only when there are bursts,
//! sums the intervals inside each burst. Memory stays proportional to the number of tasks and
//! intervals, not to the file. A rotated `FILE.1` of the same run is read first.
use crate::attribution::summary::{BurstSpan, IntervalRate};
use crate::attribution::timeline::Timeline;
use crate::attribution::{Attributor, Summary, compare, find_bursts, traffic_amount};
use crate::cli::{GlobalArgs, GroupBy, ReportArgs};
use crate::error::{CliError, CliResult};
use crate::model::result::{BurstRow, IntervalResult, PrecisionRow, ReportResult};
use crate::output::report::{ReportView, Unit, human, rate_unit};
use crate::output::{perfetto, plot};
use crate::record::{Item, ReadStatus, Reader, rotated_path};
use crate::text::escape;
use imc_common::KIND_SWITCH;
use std::path::Path;
use std::process::ExitCode;

/// Tasks listed per burst, and rows of the human table.
const BURST_TASKS: usize = 10;

/// The files of the run, oldest first: FILE.1 when it is this run's previous segment.
fn open_run(path: &Path) -> CliResult<Vec<Reader>> {
    let main = Reader::open(path)?;
    let mut out = Vec::new();
    let old = rotated_path(path);
    if main.header().segment > 0
        && old.is_file()
        && let Ok(prev) = Reader::open(&old)
        && prev.header().run_id == main.header().run_id
        && prev.header().segment + 1 == main.header().segment
    {
        out.push(prev);
    }
    out.push(main);
    Ok(out)
}

/// What one read of the whole run learns: its totals, each interval's rate (for the bursts),
/// the readers' warnings and, for a precise run, how far the tick alone would have been off.
struct WholeRun {
    summary: Summary,
    rates: Vec<IntervalRate>,
    warnings: Vec<String>,
    precise: Option<PrecisionRow>,
}

/// Reads every segment of the run once, from the first record to the last.
fn read_whole_run(readers: Vec<Reader>) -> WholeRun {
    let specs = readers
        .last()
        .map(|r| r.specs().to_vec())
        .unwrap_or_default();
    let mut summary = Summary::new(&specs);
    let mut rates = Vec::new();
    let mut warnings = Vec::new();
    // Precise runs: the raw ticks around bursts hold switch records; attribute them twice
    // (with and without the switches) to say how much the tick alone would have differed.
    let mut cmp: Option<(Attributor, Attributor, Summary, Summary)> = None;
    let (mut ticks, mut switches) = (0u64, 0u64);
    for mut r in readers {
        let h = r.header().clone();
        while let Some(item) = r.next_item() {
            match item {
                Item::Interval(iv) => {
                    rates.push(IntervalRate {
                        t_start_ns: iv.t_start_ns,
                        t_end_ns: iv.t_end_ns,
                        amount: traffic_amount(&iv, &specs),
                    });
                    summary.add(&iv);
                }
                Item::Ticks(block) => {
                    if !block.iter().any(|t| t.kind == KIND_SWITCH) {
                        continue;
                    }
                    let (p, t, sp, st) = cmp.get_or_insert_with(|| {
                        let topo = h.topology();
                        let mk = |tick_only| {
                            Attributor::new(&specs, &topo, h.source.clone())
                                .tick_hz(h.freq_hz)
                                .tick_only(tick_only)
                        };
                        (
                            mk(false),
                            mk(true),
                            Summary::new(&specs),
                            Summary::new(&specs),
                        )
                    });
                    let mut end = 0;
                    for rec in &block {
                        p.push_tick(rec);
                        t.push_tick(rec);
                        end = end.max(rec.t_ns);
                        if rec.kind == KIND_SWITCH {
                            switches += 1;
                        } else {
                            ticks += 1;
                        }
                    }
                    sp.add(&p.finish(end));
                    st.add(&t.finish(end));
                }
            }
        }
        match r.status() {
            ReadStatus::Damaged { offset, reason } => warnings.push(format!(
                "{}: {reason} at byte {offset}: the recording was cut; reporting everything before it",
                r.path().display()
            )),
            ReadStatus::Unfinished => warnings.push(format!(
                "{}: no end marker: the recording was interrupted (or is still being written); reporting all it holds",
                r.path().display()
            )),
            ReadStatus::Complete | ReadStatus::Continued | ReadStatus::Reading => {}
        }
    }
    let precise = cmp.map(|(_, _, sp, st)| {
        let mut row = compare(&sp.finish(GroupBy::Pid), &st.finish(GroupBy::Pid));
        row.ticks = ticks;
        row.switches = switches;
        row
    });
    WholeRun {
        summary,
        rates,
        warnings,
        precise,
    }
}

/// Sums the intervals inside each burst (indices are positions in the run's interval order).
fn burst_rows(path: &Path, spans: &[BurstSpan], by: GroupBy) -> CliResult<Vec<BurstRow>> {
    if spans.is_empty() {
        return Ok(Vec::new());
    }
    let readers = open_run(path)?;
    let specs = readers
        .last()
        .map(|r| r.specs().to_vec())
        .unwrap_or_default();
    let mut sums: Vec<Summary> = spans.iter().map(|_| Summary::new(&specs)).collect();
    let mut idx = 0usize;
    let mut b = 0usize;
    'files: for r in readers {
        for item in r {
            let Item::Interval(iv) = item else { continue };
            while b < spans.len() && spans[b].last < idx {
                b += 1;
            }
            if b >= spans.len() {
                break 'files;
            }
            if idx >= spans[b].first {
                sums[b].add(&iv);
            }
            idx += 1;
        }
    }
    Ok(spans
        .iter()
        .zip(sums)
        .map(|(s, sum)| {
            let mut tasks = sum.finish(by).tasks;
            tasks.truncate(BURST_TASKS);
            BurstRow {
                t_start_ns: s.t_start_ns,
                t_end_ns: s.t_end_ns,
                bytes_per_s: s.bytes_per_s,
                tasks,
            }
        })
        .collect())
}

/// Series of the top groups drawn or traced.
const VIEW_GROUPS: usize = 8;

/// The run as a timeline (one more pass over the file), then the Perfetto trace and the plot.
fn write_views(args: &ReportArgs, total: &IntervalResult, bursts: &[BurstRow]) -> CliResult<()> {
    let readers = open_run(&args.file)?;
    let specs = readers
        .last()
        .map(|r| r.specs().to_vec())
        .unwrap_or_default();
    let mut tl = Timeline::new(&specs, total, args.by, VIEW_GROUPS);
    for r in readers {
        for item in r {
            if let Item::Interval(iv) = item {
                tl.add(&iv);
            }
        }
    }
    let failed = |what: &str, path: &Path, e: std::io::Error| {
        CliError::runtime(format!("cannot write the {what} {}: {e}", path.display()))
    };
    if let Some(path) = &args.perfetto {
        perfetto::write(path, &tl, bursts).map_err(|e| failed("Perfetto trace", path, e))?;
    }
    if let Some(path) = &args.plot {
        let name = args.file.file_name().unwrap_or_default().to_string_lossy();
        let title = format!("{name}: {}, {}", total.source, tl.unit.per_s());
        plot::write(path, &tl, bursts, &title).map_err(|e| failed("plot", path, e))?;
    }
    Ok(())
}

pub fn run(_global: &GlobalArgs, args: &ReportArgs) -> CliResult<ExitCode> {
    // The views' files are checked as a recording's output is, before the file is read.
    for out in [&args.perfetto, &args.plot].into_iter().flatten() {
        super::record::check_output(out, args.force)?;
    }
    let readers = open_run(&args.file)?;
    let header = readers
        .last()
        .map(|r| r.header().clone())
        .ok_or_else(|| CliError::bad_input("no recording"))?;
    let whole = read_whole_run(readers);
    let unit = Unit::of(&header.specs().unwrap_or_default());
    // A suffix means powers of 1024 for bytes, of 1000 for counts.
    let threshold = args.burst_threshold.map(|r| r.per_s(unit.is_bytes()));
    let (threshold, spans) = find_bursts(&whole.rates, threshold);
    let views = args.perfetto.is_some() || args.plot.is_some();
    let want_bursts = args.json || args.bursts || views;
    let bursts = if want_bursts {
        burst_rows(&args.file, &spans, args.by)?
    } else {
        Vec::new()
    };
    let total = whole.summary.finish(args.by);
    for w in &whole.warnings {
        eprintln!("imc: warning: {}", escape(w));
    }
    if views {
        write_views(args, &total, &bursts)?;
    }
    let report = ReportResult {
        total,
        bursts,
        precise_vs_tick: whole.precise,
    };
    let text = if args.json {
        let counts_unit = match &unit {
            Unit::Bytes => None,
            Unit::Counts(events) => Some(rate_unit(events)),
        };
        let mut s = crate::output::json::to_json_by(&report, counts_unit.as_deref(), args.by)
            .map_err(|e| CliError::runtime(format!("cannot encode JSON: {e}")))?;
        s.push('\n');
        s
    } else {
        let view = ReportView {
            file: &args.file,
            freq_hz: header.freq_hz,
            by: args.by,
            bursts: args.bursts,
            threshold_given: args.burst_threshold.is_some(),
        };
        human(&report, &view, &unit, threshold, spans.len())
    };
    crate::error::write_stdout(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

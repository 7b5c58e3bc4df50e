//! `imc report FILE`: the attribution table and the bursts of a recording.
//!
//! Passes over the file, each streaming it chunk by chunk: the first sums the packages and notes
//! each interval's bandwidth (enough to choose the burst threshold) and how many tasks the
//! intervals use, keeping no task row; then one pass per part of the tasks (one part for up to
//! [`TASKS_PER_PASS`] tasks) sums that part's rows, the run's and each burst's, so the busiest
//! [`KEPT_ROWS`] rows are exact and the rest are summed into one "others" row; the views read
//! once more, only the rows they draw. Memory follows those bounds and the readers' tables (one
//! chunk, 24 bytes a task), not the number of tasks. A rotated `FILE.1` of the same run is read
//! first.
use crate::attribution::summary::{BurstSpan, Groups, IntervalRate, TopRows};
use crate::attribution::timeline::Timeline;
use crate::attribution::{Attributor, Summary, compare, find_bursts, group_rows};
use crate::cli::{GlobalArgs, GroupBy, ReportArgs};
use crate::error::{CliError, CliResult};
use crate::model::result::{
    BurstRow, IntervalResult, OthersRow, PrecisionRow, ReportResult, TaskRow,
};
use crate::model::{KeyParts, PidFilter};
use crate::output::report::{
    CommandReport, CommandSpan, ReportView, Unit, command_text, human, rate_unit,
};
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

/// What one read of the whole run learns: its totals (no task rows), each interval's rate (for
/// the bursts), the readers' warnings, how many tasks its intervals use and, for a precise run,
/// how far the tick alone would have been off.
struct WholeRun {
    summary: Summary,
    rates: Vec<IntervalRate>,
    warnings: Vec<String>,
    tasks_used: usize,
    precise: Option<PrecisionRow>,
    /// Per interval (as `rates`): the recorded command's traffic and the machine's attributed
    /// traffic, both in the recording's unit.
    command: Vec<(f64, f64)>,
}

/// Reads every segment of the run once, from the first record to the last, keeping no task
/// row: memory is the readers' tables and one chunk, whatever the number of tasks.
fn read_whole_run(readers: Vec<Reader>) -> WholeRun {
    let specs = readers
        .last()
        .map(|r| r.specs().to_vec())
        .unwrap_or_default();
    let mut summary = Summary::new(&specs);
    let mut rates = Vec::new();
    let mut warnings = Vec::new();
    let mut tasks_used = 0;
    let mut command = Vec::new();
    // Precise runs: the raw ticks around bursts hold switch records; attribute them twice
    // (with and without the switches) to say how much the tick alone would have differed.
    let mut cmp: Option<(Attributor, Attributor, Summary, Summary)> = None;
    let (mut ticks, mut switches) = (0u64, 0u64);
    for mut r in readers {
        // Asked once per task an interval uses (the reader keeps the answer): a count of the
        // tasks to sum, however many the file's table defines.
        let used = std::rc::Rc::new(std::cell::Cell::new(0usize));
        let count = used.clone();
        r.keep_rows(move |_| {
            count.set(count.get() + 1);
            false
        });
        let h = r.header().clone();
        while let Some(item) = r.next_item() {
            match item {
                Item::Interval(iv) => {
                    let amount = r.last_amount();
                    rates.push(IntervalRate {
                        t_start_ns: iv.t_start_ns,
                        t_end_ns: iv.t_end_ns,
                        amount,
                    });
                    summary.add_amount(&iv, amount);
                    command.push((r.last_command(), r.last_attributed()));
                }
                Item::Ticks(block) => {
                    // `record -p` kept only some tasks' records: attributing them again would
                    // charge the package's traffic to those alone.
                    if !block.iter().any(|t| t.kind == KIND_SWITCH) || !h.pids.is_empty() {
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
        tasks_used += used.get();
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
        tasks_used,
        precise,
        command,
    }
}

/// Rows a report keeps exactly (the busiest, in every output); the rest are summed into one
/// "others" row. The text table shows the first [`TABLE_ROWS`](crate::output::report) of them.
pub const KEPT_ROWS: usize = 1000;

/// Distinct tasks summed in one pass over the file (about 2 KiB each, twice: the run's and a
/// burst's). A recording of more tasks is read in several passes, each summing the tasks of one
/// part (split by a hash of their key), so memory follows this bound, not the recording.
pub const TASKS_PER_PASS: usize = 40_000;

/// Groups (`--by comm|cgroup|container|pod`) held at once across the passes: beyond this many
/// the report is refused (one line) rather than let memory follow the recording.
pub const MAX_GROUPS: usize = 100_000;

/// How a pass picks its part of the task rows: by the hash of the grouping key (thread and
/// process groupings: a group's members all fall in one part, so each part's groups are whole),
/// or by the hash of the task (other groupings: a group's members spread over the parts and
/// the groups are summed across them, one row per group).
fn split_by_group(by: GroupBy) -> bool {
    matches!(by, GroupBy::Pid | GroupBy::Tgid)
}

fn task_hash(p: KeyParts<'_>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (p.pid, p.tgid, p.comm, p.cgroup).hash(&mut h);
    h.finish()
}

/// The report's task rows and bursts, exact, in passes over the file (see [`TASKS_PER_PASS`]).
/// `total` is the run without its task rows (from the first read); the result: the kept rows,
/// the others' sum, and per burst its busiest [`BURST_TASKS`] groups.
fn task_rows(
    path: &Path,
    whole: &WholeRun,
    spans: &[BurstSpan],
    by: GroupBy,
    pids: &PidFilter,
    command_only: bool,
) -> CliResult<(Vec<TaskRow>, Option<OthersRow>, Vec<BurstRow>)> {
    let parts = whole.tasks_used.div_ceil(TASKS_PER_PASS).max(1) as u64;
    let by_group = split_by_group(by);
    let mut top = TopRows::new(KEPT_ROWS);
    let mut burst_top: Vec<TopRows> = spans.iter().map(|_| TopRows::new(BURST_TASKS)).collect();
    // Other groupings: every group, summed over the passes (the run's, and each burst's).
    let mut groups = Groups::new(by);
    let mut burst_groups: Vec<Groups> = spans.iter().map(|_| Groups::new(by)).collect();
    for part in 0..parts {
        let readers = open_run(path)?;
        let specs = readers
            .last()
            .map(|r| r.specs().to_vec())
            .unwrap_or_default();
        let mut sum = Summary::new(&specs);
        let mut burst: Option<(usize, Summary)> = None;
        let mut idx = 0usize;
        let mut b = 0usize;
        let mut take_burst = |k: usize, mut s: Summary, top: &mut Vec<TopRows>| {
            let rows = s.take_rows();
            if by_group {
                top[k].push(group_rows(rows, by));
            } else {
                for r in rows {
                    burst_groups[k].add(r);
                }
            }
        };
        for mut r in readers {
            let pids = pids.clone();
            r.command_only(command_only);
            r.keep_rows(move |p| {
                if !pids.keeps(p.pid, p.tgid) {
                    return false;
                }
                let h = if by_group {
                    by.key_hash(p)
                } else {
                    task_hash(p)
                };
                h % parts == part
            });
            while let Some(item) = r.next_item() {
                let Item::Interval(iv) = item else { continue };
                let amount = r.last_amount();
                sum.add_amount(&iv, amount);
                while b < spans.len() && spans[b].last < idx {
                    if let Some((k, s)) = burst.take() {
                        take_burst(k, s, &mut burst_top);
                    }
                    b += 1;
                }
                if b < spans.len() && idx >= spans[b].first {
                    let (_, s) = burst.get_or_insert_with(|| (b, Summary::new(&specs)));
                    s.add_amount(&iv, amount);
                }
                idx += 1;
            }
        }
        if let Some((k, s)) = burst.take() {
            take_burst(k, s, &mut burst_top);
        }
        let rows = sum.take_rows();
        if by_group {
            top.push(group_rows(rows, by));
        } else {
            for r in rows {
                groups.add(r);
            }
            let held = groups.len() + burst_groups.iter().map(Groups::len).sum::<usize>();
            if held > MAX_GROUPS {
                return Err(CliError::bad_input(format!(
                    "{}: more than {MAX_GROUPS} {}s: too many rows to group in bounded memory; report --by pid or --by tgid",
                    path.display(),
                    by.name()
                )));
            }
        }
    }
    if !by_group {
        top.push(groups.into_rows());
        for (t, g) in burst_top.iter_mut().zip(burst_groups) {
            t.push(g.into_rows());
        }
    }
    let (rows, others) = top.finish();
    let bursts = spans
        .iter()
        .zip(burst_top)
        .map(|(s, t)| BurstRow {
            t_start_ns: s.t_start_ns,
            t_end_ns: s.t_end_ns,
            bytes_per_s: s.bytes_per_s,
            tasks: t.finish().0,
        })
        .collect();
    Ok((rows, others, bursts))
}

/// Series of the top groups drawn or traced.
const VIEW_GROUPS: usize = 8;

/// The run as a timeline (one more pass over the file, reading only the rows of the groups
/// drawn), then the Perfetto trace and the plot.
fn write_views(
    args: &ReportArgs,
    total: &IntervalResult,
    bursts: &[BurstRow],
    command: Option<&CommandReport>,
) -> CliResult<()> {
    let readers = open_run(&args.file)?;
    let specs = readers
        .last()
        .map(|r| r.specs().to_vec())
        .unwrap_or_default();
    let by = args.by;
    let mut tl = Timeline::new(&specs, total, by, VIEW_GROUPS);
    let drawn: std::collections::HashSet<u64> = total
        .tasks
        .iter()
        .filter(|r| tl.groups.iter().any(|g| g.key == by.key(r)))
        .map(|r| by.key_hash(KeyParts::of(r)))
        .collect();
    for mut r in readers {
        let drawn = drawn.clone();
        let pids = PidFilter::new(&args.pid);
        r.keep_rows(move |p| pids.keeps(p.pid, p.tgid) && drawn.contains(&by.key_hash(p)));
        while let Some(item) = r.next_item() {
            if let Item::Interval(iv) = item {
                tl.add_amount(&iv, r.last_amount());
            }
        }
    }
    let failed = |what: &str, path: &Path, e: std::io::Error| {
        CliError::runtime_because(format!("cannot write the {what} {}", path.display()), e)
    };
    if let Some(path) = &args.perfetto {
        perfetto::write(path, &tl, bursts, command)
            .map_err(|e| failed("Perfetto trace", path, e))?;
    }
    if let Some(path) = &args.plot {
        let name = args.file.file_name().unwrap_or_default().to_string_lossy();
        let title = format!("{name}: {}, {}", total.source, tl.unit.per_s());
        plot::write(path, &tl, bursts, &title, command).map_err(|e| failed("plot", path, e))?;
    }
    Ok(())
}

pub fn run(_global: &GlobalArgs, args: &ReportArgs) -> CliResult<ExitCode> {
    // The views' files are checked as a recording's output is, before the file is read.
    if let Some(p) = &args.perfetto {
        super::record::check_output_of(p, args.force, "--perfetto", "the Perfetto trace")?;
    }
    if let Some(p) = &args.plot {
        // The plot is SVG: a name that says otherwise (out.png) would hold what it does not say.
        let ext = p.extension().map(|e| e.to_string_lossy().to_lowercase());
        if ext.as_deref() != Some("svg") {
            return Err(CliError::bad_input(format!(
                "{}: --plot writes SVG: give a name ending in .svg",
                escape(&p.display().to_string())
            )));
        }
        super::record::check_output_of(p, args.force, "--plot", "the plot")?;
    }
    let readers = open_run(&args.file)?;
    let header = readers
        .last()
        .map(|r| r.header().clone())
        .ok_or_else(|| CliError::bad_input("no recording"))?;
    if args.command && header.command.is_none() {
        return Err(CliError::bad_input(format!(
            "{}: recorded without a command (imc record -o FILE -- CMD marks one): report it without --command",
            escape(&args.file.display().to_string())
        )));
    }
    let whole = read_whole_run(readers);
    let unit = Unit::of(&header.specs().unwrap_or_default());
    // A suffix means powers of 1024 for bytes, of 1000 for counts.
    let threshold = args.burst_threshold.map(|r| r.per_s(unit.is_bytes()));
    let (threshold, spans) = find_bursts(&whole.rates, threshold);
    let views = args.perfetto.is_some() || args.plot.is_some();
    let want_bursts = args.json || args.bursts || views;
    let spans_wanted = if want_bursts { &spans[..] } else { &[] };
    let (rows, others, bursts) = task_rows(
        &args.file,
        &whole,
        spans_wanted,
        args.by,
        &PidFilter::new(&args.pid),
        false,
    )?;
    let command = match (&header.command, args.no_command) {
        (Some(_), false) => Some(command_report(args, &header, &whole, &spans, &unit)?),
        _ => None,
    };
    let total = whole.summary.result(rows);
    for w in &whole.warnings {
        eprintln!("imc: warning: {}", escape(w));
    }
    if views {
        write_views(args, &total, &bursts, command.as_ref())?;
    }
    let report = ReportResult {
        total,
        bursts,
        precise_vs_tick: whole.precise,
        others,
    };
    let text = if args.json {
        let counts_unit = match &unit {
            Unit::Bytes => None,
            Unit::Counts(events) => Some(rate_unit(events)),
        };
        let cu = counts_unit.as_deref();
        let mut s = to_json(&report, cu, args.by)?;
        if command.is_some() || !header.pids.is_empty() {
            // The machine's object with the command's (and `record -p`'s pids) beside its
            // fields, as one object.
            let bad = |e: serde_json::Error| CliError::runtime_because("cannot encode JSON", e);
            let mut v: serde_json::Value = serde_json::from_str(&s).map_err(bad)?;
            if let Some(c) = &command {
                v["command"] = serde_json::from_str(&to_json(c, cu, args.by)?).map_err(bad)?;
            }
            if !header.pids.is_empty() {
                v["recorded_pids"] = serde_json::json!(header.pids);
            }
            s = v.to_string();
        }
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
        let mut machine = human(&report, &view, &unit, threshold, spans.len());
        if !header.pids.is_empty() {
            let pids: Vec<String> = header.pids.iter().map(u32::to_string).collect();
            machine.insert_str(
                0,
                &format!(
                    "recorded with -p {}: only those processes' rows; package totals are the whole machine's\n",
                    pids.join(",")
                ),
            );
        }
        match &command {
            Some(c) => command_text(c, &report, args.by, &unit) + &machine,
            None => machine,
        }
    };
    crate::error::write_stdout(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// The recorded command's part of the run: its rows (one more pass per part of its tasks,
/// reading only its rows), its traffic and its shares over the run, per interval and per burst.
fn command_report(
    args: &ReportArgs,
    header: &crate::record::RecordHeader,
    whole: &WholeRun,
    spans: &[BurstSpan],
    unit: &Unit,
) -> CliResult<CommandReport> {
    let Some(cmd) = &header.command else {
        return Err(CliError::bad_input("no command"));
    };
    let (tasks, others, _) = task_rows(
        &args.file,
        whole,
        &[],
        args.by,
        &PidFilter::new(&args.pid),
        true,
    )?;
    let span_of = |first: usize, last: usize| {
        let (mut c, mut a, mut t) = (0.0, 0.0, 0.0);
        for i in first..=last.min(whole.rates.len().saturating_sub(1)) {
            c += whole.command[i].0;
            a += whole.command[i].1;
            t += whole.rates[i].amount;
        }
        let r = (&whole.rates[first], &whole.rates[last]);
        CommandSpan::new((r.0.t_start_ns, r.1.t_end_ns), c, a, t)
    };
    let per_interval: Vec<CommandSpan> = (0..whole.rates.len()).map(|i| span_of(i, i)).collect();
    let busiest = per_interval
        .iter()
        .filter(|i| i.traffic > 0.0)
        .max_by(|a, b| {
            let s = |x: &CommandSpan| x.share_of_total.unwrap_or(0.0);
            s(a).total_cmp(&s(b))
        })
        .cloned();
    let per_burst = spans
        .iter()
        .filter(|b| b.first <= b.last && b.last < whole.rates.len())
        .map(|b| span_of(b.first, b.last))
        .collect();
    let sum = |f: fn(&(f64, f64)) -> f64| whole.command.iter().map(f).sum::<f64>();
    let machine_total: f64 = whole.rates.iter().map(|r| r.amount).sum();
    let run = CommandSpan::new((0, 0), sum(|c| c.0), sum(|c| c.1), machine_total);
    Ok(CommandReport {
        argv: cmd.argv.clone(),
        pid: cmd.pid,
        tree: cmd.tree.clone(),
        cgroup_path: cmd.cgroup_path.clone(),
        unit: match unit {
            Unit::Bytes => "bytes".into(),
            Unit::Counts(e) => e.join("+"),
        },
        traffic: run.traffic,
        machine_attributed: sum(|c| c.1),
        machine_total,
        share_of_attributed: run.share_of_attributed,
        share_of_total: run.share_of_total,
        tasks,
        others,
        busiest,
        per_burst,
        per_interval,
    })
}

/// The JSON of the report and of the command's part alike (`to_json_by`'s rules: a stand-in's
/// byte fields null, a group row's member identity null).
fn to_json(v: &impl serde::Serialize, counts_unit: Option<&str>, by: GroupBy) -> CliResult<String> {
    crate::output::json::to_json_by(v, counts_unit, by)
        .map_err(|e| CliError::runtime_because("cannot encode JSON", e))
}

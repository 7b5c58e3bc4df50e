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
//!
//! Victims (`--victims`, `--json` and `--perfetto` of a recording with stall counters): with
//! thread and process groupings each part is read once more first, for its tasks' baselines
//! (their stall share outside the bursts), so each burst's victims are ranked as it ends and
//! only the most victimized are kept; other groupings rank them from the groups they already
//! hold.
use crate::attribution::summary::{BurstSpan, Groups, IntervalRate, TopRows};
use crate::attribution::timeline::Timeline;
use crate::attribution::victims::{self, Member, StallSeries, VictimTop, Victimhood};
use crate::attribution::{Attributor, Summary, compare, find_bursts, group_rows};
use crate::cli::{GlobalArgs, GroupBy, ReportArgs};
use crate::error::{CliError, CliResult};
use crate::model::result::{
    BurstRow, IntervalResult, OthersRow, PrecisionRow, ReportResult, TaskRow,
};
use crate::model::{KeyParts, PidFilter, SlotSpec, StallPart, Victims as PairKeys};
use crate::output::report::{
    CommandReport, CommandSpan, LatencySeries, PackageLatencySummary, ReportView, Unit,
    command_text, human, rate_unit, victims_text,
};
use crate::output::{perfetto, plot};
use crate::record::{Item, ReadStatus, Reader, RecordHeader, rotated_path};
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
    /// The packages' loaded latency and utilisation, where the recording has them.
    latency: LatencySeries,
}

/// Precise runs: the raw ticks around bursts hold switch records; they are attributed twice
/// (with and without the switches) to say how much the tick alone would have differed.
struct PreciseCmp {
    precise: Attributor,
    tick_only: Attributor,
    precise_sum: Summary,
    tick_sum: Summary,
    ticks: u64,
    switches: u64,
}

impl PreciseCmp {
    fn new(specs: &[SlotSpec], h: &RecordHeader) -> PreciseCmp {
        let topo = h.topology();
        let mk = |tick_only| {
            Attributor::new(specs, &topo, h.source.clone())
                .tick_hz(h.freq_hz)
                .tick_only(tick_only)
        };
        PreciseCmp {
            precise: mk(false),
            tick_only: mk(true),
            precise_sum: Summary::new(specs),
            tick_sum: Summary::new(specs),
            ticks: 0,
            switches: 0,
        }
    }

    fn push_block(&mut self, block: &[imc_common::Record]) {
        let mut end = 0;
        for rec in block {
            self.precise.push_tick(rec);
            self.tick_only.push_tick(rec);
            end = end.max(rec.t_ns);
            if rec.kind == KIND_SWITCH {
                self.switches += 1;
            } else {
                self.ticks += 1;
            }
        }
        self.precise_sum.add(&self.precise.finish(end));
        self.tick_sum.add(&self.tick_only.finish(end));
    }

    fn row(&self) -> PrecisionRow {
        let mut row = compare(
            &self.precise_sum.finish(GroupBy::Pid),
            &self.tick_sum.finish(GroupBy::Pid),
        );
        row.ticks = self.ticks;
        row.switches = self.switches;
        row
    }
}

/// What a reader's end says about the file: a warning where it was cut or unfinished.
fn damage_warning(r: &Reader) -> Option<String> {
    match r.status() {
        ReadStatus::Damaged {
            offset,
            reason,
            cut,
        } => Some(format!(
            "{}: {reason} at byte {offset}: the recording {}; reporting everything before it",
            r.path().display(),
            if *cut { "was cut" } else { "is damaged there" }
        )),
        ReadStatus::Unfinished => Some(format!(
            "{}: no end marker: the recording was interrupted (or is still being written); reporting all it holds",
            r.path().display()
        )),
        ReadStatus::Complete | ReadStatus::Continued | ReadStatus::Reading => None,
    }
}

/// Reads every segment of the run once, from the first record to the last, keeping no task
/// row: memory is the readers' tables and one chunk, whatever the number of tasks.
/// `keep_latency`: keep each interval's latency and utilisation, not only their sums.
fn read_whole_run(readers: Vec<Reader>, keep_latency: bool) -> WholeRun {
    let specs = readers
        .last()
        .map(|r| r.specs().to_vec())
        .unwrap_or_default();
    let mut summary = Summary::new(&specs);
    let mut rates = Vec::new();
    let mut warnings = Vec::new();
    let mut tasks_used = 0;
    let mut command = Vec::new();
    let mut latency = LatencySeries::new(keep_latency);
    let mut cmp: Option<PreciseCmp> = None;
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
                    latency.add(&iv);
                }
                // `record -p` kept only some tasks' records: attributing them again would
                // charge the package's traffic to those alone.
                Item::Ticks(block)
                    if block.iter().any(|t| t.kind == KIND_SWITCH) && h.pids.is_empty() =>
                {
                    cmp.get_or_insert_with(|| PreciseCmp::new(&specs, &h))
                        .push_block(&block);
                }
                Item::Ticks(_) | Item::Stacks(_) => {}
            }
        }
        tasks_used += used.get();
        warnings.extend(damage_warning(&r));
    }
    WholeRun {
        summary,
        rates,
        warnings,
        tasks_used,
        precise: cmp.map(|c| c.row()),
        command,
        latency,
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

/// What the passes over the task rows give: the kept rows, the others' sum, per burst its
/// busiest [`BURST_TASKS`] groups, and the victims where asked and recorded.
struct TaskRows {
    rows: Vec<TaskRow>,
    others: Option<OthersRow>,
    bursts: Vec<BurstRow>,
    victims: Option<VictimTop>,
}

/// The sums of the passes over the file, the run's and each burst's (see [`TASKS_PER_PASS`]).
struct Passes {
    by: GroupBy,
    /// Each part's groups are whole ([`split_by_group`]).
    by_group: bool,
    top: TopRows,
    burst_top: Vec<TopRows>,
    /// Other groupings: every group, summed over the passes (the run's, and each burst's).
    groups: Groups,
    burst_groups: Vec<Groups>,
    /// Victims, where the recording has the stall pair and they are wanted: the kept ones and
    /// the on-CPU time's value key; with thread and process groupings, this part's victimhood
    /// (its baselines read in a pass of their own, so each burst's victims are ranked as it
    /// ends and none of its rows is kept).
    victims: Option<(VictimTop, Option<String>)>,
    hood: Option<Victimhood>,
}

impl Passes {
    fn new(spans: usize, by: GroupBy, victims: Option<Option<String>>) -> Passes {
        Passes {
            by,
            by_group: split_by_group(by),
            top: TopRows::new(KEPT_ROWS),
            burst_top: (0..spans).map(|_| TopRows::new(BURST_TASKS)).collect(),
            groups: Groups::new(by),
            burst_groups: (0..spans).map(|_| Groups::new(by)).collect(),
            victims: victims.map(|time| (VictimTop::new(KEPT_ROWS, BURST_TASKS, spans), time)),
            hood: None,
        }
    }

    fn members(&self, rows: &[TaskRow]) -> Vec<Member> {
        match &self.victims {
            Some((_, time)) => victims::members(rows, self.by, time.as_deref()),
            None => Vec::new(),
        }
    }

    /// A burst's rows of this part, once it has ended.
    fn take_burst(&mut self, k: usize, mut s: Summary) {
        let rows = s.take_rows();
        if self.by_group {
            let g = group_rows(rows, self.by);
            let m = self.members(&g);
            if let (Some(h), Some((top, _))) = (&mut self.hood, &mut self.victims) {
                top.push_burst(k, h.burst(&m));
            }
            self.burst_top[k].push(g);
        } else {
            for r in rows {
                self.burst_groups[k].add(r);
            }
        }
    }

    /// The run's rows of this part, at the end of its pass.
    fn take_run(&mut self, rows: Vec<TaskRow>, path: &Path) -> CliResult<()> {
        if self.by_group {
            let g = group_rows(rows, self.by);
            let run = self.members(&g);
            let hood = self.hood.take();
            if let Some((top, _)) = &mut self.victims {
                let hood = hood.unwrap_or_else(|| {
                    Victimhood::new(victims::baselines(&run, std::iter::empty()))
                });
                top.push_run(hood.run(&run));
            }
            self.top.push(g);
            return Ok(());
        }
        for r in rows {
            self.groups.add(r);
        }
        let held = self.groups.len() + self.burst_groups.iter().map(Groups::len).sum::<usize>();
        if held > MAX_GROUPS {
            return Err(CliError::bad_input(format!(
                "{}: more than {MAX_GROUPS} {}s: too many rows to group in bounded memory; report --by pid or --by tgid",
                path.display(),
                self.by.name()
            )));
        }
        Ok(())
    }

    /// Thread and process groupings with victims: this part's baselines, from a pass that sums
    /// its rows over the run and over the bursts' intervals.
    fn read_baselines(
        &mut self,
        path: &Path,
        spans: &[BurstSpan],
        keep: impl Fn(KeyParts<'_>) -> bool + Clone + 'static,
        command_only: bool,
    ) -> CliResult<()> {
        if !self.by_group || self.victims.is_none() || spans.is_empty() {
            return Ok(());
        }
        let readers = open_run(path)?;
        let specs = readers
            .last()
            .map(|r| r.specs().to_vec())
            .unwrap_or_default();
        let (mut run, mut inside) = (Summary::new(&specs), Summary::new(&specs));
        let mut idx = 0usize;
        for mut r in readers {
            r.command_only(command_only);
            r.keep_rows(keep.clone());
            while let Some(item) = r.next_item() {
                let Item::Interval(iv) = item else { continue };
                let amount = r.last_amount();
                run.add_amount(&iv, amount);
                let k = spans.partition_point(|s| s.last < idx);
                if spans.get(k).is_some_and(|s| s.first <= idx) {
                    inside.add_amount(&iv, amount);
                }
                idx += 1;
            }
        }
        let run = self.members(&group_rows(run.take_rows(), self.by));
        let inside = self.members(&group_rows(inside.take_rows(), self.by));
        self.hood = Some(Victimhood::new(victims::baselines(&run, inside.iter())));
        Ok(())
    }

    /// One pass: the rows of one part of the tasks, over the run and in each burst.
    fn read_part(
        &mut self,
        path: &Path,
        spans: &[BurstSpan],
        keep: impl Fn(KeyParts<'_>) -> bool + Clone + 'static,
        command_only: bool,
    ) -> CliResult<()> {
        self.read_baselines(path, spans, keep.clone(), command_only)?;
        let readers = open_run(path)?;
        let specs = readers
            .last()
            .map(|r| r.specs().to_vec())
            .unwrap_or_default();
        let mut sum = Summary::new(&specs);
        let mut burst: Option<(usize, Summary)> = None;
        let (mut idx, mut b) = (0usize, 0usize);
        for mut r in readers {
            r.command_only(command_only);
            r.keep_rows(keep.clone());
            while let Some(item) = r.next_item() {
                let Item::Interval(iv) = item else { continue };
                let amount = r.last_amount();
                sum.add_amount(&iv, amount);
                while b < spans.len() && spans[b].last < idx {
                    if let Some((k, s)) = burst.take() {
                        self.take_burst(k, s);
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
            self.take_burst(k, s);
        }
        self.take_run(sum.take_rows(), path)
    }

    fn finish(mut self, spans: &[BurstSpan]) -> TaskRows {
        if !self.by_group {
            let run = self.groups.into_rows();
            let bursts: Vec<Vec<TaskRow>> = self
                .burst_groups
                .into_iter()
                .map(Groups::into_rows)
                .collect();
            if let Some((top, time)) = &mut self.victims {
                let m = |rows: &[TaskRow]| victims::members(rows, self.by, time.as_deref());
                let per: Vec<Vec<Member>> = bursts.iter().map(|b| m(b)).collect();
                let (over, per) = victims::victims(&m(&run), &per);
                top.push(over, per);
            }
            self.top.push(run);
            for (t, g) in self.burst_top.iter_mut().zip(bursts) {
                t.push(g);
            }
        }
        let (rows, others) = self.top.finish();
        let bursts = spans
            .iter()
            .zip(self.burst_top)
            .map(|(s, t)| BurstRow {
                t_start_ns: s.t_start_ns,
                t_end_ns: s.t_end_ns,
                bytes_per_s: s.bytes_per_s,
                tasks: t.finish().0,
            })
            .collect();
        TaskRows {
            rows,
            others,
            bursts,
            victims: self.victims.map(|(v, _)| v),
        }
    }
}

/// The report's task rows and bursts, exact, in passes over the file (see [`TASKS_PER_PASS`]),
/// and with `victims` (the on-CPU time's value key, if any) the victims of the bursts.
fn task_rows(
    path: &Path,
    whole: &WholeRun,
    spans: &[BurstSpan],
    by: GroupBy,
    pids: &PidFilter,
    command_only: bool,
    victims: Option<Option<String>>,
) -> CliResult<TaskRows> {
    let parts = whole.tasks_used.div_ceil(TASKS_PER_PASS).max(1) as u64;
    let mut passes = Passes::new(spans.len(), by, victims);
    let by_group = passes.by_group;
    for part in 0..parts {
        let pids = pids.clone();
        let keep = move |p: KeyParts<'_>| {
            if !pids.keeps(p.pid, p.tgid) {
                return false;
            }
            let h = if by_group {
                by.key_hash(p)
            } else {
                p.task_hash()
            };
            h % parts == part
        };
        passes.read_part(path, spans, keep, command_only)?;
    }
    Ok(passes.finish(spans))
}

/// What the views draw beside the run's timeline.
struct Views<'a> {
    bursts: &'a [BurstRow],
    victims: Option<&'a VictimTop>,
    command: Option<&'a CommandReport>,
    latency: &'a LatencySeries,
    stacks: &'a super::report_stacks::RunStacks,
}

/// Series of the top groups drawn or traced.
const VIEW_GROUPS: usize = 8;

/// The run as a timeline (one more pass over the file, reading only the rows of the groups
/// drawn), then the Perfetto trace and the plot.
fn write_views(args: &ReportArgs, total: &IntervalResult, v: &Views<'_>) -> CliResult<()> {
    let Views {
        bursts,
        victims,
        command,
        latency,
        stacks,
    } = *v;
    let readers = open_run(&args.file)?;
    let specs = readers
        .last()
        .map(|r| r.specs().to_vec())
        .unwrap_or_default();
    let by = args.by;
    let mut tl = Timeline::new(&specs, total, by, VIEW_GROUPS);
    let mut series = victims
        .filter(|_| args.perfetto.is_some())
        .and_then(|v| StallSeries::new(&specs, by, &v.run, perfetto::TRACK_VICTIMS));
    let mut drawn: std::collections::HashSet<u64> = total
        .tasks
        .iter()
        .filter(|r| tl.groups.iter().any(|g| g.key == by.key(r)))
        .map(|r| by.key_hash(KeyParts::of(r)))
        .collect();
    if let (Some(s), Some(v)) = (&series, victims) {
        drawn.extend(s.hashes(&v.run));
    }
    for mut r in readers {
        let drawn = drawn.clone();
        let pids = PidFilter::new(&args.pid);
        r.keep_rows(move |p| pids.keeps(p.pid, p.tgid) && drawn.contains(&by.key_hash(p)));
        while let Some(item) = r.next_item() {
            if let Item::Interval(iv) = item {
                tl.add_amount(&iv, r.last_amount());
                if let Some(s) = series.as_mut() {
                    s.add(&iv);
                }
            }
        }
    }
    let failed = |what: &str, path: &Path, e: std::io::Error| {
        CliError::output_file(format!("cannot write the {what} {}", path.display()), e)
    };
    if let Some(path) = &args.perfetto {
        let tracks = match (&series, victims) {
            (Some(series), Some(v)) => Some(perfetto::VictimTracks {
                by,
                bursts: &v.bursts,
                series,
            }),
            _ => None,
        };
        let parts = perfetto::Parts {
            command,
            victims: tracks.as_ref(),
            latency,
            stacks: stacks.any.then_some((&stacks.profile, &stacks.placed[..])),
        };
        perfetto::write(path, &tl, bursts, &parts)
            .map_err(|e| failed("Perfetto trace", path, e))?;
    }
    if let Some(path) = &args.plot {
        let name = args.file.file_name().unwrap_or_default().to_string_lossy();
        let title = format!("{name}: {}, {}", total.source, tl.unit.per_s());
        plot::write(path, &tl, bursts, &title, command).map_err(|e| failed("plot", path, e))?;
    }
    Ok(())
}

/// The views' files are checked as a recording's output is, before the file is read.
fn check_view_outputs(args: &ReportArgs) -> CliResult<()> {
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
    Ok(())
}

/// Why a recording tells no victims: its slots hold no stall pair.
pub const NO_STALLS: &str = "its plan counted no core cycles stalled on memory: it was recorded \
    under a hypervisor, without a core PMU, or on a core whose stall event the plan does not \
    know or had no counter left for; `imc record --dry-run --json` says which under `victims`";

/// Whether to sum victims: None where not wanted or not recorded; else the on-CPU time's
/// value key (None where the recording has the stall pair but no time beside it). `--victims`
/// on a recording without the pair is refused in one line.
fn victims_wanted(args: &ReportArgs, specs: &[SlotSpec]) -> CliResult<Option<Option<String>>> {
    if PairKeys::keys(specs).is_none() {
        if args.victims {
            return Err(CliError::bad_input(format!(
                "{}: --victims: this recording has no stall counters ({NO_STALLS}): record on a machine whose core PMU counts memory stalls, or report without --victims",
                escape(&args.file.display().to_string())
            )));
        }
        return Ok(None);
    }
    let time = PairKeys::key(specs, StallPart::Time).map(str::to_string);
    Ok((args.victims || args.json || args.perfetto.is_some()).then_some(time))
}

pub fn run(_global: &GlobalArgs, args: &ReportArgs) -> CliResult<ExitCode> {
    check_view_outputs(args)?;
    super::report_stacks::check_outputs(args)?;
    let stacks = super::report_stacks::for_report(args, &|| open_run(&args.file))?;
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
    let specs = header.specs().unwrap_or_default();
    let victims = victims_wanted(args, &specs)?;
    let whole = read_whole_run(readers, args.json || args.perfetto.is_some());
    let unit = Unit::of(&specs);
    // A suffix means powers of 1024 for bytes, of 1000 for counts.
    let threshold = args.burst_threshold.map(|r| r.per_s(unit.is_bytes()));
    let (threshold, spans) = find_bursts(&whole.rates, threshold);
    let views = args.perfetto.is_some() || args.plot.is_some();
    let want_bursts = args.json || args.bursts || args.victims || views;
    let spans_wanted = if want_bursts { &spans[..] } else { &[] };
    let pids = PidFilter::new(&args.pid);
    let found = task_rows(
        &args.file,
        &whole,
        spans_wanted,
        args.by,
        &pids,
        false,
        victims,
    )?;
    let command = match (&header.command, args.no_command) {
        (Some(_), false) => Some(command_report(args, &header, &whole, &spans, &unit)?),
        _ => None,
    };
    let mut total = whole.summary.result(found.rows);
    let latency = whole.latency.summary();
    run_latency(&mut total, &latency);
    for w in &whole.warnings {
        eprintln!("imc: warning: {}", escape(w));
    }
    let vic = found.victims;
    if views {
        let (bursts, cmd) = (&found.bursts, command.as_ref());
        let views = Views {
            bursts,
            victims: vic.as_ref(),
            command: cmd,
            latency: &whole.latency,
            stacks: &stacks,
        };
        write_views(args, &total, &views)?;
    }
    let report = ReportResult {
        total,
        bursts: found.bursts,
        precise_vs_tick: whole.precise,
        others: found.others,
    };
    let out = Outcome {
        report: &report,
        victims: vic.as_ref(),
        command: command.as_ref(),
        header: &header,
        unit: &unit,
        latency: (&whole.latency, &latency),
        stacks: stacks.any.then_some(&stacks.profile),
    };
    let text = if args.json {
        json_text(args, &out)?
    } else {
        human_text(args, &out, threshold, spans.len())
    };
    crate::error::write_stdout(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// What a report says, in either form.
struct Outcome<'a> {
    report: &'a ReportResult,
    victims: Option<&'a VictimTop>,
    command: Option<&'a CommandReport>,
    header: &'a RecordHeader,
    unit: &'a Unit,
    /// The recording's latency and utilisation, interval by interval and per package.
    latency: (&'a LatencySeries, &'a [PackageLatencySummary]),
    /// Its traffic by call stack, where it was recorded with `--stacks`.
    stacks: Option<&'a crate::model::stacks::StackProfile>,
}

/// The run's packages carry their mean latency and utilisation over the intervals that have
/// them (null where none has).
fn run_latency(total: &mut IntervalResult, latency: &[PackageLatencySummary]) {
    for p in &mut total.packages {
        if let Some(l) = latency.iter().find(|l| l.id == p.id) {
            p.read_latency_ns = l.read_latency_ns_mean;
            p.write_latency_ns = l.write_latency_ns_mean;
            p.utilisation = l.utilisation_mean;
        }
    }
}

/// The report as one JSON object: the machine's, with the victims (null where not recorded),
/// the command's part and `record -p`'s pids beside its fields.
fn json_text(args: &ReportArgs, out: &Outcome<'_>) -> CliResult<String> {
    let counts_unit = match out.unit {
        Unit::Bytes => None,
        Unit::Counts(events) => Some(rate_unit(events)),
    };
    let cu = counts_unit.as_deref();
    let bad = |e: serde_json::Error| CliError::runtime_because("cannot encode JSON", e);
    let mut v: serde_json::Value =
        serde_json::from_str(&to_json(out.report, cu, args.by)?).map_err(bad)?;
    add_victims_json(&mut v, out.victims, args.by).map_err(bad)?;
    if let Some(c) = out.command {
        v["command"] = serde_json::from_str(&to_json(c, cu, args.by)?).map_err(bad)?;
    }
    if !out.header.pids.is_empty() {
        v["recorded_pids"] = serde_json::json!(out.header.pids);
    }
    // Null where the recording has no latency nor utilisation.
    let (series, summary) = out.latency;
    let or_null = |empty: bool, x| if empty { serde_json::Value::Null } else { x };
    v["package_latency"] = or_null(series.is_empty(), serde_json::json!(series.points));
    v["latency_summary"] = or_null(summary.is_empty(), serde_json::json!(summary));
    if let Some(p) = out.stacks {
        super::report_stacks::add_json(&mut v, p);
    }
    let mut s = v.to_string();
    s.push('\n');
    Ok(s)
}

/// `victims` over the run and in each burst (null where the recording has no stall pair, with
/// `victims_reason` saying why), a group's member identity null as in the task rows.
fn add_victims_json(
    v: &mut serde_json::Value,
    victims: Option<&VictimTop>,
    by: GroupBy,
) -> serde_json::Result<()> {
    use serde_json::Value;
    let keep = by.identity();
    let rows = |x: Value| -> Value {
        let mut x = x;
        for row in x.as_array_mut().into_iter().flatten() {
            for (k, kept) in [("pid", keep.pid), ("tgid", keep.tgid), ("comm", keep.comm)] {
                if let (false, Some(f)) = (kept, row.get_mut(k)) {
                    *f = Value::Null;
                }
            }
        }
        x
    };
    let (run, reason) = match victims {
        Some(t) => (rows(serde_json::to_value(&t.run)?), Value::Null),
        None => (Value::Null, Value::from(NO_STALLS)),
    };
    v["victims"] = run;
    v["victims_reason"] = reason;
    let bursts = v.get_mut("bursts").and_then(Value::as_array_mut);
    for (k, b) in bursts.into_iter().flatten().enumerate() {
        b["victims"] = match victims.and_then(|t| t.bursts.get(k)) {
            Some(list) => rows(serde_json::to_value(list)?),
            None => Value::Null,
        };
    }
    Ok(())
}

/// The report as text: the command's part first, then the machine's, then the victims.
fn human_text(args: &ReportArgs, out: &Outcome<'_>, threshold: f64, nbursts: usize) -> String {
    let view = ReportView {
        file: &args.file,
        freq_hz: out.header.freq_hz,
        by: args.by,
        bursts: args.bursts,
        threshold_given: args.burst_threshold.is_some(),
        latency: out.latency.1,
    };
    let mut machine = human(out.report, &view, out.unit, threshold, nbursts);
    if !out.header.pids.is_empty() {
        let pids: Vec<String> = out.header.pids.iter().map(u32::to_string).collect();
        machine.insert_str(
            0,
            &format!(
                "recorded with -p {}: only those processes' rows; package totals are the whole machine's\n",
                pids.join(",")
            ),
        );
    }
    if let (true, Some(v)) = (args.victims, out.victims) {
        machine.push_str(&victims_text(out.report, v, &view, out.unit));
    }
    match out.command {
        Some(c) => command_text(c, out.report, args.by, out.unit) + &machine,
        None => machine,
    }
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
    let TaskRows {
        rows: tasks,
        others,
        ..
    } = task_rows(
        &args.file,
        whole,
        &[],
        args.by,
        &PidFilter::new(&args.pid),
        true,
        None,
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
        tree: cmd.tree,
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

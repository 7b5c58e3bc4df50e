//! `imc report` as text: the run's task table, what was not attributed, and the bursts. The
//! unit is bytes, or the counts of a stand-in that must never be shown as bytes.
use crate::model::result::{IntervalResult, OthersRow, ReportResult, TaskRow};
use crate::model::{CommandTree, GroupBy};
use crate::text::{escape, fixed, fmt_byte_rate};
use std::path::Path;

const TABLE_ROWS: usize = 30;

/// What the recording's traffic counters measured (the model's one unit rule).
pub use crate::model::Unit;

/// A rate in the recording's unit: `1.50 MiB/s`, `87354 page-faults/s`, `1.2e9 ns/s
/// (cpu-clock)`.
trait Rate {
    fn rate(&self, per_s: f64) -> String;
}

impl Rate for Unit {
    fn rate(&self, per_s: f64) -> String {
        match self {
            Unit::Bytes => crate::text::fmt_byte_rate(per_s),
            Unit::Counts(events) => format!("{} {}", fixed(per_s, 0), escape(&rate_unit(events))),
        }
    }
}

/// The unit of a rate of these events' counts: clocks count nanoseconds.
pub fn rate_unit(events: &[String]) -> String {
    let names = events.join("+");
    if !events.is_empty() && events.iter().all(|e| crate::output::counts_nanoseconds(e)) {
        format!("ns/s ({names})")
    } else {
        format!("{names}/s")
    }
}

use crate::text::fmt_bytes;

fn fmt_share(s: f64) -> String {
    format!("{}%", fixed(s * 100.0, 1))
}

fn row_cells(r: &TaskRow, by: GroupBy, has_total: bool, stand_in: &[String]) -> Vec<String> {
    // Names come from the recording (a process names itself anything): escaped, see text.rs.
    // A group shows its key, not one member's identity: the name beside a thread or a process
    // only.
    let companion = matches!(by, GroupBy::Pid | GroupBy::Tgid);
    let mut v: Vec<String> = [by.cell(r), r.comm.clone()]
        .iter()
        .take(if companion { 2 } else { 1 })
        .map(|c| escape(c).into_owned())
        .collect();
    if stand_in.is_empty() {
        v.push(fmt_bytes(r.read_bytes as f64));
        v.push(fmt_bytes(r.write_bytes as f64));
        if has_total {
            v.push(fmt_bytes(r.total_bytes as f64));
        }
    } else {
        for k in stand_in {
            v.push(fixed(r.values.get(k).copied().unwrap_or(0.0), 0));
        }
    }
    v.push(fmt_share(r.share));
    v
}

/// Right-aligned columns except the text ones (the key when it is a name, and COMM).
pub fn table(head: &[String], rows: &[Vec<String>], left: &[usize], indent: &str) -> String {
    let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(x) = w.get_mut(i) {
                *x = (*x).max(c.chars().count());
            }
        }
    }
    let mut s = String::new();
    for r in std::iter::once(head).chain(rows.iter().map(|r| r.as_slice())) {
        let mut line = String::from(indent);
        for (i, c) in r.iter().enumerate() {
            let width = w.get(i).copied().unwrap_or(0);
            if i > 0 {
                line.push_str("  ");
            }
            if left.contains(&i) {
                line.push_str(&format!("{c:<width$}"));
            } else {
                line.push_str(&format!("{c:>width$}"));
            }
        }
        s.push_str(line.trim_end());
        s.push('\n');
    }
    s
}

/// What the report says about the run besides its result: the recording, its tick rate, the
/// grouping and whether bursts were asked for (and their threshold given).
pub struct ReportView<'a> {
    pub file: &'a Path,
    pub freq_hz: u32,
    pub by: GroupBy,
    pub bursts: bool,
    pub threshold_given: bool,
    /// Each package's loaded latency and utilisation over the run (empty: none recorded).
    pub latency: &'a [PackageLatencySummary],
}

/// The report as a person reads it: the run's line, the weighting, the task table, what was
/// unattributed or lost, the tick-vs-precise comparison and the bursts.
pub fn human(
    rep: &ReportResult,
    args: &ReportView<'_>,
    unit: &Unit,
    threshold: f64,
    nbursts: usize,
) -> String {
    let t = &rep.total;
    let stand_in: Vec<String> = match unit {
        Unit::Bytes => Vec::new(),
        Unit::Counts(events) => events.clone(),
    };
    let cols = Columns::new(
        args.by,
        t.packages.iter().any(|p| p.total_bytes > 0),
        stand_in,
    );
    let mut s = heading(rep, args, &cols.stand_in);
    s.push_str(&cols.table(t.tasks.iter().take(TABLE_ROWS), ""));
    let others = rep.others.as_ref();
    let more = t.tasks.len().saturating_sub(TABLE_ROWS) as u64 + others.map_or(0, |o| o.rows);
    if more > 0 {
        // What the rows not shown add up to: the listed ones past the table, and the others.
        let hidden = t.tasks.iter().skip(TABLE_ROWS);
        let share = hidden.clone().map(|r| r.share).sum::<f64>() + others.map_or(0.0, |o| o.share);
        let amount = if cols.stand_in.is_empty() {
            let bytes = hidden.map(|r| r.bytes()).sum::<u64>()
                + others.map_or(0, |o| o.read_bytes + o.write_bytes + o.total_bytes);
            fmt_bytes(bytes as f64)
        } else {
            let count = |v: &std::collections::BTreeMap<String, f64>| -> f64 {
                cols.stand_in.iter().filter_map(|k| v.get(k)).sum()
            };
            let n = hidden.map(|r| count(&r.values)).sum::<f64>()
                + others.map_or(0.0, |o| count(&o.values));
            format!("{} {}", fixed(n, 0), escape(&cols.stand_in.join("+")))
        };
        s.push_str(&format!(
            "... {more} more: {amount}, {} of the traffic\n",
            fmt_share(share)
        ));
    }
    s.push_str(&footer(rep, unit));
    if args.bursts {
        s.push_str(&bursts(rep, args, unit, threshold, nbursts, &cols));
    }
    s
}

/// The run's line, how its traffic was divided (or that a stand-in was counted) and each
/// package's bytes, then a blank line.
fn heading(rep: &ReportResult, args: &ReportView<'_>, stand_in: &[String]) -> String {
    let t = &rep.total;
    let secs = t.t_end_ns.saturating_sub(t.t_start_ns) as f64 / 1e9;
    let mut s = format!(
        "{}: {} at {} Hz, {:.1} s\n",
        escape(&args.file.display().to_string()),
        escape(&t.source),
        args.freq_hz,
        secs
    );
    if !stand_in.is_empty() {
        s.push_str(&format!(
            "{}: a stand-in counted per task, not bandwidth (no bytes were measured)\n",
            escape(&stand_in.join("+"))
        ));
    } else if let Some(w) = &t.weighting {
        s.push_str(&format!(
            "package traffic divided among tasks {}{}\n",
            w.phrase(),
            if w.numa {
                ", local and remote memory apart"
            } else {
                ""
            }
        ));
    }
    // A stand-in has no package bytes to show.
    for p in t.packages.iter().filter(|_| stand_in.is_empty()) {
        let rate = |b: u64| if secs > 0.0 { b as f64 / secs } else { 0.0 };
        s.push_str(&format!(
            "package {}: read {} ({}), write {} ({})",
            p.id,
            fmt_bytes(p.read_bytes as f64),
            fmt_byte_rate(rate(p.read_bytes)),
            fmt_bytes(p.write_bytes as f64),
            fmt_byte_rate(rate(p.write_bytes)),
        ));
        if p.total_bytes > 0 {
            s.push_str(&format!(", total {}", fmt_bytes(p.total_bytes as f64)));
        }
        s.push('\n');
        // Where a CXL tier was counted: each tier's part of the package's bytes.
        for tb in &p.tiers {
            s.push_str(&format!(
                "  tier {}: read {} ({}), write {} ({})\n",
                tb.tier.as_str(),
                fmt_bytes(tb.read_bytes as f64),
                fmt_byte_rate(rate(tb.read_bytes)),
                fmt_bytes(tb.write_bytes as f64),
                fmt_byte_rate(rate(tb.write_bytes)),
            ));
        }
    }
    for l in args.latency {
        s.push_str(&latency_line(l));
    }
    s.push('\n');
    s
}

/// One package's figures over one interval of a recording (JSON `package_latency`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct PackageLatencyPoint {
    pub id: u32,
    pub read_latency_ns: Option<f64>,
    pub write_latency_ns: Option<f64>,
    pub utilisation: Option<f64>,
}

/// An interval of a recording with a latency or a utilisation for some package.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct LatencyPoint {
    pub t_start_ns: u64,
    pub t_end_ns: u64,
    pub packages: Vec<PackageLatencyPoint>,
}

/// A package's sums over the run: intervals with any figure, and per figure (read latency,
/// write latency, utilisation) how many intervals have it, their sum and the largest.
type Sums = (u64, [(u64, f64, f64); 3]);

/// The recording's loaded latency and utilisation: each package's sums over the run and,
/// where kept (JSON and Perfetto want them; the text only the sums), the intervals where some
/// package has a figure (none at all in a recording made without queue counters, in a VM, or
/// before recordings stored them).
#[derive(Clone, Debug, PartialEq)]
pub struct LatencySeries {
    pub points: Vec<LatencyPoint>,
    keep_points: bool,
    sums: std::collections::BTreeMap<u32, Sums>,
}

/// A series that keeps its points.
impl Default for LatencySeries {
    fn default() -> Self {
        LatencySeries::new(true)
    }
}

/// One package's latency and utilisation over the run: the mean over the intervals that have
/// each figure, and the worst (JSON `latency_summary`; the text's latency line).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct PackageLatencySummary {
    pub id: u32,
    /// Intervals with any figure for this package.
    pub intervals: u64,
    pub read_latency_ns_mean: Option<f64>,
    pub read_latency_ns_max: Option<f64>,
    pub write_latency_ns_mean: Option<f64>,
    pub write_latency_ns_max: Option<f64>,
    pub utilisation_mean: Option<f64>,
    pub utilisation_max: Option<f64>,
}

impl LatencySeries {
    /// An empty series; `keep_points`: keep every interval's figures, not only the sums.
    pub fn new(keep_points: bool) -> LatencySeries {
        LatencySeries {
            points: Vec::new(),
            keep_points,
            sums: Default::default(),
        }
    }

    /// Adds the interval's figures to its packages' sums, and the interval to the points where
    /// some package of it has one.
    pub fn add(&mut self, iv: &IntervalResult) {
        let mut any = false;
        for p in &iv.packages {
            let figures = [p.read_latency_ns, p.write_latency_ns, p.utilisation];
            if figures.iter().all(Option::is_none) {
                continue;
            }
            any = true;
            let (n, sums) = self
                .sums
                .entry(p.id)
                .or_insert((0, [(0, 0.0, f64::MIN); 3]));
            *n += 1;
            for (sum, v) in sums.iter_mut().zip(figures) {
                if let Some(v) = v {
                    *sum = (sum.0 + 1, sum.1 + v, sum.2.max(v));
                }
            }
        }
        if any && self.keep_points {
            let packages = iv.packages.iter().map(|p| PackageLatencyPoint {
                id: p.id,
                read_latency_ns: p.read_latency_ns,
                write_latency_ns: p.write_latency_ns,
                utilisation: p.utilisation,
            });
            self.points.push(LatencyPoint {
                t_start_ns: iv.t_start_ns,
                t_end_ns: iv.t_end_ns,
                packages: packages.collect(),
            });
        }
    }

    /// No interval had a figure.
    pub fn is_empty(&self) -> bool {
        self.sums.is_empty()
    }

    /// Per package (by id) with any figure: the mean and the worst of each figure.
    pub fn summary(&self) -> Vec<PackageLatencySummary> {
        let mean = |(n, sum, _): (u64, f64, f64)| (n > 0).then(|| sum / n as f64);
        let max = |(n, _, m): (u64, f64, f64)| (n > 0).then_some(m);
        self.sums
            .iter()
            .map(|(&id, &(n, [r, w, u]))| PackageLatencySummary {
                id,
                intervals: n,
                read_latency_ns_mean: mean(r),
                read_latency_ns_max: max(r),
                write_latency_ns_mean: mean(w),
                write_latency_ns_max: max(w),
                utilisation_mean: mean(u),
                utilisation_max: max(u),
            })
            .collect()
    }
}

/// `package 0 latency: read 85.3 ns mean, 140.0 ns worst; write …; utilisation 42.0% mean,
/// 91.5% max (over 600 intervals)`: only the figures the recording has.
fn latency_line(l: &PackageLatencySummary) -> String {
    let mut parts = Vec::new();
    let ns = crate::text::fmt_ns;
    for (what, mean, worst) in [
        ("read", l.read_latency_ns_mean, l.read_latency_ns_max),
        ("write", l.write_latency_ns_mean, l.write_latency_ns_max),
    ] {
        if let (Some(m), Some(w)) = (mean, worst) {
            parts.push(format!("{what} {} mean, {} worst", ns(m), ns(w)));
        }
    }
    if let (Some(m), Some(x)) = (l.utilisation_mean, l.utilisation_max) {
        parts.push(format!(
            "utilisation {} mean, {} max",
            fmt_share(m),
            fmt_share(x)
        ));
    }
    format!(
        "package {} latency: {} (over {} intervals)\n",
        l.id,
        parts.join("; "),
        l.intervals
    )
}

/// The task table's columns: the key and its companion, the bytes (or the stand-in's counts),
/// the share; which are left-aligned.
struct Columns {
    by: GroupBy,
    has_total: bool,
    stand_in: Vec<String>,
    head: Vec<String>,
    left: Vec<usize>,
}

impl Columns {
    fn new(by: GroupBy, has_total: bool, stand_in: Vec<String>) -> Columns {
        let mut head: Vec<String> = vec![by.title().into()];
        if matches!(by, GroupBy::Pid | GroupBy::Tgid) {
            head.push("COMM".into());
        }
        if stand_in.is_empty() {
            head.push("READ".into());
            head.push("WRITE".into());
            if has_total {
                head.push("TOTAL".into());
            }
        } else {
            head.extend(stand_in.iter().map(|k| {
                let name = escape(&k.to_uppercase()).into_owned();
                if crate::output::counts_nanoseconds(k) {
                    format!("{name} NS")
                } else {
                    name
                }
            }));
        }
        head.push("SHARE".into());
        let left = match by {
            GroupBy::Comm | GroupBy::Cgroup | GroupBy::Container | GroupBy::Pod => vec![0],
            GroupBy::Pid | GroupBy::Tgid => vec![1],
        };
        Columns {
            by,
            has_total,
            stand_in,
            head,
            left,
        }
    }

    /// These rows as a table, each line after `indent`.
    fn table<'a>(&self, rows: impl Iterator<Item = &'a TaskRow>, indent: &str) -> String {
        let rows: Vec<Vec<String>> = rows
            .map(|r| row_cells(r, self.by, self.has_total, &self.stand_in))
            .collect();
        table(&self.head, &rows, &self.left, indent)
    }
}

/// What no task took and what was lost, and how far the tick-only answer is from the precise
/// one (a `--precise` recording).
fn footer(rep: &ReportResult, unit: &Unit) -> String {
    let t = &rep.total;
    let mut s = match unit {
        Unit::Bytes if t.unattributed.device_bytes > 0 => format!(
            "\nunattributed: {} (device/unseen, no core counter saw it: {})   lost samples: {}\n",
            fmt_bytes(t.unattributed_bytes as f64),
            fmt_bytes(t.unattributed.device_bytes as f64),
            t.lost_samples
        ),
        Unit::Bytes => format!(
            "\nunattributed: {}   lost samples: {}\n",
            fmt_bytes(t.unattributed_bytes as f64),
            t.lost_samples
        ),
        Unit::Counts(_) => format!("\nlost samples: {}\n", t.lost_samples),
    };
    if let Some(p) = &rep.precise_vs_tick {
        s.push_str(&format!(
            "tick-only vs precise (raw ticks around bursts: {} ticks, {} switches): shares differ by {} (largest: pid {}, {})\n",
            p.ticks,
            p.switches,
            fmt_share(p.share_distance),
            p.max_diff_pid,
            fmt_share(p.max_share_diff)
        ));
    }
    s
}

/// The bursts above the threshold, each with its top five tasks.
fn bursts(
    rep: &ReportResult,
    args: &ReportView<'_>,
    unit: &Unit,
    threshold: f64,
    nbursts: usize,
    cols: &Columns,
) -> String {
    let mut s = if threshold.is_finite() {
        format!(
            "\nbursts above {}{}: {nbursts}\n",
            unit.rate(threshold),
            if args.threshold_given {
                ""
            } else {
                " (halfway between the run's median and p99)"
            }
        )
    } else {
        // No threshold was given and the run has no peak to place one under.
        format!(
            "\nbursts: none (the run is flat: its p99 is not {}x its median, so no threshold \
             is placed; give --burst-threshold)\n",
            crate::attribution::summary::BURST_MIN_PEAK_RATIO
        )
    };
    for b in &rep.bursts {
        let from = b.t_start_ns.saturating_sub(rep.total.t_start_ns) as f64 / 1e9;
        let len = b.t_end_ns.saturating_sub(b.t_start_ns) as f64 / 1e6;
        s.push_str(&format!(
            "  +{from:.3} s  {len:.0} ms  {}\n",
            unit.rate(b.bytes_per_s)
        ));
        s.push_str(&cols.table(b.tasks.iter().take(5), "    "));
    }
    s
}

/// How `--victims` says the stall a burst added (the help's and the README's words).
pub const VICTIMS_RULE: &str = "stall added = (stall share in the burst - its share outside \
    bursts) x its on-CPU time in the burst";

/// Culprits listed per burst beside its victims, and victims listed per burst and over the run.
const CULPRITS: usize = 3;
const VICTIMS: usize = 5;
const RUN_VICTIMS: usize = 10;

/// `--victims`: per burst its culprits (by bytes) and its victims (most stall added first), then
/// per task over the run: its stall in bursts, outside them, and what the bursts added.
pub fn victims_text(
    rep: &ReportResult,
    v: &crate::attribution::victims::VictimTop,
    args: &ReportView<'_>,
    unit: &Unit,
) -> String {
    let stand_in: Vec<String> = match unit {
        Unit::Bytes => Vec::new(),
        Unit::Counts(events) => events.clone(),
    };
    let has_total = rep.total.packages.iter().any(|p| p.total_bytes > 0);
    let cols = Columns::new(args.by, has_total, stand_in);
    let mut s = format!("\nvictims ({VICTIMS_RULE}):\n");
    if rep.bursts.is_empty() {
        s.push_str(
            "  no bursts in this run, so no stall to compare with a baseline (give --burst-threshold RATE)\n",
        );
        return s;
    }
    let (head, left) = victim_head(args.by, ["STALLED", "BASELINE", "ADDED"]);
    for (b, victims) in rep.bursts.iter().zip(&v.bursts) {
        let from = b.t_start_ns.saturating_sub(rep.total.t_start_ns) as f64 / 1e9;
        let len = b.t_end_ns.saturating_sub(b.t_start_ns) as f64 / 1e6;
        s.push_str(&format!(
            "  +{from:.3} s  {len:.0} ms  {}\n    culprits:\n",
            unit.rate(b.bytes_per_s)
        ));
        s.push_str(&cols.table(b.tasks.iter().take(CULPRITS), "      "));
        s.push_str("    victims:\n");
        let rows: Vec<Vec<String>> = victims
            .iter()
            .take(VICTIMS)
            .map(|x| {
                let mut c = who_cells(&x.who, args.by);
                c.push(opt_share(x.stall_share));
                c.push(opt_share(x.baseline_stall_share));
                c.push(added(x.added_stall_seconds, x.added_stall_cycles));
                c
            })
            .collect();
        s.push_str(&table(&head, &rows, &left, "      "));
    }
    let (head, left) = victim_head(args.by, ["IN BURSTS", "OUTSIDE", "ADDED"]);
    let rows: Vec<Vec<String>> = v
        .run
        .iter()
        .take(RUN_VICTIMS)
        .map(|x| {
            let mut c = who_cells(&x.who, args.by);
            c.push(opt_seconds(x.stall_seconds_in_bursts));
            c.push(opt_seconds(x.stall_seconds_outside));
            c.push(added(x.added_stall_seconds, x.added_stall_cycles));
            c
        })
        .collect();
    s.push_str("  over the run (seconds stalled on memory):\n");
    s.push_str(&table(&head, &rows, &left, "    "));
    s
}

fn victim_head(by: GroupBy, cols: [&str; 3]) -> (Vec<String>, Vec<usize>) {
    let mut head: Vec<String> = vec![by.title().into()];
    let companion = matches!(by, GroupBy::Pid | GroupBy::Tgid);
    if companion {
        head.push("COMM".into());
    }
    head.extend(cols.iter().map(|c| c.to_string()));
    (head, vec![usize::from(companion)])
}

fn who_cells(w: &crate::attribution::victims::Who, by: GroupBy) -> Vec<String> {
    let r = w.row();
    let companion = matches!(by, GroupBy::Pid | GroupBy::Tgid);
    [by.cell(&r), r.comm]
        .iter()
        .take(if companion { 2 } else { 1 })
        .map(|c| escape(c).into_owned())
        .collect()
}

fn opt_share(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), fmt_share)
}

fn opt_seconds(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{} s", fixed(x, 3)))
}

/// Added stall in seconds where the on-CPU time was counted, else in cycles; `-` without a
/// baseline.
fn added(seconds: Option<f64>, cycles: Option<f64>) -> String {
    match (seconds, cycles) {
        (Some(x), _) => format!("{}{} s", if x >= 0.0 { "+" } else { "" }, fixed(x, 3)),
        (None, Some(c)) => format!("{}{c:.3e} cycles", if c >= 0.0 { "+" } else { "" }),
        (None, None) => "- (no baseline)".into(),
    }
}

/// The recorded command's part of the run (`record -- CMD`; JSON `command`): traffic in the
/// recording's unit (bytes, or a stand-in's counts), over the run, per interval and per burst.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CommandReport {
    pub argv: Vec<String>,
    pub pid: u32,
    /// `cgroup` (exact) or `parentage` (can miss a child that lived between two scans).
    pub tree: CommandTree,
    pub cgroup_path: Option<String>,
    /// `bytes`, or the stand-in's events (`page-faults`).
    pub unit: String,
    /// The command's tree over the run; the machine's attributed traffic and all of it.
    pub traffic: f64,
    pub machine_attributed: f64,
    pub machine_total: f64,
    /// `traffic` over the machine's attributed traffic, and over all of it (null when the
    /// machine had none).
    pub share_of_attributed: Option<f64>,
    pub share_of_total: Option<f64>,
    /// Its rows (grouped --by), the busiest first; `others`: the rest summed.
    pub tasks: Vec<TaskRow>,
    pub others: Option<OthersRow>,
    /// The interval where its share of all traffic was largest (with any traffic).
    pub busiest: Option<CommandSpan>,
    /// Its part of each burst (as the report's `bursts`), and of each interval.
    pub per_burst: Vec<CommandSpan>,
    pub per_interval: Vec<CommandSpan>,
}

/// The command's traffic over one interval or burst, and its shares of the machine's.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CommandSpan {
    pub t_start_ns: u64,
    pub t_end_ns: u64,
    pub traffic: f64,
    pub share_of_attributed: Option<f64>,
    pub share_of_total: Option<f64>,
}

impl CommandSpan {
    /// The command's `traffic` of the machine's `attributed` and `total` over a span.
    pub fn new(t: (u64, u64), traffic: f64, attributed: f64, total: f64) -> CommandSpan {
        let of = |whole: f64| (whole > 0.0).then(|| (traffic / whole).min(1.0));
        CommandSpan {
            t_start_ns: t.0,
            t_end_ns: t.1,
            traffic,
            share_of_attributed: of(attributed),
            share_of_total: of(total),
        }
    }
}

/// The command's part, shown before the machine's report: what ran, how its tree was told, its
/// traffic and shares, its busiest interval and bursts, and its rows.
pub fn command_text(c: &CommandReport, rep: &ReportResult, by: GroupBy, unit: &Unit) -> String {
    let stand_in: Vec<String> = match unit {
        Unit::Bytes => Vec::new(),
        Unit::Counts(events) => events.clone(),
    };
    let amount = |v: f64| match unit {
        Unit::Bytes => fmt_bytes(v),
        Unit::Counts(e) => format!("{} {}", fixed(v, 0), escape(&e.join("+"))),
    };
    let share = |s: Option<f64>| s.map_or_else(|| "-".to_string(), fmt_share);
    let argv = shell_words(&c.argv);
    let how = match c.cgroup_path.as_deref() {
        Some(p) if c.tree == CommandTree::Cgroup => format!("told by its cgroup {}", escape(p)),
        _ => "told by /proc parentage (a child that lived between two scans is missed)".into(),
    };
    let mut s = format!("command: {argv} (pid {}), its process tree {how}\n", c.pid);
    s.push_str(&format!(
        "  {}: {} of the attributed traffic, {} of all {}\n",
        amount(c.traffic),
        share(c.share_of_attributed),
        share(c.share_of_total),
        amount(c.machine_total),
    ));
    let t0 = rep.total.t_start_ns;
    let at = |sp: &CommandSpan| format!("+{:.3} s", sp.t_start_ns.saturating_sub(t0) as f64 / 1e9);
    if let Some(b) = &c.busiest {
        s.push_str(&format!(
            "  busiest interval: {} of all at {} ({})\n",
            share(b.share_of_total),
            at(b),
            amount(b.traffic)
        ));
    }
    if !c.per_burst.is_empty() {
        let list: Vec<String> = c
            .per_burst
            .iter()
            .map(|b| format!("{} {}", at(b), share(b.share_of_total)))
            .collect();
        s.push_str(&format!("  its share of each burst: {}\n", list.join(", ")));
    }
    let cols = Columns::new(
        by,
        rep.total.packages.iter().any(|p| p.total_bytes > 0),
        stand_in,
    );
    if c.tasks.is_empty() {
        s.push_str("  (no traffic was charged to the command's tree)\n");
    } else {
        s.push_str(&cols.table(c.tasks.iter().take(TABLE_ROWS), "  "));
        let more = c.tasks.len().saturating_sub(TABLE_ROWS) as u64
            + c.others.as_ref().map_or(0, |o| o.rows);
        if more > 0 {
            s.push_str(&format!("  ... {more} more of the command's\n"));
        }
    }
    s.push_str("\nthe machine:\n");
    s
}

/// Arguments as a shell would take them back: plain words as they are, others single-quoted,
/// every control character escaped.
fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
            if plain {
                escape(a).into_owned()
            } else {
                format!("'{}'", escape(&a.replace('\'', "'\\''")))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_words_are_quoted_as_a_shell_reads_them() {
        let a = |v: &[&str]| shell_words(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(a(&["sh", "-c", "a b"]), "sh -c 'a b'");
        assert_eq!(a(&["echo", "it's"]), "echo 'it'\\''s'");
        assert!(!a(&["x\u{1b}[2J"]).contains('\u{1b}'));
    }

    #[test]
    fn latency_is_summed_per_package_over_the_intervals_that_have_it() {
        use crate::model::result::PackageRow;
        let iv = |k: u64, read: Option<f64>, util: Option<f64>| IntervalResult {
            t_start_ns: k * 100,
            t_end_ns: (k + 1) * 100,
            packages: vec![
                PackageRow {
                    id: 0,
                    read_latency_ns: read,
                    utilisation: util,
                    ..PackageRow::default()
                },
                PackageRow {
                    id: 1,
                    ..PackageRow::default()
                },
            ],
            ..IntervalResult::default()
        };
        let mut s = LatencySeries::default();
        s.add(&iv(0, Some(80.0), Some(0.25)));
        s.add(&iv(1, None, None));
        s.add(&iv(2, Some(100.0), Some(0.5)));
        s.add(&iv(3, None, Some(0.75)));
        // The interval with no figure is no point; package 1, with none, has no summary.
        assert_eq!(s.points.len(), 3);
        assert_eq!(s.points[2].packages[0].read_latency_ns, None);
        let sum = s.summary();
        assert_eq!(sum.len(), 1);
        let p = &sum[0];
        assert_eq!((p.id, p.intervals), (0, 3));
        assert_eq!(p.read_latency_ns_mean, Some(90.0));
        assert_eq!(p.read_latency_ns_max, Some(100.0));
        assert_eq!(
            (p.write_latency_ns_mean, p.write_latency_ns_max),
            (None, None)
        );
        assert_eq!(p.utilisation_mean, Some(0.5));
        assert_eq!(p.utilisation_max, Some(0.75));
        assert_eq!(
            latency_line(p),
            "package 0 latency: read 90.0 ns mean, 100.0 ns worst; utilisation 50.0% mean, 75.0% max (over 3 intervals)\n"
        );
        // The largest figure a recording can hold reads as a time, not 17 digits of ns.
        let huge = PackageLatencySummary {
            read_latency_ns_max: Some(u64::MAX as f64 / 1000.0),
            ..p.clone()
        };
        assert_eq!(
            latency_line(&huge),
            "package 0 latency: read 90.0 ns mean, 1.8e7 s worst; utilisation 50.0% mean, 75.0% max (over 3 intervals)\n"
        );
        assert!(LatencySeries::default().summary().is_empty());
        // Without its points (the text's need), the same sums.
        let mut sums_only = LatencySeries::new(false);
        sums_only.add(&iv(0, Some(80.0), Some(0.25)));
        sums_only.add(&iv(2, Some(100.0), Some(0.5)));
        sums_only.add(&iv(3, None, Some(0.75)));
        assert!(sums_only.points.is_empty() && !sums_only.is_empty());
        assert_eq!(sums_only.summary(), sum);
    }

    #[test]
    fn byte_units() {
        assert_eq!(fmt_bytes(512.0), "512 B");
        assert_eq!(fmt_bytes(1536.0), "1.50 KiB");
        assert_eq!(fmt_bytes(3.0 * 1024.0 * 1024.0 * 1024.0), "3.00 GiB");
    }

    #[test]
    fn columns_align() {
        let head = vec!["PID".to_string(), "COMM".into(), "READ".into()];
        let rows = vec![
            vec!["7".to_string(), "a".into(), "1.00 KiB".into()],
            vec!["1234".to_string(), "longer".into(), "5 B".into()],
        ];
        let t = table(&head, &rows, &[1], "");
        assert_eq!(
            t,
            " PID  COMM        READ\n   7  a       1.00 KiB\n1234  longer       5 B\n"
        );
    }
}

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
use crate::model::result::{BurstRow, IntervalResult, PrecisionRow, ReportResult, TaskRow};
use crate::output::fixed;
use crate::output::{perfetto, plot};
use crate::record::{Item, ReadStatus, Reader, rotated_path};
use crate::text::escape;
use imc_common::KIND_SWITCH;
use std::path::Path;
use std::process::ExitCode;

/// Tasks listed per burst, and rows of the human table.
const BURST_TASKS: usize = 10;
const TABLE_ROWS: usize = 30;

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

/// What the first pass learns.
struct Pass1 {
    summary: Summary,
    rates: Vec<IntervalRate>,
    warnings: Vec<String>,
    precise: Option<PrecisionRow>,
}

fn pass1(readers: Vec<Reader>) -> Pass1 {
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
    Pass1 {
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
    let p1 = pass1(readers);
    let unit = Unit::of(&header.specs().unwrap_or_default());
    // A suffix means powers of 1024 for bytes, of 1000 for counts.
    let threshold = args.burst_threshold.map(|r| r.per_s(unit.is_bytes()));
    let (threshold, spans) = find_bursts(&p1.rates, threshold);
    let views = args.perfetto.is_some() || args.plot.is_some();
    let want_bursts = args.json || args.bursts || views;
    let bursts = if want_bursts {
        burst_rows(&args.file, &spans, args.by)?
    } else {
        Vec::new()
    };
    let total = p1.summary.finish(args.by);
    for w in &p1.warnings {
        eprintln!("imc: warning: {}", escape(w));
    }
    if views {
        write_views(args, &total, &bursts)?;
    }
    let report = ReportResult {
        total,
        bursts,
        precise_vs_tick: p1.precise,
    };
    let text = if args.json {
        let counts_unit = match &unit {
            Unit::Bytes => None,
            Unit::Counts(events) => Some(rate_unit(events)),
        };
        let mut s = crate::output::json::to_json(&report, counts_unit.as_deref())
            .map_err(|e| CliError::runtime(format!("cannot encode JSON: {e}")))?;
        s.push('\n');
        s
    } else {
        human(&report, &header, args, &unit, threshold, spans.len())
    };
    crate::error::write_stdout(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// What the recording's traffic counters measured: bytes, or counts of stand-in events (page
/// faults, cpu-clock) that must never be shown as bytes.
enum Unit {
    Bytes,
    Counts(Vec<String>),
}

impl Unit {
    fn of(specs: &[crate::model::SlotSpec]) -> Unit {
        let traffic = || {
            specs
                .iter()
                .filter(|s| matches!(s.role, crate::model::SlotRole::Traffic(_)))
        };
        if traffic().any(|s| s.bytes_per_count.is_some()) {
            Unit::Bytes
        } else {
            Unit::Counts(traffic().map(|s| s.event.clone()).collect())
        }
    }

    fn is_bytes(&self) -> bool {
        matches!(self, Unit::Bytes)
    }

    /// A rate in this unit: `1.50 MiB/s`, `87354 page-faults/s`, `1.2e9 ns/s (cpu-clock)`.
    fn rate(&self, per_s: f64) -> String {
        match self {
            Unit::Bytes => crate::text::fmt_byte_rate(per_s),
            Unit::Counts(events) => format!("{} {}", fixed(per_s, 0), escape(&rate_unit(events))),
        }
    }
}

/// The unit of a rate of these events' counts: clocks count nanoseconds.
fn rate_unit(events: &[String]) -> String {
    let names = events.join("+");
    if !events.is_empty() && events.iter().all(|e| crate::output::counts_nanoseconds(e)) {
        format!("ns/s ({names})")
    } else {
        format!("{names}/s")
    }
}

pub use crate::text::fmt_bytes;

fn fmt_share(s: f64) -> String {
    format!("{}%", fixed(s * 100.0, 1))
}

fn row_cells(r: &TaskRow, by: GroupBy, has_total: bool, stand_in: &[String]) -> Vec<String> {
    // Names come from the recording (a process names itself anything): escaped, see text.rs.
    let mut v: Vec<String> = [
        match by {
            GroupBy::Pid => r.pid.to_string(),
            GroupBy::Tgid => r.tgid.to_string(),
            GroupBy::Comm => r.comm.clone(),
            GroupBy::Cgroup => r
                .cgroup_path
                .clone()
                .unwrap_or_else(|| r.cgroup.to_string()),
            // Docker's short form: the first 12 hex digits name a container uniquely enough.
            GroupBy::Container => r
                .container_id
                .as_deref()
                .map_or_else(|| "-".into(), |c| c.chars().take(12).collect()),
            GroupBy::Pod => r.pod_uid.clone().unwrap_or_else(|| "-".into()),
        },
        if by == GroupBy::Comm {
            if r.tgid == 0 {
                "-".into()
            } else {
                r.tgid.to_string()
            }
        } else {
            r.comm.clone()
        },
    ]
    .iter()
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
fn table(head: &[String], rows: &[Vec<String>], left: &[usize], indent: &str) -> String {
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

fn human(
    rep: &ReportResult,
    header: &crate::record::RecordHeader,
    args: &ReportArgs,
    unit: &Unit,
    threshold: f64,
    nbursts: usize,
) -> String {
    let t = &rep.total;
    let secs = t.t_end_ns.saturating_sub(t.t_start_ns) as f64 / 1e9;
    let stand_in: Vec<String> = match unit {
        Unit::Bytes => Vec::new(),
        Unit::Counts(events) => events.clone(),
    };
    let has_total = t.packages.iter().any(|p| p.total_bytes > 0);
    let mut s = format!(
        "{}: {} at {} Hz, {:.1} s\n",
        escape(&args.file.display().to_string()),
        escape(&t.source),
        header.freq_hz,
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
            "package {}: read {} ({}/s), write {} ({}/s)",
            p.id,
            fmt_bytes(p.read_bytes as f64),
            fmt_bytes(rate(p.read_bytes)),
            fmt_bytes(p.write_bytes as f64),
            fmt_bytes(rate(p.write_bytes)),
        ));
        if p.total_bytes > 0 {
            s.push_str(&format!(", total {}", fmt_bytes(p.total_bytes as f64)));
        }
        s.push('\n');
    }
    s.push('\n');
    let mut head: Vec<String> = vec![
        args.by.title().into(),
        if args.by == GroupBy::Comm {
            "TGID"
        } else {
            "COMM"
        }
        .into(),
    ];
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
    let left = match args.by {
        GroupBy::Comm => vec![0],
        GroupBy::Cgroup | GroupBy::Container | GroupBy::Pod => vec![0, 1],
        GroupBy::Pid | GroupBy::Tgid => vec![1],
    };
    let rows: Vec<Vec<String>> = t
        .tasks
        .iter()
        .take(TABLE_ROWS)
        .map(|r| row_cells(r, args.by, has_total, &stand_in))
        .collect();
    s.push_str(&table(&head, &rows, &left, ""));
    if t.tasks.len() > TABLE_ROWS {
        s.push_str(&format!("... {} more\n", t.tasks.len() - TABLE_ROWS));
    }
    match unit {
        Unit::Bytes => s.push_str(&format!(
            "\nunattributed: {}   lost samples: {}\n",
            fmt_bytes(t.unattributed_bytes as f64),
            t.lost_samples
        )),
        Unit::Counts(_) => s.push_str(&format!("\nlost samples: {}\n", t.lost_samples)),
    }
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
    if args.bursts {
        let thr = if threshold.is_finite() {
            unit.rate(threshold)
        } else {
            "-".into()
        };
        s.push_str(&format!(
            "\nbursts above {thr}{}: {nbursts}\n",
            if args.burst_threshold.is_some() {
                ""
            } else {
                " (halfway between the run's median and p99)"
            }
        ));
        for b in &rep.bursts {
            let from = b.t_start_ns.saturating_sub(t.t_start_ns) as f64 / 1e9;
            let len = b.t_end_ns.saturating_sub(b.t_start_ns) as f64 / 1e6;
            s.push_str(&format!(
                "  +{from:.3} s  {len:.0} ms  {}\n",
                unit.rate(b.bytes_per_s)
            ));
            let rows: Vec<Vec<String>> = b
                .tasks
                .iter()
                .take(5)
                .map(|r| row_cells(r, args.by, has_total, &stand_in))
                .collect();
            s.push_str(&table(&head, &rows, &left, "    "));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

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

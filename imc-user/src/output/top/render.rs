//! The view drawn: header, each package's bandwidth (and loaded latency) with its history, and
//! the task table, into a ratatui buffer.
use super::state::*;
use crate::model::GroupBy;
use crate::model::result::{IntervalResult, TaskRow};
use crate::model::stacks::StackProfile;
use crate::output::stacks::top_functions;
use crate::text::escape;
use ratatui::buffer::Buffer;
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph, Row, Sparkline, Table, Widget};
use std::collections::VecDeque;

fn column_title(state: &ViewState, key: Option<SortKey>, title: &str) -> String {
    match key {
        Some(k) if k == state.sort => {
            format!("{title}{}", if state.descending { "▼" } else { "▲" })
        }
        _ => title.to_string(),
    }
}

fn right(s: String) -> Cell<'static> {
    Cell::from(Line::from(s).alignment(Alignment::Right))
}

/// Lines of the package series: a package's read and write (and total) lines, its latency
/// line where the plan reads latency, its tiers line where a CXL tier is counted.
fn series_height(cfg: &ViewConfig, history: &History, result: Option<&IntervalResult>) -> u16 {
    match cfg.units {
        Units::Counts => 1,
        Units::Bytes { total } => {
            let tiers = result.is_some_and(|r| r.packages.iter().any(|p| !p.tiers.is_empty()));
            let per = if total { 3 } else { 2 } + usize::from(cfg.latency) + usize::from(tiers);
            (history.packages.len().max(1) * per) as u16
        }
    }
}

/// Draws the whole view into `buf` over `area`; clamps `state.scroll` and records the page
/// height, so the key handler scrolls by what the user sees.
pub fn render(
    cfg: &ViewConfig,
    history: &History,
    result: Option<&IntervalResult>,
    state: &mut ViewState,
    area: Rect,
    buf: &mut Buffer,
) {
    let series_lines = series_height(cfg, history, result);
    // The explanation under the title wraps to the width: sentences, cut they would say
    // something else.
    let (title, explain) = header_text(cfg, result);
    let explain = crate::text::wrap(&explain, area.width as usize);
    let notice = cfg.notice.as_deref().map_or_else(Vec::new, |n| {
        crate::text::wrap(&escape(n), area.width as usize)
    });
    let log_lines = state.log.len().min(3) as u16;
    let [head, series, table, log, foot] = Layout::vertical([
        Constraint::Length((1 + explain.len() + notice.len()) as u16),
        Constraint::Length(series_lines + 1),
        Constraint::Min(2),
        Constraint::Length(log_lines),
        Constraint::Length(1),
    ])
    .areas(area);

    render_header(title, &explain, &notice, head, buf);
    if log_lines > 0 {
        let shown = &state.log[state.log.len() - log_lines as usize..];
        let lines: Vec<Line> = shown
            .iter()
            .map(|l| {
                Line::styled(
                    escape(l).into_owned(),
                    Style::default().add_modifier(Modifier::DIM),
                )
            })
            .collect();
        Paragraph::new(lines).render(log, buf);
    }
    render_series(cfg, history, result, series, buf);
    let panel = cfg.stacks && state.functions;
    let [table, functions] = Layout::vertical([
        Constraint::Min(2),
        Constraint::Length(if panel { FUNCTION_LINES + 1 } else { 0 }),
    ])
    .areas(table);
    match result {
        Some(r) => {
            let selected = render_tasks(cfg, r, state, table, buf);
            if panel {
                render_functions(history.stacks.as_ref(), selected, functions, buf);
            }
        }
        None => Paragraph::new("waiting for the first interval…").render(table, buf),
    }
    let mut keys = String::from("sort: ");
    if cfg.units != Units::Counts {
        keys.push_str("r read  w write  ");
    }
    keys.push_str("t total  s share  ");
    if cfg.stalls {
        keys.push_str("v stall  ");
    }
    keys.push_str("p pid  c comm (again: reverse)   ↑↓ PgUp PgDn scroll   ");
    if cfg.stacks {
        keys.push_str(if state.functions {
            "↑↓ select  f close functions   "
        } else {
            "f functions   "
        });
    }
    keys.push_str("q quit");
    Paragraph::new(keys)
        .style(Style::default().add_modifier(Modifier::DIM))
        .render(foot, buf);
}

/// The header's title line and the line that says how to read the numbers.
fn header_text(cfg: &ViewConfig, result: Option<&IntervalResult>) -> (String, String) {
    match result {
        None => ("imc top".to_string(), String::new()),
        Some(r) => {
            let secs = seconds(r);
            let first = format!(
                "imc top   source {}   interval {:.2} s   lost samples {}",
                escape(&r.source),
                secs,
                r.lost_samples
            );
            let second = match cfg.units {
                Units::Bytes { .. } => {
                    let mut how = r
                        .weighting
                        .as_ref()
                        .map_or(String::new(), |w| format!("   divided {}", w.phrase()));
                    if r.weight_fallbacks > 0 {
                        how.push_str(&format!(
                            " ({} spans by CPU time: the weights did not run)",
                            r.weight_fallbacks
                        ));
                    }
                    format!(
                        "unattributed {} MB/s{how}",
                        mb_per_s(r.unattributed_bytes, secs)
                    )
                }
                Units::Counts => format!(
                    "counts/s, not bandwidth: {} has no bytes per count (tasks are ranked by {})",
                    escape(&r.source),
                    escape(&cfg.traffic_events.join("+"))
                ),
            };
            (first, second)
        }
    }
}

/// The title, bold; the explanation, then the notice, dimmed (both already wrapped).
fn render_header(
    title: String,
    explain: &[String],
    notice: &[String],
    area: Rect,
    buf: &mut Buffer,
) {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let dim = Style::default().add_modifier(Modifier::DIM);
    let mut out = vec![Line::styled(title, bold)];
    out.extend(explain.iter().map(|l| Line::from(l.clone())));
    out.extend(notice.iter().map(|l| Line::styled(l.clone(), dim)));
    Paragraph::new(out).render(area, buf);
}

/// One labelled history line: the label with the current value, then the sparkline of the last
/// intervals, newest at the right edge.
fn series_line(label: String, data: &VecDeque<u64>, area: Rect, buf: &mut Buffer) {
    const LABEL: u16 = 34;
    let [text, spark] =
        Layout::horizontal([Constraint::Length(LABEL), Constraint::Min(0)]).areas(area);
    Paragraph::new(label).render(text, buf);
    let width = spark.width as usize;
    let newest: Vec<u64> = data
        .iter()
        .skip(data.len().saturating_sub(width))
        .copied()
        .collect();
    // Right-aligned, so the newest interval is always at the edge and the history grows leftwards.
    let shown = newest.len() as u16;
    let spark = Rect {
        x: spark.x + spark.width - shown,
        width: shown,
        ..spark
    };
    Sparkline::default().data(&newest).render(spark, buf);
}

fn render_series(
    cfg: &ViewConfig,
    history: &History,
    result: Option<&IntervalResult>,
    area: Rect,
    buf: &mut Buffer,
) {
    let rows = Layout::vertical(vec![Constraint::Length(1); area.height as usize]).split(area);
    let mut slots = rows.iter().copied();
    match cfg.units {
        Units::Counts => {
            if let Some(a) = slots.next() {
                let now = result.map_or(String::new(), |r| {
                    let sum: f64 = r.tasks.iter().map(|t| traffic_count(cfg, t)).sum();
                    per_s(sum, seconds(r))
                });
                let label = format!(
                    "{} {now:>10}",
                    crate::output::rate_title(&cfg.traffic_events.join("+"))
                );
                series_line(label, &history.counts, a, buf);
            }
        }
        Units::Bytes { total } => {
            let empty = VecDeque::new();
            for (id, series) in &history.packages {
                let now = |pick: fn(&crate::model::PackageRow) -> u64| {
                    result
                        .and_then(|r| r.packages.iter().find(|p| p.id == *id).map(|p| (r, p)))
                        .map_or(String::new(), |(r, p)| mb_per_s(pick(p), seconds(r)))
                };
                let mut lines = vec![
                    (
                        format!("package {id} read  {:>10} MB/s", now(|p| p.read_bytes)),
                        &series[0],
                    ),
                    (
                        format!("package {id} write {:>10} MB/s", now(|p| p.write_bytes)),
                        &series[1],
                    ),
                ];
                if total {
                    lines.push((
                        format!("package {id} total {:>10} MB/s", now(|p| p.total_bytes)),
                        &series[2],
                    ));
                }
                for (label, data) in lines {
                    if let Some(a) = slots.next() {
                        series_line(label, data, a, buf);
                    }
                }
                let package = result.and_then(|r| r.packages.iter().find(|p| p.id == *id));
                if let Some((r, p)) = result.zip(package).filter(|(_, p)| !p.tiers.is_empty())
                    && let Some(a) = slots.next()
                {
                    Paragraph::new(tiers_line(*id, p, seconds(r))).render(a, buf);
                }
                if cfg.latency
                    && let Some(a) = slots.next()
                {
                    let p = result.and_then(|r| r.packages.iter().find(|p| p.id == *id));
                    Paragraph::new(latency_line(*id, p)).render(a, buf);
                }
            }
            if history.packages.is_empty()
                && let Some(a) = slots.next()
            {
                series_line("no package counters yet".into(), &empty, a, buf);
            }
        }
    }
}

/// A package's bytes per memory tier, where a CXL tier is counted: `package 0 dram read … MB/s
/// write … MB/s | cxl read … MB/s write … MB/s`.
fn tiers_line(id: u32, p: &crate::model::PackageRow, secs: f64) -> String {
    let tiers: Vec<String> = p
        .tiers
        .iter()
        .map(|t| {
            format!(
                "{} read {} write {} MB/s",
                t.tier.as_str(),
                mb_per_s(t.read_bytes, secs).trim_start(),
                mb_per_s(t.write_bytes, secs).trim_start()
            )
        })
        .collect();
    format!("package {id} {}", tiers.join(" | "))
}

/// A package's loaded latency: read and write in ns, `-` where not counted this interval (no
/// request queued, a counter that did not count, or writes not planned); utilisation only where
/// measured.
fn latency_line(id: u32, p: Option<&crate::model::PackageRow>) -> String {
    let ns = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.0} ns"));
    let mut line = format!(
        "package {id} latency  read {:>8}   write {:>8}",
        ns(p.and_then(|p| p.read_latency_ns)),
        ns(p.and_then(|p| p.write_latency_ns))
    );
    if let Some(u) = p.and_then(|p| p.utilisation) {
        line.push_str(&format!("   utilisation {:.0}%", u * 100.0));
    }
    line
}

/// Draws the task table; returns the selected row where the functions panel is open.
fn render_tasks<'a>(
    cfg: &ViewConfig,
    r: &'a IntervalResult,
    state: &mut ViewState,
    area: Rect,
    buf: &mut Buffer,
) -> Option<&'a TaskRow> {
    let secs = seconds(r);
    let rows = sorted_tasks(cfg, state, r);
    // The header takes one line.
    let page = (area.height as usize).saturating_sub(1).max(1);
    state.page = page;
    if state.functions {
        // The table follows the selected row.
        state.cursor = state.cursor.min(rows.len().saturating_sub(1));
        state.scroll = state
            .scroll
            .clamp(state.cursor.saturating_sub(page - 1), state.cursor);
    }
    state.scroll = state.scroll.min(rows.len().saturating_sub(page));
    let (titles, comm_col) = column_titles(cfg);
    let header = Row::new(titles.iter().enumerate().map(|(i, (k, t, _))| {
        let t = column_title(state, *k, t);
        if Some(i) == comm_col {
            Cell::from(t)
        } else {
            right(t)
        }
    }))
    .style(Style::default().add_modifier(Modifier::REVERSED));
    let widths: Vec<Constraint> = titles
        .iter()
        .map(|(_, _, w)| Constraint::Length(*w))
        .collect();

    let shown: Vec<&TaskRow> = rows.iter().skip(state.scroll).take(page).copied().collect();
    let scales: Vec<CountScale> = cfg
        .value_events
        .iter()
        .map(|e| {
            let max = shown
                .iter()
                .map(|t| t.values.get(e).copied().unwrap_or(0.0) / secs)
                .fold(0.0, f64::max);
            CountScale::for_max(max)
        })
        .collect();
    let selected = state
        .functions
        .then_some(state.cursor - state.scroll.min(state.cursor));
    let body = shown.iter().enumerate().map(|(i, t)| {
        let row = task_row(cfg, t, secs, &scales);
        match Some(i) == selected {
            true => row.style(Style::default().add_modifier(Modifier::BOLD | Modifier::REVERSED)),
            false => row,
        }
    });
    Table::new(body, widths)
        .header(header)
        .column_spacing(1)
        .render(area, buf);
    state
        .functions
        .then(|| rows.get(state.cursor).copied())
        .flatten()
}

/// Function lines the panel shows.
const FUNCTION_LINES: u16 = 8;

/// The functions panel: the selected row's process's top functions over the last intervals,
/// each with its share of the process's traffic in its own frames (SELF) and in everything it
/// called (TOTAL).
fn render_functions(
    profile: Option<&StackProfile>,
    row: Option<&TaskRow>,
    area: Rect,
    buf: &mut Buffer,
) {
    let reversed = Style::default().add_modifier(Modifier::REVERSED);
    let Some(row) = row else {
        Paragraph::new("no row selected").render(area, buf);
        return;
    };
    let title = format!(
        "functions of {} (pid {}), last intervals:   SELF  TOTAL",
        escape(&row.comm),
        row.tgid
    );
    let mut lines = vec![Line::styled(title, reversed)];
    let n = (area.height as usize).saturating_sub(1);
    let top = profile.map_or_else(Vec::new, |p| top_functions(p, row.tgid, n));
    if top.is_empty() {
        lines.push(Line::from(
            "no traffic charged to a stack of this process yet",
        ));
    }
    for f in top {
        let of_process = |v: u64| match f.total_value {
            0 => 0.0,
            t => f.share * v as f64 / t as f64 * 100.0,
        };
        lines.push(Line::from(format!(
            "{:>5.1}% {:>5.1}%  {}",
            of_process(f.self_value),
            of_process(f.total_value),
            escape(&f.function)
        )));
    }
    Paragraph::new(lines).render(area, buf);
}

/// The table's columns: (the key that sorts by it, title, width), and which is COMM (left
/// aligned). A group row carries its key, not a member's identity (`--by cgroup`: no PID or
/// COMM).
type Title = (Option<SortKey>, String, u16);

fn column_titles(cfg: &ViewConfig) -> (Vec<Title>, Option<usize>) {
    let ident = cfg.by.identity();
    let mut titles: Vec<Title> = Vec::new();
    if ident.pid {
        titles.push((Some(SortKey::Pid), "PID".into(), 8));
    }
    if ident.tgid {
        titles.push((None, "TGID".into(), 8));
    }
    let comm_col = ident.comm.then_some(titles.len());
    if ident.comm {
        titles.push((Some(SortKey::Comm), "COMM".into(), 16));
    }
    let cgroup_title = match cfg.by {
        GroupBy::Container => "CONTAINER",
        GroupBy::Pod => "POD",
        _ => "CGROUP",
    };
    let cgroup_width = if cfg.by == GroupBy::Pod { 36 } else { 16 };
    titles.push((None, cgroup_title.into(), cgroup_width));
    if let Units::Bytes { total } = cfg.units {
        titles.push((Some(SortKey::Read), "READ MB/s".into(), 11));
        titles.push((Some(SortKey::Write), "WRITE MB/s".into(), 11));
        if total {
            titles.push((Some(SortKey::Total), "TOTAL MB/s".into(), 11));
        }
    }
    titles.push((Some(SortKey::Share), "SHARE".into(), 7));
    if cfg.stalls {
        titles.push((Some(SortKey::Stall), "STALL".into(), 7));
    }
    for e in &cfg.value_events {
        // In counts mode the traffic counters are what 't' sorts by.
        let key = (cfg.units == Units::Counts && cfg.traffic_events.contains(e))
            .then_some(SortKey::Total);
        let title = crate::output::rate_title(e);
        let width = (title.chars().count() + 1).clamp(8, 24) as u16;
        titles.push((key, title, width));
    }
    (titles, comm_col)
}

/// One task's row, in the order of [`column_titles`].
fn task_row(cfg: &ViewConfig, t: &TaskRow, secs: f64, scales: &[CountScale]) -> Row<'static> {
    let ident = cfg.by.identity();
    let mut cells = Vec::new();
    if ident.pid {
        cells.push(right(t.pid.to_string()));
    }
    if ident.tgid {
        cells.push(right(t.tgid.to_string()));
    }
    if ident.comm {
        cells.push(Cell::from(escape(&t.comm).into_owned()));
    }
    cells.push(right(group_cell(cfg.by, t)));
    if let Units::Bytes { total } = cfg.units {
        cells.push(right(mb_per_s(t.read_bytes, secs)));
        cells.push(right(mb_per_s(t.write_bytes, secs)));
        if total {
            cells.push(right(mb_per_s(t.total_bytes, secs)));
        }
    }
    cells.push(right(format!("{:.1}%", t.share * 100.0)));
    if cfg.stalls {
        cells.push(right(
            t.stall_share
                .map_or("-".to_string(), |v| format!("{:.1}%", v * 100.0)),
        ));
    }
    for (e, scale) in cfg.value_events.iter().zip(scales) {
        cells.push(right(
            scale.show(t.values.get(e).copied().unwrap_or(0.0), secs),
        ));
    }
    Row::new(cells)
}

/// The cgroup column: a pod's UID whole under `--by pod` (its key), else the cgroup in a few
/// characters; "-" for the group of tasks in no container (pod).
fn group_cell(by: GroupBy, t: &TaskRow) -> String {
    match by {
        GroupBy::Pod => escape(t.pod_uid.as_deref().unwrap_or("-")).into_owned(),
        GroupBy::Container if t.container_id.is_none() => "-".into(),
        _ => cgroup_cell(t),
    }
}

/// A task's cgroup in a few characters: its container's short id, else the last part of its
/// path (`nginx.service`), else the numeric id (not resolved).
fn cgroup_cell(t: &TaskRow) -> String {
    if let Some(c) = &t.container_id {
        return escape(&c.chars().take(12).collect::<String>()).into_owned();
    }
    match t.cgroup_path.as_deref() {
        Some("/") => "/".into(),
        Some(p) => escape(p.rsplit('/').next().unwrap_or(p)).into_owned(),
        None => t.cgroup.to_string(),
    }
}

/// The view rendered into a fresh `width`×`height` buffer (what tests and benchmarks look at).
pub fn render_buffer(
    cfg: &ViewConfig,
    history: &History,
    result: Option<&IntervalResult>,
    state: &mut ViewState,
    width: u16,
    height: u16,
) -> Buffer {
    let area = Rect::new(0, 0, width, height);
    let mut buf = Buffer::empty(area);
    render(cfg, history, result, state, area, &mut buf);
    buf
}

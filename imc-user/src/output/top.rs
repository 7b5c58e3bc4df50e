//! The full-screen view of `imc top`, as pure functions of what was measured and how the user
//! wants it shown: a header, each package's bandwidth with its recent history, and a sortable,
//! scrollable task table. Nothing here touches the terminal; `commands::top` owns that, so the
//! whole picture can be rendered into a buffer and checked in tests.
use crate::model::GroupBy;
use crate::model::result::{IntervalResult, TaskRow};
use crate::text::escape;
use ratatui::buffer::Buffer;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph, Row, Sparkline, Table, Widget};
use std::cmp::Ordering;
use std::collections::{BTreeMap, VecDeque};

/// Intervals of history kept per series (a minute at the default 1 s interval).
pub const HISTORY: usize = 60;

/// What the source's numbers are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Units {
    /// A memory controller or a bandwidth `-e` event: bytes, split into read and write (and a
    /// total column when some counter does not split them).
    Bytes { total: bool },
    /// A stand-in without bytes per count (page faults, LLC misses, plain `-e` events): the
    /// amounts are event counts, so they are shown as counts per second, never as MB/s of zero.
    Counts,
}

/// What the view shows, fixed for the run (it follows from the counters the loop reads).
#[derive(Clone, Debug, PartialEq)]
pub struct ViewConfig {
    pub units: Units,
    /// Counters shown per task as their own columns (`-e` events and stand-ins); empty for a
    /// memory controller, whose counters are the READ/WRITE columns already.
    pub value_events: Vec<String>,
    /// The counters that make up traffic: what counts mode totals and sorts by.
    pub traffic_events: Vec<String>,
    /// Task rows kept after sorting (0: all).
    pub top: usize,
    /// A line said about the whole run (the stand-in notice): shown under the header, since
    /// nothing may be printed beside the full-screen view.
    pub notice: Option<String>,
    /// How rows are grouped (`--by`): a group row shows its key, not one member's pid or name.
    pub by: GroupBy,
    /// The plan counts each task's cycles stalled on memory: a STALL column (the share of
    /// its cycles), sorted by with `v`.
    pub stalls: bool,
}

/// The last [`HISTORY`] intervals' rates, per package (bytes) or summed over tasks (counts).
#[derive(Clone, Debug, Default)]
pub struct History {
    packages: BTreeMap<u32, [VecDeque<u64>; 3]>,
    counts: VecDeque<u64>,
}

fn push_bounded(q: &mut VecDeque<u64>, v: u64) {
    if q.len() == HISTORY {
        q.pop_front();
    }
    q.push_back(v);
}

fn seconds(r: &IntervalResult) -> f64 {
    (r.t_end_ns.saturating_sub(r.t_start_ns) as f64 / 1e9).max(1e-9)
}

/// The sum of a task's traffic counters (its counts-mode amount).
fn traffic_count(cfg: &ViewConfig, t: &TaskRow) -> f64 {
    cfg.traffic_events
        .iter()
        .filter_map(|e| t.values.get(e))
        .sum()
}

impl History {
    pub fn push(&mut self, cfg: &ViewConfig, r: &IntervalResult) {
        let secs = seconds(r);
        let rate = |v: f64| (v / secs).round() as u64;
        for p in &r.packages {
            let series = self.packages.entry(p.id).or_default();
            push_bounded(&mut series[0], rate(p.read_bytes as f64));
            push_bounded(&mut series[1], rate(p.write_bytes as f64));
            push_bounded(&mut series[2], rate(p.total_bytes as f64));
        }
        let counts: f64 = r.tasks.iter().map(|t| traffic_count(cfg, t)).sum();
        push_bounded(&mut self.counts, rate(counts));
    }
}

/// The columns the task table can be sorted by, and the key that picks each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    Share,
    Read,
    Write,
    Total,
    Pid,
    Comm,
    /// Victims: the share of a task's cycles stalled on memory.
    Stall,
}

impl SortKey {
    fn from_char(c: char) -> Option<SortKey> {
        Some(match c {
            's' => SortKey::Share,
            'r' => SortKey::Read,
            'w' => SortKey::Write,
            't' => SortKey::Total,
            'p' => SortKey::Pid,
            'c' => SortKey::Comm,
            'v' => SortKey::Stall,
            _ => return None,
        })
    }

    /// Counts have no read/write split, so those two keys do nothing there.
    fn applies(self, units: Units) -> bool {
        !(units == Units::Counts && matches!(self, SortKey::Read | SortKey::Write))
    }

    /// Amounts read best largest first; names and ids in order.
    fn default_descending(self) -> bool {
        !matches!(self, SortKey::Pid | SortKey::Comm)
    }
}

/// How the user has arranged the view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewState {
    pub sort: SortKey,
    pub descending: bool,
    /// First task row shown.
    pub scroll: usize,
    /// Task rows that fit on the screen at the last render (what a page scroll moves by).
    pub page: usize,
    /// The last log lines (`-v`) held while the view is up: shown above the keys line, never
    /// written over the view (all of them are printed on stderr when it closes).
    pub log: Vec<String>,
}

impl Default for ViewState {
    fn default() -> Self {
        ViewState {
            sort: SortKey::Share,
            descending: true,
            scroll: 0,
            page: 10,
            log: Vec::new(),
        }
    }
}

/// What a key asks of the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Quit,
    /// The state changed: draw again.
    Redraw,
    Ignore,
}

/// Applies one key press to the state. Pressing the current sort key again reverses the order.
pub fn handle_key(state: &mut ViewState, units: Units, key: KeyEvent) -> Action {
    if key.kind == KeyEventKind::Release {
        return Action::Ignore;
    }
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    match key.code {
        KeyCode::Char('c') if ctrl => Action::Quit,
        KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
        KeyCode::Up | KeyCode::Char('k') => scroll_to(state, state.scroll.saturating_sub(1)),
        KeyCode::Down | KeyCode::Char('j') => scroll_to(state, state.scroll.saturating_add(1)),
        KeyCode::PageUp => scroll_to(state, state.scroll.saturating_sub(state.page.max(1))),
        KeyCode::PageDown => scroll_to(state, state.scroll.saturating_add(state.page.max(1))),
        KeyCode::Home => scroll_to(state, 0),
        // Clamped to the last page when rendered.
        KeyCode::End => scroll_to(state, usize::MAX / 2),
        KeyCode::Char(c) if !ctrl => match SortKey::from_char(c) {
            Some(k) if k.applies(units) => {
                if state.sort == k {
                    state.descending = !state.descending;
                } else {
                    state.sort = k;
                    state.descending = k.default_descending();
                }
                state.scroll = 0;
                Action::Redraw
            }
            _ => Action::Ignore,
        },
        _ => Action::Ignore,
    }
}

fn scroll_to(state: &mut ViewState, to: usize) -> Action {
    if to == state.scroll {
        return Action::Ignore;
    }
    state.scroll = to;
    Action::Redraw
}

/// The task rows in the user's order, ties broken by PID so the table does not flicker, cut to
/// `cfg.top` after sorting (the top N by the chosen column, not by share).
pub fn sorted_tasks<'a>(
    cfg: &ViewConfig,
    state: &ViewState,
    r: &'a IntervalResult,
) -> Vec<&'a TaskRow> {
    let amount = |t: &TaskRow| -> f64 {
        match (state.sort, cfg.units) {
            (SortKey::Share, _) => t.share,
            (SortKey::Read, _) => t.read_bytes as f64,
            (SortKey::Write, _) => t.write_bytes as f64,
            (SortKey::Total, Units::Bytes { .. }) => t.bytes() as f64,
            (SortKey::Total, Units::Counts) => traffic_count(cfg, t),
            (SortKey::Pid | SortKey::Comm, _) => 0.0,
            // Tasks with no share (no cycles counted) below every share.
            (SortKey::Stall, _) => t.stall_share.unwrap_or(-1.0),
        }
    };
    let mut rows: Vec<&TaskRow> = r.tasks.iter().collect();
    rows.sort_by(|a, b| {
        let by_key = match state.sort {
            SortKey::Pid => a.pid.cmp(&b.pid),
            SortKey::Comm => a.comm.cmp(&b.comm),
            _ => amount(a).partial_cmp(&amount(b)).unwrap_or(Ordering::Equal),
        };
        let by_key = if state.descending {
            by_key.reverse()
        } else {
            by_key
        };
        by_key.then(a.pid.cmp(&b.pid))
    });
    if cfg.top > 0 {
        rows.truncate(cfg.top);
    }
    rows
}

/// Bytes per second as the table's MB/s (10^6, like the JSON's bytes are plain bytes).
pub fn mb_per_s(bytes: u64, secs: f64) -> String {
    super::fixed(bytes as f64 / secs / 1e6, 1)
}

/// Counts per second: whole numbers, with k/M past five digits so columns stay narrow.
pub fn per_s(count: f64, secs: f64) -> String {
    let v = count / secs;
    if v >= 1e8 {
        format!("{:.0}M", v / 1e6)
    } else if v >= 1e5 {
        format!("{:.0}k", v / 1e3)
    } else {
        super::fixed(v, 0)
    }
}

/// One unit for a whole column of counts per second: k or M as [`per_s`] picks it for the
/// column's largest value, so `34954k` never stands beside `128M`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CountScale {
    div: f64,
    suffix: &'static str,
}

impl CountScale {
    pub fn for_max(max_per_s: f64) -> CountScale {
        let (div, suffix) = if max_per_s >= 1e8 {
            (1e6, "M")
        } else if max_per_s >= 1e5 {
            (1e3, "k")
        } else {
            (1.0, "")
        };
        CountScale { div, suffix }
    }

    pub fn show(self, count: f64, secs: f64) -> String {
        let v = count / secs / self.div;
        if self.suffix.is_empty() {
            super::fixed(v, 0)
        } else {
            format!("{v:.0}{}", self.suffix)
        }
    }
}

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
    let series_lines = match cfg.units {
        Units::Counts => 1,
        Units::Bytes { total } => {
            let per = if total { 3 } else { 2 };
            (history.packages.len().max(1) * per) as u16
        }
    };
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
    match result {
        Some(r) => render_tasks(cfg, r, state, table, buf),
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
    keys.push_str("p pid  c comm (again: reverse)   ↑↓ PgUp PgDn scroll   q quit");
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
                    super::rate_title(&cfg.traffic_events.join("+"))
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
            }
            if history.packages.is_empty()
                && let Some(a) = slots.next()
            {
                series_line("no package counters yet".into(), &empty, a, buf);
            }
        }
    }
}

fn render_tasks(
    cfg: &ViewConfig,
    r: &IntervalResult,
    state: &mut ViewState,
    area: Rect,
    buf: &mut Buffer,
) {
    let secs = seconds(r);
    let rows = sorted_tasks(cfg, state, r);
    // The header takes one line.
    let page = (area.height as usize).saturating_sub(1).max(1);
    state.page = page;
    state.scroll = state.scroll.min(rows.len().saturating_sub(page));

    // A group row carries its key, not a member's identity (`--by cgroup`: no PID or COMM).
    let ident = cfg.by.identity();
    let mut titles: Vec<(Option<SortKey>, String, u16)> = Vec::new();
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
        let title = super::rate_title(e);
        let width = (title.chars().count() + 1).clamp(8, 24) as u16;
        titles.push((key, title, width));
    }
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
    let body = shown.iter().map(|t| {
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
        for (e, scale) in cfg.value_events.iter().zip(&scales) {
            cells.push(right(
                scale.show(t.values.get(e).copied().unwrap_or(0.0), secs),
            ));
        }
        Row::new(cells)
    });
    Table::new(body, widths)
        .header(header)
        .column_spacing(1)
        .render(area, buf);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::result::PackageRow;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    fn key(c: KeyCode) -> KeyEvent {
        KeyEvent::new(c, KeyModifiers::NONE)
    }

    fn task(pid: u32, comm: &str, read: u64, write: u64, share: f64) -> TaskRow {
        TaskRow {
            pid,
            tgid: pid,
            comm: comm.into(),
            cgroup: 7,
            read_bytes: read,
            write_bytes: write,
            share,
            ..TaskRow::default()
        }
    }

    fn bytes_cfg() -> ViewConfig {
        ViewConfig {
            units: Units::Bytes { total: false },
            value_events: vec![],
            traffic_events: vec!["uncore_imc_0/read".into(), "uncore_imc_0/write".into()],
            top: 0,
            notice: None,
            by: GroupBy::Pid,
            stalls: false,
        }
    }

    /// Half a second on a memory controller: 3 tasks, the largest share not the lowest pid.
    fn bytes_interval() -> IntervalResult {
        IntervalResult {
            t_start_ns: 1_000_000_000,
            t_end_ns: 1_500_000_000,
            source: "intel-uncore-imc".into(),
            packages: vec![PackageRow {
                id: 0,
                read_bytes: 600_000_000,
                write_bytes: 150_000_000,
                total_bytes: 0,
                ..PackageRow::default()
            }],
            tasks: vec![
                task(300, "stream", 400_000_000, 100_000_000, 0.66),
                task(20, "postgres", 150_000_000, 40_000_000, 0.25),
                task(4000, "bash", 1_000_000, 0, 0.01),
            ],
            unattributed_bytes: 60_000_000,
            unattributed: Default::default(),
            lost_samples: 3,
            weighting: None,
            weight_fallbacks: 0,
        }
    }

    /// The view through ratatui's test terminal, one string per screen line.
    fn screen(
        cfg: &ViewConfig,
        h: &History,
        r: Option<&IntervalResult>,
        st: &mut ViewState,
        w: u16,
        ht: u16,
    ) -> Vec<String> {
        let mut term = Terminal::new(TestBackend::new(w, ht)).unwrap();
        term.draw(|f| render(cfg, h, r, st, f.area(), f.buffer_mut()))
            .unwrap();
        let buf = term.backend().buffer();
        (0..buf.area.height)
            .map(|y| {
                (0..buf.area.width)
                    .map(|x| buf[(x, y)].symbol())
                    .collect::<String>()
            })
            .collect()
    }

    /// The PIDs of the task rows, top to bottom (rows whose first word is a number).
    fn pids(lines: &[String]) -> Vec<u32> {
        let head = lines
            .iter()
            .position(|l| l.contains("PID"))
            .expect("table header");
        lines[head + 1..]
            .iter()
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .collect()
    }

    fn line_with<'a>(lines: &'a [String], what: &str) -> &'a str {
        lines
            .iter()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no line with {what:?} in\n{}", lines.join("\n")))
    }

    #[test]
    fn victims_have_a_stall_column_and_v_sorts_by_it() {
        let mut cfg = bytes_cfg();
        cfg.stalls = true;
        let mut r = bytes_interval();
        // The streamer stalls little, postgres waits on memory, bash ran no counted cycle.
        let pairs = [(Some(1e8), Some(1e9)), (Some(6e8), Some(1e9)), (None, None)];
        for (t, (stalled, cycles)) in r.tasks.iter_mut().zip(pairs) {
            t.stall_cycles = stalled;
            t.cycles = cycles;
            t.stall_share = crate::model::result::stall_share(stalled, cycles);
        }
        let h = History::default();
        let mut st = ViewState::default();
        let lines = screen(&cfg, &h, Some(&r), &mut st, 120, 20);
        assert!(line_with(&lines, "PID").contains("STALL"));
        let row: Vec<&str> = line_with(&lines, "postgres").split_whitespace().collect();
        assert_eq!(row.last(), Some(&"60.0%"), "{row:?}");
        let row: Vec<&str> = line_with(&lines, "bash").split_whitespace().collect();
        assert_eq!(
            row.last(),
            Some(&"-"),
            "{row:?}: null, never a made-up share"
        );
        assert!(line_with(&lines, "sort:").contains("v stall"));
        handle_key(&mut st, cfg.units, key(KeyCode::Char('v')));
        assert_eq!(st.sort, SortKey::Stall);
        let lines = screen(&cfg, &h, Some(&r), &mut st, 120, 20);
        assert_eq!(pids(&lines), [20, 300, 4000]);
        // Without the pair: no column, no key.
        cfg.stalls = false;
        let lines = screen(&cfg, &h, Some(&r), &mut ViewState::default(), 120, 20);
        assert!(!line_with(&lines, "PID").contains("STALL"));
        assert!(!line_with(&lines, "sort:").contains("v stall"));
    }

    #[test]
    fn header_packages_and_rows_in_share_order_with_bandwidth() {
        let cfg = bytes_cfg();
        let r = bytes_interval();
        let mut h = History::default();
        h.push(&cfg, &r);
        let mut st = ViewState::default();
        let lines = screen(&cfg, &h, Some(&r), &mut st, 120, 20);
        let head = &lines[0];
        assert!(head.contains("source intel-uncore-imc"), "{head}");
        assert!(head.contains("interval 0.50 s"), "{head}");
        assert!(head.contains("lost samples 3"), "{head}");
        // 60 MB over 0.5 s.
        assert!(lines[1].contains("unattributed 120.0 MB/s"), "{}", lines[1]);
        assert!(line_with(&lines, "package 0 read").contains("1200.0 MB/s"));
        assert!(line_with(&lines, "package 0 write").contains("300.0 MB/s"));
        assert_eq!(pids(&lines), [300, 20, 4000]);
        // stream: 400 MB read, 100 MB written in 0.5 s, 66 % of the traffic.
        let row: Vec<&str> = line_with(&lines, "stream").split_whitespace().collect();
        assert_eq!(
            row,
            ["300", "300", "stream", "7", "800.0", "200.0", "66.0%"]
        );
        assert!(line_with(&lines, "PID").contains("SHARE▼"));
        assert!(!lines.iter().any(|l| l.contains("counts/s")));
    }

    #[test]
    fn sort_keys_reorder_rows_and_move_the_indicator() {
        let cfg = bytes_cfg();
        let r = bytes_interval();
        let h = History::default();
        let mut st = ViewState::default();
        let mut order = |c: char| {
            assert_eq!(
                handle_key(&mut st, cfg.units, key(KeyCode::Char(c))),
                Action::Redraw
            );
            let lines = screen(&cfg, &h, Some(&r), &mut st, 120, 20);
            (pids(&lines), line_with(&lines, "PID").to_string())
        };
        let (p, head) = order('p');
        assert_eq!(p, [20, 300, 4000]);
        assert!(head.contains("PID▲") && !head.contains("SHARE▼"), "{head}");
        // The same key again reverses.
        assert_eq!(order('p').0, [4000, 300, 20]);
        let (w, head) = order('w');
        assert_eq!(w, [300, 20, 4000]);
        assert!(head.contains("WRITE MB/s▼"), "{head}");
        assert_eq!(order('c').0, [4000, 20, 300], "bash, postgres, stream");
        assert_eq!(order('r').0, [300, 20, 4000]);
        assert_eq!(order('r').0, [4000, 20, 300]);
        assert_eq!(order('t').0, [300, 20, 4000]);
        assert_eq!(order('s').0, [300, 20, 4000]);
    }

    #[test]
    fn names_print_as_text_and_the_notice_stays_in_the_header() {
        let cfg = ViewConfig {
            notice: Some("no memory-controller counters; counting page-faults".into()),
            ..bytes_cfg()
        };
        let mut r = bytes_interval();
        r.source = "imc\x1b]0;pwned\x07".into();
        r.tasks[0].comm = "\x1b[2Jevil".into();
        r.tasks[0].cgroup_path = Some("/x/\x1b[31mred.scope".into());
        let mut h = History::default();
        h.push(&cfg, &r);
        let mut st = ViewState::default();
        let lines = screen(&cfg, &h, Some(&r), &mut st, 160, 20);
        let all = lines.join("\n");
        assert!(!all.contains('\x1b') && !all.contains('\x07'), "{all:?}");
        assert!(line_with(&lines, "evil").contains("\\x1b[2Jevil"), "{all}");
        assert!(
            lines[0].contains("source imc\\x1b]0;pwned\\x07"),
            "{}",
            lines[0]
        );
        assert!(
            lines[..3]
                .iter()
                .any(|l| l.contains("counting page-faults")),
            "the notice is in the header:\n{all}"
        );
    }

    #[test]
    fn a_column_of_counts_has_one_unit() {
        let cfg = ViewConfig {
            units: Units::Counts,
            value_events: vec!["page-faults".into()],
            traffic_events: vec!["page-faults".into()],
            top: 0,
            notice: None,
            by: GroupBy::Pid,
            stalls: false,
        };
        let t = |pid: u32, faults: f64| TaskRow {
            pid,
            tgid: pid,
            comm: format!("t{pid}"),
            values: [("page-faults".to_string(), faults)].into(),
            ..TaskRow::default()
        };
        let mut r = bytes_interval();
        // One second: 128 M/s beside 34.954 M/s and 2/s.
        r.t_end_ns = r.t_start_ns + 1_000_000_000;
        r.tasks = vec![t(1, 128e6), t(2, 34_954_000.0), t(3, 2.0)];
        let mut st = ViewState::default();
        let all = screen(&cfg, &History::default(), Some(&r), &mut st, 120, 30).join("\n");
        assert!(
            all.contains("128M") && all.contains("35M") && all.contains("0M"),
            "{all}"
        );
        assert!(!all.contains("34954k"), "{all}");
    }

    #[test]
    fn top_n_is_taken_after_sorting() {
        let cfg = ViewConfig {
            top: 2,
            ..bytes_cfg()
        };
        let r = bytes_interval();
        let mut st = ViewState::default();
        handle_key(&mut st, cfg.units, key(KeyCode::Char('p')));
        let rows: Vec<u32> = sorted_tasks(&cfg, &st, &r).iter().map(|t| t.pid).collect();
        assert_eq!(rows, [20, 300]);
    }

    #[test]
    fn stand_in_shows_counts_per_second_not_zero_bandwidth() {
        let cfg = ViewConfig {
            units: Units::Counts,
            value_events: vec!["page-faults".into()],
            traffic_events: vec!["page-faults".into()],
            top: 0,
            notice: None,
            by: GroupBy::Pid,
            stalls: false,
        };
        let t = |pid: u32, comm: &str, faults: f64, share: f64| TaskRow {
            values: [("page-faults".to_string(), faults)].into(),
            ..task(pid, comm, 0, 0, share)
        };
        let r = IntervalResult {
            t_start_ns: 0,
            t_end_ns: 2_000_000_000,
            source: "proxy:page-faults".into(),
            packages: vec![PackageRow::default()],
            tasks: vec![t(11, "cc1", 9000.0, 0.75), t(12, "ld", 3000.0, 0.25)],
            ..IntervalResult::default()
        };
        let mut h = History::default();
        h.push(&cfg, &r);
        let mut st = ViewState::default();
        let lines = screen(&cfg, &h, Some(&r), &mut st, 120, 16);
        assert!(
            lines[0].contains("source proxy:page-faults"),
            "{}",
            lines[0]
        );
        assert!(lines[1].contains("counts/s, not bandwidth"), "{}", lines[1]);
        assert!(
            !lines.iter().any(|l| l.contains("MB/s")),
            "no bandwidth columns for counts:\n{}",
            lines.join("\n")
        );
        // 12000 faults in 2 s over all tasks.
        assert!(line_with(&lines, "page-faults/s ").contains("6000"));
        let row: Vec<&str> = line_with(&lines, "cc1").split_whitespace().collect();
        assert_eq!(row, ["11", "11", "cc1", "7", "75.0%", "4500"]);
        // 't' sorts by the stand-in's counts, so its column carries the indicator.
        handle_key(&mut st, cfg.units, key(KeyCode::Char('t')));
        let lines = screen(&cfg, &h, Some(&r), &mut st, 120, 16);
        assert!(line_with(&lines, "PID").contains("page-faults/s▼"));
        // No read/write split to sort by.
        assert_eq!(
            handle_key(&mut st, cfg.units, key(KeyCode::Char('r'))),
            Action::Ignore
        );
        assert_eq!(st.sort, SortKey::Total);
    }

    #[test]
    fn rows_beyond_the_screen_scroll_and_clamp() {
        let cfg = bytes_cfg();
        let mut r = bytes_interval();
        r.tasks = (1..=40)
            .map(|i| task(i, "w", u64::from(1000 - i), 0, f64::from(1000 - i) / 1e5))
            .collect();
        let h = History::default();
        let mut st = ViewState::default();
        let first = pids(&screen(&cfg, &h, Some(&r), &mut st, 100, 16));
        assert_eq!(first[0], 1);
        let page = first.len();
        assert!(page > 3 && page < 40, "{page} rows on a 16-line screen");
        assert_eq!(st.page, page);
        handle_key(&mut st, cfg.units, key(KeyCode::PageDown));
        let second = pids(&screen(&cfg, &h, Some(&r), &mut st, 100, 16));
        assert_eq!(second[0] as usize, page + 1);
        handle_key(&mut st, cfg.units, key(KeyCode::End));
        let last = pids(&screen(&cfg, &h, Some(&r), &mut st, 100, 16));
        assert_eq!(*last.last().unwrap(), 40);
        assert_eq!(last.len(), page, "the last page is full, not one row");
        handle_key(&mut st, cfg.units, key(KeyCode::Home));
        assert_eq!(pids(&screen(&cfg, &h, Some(&r), &mut st, 100, 16))[0], 1);
        // Sorting starts again from the top.
        handle_key(&mut st, cfg.units, key(KeyCode::End));
        handle_key(&mut st, cfg.units, key(KeyCode::Char('p')));
        assert_eq!(st.scroll, 0);
    }

    #[test]
    fn history_keeps_the_last_minute_newest_at_the_right() {
        let cfg = bytes_cfg();
        let mut h = History::default();
        let mut r = bytes_interval();
        for i in 0..(HISTORY as u64 + 15) {
            // Write bandwidth climbs; the newest interval is the largest.
            r.packages[0].write_bytes = 1_000_000 * (i + 1);
            h.push(&cfg, &r);
        }
        assert_eq!(h.packages[&0][1].len(), HISTORY);
        assert_eq!(
            h.packages[&0][1][0],
            2_000_000 * 16,
            "the oldest 15 dropped"
        );
        let mut st = ViewState::default();
        let lines = screen(&cfg, &h, Some(&r), &mut st, 100, 20);
        let write = line_with(&lines, "package 0 write");
        assert!(
            write.ends_with('█'),
            "newest bar at the right edge: {write:?}"
        );
        let bars: String = write.chars().skip(34).collect();
        assert_eq!(bars.chars().count(), 66);
        assert_eq!(bars.chars().filter(|c| *c != ' ').count(), HISTORY);
    }

    #[test]
    fn quit_keys_and_nothing_else_quit() {
        let mut st = ViewState::default();
        let units = Units::Counts;
        assert_eq!(
            handle_key(&mut st, units, key(KeyCode::Char('q'))),
            Action::Quit
        );
        assert_eq!(handle_key(&mut st, units, key(KeyCode::Esc)), Action::Quit);
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(handle_key(&mut st, units, ctrl_c), Action::Quit);
        assert_eq!(
            handle_key(&mut st, units, key(KeyCode::Char('x'))),
            Action::Ignore
        );
        assert_eq!(st, ViewState::default());
    }

    #[test]
    fn before_the_first_interval_the_view_says_it_waits() {
        let cfg = bytes_cfg();
        let mut st = ViewState::default();
        let lines = screen(&cfg, &History::default(), None, &mut st, 80, 12);
        assert!(lines[0].starts_with("imc top"));
        line_with(&lines, "waiting for the first interval");
        // Tiny terminals do not panic.
        render_buffer(&cfg, &History::default(), None, &mut st, 3, 2);
        render_buffer(
            &cfg,
            &History::default(),
            Some(&bytes_interval()),
            &mut st,
            0,
            0,
        );
    }
}

//! What the view shows, fixed for the run; the history of the last intervals; the keys and the
//! order of the task rows.
use crate::model::GroupBy;
use crate::model::result::{IntervalResult, TaskRow};
use crate::model::stacks::StackProfile;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
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
    /// The plan reads loaded latency: a line per package with its read (and write) latency.
    pub latency: bool,
    /// Stacks are taken (`top --stacks`): `f` opens the selected row's process's functions.
    pub stacks: bool,
}

/// The last [`HISTORY`] intervals' rates, per package (bytes) or summed over tasks (counts);
/// with stacks, the traffic by call stack of the last few intervals.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub(super) packages: BTreeMap<u32, [VecDeque<u64>; 3]>,
    pub(super) counts: VecDeque<u64>,
    /// What the functions panel reads (set by the caller as stacks come in).
    pub stacks: Option<StackProfile>,
}

pub(super) fn push_bounded(q: &mut VecDeque<u64>, v: u64) {
    if q.len() == HISTORY {
        q.pop_front();
    }
    q.push_back(v);
}

pub(super) fn seconds(r: &IntervalResult) -> f64 {
    (r.t_end_ns.saturating_sub(r.t_start_ns) as f64 / 1e9).max(1e-9)
}

/// The sum of a task's traffic counters (its counts-mode amount).
pub(super) fn traffic_count(cfg: &ViewConfig, t: &TaskRow) -> f64 {
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
    pub(super) fn from_char(c: char) -> Option<SortKey> {
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
    pub(super) fn applies(self, units: Units) -> bool {
        !(units == Units::Counts && matches!(self, SortKey::Read | SortKey::Write))
    }

    /// Amounts read best largest first; names and ids in order.
    pub(super) fn default_descending(self) -> bool {
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
    /// The functions panel is open: the arrows move the selected row (`cursor`, in sorted
    /// order), and the panel shows its process's top functions.
    pub functions: bool,
    pub cursor: usize,
}

impl Default for ViewState {
    fn default() -> Self {
        ViewState {
            sort: SortKey::Share,
            descending: true,
            scroll: 0,
            page: 10,
            log: Vec::new(),
            functions: false,
            cursor: 0,
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

/// Applies one key press to the state. Pressing the current sort key again reverses the order;
/// `f` (with stacks) opens and closes the functions panel, and while it is open the scrolling
/// keys move the selected row (the table follows it).
pub fn handle_key(state: &mut ViewState, cfg: &ViewConfig, key: KeyEvent) -> Action {
    if key.kind == KeyEventKind::Release {
        return Action::Ignore;
    }
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    let at = if state.functions {
        state.cursor
    } else {
        state.scroll
    };
    let page = state.page.max(1);
    match key.code {
        KeyCode::Char('c') if ctrl => Action::Quit,
        KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
        KeyCode::Char('f') if cfg.stacks => {
            state.functions = !state.functions;
            state.cursor = state.scroll;
            Action::Redraw
        }
        KeyCode::Up | KeyCode::Char('k') => move_to(state, at.saturating_sub(1)),
        KeyCode::Down | KeyCode::Char('j') => move_to(state, at.saturating_add(1)),
        KeyCode::PageUp => move_to(state, at.saturating_sub(page)),
        KeyCode::PageDown => move_to(state, at.saturating_add(page)),
        KeyCode::Home => move_to(state, 0),
        // Clamped to the last page (row) when rendered.
        KeyCode::End => move_to(state, usize::MAX / 2),
        KeyCode::Char(c) if !ctrl => match SortKey::from_char(c) {
            Some(k) if k.applies(cfg.units) && (k != SortKey::Stall || cfg.stalls) => {
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

/// Scrolls the table to row `to`, or, with the functions panel open, selects it.
pub(super) fn move_to(state: &mut ViewState, to: usize) -> Action {
    let at = match state.functions {
        true => &mut state.cursor,
        false => &mut state.scroll,
    };
    if to == *at {
        return Action::Ignore;
    }
    *at = to;
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
    crate::output::fixed(bytes as f64 / secs / 1e6, 1)
}

/// Counts per second: whole numbers, with k/M past five digits so columns stay narrow.
pub fn per_s(count: f64, secs: f64) -> String {
    let v = count / secs;
    if v >= 1e8 {
        format!("{:.0}M", v / 1e6)
    } else if v >= 1e5 {
        format!("{:.0}k", v / 1e3)
    } else {
        crate::output::fixed(v, 0)
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
            crate::output::fixed(v, 0)
        } else {
            format!("{v:.0}{}", self.suffix)
        }
    }
}

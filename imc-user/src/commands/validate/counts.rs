//! Counts against the truth: per interval and workload, the kernel's count of each weight
//! event against what the attributor charged, and the bounds they are judged by.

use super::comparable::{ZERO_CHARGE_BOUND, error_bound, is_clock};
use super::truth::TruthEvent;
use crate::model::result::IntervalResult;
use serde::Serialize;

/// Who a workload is in the attributor's rows: its process (tgid), and the processes its truth
/// counted in (the burst's short-lived children); where the truth named none, its comm.
pub(super) struct Ident {
    pub(super) name: &'static str,
    pub(super) pid: u32,
    pub(super) comm: String,
    /// Sorted; None: not known (then any task of its comm is taken as a child).
    pub(super) processes: Option<Vec<u32>>,
}

/// The workload a task of process `tgid` and name `comm` belongs to. By process, not by name
/// alone: another run's workloads (another `imc validate` beside this one) have the same names.
pub(super) fn owner(idents: &[Ident], tgid: u32, comm: &str) -> Option<usize> {
    idents.iter().position(|i| i.pid == tgid).or_else(|| {
        idents.iter().position(|i| match &i.processes {
            Some(p) => p.binary_search(&tgid).is_ok(),
            None => i.comm == comm,
        })
    })
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct WorkloadRow {
    pub(super) name: &'static str,
    pub(super) pid: u32,
    pub(super) event: String,
    /// Over the whole run.
    pub(super) truth: f64,
    pub(super) attributed: f64,
    /// The largest interval error, and in which interval: what was charged beyond the
    /// truth, or short of it, by more than imc said it placed by time across the interval's
    /// ends or read late (and, short, could not place: its unattributed count), over the
    /// interval's total.
    pub(super) error: f64,
    pub(super) worst_interval: usize,
    /// The largest `|attributed − truth|` over the interval's total, nothing allowed.
    pub(super) error_raw: f64,
}

#[derive(Clone, Debug, Serialize)]
pub(super) struct IntervalRow {
    pub(super) index: usize,
    pub(super) t_start_ns: u64,
    pub(super) t_end_ns: u64,
    /// Steal time in the interval, summed over the vCPUs: allowed in the on-CPU time.
    pub(super) host_stolen_ms: f64,
    pub(super) events: Vec<EventTotals>,
    pub(super) workloads: Vec<CellRow>,
}

#[derive(Clone, Debug, Serialize)]
pub(super) struct EventTotals {
    pub(super) event: String,
    /// The event's counts over every task and idle time (the source's total).
    pub(super) total: f64,
    pub(super) attributed: f64,
    pub(super) unattributed: f64,
}

#[derive(Clone, Debug, Serialize)]
pub(super) struct CellRow {
    pub(super) name: &'static str,
    pub(super) event: String,
    pub(super) truth: f64,
    pub(super) attributed: f64,
    /// What imc placed by time across the interval's ends of what it charged the workload,
    /// and what it read late that may belong here or was charged here from before.
    pub(super) placed_by_time: f64,
    pub(super) error: f64,
    pub(super) error_raw: f64,
}

pub(super) struct Counts {
    pub(super) workloads: Vec<WorkloadRow>,
    pub(super) intervals: Vec<IntervalRow>,
}

/// The intervals judged apart, as ranges of `n` sampled ones: each of the first `whole` on its
/// own, and the last of those with every one after it. The run is `whole` intervals long; what
/// is sampled after them (the workloads' last milliseconds before the freeze lands, then the
/// settle, when they make nothing) is the end of the last one, not intervals of its own: a few
/// counts placed across that end would otherwise be judged against the nearly empty total of
/// a tail that no workload ran through.
pub(super) fn judged_spans(n: usize, whole: usize) -> Vec<std::ops::Range<usize>> {
    let whole = whole.clamp(1, n.max(1));
    let mut spans: Vec<std::ops::Range<usize>> = (0..whole.min(n)).map(|i| i..i + 1).collect();
    if let Some(last) = spans.last_mut() {
        last.end = n;
    }
    spans
}

/// Per interval and workload, the truth (the kernel's count between the interval's ends)
/// against what the attributor charged the workload's tasks; the intervals past the run's
/// `whole` ones are judged with its last ([`judged_spans`]). `stolen(t0, t1)`: the ns the host
/// kept the vCPUs from running between two instants (steal time).
pub(super) fn compare(
    events: &[TruthEvent],
    idents: &[Ident],
    intervals: &[IntervalResult],
    whole: usize,
    truth_at: impl Fn(u64) -> Vec<Vec<f64>>,
    stolen: impl Fn(u64, u64) -> f64,
) -> Counts {
    let mut rows: Vec<WorkloadRow> = idents
        .iter()
        .flat_map(|i| {
            events.iter().map(|e| WorkloadRow {
                name: i.name,
                pid: i.pid,
                event: e.event.clone(),
                ..Default::default()
            })
        })
        .collect();
    let charges: Vec<Charged> = intervals
        .iter()
        .map(|r| charged(events, idents, r))
        .collect();
    let late = late_counts(intervals, &charges);
    let mut out = Vec::new();
    for span in judged_spans(intervals.len(), whole) {
        let (index, sampled) = (span.start, &intervals[span.clone()]);
        let (t_start_ns, t_end_ns) = (sampled[0].t_start_ns, sampled[sampled.len() - 1].t_end_ns);
        let (t0, t1) = (truth_at(t_start_ns), truth_at(t_end_ns));
        let stolen_ns = stolen(t_start_ns, t_end_ns);
        let mut attributed = vec![vec![0.0; events.len()]; idents.len()];
        let mut by_time = vec![vec![0.0; events.len()]; idents.len()];
        let mut totals: Vec<EventTotals> = Vec::new();
        for (r, c) in sampled.iter().zip(&charges[span]) {
            for (sum, add) in attributed
                .iter_mut()
                .flatten()
                .zip(c.attributed.iter().flatten())
            {
                *sum += add;
            }
            for (sum, add) in by_time.iter_mut().flatten().zip(c.by_time.iter().flatten()) {
                *sum += add;
            }
            let t = event_totals(events, r, &c.all);
            if totals.is_empty() {
                totals = t;
            } else {
                for (sum, add) in totals.iter_mut().zip(t) {
                    sum.total += add.total;
                    sum.attributed += add.attributed;
                    sum.unattributed += add.unattributed;
                }
            }
        }
        let mut cells = Vec::new();
        for (w, ident) in idents.iter().enumerate() {
            for (k, e) in events.iter().enumerate() {
                let before = t0.get(w).and_then(|v| v.get(k)).copied().unwrap_or(0.0);
                let after = t1.get(w).and_then(|v| v.get(k)).copied().unwrap_or(0.0);
                let truth = (after - before).max(0.0);
                let a = attributed[w][k];
                let placed = by_time[w][k] + late_allowance(&late, (t_start_ns, t_end_ns), w, k);
                // Stolen time is in imc's on-CPU time of whichever task a vCPU ran, never in
                // the task's own clock.
                let steal = if is_clock(&e.event) { stolen_ns } else { 0.0 };
                let (error, error_raw) = cell_errors(truth, a, placed + steal, &totals[k]);
                let row = &mut rows[w * events.len() + k];
                row.truth += truth;
                row.attributed += a;
                row.error_raw = row.error_raw.max(error_raw);
                if error > row.error {
                    row.error = error;
                    row.worst_interval = index;
                }
                cells.push(CellRow {
                    name: ident.name,
                    event: e.event.clone(),
                    truth: truth.round(),
                    attributed: a,
                    placed_by_time: placed.round(),
                    error,
                    error_raw,
                });
            }
        }
        out.push(IntervalRow {
            index,
            t_start_ns,
            t_end_ns,
            host_stolen_ms: stolen_ns / 1e6,
            events: totals,
            workloads: cells,
        });
    }
    for r in &mut rows {
        r.truth = r.truth.round();
    }
    Counts {
        workloads: rows,
        intervals: out,
    }
}

/// A workload's error in one interval, and the same without the allowances: a count charged to
/// another task, or in another interval, is an error. Two are said, not errors: one imc could
/// not place (a slice after a switch its program did not see, counted in the interval's
/// `unattributed`) is missing from every task, so a workload charged short by no more than that
/// is within; and a count read across the interval's start or end is divided between the two
/// intervals by time (`placed_by_time`: the counts of a slice between two readings have no
/// time of their own), so a workload off by no more than what was so divided is within.
fn cell_errors(truth: f64, attributed: f64, placed: f64, t: &EventTotals) -> (f64, f64) {
    let total = t.total.max(1.0);
    let over = attributed - truth;
    let unsaid = (over - placed)
        .max(-over - t.unattributed - placed)
        .max(0.0);
    (unsaid / total, over.abs() / total)
}

/// One bound: the figure, its limit, what was measured and where.
#[derive(Clone, Debug, Serialize)]
pub struct Bound {
    pub(super) figure: &'static str,
    pub(super) event: String,
    pub(super) bound: f64,
    pub(super) value: Option<f64>,
    pub(super) workload: Option<&'static str>,
    pub(super) interval: Option<usize>,
    /// Null in a dry run: nothing measured yet.
    pub(super) pass: Option<bool>,
}

impl Bound {
    pub(super) fn planned(figure: &'static str, event: &str, bound: f64) -> Bound {
        Bound {
            figure,
            event: event.to_string(),
            bound,
            value: None,
            workload: None,
            interval: None,
            pass: None,
        }
    }

    pub(super) fn measured(
        figure: &'static str,
        event: &str,
        bound: f64,
        value: f64,
        workload: Option<&'static str>,
        interval: Option<usize>,
    ) -> Bound {
        Bound {
            figure,
            event: event.to_string(),
            bound,
            value: Some(value),
            workload,
            interval,
            pass: Some(value <= bound),
        }
    }

    pub(super) fn text(&self) -> String {
        let what = match self.figure {
            "error" => format!(
                "every workload's error ≤ {} of the interval's {} (off by no more than imc \
                 placed by time across the interval's ends or read late{}, or charged short by no more than \
                 it also could not place, within)",
                self.bound,
                self.event,
                if is_clock(&self.event) {
                    " and the host stole from the vCPUs"
                } else {
                    ""
                }
            ),
            "zero-charge" => format!(
                "a workload that makes no {} is charged ≤ {} over the run",
                self.event, self.bound
            ),
            "conservation" => format!(
                "attributed + unattributed {} = the total, every interval (off by ≤ 1 a task)",
                self.event
            ),
            "mbm" => format!("imc's bytes within {} of resctrl MBM's", self.bound),
            "stacks" => format!(
                "of a workload's {} charged to resolved stacks, ≤ {} outside its own function",
                self.event,
                trim_float(self.bound)
            ),
            "truth-complete" => {
                "no truth sample lost or throttled (else rerun with less load)".to_string()
            }
            other => other.to_string(),
        };
        let Some(v) = self.value else { return what };
        let mut at = Vec::new();
        if let Some(w) = self.workload {
            at.push(w.to_string());
        }
        if let Some(i) = self.interval {
            at.push(format!("interval {i}"));
        }
        let at = if at.is_empty() {
            String::new()
        } else {
            format!(" ({})", at.join(", "))
        };
        format!(
            "{}: worst {}{at}{}",
            what,
            trim_float(v),
            if self.pass == Some(false) {
                " OUTSIDE"
            } else {
                ""
            }
        )
    }
}

pub(super) fn trim_float(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.4}")
    }
}

pub(super) fn count_bounds(events: &[TruthEvent], c: &Counts) -> Vec<Bound> {
    let mut out = Vec::new();
    for e in events {
        let rows = || c.workloads.iter().filter(|r| r.event == e.event);
        let worst = rows().max_by(|a, b| a.error.total_cmp(&b.error));
        out.push(Bound::measured(
            "error",
            &e.event,
            error_bound(&e.event),
            worst.map_or(0.0, |r| r.error),
            worst.map(|r| r.name),
            worst.map(|r| r.worst_interval),
        ));
        let zero = rows()
            .filter(|r| r.truth == 0.0)
            .max_by(|a, b| a.attributed.total_cmp(&b.attributed));
        if let Some(z) = zero {
            out.push(Bound::measured(
                "zero-charge",
                &e.event,
                ZERO_CHARGE_BOUND,
                z.attributed,
                Some(z.name),
                None,
            ));
        }
        // Off by at most one count a task (each task's figure is rounded) and one for idle.
        let mut worst: Option<(f64, usize)> = None;
        for iv in &c.intervals {
            let Some(t) = iv.events.iter().find(|t| t.event == e.event) else {
                continue;
            };
            let rows = (iv.workloads.len() + 1) as f64;
            let off = ((t.attributed + t.unattributed - t.total).abs() - rows).max(0.0);
            if worst.is_none_or(|(w, _)| off > w) {
                worst = Some((off, iv.index));
            }
        }
        if let Some((off, i)) = worst {
            out.push(Bound::measured(
                "conservation",
                &e.event,
                0.0,
                off,
                None,
                Some(i),
            ));
        }
    }
    out
}

/// What one interval charged: per workload and event, its tasks' counts, how much of them it
/// placed by time, and what it read late (see
/// [`TaskRow::placed_late`](crate::model::result::TaskRow::placed_late): the count and the
/// earliest start of its spans); per event, every task's counts.
struct Charged {
    attributed: Vec<Vec<f64>>,
    by_time: Vec<Vec<f64>>,
    late: Vec<Vec<(f64, u64)>>,
    all: Vec<f64>,
}

fn charged(events: &[TruthEvent], idents: &[Ident], r: &IntervalResult) -> Charged {
    let per_cell = |v| vec![vec![v; events.len()]; idents.len()];
    let mut c = Charged {
        attributed: per_cell(0.0),
        by_time: per_cell(0.0),
        late: vec![vec![(0.0, u64::MAX); events.len()]; idents.len()],
        all: vec![0.0; events.len()],
    };
    for task in &r.tasks {
        let who = owner(idents, task.tgid, &task.comm);
        for (k, e) in events.iter().enumerate() {
            let v = task.values.get(&e.event).copied().unwrap_or(0.0);
            c.all[k] += v;
            let Some(w) = who else {
                continue;
            };
            c.attributed[w][k] += v;
            c.by_time[w][k] += task.placed_by_time.get(&e.event).copied().unwrap_or(0.0);
            if let Some(&(n, since)) = task.placed_late.get(&e.event) {
                let (sum, first) = &mut c.late[w][k];
                *sum += n;
                *first = (*first).min(since);
            }
        }
    }
    c
}

/// A count charged late to workload `w`'s event `k`: it may belong anywhere from `since` to
/// `until`, the end of the interval it was charged in.
struct LateCount {
    w: usize,
    k: usize,
    count: f64,
    since: u64,
    until: u64,
}

/// Every interval's late counts (few: a CPU reports late only when the host took it away).
fn late_counts(intervals: &[IntervalResult], charges: &[Charged]) -> Vec<LateCount> {
    let mut out = Vec::new();
    for (r, c) in intervals.iter().zip(charges) {
        for (w, cells) in c.late.iter().enumerate() {
            for (k, &(count, since)) in cells.iter().enumerate() {
                if count > 0.0 {
                    out.push(LateCount {
                        w,
                        k,
                        count,
                        since,
                        until: r.t_end_ns,
                    });
                }
            }
        }
    }
    out
}

/// Of workload `w`'s late counts of event `k`, what may be misplaced for the judged span
/// `[a, b)`: each is allowed in every span its range meets, unless it lies wholly within this
/// one.
fn late_allowance(late: &[LateCount], (a, b): (u64, u64), w: usize, k: usize) -> f64 {
    late.iter()
        .filter(|l| l.w == w && l.k == k && l.since < b && l.until > a)
        .filter(|l| !(l.since >= a && l.until <= b))
        .map(|l| l.count)
        .sum()
}

/// Per event the interval's total (the source's), what tasks took (`all`) and what nobody did.
fn event_totals(events: &[TruthEvent], r: &IntervalResult, all: &[f64]) -> Vec<EventTotals> {
    let mut totals = Vec::new();
    for (k, e) in events.iter().enumerate() {
        let slot_sum = |f: fn(&crate::model::result::PackageRow) -> &Vec<f64>| -> f64 {
            r.packages.iter().filter_map(|p| f(p).get(e.slot)).sum()
        };
        let unattributed = slot_sum(|p| &p.unattributed_counts);
        let counted = slot_sum(|p| &p.slot_counts);
        // Per-CPU counters need not be summed into package rows: then the total is what the
        // tasks and the idle spans took.
        let total = if counted > 0.0 {
            counted
        } else {
            all[k] + unattributed
        };
        totals.push(EventTotals {
            event: e.event.clone(),
            total,
            attributed: all[k],
            unattributed,
        });
    }
    totals
}

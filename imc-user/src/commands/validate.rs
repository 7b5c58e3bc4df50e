//! `imc validate`: known workloads of imc's own ([`workloads`]), each its own process, sampled
//! through the plan and the sampling loop `imc top` runs (aggregated records, or per switch
//! with `--precise`), and what imc charged each compared with the truth:
//!
//! - counts, on every machine: each per-CPU event of the plan (a weight, or a stand-in such as
//!   page-faults) counted by the kernel for each workload alone ([`truth`]); per workload and
//!   interval, the first included, `error = |attributed − truth| / the interval's counts of
//!   the event over all tasks`; conservation (attributed + unattributed = the event's total)
//!   every interval. Load elsewhere on the machine changes neither side: the truth is per task.
//! - bytes, where a memory controller is counted: each streaming kernel's expected traffic
//!   against what the weights saw (the fidelity f) and what imc charged.
//! - resctrl MBM, where it is mounted: a monitor group per workload ([`mbm`]).
//!
//! Exit 0 within every bound, 1 outside one (the figure named on stderr), 2 bad input.
mod mbm;
mod truth;
mod workloads;

use super::sampling::{block_on, discover, select_for};
use crate::cli::{GlobalArgs, ValidateArgs};
use crate::discovery::resctrl::{self, Resctrl};
use crate::error::{CliError, CliResult, ErrorKind};
use crate::model::Direction;
use crate::model::result::IntervalResult;
use crate::pipeline::{LoopOptions, Sink, sample_loop};
use crate::plan::{Command, Plan};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use truth::{Truth, TruthEvent};
use workloads::{KINDS, Kind, Workloads};

/// A task's error bound for an event: a twentieth of a tick's time is the clock's own
/// resolution, so on-CPU time gets twice the counts' bound.
pub fn error_bound(event: &str) -> f64 {
    if matches!(event, "cpu-clock" | "task-clock") {
        0.02
    } else {
        0.01
    }
}

/// What a workload that never makes an event may be charged of it over a whole run.
pub const ZERO_CHARGE_BOUND: f64 = 10.0;
/// MBM against imc's bytes: the kernel's resctrl selftest accepts 8%
/// (tools/testing/selftests/resctrl/mbm_test.c, MAX_DIFF_PERCENT).
pub const MBM_BOUND: f64 = 0.08;

pub fn run(global: &GlobalArgs, args: &ValidateArgs) -> CliResult<ExitCode> {
    if let Some(kind) = &args.workload {
        return workloads::run_workload(kind)
            .map(|()| ExitCode::SUCCESS)
            .map_err(|e| CliError::runtime_because(format!("workload {kind}"), e));
    }
    let found = discover(global)?;
    let sel = select_for(
        global,
        &args.sampler,
        &found,
        Command::Top,
        args.interval_ms,
    )?;
    let events = truth::truth_events(&sel.plan);
    let kinds: Vec<&'static Kind> = KINDS.iter().collect();
    let bytes = BytesPlan::of(&sel.plan);
    let rdt = resctrl::find(&global.root);
    if args.sampler.dry_run {
        let dry = DryRun::new(args, &sel.plan, &events, &kinds, &bytes, &rdt);
        return print(&dry, args.json, render_dry);
    }
    if args.save && !bytes.real {
        return Err(CliError::bad_input(format!(
            "--save: {}: there is no fidelity to save on this machine",
            bytes.reason
        )));
    }
    if events.is_empty() {
        return Err(CliError::bad_input(
            "validate: the plan counts nothing per CPU, so no task's truth can be counted: \
             leave out -e/--weight, or give a per-CPU event",
        ));
    }
    let report = run_live(
        global, args, &sel.plan, &found, &events, &kinds, &bytes, &rdt,
    )?;
    print(&report, args.json, render_report)?;
    if args.save
        && let Some(f) = &report.fidelity
    {
        save_fidelity(f)?;
    }
    match report.bounds.iter().find(|b| b.pass == Some(false)) {
        None => Ok(ExitCode::SUCCESS),
        Some(b) => Err(CliError::runtime(format!(
            "validate: outside its bounds: {}",
            b.text()
        ))),
    }
}

fn print<T: Serialize>(v: &T, json: bool, text: fn(&T) -> String) -> CliResult<ExitCode> {
    let out = if json {
        serde_json::to_string(v).map_err(|e| CliError::runtime_because("cannot encode JSON", e))?
            + "\n"
    } else {
        text(v)
    };
    crate::error::write_stdout(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// Whether the plan counts the controller's bytes, and why not.
struct BytesPlan {
    real: bool,
    reason: String,
}

impl BytesPlan {
    fn of(plan: &Plan) -> BytesPlan {
        let specs = crate::sampler::from_plan::slot_specs(plan);
        let real = crate::model::measures_bytes(&specs) && !plan.source.starts_with("proxy:");
        BytesPlan {
            real,
            reason: if real {
                format!("the memory controller is counted ({})", plan.source)
            } else {
                format!(
                    "no memory-controller bytes here (source {}): expected bytes and fidelity are not measured",
                    plan.source
                )
            },
        }
    }
}

/// One section that is measured only on some machines: whether, and why not.
#[derive(Clone, Debug, Serialize)]
struct Availability {
    available: bool,
    reason: String,
}

fn mbm_availability(rdt: &Resctrl) -> Availability {
    match rdt {
        Resctrl::Mbm { dir, features } => Availability {
            available: true,
            reason: format!("resctrl at {} ({})", dir.display(), features.join(", ")),
        },
        Resctrl::Absent(why) => Availability {
            available: false,
            reason: why.clone(),
        },
    }
}

/// The records the plan chose (`aggregated`, or `per-switch` with `--precise`).
fn records(plan: &Plan) -> &'static str {
    plan.records.map_or("none", crate::plan::Records::as_str)
}

// ---- --dry-run -----------------------------------------------------------------------------

#[derive(Serialize)]
struct DryWorkload {
    name: &'static str,
    what: &'static str,
    /// Expected DRAM bytes per pass: read, write.
    expected_bytes_per_pass: Option<[f64; 2]>,
}

#[derive(Serialize)]
struct DryEvent {
    event: String,
    encodings: Vec<crate::model::Encoded>,
}

#[derive(Serialize)]
struct DryRun<'a> {
    command: &'static str,
    source: &'a str,
    records: &'static str,
    interval_ms: u64,
    duration_s: f64,
    workloads: Vec<DryWorkload>,
    truth: Vec<DryEvent>,
    bounds: Vec<Bound>,
    bytes: Availability,
    mbm: Availability,
    plan: &'a Plan,
}

impl<'a> DryRun<'a> {
    fn new(
        args: &ValidateArgs,
        plan: &'a Plan,
        events: &[TruthEvent],
        kinds: &[&'static Kind],
        bytes: &BytesPlan,
        rdt: &Resctrl,
    ) -> DryRun<'a> {
        let mut bounds = Vec::new();
        for e in events {
            bounds.push(Bound::planned("error", &e.event, error_bound(&e.event)));
            bounds.push(Bound::planned("zero-charge", &e.event, ZERO_CHARGE_BOUND));
            bounds.push(Bound::planned("conservation", &e.event, 0.0));
        }
        let mbm = mbm_availability(rdt);
        if mbm.available && bytes.real {
            bounds.push(Bound::planned("mbm", "bytes", MBM_BOUND));
        }
        DryRun {
            command: "validate",
            source: &plan.source,
            records: records(plan),
            interval_ms: args.interval_ms,
            duration_s: args.duration,
            workloads: kinds
                .iter()
                .map(|k| DryWorkload {
                    name: k.name,
                    what: k.what,
                    expected_bytes_per_pass: k.per_pass.map(|(r, w)| [r, w]),
                })
                .collect(),
            truth: events
                .iter()
                .map(|e| DryEvent {
                    event: e.event.clone(),
                    encodings: e.encodings.clone(),
                })
                .collect(),
            bounds,
            bytes: Availability {
                available: bytes.real,
                reason: bytes.reason.clone(),
            },
            mbm,
            plan,
        }
    }
}

fn render_dry(d: &DryRun<'_>) -> String {
    let mut s = format!(
        "imc validate would run {} workloads for {} s, {} records, {} ms intervals, source {}\n",
        d.workloads.len(),
        d.duration_s,
        d.records,
        d.interval_ms,
        d.source
    );
    for w in &d.workloads {
        s += &format!("  {:<10} {}\n", w.name, w.what);
    }
    let truth: Vec<&str> = d.truth.iter().map(|e| e.event.as_str()).collect();
    s += &format!(
        "truth: the kernel's count per workload of {}\n",
        if truth.is_empty() {
            "nothing (the plan counts nothing per CPU)".to_string()
        } else {
            truth.join(", ")
        }
    );
    s += "bounds:\n";
    for b in &d.bounds {
        s += &format!("  {}\n", b.text());
    }
    s += &format!("bytes: {}\nmbm: {}\n", d.bytes.reason, d.mbm.reason);
    s
}

// ---- the live run --------------------------------------------------------------------------

/// How long the sampler runs on after the workloads are frozen at --duration: every count they
/// made is in a record by then (a tick or a switch on every CPU), so the last interval is whole.
const SETTLE: Duration = Duration::from_millis(120);

/// The loop's sink: keeps every interval, lets the workloads go once the sampler runs, freezes
/// them (SIGSTOP) at --duration and ends the loop once their last counts are drained.
struct Collect<'a> {
    workloads: &'a mut Workloads,
    groups: Option<&'a mut mbm::Groups>,
    intervals: Vec<IntervalResult>,
    duration: Duration,
    went: Option<std::time::Instant>,
    frozen: Option<std::time::Instant>,
}

impl Sink for Collect<'_> {
    fn interval(&mut self, r: &IntervalResult) -> std::io::Result<bool> {
        self.intervals.push(r.clone());
        Ok(true)
    }

    fn started(&mut self) {
        if let Some(g) = self.groups.as_deref_mut() {
            g.start();
        }
        self.went = Some(std::time::Instant::now());
        self.workloads.go();
    }

    fn drained(&mut self, _records: usize, _took: Duration) {
        if self.frozen.is_none() && self.went.is_some_and(|t| t.elapsed() >= self.duration) {
            self.workloads.signal(libc::SIGSTOP);
            self.frozen = Some(std::time::Instant::now());
        }
    }

    fn stop_requested(&self) -> bool {
        self.frozen.is_some_and(|t| t.elapsed() >= SETTLE) || crate::sys::process::stop_signalled()
    }
}

#[allow(clippy::too_many_arguments)]
fn run_live(
    global: &GlobalArgs,
    args: &ValidateArgs,
    plan: &Plan,
    found: &crate::model::Discovery,
    events: &[TruthEvent],
    kinds: &[&'static Kind],
    bytes: &BytesPlan,
    rdt: &Resctrl,
) -> CliResult<Report> {
    let exe = PathBuf::from("/proc/self/exe");
    eprintln!(
        "imc: validate: {} workloads for {} s at {} ms intervals ({} records, {})",
        kinds.len(),
        args.duration,
        args.interval_ms,
        records(plan),
        plan.source
    );
    // From here an INT or TERM ends the run the way its end would: workloads stopped, groups
    // removed, what was measured reported.
    crate::sys::process::catch_stop_signals()
        .map_err(|e| CliError::runtime_because("validate: signal handlers", e))?;
    let mut mbm_state = mbm_availability(rdt);
    if let Resctrl::Mbm { dir, .. } = rdt {
        let n = mbm::remove_stale(dir, crate::sys::process::alive);
        if n > 0 {
            eprintln!("imc: validate: removed {n} monitor group(s) left by a killed run");
        }
    }
    let mut wl = Workloads::start(&exe, kinds)
        .map_err(|e| CliError::runtime_because("validate: starting the workloads", e))?;
    let pids: Vec<u32> = wl.running.iter().map(|r| r.pid).collect();
    let mut groups = match rdt {
        Resctrl::Mbm { dir, features } => {
            let named: Vec<(&str, u32)> = wl.running.iter().map(|r| (r.kind.name, r.pid)).collect();
            match mbm::Groups::create(dir, features, std::process::id(), &named) {
                Ok(g) => Some(g),
                Err(why) => {
                    eprintln!("imc: validate: MBM not compared: {why}");
                    mbm_state = Availability {
                        available: false,
                        reason: why,
                    };
                    None
                }
            }
        }
        Resctrl::Absent(_) => None,
    };
    let mut truth = Truth::open(
        Arc::new(crate::sys::perf::RealPerf),
        &pids,
        &found.topology.online,
        events,
    )
    .map_err(|e| {
        // No privileges is the user's to fix (exit 2), like any bad input.
        let denied = matches!(e.source.raw_os_error(), Some(libc::EACCES | libc::EPERM));
        CliError::new(ErrorKind::bad_input_if(denied), e).context("validate")
    })?;
    let mut sink = Collect {
        workloads: &mut wl,
        groups: groups.as_mut(),
        intervals: Vec::new(),
        duration: crate::cli::seconds_duration(args.duration),
        went: None,
        frozen: None,
    };
    let opts = LoopOptions {
        interval_ms: args.interval_ms,
        // A bound in case the loop is never woken to freeze the workloads.
        duration: Some(crate::cli::seconds_duration(args.duration + 10.0)),
        command: &[],
        per_channel: false,
        verbose: global.verbose,
        // Validate compares counts with their truth; utilisation is not one of them.
        peaks: Vec::new(),
    };
    let ran = block_on(async { Ok(sample_loop(&opts, found, plan, &mut sink).await?) });
    let intervals = std::mem::take(&mut sink.intervals);
    let mbm_bytes = groups.as_ref().map(|g| g.bytes());
    truth.stop();
    let passes = wl.stop(Duration::from_millis(500));
    drop(groups);
    ran?;
    eprintln!(
        "imc: validate: {} intervals sampled; comparing with the truth",
        intervals.len()
    );
    let idents: Vec<Ident> = wl
        .running
        .iter()
        .map(|r| Ident {
            name: r.kind.name,
            pid: r.pid,
            comm: r.kind.comm(),
        })
        .collect();
    let counts = compare(events, &idents, &intervals, |t| truth.at(t));
    let mut bounds = count_bounds(events, &counts);
    let byte_rows = bytes
        .real
        .then(|| byte_rows(plan, events, kinds, &idents, &passes, &intervals, &truth));
    let fidelity = byte_rows.as_ref().map(|b| fidelity_of(b));
    let mbm_rows = mbm_bytes.map(|m| mbm_rows(&idents, &intervals, &m));
    if !bytes.real && mbm_rows.is_some() {
        mbm_state.reason += ": MBM's bytes are shown, not compared (imc counts no bytes here)";
    }
    if let Some(rows) = mbm_rows.as_ref().filter(|_| bytes.real) {
        for r in rows {
            if let Some(err) = r.error {
                bounds.push(Bound::measured(
                    "mbm",
                    "bytes",
                    MBM_BOUND,
                    err,
                    Some(r.name),
                    None,
                ));
            }
        }
    }
    // A truth short of samples is no truth: said as a figure of its own.
    bounds.push(Bound::measured(
        "truth-complete",
        "samples lost",
        0.0,
        truth.lost() as f64,
        None,
        None,
    ));
    let pass = bounds.iter().all(|b| b.pass != Some(false));
    Ok(Report {
        source: plan.source.clone(),
        records: records(plan),
        interval_ms: args.interval_ms,
        duration_s: args.duration,
        truth_lost: truth.lost(),
        workloads: counts.workloads,
        intervals: counts.intervals,
        bytes: BytesSection {
            available: bytes.real,
            reason: bytes.reason.clone(),
            kernels: byte_rows.unwrap_or_default(),
        },
        mbm: MbmSection {
            available: mbm_rows.is_some(),
            reason: mbm_state.reason,
            workloads: mbm_rows.unwrap_or_default(),
        },
        fidelity,
        bounds,
        pass,
    })
}

/// Who a workload is in the attributor's rows: its process (tgid), or its comm (the burst's
/// short-lived children, forked under its name).
struct Ident {
    name: &'static str,
    pid: u32,
    comm: String,
}

fn owner(idents: &[Ident], tgid: u32, comm: &str) -> Option<usize> {
    idents
        .iter()
        .position(|i| i.pid == tgid)
        .or_else(|| idents.iter().position(|i| i.comm == comm))
}

// ---- comparing counts ----------------------------------------------------------------------

#[derive(Clone, Debug, Default, Serialize)]
pub struct WorkloadRow {
    name: &'static str,
    pid: u32,
    event: String,
    /// Over the whole run.
    truth: f64,
    attributed: f64,
    /// The largest interval error, and in which interval.
    error: f64,
    worst_interval: usize,
}

#[derive(Clone, Debug, Serialize)]
struct IntervalRow {
    index: usize,
    t_start_ns: u64,
    t_end_ns: u64,
    events: Vec<EventTotals>,
    workloads: Vec<CellRow>,
}

#[derive(Clone, Debug, Serialize)]
struct EventTotals {
    event: String,
    /// The event's counts over every task and idle time (the source's total).
    total: f64,
    attributed: f64,
    unattributed: f64,
}

#[derive(Clone, Debug, Serialize)]
struct CellRow {
    name: &'static str,
    event: String,
    truth: f64,
    attributed: f64,
    error: f64,
}

struct Counts {
    workloads: Vec<WorkloadRow>,
    intervals: Vec<IntervalRow>,
}

/// Per interval and workload, the truth (the kernel's count between the interval's ends)
/// against what the attributor charged the workload's tasks.
fn compare(
    events: &[TruthEvent],
    idents: &[Ident],
    intervals: &[IntervalResult],
    truth_at: impl Fn(u64) -> Vec<Vec<f64>>,
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
    let mut out = Vec::new();
    for (index, r) in intervals.iter().enumerate() {
        let (t0, t1) = (truth_at(r.t_start_ns), truth_at(r.t_end_ns));
        let mut attributed = vec![vec![0.0; events.len()]; idents.len()];
        let mut all = vec![0.0; events.len()];
        for task in &r.tasks {
            let who = owner(idents, task.tgid, &task.comm);
            for (k, e) in events.iter().enumerate() {
                let v = task.values.get(&e.event).copied().unwrap_or(0.0);
                all[k] += v;
                if let Some(w) = who {
                    attributed[w][k] += v;
                }
            }
        }
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
        let mut cells = Vec::new();
        for (w, ident) in idents.iter().enumerate() {
            for (k, e) in events.iter().enumerate() {
                let before = t0.get(w).and_then(|v| v.get(k)).copied().unwrap_or(0.0);
                let after = t1.get(w).and_then(|v| v.get(k)).copied().unwrap_or(0.0);
                let truth = (after - before).max(0.0);
                let a = attributed[w][k];
                let error = (a - truth).abs() / totals[k].total.max(1.0);
                let row = &mut rows[w * events.len() + k];
                row.truth += truth;
                row.attributed += a;
                if error > row.error {
                    row.error = error;
                    row.worst_interval = index;
                }
                cells.push(CellRow {
                    name: ident.name,
                    event: e.event.clone(),
                    truth: truth.round(),
                    attributed: a,
                    error,
                });
            }
        }
        out.push(IntervalRow {
            index,
            t_start_ns: r.t_start_ns,
            t_end_ns: r.t_end_ns,
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

/// One bound: the figure, its limit, what was measured and where.
#[derive(Clone, Debug, Serialize)]
pub struct Bound {
    figure: &'static str,
    event: String,
    bound: f64,
    value: Option<f64>,
    workload: Option<&'static str>,
    interval: Option<usize>,
    /// Null in a dry run: nothing measured yet.
    pass: Option<bool>,
}

impl Bound {
    fn planned(figure: &'static str, event: &str, bound: f64) -> Bound {
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

    fn measured(
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

    fn text(&self) -> String {
        let what = match self.figure {
            "error" => format!(
                "every workload's error ≤ {} of the interval's {}",
                self.bound, self.event
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

fn trim_float(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.4}")
    }
}

fn count_bounds(events: &[TruthEvent], c: &Counts) -> Vec<Bound> {
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

// ---- bytes, fidelity and MBM -----------------------------------------------------------------

#[derive(Clone, Debug, Default, Serialize)]
struct KernelBytes {
    name: &'static str,
    passes: Option<u64>,
    expected_read: f64,
    expected_write: f64,
    /// What imc charged the workload, by direction (total: controllers that do not split).
    imc_read: f64,
    imc_write: f64,
    imc_total: f64,
    /// What each weight event saw of it: the truth count × the event's bytes per count.
    weights: BTreeMap<String, f64>,
    /// The expected bytes of the direction each weight event weighs.
    expected_for: BTreeMap<String, f64>,
}

#[derive(Clone, Debug, Default, Serialize)]
struct BytesSection {
    available: bool,
    reason: String,
    kernels: Vec<KernelBytes>,
}

#[derive(Clone, Debug, Serialize)]
struct Fidelity {
    /// f per weight event: the bytes it saw over the bytes the kernels moved in its direction.
    weights: BTreeMap<String, f64>,
    /// f per weight event and kernel.
    per_kernel: BTreeMap<String, BTreeMap<String, f64>>,
    /// The error the spread of f implies: the largest |f_kernel / f − 1|.
    bound: f64,
}

/// The direction a weight event weighs, from the plan's counter.
fn weight_direction(plan: &Plan, event: &str) -> Option<Direction> {
    plan.counters
        .iter()
        .find(|c| c.value_key == event || c.event == event)
        .and_then(|c| c.direction)
}

fn byte_rows(
    plan: &Plan,
    events: &[TruthEvent],
    kinds: &[&'static Kind],
    idents: &[Ident],
    passes: &[Option<u64>],
    intervals: &[IntervalResult],
    truth: &Truth,
) -> Vec<KernelBytes> {
    let (first, last) = match (intervals.first(), intervals.last()) {
        (Some(a), Some(b)) => (a.t_start_ns, b.t_end_ns),
        _ => return Vec::new(),
    };
    let (t0, t1) = (truth.at(first), truth.at(last));
    let mut out = Vec::new();
    for (w, kind) in kinds.iter().enumerate() {
        let Some((r, wr)) = kind.per_pass else {
            continue;
        };
        let n = passes.get(w).copied().flatten();
        let mut row = KernelBytes {
            name: kind.name,
            passes: n,
            expected_read: r * n.unwrap_or(0) as f64,
            expected_write: wr * n.unwrap_or(0) as f64,
            ..Default::default()
        };
        for iv in intervals {
            for t in iv
                .tasks
                .iter()
                .filter(|t| owner(idents, t.tgid, &t.comm) == Some(w))
            {
                row.imc_read += t.read_bytes as f64;
                row.imc_write += t.write_bytes as f64;
                row.imc_total += t.total_bytes as f64;
            }
        }
        for (k, e) in events.iter().enumerate() {
            if matches!(e.event.as_str(), "cpu-clock" | "task-clock") {
                continue;
            }
            // A weight counts lines (64 bytes) unless its alias says otherwise.
            let bpc = e
                .encodings
                .first()
                .and_then(|x| x.bytes_per_count)
                .unwrap_or(64.0);
            let d = (t1[w][k] - t0[w][k]).max(0.0);
            row.weights.insert(e.event.clone(), d * bpc);
            let expected = match weight_direction(plan, &e.event) {
                Some(Direction::Read) => row.expected_read,
                Some(Direction::Write) => row.expected_write,
                _ => row.expected_read + row.expected_write,
            };
            row.expected_for.insert(e.event.clone(), expected);
        }
        out.push(row);
    }
    out
}

fn fidelity_of(rows: &[KernelBytes]) -> Fidelity {
    let mut weights = BTreeMap::new();
    let mut per_kernel: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    let events: Vec<String> = rows
        .iter()
        .flat_map(|r| r.weights.keys().cloned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for e in &events {
        let (mut saw, mut moved) = (0.0, 0.0);
        for r in rows {
            let expected = r.expected_for.get(e).copied().unwrap_or(0.0);
            let s = r.weights.get(e).copied().unwrap_or(0.0);
            saw += s;
            moved += expected;
            if expected > 0.0 {
                per_kernel
                    .entry(e.clone())
                    .or_default()
                    .insert(r.name.to_string(), s / expected);
            }
        }
        if moved > 0.0 {
            weights.insert(e.clone(), saw / moved);
        }
    }
    let bound = per_kernel
        .iter()
        .filter_map(|(e, ks)| {
            let f = *weights.get(e)?;
            (f > 0.0).then(|| ks.values().map(|k| (k / f - 1.0).abs()).fold(0.0, f64::max))
        })
        .fold(0.0, f64::max);
    Fidelity {
        weights,
        per_kernel,
        bound,
    }
}

/// `--save`: `{"weights": {"<event>": f}}` written whole (a temporary file renamed over it).
fn save_fidelity(f: &Fidelity) -> CliResult<()> {
    let path = crate::settings::get().fidelity_path();
    crate::plan::fidelity::save(&path, &f.weights)
        .map_err(|e| CliError::runtime_because(format!("--save: writing {}", path.display()), e))?;
    eprintln!("imc: validate: fidelity saved in {}", path.display());
    Ok(())
}

#[derive(Clone, Debug, Serialize)]
struct MbmRow {
    name: &'static str,
    mbm_bytes: Option<u64>,
    imc_bytes: u64,
    /// |imc − MBM| / MBM.
    error: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize)]
struct MbmSection {
    available: bool,
    reason: String,
    workloads: Vec<MbmRow>,
}

fn mbm_rows(idents: &[Ident], intervals: &[IntervalResult], mbm: &[Option<u64>]) -> Vec<MbmRow> {
    idents
        .iter()
        .enumerate()
        .map(|(w, i)| {
            let imc: u64 = intervals
                .iter()
                .flat_map(|iv| iv.tasks.iter())
                .filter(|t| owner(idents, t.tgid, &t.comm) == Some(w))
                .map(|t| t.bytes())
                .sum();
            let m = mbm.get(w).copied().flatten();
            MbmRow {
                name: i.name,
                mbm_bytes: m,
                imc_bytes: imc,
                // Under a megabyte either way is noise of the counters' granularity.
                error: m
                    .filter(|&m| m.max(imc) >= 1 << 20)
                    .map(|m| (imc as f64 - m as f64).abs() / (m.max(1)) as f64),
            }
        })
        .collect()
}

// ---- the report ------------------------------------------------------------------------------

#[derive(Serialize)]
struct Report {
    source: String,
    records: &'static str,
    interval_ms: u64,
    duration_s: f64,
    /// Truth samples the kernel lost or throttled (0: the truth is exact).
    truth_lost: u64,
    workloads: Vec<WorkloadRow>,
    intervals: Vec<IntervalRow>,
    bytes: BytesSection,
    mbm: MbmSection,
    fidelity: Option<Fidelity>,
    bounds: Vec<Bound>,
    pass: bool,
}

fn render_report(r: &Report) -> String {
    let mut s = format!(
        "imc validate: {} intervals of {} ms, {} records, source {}\n",
        r.intervals.len(),
        r.interval_ms,
        r.records,
        r.source
    );
    s += &format!(
        "{:<10} {:>8}  {:<16} {:>12} {:>12} {:>10} {:>9}\n",
        "WORKLOAD", "PID", "EVENT", "TRUTH", "ATTRIBUTED", "WORST ERR", "INTERVAL"
    );
    for w in &r.workloads {
        s += &format!(
            "{:<10} {:>8}  {:<16} {:>12.0} {:>12.0} {:>10.4} {:>9}\n",
            w.name, w.pid, w.event, w.truth, w.attributed, w.error, w.worst_interval
        );
    }
    s += "bounds:\n";
    for b in &r.bounds {
        let mark = if b.pass == Some(false) { "BAD" } else { "ok " };
        s += &format!("  {mark} {}\n", b.text());
    }
    s += &format!("bytes: {}\n", r.bytes.reason);
    for k in &r.bytes.kernels {
        s += &format!(
            "  {:<10} passes {:>5}  expected {:.0} MB  imc {:.0} MB\n",
            k.name,
            k.passes.map_or("?".into(), |p| p.to_string()),
            (k.expected_read + k.expected_write) / 1e6,
            (k.imc_read + k.imc_write + k.imc_total) / 1e6
        );
    }
    if let Some(f) = &r.fidelity {
        for (e, v) in &f.weights {
            s += &format!("  fidelity of {e}: {v:.3}\n");
        }
        s += &format!("  error bound the fidelity implies: {:.3}\n", f.bound);
    }
    s += &format!("mbm: {}\n", r.mbm.reason);
    s += if r.pass {
        "within every bound\n"
    } else {
        "OUTSIDE a bound\n"
    };
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::result::{PackageRow, TaskRow};

    fn ev(name: &str) -> TruthEvent {
        TruthEvent {
            event: name.into(),
            slot: 0,
            encodings: Vec::new(),
        }
    }

    fn task(tgid: u32, comm: &str, v: f64) -> TaskRow {
        TaskRow {
            pid: tgid,
            tgid,
            comm: comm.into(),
            values: [("page-faults".to_string(), v)].into(),
            ..Default::default()
        }
    }

    fn interval(t0: u64, t1: u64, tasks: Vec<TaskRow>, total: f64, idle: f64) -> IntervalResult {
        IntervalResult {
            t_start_ns: t0,
            t_end_ns: t1,
            packages: vec![PackageRow {
                slot_counts: vec![total],
                unattributed_counts: vec![idle],
                ..Default::default()
            }],
            tasks,
            ..Default::default()
        }
    }

    fn idents() -> Vec<Ident> {
        vec![
            Ident {
                name: "toucher",
                pid: 10,
                comm: "imcv-toucher".into(),
            },
            Ident {
                name: "burst",
                pid: 20,
                comm: "imcv-burst".into(),
            },
            Ident {
                name: "spinner",
                pid: 30,
                comm: "imcv-spinner".into(),
            },
        ]
    }

    /// Truth: toucher 1000 a second, burst 100 a second, spinner none (t in seconds × 1e9).
    fn truth_at(t: u64) -> Vec<Vec<f64>> {
        let s = t as f64 / 1e9;
        vec![vec![1000.0 * s], vec![100.0 * s], vec![0.0]]
    }

    #[test]
    fn errors_are_per_interval_over_its_total_and_children_count_by_comm() {
        let events = [ev("page-faults")];
        let intervals = vec![
            // Interval 0 charges the spinner 20 faults the toucher made.
            interval(
                0,
                1_000_000_000,
                vec![
                    task(10, "imcv-toucher", 980.0),
                    task(21, "imcv-burst", 60.0),
                    task(20, "imcv-burst", 40.0),
                    task(30, "imcv-spinner", 20.0),
                    task(99, "python3", 900.0),
                ],
                2000.0,
                0.0,
            ),
            interval(
                1_000_000_000,
                2_000_000_000,
                vec![
                    task(10, "imcv-toucher", 1000.0),
                    task(20, "imcv-burst", 100.0),
                ],
                1500.0,
                400.0,
            ),
        ];
        let c = compare(&events, &idents(), &intervals, truth_at);
        let toucher = &c.workloads[0];
        assert_eq!((toucher.truth, toucher.attributed), (2000.0, 1980.0));
        assert!((toucher.error - 20.0 / 2000.0).abs() < 1e-12);
        assert_eq!(toucher.worst_interval, 0);
        let burst = &c.workloads[1];
        assert_eq!(
            (burst.truth, burst.attributed, burst.error),
            (200.0, 200.0, 0.0)
        );
        let spinner = &c.workloads[2];
        assert_eq!((spinner.truth, spinner.attributed), (0.0, 20.0));
        let bounds = count_bounds(&events, &c);
        let find = |f: &str| bounds.iter().find(|b| b.figure == f).unwrap();
        // 0.01 of 2000 is exactly the bound: within.
        assert_eq!(find("error").pass, Some(true), "{}", find("error").text());
        let z = find("zero-charge");
        assert_eq!(
            (z.value, z.workload, z.pass),
            (Some(20.0), Some("spinner"), Some(false))
        );
        assert!(z.text().contains("OUTSIDE"));
        // Interval 0: 2000 attributed + 0 idle = 2000; interval 1: 1100 + 400 = 1500.
        assert_eq!(find("conservation").value, Some(0.0));
    }

    #[test]
    fn a_leak_breaks_conservation_and_names_the_interval() {
        let events = [ev("page-faults")];
        let intervals = vec![
            interval(
                0,
                1_000_000_000,
                vec![task(10, "imcv-toucher", 1000.0)],
                1000.0,
                0.0,
            ),
            interval(
                1_000_000_000,
                2_000_000_000,
                vec![task(10, "imcv-toucher", 1000.0)],
                1500.0,
                0.0,
            ),
        ];
        let c = compare(&events, &idents(), &intervals, truth_at);
        let b = count_bounds(&events, &c);
        let cons = b.iter().find(|b| b.figure == "conservation").unwrap();
        assert_eq!(cons.pass, Some(false));
        assert_eq!(cons.interval, Some(1));
    }

    #[test]
    fn cpu_time_has_twice_the_bound_of_counts() {
        assert_eq!(error_bound("cpu-clock"), 0.02);
        assert_eq!(error_bound("page-faults"), 0.01);
    }

    #[test]
    fn fidelity_is_what_weights_saw_of_what_kernels_moved_and_is_written_whole() {
        let k = |name, read, write, saw| KernelBytes {
            name,
            expected_read: read,
            expected_write: write,
            weights: [("LLC-misses".to_string(), saw)].into(),
            expected_for: [("LLC-misses".to_string(), read + write)].into(),
            ..Default::default()
        };
        let f = fidelity_of(&[
            k("reader", 100.0, 0.0, 90.0),
            k("copier", 200.0, 100.0, 210.0),
        ]);
        assert!((f.weights["LLC-misses"] - 0.75).abs() < 1e-12);
        // reader 0.9, copier 0.7 against 0.75: the larger relative spread is 0.2.
        assert!((f.bound - 0.2).abs() < 1e-12);
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("sub/fidelity.json");
        crate::plan::fidelity::save(&path, &f.weights).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["weights"]["LLC-misses"], 0.75);
        assert_eq!(
            std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
            1
        );
    }
}

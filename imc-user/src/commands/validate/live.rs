//! The live run: workloads started and sampled through the real plan and sampler, frozen at
//! --duration, their truth counted beside, and the report judged.

use super::bytes::{BytesSection, MbmRow, MbmSection, byte_rows, fidelity_of, mbm_rows};
use super::comparable::{Availability, BytesPlan, MBM_BOUND, mbm_availability, records};
use super::counts::{Bound, Counts, Ident, compare, count_bounds};
use super::mbm;
use super::report::Report;
use super::truth::{Truth, TruthEvent};
use super::workloads::{Kind, Workloads};
use crate::cli::{GlobalArgs, ValidateArgs};
use crate::commands::sampling::block_on;
use crate::discovery::resctrl::Resctrl;
use crate::error::{CliError, CliResult, ErrorKind};
use crate::model::result::IntervalResult;
use crate::pipeline::{LoopOptions, Sink, sample_loop};
use crate::plan::Plan;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use super::load::{Load, LoadWatch};

/// How long the sampler runs on after the workloads are frozen at --duration: every count they
/// made is in a record by then (a tick or a switch on every CPU), so the last interval is whole.
pub(super) const SETTLE: Duration = Duration::from_millis(120);

/// The loop's sink: keeps every interval, lets the workloads go once the sampler runs, freezes
/// them (SIGSTOP) at --duration and ends the loop once their last counts are drained.
pub(super) struct Collect<'a> {
    pub(super) workloads: &'a mut Workloads,
    pub(super) groups: Option<&'a mut mbm::Groups>,
    pub(super) intervals: Vec<IntervalResult>,
    pub(super) duration: Duration,
    pub(super) went: Option<std::time::Instant>,
    pub(super) frozen: Option<std::time::Instant>,
    /// What each drain charged to call stacks (`--stacks`).
    pub(super) batches: Vec<crate::model::stacks::StackBatch>,
    /// The machine's load while the workloads ran, and what it was when they were frozen.
    pub(super) load: LoadWatch,
    pub(super) load_seen: Option<Load>,
}

impl Sink for Collect<'_> {
    fn interval(&mut self, r: &IntervalResult) -> std::io::Result<bool> {
        self.intervals.push(r.clone());
        Ok(true)
    }

    fn stacks(&mut self, batch: &crate::model::stacks::StackBatch) -> std::io::Result<()> {
        self.batches.push(batch.clone());
        Ok(())
    }

    fn started(&mut self) {
        if let Some(g) = self.groups.as_deref_mut() {
            g.start();
        }
        self.went = Some(std::time::Instant::now());
        self.load.start();
        self.workloads.go();
    }

    fn drained(&mut self, _records: usize, _took: Duration) {
        if self.frozen.is_some() {
            self.load.sample_steal();
            return;
        }
        self.load.sample();
        if self.went.is_some_and(|t| t.elapsed() >= self.duration) {
            self.workloads.signal(libc::SIGSTOP);
            self.frozen = Some(std::time::Instant::now());
            self.load_seen = Some(self.load.finish());
        }
    }

    fn stop_requested(&self) -> bool {
        self.frozen.is_some_and(|t| t.elapsed() >= SETTLE) || crate::sys::process::stop_signalled()
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn run_live(
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
    let mut mbm_state = prepare(args, plan, kinds.len(), rdt)?;
    let mut wl = Workloads::start(&exe, kinds)
        .map_err(|e| CliError::runtime_because("validate: starting the workloads", e))?;
    let pids: Vec<u32> = wl.running.iter().map(|r| r.pid).collect();
    let mut groups = start_groups(rdt, &wl, &mut mbm_state);
    let mut truth = open_truth(found, &pids, events)?;
    let (ran, intervals, batches, load, load_watch) =
        sample(global, args, found, plan, &mut wl, groups.as_mut());
    let mbm_bytes = groups.as_ref().map(|g| g.bytes());
    truth.stop();
    let passes = wl.stop(Duration::from_millis(500));
    drop(groups);
    ran?;
    eprintln!(
        "imc: validate: {} intervals sampled; comparing with the truth",
        intervals.len()
    );
    let idents = idents_of(&wl, &truth);
    // The intervals the workloads ran through: --duration on the interval clock.
    let whole = (args.duration * 1000.0 / args.interval_ms.max(1) as f64).ceil() as usize;
    let stolen = |t0: u64, t1: u64| load_watch.stolen_ns(t0, t1) as f64;
    let counts = compare(events, &idents, &intervals, whole, |t| truth.at(t), stolen);
    let byte_rows = bytes
        .real
        .then(|| byte_rows(plan, events, kinds, &idents, &passes, &intervals, &truth));
    let fidelity = byte_rows.as_ref().map(|b| fidelity_of(b));
    let mbm_rows = mbm_bytes.map(|m| mbm_rows(&idents, &intervals, &m));
    if !bytes.real && mbm_rows.is_some() {
        mbm_state.reason += ": MBM's bytes are shown, not compared (imc counts no bytes here)";
    }
    let mut bounds = live_bounds(
        events,
        &counts,
        mbm_rows.as_deref(),
        bytes.real,
        truth.lost(),
    );
    let stack_rows = plan.stacks.as_ref().map(|_| {
        let specs = crate::sampler::from_plan::slot_specs(plan);
        super::stacks::stack_rows(&specs, &intervals, &batches, &idents)
    });
    if let Some(rows) = &stack_rows {
        bounds.extend(super::stacks::stack_bounds(rows));
    }
    let pass = bounds.iter().all(|b| b.pass != Some(false));
    Ok(Report {
        source: plan.source.to_string(),
        records: records(plan),
        interval_ms: args.interval_ms,
        duration_s: args.duration,
        truth_lost: truth.lost(),
        truth_counts_read: truth.counts_read(),
        load: with_unattributed(load, &counts),
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
        stacks: stack_rows,
        bounds,
        pass,
        cut_short: false,
    })
}

/// A resctrl monitor group per workload where MBM is there; where they cannot be made, why is
/// said and kept in `mbm_state`.
fn start_groups(
    rdt: &Resctrl,
    wl: &Workloads,
    mbm_state: &mut Availability,
) -> Option<mbm::Groups> {
    match rdt {
        Resctrl::Mbm { dir, features, .. } => {
            let named: Vec<(&str, u32)> = wl.running.iter().map(|r| (r.kind.name, r.pid)).collect();
            match mbm::Groups::create(dir, features, std::process::id(), &named) {
                Ok(g) => Some(g),
                Err(why) => {
                    eprintln!("imc: validate: MBM not compared: {why}");
                    *mbm_state = Availability {
                        available: false,
                        reason: why,
                    };
                    None
                }
            }
        }
        Resctrl::Absent(_) => None,
    }
}

/// The kernel's own count of each truth event for the workloads.
fn open_truth(
    found: &crate::model::Discovery,
    pids: &[u32],
    events: &[TruthEvent],
) -> CliResult<Truth> {
    Truth::open(
        Arc::new(crate::sys::perf::RealPerf),
        pids,
        &found.topology.online,
        events,
    )
    .map_err(|e| {
        // No privileges is the user's to fix (exit 2), like any bad input.
        let denied = matches!(e.io().raw_os_error(), Some(libc::EACCES | libc::EPERM));
        CliError::new(ErrorKind::bad_input_if(denied), e).context("validate")
    })
}

/// Who each running workload is in the attributor's rows: its process and those its truth
/// counted in.
fn idents_of(wl: &Workloads, truth: &Truth) -> Vec<Ident> {
    wl.running
        .iter()
        .enumerate()
        .map(|(w, r)| Ident {
            name: r.kind.name,
            pid: r.pid,
            comm: r.kind.comm(),
            processes: Some(truth.processes(w)),
        })
        .collect()
}

/// The load seen, with the share of each event's counts imc could not place.
fn with_unattributed(mut load: Load, counts: &Counts) -> Load {
    load.unattributed_share = unattributed_share(counts);
    load
}

/// Per event, the run's unattributed counts over its total.
fn unattributed_share(counts: &Counts) -> std::collections::BTreeMap<String, f64> {
    let mut sums: std::collections::BTreeMap<String, (f64, f64)> = Default::default();
    for t in counts.intervals.iter().flat_map(|iv| &iv.events) {
        let e = sums.entry(t.event.clone()).or_default();
        e.0 += t.unattributed;
        e.1 += t.total;
    }
    sums.into_iter()
        .map(|(k, (u, total))| (k, u / total.max(1.0)))
        .collect()
}

/// The bounds the live run is judged by: the counts', MBM's where imc counts bytes, and the
/// truth's completeness.
fn live_bounds(
    events: &[TruthEvent],
    counts: &Counts,
    mbm_rows: Option<&[MbmRow]>,
    bytes_real: bool,
    truth_lost: u64,
) -> Vec<Bound> {
    let mut bounds = count_bounds(events, counts);
    if let Some(rows) = mbm_rows.filter(|_| bytes_real) {
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
        truth_lost as f64,
        None,
        None,
    ));
    bounds
}

/// The sampling loop over the plan until the workloads, let go when it starts, are frozen
/// and settled: its outcome, and every interval it closed.
fn sample(
    global: &GlobalArgs,
    args: &ValidateArgs,
    found: &crate::model::Discovery,
    plan: &Plan,
    wl: &mut Workloads,
    groups: Option<&mut mbm::Groups>,
) -> (
    CliResult<ExitCode>,
    Vec<IntervalResult>,
    Vec<crate::model::stacks::StackBatch>,
    Load,
    LoadWatch,
) {
    let pids: Vec<u32> = wl.running.iter().map(|r| r.pid).collect();
    let load = LoadWatch::new(&global.root, &pids, found.topology.online.len());
    let mut sink = Collect {
        workloads: wl,
        groups,
        intervals: Vec::new(),
        duration: crate::cli::seconds_duration(args.duration),
        went: None,
        frozen: None,
        batches: Vec::new(),
        load,
        load_seen: None,
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
        root: global.root.clone(),
    };
    let ran = block_on(async { Ok(sample_loop(&opts, found, plan, &mut sink).await?) });
    let intervals = std::mem::take(&mut sink.intervals);
    let batches = std::mem::take(&mut sink.batches);
    // A run cut short before the freeze: the load up to now.
    let load = sink.load_seen.take().unwrap_or_else(|| sink.load.finish());
    (ran, intervals, batches, load, sink.load)
}

/// Says what runs, catches INT and TERM, and removes monitor groups a killed run left: MBM's
/// availability.
fn prepare(
    args: &ValidateArgs,
    plan: &Plan,
    nkinds: usize,
    rdt: &Resctrl,
) -> CliResult<Availability> {
    eprintln!(
        "imc: validate: {} workloads for {} s at {} ms intervals ({} records, {})",
        nkinds,
        args.duration,
        args.interval_ms,
        records(plan),
        plan.source
    );
    // From here an INT or TERM ends the run the way its end would: workloads stopped, groups
    // removed, what was measured reported.
    crate::sys::process::catch_stop_signals()
        .map_err(|e| CliError::runtime_because("validate: signal handlers", e))?;
    let mbm_state = mbm_availability(rdt, nkinds);
    if let Resctrl::Mbm { dir, .. } = rdt {
        let n = mbm::remove_stale(dir, crate::sys::process::alive);
        if n > 0 {
            eprintln!("imc: validate: removed {n} monitor group(s) left by a killed run");
        }
    }
    Ok(mbm_state)
}

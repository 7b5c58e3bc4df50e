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
//! Exit 0 within every bound, 1 outside one (the figure named on stderr) or cut short by a
//! signal (no verdict), 2 bad input (an interval shorter than the tick among it).
mod bytes;
mod comparable;
mod counts;
mod dry;
mod live;
mod load;
mod mbm;
mod report;
mod stacks;
#[cfg(test)]
mod tests;
mod truth;
mod workloads;

pub use comparable::{MBM_BOUND, ZERO_CHARGE_BOUND, error_bound};

use super::sampling::{discover, select_for};
use crate::cli::{GlobalArgs, ValidateArgs};
use crate::discovery::resctrl;
use crate::error::{CliError, CliResult, ErrorKind};
use crate::plan::CommandKind;
use bytes::save_fidelity;
use comparable::BytesPlan;
use dry::{DryRun, render_dry};
use live::run_live;
use report::render_report;
use serde::Serialize;
use std::process::ExitCode;
use workloads::{KINDS, Kind};

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
        CommandKind::Top,
        args.interval_ms,
    )?;
    refuse_interval_below_tick(args.interval_ms, &sel.plan)?;
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
    // Said as `top` says it, before any workload starts.
    if !crate::sampler::privileged() {
        return Err(CliError::new(
            ErrorKind::Runtime,
            crate::sampler::SamplerError::NotPrivileged,
        ));
    }
    let mut report = run_live(
        global, args, &sel.plan, &found, &events, &kinds, &bytes, &rdt,
    )?;
    report.cut_short = crate::sys::process::stop_signalled();
    print(&report, args.json, render_report)?;
    if report.cut_short {
        return Err(CliError::runtime(format!(
            "validate: cut short by a signal before --duration {} s ended: the figures cover \
             only the part that ran, so there is no verdict",
            args.duration
        )));
    }
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

/// An interval shorter than the tick holds a record from some CPUs and none from others: its
/// error says nothing of attribution. Refused, naming the shortest one the plan can judge.
fn refuse_interval_below_tick(interval_ms: u64, plan: &crate::plan::Plan) -> CliResult<()> {
    let Some(hz) = plan.tick.hz.filter(|h| *h > 0.0) else {
        return Ok(());
    };
    let tick_ms = 1000.0 / hz;
    if (interval_ms as f64) < tick_ms {
        return Err(CliError::bad_input(format!(
            "validate: -I {interval_ms} is shorter than the tick ({tick_ms:.1} ms at {hz} Hz): \
             give -I {} or more, or a finer tick with --freq",
            tick_ms.ceil()
        )));
    }
    Ok(())
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

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
mod bytes;
mod counts;
mod dry;
mod live;
mod mbm;
mod report;
#[cfg(test)]
mod tests;
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
use bytes::*;
use counts::*;
use dry::*;
use live::*;
use report::*;
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

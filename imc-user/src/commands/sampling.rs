//! What `imc top`, `imc record` and `imc serve` share before their loop
//! ([`crate::pipeline::sample_loop`]) runs: the plan they execute (`-e` events, else every
//! channel of the memory controller, else a labelled stand-in; see [`crate::plan`]), read from
//! their arguments, and the runtime the loop runs on.
use crate::cli::{BackendChoice, GlobalArgs, SamplerArgs};
use crate::discovery;
use crate::error::{CliError, CliResult, ErrorKind};
use crate::model::Discovery;
use crate::plan::{self, Kernel, Plan, Request, WeightEvent, WeightRequest};
use std::process::ExitCode;

/// What the sampler will read and how to label it.
pub struct Selection {
    pub plan: Plan,
    pub source: String,
}

/// The program of `-- CMD` (stat, record), checked before anything is opened: one that exec
/// cannot find is one line, exit 2, before the plan's notices (a stand-in's) are said. What
/// only exec can tell (permission, format) is still said when it starts it.
pub fn check_program(command: &[std::ffi::OsString]) -> CliResult<()> {
    let Some(program) = command.first() else {
        return Ok(());
    };
    let path = std::env::var_os("PATH");
    if crate::sys::file::program_exists(program, path.as_deref()) {
        return Ok(());
    }
    let where_ = if std::os::unix::ffi::OsStrExt::as_bytes(program.as_os_str()).contains(&b'/') {
        "no such file"
    } else {
        "not found in any directory of PATH"
    };
    Err(CliError::bad_input(format!(
        "cannot run '{}': {where_}: give the program's path or a command on PATH after --",
        crate::text::quote_os(program)
    )))
}

/// `-e` events resolved under --root: an unknown or malformed event is bad input.
pub fn resolve_events(
    global: &GlobalArgs,
    events: &[String],
) -> CliResult<Vec<(String, Vec<crate::model::Encoded>)>> {
    events
        .iter()
        .map(|text| {
            crate::events::resolve(&global.root, text)
                .map(|e| (text.clone(), e))
                .map_err(CliError::from)
        })
        .collect()
}

/// The stand-in the plan falls back to without a memory controller, when nothing else was
/// asked for (see [`super::stand_in`]).
pub fn stand_in_for(
    global: &GlobalArgs,
    found: &Discovery,
    events: &[String],
    backend: BackendChoice,
) -> CliResult<Vec<(String, Vec<crate::model::Encoded>)>> {
    if !events.is_empty() || backend != BackendChoice::Auto || !crate::plan::stand_in::needed(found)
    {
        return Ok(Vec::new());
    }
    let s = crate::plan::stand_in::choose(&global.root, found)?;
    Ok(vec![(s.name.to_string(), vec![s.event])])
}

/// `--weight auto|cpu-time|EVENT[:read|:write]` (repeatable): `auto` and `cpu-time` alone, or
/// events resolved under --root like `-e`.
pub fn weight_arg(global: &GlobalArgs, given: &[String]) -> CliResult<WeightRequest> {
    match given {
        [] => Ok(WeightRequest::Auto),
        [one] if one == "auto" => Ok(WeightRequest::Auto),
        [one] if one == "cpu-time" => Ok(WeightRequest::CpuTime),
        many => many
            .iter()
            .map(|text| {
                if text == "auto" || text == "cpu-time" {
                    return Err(CliError::bad_input(format!(
                        "--weight {text}: stands alone, not beside other --weight events"
                    )));
                }
                let (event, direction) = WeightRequest::split_direction(text);
                let encoded = crate::events::resolve(&global.root, event).map_err(|e| {
                    CliError::from(e)
                        .context(format!("--weight {text}"))
                        .hint("auto, cpu-time, or EVENT[:read|:write]")
                })?;
                Ok(WeightEvent {
                    text: event.to_string(),
                    direction,
                    encoded,
                })
            })
            .collect::<CliResult<Vec<_>>>()
            .map(WeightRequest::Events),
    }
}

/// The plan of a sampling command (`command`: top, record or serve).
pub fn select_for(
    global: &GlobalArgs,
    args: &SamplerArgs,
    found: &Discovery,
    command: plan::CommandKind,
    interval_ms: u64,
) -> CliResult<Selection> {
    let req = Request {
        command,
        events: resolve_events(global, &args.events)?,
        backend: args.backend.kind(),
        exclude: Vec::new(),
        freq: args.freq,
        precise: args.precise,
        interval_ms,
        drain_ms: u64::from(plan::drain::period_ms(interval_ms, args.freq.is_none())),
        // The modes meant to be left on sleep long; a live view keeps up with its interval.
        batch_ms: match command {
            plan::CommandKind::Record | plan::CommandKind::Serve => Some(plan::drain::BATCH_MS),
            plan::CommandKind::Top | plan::CommandKind::Stat => None,
        },
        stand_in: stand_in_for(global, found, &args.events, args.backend)?,
        latency: None,
        weight: weight_arg(global, &args.weight)?,
        stacks: args.stacks.then_some(plan::StackRequest {
            kernel: args.kernel_stacks,
            period: args.stack_period,
        }),
    };
    let mut plan = plan::plan(found, &Kernel::read(&global.root), &req)?;
    // The weights' measured fidelity (`imc validate --save`), 1 where none was measured.
    let fidelity = plan::fidelity::load(&crate::settings::get().fidelity_path())
        .map_err(|e| CliError::new(ErrorKind::BadInput, e))?;
    plan::weights::apply_fidelity(&mut plan, &fidelity);
    Ok(Selection {
        source: plan.source.to_string(),
        plan,
    })
}

/// `--dry-run`: the plan, as text or one JSON object, on stdout.
pub fn print_plan(plan: &Plan, json: bool) -> CliResult<ExitCode> {
    let text = if json {
        serde_json::to_string(plan)
            .map_err(|e| CliError::runtime_because("cannot write JSON", e))?
            + "\n"
    } else {
        plan::text::render(plan)
    };
    crate::error::write_stdout(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// Discovery under --root, with bad trees as bad input (exit 2).
pub fn discover(global: &GlobalArgs) -> CliResult<Discovery> {
    Ok(discovery::discover(&global.root)?)
}

pub fn block_on<F: std::future::Future<Output = CliResult<ExitCode>>>(f: F) -> CliResult<ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::runtime_because("starting the runtime", e))?
        .block_on(f)
}

/// Each package's theoretical peak from the SMBIOS memory devices under `root` (as `imc stat`
/// shows it), its channels being the memory-controller PMUs the plan counts traffic on; none
/// where the plan counts no bytes (a stand-in's counts have no peak to compare with).
pub fn package_peaks(root: &std::path::Path, found: &Discovery, plan: &Plan) -> Vec<(u32, f64)> {
    if !plan.measures_bytes() {
        return Vec::new();
    }
    let devices = crate::discovery::dmi::read_memory_devices(root);
    for e in &devices.errors {
        log::info!("{e}");
    }
    let packages = found.topology.packages.len();
    found
        .topology
        .packages
        .iter()
        .filter_map(|p| {
            let mut pmus: Vec<&str> = plan
                .counters
                .iter()
                .filter(|c| {
                    let slot = c.slot.and_then(|i| plan.slots.get(i));
                    c.package == Some(p.id)
                        && slot
                            .is_some_and(|s| matches!(s.role, crate::model::SlotRole::Traffic(_)))
                })
                .map(|c| c.pmu.as_str())
                .collect();
            pmus.sort_unstable();
            pmus.dedup();
            devices
                .package_peak(pmus.len(), packages)
                .map(|b| (p.id, b))
        })
        .collect()
}

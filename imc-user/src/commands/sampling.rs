//! The sampling loop that `imc top`, `imc record` and `imc serve` share: the plan they execute
//! (`-e` events, else every channel of the memory controller, else a labelled stand-in; see
//! [`crate::plan`]) and the loop that drains the sampler into the attributor and hands each
//! interval to a [`Sink`].
use crate::cli::{GlobalArgs, SamplerArgs};
use crate::discovery;
use crate::error::{CliError, CliResult};
use crate::model::{BackendKind, Discovery};
use crate::pipeline::{Drainer, IntervalEnds, Sink};
use crate::plan::{self, Kernel, Plan, Request, WeightEvent, WeightRequest};
use crate::sampler::{Sampler, planned};
use std::process::ExitCode;
use std::time::Duration;

/// What the sampler will read and how to label it.
pub struct Selection {
    pub plan: Plan,
    pub source: String,
}

/// `--backend NAME`: None for `auto`.
pub fn backend_arg(name: &str) -> CliResult<Option<BackendKind>> {
    if name == "auto" {
        return Ok(None);
    }
    BackendKind::parse(name).map(Some).ok_or_else(|| {
        CliError::bad_input(format!(
            "--backend '{name}': unknown (one of auto, {})",
            BackendKind::ALL.map(BackendKind::as_str).join(", ")
        ))
    })
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
                .map_err(|e| CliError::bad_input(e.to_string()))
        })
        .collect()
}

/// The stand-in the plan falls back to without a memory controller, when nothing else was
/// asked for (see [`super::stand_in`]).
pub fn stand_in_for(
    global: &GlobalArgs,
    found: &Discovery,
    events: &[String],
    backend: &str,
) -> CliResult<Vec<(String, Vec<crate::model::Encoded>)>> {
    if !events.is_empty() || backend != "auto" || !crate::plan::stand_in::needed(found) {
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
                    CliError::bad_input(format!(
                        "--weight {text}: {e} (auto, cpu-time, or EVENT[:read|:write])"
                    ))
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
    command: plan::Command,
    interval_ms: u64,
) -> CliResult<Selection> {
    let req = Request {
        command,
        events: resolve_events(global, &args.events)?,
        backend: backend_arg(&args.backend)?,
        exclude: Vec::new(),
        freq: args.freq,
        precise: args.precise,
        interval_ms,
        drain_ms: u64::from(plan::drain::period_ms(interval_ms, args.freq.is_none())),
        // The modes meant to be left on sleep long; a live view keeps up with its interval.
        batch_ms: match command {
            plan::Command::Record | plan::Command::Serve => Some(plan::drain::BATCH_MS),
            plan::Command::Top | plan::Command::Stat => None,
        },
        stand_in: stand_in_for(global, found, &args.events, &args.backend)?,
        latency: None,
        weight: weight_arg(global, &args.weight)?,
    };
    let plan = plan::plan(found, &Kernel::read(&global.root), &req)?;
    Ok(Selection {
        source: plan.source.clone(),
        plan,
    })
}

/// `--dry-run`: the plan, as text or one JSON object, on stdout.
pub fn print_plan(plan: &Plan, json: bool) -> CliResult<ExitCode> {
    let text = if json {
        serde_json::to_string(plan).map_err(|e| CliError::runtime(e.to_string()))? + "\n"
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
        .map_err(|e| CliError::runtime(format!("starting the runtime: {e}")))?
        .block_on(f)
}

pub struct LoopOptions<'a> {
    pub sampler: &'a SamplerArgs,
    pub interval_ms: u64,
    pub duration: Option<f64>,
    /// `-- CMD ARGS`: run it, stop when it exits, exit with its status.
    pub command: &'a [String],
    /// Read each package counter on its own at every interval end (per-channel figures).
    pub per_channel: bool,
}

/// Drains the sampler as the plan's [`plan::Drain`] says into the attributor and hands each
/// interval to the sink, until --duration, the command's exit, SIGINT, SIGTERM or SIGHUP. The
/// sampler is dropped (everything detached) on every way out of this function.
pub async fn sample_loop(
    global: &GlobalArgs,
    args: &LoopOptions<'_>,
    found: &Discovery,
    sel: Selection,
    sink: &mut dyn Sink,
) -> CliResult<ExitCode> {
    if let Some(notice) = crate::plan::stand_in::notice(&sel.plan, "per process") {
        sink.notice(&notice);
    }
    let kernel_tick = !sel.plan.tick.adds_interrupts;
    let drain_ms = sel.plan.drain_period_ms(args.interval_ms);
    let mut cfg = planned::config_of(
        &sel.plan,
        &found.topology.online,
        drain_ms,
        global.verbose >= 2,
    );
    // `--precise`: a record per context switch instead of per-task aggregates at each tick.
    cfg.aggregate &= !args.sampler.precise;
    if kernel_tick {
        // This thread runs the loop's timers (a current-thread runtime).
        let slack_ns = u64::from(cfg.drain_period_ms) * 1_000_000 / 4;
        if let Err(e) = crate::sys::thread::set_timer_slack_ns(slack_ns) {
            log::info!("timer slack of {slack_ns} ns refused ({e}): imc's wake-ups stay exact");
        }
    }
    let sampler = Sampler::start(&cfg).map_err(|e| CliError::runtime(e.to_string()))?;
    let tick_hz = cfg.tick_hz(sel.plan.kernel.hz);
    if global.verbose > 0 {
        let a = sampler.attached();
        eprintln!(
            "imc: tick: {} ({}; adds interrupts: {})",
            a.source,
            a.why,
            if a.adds_interrupts { "yes" } else { "no" }
        );
        eprintln!(
            "imc: drain: every {} ms or when a CPU's ring of {} records is half full",
            cfg.drain_period_ms,
            sampler.ring_len()
        );
    }
    let mut drainer = Drainer::new(sampler, &found.topology, sel.source.clone(), tick_hz)
        .per_channel(args.per_channel)
        .weighting(sel.plan.weighting.clone());
    sink.started();
    let code = run_loop(args, &mut drainer, sink, cfg.drain_period_ms).await;
    drop(drainer);
    code
}

/// The loop of [`sample_loop`] around a started drainer: wakes at the drain period, when the
/// kernel says a ring is half full, at a signal, at --duration or when the command exits.
async fn run_loop(
    args: &LoopOptions<'_>,
    drainer: &mut Drainer,
    sink: &mut dyn Sink,
    drain_ms: u32,
) -> CliResult<ExitCode> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut sigint = signal(SignalKind::interrupt())
        .map_err(|e| CliError::runtime(format!("SIGINT handler: {e}")))?;
    let mut sigterm = signal(SignalKind::terminate())
        .map_err(|e| CliError::runtime(format!("SIGTERM handler: {e}")))?;
    // A closed terminal or session (SIGHUP) ends the run like INT/TERM: the sink finishes its
    // output (a recording gets its end marker) instead of the process dying mid-write.
    let mut sighup = signal(SignalKind::hangup())
        .map_err(|e| CliError::runtime(format!("SIGHUP handler: {e}")))?;
    let wake_fd = drainer
        .sampler()
        .wake_fd()
        .try_clone_to_owned()
        .map_err(|e| CliError::runtime(format!("polling the kernel's wake-ups: {e}")))?;
    // SAFETY: the AsyncFd owns this duplicate, so it stays open and the same for its lifetime.
    let wake = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(wake_fd, tokio::io::Interest::READABLE)
    }
    .map_err(|e| CliError::runtime(format!("polling the kernel's wake-ups: {e}")))?;
    let period = Duration::from_millis(drain_ms.into());
    let start = tokio::time::Instant::now();
    let deadline = args
        .duration
        .map(|d| start + crate::cli::seconds_duration(d));
    let mut ends = IntervalEnds::starting(crate::sampler::monotonic_ns(), args.interval_ms);
    // Start the command only once the sampler runs, so none of its traffic is missed.
    let mut child = match args.command.split_first() {
        Some((prog, rest)) => Some(
            tokio::process::Command::new(prog)
                .args(rest)
                .spawn()
                .map_err(|e| CliError::bad_input(format!("cannot run '{prog}': {e}")))?,
        ),
        None => None,
    };
    let mut exit = ExitCode::SUCCESS;
    let mut next_wake = start + period;
    // A failure ends the loop here, not with `?`: the command must not outlive it.
    let mut failed: Option<CliError> = None;
    loop {
        let child_done = async {
            match child.as_mut() {
                Some(c) => c.wait().await.ok(),
                None => std::future::pending().await,
            }
        };
        let wake_at = deadline.map_or(next_wake, |d| d.min(next_wake));
        let (stop, status) = tokio::select! {
            _ = tokio::time::sleep_until(wake_at) => (false, None),
            r = wake.readable() => {
                if let Ok(mut ready) = r {
                    ready.clear_ready();
                }
                (false, None)
            }
            _ = sigint.recv() => (true, None),
            _ = sigterm.recv() => (true, None),
            _ = sighup.recv() => (true, None),
            st = child_done => (true, st),
        };
        drainer.take_wakes();
        if let Some(st) = status {
            use std::os::unix::process::ExitStatusExt;
            let code = st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0));
            exit = ExitCode::from(code.clamp(0, 255) as u8);
            child = None;
        }
        let now = tokio::time::Instant::now();
        next_wake = now + period;
        let finished = stop || sink.stop_requested() || deadline.is_some_and(|d| now >= d);
        let drain_start = std::time::Instant::now();
        let (records, go_on) =
            match drainer.drain_into(sink, &mut ends, crate::sampler::monotonic_ns()) {
                Ok(r) => r,
                Err(e) => {
                    failed = Some(CliError::runtime(format!("writing output: {e}")));
                    break;
                }
            };
        sink.drained(records, drain_start.elapsed());
        if !go_on {
            break;
        }
        if finished {
            // The last interval, from the last end to now.
            let result = drainer.close(true);
            drainer.say_fallbacks(&result, sink);
            if let Err(e) = sink.interval(&result) {
                failed = Some(CliError::runtime(format!("writing output: {e}")));
            }
            break;
        }
    }
    drop(wake);
    if let Some(mut c) = child {
        // Stopped by signal or --duration while the command still runs, or by a failure (the
        // output cannot be written): like perf, the measured command ends with the
        // measurement, never left running on its own.
        let pid = c.id().unwrap_or(0);
        let _ = c.start_kill();
        let _ = c.wait().await;
        if let Some(e) = failed {
            let prog = args.command.first().map_or("", String::as_str);
            return Err(CliError {
                message: format!(
                    "{}; the command '{}' (pid {pid}) was killed with the measurement",
                    e.message,
                    crate::text::escape(prog)
                ),
                ..e
            });
        }
    }
    failed.map_or(Ok(exit), Err)
}

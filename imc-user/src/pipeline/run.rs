//! The sampling loop that `imc top`, `imc record` and `imc serve` share: the sampler started as
//! the plan says, drained into the attributor, each interval handed to a [`Sink`], until
//! --duration, the measured command's exit, SIGINT, SIGTERM, SIGHUP or the sink ends the run.
use super::{Drainer, IntervalEnds, Sink};
use crate::model::Discovery;
use crate::plan::Plan;
use crate::sampler::{Sampler, SamplerError, planned};
use std::io;
use std::process::ExitCode;
use std::time::Duration;
use thiserror::Error;

/// Why the sampling loop could not start or go on.
#[derive(Debug, Error)]
pub enum PipelineError {
    /// The sampler did not load or attach.
    #[error("{0}")]
    Sampler(#[from] SamplerError),
    #[error("{signal} handler: {source}")]
    Signal {
        signal: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("polling the kernel's wake-ups: {0}")]
    Wakeups(#[source] io::Error),
    /// The command after `--` did not start: what the user asked to run is wrong.
    #[error("cannot run '{program}': {source}")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },
    /// The sink could not write an interval or a record.
    #[error("writing output: {0}")]
    Output(#[source] io::Error),
    /// The loop failed while the measured command ran; the command was ended with it.
    #[error(
        "{source}; the command '{}' (pid {pid}) was killed with the measurement",
        crate::text::escape(program)
    )]
    CommandKilled {
        program: String,
        pid: u32,
        #[source]
        source: Box<PipelineError>,
    },
}

impl PipelineError {
    /// The user's input is at fault (a command that cannot run), not the machine.
    pub fn is_bad_input(&self) -> bool {
        match self {
            PipelineError::Spawn { .. } => true,
            PipelineError::CommandKilled { source, .. } => source.is_bad_input(),
            _ => false,
        }
    }
}

/// How a sampling command runs the loop, from its arguments.
pub struct LoopOptions<'a> {
    pub interval_ms: u64,
    /// `--duration`: stop after this long.
    pub duration: Option<Duration>,
    /// `-- CMD ARGS`: run it, stop when it exits, exit with its status.
    pub command: &'a [String],
    /// Read each package counter on its own at every interval end (per-channel figures).
    pub per_channel: bool,
    /// `--precise`: a record per context switch instead of per-task aggregates at each tick.
    pub precise: bool,
    /// `-v` given this many times: once says the tick and the drain, twice also asks the
    /// kernel for its verifier log.
    pub verbose: u8,
}

/// Drains the sampler as the plan's [`plan::Drain`] says into the attributor and hands each
/// interval to the sink, until --duration, the command's exit, SIGINT, SIGTERM or SIGHUP. The
/// sampler is dropped (everything detached) on every way out of this function.
pub async fn sample_loop(
    args: &LoopOptions<'_>,
    found: &Discovery,
    plan: &Plan,
    sink: &mut dyn Sink,
) -> Result<ExitCode, PipelineError> {
    if let Some(notice) = crate::plan::stand_in::notice(plan, "per process") {
        sink.notice(&notice);
    }
    let kernel_tick = !plan.tick.adds_interrupts;
    let drain_ms = plan.drain_period_ms(args.interval_ms);
    let mut cfg = planned::config_of(plan, &found.topology.online, drain_ms, args.verbose >= 2);
    // `--precise`: a record per context switch instead of per-task aggregates at each tick.
    cfg.aggregate &= !args.precise;
    if kernel_tick {
        // This thread runs the loop's timers (a current-thread runtime).
        let slack_ns = u64::from(cfg.drain_period_ms) * 1_000_000 / 4;
        if let Err(e) = crate::sys::thread::set_timer_slack_ns(slack_ns) {
            log::info!("timer slack of {slack_ns} ns refused ({e}): imc's wake-ups stay exact");
        }
    }
    let sampler = Sampler::start(&cfg)?;
    let tick_hz = cfg.tick_hz(plan.kernel.hz);
    if args.verbose > 0 {
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
    let mut drainer = Drainer::new(sampler, &found.topology, plan.source.clone(), tick_hz)
        .per_channel(args.per_channel)
        .weighting(plan.weighting.clone());
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
) -> Result<ExitCode, PipelineError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut sigint = signal(SignalKind::interrupt()).map_err(|source| PipelineError::Signal {
        signal: "SIGINT",
        source,
    })?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(|source| PipelineError::Signal {
        signal: "SIGTERM",
        source,
    })?;
    // A closed terminal or session (SIGHUP) ends the run like INT/TERM: the sink finishes its
    // output (a recording gets its end marker) instead of the process dying mid-write.
    let mut sighup = signal(SignalKind::hangup()).map_err(|source| PipelineError::Signal {
        signal: "SIGHUP",
        source,
    })?;
    let wake_fd = drainer
        .sampler()
        .wake_fd()
        .try_clone_to_owned()
        .map_err(PipelineError::Wakeups)?;
    // SAFETY: the AsyncFd owns this duplicate, so it stays open and the same for its lifetime.
    let wake = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(wake_fd, tokio::io::Interest::READABLE)
    }
    .map_err(|e| PipelineError::Wakeups(e.into()))?;
    let period = Duration::from_millis(drain_ms.into());
    let start = tokio::time::Instant::now();
    let deadline = args.duration.map(|d| start + d);
    let mut ends = IntervalEnds::starting(crate::sampler::monotonic_ns(), args.interval_ms);
    // Start the command only once the sampler runs, so none of its traffic is missed.
    let mut child = match args.command.split_first() {
        Some((prog, rest)) => Some(
            tokio::process::Command::new(prog)
                .args(rest)
                .spawn()
                .map_err(|source| PipelineError::Spawn {
                    program: prog.clone(),
                    source,
                })?,
        ),
        None => None,
    };
    let mut exit = ExitCode::SUCCESS;
    let mut next_wake = start + period;
    // A failure ends the loop here, not with `?`: the command must not outlive it.
    let mut failed: Option<PipelineError> = None;
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
                    failed = Some(PipelineError::Output(e));
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
                failed = Some(PipelineError::Output(e));
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
            return Err(PipelineError::CommandKilled {
                program: args.command.first().cloned().unwrap_or_default(),
                pid,
                source: Box::new(e),
            });
        }
    }
    failed.map_or(Ok(exit), Err)
}

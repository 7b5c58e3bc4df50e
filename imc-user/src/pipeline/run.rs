//! The sampling loop that `imc top`, `imc record` and `imc serve` share: the sampler started as
//! the plan says, drained into the attributor, each interval handed to a [`Sink`], until
//! --duration, the measured command's exit, SIGINT, SIGTERM, SIGHUP or the sink ends the run.
use super::{Drainer, IntervalEnds, Sink};
use crate::model::Discovery;
use crate::plan::Plan;
use crate::sampler::{Sampler, SamplerConfig, SamplerError, from_plan};
use std::io;
use std::os::fd::OwnedFd;
use std::process::{ExitCode, ExitStatus};
use std::time::Duration;
use thiserror::Error;
use tokio::io::unix::AsyncFd;
use tokio::process::Child;
use tokio::signal::unix::{Signal, SignalKind};
use tokio::time::Instant;

/// Why the sampling loop could not start or go on.
#[derive(Debug, Error)]
pub enum PipelineError {
    /// The sampler did not load or attach.
    #[error(transparent)]
    Sampler(#[from] SamplerError),
    #[error("{signal} handler")]
    Signal {
        signal: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("polling the kernel's wake-ups")]
    Wakeups(#[source] io::Error),
    /// The command after `--` did not start: what the user asked to run is wrong.
    #[error("cannot run '{program}'")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },
    /// The sink could not write an interval or a record.
    #[error("writing output")]
    Output(#[source] io::Error),
    /// The loop failed while the measured command ran; the command was ended with it.
    #[error(
        "the command '{}' (pid {pid}) was killed with the measurement, which failed",
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
    /// The user's input is at fault (a command that cannot run, an object or a configuration
    /// the sampler refuses), not the machine.
    pub fn is_bad_input(&self) -> bool {
        match self {
            PipelineError::Spawn { .. } => true,
            PipelineError::Sampler(e) => e.is_bad_input(),
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
    pub command: &'a [std::ffi::OsString],
    /// Read each package counter on its own at every interval end (per-channel figures).
    pub per_channel: bool,
    /// `-v` given this many times: once says the tick and the drain, twice also asks the
    /// kernel for its verifier log.
    pub verbose: u8,
    /// Each package's theoretical peak (package id, bytes/s), where it is known: intervals say
    /// the packages' utilisation.
    pub peaks: Vec<(u32, f64)>,
    /// `--root`: where stacks' processes and binaries are found (`proc/PID/maps`).
    pub root: std::path::PathBuf,
}

/// Drains the sampler as the plan's [`crate::plan::Drain`] says into the attributor and hands
/// each interval to the sink, until --duration, the command's exit, SIGINT, SIGTERM or SIGHUP.
/// The sampler is dropped (everything detached) on every way out of this function.
pub async fn sample_loop(
    opts: &LoopOptions<'_>,
    found: &Discovery,
    plan: &Plan,
    sink: &mut dyn Sink,
) -> Result<ExitCode, PipelineError> {
    if let Some(notice) = crate::plan::stand_in::notice(plan, "per process") {
        sink.notice(&notice);
    }
    let cfg = sampler_config(opts, found, plan);
    if !plan.tick.adds_interrupts {
        relax_timers(cfg.drain_period_ms);
    }
    let sampler = Sampler::start(&cfg)?;
    if opts.verbose > 0 {
        say_tick_and_drain(&sampler, &cfg);
    }
    let tick_hz = cfg.tick_hz(plan.kernel.hz);
    let mut drainer = Drainer::new(sampler, &found.topology, plan.source.to_string(), tick_hz)
        .per_channel(opts.per_channel)
        .weighting(plan.weighting.clone())
        .latency(open_latency(found, plan, sink))
        .peaks(opts.peaks.clone())
        .stacks(plan.stacks.as_ref().map(|_| {
            let root = opts.root.clone();
            super::stacks::StackResolver::new(
                Box::new(move || Box::new(crate::symbols::Symbolizer::new(&root))),
                plan.slots.len(),
                &opts.root,
            )
        }));
    sink.started();
    let code = run_loop(opts, &mut drainer, sink, cfg.drain_period_ms).await;
    if opts.verbose > 0 {
        say_losses(drainer.sampler(), drainer.stacks_summary());
    }
    drop(drainer);
    code
}

/// `-v`, at the end: what the program could not place (records overwritten before they were
/// read, switches it did not see run, whose slices went to no task), and what the stacks'
/// resolving met (`stacks`, where stacks were taken).
fn say_losses(sampler: &Sampler, stacks: Option<String>) {
    use std::io::Write as _;
    if let Some(line) = stacks {
        let _ = writeln!(crate::text::held_log::Writer, "imc: stacks: {line}");
    }
    let Ok(stats) = sampler.stats() else {
        return;
    };
    let _ = writeln!(
        crate::text::held_log::Writer,
        "imc: sampler: {} records lost, {} switches unseen (their slices charged to no task), \
         {} charged slices in no stack (the kernel's stack-count map was full)",
        stats.lost(),
        stats.unseen_switches(),
        stats.stacks_dropped()
    );
}

/// The plan's loaded-latency counters opened beside the sampler. Where they do not open (or
/// some do not), the run goes on without that latency, said once: null, never made up.
fn open_latency(
    found: &Discovery,
    plan: &Plan,
    sink: &mut dyn Sink,
) -> Option<crate::counting::latency::IntervalLatency> {
    let sys = std::sync::Arc::new(crate::sys::perf::RealPerf);
    let now = crate::sampler::monotonic_ns();
    match crate::counting::latency::IntervalLatency::open(plan, &found.topology, sys, now) {
        Ok(Some(mut l)) => {
            let failed = l.take_failures();
            if let Some(first) = failed.first() {
                sink.notice(&format!(
                    "loaded latency: {} queue counter(s) did not open (first: {}): their channels' latency is null",
                    failed.len(),
                    first.message
                ));
            }
            Some(l)
        }
        Ok(None) => None,
        Err(e) => {
            sink.notice(&format!(
                "loaded latency is not shown: its queue counters did not open: {}",
                crate::text::error_line(&e)
            ));
            None
        }
    }
}

/// The sampler's configuration as the plan and the options say.
fn sampler_config(opts: &LoopOptions<'_>, found: &Discovery, plan: &Plan) -> SamplerConfig {
    let drain_ms = plan.drain_period_ms(opts.interval_ms);
    from_plan::config_of(plan, &found.topology.online, drain_ms, opts.verbose >= 2)
}

/// On the kernel's own tick nothing needs imc's wake-ups to be exact: this thread, which runs
/// the loop's timers (a current-thread runtime), lets the kernel batch them.
fn relax_timers(drain_period_ms: u32) {
    let slack_ns = u64::from(drain_period_ms) * 1_000_000 / 4;
    if let Err(e) = crate::sys::thread::set_timer_slack_ns(slack_ns) {
        log::info!("timer slack of {slack_ns} ns refused ({e}): imc's wake-ups stay exact");
    }
}

/// `-v`: which tick the sampler attached to, and how often it is drained.
fn say_tick_and_drain(sampler: &Sampler, cfg: &SamplerConfig) {
    use std::io::Write as _;
    // Through the log's writer: held while `top`'s full-screen view is up, not printed on it.
    let mut err = crate::text::held_log::Writer;
    let a = sampler.attached();
    let _ = writeln!(
        err,
        "imc: tick: {} ({}; adds interrupts: {})",
        a.source,
        a.why,
        if a.adds_interrupts { "yes" } else { "no" }
    );
    let _ = writeln!(
        err,
        "imc: drain: every {} ms or when a CPU's ring of {} records is half full",
        cfg.drain_period_ms,
        sampler.ring_len()
    );
}

/// The loop of [`sample_loop`] around a started drainer: wakes at the drain period, when the
/// kernel says a ring is half full, at a signal, at --duration or when the command exits.
async fn run_loop(
    opts: &LoopOptions<'_>,
    drainer: &mut Drainer,
    sink: &mut dyn Sink,
    drain_ms: u32,
) -> Result<ExitCode, PipelineError> {
    let mut wakeups = Wakeups::new(drainer)?;
    let period = Duration::from_millis(drain_ms.into());
    let start = Instant::now();
    let deadline = opts.duration.map(|d| start + d);
    let mut ends = IntervalEnds::starting(crate::sampler::monotonic_ns(), opts.interval_ms);
    drainer.start_intervals(&ends)?;
    // Start the command only once the sampler runs, so none of its traffic is missed.
    let mut child = spawn_command(opts.command, sink.command_cgroup())?;
    if let Some(pid) = child.as_ref().and_then(Child::id) {
        sink.command_started(pid);
    }
    let mut exit = ExitCode::SUCCESS;
    let mut next_wake = start + period;
    // A failure ends the loop here, not with `?`: the command must not outlive it.
    let mut failed: Option<PipelineError> = None;
    loop {
        let wake_at = deadline.map_or(next_wake, |d| d.min(next_wake));
        let (stop, status) = wakeups.next(wake_at, &mut child).await;
        let drain_asked = drainer.take_wakes();
        let child_ended = status.is_some();
        if let Some(st) = status {
            exit = exit_code_of(st);
            child = None;
        }
        let now = Instant::now();
        let finished = stop || sink.stop_requested() || deadline.is_some_and(|d| now >= d);
        // Woken only to read a new process's maps: the drain keeps its time.
        if !finished && !drain_asked && !child_ended && now < wake_at {
            continue;
        }
        next_wake = now + period;
        match drain_once(drainer, sink, &mut ends, finished) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
        // Unless the drain is batched, wake when the next interval is due (its end and the
        // hold for its last records), so each is delivered on time.
        if !crate::plan::drain::batches_intervals(drain_ms.into(), opts.interval_ms) {
            let due = drainer.close_due_ns(&ends);
            let mono = crate::sampler::monotonic_ns();
            if due > mono {
                next_wake = next_wake.min(Instant::now() + Duration::from_nanos(due - mono));
            }
        }
    }
    drop(wakeups);
    if let Some(c) = child {
        failed = end_command(c, opts.command, failed).await;
    }
    failed.map_or(Ok(exit), Err)
}

/// One wake-up's work: everything the rings hold into the attributor and the sink, and when
/// the run is `finished` its last interval, from the last end to now. Returns whether to go on.
fn drain_once(
    drainer: &mut Drainer,
    sink: &mut dyn Sink,
    ends: &mut IntervalEnds,
    finished: bool,
) -> Result<bool, PipelineError> {
    if finished {
        drainer.end_open_slices();
    }
    let drain_start = std::time::Instant::now();
    let (records, go_on) = drainer
        .drain_into(sink, ends, crate::sampler::monotonic_ns())
        .map_err(PipelineError::Output)?;
    sink.drained(records, drain_start.elapsed());
    if !go_on {
        return Ok(false);
    }
    if finished {
        drainer.finish_stacks(sink).map_err(PipelineError::Output)?;
        let result = drainer.close(true);
        drainer.say_fallbacks(&result, sink);
        sink.interval(&result).map_err(PipelineError::Output)?;
        return Ok(false);
    }
    Ok(true)
}

/// What wakes the loop besides its timer and the command: the signals that end a run and the
/// kernel's "ring half full" notices.
struct Wakeups {
    sigint: Signal,
    sigterm: Signal,
    sighup: Signal,
    ring: AsyncFd<OwnedFd>,
}

impl Wakeups {
    fn new(drainer: &Drainer) -> Result<Wakeups, PipelineError> {
        let handler = |kind, signal| {
            tokio::signal::unix::signal(kind)
                .map_err(|source| PipelineError::Signal { signal, source })
        };
        let sigint = handler(SignalKind::interrupt(), "SIGINT")?;
        let sigterm = handler(SignalKind::terminate(), "SIGTERM")?;
        // A closed terminal or session (SIGHUP) ends the run like INT/TERM: the sink finishes
        // its output (a recording gets its end marker) instead of the process dying mid-write.
        let sighup = handler(SignalKind::hangup(), "SIGHUP")?;
        let wake_fd = drainer
            .sampler()
            .wake_fd()
            .try_clone_to_owned()
            .map_err(PipelineError::Wakeups)?;
        // SAFETY: the AsyncFd owns this duplicate, so it stays open and the same for its
        // lifetime.
        let ring =
            unsafe { AsyncFd::register_with_interest(wake_fd, tokio::io::Interest::READABLE) }
                .map_err(|e| PipelineError::Wakeups(e.into()))?;
        Ok(Wakeups {
            sigint,
            sigterm,
            sighup,
            ring,
        })
    }

    /// Waits for the first of `wake_at`, a ring's notice, a signal and the command's exit:
    /// (whether the run is to stop, the command's exit status if it exited).
    async fn next(
        &mut self,
        wake_at: Instant,
        child: &mut Option<Child>,
    ) -> (bool, Option<ExitStatus>) {
        let child_done = async {
            match child.as_mut() {
                Some(c) => c.wait().await.ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep_until(wake_at) => (false, None),
            r = self.ring.readable() => {
                if let Ok(mut ready) = r {
                    ready.clear_ready();
                }
                (false, None)
            }
            _ = self.sigint.recv() => (true, None),
            _ = self.sigterm.recv() => (true, None),
            _ = self.sighup.recv() => (true, None),
            st = child_done => (true, st),
        }
    }
}

/// `-- CMD ARGS` started, if given, set to die with imc's main thread (the loop's own, a
/// current-thread runtime): a SIGKILL of imc leaves no measured command behind.
/// With `cgroup` (an open `cgroup.procs`), the command joins that cgroup before it executes; if
/// it cannot, it runs where imc runs (the sink sees where it went).
fn spawn_command(
    command: &[std::ffi::OsString],
    cgroup: Option<std::os::fd::RawFd>,
) -> Result<Option<Child>, PipelineError> {
    let Some((prog, rest)) = command.split_first() else {
        return Ok(None);
    };
    let mut cmd = tokio::process::Command::new(prog);
    cmd.args(rest);
    // The command dies with imc, even when imc is killed with SIGKILL and cannot end it itself.
    let imc_pid = std::process::id();
    // SAFETY: the hook makes only async-signal-safe calls (prctl, getppid, write).
    unsafe {
        cmd.pre_exec(move || {
            crate::sys::thread::die_with_parent(imc_pid)?;
            if let Some(fd) = cgroup {
                let _ = crate::sys::cgroup::join(fd);
            }
            Ok(())
        });
    }
    cmd.spawn()
        .map(Some)
        .map_err(|source| PipelineError::Spawn {
            program: crate::text::quote_os(prog),
            source,
        })
}

/// The measured command's status as imc's own exit code (128 + the signal that ended it).
fn exit_code_of(st: ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    let code = st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0));
    ExitCode::from(code.clamp(0, 255) as u8)
}

/// Stopped by signal or --duration while the command still runs, or by a failure (the output
/// cannot be written): like perf, the measured command ends with the measurement, never left
/// running on its own. A failure then says so.
async fn end_command(
    mut c: Child,
    command: &[std::ffi::OsString],
    failed: Option<PipelineError>,
) -> Option<PipelineError> {
    let pid = c.id().unwrap_or(0);
    let _ = c.start_kill();
    let _ = c.wait().await;
    failed.map(|e| PipelineError::CommandKilled {
        program: command
            .first()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
        pid,
        source: Box::new(e),
    })
}

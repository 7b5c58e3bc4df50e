//! The sampling loop that `imc top`, `imc record` and `imc serve` share: the plan they execute
//! (`-e` events, else every channel of the memory controller, else a labelled stand-in; see
//! [`crate::plan`]) and the loop that drains the sampler into the attributor and hands each
//! interval to a [`Sink`].
use crate::attribution::Attributor;
use crate::cli::{GlobalArgs, SamplerArgs};
use crate::discovery;
use crate::error::{CliError, CliResult};
use crate::model::{BackendKind, Discovery, Topology};
use crate::output::interval::IntervalResult;
use crate::plan::{self, Kernel, Plan, PlanError, Request, WeightEvent, WeightRequest};
use crate::sampler::{RecordSource, Sampler, planned};
use imc_common::TickRecord;
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
    if !events.is_empty() || backend != "auto" || !super::stand_in::needed(found) {
        return Ok(Vec::new());
    }
    let s = super::stand_in::choose(&global.root, found)?;
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

pub fn plan_error(e: PlanError) -> CliError {
    match e {
        PlanError::BadRequest(m) => CliError::bad_input(m),
        PlanError::Unavailable(m) => CliError::runtime(m),
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
        drain_ms: u64::from(drain_period_ms(interval_ms, args.freq.is_none())),
        // The modes meant to be left on sleep long; a live view keeps up with its interval.
        batch_ms: match command {
            plan::Command::Record | plan::Command::Serve => Some(BATCH_DRAIN_MS),
            plan::Command::Top | plan::Command::Stat => None,
        },
        stand_in: stand_in_for(global, found, &args.events, &args.backend)?,
        latency: None,
        weight: weight_arg(global, &args.weight)?,
    };
    let plan = plan::plan(found, &Kernel::read(&global.root), &req).map_err(plan_error)?;
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

/// The one line said on stderr when the plan counts a stand-in; `how`: "per process",
/// "system-wide".
pub fn stand_in_notice(plan: &Plan, how: &str) -> Option<String> {
    let name = plan.source.strip_prefix("proxy:")?;
    let why = plan.refusals.first().map_or_else(
        || "no memory-controller PMU found".to_string(),
        |r| {
            // The refusal names its backend first; the reason is what the user needs.
            r.reason
                .split_once(": ")
                .map_or(r.reason.clone(), |(_, why)| why.to_string())
        },
    );
    Some(format!(
        "no memory-controller counters ({why}); counting {name} {how} as a stand-in (counts, not bytes)"
    ))
}

/// Where the sampling loop's output goes: `imc top` prints intervals, `imc record` writes
/// ticks and intervals to a recording.
pub trait Sink {
    /// Every record, in time order (each drain's records merged across CPUs), before the
    /// intervals they end.
    fn tick(&mut self, _rec: &imc_common::TickRecord) -> std::io::Result<()> {
        Ok(())
    }
    /// One closed interval. `Ok(false)` stops the loop quietly (the reader went away).
    fn interval(&mut self, r: &IntervalResult) -> std::io::Result<bool>;
    /// Asked at every drain: true ends the loop as SIGINT would (the live view's quit key), with
    /// a last interval up to now.
    fn stop_requested(&self) -> bool {
        false
    }
    /// After every drain: how many records it took in and how long it took (`imc serve`'s
    /// health metrics).
    fn drained(&mut self, _records: usize, _took: Duration) {}
    /// Once, when the sampler is loaded and attached, before the first drain (`imc serve`
    /// starts answering then, never before a run that is about to fail).
    fn started(&mut self) {}

    /// Something the user must be told once while the loop runs (one line, no `imc:` prefix);
    /// on stderr unless the sink shows it itself (the live view's header).
    fn notice(&mut self, line: &str) {
        eprintln!("imc: {}", crate::text::escape(line));
    }
}

/// The one line said the first time package traffic had to be divided by on-CPU time although
/// weights were planned.
fn fallback_notice(r: &IntervalResult) -> String {
    format!(
        "{} span(s) of package traffic divided by on-CPU time: the weight counters did not run \
         (the core's counters are shared, and the kernel multiplexed them) or could not be read; \
         every interval counts them (JSON weight_fallbacks)",
        r.weight_fallbacks
    )
}

/// How long `record` and `serve` sleep between drains when every counter comes in the records
/// (see [`plan::Drain`]): a second, and earlier whenever a CPU's ring is half full.
pub const BATCH_DRAIN_MS: u64 = 1000;

/// How often the loop drains the rings. Each drain wakes imc, a timer interrupt of its own on a
/// CPU that was not going to take one, and most of imc's own CPU use: on the kernel's tick (the
/// continuous mode meant to be left on) once per interval, at most every 100 ms (the rings
/// hold that long at a busy server's switch rate), and with a timer slack of a quarter of that,
/// so the wake-up can ride on an interrupt the CPU takes anyway. With `--freq` (asked-for
/// resolution) a quarter of the interval, between 10 and 50 ms, so an interval closes at most a
/// quarter late.
pub fn drain_period_ms(interval_ms: u64, kernel_tick: bool) -> u32 {
    if kernel_tick {
        interval_ms.clamp(10, 100) as u32
    } else {
        (interval_ms / 4).clamp(10, 50) as u32
    }
}

/// Discovery under --root, with bad trees as bad input (exit 2).
pub fn discover(global: &GlobalArgs) -> CliResult<Discovery> {
    discovery::discover(&global.root).map_err(|e| {
        if e.is_bad_input() {
            CliError::bad_input(e.to_string())
        } else {
            CliError::runtime(e.to_string())
        }
    })
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
    if let Some(notice) = stand_in_notice(&sel.plan, "per process") {
        sink.notice(&notice);
    }
    let kernel_tick = !sel.plan.tick.adds_interrupts;
    let drain_ms = sel.plan.drain.as_ref().map_or_else(
        || drain_period_ms(args.interval_ms, kernel_tick),
        |d| d.every_ms.min(u64::from(u32::MAX)) as u32,
    );
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
    let mut pump = Pump::new(sampler, &found.topology, sel.source.clone(), tick_hz)
        .per_channel(args.per_channel)
        .weighting(sel.plan.weighting.clone());
    sink.started();
    let code = run_loop(args, &mut pump, sink, cfg.drain_period_ms).await;
    drop(pump);
    code
}

/// The loop of [`sample_loop`] around a started pump: wakes at the drain period, when the
/// kernel says a ring is half full, at a signal, at --duration or when the command exits.
async fn run_loop(
    args: &LoopOptions<'_>,
    pump: &mut Pump,
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
    let wake_fd = pump
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
        pump.take_wakes();
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
            match pump.drain_into(sink, &mut ends, crate::sampler::monotonic_ns()) {
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
            let result = pump.close(true);
            pump.say_fallbacks(&result, sink);
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

/// Interval ends on the records' clock (CLOCK_MONOTONIC ns): every `every_ns` from the start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IntervalEnds {
    pub next_ns: u64,
    pub every_ns: u64,
}

impl IntervalEnds {
    pub fn starting(now_ns: u64, interval_ms: u64) -> IntervalEnds {
        let every_ns = interval_ms.max(1).saturating_mul(1_000_000);
        IntervalEnds {
            next_ns: now_ns.saturating_add(every_ns),
            every_ns,
        }
    }

    fn advance(&mut self) {
        self.next_ns = self.next_ns.saturating_add(self.every_ns);
    }
}

/// The sampler and the attributor joined the way every sampling command runs them: what one
/// drain and one interval end do, apart from timers, signals and output, so that tests can run
/// exactly this path against the real program with counters of their choosing, and the replay
/// benchmark against a [`crate::sampler::loopback::Loopback`] of a machine it does not have.
pub struct Pump<S: RecordSource = Sampler> {
    sampler: S,
    attr: Attributor,
    lost_seen: u64,
    /// Each package counter's reading at the last interval end, when per-channel figures are
    /// wanted (`imc serve`): one userspace read per counter per interval.
    channels: Option<Vec<f64>>,
    /// One drain's records, merged by time (kept to reuse its allocation).
    batch: Vec<TickRecord>,
    /// (time, index in `batch`) of each record, sorted.
    order: Vec<(u64, u32)>,
    /// The weights' fallback to time has been said.
    fallbacks_said: bool,
}

impl<S: RecordSource> Pump<S> {
    /// `tick_hz`: the tick rate of a busy CPU (the kernel's HZ, or `--freq`).
    pub fn new(sampler: S, topology: &Topology, source: String, tick_hz: u32) -> Pump<S> {
        let attr = Attributor::new(sampler.slots(), topology, source).tick_hz(tick_hz);
        let mut pump = Pump {
            sampler,
            attr,
            lost_seen: 0,
            channels: None,
            batch: Vec::new(),
            order: Vec::new(),
            fallbacks_said: false,
        };
        // Every package's counters read once now: a package whose CPUs are idle is otherwise
        // first read at the first drain (a second in), and its traffic before that was lost.
        pump.read_packages(true);
        pump
    }

    /// Also read every package counter on its own at each interval end, so each result carries
    /// per-channel counts (`PackageRow::channels`).
    pub fn per_channel(mut self, yes: bool) -> Pump<S> {
        self.channels = yes.then(Vec::new);
        self
    }

    /// How the plan divides package traffic, said in every interval.
    pub fn weighting(mut self, w: Option<crate::model::Weighting>) -> Pump<S> {
        self.attr = self.attr.weighting(w);
        self
    }

    pub fn sampler(&self) -> &S {
        &self.sampler
    }

    /// The source itself (the replay benchmark fills a loopback's rings through it).
    pub fn sampler_mut(&mut self) -> &mut S {
        &mut self.sampler
    }

    pub fn attributor(&self) -> &Attributor {
        &self.attr
    }

    /// Drains every record into the attributor (and `tick`), then reads from userspace the
    /// packages no reader's tick has read lately, so an idle package's traffic keeps its time.
    pub fn drain(&mut self, mut tick: impl FnMut(&TickRecord)) -> usize {
        let mut batch = std::mem::take(&mut self.batch);
        batch.clear();
        let n = self.sampler.drain_append(&mut batch);
        for r in &batch {
            self.attr.push_tick(r);
            tick(r);
        }
        self.batch = batch;
        self.read_packages(false);
        n
    }

    /// The kernel's "ring half full" notices since the last call, consumed (the drain that
    /// follows is what they ask for).
    pub fn take_wakes(&mut self) -> usize {
        self.sampler.take_wakes().len()
    }

    /// Drains every record in time order into the attributor and the sink, closing each
    /// interval whose end the records pass, then the ends up to `now_ns` that no record
    /// passed: an interval is closed on the records' clock however late the drain, so the
    /// loop can sleep for several intervals. Returns the records drained and whether to go on
    /// (false: the sink asked to stop).
    pub fn drain_into(
        &mut self,
        sink: &mut dyn Sink,
        ends: &mut IntervalEnds,
        now_ns: u64,
    ) -> std::io::Result<(usize, bool)> {
        let mut batch = std::mem::take(&mut self.batch);
        let mut order = std::mem::take(&mut self.order);
        batch.clear();
        order.clear();
        let n = self.sampler.drain_append(&mut batch);
        order.extend(batch.iter().enumerate().map(|(i, r)| (r.t_ns, i as u32)));
        // Each CPU's records come in order; across CPUs they are merged by time (a CPU's
        // records of one instant keep their drain order). Keys are sorted, not the 240-byte
        // records: at a switch storm's 100k records a second, moving those cost more than the
        // rest of the drain. The stable sort finds the CPUs' runs already in order and merges
        // them (n log CPUs), where an unstable one sorts from scratch (n log n).
        order.sort_by_key(|&(t, _)| t);
        let mut go_on = true;
        let mut result = Ok(());
        for r in order.iter().map(|&(_, i)| &batch[i as usize]) {
            while go_on && r.t_ns > ends.next_ns && ends.next_ns <= now_ns {
                go_on = self.close_at(ends, sink)?;
            }
            if !go_on {
                break;
            }
            self.attr.push_tick(r);
            if let Err(e) = sink.tick(r) {
                result = Err(e);
                break;
            }
        }
        self.batch = batch;
        self.order = order;
        result?;
        self.read_packages(false);
        while go_on && ends.next_ns <= now_ns {
            go_on = self.close_at(ends, sink)?;
        }
        Ok((n, go_on))
    }

    /// Closes the interval ending at `ends.next_ns`, hands it to the sink and moves the end on.
    fn close_at(&mut self, ends: &mut IntervalEnds, sink: &mut dyn Sink) -> std::io::Result<bool> {
        self.count_lost();
        let mut result = self.attr.close_interval(ends.next_ns);
        self.add_channels(&mut result);
        ends.advance();
        self.say_fallbacks(&result, sink);
        sink.interval(&result)
    }

    /// Tells the sink, once a run, that weights fell back to time.
    fn say_fallbacks(&mut self, r: &IntervalResult, sink: &mut dyn Sink) {
        if r.weight_fallbacks > 0 && !self.fallbacks_said {
            self.fallbacks_said = true;
            sink.notice(&fallback_notice(r));
        }
    }

    fn count_lost(&mut self) {
        let lost = self.sampler.lost_records();
        self.attr
            .add_lost_samples(lost.saturating_sub(self.lost_seen));
        self.lost_seen = lost;
    }

    /// Ends the interval now (the run when `last`): every package is read first, so the
    /// interval holds its traffic up to its end.
    pub fn close(&mut self, last: bool) -> IntervalResult {
        self.read_packages(true);
        self.count_lost();
        let t = crate::sampler::monotonic_ns();
        let mut result = if last {
            self.attr.finish(t)
        } else {
            self.attr.close_interval(t)
        };
        self.add_channels(&mut result);
        result
    }

    /// Each channel's counts since the last interval end into its package's row (nothing the
    /// first time: that reading is the baseline).
    fn add_channels(&mut self, result: &mut IntervalResult) {
        let Some(last) = self.channels.as_mut() else {
            return;
        };
        let now = self.sampler.read_channels();
        if last.len() == now.len() {
            for (c, prev) in now.iter().zip(last.iter()) {
                if let Some(p) = result.packages.iter_mut().find(|p| p.id == c.package) {
                    p.channels.push(crate::output::interval::ChannelRow {
                        channel: c.channel.clone(),
                        slot: c.slot,
                        counts: (c.value - prev).max(0.0),
                    });
                }
            }
        }
        *last = now.iter().map(|c| c.value).collect();
    }

    fn read_packages(&mut self, all: bool) {
        let attr = &mut self.attr;
        self.sampler.read_idle_packages(all, |pkg, slot, t, sum| {
            attr.push_package_read(pkg, slot, t, sum)
        });
    }
}

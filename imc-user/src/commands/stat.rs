//! `imc stat`: system memory bandwidth per package (and channel) at an interval down to 1 ms.
//!
//! Chooses a backend (the memory controller's kernel PMU first, the MCHBAR mapping as the
//! fallback, or the `-e` events), runs the interval loop until `--duration`, the child of
//! `-- CMD` exits, or SIGINT/SIGTERM, and converts every module error into a one-line
//! `CliError` here.
use crate::cli::{BackendChoice, GlobalArgs, StatArgs};
use crate::commands::sampling::{print_plan, resolve_events, stand_in_for};
use crate::counting::clock::{Clock, MonotonicClock};
use crate::counting::mchbar::MchbarBackend;
use crate::counting::perf::PerfBackend;
use crate::counting::stat_loop::{self, RunSummary};
use crate::counting::{Backend, BackendError, from_plan};
use crate::error::{CliError, CliResult, ErrorKind};
use crate::model::{BackendKind, Discovery};
use crate::output::stat::{Format, StatWriter};
use crate::plan::{CommandKind, Kernel, Plan, PlanSource, Request};
use crate::settings::Settings;
use crate::sys::devmem::{DevMem, RealDevMem};
use crate::sys::perf::{PerfSys, RealPerf};
use crate::text::error_line;
use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The OS edges `stat` uses, so tests can run the whole command with fakes.
pub struct StatEnv<'a> {
    pub perf: Arc<dyn PerfSys>,
    pub devmem: &'a dyn DevMem,
    pub clock: &'a dyn Clock,
}

/// Set by SIGINT/SIGTERM (stop after one last interval) and SIGCHLD (the child may be done).
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);
static CHILD_SIGNAL: AtomicBool = AtomicBool::new(false);

/// Whether the counters run. Before, there is nothing to finish: a stop signal during
/// discovery and planning ends imc at once, as with no handler at all.
static RUNNING: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(sig: libc::c_int) {
    if !RUNNING.load(Ordering::SeqCst) {
        // SAFETY: signal and raise are async-signal-safe; the signal is blocked while this
        // handler runs, so it is delivered, with the default action, when the handler returns.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
        return;
    }
    STOP_SIGNAL.store(sig, Ordering::SeqCst);
}

extern "C" fn on_child(_sig: libc::c_int) {
    CHILD_SIGNAL.store(true, Ordering::SeqCst);
}

fn install(sig: libc::c_int, handler: extern "C" fn(libc::c_int)) {
    // SAFETY: the handlers only store to atomics (async-signal-safe); no SA_RESTART, so the
    // interval sleep returns at once and the loop sees the flag.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

pub fn run(global: &GlobalArgs, args: &StatArgs) -> CliResult<ExitCode> {
    install(libc::SIGINT, on_stop);
    install(libc::SIGTERM, on_stop);
    install(libc::SIGCHLD, on_child);
    let env = StatEnv {
        perf: Arc::new(RealPerf),
        devmem: &RealDevMem,
        clock: &MonotonicClock,
    };
    let stdout = io::stdout().lock();
    let mut stderr = io::stderr().lock();
    run_with(global, args, &env, io::BufWriter::new(stdout), &mut stderr)
}

/// Discovery under `--root`, its error as one line; bad input (a wrong `--root`) is exit 2.
fn discover(root: &Path) -> CliResult<Discovery> {
    crate::discovery::discover(root)
        .map_err(|e| CliError::from(e).context("cannot discover counters"))
}

/// `stat` with its OS edges given: what `run` does, and what tests drive with fakes.
pub fn run_with<W: Write>(
    global: &GlobalArgs,
    args: &StatArgs,
    env: &StatEnv<'_>,
    out: W,
    err: &mut dyn Write,
) -> CliResult<ExitCode> {
    let format = check_args(args)?;
    let duration_ns = args.duration.map(|s| (s * 1e9).round() as u64);
    // A mistyped IMC_STAT_MODE is bad input, said before anything opens.
    let mode =
        read_mode(crate::settings::get()).map_err(|e| CliError::new(ErrorKind::BadInput, e))?;

    if !args.dry_run {
        crate::commands::sampling::check_program(&args.command)?;
    }
    let discovery = discover(&global.root)?;
    if args.dry_run {
        let plan = plan_of(global, args, &discovery, Vec::new())?;
        return print_plan(&plan, args.json);
    }
    let mut backend = open_backend(global, args, env, mode, &discovery, err)?;
    for f in backend.take_failures() {
        warn_failure(err, &f);
    }

    // From here a stop signal ends the run with its last interval.
    RUNNING.store(true, Ordering::SeqCst);
    // Start the child only once the counters count, as perf stat does.
    let mut child = start_command(&args.command)?;

    let mut layout = stat_loop::Layout::new(backend.as_ref());
    set_peaks(&mut layout, &global.root, &discovery);
    if args.per_channel && layout.packages.iter().all(|p| p.channels.is_empty()) {
        // Said, not silently ignored: a VM's stand-in (or an -e event) has no channels.
        let _ = writeln!(
            err,
            "imc: --per-channel: {} counts no memory channels (channels come from a memory controller's PMU instances; a VM has none), so only totals are shown",
            crate::text::escape(&layout.source)
        );
    }
    let mut writer = StatWriter::new(out, format, args.per_channel, &layout);
    // --latency (KNL): the average-latency column (commands/latency.rs).
    if let Some(req) = &args.latency {
        writer.set_latency(super::latency::columns(&layout, req));
        // Off KNL: the queue latency per package and channel.
        writer.set_queues(crate::counting::latency::QueueLayout::new(
            backend.counters(),
        ));
    }
    let mut child_status: Option<std::process::ExitStatus> = None;
    let result = {
        let mut stop = stop_when(&mut child, &mut child_status);
        let mut failed = |f: &crate::counting::CounterFailure| warn_failure(err, f);
        stat_loop::run(
            backend.as_mut(),
            env.clock,
            &layout,
            args.interval_ms.saturating_mul(1_000_000),
            duration_ns,
            &mut stop,
            &mut writer,
            &mut failed,
        )
    };
    let summary: Option<RunSummary> = match result {
        Ok(s) => Some(s),
        // The reader went away (`imc stat | head`): a normal end.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => None,
        Err(e) => return Err(CliError::output(e)),
    };
    if global.verbose > 0 {
        say_run_stats(err, summary, backend.as_ref());
    }
    match child {
        Some(c) => end_command(c, child_status),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// The arguments checked before anything is read: the output format they ask for.
fn check_args(args: &StatArgs) -> CliResult<Format> {
    let format = match (&args.separator, args.json) {
        (Some(sep), _) if sep.is_empty() => {
            return Err(CliError::bad_input("-x: the separator must not be empty"));
        }
        (Some(sep), _) => Format::Csv(sep.clone()),
        (None, true) => Format::Json,
        (None, false) => Format::Human,
    };
    if args.interval_ms == 0 {
        return Err(CliError::bad_input(
            "-I 0: the interval must be at least 1 ms",
        ));
    }
    if args.duration.is_some() && !args.command.is_empty() {
        return Err(CliError::bad_input(
            "--duration and -- CMD both say when to stop: give one of them",
        ));
    }
    Ok(format)
}

/// A counter that failed: the run goes on with the others.
fn warn_failure(err: &mut dyn Write, f: &crate::counting::CounterFailure) {
    let _ = writeln!(
        err,
        "imc: warning: {}; continuing with the other counters",
        f.message
    );
}

/// `-- CMD ARGS` started, if given, set to die with imc (as `top` and `record` start theirs).
/// A command that cannot be started is bad input, exit 2, as it is for `record -- CMD`.
fn start_command(command: &[std::ffi::OsString]) -> CliResult<Option<std::process::Child>> {
    use std::os::unix::process::CommandExt;
    let Some((cmd, rest)) = command.split_first() else {
        return Ok(None);
    };
    let mut child = std::process::Command::new(cmd);
    child.args(rest);
    let imc_pid = std::process::id();
    // SAFETY: the hook makes only async-signal-safe calls (prctl, getppid).
    unsafe {
        child.pre_exec(move || crate::sys::thread::die_with_parent(imc_pid));
    }
    child.spawn().map(Some).map_err(|e| {
        CliError::bad_input_because(format!("cannot run '{}'", crate::text::quote_os(cmd)), e)
    })
}

/// When the run stops: when the command exits (its status kept in `status`), else at SIGINT or
/// SIGTERM.
fn stop_when<'a>(
    child: &'a mut Option<std::process::Child>,
    status: &'a mut Option<std::process::ExitStatus>,
) -> impl FnMut() -> bool + 'a {
    move || -> bool {
        match child {
            Some(c) => {
                // SIGCHLD tells us when to look; try_wait is a syscall, so only then.
                if CHILD_SIGNAL.swap(false, Ordering::SeqCst)
                    && let Ok(Some(s)) = c.try_wait()
                {
                    *status = Some(s);
                    return true;
                }
                status.is_some()
            }
            None => STOP_SIGNAL.load(Ordering::SeqCst) != 0,
        }
    }
}

/// `-v`: the deadlines the loop missed and the backend's own figures.
fn say_run_stats(err: &mut dyn Write, summary: Option<RunSummary>, backend: &dyn Backend) {
    if let Some(s) = summary
        && s.skipped > 0
    {
        let _ = writeln!(
            err,
            "imc: {} interval deadline(s) missed (late wake-ups); those intervals were longer",
            s.skipped
        );
    }
    if let Some(s) = backend.run_stats() {
        let _ = writeln!(err, "imc: {s}");
    }
}

/// The measured command's exit status (waited for if the run stopped first) as imc's.
fn end_command(
    mut c: std::process::Child,
    status: Option<std::process::ExitStatus>,
) -> CliResult<ExitCode> {
    let status = match status {
        Some(s) => s,
        None => c
            .wait()
            .map_err(|e| CliError::runtime_because("waiting for the command", e))?,
    };
    Ok(exit_code_of(status))
}

/// Fills in the theoretical peak of each package (and channel) from the SMBIOS memory devices
/// under `root`: the slowest installed device's transfers/s × data width, times the package's
/// channels. A source with one PMU per channel says how many channels a package has; otherwise
/// each installed device is taken as one channel, spread evenly over the packages (a board with
/// two devices per channel then shows half the true utilisation). MCDRAM is not in SMBIOS, nor
/// is a CXL expander: a package with one has the peak of its DRAM channels.
fn set_peaks(layout: &mut stat_loop::Layout, root: &Path, discovery: &Discovery) {
    use crate::counting::Memory;
    if layout.packages.is_empty() {
        return;
    }
    if layout
        .packages
        .iter()
        .any(|p| p.memories.contains(&Memory::Mcdram))
    {
        layout.peak_unknown = Some("SMBIOS does not describe MCDRAM".to_string());
        return;
    }
    let devices = crate::discovery::dmi::read_memory_devices(root);
    for e in &devices.errors {
        log::info!("{e}");
    }
    let Some(channel) = devices.channel_peak() else {
        let dir = root.join("sys/firmware/dmi/entries");
        layout.peak_unknown = Some(if devices.errors.is_empty() {
            format!(
                "no SMBIOS memory device with a speed and width under {}",
                dir.display()
            )
        } else {
            devices.errors[0].clone()
        });
        return;
    };
    let packages = discovery.topology.packages.len().max(layout.packages.len());
    for p in &mut layout.packages {
        // SMBIOS describes the DIMMs: a CXL device is no channel of the peak.
        let dram = p.channels.iter().filter(|(m, _)| *m != Memory::Cxl).count();
        p.peak_bytes_per_s = devices.package_peak(dram, packages);
        p.channel_peak_bytes_per_s = (dram > 1).then_some(channel);
    }
}

/// The child's status as ours: its exit code, or 128+N when signal N killed it (as shells do).
fn exit_code_of(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        ExitCode::from(code as u8)
    } else if let Some(sig) = status.signal() {
        ExitCode::from((128 + sig) as u8)
    } else {
        ExitCode::FAILURE
    }
}

/// Opens the counters of a plan.
fn open_planned(
    global: &GlobalArgs,
    env: &StatEnv<'_>,
    mode: ReadMode,
    discovery: &Discovery,
    plan: &Plan,
    interval_ns: u64,
) -> Result<Box<dyn Backend>, BackendError> {
    if from_plan::is_mchbar(plan) {
        let counters = from_plan::mchbar_counters(plan)?;
        return Ok(Box::new(MchbarBackend::open(
            env.devmem,
            &global.devmem,
            counters,
        )?));
    }
    let counters = from_plan::perf_counters(plan, &discovery.topology);
    if counters.is_empty() {
        return Err(BackendError::Plan(format!(
            "{}: discovery found no read/write events to open",
            plan.source
        )));
    }
    let name = if plan.source == PlanSource::Backend(BackendKind::KnlEdc) {
        "knl-imc+knl-edc".to_string()
    } else {
        plan.source.to_string()
    };
    Ok(Box::new(open_perf(
        env,
        mode,
        &name,
        counters,
        interval_ns,
    )?))
}

/// Intervals up to this long use kernel-timed sampling by default: there the cost of waking and
/// reading at every boundary dominates; longer ones wake a few times a second at most, and each
/// wake-up reads every counter at its deadline.
const TIMED_UP_TO_NS: u64 = 100_000_000;

/// How perf counters are read; `IMC_STAT_MODE` forces one (tests, and a way around a kernel
/// whose sampling misbehaves).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadMode {
    /// Kernel-timed for intervals up to `TIMED_UP_TO_NS` when the kernel allows the grouping,
    /// else deadline reads.
    Auto,
    /// A userspace read of every counter at each absolute deadline.
    Deadline,
    /// Kernel-timed whatever the interval; an error when the kernel refuses it.
    KernelTimed,
}

fn read_mode(settings: &Settings) -> Result<ReadMode, BackendError> {
    // IMC_STAT_KERNEL_TIMED=1 asks for kernel-timed reads, as IMC_STAT_MODE=kernel-timed does.
    if settings.stat_kernel_timed {
        return Ok(ReadMode::KernelTimed);
    }
    match settings.stat_mode.as_deref() {
        None | Some("") | Some("auto") => Ok(ReadMode::Auto),
        Some("deadline") => Ok(ReadMode::Deadline),
        Some("kernel-timed") => Ok(ReadMode::KernelTimed),
        Some(other) => Err(BackendError::Plan(format!(
            "IMC_STAT_MODE={other}: unknown mode (one of auto, deadline, kernel-timed)"
        ))),
    }
}

/// Opens perf counters, kernel-timed for short intervals when the kernel allows it.
fn open_perf(
    env: &StatEnv<'_>,
    mode: ReadMode,
    name: &str,
    planned: Vec<from_plan::PerfCounter>,
    interval_ns: u64,
) -> Result<PerfBackend, BackendError> {
    let timed = match mode {
        ReadMode::Auto => interval_ns <= TIMED_UP_TO_NS,
        ReadMode::Deadline => false,
        ReadMode::KernelTimed => true,
    };
    if timed {
        match PerfBackend::open_timed(
            env.perf.clone(),
            name,
            planned.clone(),
            interval_ns,
            env.clock,
        ) {
            Ok(b) => {
                log::info!("{name}: kernel-timed reads every {} ns", interval_ns);
                return Ok(b);
            }
            Err(e) if mode == ReadMode::KernelTimed => {
                return Err(BackendError::Plan(format!(
                    "IMC_STAT_MODE=kernel-timed: {}; unset it to read at each interval",
                    error_line(&e)
                )));
            }
            Err(e) => log::info!(
                "{name}: reading counters at each interval instead: {}",
                error_line(&e)
            ),
        }
    }
    PerfBackend::open(env.perf.clone(), name, planned)
}

/// The plan of this `imc stat` (without the backends in `exclude`, which failed to open).
pub fn plan_of(
    global: &GlobalArgs,
    args: &StatArgs,
    discovery: &Discovery,
    exclude: Vec<BackendKind>,
) -> CliResult<Plan> {
    let req = Request {
        command: CommandKind::Stat,
        events: resolve_events(global, &args.events)?,
        backend: args.backend.kind(),
        exclude,
        freq: None,
        precise: false,
        interval_ms: args.interval_ms,
        drain_ms: args.interval_ms,
        batch_ms: None,
        stand_in: stand_in_for(global, discovery, &args.events, args.backend)?,
        latency: args
            .latency
            .as_deref()
            .map(|types| super::latency::request(&global.root, discovery, types))
            .transpose()?,
        weight: Default::default(),
        stacks: None,
    };
    crate::plan::plan(discovery, &Kernel::read(&global.root), &req).map_err(CliError::from)
}

/// Opens the planned counters; with `--backend auto` a memory controller whose counters do not
/// open gives way to the next one the plan finds.
fn open_backend(
    global: &GlobalArgs,
    args: &StatArgs,
    env: &StatEnv<'_>,
    mode: ReadMode,
    discovery: &Discovery,
    err: &mut dyn Write,
) -> CliResult<Box<dyn Backend>> {
    let interval_ns = args.interval_ms.saturating_mul(1_000_000);
    let mut exclude = Vec::new();
    let mut first_err: Option<BackendError> = None;
    loop {
        let plan = match plan_of(global, args, discovery, exclude.clone()) {
            Ok(p) => p,
            Err(e) if first_err.is_some() && !exclude.is_empty() => {
                log::info!("{}", error_line(&e));
                break;
            }
            Err(e) => return Err(e),
        };
        match open_planned(global, env, mode, discovery, &plan, interval_ns) {
            Ok(b) => {
                // Said once it counts: a stand-in that does not open is its error alone.
                if let Some(notice) = crate::plan::stand_in::notice(&plan, "system-wide") {
                    let _ = writeln!(err, "imc: {}", crate::text::escape(&notice));
                }
                return Ok(b);
            }
            Err(e) => {
                let retry = args.events.is_empty() && args.backend == BackendChoice::Auto;
                match plan.backend {
                    Some(b) if retry => {
                        log::info!("{}: {}", b.as_str(), error_line(&e));
                        first_err.get_or_insert(e);
                        exclude.push(b);
                        if b == BackendKind::KnlImc || b == BackendKind::KnlEdc {
                            exclude.extend([BackendKind::KnlImc, BackendKind::KnlEdc]);
                        }
                    }
                    _ => return Err(e.into()),
                }
            }
        }
    }
    Err(first_err.map_or_else(
        || CliError::runtime("no memory-controller counters could be opened"),
        CliError::from,
    ))
}

//! `imc record`: the sampling loop of `imc top`, written to a bounded recording (per-interval
//! per-task aggregates plus raw ticks around bursts; see record/FORMAT.md).
//!
//! The output is checked before anything starts (an existing file needs `--force`; a bound too
//! small for one interval is refused) and locked (`FILE.lock`, see [`WriteLock`]): a second run
//! on the same file is refused at once, naming the first, and a directory where nothing can be
//! created is found before the command starts. The file itself is created only once the run is
//! under way (the sampler loaded, the command started): a run that cannot start leaves an
//! existing file as it was.
use super::naming_sink::{Naming, cgroup_paths};
use super::sampling::{block_on, discover, package_peaks, print_plan, select_for};
use crate::cli::{GlobalArgs, GroupBy, RecordArgs};
use crate::discovery::process_tree::{ProcessTree, own_cgroup2_path};
use crate::error::{CliError, CliResult};
use crate::model::result::IntervalResult;
use crate::model::{CommandTree, PidFilter};
use crate::pipeline::{LoopOptions, Sink, sample_loop};
use crate::record::{
    HeaderCommand, MemberFn, RecordHeader, Writer, WriterStats, smallest_max_size,
};
use crate::sys::cgroup::CommandCgroup;
use crate::sys::file::{LockError, WriteLock, is_path_to_fix, what_is_there};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What the writer is made of, until the run starts.
struct Pending {
    path: PathBuf,
    header: RecordHeader,
    max_size: Option<u64>,
    force: bool,
}

struct Recorder {
    pending: Option<Pending>,
    writer: Option<Writer>,
    /// Records drained from the kernel's rings (said in the summary).
    drained: u64,
    /// `-p`: the raw records kept (the rows are the naming sink's to filter).
    pids: PidFilter,
    command: Option<ChildCommand>,
}

/// `-- CMD` and how its process tree is told apart.
struct ChildCommand {
    argv: Vec<String>,
    root: PathBuf,
    /// The cgroup made for it (until it is known whether the command joined it).
    cgroup: Option<CommandCgroup>,
    /// Why no cgroup could be made (said once the command runs).
    no_cgroup: Option<String>,
    /// How its tasks are told, once it has started.
    tree: Option<Tree>,
}

enum Tree {
    /// Its cgroup's id (exact: every descendant is born in it).
    Cgroup { pid: u32, id: u64 },
    /// /proc parentage, scanned every [`PARENTAGE_SCAN`] by a thread of its own (the loop
    /// drains as seldom as once a second) until the run ends.
    Parentage {
        pid: u32,
        procs: Arc<Mutex<ProcessTree>>,
        stop: Arc<AtomicBool>,
        scanner: Option<std::thread::JoinHandle<()>>,
    },
}

/// How often the parentage fallback reads /proc (less often where a scan takes long: a tenth
/// of a CPU at most): a child that starts and ends between two scans can be missed. Each scan
/// lists /proc and reads the `stat` of the processes new since the last.
const PARENTAGE_SCAN: std::time::Duration = std::time::Duration::from_millis(5);

fn lock(t: &Mutex<ProcessTree>) -> std::sync::MutexGuard<'_, ProcessTree> {
    t.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Tree {
    fn member_fn(&self) -> Box<MemberFn> {
        match self {
            &Tree::Cgroup { pid, id } => {
                Box::new(move |p, tgid, cg| cg == id || tgid == pid || p == pid)
            }
            Tree::Parentage { procs, .. } => {
                let procs = procs.clone();
                Box::new(move |p, tgid, _| {
                    let t = lock(&procs);
                    t.contains(tgid) || t.contains(p)
                })
            }
        }
    }

    /// Starts following `pid`'s tree through /proc.
    fn parentage(root: &Path, pid: u32) -> Tree {
        let mut first = ProcessTree::new(root, pid);
        first.scan();
        let procs = Arc::new(Mutex::new(first));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (procs.clone(), stop.clone());
        let scanner = std::thread::Builder::new()
            .name("imc-tree".into())
            .spawn(move || {
                let mut took = std::time::Duration::ZERO;
                while !s.load(Ordering::Relaxed) {
                    // At most a tenth of a CPU however many processes /proc lists.
                    std::thread::sleep(PARENTAGE_SCAN.max(took * 9));
                    let t = std::time::Instant::now();
                    lock(&p).scan();
                    took = t.elapsed();
                }
            })
            .map_err(|e| log::warn!("cannot start the /proc scanner: {e}"))
            .ok();
        Tree::Parentage {
            pid,
            procs,
            stop,
            scanner,
        }
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        if let Tree::Parentage { stop, scanner, .. } = self {
            stop.store(true, Ordering::Relaxed);
            if let Some(t) = scanner.take() {
                let _ = t.join();
            }
        }
    }
}

impl ChildCommand {
    /// Makes a cgroup for the command under imc's own (see [`CommandCgroup`]); where it cannot
    /// (no cgroup2 mount, no permission), the reason, and the tree will be followed by parentage.
    fn new(global: &GlobalArgs, argv: &[std::ffi::OsString]) -> ChildCommand {
        let made = crate::discovery::cgroup::find_cgroup2_mount(&global.root)
            .map_err(|e| e.to_string())
            .and_then(|mount| {
                let own = own_cgroup2_path(&global.root)
                    .ok_or_else(|| "imc's own cgroup v2 path is unknown".to_string())?;
                let parent = mount.join(own.trim_start_matches('/'));
                CommandCgroup::create(&mount, &parent)
                    .map_err(|e| format!("{}: {e}", parent.display()))
            });
        let (cgroup, no_cgroup) = match made {
            Ok(c) => (Some(c), None),
            Err(e) => (None, Some(e)),
        };
        ChildCommand {
            argv: argv
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            root: global.root.clone(),
            cgroup,
            no_cgroup,
            tree: None,
        }
    }

    /// The command runs as `pid`: in its cgroup if it joined it, else followed by parentage.
    fn started(&mut self, pid: u32) -> HeaderCommand {
        let joined = self.cgroup.as_ref().is_some_and(|c| {
            std::fs::read_to_string(self.root.join(format!("proc/{pid}/cgroup")))
                .is_ok_and(|t| t.lines().any(|l| l.strip_prefix("0::") == Some(c.path())))
        });
        let mut header = HeaderCommand {
            argv: self.argv.clone(),
            pid,
            tree: CommandTree::Cgroup,
            cgroup_id: None,
            cgroup_path: None,
        };
        match self.cgroup.as_ref().filter(|_| joined) {
            Some(c) => {
                header.cgroup_id = Some(c.id());
                header.cgroup_path = Some(c.path().to_owned());
                self.tree = Some(Tree::Cgroup { pid, id: c.id() });
            }
            None => {
                let why = self.no_cgroup.clone().unwrap_or_else(|| {
                    "the command did not join the cgroup made for it".to_string()
                });
                log::warn!(
                    "the command's own cgroup: {why}; its process tree is followed through /proc \
                     parentage instead, which misses a child that starts and ends between two scans"
                );
                header.tree = CommandTree::Parentage;
                self.tree = Some(Tree::parentage(&self.root, pid));
            }
        }
        header
    }

    /// How the tree was told, for the summary.
    fn said(&self) -> String {
        match &self.tree {
            Some(Tree::Cgroup { pid, .. }) => format!(
                "; the command (pid {pid}) marked by its cgroup {}",
                self.cgroup.as_ref().map_or("", |c| c.path())
            ),
            Some(Tree::Parentage { pid, procs, .. }) => format!(
                "; the command (pid {pid}) marked by /proc parentage ({} processes)",
                lock(procs).len()
            ),
            None => String::new(),
        }
    }
}

impl Recorder {
    /// The writer, created at the first record or interval: the sampler runs and the command
    /// (if any) has started by then.
    fn writer(&mut self) -> std::io::Result<&mut Writer> {
        if let Some(p) = self.pending.take() {
            let mut w = create(p).map_err(std::io::Error::other)?;
            if let Some(t) = self.command.as_ref().and_then(|c| c.tree.as_ref()) {
                w.mark_command(t.member_fn());
            }
            self.writer = Some(w);
        }
        self.writer
            .as_mut()
            .ok_or_else(|| std::io::Error::other("the recording is closed"))
    }
}

fn to_io(e: crate::record::RecordError) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl Sink for Recorder {
    fn tick(&mut self, rec: &imc_common::Record) -> std::io::Result<()> {
        // `-p`: other processes' raw records are not kept either.
        if !self.pids.keeps(rec.pid, rec.tgid) {
            return Ok(());
        }
        self.writer()?.push_tick(rec).map_err(to_io)
    }

    fn interval(&mut self, r: &IntervalResult) -> std::io::Result<bool> {
        self.writer()?.push_interval(r).map_err(to_io)?;
        Ok(true)
    }

    fn stacks(&mut self, batch: &crate::model::stacks::StackBatch) -> std::io::Result<()> {
        // `-p`: other processes' stacks are not kept either.
        if self.pids.is_all() {
            return self.writer()?.push_stacks(batch).map_err(to_io);
        }
        let mut mine = batch.clone();
        mine.charges.retain(|c| self.pids.keeps(c.tgid, c.tgid));
        self.writer()?.push_stacks(&mine).map_err(to_io)
    }

    fn drained(&mut self, records: usize, _took: std::time::Duration) {
        self.drained += records as u64;
    }

    fn command_cgroup(&self) -> Option<std::os::fd::RawFd> {
        self.command
            .as_ref()
            .and_then(|c| c.cgroup.as_ref())
            .map(CommandCgroup::procs_fd)
    }

    fn command_started(&mut self, pid: u32) {
        let Some(c) = self.command.as_mut() else {
            return;
        };
        let header = c.started(pid);
        if let Some(p) = self.pending.as_mut() {
            p.header.command = Some(header);
        }
    }
}

/// Creates the file: with `--force`, whatever is at the path (a file, a symlink) is removed
/// first, and the new file is created without following symlinks either way.
fn create(p: Pending) -> CliResult<Writer> {
    if p.force {
        match std::fs::remove_file(&p.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(CliError::runtime_because(
                    format!("cannot replace {}", p.path.display()),
                    e,
                ));
            }
            _ => {}
        }
    }
    Writer::create(&p.path, p.header, p.max_size)
        .map_err(|e| CliError::from(e).context("cannot create the recording"))
}

/// Refuses, before anything starts, an output that cannot or must not be written (a recording,
/// and `report`'s --perfetto and --plot files alike): something
/// already there without `--force` (a symlink is never followed), a directory, or a directory
/// that does not exist (all bad input: the path is wrong).
pub(super) fn check_output(path: &Path, force: bool) -> CliResult<()> {
    check_output_of(path, force, "-o", "the recording")
}

/// [`check_output`] for the output given by `flag` (`-o`, `--plot`), which holds `what`.
pub(super) fn check_output_of(path: &Path, force: bool, flag: &str, what: &str) -> CliResult<()> {
    let there =
        what_is_there(path).map_err(|e| CliError::output_file(path.display().to_string(), e))?;
    match there {
        None => {}
        Some(kind @ ("a file" | "a symlink")) if !force => {
            return Err(CliError::bad_input(format!(
                "{}: {kind} is already there: give --force to replace it, or another {flag}",
                path.display()
            )));
        }
        Some("a file" | "a symlink") => {}
        Some(kind) => {
            return Err(CliError::bad_input(format!(
                "{}: is {kind}: give a file name for {what}",
                path.display()
            )));
        }
    }
    check_directory(path)
}

/// The output's directory must exist (a wrong path, bad input).
fn check_directory(path: &Path) -> CliResult<()> {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() && !d.is_dir() => Err(CliError::bad_input(format!(
            "{}: directory {} does not exist",
            path.display(),
            d.display()
        ))),
        _ => Ok(()),
    }
}

/// Locks the output for this run (see [`WriteLock`]): another run writing it is bad input
/// (exit 2, naming its pid); a directory where the lock cannot be created cannot take the
/// recording either, said before anything starts.
fn lock_output(path: &Path) -> CliResult<WriteLock> {
    WriteLock::take(path).map_err(|e| match e {
        LockError::Held { pid, lock } => CliError::bad_input(format!(
            "{}: another imc (pid {pid}) is recording to it (it holds {}): wait for it to \
             finish, or give another -o",
            path.display(),
            lock.display()
        )),
        LockError::Io { lock, source } => {
            let to_fix = is_path_to_fix(&source);
            let e = CliError::output_file(
                format!(
                    "cannot create the recording {}: {}",
                    path.display(),
                    lock.display()
                ),
                source,
            );
            if to_fix {
                e.hint("give -o a path in a directory you may write in")
            } else {
                e
            }
        }
    })
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is valid to write.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn run(global: &GlobalArgs, args: &RecordArgs) -> CliResult<ExitCode> {
    check_args(args)?;
    if !args.sampler.dry_run {
        check_pids(&global.root, &args.pid)?;
        super::sampling::check_program(&args.command)?;
    }
    // Held until the recording is finished (dropped at the end of this function).
    let mut _lock = None;
    if let Some(output) = args.output.as_deref()
        && !args.sampler.dry_run
    {
        check_directory(output)?;
        // Locked first: a file another run is writing is said to be that, not merely there.
        _lock = Some(lock_output(output)?);
        check_output(output, args.force)?;
    }
    let found = discover(global)?;
    let sel = select_for(
        global,
        &args.sampler,
        &found,
        crate::plan::CommandKind::Record,
        args.interval_ms,
    )?;
    if args.sampler.dry_run {
        return print_plan(&sel.plan, args.json);
    }
    let Some(output) = args.output.as_deref() else {
        return Err(CliError::bad_input(
            "imc record needs -o FILE (see imc record --help)",
        ));
    };
    let header = header_of(args, &found, &sel)?;
    let mut sink = Recorder {
        pending: Some(Pending {
            path: output.to_path_buf(),
            header,
            max_size: args.max_size,
            force: args.force,
        }),
        writer: None,
        drained: 0,
        pids: PidFilter::new(&args.pid),
        command: (!args.command.is_empty()).then(|| ChildCommand::new(global, &args.command)),
    };
    let opts = LoopOptions {
        interval_ms: args.interval_ms,
        duration: args.duration.map(crate::cli::seconds_duration),
        command: &args.command,
        per_channel: false,
        verbose: global.verbose,
        peaks: package_peaks(&global.root, &found, &sel.plan),
        root: global.root.clone(),
    };
    // Cgroup paths go into the recording, so a report elsewhere still names containers.
    let mut named =
        Naming::new(cgroup_paths(global), GroupBy::Pid, &mut sink).pids(PidFilter::new(&args.pid));
    let code = block_on(async { Ok(sample_loop(&opts, &found, &sel.plan, &mut named).await?) });
    finish(sink, code, output)
}

/// The options that cannot go together, each one line.
fn check_args(args: &RecordArgs) -> CliResult<()> {
    if let Some(stray) = &args.stray {
        return Err(CliError::bad_input(format!(
            "{}: the recording's name goes after -o: imc record -o {} [-- CMD]",
            stray.display(),
            stray.display()
        )));
    }
    if args.duration.is_some() && !args.command.is_empty() {
        return Err(CliError::bad_input("give --duration or -- CMD, not both"));
    }
    if !args.pid.is_empty() && !args.command.is_empty() {
        return Err(CliError::bad_input(
            "give -p PID or -- CMD, not both (-- CMD records the machine and marks the command)",
        ));
    }
    Ok(())
}

/// The recording's header as the plan and the options make it; a `--max-size` too small for
/// one interval of it is refused here, before anything is sampled.
fn header_of(
    args: &RecordArgs,
    found: &crate::model::Discovery,
    sel: &super::sampling::Selection,
) -> CliResult<RecordHeader> {
    let specs = crate::sampler::from_plan::slot_specs(&sel.plan);
    let mut header = RecordHeader::new(
        &specs,
        &found.topology,
        sel.plan.tick.hz.map_or(0, |h| h.round() as u32),
        sel.source.clone(),
        args.interval_ms * 1_000_000,
    );
    header.precise = sel.plan.records == Some(crate::plan::Records::PerSwitch);
    header.weighting.clone_from(&sel.plan.weighting);
    header.start_monotonic_ns = clock_ns(libc::CLOCK_MONOTONIC);
    header.start_realtime_ns = clock_ns(libc::CLOCK_REALTIME);
    header.pids.clone_from(&args.pid);
    if let Some(m) = args.max_size {
        let least = smallest_max_size(&header);
        if m < least {
            return Err(CliError::bad_input(format!(
                "--max-size {m}: too small for one interval of this recording in each half of the bound; give at least {}K",
                least.div_ceil(1024)
            )));
        }
    }
    Ok(header)
}

/// Whatever ended the loop (`code`), closes the file properly, so everything recorded stays
/// readable, ends the command's cgroup and says the run's line.
fn finish(mut sink: Recorder, code: CliResult<ExitCode>, output: &Path) -> CliResult<ExitCode> {
    let finished = sink.writer.take().map(Writer::finish).transpose();
    let said = sink
        .command
        .as_ref()
        .map(ChildCommand::said)
        .unwrap_or_default();
    // The command's cgroup goes with the run (what the command left running is moved out).
    drop(sink.command.take());
    match (code, finished) {
        // The loop's error is the one line to show (the file was closed as far as it could be).
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) => Err(CliError::runtime_because("cannot finish the recording", e)),
        (Ok(code), Ok(stats)) => {
            if let Some(st) = stats {
                summary(&st, output, sink.drained, &said);
            }
            Ok(code)
        }
    }
}

/// The run's one line on stderr; `drained`: records drained from the kernel's rings (a record
/// per switch with `--precise`, per task and tick otherwise: what `cargo xtask bench-overhead`
/// reports as records drained).
fn summary(st: &WriterStats, path: &Path, drained: u64, command: &str) {
    let rotated = if st.rotations > 0 {
        format!(
            " ({} rotations; the older part is in {})",
            st.rotations,
            crate::record::rotated_path(path).display()
        )
    } else {
        String::new()
    };
    eprintln!(
        "imc: recorded {} intervals, {} raw ticks around bursts, {} bytes to {}{rotated}; {drained} records drained{command}",
        st.intervals,
        st.ticks_written,
        st.bytes,
        path.display()
    );
}

/// Largest pid the kernel hands out (`PID_MAX_LIMIT` on 64-bit), when `/proc/sys/kernel/pid_max`
/// cannot be read.
const PID_MAX_LIMIT: u32 = 4 << 20;

/// `record -p` and `top -p`: every pid must be one the kernel could give (1 to pid_max) and running now
/// (`/proc/PID` under --root, which a thread id has too); otherwise one line, exit 2.
pub(super) fn check_pids(root: &Path, pids: &[u32]) -> CliResult<()> {
    let max = std::fs::read_to_string(root.join("proc/sys/kernel/pid_max"))
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
        .unwrap_or(PID_MAX_LIMIT);
    for &pid in pids {
        if pid == 0 || pid >= max {
            return Err(CliError::bad_input(format!(
                "-p {pid}: not a process id (this kernel's run from 1 to {}): give the pid of a running process",
                max - 1
            )));
        }
        if !root.join("proc").join(pid.to_string()).is_dir() {
            return Err(CliError::bad_input(format!(
                "-p {pid}: no such process is running: give the pid of a running process (ps -e lists them)"
            )));
        }
    }
    Ok(())
}

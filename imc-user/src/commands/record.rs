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
use super::sampling::{block_on, discover, print_plan, select_for};
use crate::cli::{GlobalArgs, GroupBy, RecordArgs};
use crate::error::{CliError, CliResult};
use crate::model::result::IntervalResult;
use crate::pipeline::{LoopOptions, Sink, sample_loop};
use crate::record::{RecordHeader, Writer, WriterStats, smallest_max_size};
use crate::sys::file::{LockError, WriteLock, is_bad_path, what_is_there};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

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
}

impl Recorder {
    /// The writer, created at the first record or interval: the sampler runs and the command
    /// (if any) has started by then.
    fn writer(&mut self) -> std::io::Result<&mut Writer> {
        if let Some(p) = self.pending.take() {
            self.writer = Some(create(p).map_err(|e| std::io::Error::other(e.to_string()))?);
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
    fn tick(&mut self, rec: &imc_common::TickRecord) -> std::io::Result<()> {
        self.writer()?.push_tick(rec).map_err(to_io)
    }

    fn interval(&mut self, r: &IntervalResult) -> std::io::Result<bool> {
        self.writer()?.push_interval(r).map_err(to_io)?;
        Ok(true)
    }

    fn drained(&mut self, records: usize, _took: std::time::Duration) {
        self.drained += records as u64;
    }
}

/// Creates the file: with `--force`, whatever is at the path (a file, a symlink) is removed
/// first, and the new file is created without following symlinks either way.
fn create(p: Pending) -> CliResult<Writer> {
    if p.force {
        match std::fs::remove_file(&p.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(CliError::runtime(format!(
                    "cannot replace {}: {e}",
                    p.path.display()
                )));
            }
            _ => {}
        }
    }
    Writer::create(&p.path, p.header, p.max_size)
        .map_err(|e| CliError::runtime(format!("cannot create the recording: {e}")))
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
        what_is_there(path).map_err(|e| CliError::runtime(format!("{}: {e}", path.display())))?;
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
            let msg = format!(
                "cannot create the recording {}: {}: {source}",
                path.display(),
                lock.display()
            );
            if is_bad_path(&source) {
                CliError::bad_input(msg)
            } else {
                CliError::runtime(msg)
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
        crate::plan::Command::Record,
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
    if let Some(m) = args.max_size {
        let least = smallest_max_size(&header);
        if m < least {
            return Err(CliError::bad_input(format!(
                "--max-size {m}: too small for one interval of this recording in each half of the bound; give at least {}K",
                least.div_ceil(1024)
            )));
        }
    }
    let mut sink = Recorder {
        pending: Some(Pending {
            path: output.to_path_buf(),
            header,
            max_size: args.max_size,
            force: args.force,
        }),
        writer: None,
        drained: 0,
    };
    let opts = LoopOptions {
        interval_ms: args.interval_ms,
        duration: args.duration.map(crate::cli::seconds_duration),
        command: &args.command,
        per_channel: false,
        verbose: global.verbose,
    };
    // Cgroup paths go into the recording, so a report elsewhere still names containers.
    let mut named = Naming::new(cgroup_paths(global), GroupBy::Pid, &mut sink);
    let code = block_on(async { Ok(sample_loop(&opts, &found, &sel.plan, &mut named).await?) });
    // Whatever ended the loop, close the file properly: everything recorded stays readable.
    let finished = sink.writer.take().map(Writer::finish).transpose();
    match (code, finished) {
        // The loop's error is the one line to show (the file was closed as far as it could be).
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) => Err(CliError::runtime(format!(
            "cannot finish the recording: {e}"
        ))),
        (Ok(code), Ok(stats)) => {
            if let Some(st) = stats {
                summary(&st, output, sink.drained);
            }
            Ok(code)
        }
    }
}

/// The run's one line on stderr; `drained`: records drained from the kernel's rings (a record
/// per switch with `--precise`, per task and tick otherwise: what `cargo xtask bench-overhead`
/// reports as records drained).
fn summary(st: &WriterStats, path: &Path, drained: u64) {
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
        "imc: recorded {} intervals, {} raw ticks around bursts, {} bytes to {}{rotated}; {drained} records drained",
        st.intervals,
        st.ticks_written,
        st.bytes,
        path.display()
    );
}

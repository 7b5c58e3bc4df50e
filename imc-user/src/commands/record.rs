//! `imc record`: the sampling loop of `imc top`, written to a bounded recording (per-interval
//! per-task aggregates plus raw ticks around bursts; see record/FORMAT.md).
use super::names::Naming;
use super::sampling::{LoopOptions, Sink, block_on, discover, sample_loop, select};
use crate::cli::{GlobalArgs, GroupBy, RecordArgs};
use crate::error::{CliError, CliResult};
use crate::output::interval::IntervalResult;
use crate::record::{RecordHeader, Writer};
use std::process::ExitCode;

struct Recorder {
    writer: Option<Writer>,
    intervals: u64,
}

fn to_io(e: crate::record::RecordError) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl Sink for Recorder {
    fn tick(&mut self, rec: &imc_common::TickRecord) -> std::io::Result<()> {
        match self.writer.as_mut() {
            Some(w) => w.push_tick(rec).map_err(to_io),
            None => Ok(()),
        }
    }

    fn interval(&mut self, r: &IntervalResult) -> std::io::Result<bool> {
        self.intervals += 1;
        if let Some(w) = self.writer.as_mut() {
            w.push_interval(r).map_err(to_io)?;
        }
        Ok(true)
    }
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
    if args.duration.is_some() && !args.command.is_empty() {
        return Err(CliError::bad_input("give --duration or -- CMD, not both"));
    }
    let found = discover(global)?;
    let sel = select(global, &args.sampler, &found)?;
    let specs: Vec<_> = sel.plans.iter().map(|p| p.spec.clone()).collect();
    let mut header = RecordHeader::new(
        &specs,
        &found.topology,
        args.sampler.freq,
        sel.source.clone(),
        args.interval_ms * 1_000_000,
    );
    header.precise = args.sampler.precise;
    header.start_monotonic_ns = clock_ns(libc::CLOCK_MONOTONIC);
    header.start_realtime_ns = clock_ns(libc::CLOCK_REALTIME);
    // The writer's error already names the file; add what to do about the usual cause.
    let writer = Writer::create(&args.output, header, args.max_size).map_err(|e| {
        let hint = match args.output.parent() {
            Some(d) if !d.as_os_str().is_empty() && !d.is_dir() => {
                format!(" (directory {} does not exist)", d.display())
            }
            _ => String::new(),
        };
        CliError::runtime(format!("cannot create the recording: {e}{hint}"))
    })?;
    let mut sink = Recorder {
        writer: Some(writer),
        intervals: 0,
    };
    let opts = LoopOptions {
        sampler: &args.sampler,
        interval_ms: args.interval_ms,
        duration: args.duration,
        command: &args.command,
    };
    // Cgroup paths go into the recording, so a report elsewhere still names containers.
    let mut named = Naming::new(global, GroupBy::Pid, &mut sink);
    let code = block_on(sample_loop(global, &opts, &found, sel, &mut named));
    // Whatever ended the loop, close the file properly: everything recorded stays readable.
    let stats = sink
        .writer
        .take()
        .map(|w| w.finish())
        .transpose()
        .map_err(|e| CliError::runtime(format!("{}: {e}", args.output.display())))?;
    if let Some(st) = stats {
        eprintln!(
            "imc: recorded {} intervals, {} raw ticks around bursts, {} bytes to {}",
            st.intervals,
            st.ticks_written,
            st.bytes,
            args.output.display()
        );
    }
    code
}

//! `imc top`: live per-process memory bandwidth from the eBPF tick sampler.
//!
//! What is counted: the `-e` events if given; else the memory controller's read/write counters
//! (package scope); else, on machines without one (a VM), a stand-in said so on stderr and in
//! every object's `source`: core LLC misses where a core PMU exists, else page faults (see
//! [`super::sampling`]).
use super::sampling::{LoopOptions, Sink, block_on, discover, sample_loop, select};
use crate::cli::{GlobalArgs, TopArgs};
use crate::error::CliResult;
use crate::output::interval::IntervalResult;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

struct Printer {
    json: bool,
    top: usize,
    out: std::io::StdoutLock<'static>,
}

impl Sink for Printer {
    fn interval(&mut self, r: &IntervalResult) -> std::io::Result<bool> {
        match print_result(&mut self.out, r, self.json, self.top) {
            Ok(()) => Ok(true),
            // The reader went away (`imc top --json | head`): stop quietly, like cat.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
            Err(e) => Err(e),
        }
    }
}

pub fn run(global: &GlobalArgs, args: &TopArgs) -> CliResult<ExitCode> {
    let found = discover(global)?;
    let sel = select(global, &args.sampler, &found)?;
    let json = args.json || !std::io::stdout().is_terminal();
    let mut sink = Printer {
        json,
        top: args.top,
        out: std::io::stdout().lock(),
    };
    let opts = LoopOptions {
        sampler: &args.sampler,
        interval_ms: args.interval_ms,
        duration: args.duration,
        command: &[],
    };
    block_on(sample_loop(global, &opts, &found, sel, &mut sink))
}

fn print_result(
    out: &mut impl Write,
    r: &IntervalResult,
    json: bool,
    top: usize,
) -> std::io::Result<()> {
    if json {
        serde_json::to_writer(&mut *out, r)?;
        writeln!(out)?;
        return out.flush();
    }
    // A plain refreshing table on a terminal.
    write!(out, "\x1b[H\x1b[2J")?;
    let secs = r.t_end_ns.saturating_sub(r.t_start_ns) as f64 / 1e9;
    writeln!(
        out,
        "imc top — source {} — interval {:.2} s — lost samples {}",
        r.source, secs, r.lost_samples
    )?;
    for p in &r.packages {
        writeln!(
            out,
            "package {}: read {:.1} MB/s  write {:.1} MB/s",
            p.id,
            p.read_bytes as f64 / secs.max(1e-9) / 1e6,
            p.write_bytes as f64 / secs.max(1e-9) / 1e6
        )?;
    }
    writeln!(
        out,
        "unattributed: {:.1} MB/s",
        r.unattributed_bytes as f64 / secs.max(1e-9) / 1e6
    )?;
    writeln!(
        out,
        "{:>8} {:>8} {:<16} {:>12} {:>12} {:>7}  values",
        "PID", "TGID", "COMM", "READ MB/s", "WRITE MB/s", "SHARE"
    )?;
    let n = if top == 0 {
        r.tasks.len()
    } else {
        top.min(r.tasks.len())
    };
    for t in &r.tasks[..n] {
        let vals: Vec<String> = t
            .values
            .iter()
            .map(|(k, v)| format!("{k}={v:.0}"))
            .collect();
        writeln!(
            out,
            "{:>8} {:>8} {:<16} {:>12.1} {:>12.1} {:>6.1}%  {}",
            t.pid,
            t.tgid,
            t.comm,
            t.read_bytes as f64 / secs.max(1e-9) / 1e6,
            t.write_bytes as f64 / secs.max(1e-9) / 1e6,
            t.share * 100.0,
            vals.join(" ")
        )?;
    }
    out.flush()
}

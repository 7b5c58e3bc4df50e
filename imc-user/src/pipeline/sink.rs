//! Where the sampling loop's intervals (and records) go.
use crate::model::result::IntervalResult;
use std::time::Duration;

/// Where the sampling loop's output goes: `imc top` prints intervals, `imc record` writes
/// ticks and intervals to a recording.
pub trait Sink {
    /// Every record, in time order (each drain's records merged across CPUs), before the
    /// intervals they end.
    fn tick(&mut self, _rec: &imc_common::Record) -> std::io::Result<()> {
        Ok(())
    }
    /// The stacks charged since the last drain (where the plan takes stacks), resolved.
    fn stacks(&mut self, _batch: &crate::model::stacks::StackBatch) -> std::io::Result<()> {
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

    /// Where `-- CMD` is to start: the open `cgroup.procs` of a cgroup v2 directory that the
    /// command joins between fork and exec (`imc record` marks the command's tree by it); None:
    /// imc's own cgroup.
    fn command_cgroup(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    /// Once `-- CMD` has started, before any of its records are drained: its pid.
    fn command_started(&mut self, _pid: u32) {}

    /// Something the user must be told once while the loop runs (one line, no `imc:` prefix);
    /// on stderr unless the sink shows it itself (the live view's header).
    fn notice(&mut self, line: &str) {
        eprintln!("imc: {}", crate::text::escape(line));
    }
}

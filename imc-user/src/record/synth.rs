//! A synthetic scenario recorded the way `imc record` records (attributor → writer): the
//! recording side of `attribution::synth`, for the tests and the accuracy harness.
use super::{RecordError, RecordHeader, Writer, WriterOptions, WriterStats};
use crate::attribution::Attributor;
use crate::attribution::synth::{Scenario, SynthItem, Truth};

/// Records a scenario the way `imc record` does (attributor → writer, intervals of
/// `interval_ns`) into `path`, replacing it, returning the writer's statistics and the truth.
pub fn record_scenario(
    sc: &Scenario,
    path: &std::path::Path,
    interval_ns: u64,
    max_size: Option<u64>,
    opts: WriterOptions,
) -> Result<(WriterStats, Truth), RecordError> {
    // A test's or benchmark's own file, rewritten on every run (the writer only creates new
    // files).
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(RecordError::Io {
                path: path.to_path_buf(),
                source: e,
            });
        }
        _ => {}
    }
    let specs = sc.specs();
    let topo = sc.topology();
    let mut header = RecordHeader::new(&specs, &topo, sc.freq_hz, "intel-uncore-imc", interval_ns);
    header.precise = sc.precise;
    let mut w = Writer::with_options(path, header, max_size, opts)?;
    let mut a = Attributor::new(&specs, &topo, "intel-uncore-imc").tick_hz(sc.freq_hz);
    let mut sc = sc.clone();
    sc.mark_every_ns = Some(interval_ns);
    let mut stream = sc.stream();
    for it in stream.by_ref() {
        match it {
            SynthItem::Tick(r) => {
                a.push_tick(&r);
                w.push_tick(&r)?;
            }
            SynthItem::PackageRead(p, s, t, v) => a.push_package_read(p, s, t, v),
            SynthItem::Mark(t) => w.push_interval(&a.close_interval(t))?,
        }
    }
    let stats = w.finish()?;
    Ok((stats, stream.truth))
}

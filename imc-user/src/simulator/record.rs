//! A synthetic scenario recorded the way `imc record` records (attributor → writer): the
//! recording side of `simulator`, for the tests and the accuracy harness.
use crate::attribution::Attributor;
use crate::model::result::TaskRow;
use crate::model::{Direction, Package, SlotRole, SlotScope, SlotSpec, Topology};
use crate::record::{RecordError, RecordHeader, Writer, WriterOptions, WriterStats};
use crate::simulator::{Scenario, SynthItem, Truth};

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

/// A recording of `tasks` short-lived processes, `per_interval` new ones in each 100 ms interval
/// (all in one interval when `per_interval >= tasks`), in 1000 comms and 2000 containers, beside
/// one long-lived `steady` process that moves the most bytes of the run (pid 1, a little in
/// every interval) and an idle `init`: the shape of a machine under process churn, for the
/// report's memory bound. Written by the real writer.
pub fn churn(
    path: &std::path::Path,
    tasks: u32,
    per_interval: u32,
) -> Result<WriterStats, RecordError> {
    use crate::discovery::cgroup::names_of_path;
    use crate::model::result::{IntervalResult, PackageRow};
    let _ = std::fs::remove_file(path);
    let (specs, topo) = churn_machine();
    const INTERVAL: u64 = 100_000_000;
    let header = RecordHeader::new(&specs, &topo, 250, "intel-uncore-imc", INTERVAL);
    let mut w = Writer::with_options(path, header, None, WriterOptions::default())?;
    let per = per_interval.clamp(1, tasks.max(1));
    let intervals = tasks.div_ceil(per).max(1);
    // The steady process' bytes over the run exceed any churning task's.
    let steady_lines = 64 + u64::from(tasks) / u64::from(intervals) * 3;
    let mut names = std::collections::HashMap::new();
    for k in 0..intervals {
        let mut rows = Vec::new();
        let mut lines_sum = 0u64;
        for i in k * per..((k + 1) * per).min(tasks) {
            let pid = 1000 + i;
            // 1..=50 lines: no churning task reaches the steady one.
            let lines = 1 + u64::from(i.wrapping_mul(2_654_435_761) % 50);
            let cg = 100 + u64::from(i % 2000);
            let mut r = churn_row(pid, format!("job{}", i % 1000), cg, lines);
            let n = names.entry(cg).or_insert_with(|| {
                names_of_path(&format!("/system.slice/docker-{:064x}.scope", cg))
            });
            r.set_cgroup_names(n);
            lines_sum += lines;
            rows.push(r);
        }
        rows.push(churn_row(1, "steady".into(), 7, steady_lines));
        rows.push(churn_row(2, "init".into(), 7, 0));
        lines_sum += steady_lines;
        let iv = IntervalResult {
            t_start_ns: u64::from(k) * INTERVAL,
            t_end_ns: u64::from(k + 1) * INTERVAL,
            source: "intel-uncore-imc".into(),
            packages: vec![PackageRow {
                id: 0,
                read_bytes: lines_sum * 64,
                write_bytes: lines_sum / 2 * 64, // approximately: the rows' own halves are floored
                ..PackageRow::default()
            }],
            tasks: rows,
            ..IntervalResult::default()
        };
        w.push_interval(&iv)?;
    }
    w.finish()
}

/// The churn recording's machine: one package of two CPUs, its read and write counters.
fn churn_machine() -> (Vec<SlotSpec>, Topology) {
    let specs = vec![
        SlotSpec {
            event: "read".into(),
            scope: SlotScope::Package,
            role: SlotRole::Traffic(Direction::Read),
            bytes_per_count: Some(64.0),
            counter_bits: 48,
        },
        SlotSpec {
            event: "write".into(),
            scope: SlotScope::Package,
            role: SlotRole::Traffic(Direction::Write),
            bytes_per_count: Some(64.0),
            counter_bits: 48,
        },
    ];
    let topo = Topology {
        packages: vec![Package {
            id: 0,
            cpus: vec![0, 1],
        }],
        ..Topology::default()
    };
    (specs, topo)
}

/// A churn task's row: `lines` read and half as many written.
fn churn_row(pid: u32, comm: String, cgroup: u64, lines: u64) -> TaskRow {
    TaskRow {
        pid,
        tgid: pid,
        comm,
        cgroup,
        read_bytes: lines * 64,
        write_bytes: lines / 2 * 64,
        values: [
            ("read".to_string(), lines as f64),
            ("write".to_string(), (lines / 2) as f64),
        ]
        .into(),
        ..TaskRow::default()
    }
}

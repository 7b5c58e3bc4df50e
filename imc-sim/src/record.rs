//! A synthetic scenario recorded the way `imc record` records (attributor → writer): the
//! recording side of the simulator, for the tests and the accuracy harness.
use crate::{Scenario, SynthItem, Truth};
use imc::attribution::Attributor;
use imc::model::result::TaskRow;
use imc::model::{Direction, Package, SlotRole, SlotScope, SlotSpec, Topology};
use imc::record::{RecordError, RecordHeader, Writer, WriterOptions, WriterStats};

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
    use imc::discovery::cgroup::names_of_path;
    use imc::model::result::{IntervalResult, PackageRow};
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

/// Processes of the stacks recording.
const STACK_PROCESSES: u32 = 10;
/// Distinct stacks charged per drain (one drain per 100 ms interval) of the stacks recording.
const STACKS_PER_DRAIN: u32 = 10_000;

/// A recording made with stacks holding `distinct` distinct call stacks of `depth` frames
/// each, every one charged once, [`STACKS_PER_DRAIN`] to a drain, over ten processes that read
/// and write through every interval; frames name functions from a pool of 32 per depth (the
/// stack's number in base 32 picks them), so functions recur across stacks as in real code.
/// The shape of a long recording of code with many paths, for the report's memory bound.
pub fn stacks(
    path: &std::path::Path,
    distinct: u32,
    depth: u32,
) -> Result<WriterStats, RecordError> {
    use imc::model::result::{IntervalResult, PackageRow};
    use imc::model::stacks::{StackBatch, StackCharge};
    let _ = std::fs::remove_file(path);
    let (mut specs, topo) = churn_machine();
    specs.push(SlotSpec {
        event: "LLC-load-misses".into(),
        scope: SlotScope::Cpu,
        role: SlotRole::Weight(Some(Direction::Read)),
        bytes_per_count: None,
        counter_bits: 64,
    });
    const INTERVAL: u64 = 100_000_000;
    let header = RecordHeader::new(&specs, &topo, 250, "intel-uncore-imc", INTERVAL);
    let mut w = Writer::with_options(path, header, None, WriterOptions::default())?;
    let drains = distinct.div_ceil(STACKS_PER_DRAIN).max(1);
    for k in 0..drains {
        let rows: Vec<TaskRow> = (0..STACK_PROCESSES)
            .map(|p| churn_row(100 + p, format!("app{p}"), 7, 1000 + u64::from(p)))
            .collect();
        let lines: u64 = rows.iter().map(|r| r.read_bytes / 64).sum();
        let (t_start_ns, t_end_ns) = (u64::from(k) * INTERVAL, u64::from(k + 1) * INTERVAL);
        w.push_interval(&IntervalResult {
            t_start_ns,
            t_end_ns,
            source: "intel-uncore-imc".into(),
            packages: vec![PackageRow {
                id: 0,
                read_bytes: lines * 64,
                write_bytes: lines / 2 * 64,
                ..PackageRow::default()
            }],
            tasks: rows,
            ..IntervalResult::default()
        })?;
        let first = k * STACKS_PER_DRAIN;
        let charges = (first..(first + STACKS_PER_DRAIN).min(distinct))
            .map(|i| StackCharge {
                tgid: 100 + i % STACK_PROCESSES,
                // The cgroup of the process's rows.
                cgroup: Some(7),
                frames: stack_frames(i, depth).into(),
                on_ns: 4_000_000,
                slices: 1,
                slots: vec![0, 0, 1 + u64::from(i % 7)],
            })
            .collect();
        w.push_stacks(&StackBatch {
            t_ns: t_end_ns,
            charges,
            dropped: 0,
        })?;
    }
    w.finish()
}

/// Stack number `i`'s frames, leaf first: `main` at the root, then one function per level
/// picked by `i`'s digits in base 32 (distinct numbers below 32^(depth-1), distinct stacks).
fn stack_frames(i: u32, depth: u32) -> Vec<imc::model::stacks::Frame> {
    use imc::model::stacks::{Frame, FrameKind};
    let frame = |function: String, offset: u64| Frame {
        kind: FrameKind::User,
        function: Some(function),
        module: Some("/usr/lib/app/libapp.so".into()),
        offset,
        build_id: Some("5f0c3e7a9d41b2c86e17f0a3d5b9c2e4f6a8b1d3".into()),
        file: Some("src/app.rs".into()),
        line: Some(10),
    };
    let mut frames = vec![frame("main".into(), 0x1000)];
    let mut rest = i;
    for level in 1..depth.max(1) {
        let digit = rest % 32;
        rest /= 32;
        let f = format!("app::level{level}::step{digit}");
        frames.push(frame(f, 0x2000 + u64::from(level * 32 + digit) * 0x40));
    }
    frames.reverse();
    frames
}

//! The recording file (imc's `record` module) written from the simulator's streams and read
//! back: round trips, rotation under churn, damage, the size bound.
use imc::model::SlotSpec;
use imc::model::result::IntervalResult;
use imc::record::*;
use imc_sim::{Scenario, SynthItem};
use std::path::Path;

#[test]
fn raw_ticks_and_intervals_round_trip_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.imc");
    let mut sc = Scenario::busy(3, 1000, 300_000_000);
    sc.precise = true;
    sc.counter_start = (1 << 48) - 1000;
    let header = RecordHeader::new(&sc.specs(), &sc.topology(), 1000, "x", 100_000_000);
    let opts = WriterOptions {
        burst_threshold: Some(0.0),
        ..WriterOptions::default()
    };
    let mut w = Writer::with_options(&path, header.clone(), None, opts).unwrap();
    let mut a = imc::attribution::Attributor::new(&sc.specs(), &sc.topology(), "x");
    let mut sent = Vec::new();
    let mut ivs: Vec<IntervalResult> = Vec::new();
    sc.mark_every_ns = Some(100_000_000);
    for it in sc.stream() {
        match it {
            SynthItem::Tick(r) => {
                a.push_tick(&r);
                w.push_tick(&r).unwrap();
                sent.push(r);
            }
            SynthItem::Mark(t) => {
                let iv = a.close_interval(t);
                w.push_interval(&iv).unwrap();
                ivs.push(iv);
            }
            SynthItem::PackageRead(..) => {}
        }
    }
    let stats = w.finish().unwrap();
    let mut r = Reader::open(&path).unwrap();
    assert_eq!(r.header().slots, header.slots);
    let (mut got_ticks, mut got_ivs) = (Vec::new(), Vec::new());
    for item in r.by_ref() {
        match item {
            Item::Ticks(t) => got_ticks.extend(t),
            Item::Interval(iv) => got_ivs.push(iv),
            Item::Stacks(_) => {}
        }
    }
    assert_eq!(r.status(), &ReadStatus::Complete);
    // Per-slot package counts are the live exporter's detail, and what was placed by time or
    // read late validate's: neither is recorded.
    for p in ivs.iter_mut().flat_map(|iv| iv.packages.iter_mut()) {
        p.slot_counts.clear();
        p.unattributed_counts.clear();
        p.device_counts.clear();
    }
    for t in ivs.iter_mut().flat_map(|iv| iv.tasks.iter_mut()) {
        t.placed_by_time.clear();
        t.placed_late.clear();
    }
    assert_eq!(got_ivs, ivs);
    // Every interval is a burst (threshold 0): every record was kept, bit for bit.
    assert_eq!(stats.ticks_written as usize, got_ticks.len());
    assert!(!got_ticks.is_empty());
    for g in &got_ticks {
        let s = sent
            .iter()
            .find(|s| s.t_ns == g.t_ns && s.cpu == g.cpu && s.kind == g.kind)
            .unwrap();
        assert_eq!(
            (s.pid, s.tgid, s.cgroup_id, s.comm, s.slots, s.failed_mask),
            (g.pid, g.tgid, g.cgroup_id, g.comm, g.slots, g.failed_mask)
        );
    }
}

/// COMMAND_TASKS marks tasks the file defined, and only those: a mark beyond the table is
/// damage (everything before it kept), never an allocation the file asks for.
#[test]
fn command_marks_name_defined_tasks_only() {
    use imc::model::result::{PackageRow, TaskRow};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.imc");
    let specs = Scenario::busy(2, 1000, 1).specs();
    let row = |pid: u32| TaskRow {
        pid,
        tgid: pid,
        comm: "t".into(),
        values: [(specs[0].event.clone(), 10.0)].into(),
        ..TaskRow::default()
    };
    let iv = IntervalResult {
        t_end_ns: 100,
        source: "x".into(),
        packages: vec![PackageRow::default()],
        tasks: vec![row(10), row(11), row(12)],
        ..IntervalResult::default()
    };
    let mut w = Writer::create(&path, busy_header(), None).unwrap();
    w.mark_command(Box::new(|_, tgid, _| tgid == 11));
    w.push_interval(&iv).unwrap();
    w.finish().unwrap();
    let data = std::fs::read(&path).unwrap();
    assert!(chunk_kinds(&data).contains(&CHUNK_COMMAND_TASKS));
    let mut r = Reader::from_bytes(&path, data.clone()).unwrap();
    r.command_only(true);
    let Some(Item::Interval(got)) = r.next_item() else {
        panic!("an interval")
    };
    assert_eq!(got.tasks.iter().map(|t| t.pid).collect::<Vec<_>>(), [11]);
    assert_eq!(r.command_tasks(), 1);
    assert!(r.last_command() > 0.0 && r.last_command() < r.last_attributed());
    // A mark of task 3 in a file of three tasks (0-2), after the END chunk.
    let mut bad = bytes::BytesMut::from(&data[..]);
    codec::put_chunk(&mut bad, CHUNK_COMMAND_TASKS, &[1, 3]);
    let mut r = Reader::from_bytes(&path, bad.to_vec()).unwrap();
    while r.next_item().is_some() {}
    assert!(
        matches!(r.status(), ReadStatus::Damaged { offset, .. } if *offset == data.len() as u64),
        "{:?}",
        r.status()
    );
}

#[test]
fn garbage_after_the_header_is_damage_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.imc");
    let sc = Scenario::busy(1, 1000, 1);
    let header = RecordHeader::new(&sc.specs(), &sc.topology(), 1000, "x", 1);
    Writer::create(&path, header, None)
        .unwrap()
        .finish()
        .unwrap();
    let mut data = std::fs::read(&path).unwrap();
    let hdr_end = data.len() - 12;
    for seed in 0..200u32 {
        data.truncate(hdr_end);
        let mut x = seed.wrapping_mul(2_654_435_761);
        for _ in 0..(seed % 64) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            data.push(x as u8);
        }
        let mut r = Reader::from_bytes(&path, data.clone()).unwrap();
        while r.next_item().is_some() {}
        assert_ne!(r.status(), &ReadStatus::Reading);
    }
}

/// Intervals with named tasks in ten containers, in turn.
fn named_intervals(n: u64) -> (Vec<imc::model::SlotSpec>, Vec<IntervalResult>) {
    use imc::model::result::{PackageRow, TaskRow};
    use imc::model::{Direction, SlotRole, SlotScope, SlotSpec};
    let specs = vec![SlotSpec {
        event: "r".into(),
        scope: SlotScope::Package,
        role: SlotRole::Traffic(Direction::Read),
        bytes_per_count: Some(64.0),
        counter_bits: 48,
    }];
    let ivs = (0..n)
        .map(|i| {
            let mut t = TaskRow {
                pid: 100 + i as u32,
                tgid: 100,
                comm: "w".into(),
                cgroup: 1000 + i % 10,
                read_bytes: 6400,
                share: 1.0,
                values: [("r".to_string(), 100.0)].into(),
                ..TaskRow::default()
            };
            let path = format!("/system.slice/docker-{:064x}.scope", i % 10 + 1);
            t.set_cgroup_names(&imc::discovery::cgroup::names_of_path(&path));
            // The root cgroup's tasks come without a path (not resolved): null stays null.
            let bare = TaskRow {
                pid: 1,
                tgid: 1,
                comm: "init".into(),
                cgroup: 1,
                values: [("r".to_string(), 0.0)].into(),
                ..TaskRow::default()
            };
            IntervalResult {
                t_start_ns: i * 100,
                t_end_ns: (i + 1) * 100,
                source: "x".into(),
                packages: vec![PackageRow {
                    id: 0,
                    read_bytes: 6400,
                    ..PackageRow::default()
                }],
                tasks: vec![t, bare],
                ..IntervalResult::default()
            }
        })
        .collect();
    (specs, ivs)
}

#[test]
fn cgroup_paths_survive_the_file_and_its_rotations() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.imc");
    let (specs, ivs) = named_intervals(2000);
    let topo = imc::model::Topology {
        packages: vec![imc::model::Package {
            id: 0,
            cpus: vec![0],
        }],
        ..imc::model::Topology::default()
    };
    let header = RecordHeader::new(&specs, &topo, 1000, "x", 100);
    // Small enough to rotate several times.
    let mut w = Writer::create(&path, header, Some(32 << 10)).unwrap();
    for iv in &ivs {
        w.push_interval(iv).unwrap();
    }
    assert!(w.stats().rotations >= 2, "{:?}", w.stats());
    w.finish().unwrap();
    let mut got: Vec<IntervalResult> = Vec::new();
    for p in [rotated_path(&path), path.clone()] {
        got.extend(intervals(&mut Reader::open(&p).unwrap()));
    }
    assert!(got.len() > 10);
    for g in &got {
        let want = ivs.iter().find(|i| i.t_start_ns == g.t_start_ns).unwrap();
        // The reader derives the container id from the stored path.
        assert_eq!(g.tasks, want.tasks);
    }
    let last = &got[got.len() - 1].tasks[0];
    assert_eq!(
        last.container_id.as_deref(),
        Some(&*format!("{:064x}", 1999 % 10 + 1))
    );
}

/// Chunk types of a file, in order (walking the framing only).
fn chunk_kinds(data: &[u8]) -> Vec<u8> {
    let hlen = u32::from_le_bytes(data[10..14].try_into().unwrap()) as usize;
    let mut at = 18 + hlen;
    let mut kinds = Vec::new();
    while at + 9 <= data.len() {
        kinds.push(data[at]);
        at += 9 + u32::from_le_bytes(data[at + 1..at + 5].try_into().unwrap()) as usize;
    }
    assert_eq!(at, data.len());
    kinds
}

/// The header of a recording of the two-CPU busy scenario at 100 ms intervals.
fn busy_header() -> RecordHeader {
    let sc = Scenario::busy(2, 1000, 1);
    RecordHeader::new(&sc.specs(), &sc.topology(), 1000, "x", 100_000_000)
}

#[test]
fn under_container_churn_each_segment_defines_only_its_cgroups_within_the_bound() {
    use imc::model::result::TaskRow;
    let dir = tempfile::tempdir().unwrap();
    // A cgroup's path follows from its id: a new pod container every task, 10 an interval.
    let path_of = |id: u64| {
        format!(
            "/kubepods.slice/kubepods-pod{id:08x}_0000_4000_8000_00000000000a.slice/cri-containerd-{id:064x}.scope"
        )
    };
    // The cgroup entries count inside the bound, and do not pile up from file to file.
    let (path, old, size, stats) = churn_recording(dir.path(), "pods.imc", 1000, 10, |iv| {
        for t in &mut iv.tasks {
            t.cgroup = if t.comm == "steady" {
                7
            } else {
                u64::from(t.pid)
            };
            t.set_cgroup_names(&imc::discovery::cgroup::names_of_path(&path_of(t.cgroup)));
        }
    });
    assert!(stats.rotations >= 2, "{stats:?}");
    let mut kept = 0;
    for p in [&old, &path] {
        let kinds = chunk_kinds(&std::fs::read(p).unwrap());
        // Type 7: never mistaken for the rotation marker (6) a rotated file ends with.
        assert!(kinds.contains(&CHUNK_CGROUPS), "{kinds:?}");
        assert_eq!(
            kinds.iter().filter(|&&k| k == CHUNK_CONTINUED).count(),
            usize::from(p == &old)
        );
        let mut r = Reader::open(p).unwrap();
        let ivs = intervals(&mut r);
        let used: std::collections::HashSet<u64> = ivs
            .iter()
            .flat_map(|iv| iv.tasks.iter().map(|t| t.cgroup))
            .collect();
        assert_eq!(
            r.cgroups_defined(),
            used.len(),
            "each file defines only the cgroups it uses"
        );
        for t in ivs.iter().flat_map(|iv| &iv.tasks) {
            let want = imc::discovery::cgroup::names_of_path(&path_of(t.cgroup));
            let mut named = TaskRow::default();
            named.set_cgroup_names(&want);
            assert_eq!(
                (&t.cgroup_path, &t.container_id, &t.pod_uid),
                (&named.cgroup_path, &named.container_id, &named.pod_uid)
            );
            assert!(t.container_id.is_some() && t.pod_uid.is_some());
        }
        kept += ivs.len();
    }
    assert_eq!(
        read_all(&path).0.last().unwrap().t_end_ns,
        1000 * 100_000_000
    );
    // Ten new paths an interval make an interval large; the kept span is still at least a
    // file's worth of them.
    assert_kept_span(kept, size);
}

#[test]
fn without_paths_no_cgroups_chunk_is_written_and_paths_read_null() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.imc");
    let (specs, mut ivs) = named_intervals(3);
    // Tasks whose cgroups did not resolve (or a recording made before paths were kept).
    for iv in &mut ivs {
        for t in &mut iv.tasks {
            (t.cgroup_path, t.container_id, t.pod_uid) = (None, None, None);
        }
    }
    let header = RecordHeader::new(&specs, &imc::model::Topology::default(), 1, "x", 100);
    let mut w = Writer::create(&path, header, None).unwrap();
    for iv in &ivs {
        w.push_interval(iv).unwrap();
    }
    w.finish().unwrap();
    let data = std::fs::read(&path).unwrap();
    // Nothing was resolved: no CGROUPS chunk, the file is what earlier versions wrote.
    let kinds = chunk_kinds(&data);
    assert!(!kinds.contains(&CHUNK_CGROUPS), "{kinds:?}");
    let mut r = Reader::from_bytes(&path, data).unwrap();
    let got = intervals(&mut r);
    assert_eq!(r.status(), &ReadStatus::Complete);
    assert_eq!(got.len(), 3);
    assert!(
        got.iter()
            .flat_map(|g| &g.tasks)
            .all(|t| t.cgroup_path.is_none())
    );
}

/// An interval of `n` short-lived tasks (pids from `first_pid`) plus one steady task, as
/// under process churn: a shell loop of /bin/true.
fn churn_interval(specs: &[SlotSpec], k: u64, first_pid: u32, n: u32) -> IntervalResult {
    let row = |pid: u32, comm: &str, reads: u64| {
        let mut values = std::collections::BTreeMap::new();
        values.insert(specs[0].event.clone(), reads as f64);
        values.insert(specs[1].event.clone(), 0.0);
        imc::model::result::TaskRow {
            pid,
            tgid: pid,
            comm: comm.into(),
            cgroup: 7,
            read_bytes: reads * 64,
            share: 0.0,
            values,
            ..Default::default()
        }
    };
    let mut tasks: Vec<_> = (0..n)
        .map(|i| row(first_pid + i, "true", 10 + u64::from(i % 5)))
        .collect();
    tasks.push(row(1, "steady", 1000));
    let read: u64 = tasks.iter().map(|t| t.read_bytes).sum();
    IntervalResult {
        t_start_ns: k * 100_000_000,
        t_end_ns: (k + 1) * 100_000_000,
        source: "x".into(),
        packages: vec![imc::model::result::PackageRow {
            id: 0,
            read_bytes: read,
            write_bytes: 0,
            total_bytes: 0,
            ..Default::default()
        }],
        tasks,
        unattributed_bytes: 0,
        unattributed: Default::default(),
        lost_samples: 0,
        weighting: None,
        weight_fallbacks: 0,
    }
}

fn read_all(path: &std::path::Path) -> (Vec<IntervalResult>, ReadStatus, usize) {
    let mut r = Reader::open(path).unwrap();
    let ivs = intervals(&mut r);
    (ivs, r.status().clone(), r.tasks_defined())
}

/// The intervals a reader yields, ticks left out.
fn intervals(r: &mut Reader) -> Vec<IntervalResult> {
    r.by_ref()
        .filter_map(|i| match i {
            Item::Interval(iv) => Some(iv),
            Item::Ticks(_) | Item::Stacks(_) => None,
        })
        .collect()
}

/// The rotation bound of the churn recordings.
const CHURN_MAX: u64 = 64 * 1024;

/// `n` intervals of `new` new tasks each (`shape` dresses each one), recorded into `name`
/// under `dir` within CHURN_MAX bytes: the file, the rotated one, their sizes together and
/// the writer's stats. Both files hold within the bound, no row dropped, and a rotated file
/// is filled to its half (less the room for one interval), not cut after every interval by
/// a table of everything ever seen.
fn churn_recording(
    dir: &Path,
    name: &str,
    n: u64,
    new: u32,
    mut shape: impl FnMut(&mut IntervalResult),
) -> (std::path::PathBuf, std::path::PathBuf, u64, WriterStats) {
    let path = dir.join(name);
    let specs = Scenario::busy(2, 1000, 1).specs();
    let max = CHURN_MAX;
    let mut w = Writer::create(&path, busy_header(), Some(max)).unwrap();
    let mut pid = 1000u32;
    for k in 0..n {
        let mut iv = churn_interval(&specs, k, pid, new);
        shape(&mut iv);
        w.push_interval(&iv).unwrap();
        pid += new;
    }
    let stats = w.finish().unwrap();
    let old = rotated_path(&path);
    let (a, b) = (
        std::fs::metadata(&path).unwrap().len(),
        std::fs::metadata(&old).unwrap().len(),
    );
    assert!(a + b <= max, "{a} + {b} > {max}");
    assert_eq!(stats.rows_dropped, 0);
    assert!(b > max / 2 * 3 / 4, "FILE.1 holds {b} of {} bytes", max / 2);
    (path, old, a + b, stats)
}

/// The kept span of a churn recording of `size` bytes: at least a file's worth of its
/// `kept` intervals.
fn assert_kept_span(kept: usize, size: u64) {
    let max = CHURN_MAX;
    let per_interval = size / kept as u64;
    assert!(
        kept as u64 >= (max / 2) / per_interval,
        "{kept} intervals of ~{per_interval} bytes kept in {max} bytes"
    );
}

#[test]
fn under_churn_each_segment_restates_only_its_tasks_and_the_bound_holds() {
    let dir = tempfile::tempdir().unwrap();
    // 125 new processes every 100 ms: 75k a minute, for 2 minutes.
    let (path, old, size, stats) = churn_recording(dir.path(), "churn.imc", 1200, 125, |_| {});
    let max = CHURN_MAX;
    let written: u64 = 1200 * 2000;
    assert!(
        stats.rotations < written / (max / 2) * 2,
        "{} rotations",
        stats.rotations
    );
    let (newest, s1, defined1) = read_all(&path);
    let (older, s2, defined2) = read_all(&old);
    assert_eq!(s1, ReadStatus::Complete);
    // A clean rotation is not an interruption.
    assert_eq!(s2, ReadStatus::Continued);
    for (ivs, defined) in [(&newest, defined1), (&older, defined2)] {
        let used: std::collections::HashSet<u32> = ivs
            .iter()
            .flat_map(|iv| iv.tasks.iter().map(|t| t.pid))
            .collect();
        assert_eq!(
            defined,
            used.len(),
            "each file defines only the tasks it uses"
        );
    }
    assert_eq!(older.last().unwrap().t_end_ns, newest[0].t_start_ns);
    // The kept span: everything in both files, back to back.
    assert_kept_span(newest.len() + older.len(), size);
    assert_eq!(newest.last().unwrap().t_end_ns, 1200 * 100_000_000);
}

#[test]
fn a_bound_too_small_for_one_interval_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let header = busy_header();
    let least = smallest_max_size(&header);
    assert!(least < 64 * 1024, "{least}");
    let e = Writer::create(&dir.path().join("a"), header.clone(), Some(least - 1))
        .err()
        .unwrap();
    assert!(matches!(e, RecordError::BoundTooSmall { .. }), "{e}");
    assert!(!dir.path().join("a").exists());
    Writer::create(&dir.path().join("b"), header, Some(least)).unwrap();
}

#[test]
fn an_interval_larger_than_a_file_keeps_its_largest_rows_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.imc");
    let specs = Scenario::busy(2, 1000, 1).specs();
    let header = busy_header();
    let max = smallest_max_size(&header);
    let mut w = Writer::create(&path, header, Some(max)).unwrap();
    let iv = churn_interval(&specs, 0, 1000, 5000);
    w.push_interval(&iv).unwrap();
    w.push_interval(&churn_interval(&specs, 1, 9000, 3))
        .unwrap();
    let stats = w.finish().unwrap();
    assert!(stats.rows_dropped > 0);
    let total = std::fs::metadata(&path).unwrap().len()
        + std::fs::metadata(rotated_path(&path)).map_or(0, |m| m.len());
    assert!(total <= max, "{total} > {max}");
    let mut got = Vec::new();
    for p in [rotated_path(&path), path.clone()] {
        if p.exists() {
            got.extend(read_all(&p).0);
        }
    }
    let first = got.iter().find(|g| g.t_start_ns == 0).unwrap();
    // The largest row is kept; no byte is lost: what was left out is unattributed.
    assert!(first.tasks.iter().any(|t| t.comm == "steady"));
    let kept: u64 = first.tasks.iter().map(|t| t.read_bytes).sum();
    assert_eq!(kept + first.unattributed_bytes, iv.packages[0].read_bytes);
}

#[test]
fn streaming_reader_reads_a_recording_in_pieces_and_refuses_non_files() {
    let dir = tempfile::tempdir().unwrap();
    let e = imc::text::error_line(&Reader::open(Path::new("/dev/zero")).err().unwrap());
    assert!(
        e.contains("/dev/zero") && e.contains("character device"),
        "{e}"
    );
    let e = imc::text::error_line(&Reader::open(dir.path()).err().unwrap());
    assert!(e.contains("a directory"), "{e}");
    // A reader over a source that hands out one byte at a time sees the same items.
    let path = dir.path().join("p.imc");
    let specs = Scenario::busy(2, 1000, 1).specs();
    let header = busy_header();
    let mut w = Writer::create(&path, header, None).unwrap();
    for k in 0..20 {
        w.push_interval(&churn_interval(&specs, k, 100 + k as u32 * 3, 3))
            .unwrap();
    }
    w.finish().unwrap();
    struct Trickle(std::io::Cursor<Vec<u8>>);
    impl std::io::Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(1);
            self.0.read(&mut buf[..n])
        }
    }
    let data = std::fs::read(&path).unwrap();
    let mut r = Reader::from_reader(&path, Box::new(Trickle(std::io::Cursor::new(data)))).unwrap();
    let n = r.by_ref().count();
    assert_eq!(n, 20);
    assert_eq!(r.status(), &ReadStatus::Complete);
    assert_eq!(read_all(&path).0.len(), 20);
}

//! Loaded latency and utilisation travel in recordings: a recording whose intervals carry them
//! (written by the library's writer: this VM has no memory controller to measure one) reports them
//! in text, JSON and Perfetto, across a rotation too; a recording without them (today's, or one of
//! an earlier imc) reports none: no line, nulls, no track.
use imc::model::result::{ChannelLatency, IntervalResult, PackageRow, TaskRow};
use imc::model::{Direction, Package, SlotRole, SlotScope, SlotSpec, Topology};
use imc::record::{Item, Reader, RecordHeader, Writer, rotated_path};
use imc_tests::{imc, run_ok};
use serde_json::Value;
use std::path::{Path, PathBuf};

const INTERVAL: u64 = 100_000_000;
/// Intervals of the recording; in those `k % 4 == 3`, package 0's read queue saw nothing.
const N: u64 = 8;

fn specs() -> Vec<SlotSpec> {
    vec![SlotSpec {
        event: "read".into(),
        scope: SlotScope::Package,
        role: SlotRole::Traffic(Direction::Read),
        bytes_per_count: Some(64.0),
        counter_bits: 48,
    }]
}

/// Package 0's read latency in interval `k` (None: nothing queued), in ns: exact in
/// picoseconds, so it reads back equal.
fn read_ns(k: u64) -> Option<f64> {
    (k % 4 != 3).then_some(80.0 + 2.5 * k as f64)
}

/// Two packages: package 0 with read and write latency (two channels) and a utilisation,
/// package 1 with a utilisation only.
fn interval(k: u64, latency: bool) -> IntervalResult {
    let row = TaskRow {
        pid: 42,
        tgid: 42,
        comm: "stream".into(),
        read_bytes: 6400,
        values: [("read".to_string(), 100.0)].into(),
        ..TaskRow::default()
    };
    let mut packages: Vec<PackageRow> = (0..2)
        .map(|id| PackageRow {
            id,
            read_bytes: 6400,
            ..PackageRow::default()
        })
        .collect();
    if latency {
        let p = &mut packages[0];
        p.read_latency_ns = read_ns(k);
        p.write_latency_ns = Some(150.0);
        p.utilisation = Some(0.125 * (k % 4) as f64);
        p.latency_channels = vec![ChannelLatency {
            channel: "uncore_imc_0".into(),
            read_ns: read_ns(k),
            write_ns: None,
        }];
        packages[1].utilisation = Some(0.5);
    }
    IntervalResult {
        t_start_ns: k * INTERVAL,
        t_end_ns: (k + 1) * INTERVAL,
        source: "intel-uncore-imc".into(),
        packages,
        tasks: vec![row],
        ..IntervalResult::default()
    }
}

fn recording(dir: &Path, latency: bool, n: u64, max_size: Option<u64>) -> PathBuf {
    let path = dir.join(if latency { "lat.imc" } else { "bare.imc" });
    let topo = Topology {
        packages: (0..2).map(|id| Package { id, cpus: vec![id] }).collect(),
        ..Topology::default()
    };
    let header = RecordHeader::new(&specs(), &topo, 250, "intel-uncore-imc", INTERVAL);
    let mut w = Writer::create(&path, header, max_size).unwrap();
    for k in 0..n {
        w.push_interval(&interval(k, latency)).unwrap();
    }
    w.finish().unwrap();
    path
}

fn report(path: &Path, args: &[&str]) -> String {
    let out = run_ok(imc().arg("report").arg(path).args(args));
    String::from_utf8(out.stdout).unwrap()
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&report(path, &["--json"])).unwrap()
}

fn f(v: &Value) -> Option<f64> {
    v.as_f64()
}

#[test]
fn json_and_text_carry_each_packages_latency_and_utilisation() {
    let dir = tempfile::tempdir().unwrap();
    let path = recording(dir.path(), true, N, None);
    let v = json(&path);
    let points = v["package_latency"].as_array().unwrap();
    assert_eq!(points.len(), N as usize);
    for (k, pt) in points.iter().enumerate() {
        let k = k as u64;
        assert_eq!(pt["t_start_ns"], k * INTERVAL);
        let p0 = &pt["packages"][0];
        assert_eq!(p0["id"], 0);
        assert_eq!(f(&p0["read_latency_ns"]), read_ns(k), "{pt}");
        assert_eq!(f(&p0["write_latency_ns"]), Some(150.0));
        assert_eq!(f(&p0["utilisation"]), Some(0.125 * (k % 4) as f64));
        let p1 = &pt["packages"][1];
        assert_eq!(
            (p1["read_latency_ns"].is_null(), f(&p1["utilisation"])),
            (true, Some(0.5))
        );
    }
    // Read latency over the six intervals that have it: 80, 82.5, 85, 90, 92.5, 95.
    let sum = v["latency_summary"].as_array().unwrap();
    assert_eq!(sum.len(), 2);
    let s0 = &sum[0];
    assert_eq!(f(&s0["read_latency_ns_mean"]), Some(525.0 / 6.0));
    assert_eq!(f(&s0["read_latency_ns_max"]), Some(95.0));
    assert_eq!(f(&s0["write_latency_ns_max"]), Some(150.0));
    assert_eq!(f(&s0["utilisation_mean"]), Some(0.1875));
    assert_eq!(f(&s0["utilisation_max"]), Some(0.375));
    assert_eq!(s0["intervals"], N);
    assert!(sum[1]["read_latency_ns_mean"].is_null());
    // The run's packages carry the means.
    let pk = &v["packages"][0];
    assert_eq!(f(&pk["read_latency_ns"]), Some(525.0 / 6.0));
    assert_eq!(f(&v["packages"][1]["utilisation"]), Some(0.5));

    let text = report(&path, &[]);
    assert!(
        text.contains(
            "package 0 latency: read 87.5 ns mean, 95.0 ns worst; write 150.0 ns mean, 150.0 ns worst; utilisation 18.8% mean, 37.5% max (over 8 intervals)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("package 1 latency: utilisation 50.0% mean, 50.0% max (over 8 intervals)\n"),
        "{text}"
    );
}

#[test]
fn the_perfetto_trace_has_a_latency_track_per_package_with_the_recorded_values() {
    use imc::output::perfetto_proto::Trace;
    use protobuf::Message;
    let dir = tempfile::tempdir().unwrap();
    let path = recording(dir.path(), true, N, None);
    let out = dir.path().join("t.pftrace");
    report(&path, &["--perfetto", out.to_str().unwrap()]);
    let trace = Trace::parse_from_bytes(&std::fs::read(&out).unwrap()).unwrap();
    let uuid = |name: &str| {
        trace
            .packet
            .iter()
            .filter(|p| p.has_track_descriptor())
            .find(|p| p.track_descriptor().name() == name)
            .map(|p| p.track_descriptor().uuid())
    };
    let values = |uuid: u64| -> Vec<(u64, f64)> {
        trace
            .packet
            .iter()
            .filter(|p| p.has_track_event() && p.track_event().track_uuid() == uuid)
            .map(|p| (p.timestamp(), p.track_event().double_counter_value()))
            .collect()
    };
    let read = values(uuid("package 0 read latency (ns)").expect("a read latency track"));
    let want: Vec<(u64, f64)> = (0..N)
        .map(|k| (k * INTERVAL, read_ns(k).unwrap_or(0.0)))
        .chain([(N * INTERVAL, 0.0)])
        .collect();
    assert_eq!(read, want);
    let util = values(uuid("package 1 utilisation (%)").expect("a utilisation track"));
    assert_eq!(util[3], (3 * INTERVAL, 50.0));
    assert!(uuid("package 0 write latency (ns)").is_some());
    assert!(uuid("package 0 utilisation (%)").is_some());
    // Package 1 has no latency: no track says it has.
    assert!(uuid("package 1 read latency (ns)").is_none());
}

#[test]
fn latency_is_reported_across_a_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let path = recording(dir.path(), true, 400, Some(24 << 10));
    assert!(rotated_path(&path).exists());
    let mut held = 0;
    for p in [rotated_path(&path), path.clone()] {
        let r = Reader::open(&p).unwrap();
        held += r.filter(|i| matches!(i, Item::Interval(_))).count();
    }
    let v = json(&path);
    let points = v["package_latency"].as_array().unwrap();
    // Every interval the two files hold, with its own figures.
    assert_eq!(points.len(), held);
    assert!(held > 10 && held < 400, "{held}");
    for pt in points {
        let k = pt["t_start_ns"].as_u64().unwrap() / INTERVAL;
        assert_eq!(f(&pt["packages"][0]["read_latency_ns"]), read_ns(k));
    }
}

#[test]
fn recordings_without_latency_report_none_and_earlier_ones_read_with_nulls() {
    let dir = tempfile::tempdir().unwrap();
    let bare = recording(dir.path(), false, N, None);
    let old = Path::new(env!("CARGO_MANIFEST_DIR")).join("recordings/page-faults-2026-11.imc");
    for path in [bare, old] {
        let mut intervals = 0;
        for item in Reader::open(&path).unwrap() {
            if let Item::Interval(iv) = item {
                intervals += 1;
                for p in &iv.packages {
                    let figures = (p.read_latency_ns, p.write_latency_ns, p.utilisation);
                    assert_eq!(figures, (None, None, None), "{}", path.display());
                    assert!(p.latency_channels.is_empty());
                }
            }
        }
        assert!(intervals > 0, "{}", path.display());
        let v = json(&path);
        assert!(v["package_latency"].is_null(), "{}", path.display());
        assert!(v["latency_summary"].is_null());
        for p in v["packages"].as_array().unwrap() {
            assert!(
                p["read_latency_ns"].is_null() && p["utilisation"].is_null(),
                "{p}"
            );
        }
        assert!(!report(&path, &[]).contains("latency"));
        let out = dir.path().join("t.pftrace");
        report(&path, &["--perfetto", out.to_str().unwrap(), "--force"]);
        let trace = std::fs::read(&out).unwrap();
        let has = |s: &str| trace.windows(s.len()).any(|w| w == s.as_bytes());
        assert!(!has("latency") && !has("utilisation"));
    }
}

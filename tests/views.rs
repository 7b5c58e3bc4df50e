//! Container names, the Perfetto trace and the plot, for real on this machine: a workload in a
//! cgroup this test creates must show under that cgroup's path (and container id) in `top
//! --json` and `report --by cgroup`; a real recording's `--perfetto` file must decode with
//! Perfetto's protos to the values of `report --json`, and its `--plot` must be an SVG with one
//! band per top process.
use imc::output::perfetto_proto::Trace;
use imc::output::perfetto_proto::track_event::Type as EventType;
use imc_tests::{imc, run_ok, sampler_prerequisites};
use protobuf::Message;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A page-toucher: every dd allocates (and so faults in) a fresh 32 MiB buffer.
const TOUCHER: &str = "while :; do dd if=/dev/zero of=/dev/null bs=32M count=2 status=none; done";
/// Bursts: one dd faulting in 256 MiB (65536 faults in a fraction of a second), then a pause.
const BURSTY: &str =
    "while :; do dd if=/dev/zero of=/dev/null bs=256M count=1 status=none; sleep 0.7; done";
/// The tests' workloads would blur each other's figures (bursts above the other's steady
/// faults): one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

const CONTAINER: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

const POD: &str = "0f1e2d3c-4b5a-4678-9abc-def012345678";

/// A cgroup made for the test, named as the systemd cgroup driver names a container of a
/// Kubernetes pod (`kubepods-besteffort-pod<uid>.slice/docker-<id>.scope`) inside a directory of
/// its own; emptied and removed however the test ends.
struct TestCgroup {
    /// Outermost first.
    dirs: Vec<PathBuf>,
    leaf: PathBuf,
    rel: String,
}

impl TestCgroup {
    fn create() -> TestCgroup {
        let mount = imc::discovery::cgroup::find_cgroup2_mount(Path::new("/"))
            .expect("a cgroup2 mount on this machine");
        let names = [
            format!("imc-test-views-{}", std::process::id()),
            format!("kubepods-besteffort-pod{}.slice", POD.replace('-', "_")),
            format!("docker-{CONTAINER}.scope"),
        ];
        let mut dirs = Vec::new();
        let mut dir = mount;
        for n in &names {
            dir = dir.join(n);
            std::fs::create_dir(&dir).expect("create the test cgroup");
            dirs.push(dir.clone());
        }
        TestCgroup {
            dirs,
            leaf: dir,
            rel: format!("/{}", names.join("/")),
        }
    }

    /// Runs `script` in the cgroup: the shell moves itself in before it starts the work, so
    /// every process of the workload is born there.
    fn spawn(&self, script: &str) -> Child {
        let procs = self.leaf.join("cgroup.procs");
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > '{}' && exec sh -c '{script}'",
                procs.display()
            ))
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn the workload")
    }

    fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.leaf.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // cgroup.kill (Linux 5.14) ends every process at once; else one by one.
        if std::fs::write(self.leaf.join("cgroup.kill"), "1").is_err() {
            for pid in self.pids() {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let until = Instant::now() + Duration::from_secs(10);
        while !self.pids().is_empty() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        for d in self.dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// imc with `args`, which must succeed: its stdout.
fn imc_ok(args: &[&str]) -> String {
    String::from_utf8(run_ok(imc().args(args)).stdout).expect("UTF-8 output")
}

fn faults(task: &Value) -> f64 {
    task["values"]["page-faults"].as_f64().unwrap_or(0.0)
}

/// Kills the shell and its dd's however the test ends (when not in a test cgroup).
struct Workload(Child);

impl Drop for Workload {
    fn drop(&mut self) {
        // SAFETY: kill has no memory-safety preconditions. The group was made by setsid.
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

#[test]
fn a_workload_in_a_new_cgroup_shows_under_its_path_container_and_pod() {
    if !sampler_prerequisites() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let cg = TestCgroup::create();
    let mut child = cg.spawn(TOUCHER);
    std::thread::sleep(Duration::from_millis(200));
    assert!(!cg.pids().is_empty(), "the workload is in {}", cg.rel);

    // top --json: the workload's tasks carry the path and the container id the path names.
    let top = imc_ok(&["top", "--json", "-e", "page-faults", "--duration", "2"]);
    let mut seen = 0.0;
    for line in top.lines() {
        let v: Value = serde_json::from_str(line).expect("a JSON object per line");
        for t in v["tasks"].as_array().expect("tasks") {
            assert!(t.get("cgroup_path").is_some() && t.get("pod_uid").is_some());
            if t["cgroup_path"] == cg.rel.as_str() {
                assert_eq!(t["container_id"], CONTAINER, "{t}");
                assert_eq!(t["pod_uid"], POD, "{t}");
                seen += faults(t);
            }
        }
    }
    assert!(seen > 1000.0, "page faults under {}: {seen}", cg.rel);

    // top --by container: one row for the container, with its id.
    let top = imc_ok(&[
        "top",
        "--json",
        "-e",
        "page-faults",
        "--duration",
        "1",
        "--by",
        "container",
    ]);
    let rows: Vec<Value> = top
        .lines()
        .flat_map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["tasks"].as_array().unwrap().clone()
        })
        .filter(|t| t["container_id"] == CONTAINER)
        .collect();
    assert!(!rows.is_empty(), "no row for container {CONTAINER}");
    assert!(rows.iter().all(|r| r["cgroup_path"] == cg.rel.as_str()));

    // record, then report --by cgroup: the path came through the file.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cg.imc");
    let f = file.to_str().unwrap();
    // A toucher outside the pod, so "everyone else" has traffic of its own even on a machine
    // where nothing else faults for two seconds (a quiet CI runner).
    let outside = Command::new("setsid")
        .args(["sh", "-c", TOUCHER])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn the outside workload");
    let outside = Workload(outside);
    imc_ok(&["record", "-e", "page-faults", "-o", f, "--duration", "2"]);
    drop(outside);
    let rep: Value =
        serde_json::from_str(&imc_ok(&["report", f, "--by", "cgroup", "--json"])).unwrap();
    let tasks = rep["tasks"].as_array().unwrap();
    let mine: Vec<&Value> = tasks
        .iter()
        .filter(|t| t["cgroup_path"] == cg.rel.as_str())
        .collect();
    assert_eq!(mine.len(), 1, "one row for the cgroup {}", cg.rel);
    assert!(faults(mine[0]) > 1000.0, "{}", mine[0]);
    assert_eq!(mine[0]["container_id"], CONTAINER);
    assert_eq!(mine[0]["pod_uid"], POD);
    // report --by pod: the pod's row holds the workload's faults, and the outside toucher's
    // faults are in another row: no pod (a null UID) on most machines, the runner's own pod
    // where the tests run inside one.
    let rep: Value =
        serde_json::from_str(&imc_ok(&["report", f, "--by", "pod", "--json"])).unwrap();
    let pods: Vec<&Value> = rep["tasks"].as_array().unwrap().iter().collect();
    let pod = pods
        .iter()
        .find(|t| t["pod_uid"] == POD)
        .expect("the pod's row");
    assert_eq!(faults(pod), faults(mine[0]));
    let others: Vec<&&Value> = pods.iter().filter(|t| t["pod_uid"] != POD).collect();
    assert!(
        others.iter().map(|t| faults(t)).sum::<f64>() > 1000.0,
        "the outside toucher's faults are in a row of their own: {pods:?}"
    );
    let uids: std::collections::BTreeSet<String> =
        pods.iter().map(|t| t["pod_uid"].to_string()).collect();
    assert_eq!(uids.len(), pods.len(), "one row per pod: {pods:?}");
    // Every other row is another cgroup.
    let paths: Vec<&Value> = tasks.iter().map(|t| &t["cgroup_path"]).collect();
    let mut dedup = paths.clone();
    dedup.sort_by_key(|v| v.to_string());
    dedup.dedup();
    assert_eq!(dedup.len(), paths.len(), "{paths:?}");
    // The human table names the cgroup by its path.
    let text = imc_ok(&["report", f, "--by", "cgroup"]);
    assert!(text.contains(&cg.rel), "the table names {}", cg.rel);
    let _ = child.kill();
    let _ = child.wait();
}

/// Counter values of a track as (timestamp, value), in time order.
type Series = Vec<(u64, f64)>;

/// The integral of a step series (each value holds until the next timestamp): per-second
/// rates back to amounts.
fn integral(s: &Series) -> f64 {
    s.windows(2)
        .map(|w| w[0].1 * (w[1].0 - w[0].0) as f64 / 1e9)
        .sum()
}

struct Decoded {
    names: BTreeMap<u64, String>,
    /// Process track uuid → pid; counter track uuid → parent uuid.
    pids: BTreeMap<u64, i32>,
    parents: BTreeMap<u64, u64>,
    counters: BTreeMap<u64, Series>,
    /// (begin ns, end ns, title, culprits in the arguments).
    slices: Vec<(u64, u64, String, Vec<String>)>,
}

fn decode(path: &Path) -> Decoded {
    let bytes = std::fs::read(path).expect("the trace file");
    let trace = Trace::parse_from_bytes(&bytes).expect("a Perfetto trace");
    let mut d = Decoded {
        names: BTreeMap::new(),
        pids: BTreeMap::new(),
        parents: BTreeMap::new(),
        counters: BTreeMap::new(),
        slices: Vec::new(),
    };
    let mut open: Option<(u64, String, Vec<String>)> = None;
    for p in &trace.packet {
        if p.has_track_descriptor() {
            let td = p.track_descriptor();
            if td.has_name() {
                d.names.insert(td.uuid(), td.name().to_owned());
            }
            if let Some(proc_) = td.process.as_ref() {
                d.pids.insert(td.uuid(), proc_.pid());
            }
            if td.has_parent_uuid() {
                d.parents.insert(td.uuid(), td.parent_uuid());
            }
        }
        if p.has_track_event() {
            let e = p.track_event();
            match e.type_() {
                EventType::TYPE_COUNTER => d
                    .counters
                    .entry(e.track_uuid())
                    .or_default()
                    .push((p.timestamp(), e.double_counter_value())),
                EventType::TYPE_SLICE_BEGIN => {
                    let culprits = e
                        .debug_annotations
                        .iter()
                        .filter(|a| a.name().starts_with("culprit"))
                        .map(|a| a.string_value().to_owned())
                        .collect();
                    open = Some((p.timestamp(), e.name().to_owned(), culprits));
                }
                EventType::TYPE_SLICE_END => {
                    let (t0, name, c) = open.take().expect("a slice ends after it begins");
                    d.slices.push((t0, p.timestamp(), name, c));
                }
                _ => {}
            }
        }
    }
    d
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn perfetto_and_plot_of_a_real_recording_match_the_report() {
    if !sampler_prerequisites() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let child = Command::new("setsid")
        .args(["sh", "-c", BURSTY])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn the workload");
    let _workload = Workload(child);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.imc");
    let (f, trace, svg) = (
        file.to_str().unwrap().to_owned(),
        dir.path().join("r.pftrace"),
        dir.path().join("r.svg"),
    );
    imc_ok(&["record", "-e", "page-faults", "-o", &f, "--duration", "5"]);
    let rep: Value = serde_json::from_str(&imc_ok(&["report", &f, "--json"])).unwrap();
    imc_ok(&[
        "report",
        &f,
        "--perfetto",
        trace.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);

    let d = decode(&trace);
    // A stand-in source: one track for all CPUs, in page faults, never bytes.
    let pkg: Vec<(&u64, &String)> = d
        .names
        .iter()
        .filter(|(u, _)| (1_000..2_000).contains(*u))
        .collect();
    assert_eq!(pkg.len(), 1, "{:?}", d.names);
    assert!(pkg[0].1.contains("page-faults/s"), "{}", pkg[0].1);
    assert!(
        d.names.values().all(|n| !n.contains("bytes")),
        "{:?}",
        d.names
    );
    // The package track adds up to everything measured: attributed faults / their share.
    let tasks = rep["tasks"].as_array().unwrap();
    let counted: f64 = tasks.iter().map(faults).sum();
    let shares: f64 = tasks.iter().map(|t| t["share"].as_f64().unwrap()).sum();
    let all = integral(&d.counters[pkg[0].0]);
    assert!(
        close(all, counted / shares, 0.01),
        "{all} vs {counted}/{shares}"
    );

    // One process track per top process, in the report's order, each adding up to the
    // report's figure for that process.
    let groups: Vec<u64> = d
        .names
        .keys()
        .copied()
        .filter(|u| (3_000..4_000).contains(u))
        .collect();
    assert!(!groups.is_empty() && groups.len() <= 8, "{:?}", d.names);
    for (i, uuid) in groups.iter().enumerate() {
        let row = &tasks[i];
        let parent = d.parents[uuid];
        assert_eq!(i64::from(d.pids[&parent]), row["tgid"].as_i64().unwrap());
        let got = integral(&d.counters[uuid]);
        assert!(
            close(got, faults(row), 0.01),
            "track {uuid}: {got} vs {row}"
        );
        assert!(d.names[uuid].contains(row["comm"].as_str().unwrap()));
    }

    // One slice per burst, at the burst's times, named after its first culprit.
    let bursts = rep["bursts"].as_array().unwrap();
    assert!(!bursts.is_empty(), "the bursty workload makes bursts");
    assert_eq!(d.slices.len(), bursts.len());
    for ((t0, t1, name, culprits), b) in d.slices.iter().zip(bursts) {
        assert_eq!(*t0, b["t_start_ns"].as_u64().unwrap());
        assert_eq!(*t1, b["t_end_ns"].as_u64().unwrap());
        let first = &b["tasks"][0];
        let who = format!(
            "{} (pid {})",
            first["comm"].as_str().unwrap(),
            first["tgid"]
        );
        assert!(name.contains(&who), "{name} names {who}");
        assert_eq!(culprits.len(), b["tasks"].as_array().unwrap().len());
        assert!(
            name.contains("page-faults/s") && !name.contains("B/s"),
            "{name}"
        );
    }

    check_svg(&svg, &d, &groups);
}

/// The SVG is XML with one filled band per top process (in the plot's colours) plus the rest,
/// a legend naming each, and an axis in page faults per second.
fn check_svg(path: &Path, d: &Decoded, groups: &[u64]) {
    let text = std::fs::read_to_string(path).expect("the SVG");
    let doc = roxmltree::Document::parse(&text).expect("the plot is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let fills: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("polygon"))
        .filter_map(|n| n.attribute("fill").map(str::to_uppercase))
        .collect();
    for i in 0..groups.len() {
        let c = imc::output::plot::colour(i);
        let hex = format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2);
        assert_eq!(
            fills.iter().filter(|f| **f == hex).count(),
            1,
            "one band of {hex}: {fills:?}"
        );
    }
    assert_eq!(fills.len(), groups.len() + 1, "the groups and the rest");
    let labels: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    for uuid in groups {
        // The track is "comm (pid N) (page-faults/s)"; the legend "comm (pid N) 12.3%".
        let name = d.names[uuid].trim_end_matches(" (page-faults/s)");
        assert!(
            labels.iter().any(|l| l.starts_with(name)),
            "legend names {name}: {labels:?}"
        );
    }
    assert!(labels.contains(&"page-faults/s"), "{labels:?}");
    assert!(labels.iter().all(|l| !l.contains("B/s")), "{labels:?}");
}

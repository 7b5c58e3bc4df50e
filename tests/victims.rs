//! `imc report --victims` against known truth: the simulator's victims scenarios (a streamer
//! filling a socket's channels beside a pointer chaser whose stalls grow with the queues, and
//! tasks that do not wait on that memory) planned by the real plan on their fixture trees,
//! attributed by the real attributor and written by the real writer, as `imc record` would on
//! that hardware; the built binary reports the file, and the stall each burst added to each
//! task is checked against the simulator's own count of the task's stalled cycles and cycles.
//! A recording made in a VM (no core PMU, no stall counters) is refused in one line.
use imc::attribution::Attributor;
use imc::model::{StallPart, Victims};
use imc::record::{RecordHeader, Writer, WriterOptions};
use imc::sampler::aggregate_twin::Aggregator;
use imc::sampler::from_plan::slot_specs;
use imc_sim::scenario::{Loaded, RunOptions, Weigh, load};
use imc_sim::{SynthItem, Truth};
use imc_tests::{imc, run_ok};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A scenario recorded, and the truth at the end of each of its intervals (cumulative).
struct Recorded {
    path: PathBuf,
    /// Per interval: its end (ns) and the truth up to it.
    marks: Vec<(u64, Truth)>,
    /// Per task entry of the scenario: pid and name.
    tasks: Vec<(u32, String)>,
    cpu_hz: f64,
}

fn scenario(name: &str) -> Loaded {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(name);
    load(&path).unwrap()
}

/// Records `l` the way `imc record` does on its machine: the real plan's slots (the stall pair
/// and cpu-clock among them), switches folded into the kernel's per-task aggregates, one
/// interval per mark.
fn record(l: &Loaded, file: &str) -> Recorded {
    let opts = RunOptions {
        weigh: Weigh::Auto,
        drain_ms: 100,
        batch_ms: Some(1000),
        precise: false,
    };
    let plan = l.plan(&opts).unwrap();
    let specs = slot_specs(&plan);
    assert!(
        Victims::keys(&specs).is_some() && Victims::key(&specs, StallPart::Time).is_some(),
        "{}: the plan counts the stall pair and the time beside it",
        l.path.display()
    );
    let sc = l.synth(&plan);
    let topo = &l.found.topology;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("victims-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(file);
    let _ = std::fs::remove_file(&path);
    let interval_ns = l.file.interval_ms * 1_000_000;
    let mut header = RecordHeader::new(
        &specs,
        topo,
        sc.freq_hz,
        plan.source.to_string(),
        interval_ns,
    );
    header.weighting = plan.weighting.clone();
    let mut w = Writer::with_options(&path, header, None, WriterOptions::default()).unwrap();
    let mut a = Attributor::new(&specs, topo, plan.source.to_string())
        .tick_hz(sc.freq_hz)
        .weighting(plan.weighting.clone());
    let mut fold = sc.precise.then(|| Aggregator::new(&specs, sc.freq_hz));
    let mut folded = Vec::new();
    let mut marks = Vec::new();
    let mut stream = sc.stream();
    while let Some(item) = stream.next() {
        match item {
            SynthItem::Tick(r) => {
                match fold.as_mut() {
                    Some(agg) => agg.push(&r, &mut folded),
                    None => folded.push(r),
                }
                for rec in folded.drain(..) {
                    a.push_tick(&rec);
                    w.push_tick(&rec).unwrap();
                }
            }
            SynthItem::PackageRead(p, s, t, v) => a.push_package_read(p, s, t, v),
            SynthItem::Mark(t) => {
                w.push_interval(&a.close_interval(t)).unwrap();
                marks.push((t, stream.truth.clone()));
            }
        }
    }
    w.finish().unwrap();
    Recorded {
        path,
        marks,
        tasks: l
            .file
            .tasks
            .iter()
            .map(|t| (t.pid, t.comm.clone()))
            .collect(),
        cpu_hz: sc.latency.cpu_hz,
    }
}

/// One task's truth: stalled cycles and cycles in the span, and outside it.
#[derive(Clone, Copy, Debug, Default)]
struct Split {
    stall_in: f64,
    cycles_in: f64,
    stall_out: f64,
    cycles_out: f64,
}

impl Split {
    /// The stall the span added over the task's baseline outside it, in seconds (None: the
    /// task ran no cycle outside, no baseline).
    fn added_s(&self, cpu_hz: f64) -> Option<f64> {
        if self.cycles_out <= 0.0 || self.cycles_in <= 0.0 {
            return (self.cycles_in > 0.0 && self.cycles_out > 0.0).then_some(0.0);
        }
        let (sin, sout) = (
            self.stall_in / self.cycles_in,
            self.stall_out / self.cycles_out,
        );
        Some((sin - sout) * self.cycles_in / cpu_hz)
    }
}

/// Per task entry: the simulator's counts inside [from, to) and outside it. The first interval
/// is left out on both sides: the attributor sets its counters' baselines there, so nothing is
/// charged in it.
fn truth_split(r: &Recorded, from: u64, to: u64) -> Vec<Split> {
    let mut out = vec![Split::default(); r.tasks.len()];
    for w in r.marks.windows(2) {
        let ((start, before), (end, after)) = (&w[0], &w[1]);
        let inside = *start >= from && *end <= to;
        for (i, s) in out.iter_mut().enumerate() {
            let stall = after.task_stall[i] - before.task_stall[i];
            let cycles = after.task_cycles[i] - before.task_cycles[i];
            if inside {
                s.stall_in += stall;
                s.cycles_in += cycles;
            } else {
                s.stall_out += stall;
                s.cycles_out += cycles;
            }
        }
    }
    out
}

fn report_json(path: &Path) -> Value {
    report_json_by(path, "pid")
}

fn report_json_by(path: &Path, by: &str) -> Value {
    let out = run_ok(imc().args(["report", "--json", "--by", by]).arg(path));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The report's one burst against the truth: its victims in the true order, each task's added
/// stall within 1% (and 1 ms) of the truth, null exactly where the truth has no baseline; the
/// run's victims likewise. Returns the burst's victims' pids in the report's order.
fn check_against_truth(r: &Recorded, burst_from_s: f64) -> Vec<u64> {
    let v = report_json(&r.path);
    let bursts = v["bursts"].as_array().unwrap();
    assert_eq!(bursts.len(), 1, "{:#}", v["bursts"]);
    let b = &bursts[0];
    // The simulated run starts at 0: the recording's times are the simulator's.
    let from = b["t_start_ns"].as_u64().unwrap();
    let to = b["t_end_ns"].as_u64().unwrap();
    let from_s = from as f64 / 1e9;
    assert!(
        (from_s - burst_from_s).abs() < 1e-6,
        "burst from {from_s} s"
    );
    let truth = truth_split(r, from, to);
    let victims = b["victims"].as_array().unwrap();
    let truth_of = |pid: u64| {
        let i = r.tasks.iter().position(|t| u64::from(t.0) == pid).unwrap();
        truth[i].added_s(r.cpu_hz)
    };
    for x in victims {
        let pid = x["pid"].as_u64().unwrap();
        let want = truth_of(pid);
        let got = x["added_stall_seconds"].as_f64();
        match (want, got) {
            (Some(w), Some(g)) => assert!(
                (g - w).abs() <= 0.01 * w.abs() + 1e-3,
                "pid {pid}: {g} s added, the truth {w} s"
            ),
            (None, None) => {}
            _ => panic!("pid {pid}: {got:?} added, the truth {want:?}"),
        }
    }
    // Ranked as the truth ranks them (pairs closer than a millisecond are ties), those without a
    // baseline last.
    let order: Vec<u64> = victims.iter().map(|x| x["pid"].as_u64().unwrap()).collect();
    for (k, a) in order.iter().enumerate() {
        for b in &order[k + 1..] {
            match (truth_of(*a), truth_of(*b)) {
                (Some(x), Some(y)) => assert!(x >= y - 1e-3, "{a} before {b}: {order:?}"),
                (None, Some(_)) => panic!("{a} has no baseline but ranks before {b}: {order:?}"),
                _ => {}
            }
        }
    }
    // Over the run: one burst, so the run's added stall is the burst's.
    for x in v["victims"].as_array().unwrap() {
        let pid = x["pid"].as_u64().unwrap();
        let burst = victims.iter().find(|y| y["pid"] == x["pid"]).unwrap();
        assert_eq!(
            x["added_stall_seconds"], burst["added_stall_seconds"],
            "{pid}"
        );
    }
    assert_eq!(v["victims_reason"], Value::Null);
    order
}

#[test]
fn the_chaser_is_the_streamer_s_victim_by_the_stall_its_burst_added() {
    let l = scenario("victims-streamer-beside-a-chaser.json");
    let r = record(&l, "chaser.imc");
    // The streamer starts at 5 s: the run's one burst is its second half.
    let order = check_against_truth(&r, 5.0);
    // chaser (stalls grow with the queue), spin (touches no memory), stream (no baseline).
    assert_eq!(order, [2001, 2002, 2000]);
    let v = report_json(&r.path);
    let chaser = &v["bursts"][0]["victims"][0];
    // Its share is its loaded latency's, its baseline the idle one's: 80 ns per line read.
    let lines = 1e8 / 64.0;
    let base = chaser["baseline_stall_share"].as_f64().unwrap();
    assert!((base - lines * 80e-9).abs() < 1e-3, "{base}");
    assert!(
        chaser["added_stall_seconds"].as_f64().unwrap() > 1.0,
        "{chaser}"
    );
    assert_eq!(v["bursts"][0]["tasks"][0]["comm"], "stream", "the culprit");
    // Grouped by name (groups summed across the report's parts, not whole in each): the same
    // victims, a group's pid null.
    let c = report_json_by(&r.path, "comm");
    let names = |v: &Value| -> Vec<(String, Option<f64>)> {
        v["bursts"][0]["victims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| {
                (
                    x["comm"].as_str().unwrap().to_string(),
                    x["added_stall_seconds"].as_f64(),
                )
            })
            .collect()
    };
    assert_eq!(names(&c), names(&v));
    assert_eq!(c["victims"][0]["pid"], Value::Null);
    std::fs::remove_file(&r.path).unwrap();
}

#[test]
fn only_the_reader_of_the_saturated_socket_is_a_victim() {
    let mut l = scenario("victims-two-sockets.json");
    // The streamer from 5 s on, so the run has a baseline before its burst.
    l.file.tasks[0].start_s = 5.0;
    let r = record(&l, "two-sockets.imc");
    let order = check_against_truth(&r, 5.0);
    assert_eq!(order[0], 3001, "kv-near first: {order:?}");
    assert_eq!(*order.last().unwrap(), 3000, "the streamer has no baseline");
    let v = report_json(&r.path);
    let far = v["bursts"][0]["victims"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["comm"] == "kv-far")
        .unwrap()
        .clone();
    assert!(
        far["added_stall_seconds"].as_f64().unwrap().abs() < 1e-3,
        "the other socket's reader waits as before: {far}"
    );
    std::fs::remove_file(&r.path).unwrap();
}

#[test]
fn the_text_report_names_culprits_and_victims_per_burst_and_over_the_run() {
    let l = scenario("victims-streamer-beside-a-chaser.json");
    let r = record(&l, "chaser-text.imc");
    let out = run_ok(imc().args(["report", "--victims"]).arg(&r.path));
    let text = String::from_utf8(out.stdout).unwrap();
    let section = &text[text.find("\nvictims (").expect(&text)..];
    let culprits = section.find("culprits:").unwrap();
    let victims = section.find("    victims:").unwrap();
    let run = section.find("over the run").unwrap();
    assert!(culprits < victims && victims < run, "{section}");
    // The burst's first culprit is the streamer, its first victim the chaser, its stall added
    // in seconds; the streamer has no baseline.
    let line_after = |at: usize, skip: usize| section[at..].lines().nth(skip).unwrap().to_string();
    assert!(line_after(culprits, 2).contains("stream"), "{section}");
    let first = line_after(victims, 2);
    assert!(
        first.contains("chaser") && first.contains(" s"),
        "{section}"
    );
    assert!(section.contains("- (no baseline)"), "{section}");
    assert!(line_after(run, 2).contains("chaser"), "{section}");
    std::fs::remove_file(&r.path).unwrap();
}

/// A recording made in a VM (no core PMU): `--victims` is refused in one line, exit 2, and the
/// JSON says null with the reason.
#[test]
fn a_recording_without_stall_counters_is_refused_in_one_line() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("recordings/page-faults-2026-11.imc");
    let out = imc()
        .args(["report", "--victims"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--victims: this recording has no stall counters ("),
        "{err}"
    );
    let v = report_json(&path);
    assert_eq!(v["victims"], Value::Null);
    assert!(v["victims_reason"].as_str().unwrap().contains("stalled"));
    for b in v["bursts"].as_array().unwrap() {
        assert_eq!(b["victims"], Value::Null);
    }
    // --json --victims is refused as well: no made-up figures.
    let out = imc()
        .args(["report", "--victims", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Counter tracks by name and burst slices' arguments, decoded with Perfetto's own protos.
struct Decoded {
    /// Track name → its counter values (timestamp, value), in time order.
    counters: std::collections::BTreeMap<String, Vec<(u64, f64)>>,
    /// Per burst slice: (begin ns, its arguments' names and values).
    slices: Vec<(u64, Vec<(String, String)>)>,
}

fn decode(path: &Path) -> Decoded {
    use imc::output::perfetto_proto::Trace;
    use imc::output::perfetto_proto::track_event::Type;
    use protobuf::Message;
    let trace = Trace::parse_from_bytes(&std::fs::read(path).unwrap()).unwrap();
    let mut names = std::collections::BTreeMap::new();
    let mut d = Decoded {
        counters: Default::default(),
        slices: Vec::new(),
    };
    for p in &trace.packet {
        if p.has_track_descriptor() {
            let td = p.track_descriptor();
            names.insert(td.uuid(), td.name().to_owned());
        }
    }
    for p in &trace.packet {
        if !p.has_track_event() {
            continue;
        }
        let e = p.track_event();
        match e.type_() {
            Type::TYPE_COUNTER => d
                .counters
                .entry(names[&e.track_uuid()].clone())
                .or_default()
                .push((p.timestamp(), e.double_counter_value())),
            Type::TYPE_SLICE_BEGIN => d.slices.push((
                p.timestamp(),
                e.debug_annotations
                    .iter()
                    .map(|a| (a.name().to_owned(), a.string_value().to_owned()))
                    .collect(),
            )),
            _ => {}
        }
    }
    d
}

#[test]
fn the_perfetto_trace_names_victims_in_burst_slices_and_tracks_their_stall_share() {
    let l = scenario("victims-streamer-beside-a-chaser.json");
    let r = record(&l, "chaser-trace.imc");
    let trace = r.path.with_extension("pftrace");
    let _ = std::fs::remove_file(&trace);
    run_ok(
        imc()
            .args(["report", "--by", "pid", "--perfetto"])
            .arg(&trace)
            .arg(&r.path),
    );
    let d = decode(&trace);
    // The burst's slice: its culprit first, then its victims, the chaser first.
    assert_eq!(d.slices.len(), 1);
    let args = &d.slices[0].1;
    let arg = |name: &str| args.iter().find(|a| a.0 == name).map(|a| a.1.clone());
    assert!(arg("culprit 1").unwrap().contains("stream"), "{args:?}");
    let v1 = arg("victim 1").unwrap();
    assert!(v1.contains("chaser") && v1.contains(" s stalled"), "{v1}");
    assert!(arg("victim 3").unwrap().contains("no baseline"), "{args:?}");
    // The chaser's stall share, interval by interval, against the simulator's truth.
    let (name, series) = d
        .counters
        .iter()
        .find(|(n, _)| n.starts_with("stall share: ") && n.contains("chaser"))
        .expect("a stall-share track for the chaser");
    assert!(name.ends_with("(%)"), "{name}");
    let chaser = r.tasks.iter().position(|t| t.1 == "chaser").unwrap();
    let mut checked = 0;
    for w in r.marks.windows(2) {
        let ((start, before), (_, after)) = (&w[0], &w[1]);
        let truth = (after.task_stall[chaser] - before.task_stall[chaser])
            / (after.task_cycles[chaser] - before.task_cycles[chaser])
            * 100.0;
        let at = series
            .iter()
            .find(|(t, _)| t == start)
            .expect("a point per interval");
        assert!(
            (at.1 - truth).abs() < 1.0,
            "at {start}: {} % against {truth} %",
            at.1
        );
        checked += 1;
    }
    assert_eq!(checked, r.marks.len() - 1);
    // It grows in the burst: idle latency before 5 s, loaded after.
    let at = |s: u64| {
        series
            .iter()
            .find(|(t, _)| *t == s * 1_000_000_000)
            .unwrap()
            .1
    };
    assert!(at(7) > 3.0 * at(2), "{series:?}");
    std::fs::remove_file(&trace).unwrap();
    std::fs::remove_file(&r.path).unwrap();
}

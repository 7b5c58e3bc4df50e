//! `imc report` end to end: recordings made by the writer from synthetic timelines (60 s at
//! 1000 Hz), read back by the built binary; the same file cut in the middle; rotation; files
//! that are not recordings or are too new.
use imc::model::result::IntervalResult;
use imc::record::{Item, ReadStatus, Reader, WriterOptions, rotated_path};
use imc_sim::record::record_scenario;
use imc_sim::{Scenario, SynthTask};
use imc_tests::imc;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

/// Four CPUs with steady streams, and on CPU 3 a task that bursts at 16 GB/s for 300 ms every
/// 10 s (idle otherwise): six bursts, at 5.0 s, 15.0 s, … 55.0 s.
fn bursty(secs: u64) -> Scenario {
    let mut sc = Scenario::busy(4, 1000, secs * S);
    sc.tasks[3] = SynthTask {
        pid: 4242,
        tgid: 4242,
        comm: "burster".into(),
        cgroup: 9,
        read_bps: 12.0e9,
        write_bps: 4.0e9,
    };
    sc.schedule[3] = (0..secs / 10)
        .flat_map(|k| {
            [
                ((k * 10 + 5) * S, Some(3)),
                ((k * 10 + 5) * S + 300 * MS, None),
            ]
        })
        .collect();
    sc
}

/// The 60 s recording, made once per test run for all tests (in cargo's per-target temporary
/// directory: a static TempDir would never be dropped and would leak into /tmp).
fn recording() -> &'static (PathBuf, PathBuf) {
    static REC: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    REC.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-tests");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run.imc");
        let (stats, _) =
            record_scenario(&bursty(60), &path, 100 * MS, None, WriterOptions::default()).unwrap();
        assert_eq!(stats.intervals, 600);
        assert!(
            stats.ticks_written > 0,
            "raw ticks around the bursts: {stats:?}"
        );
        (path, dir)
    })
}

fn report(args: &[&str]) -> (i32, String, String) {
    let out = imc().arg("report").args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(args: &[&str]) -> (Value, String) {
    let (code, out, err) = report(args);
    assert_eq!(code, 0, "stderr: {err}");
    (serde_json::from_str(&out).unwrap(), err)
}

fn intervals(path: &Path) -> (Vec<IntervalResult>, ReadStatus) {
    let mut r = Reader::open(path).unwrap();
    let mut v = Vec::new();
    while let Some(it) = r.next_item() {
        if let Item::Interval(iv) = it {
            v.push(iv);
        }
    }
    (v, r.status().clone())
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap()
}

#[test]
fn sixty_seconds_at_1000_hz_report_matches_the_intervals() {
    let (path, _) = recording();
    let p = path.to_str().unwrap();
    let (v, err) = json(&[p, "--json", "--by", "pid"]);
    assert!(err.is_empty(), "a complete file gives no warning: {err}");
    let (ivs, status) = intervals(path);
    assert_eq!(status, ReadStatus::Complete);
    assert_eq!(ivs.len(), 600);
    assert_eq!(u(&v["t_start_ns"]), 0);
    assert_eq!(u(&v["t_end_ns"]), 60 * S);
    assert_eq!(v["source"], "intel-uncore-imc");
    let read: u64 = ivs.iter().map(|iv| iv.packages[0].read_bytes).sum();
    assert_eq!(u(&v["packages"][0]["read_bytes"]), read);
    // The burster read 12 GB/s for 6 × 300 ms = 21.6 GB.
    let tasks = v["tasks"].as_array().unwrap();
    let b = tasks.iter().find(|t| t["comm"] == "burster").unwrap();
    let got = u(&b["read_bytes"]) as f64;
    assert!((got - 21.6e9).abs() < 0.02 * 21.6e9, "{got}");
    assert_eq!(u(&b["pid"]), 4242);
    let shares: f64 = tasks.iter().map(|t| t["share"].as_f64().unwrap()).sum();
    assert!((shares - 1.0).abs() < 1e-3, "{shares}");
    assert_eq!(u(&v["unattributed_bytes"]), 0);
    assert_eq!(u(&v["lost_samples"]), 0);
}

#[test]
fn bursts_above_an_explicit_threshold_are_the_injected_ones() {
    let (path, _) = recording();
    // Steady traffic is ~2.4 GB/s; bursts add 16 GB/s.
    let (v, _) = json(&[path.to_str().unwrap(), "--json", "--burst-threshold", "8G"]);
    let bursts = v["bursts"].as_array().unwrap();
    assert_eq!(bursts.len(), 6, "{bursts:?}");
    for (k, b) in bursts.iter().enumerate() {
        let start = (k as u64 * 10 + 5) * S;
        // Intervals are 100 ms, aligned: the burst is exactly three merged intervals.
        assert_eq!(u(&b["t_start_ns"]), start);
        assert_eq!(u(&b["t_end_ns"]), start + 300 * MS);
        assert!(b["bytes_per_s"].as_f64().unwrap() > 16.0e9);
        let top = &b["tasks"][0];
        assert_eq!(top["comm"], "burster");
        assert!(top["share"].as_f64().unwrap() > 0.8);
    }
}

#[test]
fn default_threshold_lies_between_the_typical_and_the_peak_level() {
    let (path, _) = recording();
    let (v, _) = json(&[path.to_str().unwrap(), "--json"]);
    let bursts = v["bursts"].as_array().unwrap();
    // Steady ~2.4 GB/s, bursts ~18.4 GB/s: the threshold halfway between takes all eighteen
    // burst intervals (3% of the run), so all six bursts and nothing else.
    assert_eq!(bursts.len(), 6);
    for b in bursts {
        let t = u(&b["t_start_ns"]);
        assert_eq!((t / S) % 10, 5, "burst at {t} is not an injected one");
        assert_eq!(b["tasks"][0]["comm"], "burster");
    }
}

#[test]
fn human_table_lists_tasks_and_bursts() {
    let (path, _) = recording();
    let (code, out, err) = report(&[path.to_str().unwrap(), "--bursts", "--by", "comm"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("intel-uncore-imc at 1000 Hz, 60.0 s"), "{out}");
    let head = out
        .lines()
        .find(|l| l.trim_start().starts_with("COMM"))
        .unwrap();
    assert!(head.contains("READ") && head.contains("WRITE") && head.contains("SHARE"));
    assert!(out.contains("burster"));
    assert!(out.contains("GiB"));
    assert!(out.contains("bursts above"));
    assert!(out.contains("unattributed: 0 B"));
}

#[test]
fn a_file_cut_in_the_middle_reports_everything_before_the_cut() {
    let (path, dir) = recording();
    let data = std::fs::read(path).unwrap();
    let cut = dir.join("cut.imc");
    std::fs::write(&cut, &data[..data.len() / 2]).unwrap();
    let (ivs, status) = intervals(&cut);
    assert!(matches!(status, ReadStatus::Damaged { .. }), "{status:?}");
    let (full, _) = intervals(path);
    assert!(ivs.len() > 100 && ivs.len() < 600, "{}", ivs.len());
    assert_eq!(
        ivs[..],
        full[..ivs.len()],
        "what is read is exactly the file's beginning"
    );

    let (v, err) = json(&[cut.to_str().unwrap(), "--json"]);
    assert_eq!(err.lines().count(), 1, "one warning line: {err}");
    assert!(err.contains("cut"), "{err}");
    assert_eq!(u(&v["t_end_ns"]), ivs.last().unwrap().t_end_ns);
    let read: u64 = ivs.iter().map(|iv| iv.packages[0].read_bytes).sum();
    assert_eq!(u(&v["packages"][0]["read_bytes"]), read);

    // Cut exactly between chunks (no END marker): still everything, still a warning.
    let (code, out, err) = report(&[cut.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("SHARE"));
    assert!(err.starts_with("imc: warning:"));
}

#[test]
fn a_flat_run_says_why_it_has_no_bursts_instead_of_a_threshold_of_dash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flat.imc");
    record_scenario(
        &Scenario::busy(2, 1000, 5_000_000_000),
        &path,
        100 * MS,
        None,
        WriterOptions::default(),
    )
    .unwrap();
    let (code, out, err) = report(&[path.to_str().unwrap(), "--bursts"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("bursts above -"), "{out}");
    assert!(
        out.contains("bursts: none") && out.contains("--burst-threshold"),
        "{out}"
    );
}

#[test]
fn a_malformed_chunk_is_reported_as_damage_not_as_a_cut() {
    let (path, dir) = recording();
    let data = std::fs::read(path).unwrap();
    // The file's END chunk replaced by an INTERVAL chunk whose payload does not decode, with
    // a right checksum: the file is whole, one of its chunks is wrong.
    let hlen = 18 + u32::from_le_bytes(data[10..14].try_into().unwrap()) as usize;
    let mut at = hlen;
    let mut last = at;
    while at < data.len() {
        last = at;
        at += 9 + u32::from_le_bytes(data[at + 1..at + 5].try_into().unwrap()) as usize;
    }
    let mut f = data[..last].to_vec();
    let start = f.len();
    f.push(3);
    f.extend(3u32.to_le_bytes());
    f.extend([0xff; 3]);
    let crc = imc::record::codec::crc32(&[&f[start..]]);
    f.extend(crc.to_le_bytes());
    let bad = dir.join("malformed.imc");
    std::fs::write(&bad, &f).unwrap();
    let (code, _, err) = report(&[bad.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("malformed chunk") && err.contains("damaged") && !err.contains("cut"),
        "{err}"
    );
    // A file that ends inside a chunk is a cut.
    let cut = dir.join("cut-in-chunk.imc");
    std::fs::write(&cut, &data[..data.len() - 2]).unwrap();
    let (_, _, err) = report(&[cut.to_str().unwrap()]);
    assert!(err.contains("was cut"), "{err}");
}

#[test]
fn not_a_recording_or_too_new_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk");
    std::fs::write(&junk, b"hello, this is not a recording").unwrap();
    let (code, out, err) = report(&[junk.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(out.is_empty());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not an imc recording"), "{err}");

    let (path, _) = recording();
    let mut data = std::fs::read(path).unwrap();
    data[8..10].copy_from_slice(&99u16.to_le_bytes());
    let newer = dir.path().join("newer.imc");
    std::fs::write(&newer, &data).unwrap();
    let (code, _, err) = report(&[newer.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert_eq!(err.lines().count(), 1);
    assert!(err.contains("version 99"), "{err}");

    let (code, _, err) = report(&[dir.path().join("missing").to_str().unwrap()]);
    assert_eq!(code, 2);
    assert_eq!(err.lines().count(), 1);
}

#[test]
fn max_size_rotates_into_file_1_and_report_reads_both() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rot.imc");
    let max = 64 * 1024;
    let (stats, _) = record_scenario(
        &bursty(20),
        &path,
        100 * MS,
        Some(max),
        WriterOptions::default(),
    )
    .unwrap();
    assert!(stats.rotations >= 1, "{stats:?}");
    let old = rotated_path(&path);
    let (a, b) = (
        std::fs::metadata(&path).unwrap().len(),
        std::fs::metadata(&old).unwrap().len(),
    );
    assert!(a + b <= max, "{a} + {b} > {max}");
    let (newest, s1) = intervals(&path);
    let (older, s2) = intervals(&old);
    assert_eq!(s1, ReadStatus::Complete);
    // FILE.1 ends with the rotation marker: a clean rotation, not an interruption.
    assert_eq!(s2, ReadStatus::Continued);
    assert_eq!(
        older.last().unwrap().t_end_ns,
        newest[0].t_start_ns,
        "FILE.1 ends where FILE starts"
    );
    let (v, err) = json(&[path.to_str().unwrap(), "--json"]);
    assert!(err.is_empty(), "a clean rotation gives no warning: {err}");
    assert_eq!(u(&v["t_start_ns"]), older[0].t_start_ns);
    assert_eq!(u(&v["t_end_ns"]), 20 * S);
}

#[test]
fn precise_recordings_report_the_tick_only_difference() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("precise.imc");
    let mut sc = bursty(12);
    // The burster hides between ticks: 0.3 ms of every 1 ms, never at a tick.
    sc.tasks.push(SynthTask {
        pid: 77,
        tgid: 77,
        comm: "hider".into(),
        cgroup: 1,
        read_bps: 1.0e7,
        write_bps: 0.0,
    });
    sc.schedule[3] = (5000..5300u64)
        .flat_map(|k| [(k * MS + 100_000, Some(3)), (k * MS + 400_000, Some(4))])
        .chain([(5300 * MS, None)])
        .collect();
    sc.precise = true;
    let opts = WriterOptions {
        burst_threshold: Some(5.0e9),
        ..WriterOptions::default()
    };
    record_scenario(&sc, &path, 100 * MS, None, opts).unwrap();
    let (v, _) = json(&[path.to_str().unwrap(), "--json"]);
    let p = &v["precise_vs_tick"];
    assert!(u(&p["switches"]) > 500, "{p}");
    assert!(p["share_distance"].as_f64().unwrap() > 0.3, "{p}");
    assert_eq!(u(&p["max_diff_pid"]), 4242);
}

/// A stand-in recording as `imc record` makes one in a VM: `event` counted per task (no bytes
/// per count), 20 intervals of 100 ms; a toucher makes 1000 counts per interval and 50000 in
/// intervals 10 and 11 (a burst of 501000/s with the idler's 100), an idler 100.
fn stand_in_recording(dir: &Path, event: &str) -> PathBuf {
    use imc::model::result::{PackageRow, TaskRow};
    use imc::model::{Direction, SlotRole, SlotScope, SlotSpec};
    let specs = [SlotSpec {
        event: event.to_string(),
        scope: SlotScope::Cpu,
        role: SlotRole::Traffic(Direction::Total),
        bytes_per_count: None,
        counter_bits: 64,
    }];
    let topo = Scenario::busy(2, 1000, S).topology();
    let source = format!("proxy:{event}");
    let header = imc::record::RecordHeader::new(&specs, &topo, 1000, source.clone(), 100 * MS);
    let path = dir.join(format!("{event}.imc"));
    let mut w = imc::record::Writer::create(&path, header, None).unwrap();
    for i in 0..20u64 {
        let busy = if (10..12).contains(&i) {
            50_000.0
        } else {
            1000.0
        };
        let task = |pid: u32, comm: &str, n: f64| TaskRow {
            pid,
            tgid: pid,
            comm: comm.into(),
            cgroup: 1,
            share: n / (busy + 100.0),
            values: [(event.to_string(), n)].into_iter().collect(),
            ..TaskRow::default()
        };
        w.push_interval(&IntervalResult {
            t_start_ns: i * 100 * MS,
            t_end_ns: (i + 1) * 100 * MS,
            source: source.clone(),
            packages: vec![PackageRow {
                id: 0,
                ..PackageRow::default()
            }],
            tasks: vec![task(10, "toucher", busy), task(11, "idler", 100.0)],
            unattributed_bytes: 0,
            unattributed: Default::default(),
            lost_samples: 0,
            weighting: None,
            weight_fallbacks: 0,
        })
        .unwrap();
    }
    w.finish().unwrap();
    path
}

#[test]
fn a_stand_in_recording_is_reported_in_its_own_counts_never_in_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = stand_in_recording(dir.path(), "page-faults");
    let p = path.to_str().unwrap();
    let (code, out, err) = report(&[p, "--bursts"]);
    assert_eq!(code, 0, "{err}");
    for bytes in [
        " B ",
        " B/s",
        "KiB",
        "MiB",
        "GiB",
        "package 0:",
        "unattributed:",
    ] {
        assert!(
            !out.contains(bytes),
            "{bytes:?} in a stand-in report:\n{out}"
        );
    }
    assert!(out.contains("not bandwidth"), "{out}");
    let burst = out
        .lines()
        .find(|l| l.contains(" ms "))
        .expect("a burst line");
    assert!(burst.contains("501000 page-faults/s"), "{out}");
    // A suffix on a count rate is a power of 1000: 495K is below the burst's 501000/s (as
    // powers of 1024, 506880/s, it would be above it).
    let (_, out, _) = report(&[p, "--bursts", "--burst-threshold", "495K"]);
    assert!(
        out.contains("bursts above 495000 page-faults/s: 1"),
        "{out}"
    );

    let (v, _) = json(&[p, "--json", "--burst-threshold", "495K"]);
    assert!(v["packages"][0]["read_bytes"].is_null(), "{v}");
    assert!(v["packages"][0]["write_bytes"].is_null(), "{v}");
    assert!(v["unattributed_bytes"].is_null(), "{v}");
    let top = &v["tasks"][0];
    assert_eq!(top["comm"], "toucher");
    assert!(
        top["read_bytes"].is_null() && top["write_bytes"].is_null(),
        "{top}"
    );
    assert_eq!(top["values"]["page-faults"].as_f64(), Some(118_000.0));
    let b = &v["bursts"][0];
    assert!(b["bytes_per_s"].is_null(), "{b}");
    assert_eq!(b["counts_per_s"].as_f64().map(f64::round), Some(501_000.0));
    assert_eq!(b["unit"], "page-faults/s");
    assert!(b["tasks"][0]["read_bytes"].is_null(), "{b}");
}

#[test]
fn a_cpu_clock_stand_in_shows_nanoseconds() {
    let dir = tempfile::tempdir().unwrap();
    let path = stand_in_recording(dir.path(), "cpu-clock");
    let (code, out, err) = report(&[path.to_str().unwrap(), "--bursts"]);
    assert_eq!(code, 0, "{err}");
    let head = out
        .lines()
        .find(|l| l.trim_start().starts_with("TGID"))
        .unwrap();
    assert!(head.contains("CPU-CLOCK NS"), "{out}");
    assert!(out.contains("501000 ns/s (cpu-clock)"), "{out}");
}

#[test]
fn a_bytes_threshold_suffix_stays_binary() {
    let (path, _) = recording();
    let (code, out, err) = report(&[
        path.to_str().unwrap(),
        "--bursts",
        "--burst-threshold",
        "8G",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("bursts above 8.00 GiB/s: 6"), "{out}");
}

/// A group row never shows one member's identity (`PID 0 TGID 0 COMM rustc`; JSON
/// `{"comm":"memchurn","pid":0,…}` for a group memchurn made most of). A group row carries its
/// key: pid, tgid and comm are null unless the key is that field, and the table shows no member
/// name beside a cgroup or a command name. `--by process` is the tgid grouping.
#[test]
fn group_rows_carry_their_key_not_a_members_identity() {
    let (path, _) = recording();
    let p = path.to_str().unwrap();
    for (by, pid, tgid, comm) in [
        ("cgroup", false, false, false),
        ("container", false, false, false),
        ("pod", false, false, false),
        ("comm", false, false, true),
        ("tgid", false, true, true),
        ("process", false, true, true),
        ("pid", true, true, true),
    ] {
        let (v, _) = json(&[p, "--json", "--by", by]);
        let mut rows: Vec<&Value> = v["tasks"].as_array().unwrap().iter().collect();
        for b in v["bursts"].as_array().unwrap() {
            rows.extend(b["tasks"].as_array().unwrap());
        }
        assert!(!rows.is_empty(), "--by {by}");
        for r in rows {
            assert_eq!(!r["pid"].is_null(), pid, "--by {by}: {r}");
            assert_eq!(!r["tgid"].is_null(), tgid, "--by {by}: {r}");
            assert_eq!(!r["comm"].is_null(), comm, "--by {by}: {r}");
        }
    }
    let (code, out, err) = report(&[p, "--by", "cgroup"]);
    assert_eq!(code, 0, "{err}");
    let head = out
        .lines()
        .find(|l| l.trim_start().starts_with("CGROUP"))
        .unwrap();
    assert!(!head.contains("COMM"), "{head}");
    assert!(
        !out.contains("burster"),
        "a member's name in a cgroup row:\n{out}"
    );
    let (_, by_process, _) = report(&[p, "--by", "process"]);
    let (_, by_tgid, _) = report(&[p, "--by", "tgid"]);
    assert_eq!(by_process, by_tgid);
}

/// Peak memory (resident, KiB: the child's own high-water mark, read from /proc until it
/// ends) of `imc report ARGS` and its exit status, stdout to `out`. The child runs under a 1 GiB
/// address-space limit as well, so a report whose memory follows the number of tasks (the
/// probe's 1 M-task file needed 2-3 GB) dies instead of taking the machine.
fn report_rss(args: &[&str], out: &Path) -> (i32, u64, String) {
    use std::os::unix::process::CommandExt;
    let mut cmd = imc();
    cmd.arg("report")
        .args(args)
        .stdout(std::fs::File::create(out).unwrap())
        .stderr(std::fs::File::create(out.with_extension("err")).unwrap());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 1 << 30,
                rlim_max: 1 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let status_file = format!("/proc/{}/status", child.id());
    let mut hwm = 0;
    let status = loop {
        // VmHWM only rises: the last reading before the end is the peak (up to the last 10 ms).
        if let Ok(s) = std::fs::read_to_string(&status_file)
            && let Some(l) = s.lines().find(|l| l.starts_with("VmHWM:"))
        {
            let kib: u64 = l.split_whitespace().nth(1).unwrap().parse().unwrap();
            hwm = hwm.max(kib);
        }
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let err = std::fs::read_to_string(out.with_extension("err")).unwrap();
    (status.code().unwrap_or(-1), hwm, err)
}

/// The report's memory bound: 120,000 distinct tasks (three passes of `TASKS_PER_PASS`, and
/// about 260 MB summed in one: the bound is the point, not the count, which keeps a debug
/// build's run short), over 1200 intervals (process churn) or all in one, reported in every
/// output mode within 200 MB resident, with the busiest rows exact and the rest counted in the
/// others row. `cargo xtask bench-report` gives the figures for a million tasks in a release
/// build.
#[test]
fn a_recording_of_many_tasks_reports_in_bounded_memory_in_every_mode() {
    const TASKS: u32 = 120_000;
    const _: () = assert!(TASKS as usize > 2 * imc::commands::report::TASKS_PER_PASS);
    let dir = tempfile::tempdir().unwrap();
    // The two recordings, made once per build directory.
    let made = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-many");
    std::fs::create_dir_all(&made).unwrap();
    let churn = made.join(format!("churn-{TASKS}.imc"));
    let burst = made.join(format!("one-{TASKS}.imc"));
    for (path, per) in [(&churn, 100), (&burst, TASKS)] {
        if imc::record::Reader::open(path).map_or(true, |mut r| {
            r.keep_rows(|_| false);
            while r.next_item().is_some() {}
            r.status() != &ReadStatus::Complete
        }) {
            imc_sim::record::churn(path, TASKS, per).unwrap();
        }
    }
    let out = |i: usize| dir.path().join(format!("out{i}"));
    let (perfetto, plot) = (dir.path().join("t.pftrace"), dir.path().join("p.svg"));
    let (perfetto, plot) = (perfetto.to_str().unwrap(), plot.to_str().unwrap());
    let mut modes: Vec<Vec<&str>> = vec![
        vec![],
        vec!["--json"],
        vec!["--bursts", "--burst-threshold", "1"],
        vec!["--perfetto", perfetto, "--force"],
        vec!["--plot", plot, "--force"],
    ];
    // Every grouping but the default (pid), which the first mode already runs.
    for by in ["tgid", "comm", "cgroup", "container", "pod"] {
        modes.push(vec!["--by", by]);
    }
    let mut runs: Vec<(Vec<&str>, &Vec<&str>)> = Vec::new();
    for (file, modes) in [(&churn, &modes[..]), (&burst, &modes[..3])] {
        let f = file.to_str().unwrap();
        for m in modes {
            runs.push((std::iter::once(f).chain(m.iter().copied()).collect(), m));
        }
    }
    // Two reports at a time, each measured on its own (the peak of its own process), each
    // writing its own output.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<(usize, (i32, u64, String))> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((args, _)) = runs.get(i) else {
                            return done;
                        };
                        done.push((i, report_rss(args, &out(i))));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    let mut worst = 0;
    for (i, (code, rss_kib, err)) in results {
        let (args, m) = &runs[i];
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(
            rss_kib <= 200 * 1000,
            "{args:?}: {rss_kib} KiB resident, over 200 MB"
        );
        worst = worst.max(rss_kib);
        let text = std::fs::read_to_string(out(i)).unwrap();
        if m.first() == Some(&"--json") {
            let v: Value = serde_json::from_str(&text).unwrap();
            let tasks = v["tasks"].as_array().unwrap();
            assert_eq!(tasks[0]["comm"], "steady", "{args:?}");
            // Every task is either listed or counted among the others.
            let others = u(&v["others"]["rows"]);
            assert_eq!(tasks.len() as u64 + others, u64::from(TASKS) + 2);
            let listed: u64 = tasks.iter().map(|t| u(&t["read_bytes"])).sum();
            let pkg: u64 = v["packages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| u(&p["read_bytes"]))
                .sum();
            assert_eq!(listed + u(&v["others"]["read_bytes"]), pkg, "{args:?}");
        } else if m.is_empty() {
            assert!(text.contains("steady"), "{text}");
            assert!(
                text.contains(&format!("... {} more: ", TASKS + 2 - 30)),
                "{text}"
            );
        }
    }
    eprintln!("peak resident memory of the report modes: {worst} KiB");
}

/// `-p PID,…` shows those processes only (their threads included), their shares still of the
/// whole machine; a pid that is not a number is one line and exit 2, one not in the recording
/// shows nothing.
#[test]
fn pid_filter_shows_those_processes_of_the_machine() {
    let (path, _) = recording();
    let f = path.to_str().unwrap();
    let (all, _) = json(&[f, "--json"]);
    let (one, _) = json(&[f, "--json", "-p", "4242"]);
    let tasks = one["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{one}");
    assert_eq!(tasks[0]["tgid"], 4242);
    let want = all["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tgid"] == 4242)
        .unwrap();
    assert_eq!(tasks[0]["read_bytes"], want["read_bytes"]);
    assert_eq!(tasks[0]["share"], want["share"], "a share of the machine");
    assert_eq!(one["packages"], all["packages"]);
    let pids: Vec<u64> = all["tasks"].as_array().unwrap()[..2]
        .iter()
        .map(|t| u(&t["tgid"]))
        .collect();
    let list = format!("{},{}", pids[0], pids[1]);
    let (two, _) = json(&[f, "--json", "--pid", &list]);
    assert_eq!(two["tasks"].as_array().unwrap().len(), 2, "{two}");
    let (gone, _) = json(&[f, "--json", "-p", "999999"]);
    assert!(gone["tasks"].as_array().unwrap().is_empty());
    let (code, _, err) = report(&[f, "-p", "12x"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("12x"), "{err}");
}

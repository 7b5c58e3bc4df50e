//! Hostile input, run against the built binary as ordinary tests: corrupt and cut recordings, FIFOs
//! where a sysfs file or a recording should be, paths that are not files, absurd numbers, a symlink
//! planted at `record -o`, signals. Every case must end (no hang), without a panic, with exit 0 or
//! a one-line error and exit 1/2. Each class prints its tried / crashed / hung counts
//! (`cargo test --test hostile -- --nocapture`).
use imc::record::{Item, ReadStatus, Reader, WriterOptions};
use imc_sim::Scenario;
use imc_sim::record::record_scenario;
use imc_tests::{as_nobody, have_bpf_object, imc_bin, sampler_prerequisites};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest any case may take; longer is counted as hung.
const HANG: Duration = Duration::from_secs(20);

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    hung: bool,
}

impl Outcome {
    /// A panic, a signal or an exit code outside the contract.
    fn crashed(&self) -> bool {
        !self.hung
            && (self.stderr.contains("panicked")
                || !matches!(self.code, Some(0..=2))
                || (self.code != Some(0) && self.stderr.lines().count() != 1))
    }
}

fn run(cmd: &mut Command) -> Outcome {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn imc");
    let t = Instant::now();
    let mut hung = false;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if t.elapsed() > HANG {
            let _ = child.kill();
            hung = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output().unwrap();
    Outcome {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        hung,
    }
}

fn imc(args: &[&str]) -> Command {
    let mut c = Command::new(imc_bin());
    c.args(args);
    c
}

/// Runs every case, prints the class's counts and fails on any crash or hang.
fn class(name: &str, cases: Vec<(String, Command)>, check: impl Fn(&str, &Outcome)) {
    let (mut crashed, mut hung) = (Vec::new(), Vec::new());
    let tried = cases.len();
    for (label, mut cmd) in cases {
        let o = run(&mut cmd);
        if o.hung {
            hung.push(label);
        } else if o.crashed() {
            crashed.push(format!("{label}: exit {:?}: {}", o.code, o.stderr.trim()));
        } else {
            check(&label, &o);
        }
    }
    eprintln!(
        "hostile {name}: tried {tried}, crashed {}, hung {}",
        crashed.len(),
        hung.len()
    );
    assert!(crashed.is_empty(), "{name}: crashed: {crashed:#?}");
    assert!(hung.is_empty(), "{name}: hung: {hung:#?}");
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
}

/// A small real recording (1 s, raw ticks around every interval) to damage.
fn recording(dir: &Path) -> (PathBuf, Vec<u8>) {
    let path = dir.join("base.imc");
    let opts = WriterOptions {
        burst_threshold: Some(0.0),
        ..WriterOptions::default()
    };
    record_scenario(
        &Scenario::busy(2, 1000, 1_000_000_000),
        &path,
        100_000_000,
        None,
        opts,
    )
    .unwrap();
    let data = std::fs::read(&path).unwrap();
    (path, data)
}

/// xorshift: reproducible damage without a dependency.
fn rng(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// The damaged variants of a recording: cuts, bit flips, absurd lengths and counts, garbage.
fn damaged(data: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let n = data.len();
    for cut in (0..64).chain((64..n).step_by((n / 150).max(1))) {
        out.push((format!("cut at {cut}"), data[..cut].to_vec()));
    }
    let mut r = rng(0x1616);
    for k in 0..200 {
        let mut d = data.to_vec();
        for _ in 0..=(k % 4) {
            let at = (r() as usize) % n;
            d[at] ^= 1 << (r() % 8);
        }
        out.push((format!("bit flips #{k}"), d));
    }
    // Absurd header length, chunk lengths and counts at the first chunk after the header.
    let hlen = u32::from_le_bytes(data[10..14].try_into().unwrap()) as usize;
    let first = 18 + hlen;
    for v in [u32::MAX, 64 << 20, (64 << 20) + 1, 1 << 30] {
        let mut d = data.to_vec();
        d[10..14].copy_from_slice(&v.to_le_bytes());
        out.push((format!("header length {v}"), d));
        let mut d = data.to_vec();
        d[first + 1..first + 5].copy_from_slice(&v.to_le_bytes());
        out.push((format!("chunk length {v}"), d));
    }
    let mut d = data[..first].to_vec();
    d.extend(std::iter::repeat_n(0xff, 4096));
    out.push(("0xff after the header".into(), d));
    let mut d = data[..first].to_vec();
    let mut r = rng(99);
    d.extend((0..100_000).map(|_| r() as u8));
    out.push(("random after the header".into(), d));
    out
}

#[test]
fn corrupt_and_cut_recordings_report_or_refuse_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let (_, data) = recording(dir.path());
    let variants = damaged(&data);
    let mut cases = Vec::new();
    for (i, (label, d)) in variants.iter().enumerate() {
        let p = dir.path().join(format!("v{i}.imc"));
        std::fs::write(&p, d).unwrap();
        let args = ["report", "--json", p.to_str().unwrap()];
        cases.push((label.clone(), imc(&args)));
    }
    class("corrupt recordings", cases, |label, o| {
        if o.code == Some(0) {
            serde_json::from_str::<serde_json::Value>(&o.stdout)
                .unwrap_or_else(|e| panic!("{label}: output is not JSON ({e})"));
        }
    });
    // The same in-process, through the library reader: a thousand more, each stopping with a
    // status and never reading past its input.
    let mut r = rng(7);
    for k in 0..1000 {
        let mut d = data.clone();
        let at = (r() as usize) % d.len();
        d[at] = r() as u8;
        d.truncate(d.len() - (r() as usize) % 64);
        if let Ok(mut rd) = Reader::from_bytes(Path::new("x"), d) {
            while rd.next_item().is_some() {}
            assert_ne!(rd.status(), &ReadStatus::Reading, "variant {k}");
        }
    }
}

#[test]
fn paths_that_are_not_recordings_are_bad_input_named_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fifo = d.join("fifo.imc");
    mkfifo(&fifo);
    std::os::unix::fs::symlink("loop.imc", d.join("loop.imc")).unwrap();
    std::fs::create_dir(d.join("dir.imc")).unwrap();
    let paths: Vec<PathBuf> = vec![
        fifo,
        d.join("loop.imc"),
        d.join("dir.imc"),
        d.join("missing.imc"),
        PathBuf::from("/dev/zero"),
        PathBuf::from("/dev/null"),
    ];
    let cases = paths
        .iter()
        .map(|p| {
            (
                p.display().to_string(),
                imc(&["report", p.to_str().unwrap()]),
            )
        })
        .collect();
    class("report paths", cases, |label, o| {
        assert_eq!(o.code, Some(2), "{label}: {}", o.stderr);
        let name = Path::new(label).file_name().unwrap().to_str().unwrap();
        assert_eq!(
            o.stderr.matches(name).count(),
            1,
            "{label}: the path once: {}",
            o.stderr
        );
    });
}

/// A fixture tree with a FIFO in place of one of its sysfs files.
fn tree_with_fifo(dir: &Path, file: &str) -> PathBuf {
    let root = dir.join(file.replace('/', "_"));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/icx-gaps");
    let st = Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(&root)
        .status()
        .unwrap();
    assert!(st.success());
    let f = root.join(file);
    std::fs::remove_file(&f).unwrap();
    mkfifo(&f);
    root
}

#[test]
fn a_fifo_in_the_sysfs_tree_never_hangs_list_encode_or_stat() {
    let dir = tempfile::tempdir().unwrap();
    let mut cases = Vec::new();
    for file in [
        "sys/devices/uncore_imc_0/type",
        "sys/devices/uncore_imc_0/cpumask",
        "sys/devices/uncore_imc_0/format/event",
        "sys/devices/uncore_imc_0/events/cas_count_read",
        "proc/cpuinfo",
    ] {
        let root = tree_with_fifo(dir.path(), file);
        let r = root.to_str().unwrap();
        cases.push((format!("list, {file}"), imc(&["--root", r, "list"])));
        cases.push((
            format!("encode, {file}"),
            imc(&["--root", r, "encode", "uncore_imc_0/cas_count_read/"]),
        ));
        cases.push((
            format!("stat, {file}"),
            imc(&["--root", r, "stat", "--duration", "0.1"]),
        ));
    }
    class("FIFOs in sysfs", cases, |label, o| {
        // A FIFO where a file is read is refused naming it (bad input); one in a directory of
        // format or event files is not a file of it and is passed over, as a subdirectory is.
        // (encode reads only the PMUs, not proc/.)
        let listed = label.contains("/format/") || label.contains("/events/");
        let unread = label.starts_with("encode") && label.contains("proc/");
        if !listed && !unread && !label.starts_with("stat") {
            assert_eq!(o.code, Some(2), "{label}: {}", o.stderr);
            assert!(o.stderr.contains("FIFO"), "{label}: {}", o.stderr);
        }
    });
}

#[test]
fn absurd_numbers_are_one_line_bad_values() {
    let cases: Vec<(String, Command)> = [
        &["top", "--duration", "1e99"][..],
        &["record", "-o", "/nonexistent/x", "--duration", "1e19"],
        &["stat", "--duration", "1e300"],
        &["stat", "--duration", "-0"],
        &["stat", "-I", "18446744073709551615"],
        &["top", "-I", "99999999999"],
        &["record", "-o", "/nonexistent/x", "-I", "1e30"],
        &[
            "record",
            "-o",
            "/nonexistent/x",
            "--max-size",
            "99999999999T",
        ],
        &["record", "-o", "/nonexistent/x", "--max-size", "0"],
        &["top", "--freq", "4294967296"],
        &["report", "x", "--burst-threshold", "1e99"],
    ]
    .iter()
    .map(|a| (a.join(" "), imc(a)))
    .collect();
    class("absurd numbers", cases, |label, o| {
        assert_eq!(o.code, Some(2), "{label}: {}", o.stderr);
    });
}

fn reads_back(path: &Path) -> ReadStatus {
    let mut r = Reader::open(path).unwrap();
    while let Some(it) = r.next_item() {
        let _ = matches!(it, Item::Interval(_));
    }
    r.status().clone()
}

#[test]
fn record_output_never_follows_a_symlink_nor_replaces_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let victim = d.join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    std::os::unix::fs::symlink(&victim, d.join("link.imc")).unwrap();
    std::fs::write(d.join("old.imc"), b"an older recording").unwrap();
    std::fs::create_dir(d.join("dir.imc")).unwrap();
    let cases = ["link.imc", "old.imc", "dir.imc", "nodir/x.imc"]
        .iter()
        .map(|f| {
            let p = d.join(f);
            let a = [
                "record",
                "-e",
                "page-faults",
                "-o",
                p.to_str().unwrap(),
                "--duration",
                "0.2",
            ];
            (f.to_string(), imc(&a))
        })
        .collect();
    class("record -o", cases, |label, o| {
        // Refused before anything starts, whoever runs it: no privileges needed to say so. A
        // directory that is not there is a wrong path like the others (bad input).
        assert_eq!(o.code, Some(2), "{label}: {}", o.stderr);
    });
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert_eq!(
        std::fs::read(d.join("old.imc")).unwrap(),
        b"an older recording"
    );
    assert!(
        std::fs::symlink_metadata(d.join("link.imc"))
            .unwrap()
            .is_symlink()
    );

    if !sampler_prerequisites() {
        return;
    }
    // With --force a symlink is replaced by the recording, its target untouched.
    let link = d.join("link.imc");
    let o = run(&mut imc(&[
        "record",
        "-e",
        "page-faults",
        "--force",
        "-o",
        link.to_str().unwrap(),
        "--duration",
        "0.3",
    ]));
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(std::fs::symlink_metadata(&link).unwrap().is_file());
    assert_eq!(reads_back(&link), ReadStatus::Complete);
}

/// A directory and file anybody may write, so only imc's own care keeps the file intact.
fn world_writable_recording(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let f = dir.join("kept.imc");
    std::fs::write(&f, b"an older recording").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
    f
}

#[test]
fn a_run_that_cannot_start_leaves_the_existing_file_and_says_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let f = world_writable_recording(dir.path());
    let fs = f.to_str().unwrap();
    let args = [
        "record",
        "-e",
        "page-faults",
        "--force",
        "-o",
        fs,
        "--duration",
        "1",
    ];
    if let Some(mut c) = as_nobody(&args) {
        let o = run(&mut c);
        assert_eq!(
            o.code,
            Some(1),
            "no privileges is a runtime failure: {}",
            o.stderr
        );
        assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
        assert_eq!(std::fs::read(&f).unwrap(), b"an older recording");
    }
    if !sampler_prerequisites() {
        return;
    }
    let o = run(&mut imc(&[
        "record",
        "-e",
        "page-faults",
        "--force",
        "-o",
        fs,
        "--",
        "/nonexistent/command",
    ]));
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    assert!(o.stderr.contains("/nonexistent/command"), "{}", o.stderr);
    assert_eq!(std::fs::read(&f).unwrap(), b"an older recording");
}

/// A recording in a directory the user may not write in is a path to fix, exit 2 as an unreadable
/// recording is for report, never exit 1.
#[test]
fn record_into_a_directory_it_may_not_write_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let out = ro.join("x.imc");
    let args = [
        "record",
        "-e",
        "page-faults",
        "-o",
        out.to_str().unwrap(),
        "--duration",
        "1",
    ];
    let Some(mut c) = as_nobody(&args) else {
        return;
    };
    let o = run(&mut c);
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    assert!(o.stderr.contains("x.imc"), "{}", o.stderr);
    assert!(
        o.stderr.contains("a directory you may write in"),
        "{}",
        o.stderr
    );
    assert!(!out.exists());
}

#[test]
fn list_as_an_unprivileged_user_says_what_it_cannot_open() {
    let Some(mut c) = as_nobody(&["list", "--json"]) else {
        return;
    };
    let o = run(&mut c);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let paranoid: i32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2);
    let sw = v["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["backend"] == "software")
        .expect("the software backend is listed");
    if paranoid > 0 {
        // System-wide counting needs CAP_PERFMON above paranoid 0: stat would fail, so list
        // must not call it available.
        assert_eq!(sw["available"], false, "{sw}");
        let why = sw["reason"].as_str().unwrap();
        assert!(
            why.contains("cannot open") && why.contains("Permission denied"),
            "{why}"
        );
    }
    // As root the same source opens.
    let o = run(&mut imc(&["list", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let sw = v["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["backend"] == "software")
        .unwrap()
        .clone();
    assert_eq!(sw["available"], true, "{sw}");
}

#[test]
fn sighup_finishes_the_recording_like_sigint() {
    if !sampler_prerequisites() {
        return;
    }
    let _ = have_bpf_object();
    let dir = tempfile::tempdir().unwrap();
    for (sig, name) in [(libc::SIGHUP, "HUP"), (libc::SIGTERM, "TERM")] {
        let path = dir.path().join(format!("{name}.imc"));
        let mut child = imc(&["record", "-e", "page-faults", "-o", path.to_str().unwrap()])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Wait for the file: the run has started.
        let t = Instant::now();
        while !path.exists() && t.elapsed() < HANG {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, sig) };
        let st = child.wait().unwrap();
        assert_eq!(st.code(), Some(0), "SIG{name}");
        assert_eq!(reads_back(&path), ReadStatus::Complete, "SIG{name}");
    }
}

/// One framed chunk: type, length, payload, CRC (record/FORMAT.md).
fn chunk(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut c = vec![kind];
    c.extend((payload.len() as u32).to_le_bytes());
    c.extend(payload);
    let crc = imc::record::codec::crc32(&[&c]);
    c.extend(crc.to_le_bytes());
    c
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Recordings whose chunks are well formed (lengths and checksums right) but claim far more
/// than the writer ever puts in one: each is a real header, a one-task table, then one chunk
/// of the largest size a reader accepts (64 MiB).
fn claiming_recordings(dir: &Path) -> Vec<(String, PathBuf)> {
    let (_, data) = recording(dir);
    let hlen = u32::from_le_bytes(data[10..14].try_into().unwrap()) as usize;
    let head = &data[..18 + hlen];
    let slots = Reader::from_bytes(Path::new("x"), data.clone())
        .unwrap()
        .specs()
        .len();
    let mut tables = Vec::new();
    tables.extend(chunk(1, &[1, 1, b'x']));
    tables.extend(chunk(2, &[1, 7, 7, 1, 0]));
    let max = 64usize << 20;
    let mut out = Vec::new();
    let mut write = |label: &str, payload: Vec<u8>| {
        let p = dir.join(format!("{}.imc", label.replace(' ', "-")));
        let mut f = head.to_vec();
        f.extend(&tables);
        f.extend(chunk(
            if label.starts_with("ticks") { 4 } else { 3 },
            &payload,
        ));
        std::fs::write(&p, f).unwrap();
        out.push((label.to_string(), p));
    };
    // An interval of 2-byte task rows, every one naming task 0 (33.5 M rows at full size).
    let interval_head = |p: &mut Vec<u8>, npkg: u64| {
        for v in [1_000, 1_000, 0, 0, 0, npkg] {
            varint(p, v);
        }
    };
    let mut p = Vec::new();
    interval_head(&mut p, 0);
    let rows = (max - 16) / (1 + slots);
    varint(&mut p, rows as u64);
    p.resize(max, 0);
    write("interval of repeated rows", p);
    // As many package rows as the chunk holds (the header has one package).
    let mut p = Vec::new();
    let npkg = (max - 16) / 4;
    interval_head(&mut p, npkg as u64);
    p.resize(max, 0);
    write("interval of packages", p);
    // A TICKS chunk claiming 2^26 − 16 records, each 5 bytes, for the 1024 the writer puts.
    let mut p = Vec::new();
    varint(&mut p, (max - 16) as u64);
    varint(&mut p, 0);
    p.resize(max, 0);
    write("ticks claiming millions", p);
    out
}

/// Runs `imc report` on `path` under an address-space limit (util-linux `prlimit`): exit code,
/// stderr and peak RSS in KiB as GNU time measures it. time forks imc from its own small
/// process: the rusage of a child this test spawned directly would count this test's own
/// memory, which the child had until it exec'd.
fn report_bounded(path: &Path, as_limit: u64) -> (Option<i32>, String, i64) {
    let time = Path::new("/usr/bin/time");
    assert!(
        time.is_file(),
        "GNU time is missing: scripts/setup.sh installs it"
    );
    let out = Command::new("prlimit")
        .arg(format!("--as={as_limit}"))
        .arg(time)
        .args(["-f", "peak-rss-kib %M"])
        .arg(imc_bin())
        .arg("report")
        .arg(path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("prlimit (util-linux)");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let rss = stderr
        .lines()
        .find_map(|l| l.strip_prefix("peak-rss-kib "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no measure from time: {stderr}"));
    let own: String = stderr
        .lines()
        .filter(|l| !l.starts_with("peak-rss-kib ") && !l.starts_with("Command "))
        .map(|l| format!("{l}\n"))
        .collect();
    let code = if stderr.contains("Command terminated by signal") {
        Some(128 + 6)
    } else {
        out.status.code()
    };
    (code, own, rss)
}

#[test]
fn report_memory_follows_the_file_not_its_claimed_counts() {
    let dir = tempfile::tempdir().unwrap();
    for (label, path) in claiming_recordings(dir.path()) {
        let (code, stderr, rss_kib) = report_bounded(&path, 2_000_000_000);
        eprintln!("{label}: exit {code:?}, peak RSS {} MiB", rss_kib / 1024);
        assert!(
            matches!(code, Some(0 | 2)),
            "{label}: exit {code:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{label}: {stderr}");
        assert!(
            rss_kib < 200 * 1024,
            "{label}: peak RSS {rss_kib} KiB for a 64 MiB file"
        );
        // The damaged chunk is said, naming the file; the tables before it are reported.
        assert!(stderr.contains("malformed chunk"), "{label}: {stderr}");
    }
}

/// A pipe whose reading end is already closed: every write to it fails with EPIPE, the way
/// `imc … | head -c1` ends once head has its byte.
fn closed_pipe() -> Stdio {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe writes two fds into the array; the reading one is closed at once and the
    // writing one is owned by the returned Stdio.
    unsafe {
        assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0);
        libc::close(fds[0]);
        Stdio::from(std::os::fd::OwnedFd::from_raw_fd(fds[1]))
    }
}

#[test]
fn every_command_ends_quietly_on_a_closed_pipe_and_in_one_line_on_a_full_disk_or_no_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let (rec, _) = recording(dir.path());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/icx-gaps");
    let (root, rec) = (root.to_str().unwrap(), rec.to_str().unwrap());
    let commands: Vec<Vec<&str>> = vec![
        vec!["--root", root, "list"],
        vec!["--root", root, "list", "--json"],
        vec!["--root", root, "encode", "uncore_imc_0/cas_count_read/"],
        vec![
            "--root",
            root,
            "encode",
            "--json",
            "uncore_imc_0/cas_count_read/",
        ],
        vec!["--root", root, "stat", "--dry-run"],
        vec!["--root", root, "top", "--dry-run", "--json"],
        vec!["--root", root, "record", "--dry-run"],
        vec!["report", rec],
        vec!["report", "--json", rec],
        vec!["completions", "bash"],
        vec!["manpage"],
        vec!["--help"],
        vec!["list", "--help"],
    ];
    let mut cases = Vec::new();
    for a in &commands {
        let mut c = imc(a);
        c.stdout(closed_pipe());
        cases.push((format!("{} | (closed)", a.join(" ")), c));
        let mut c = imc(a);
        c.stdout(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        );
        cases.push((format!("{} > /dev/full", a.join(" ")), c));
        // `>&-`: started with no standard output at all.
        let mut c = imc(a);
        c.stdout(Stdio::null());
        // SAFETY: close is async-signal-safe; the closure touches nothing else.
        unsafe {
            use std::os::unix::process::CommandExt;
            c.pre_exec(|| {
                libc::close(libc::STDOUT_FILENO);
                Ok(())
            });
        }
        cases.push((format!("{} >&-", a.join(" ")), c));
    }
    let mut failed = Vec::new();
    for (label, mut cmd) in cases {
        let o = run_to_end(&mut cmd);
        let ok = if label.ends_with("(closed)") {
            o.code == Some(0) && o.stderr.is_empty()
        } else if label.ends_with(">&-") {
            o.code == Some(1)
                && o.stderr.lines().count() == 1
                && o.stderr.contains("cannot write to standard output")
        } else {
            o.code == Some(1)
                && o.stderr.lines().count() == 1
                && o.stderr.contains("No space left on device")
        };
        if !ok {
            failed.push(format!("{label}: exit {:?}: {}", o.code, o.stderr.trim()));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

/// Like [`run`], for a command whose stdout the caller has set.
fn run_to_end(cmd: &mut Command) -> Outcome {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("spawn imc");
    Outcome {
        code: out.status.code(),
        stdout: String::new(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        hung: false,
    }
}

#[test]
fn a_second_run_on_one_output_is_refused_at_once_naming_the_first_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("same.imc");
    let started = dir.path().join("started");
    // This test process holds the output's lock, as a first `imc record` would.
    let held = imc::sys::file::WriteLock::take(&out).unwrap();
    let me = std::process::id().to_string();
    let touch = format!("touch {}", started.display());
    for force in [false, true] {
        let mut a = vec!["record", "-e", "page-faults", "-o", out.to_str().unwrap()];
        if force {
            a.push("--force");
        }
        a.extend(["--", "sh", "-c", &touch]);
        let o = run(&mut imc(&a));
        assert!(!o.hung);
        assert_eq!(o.code, Some(2), "--force {force}: {}", o.stderr);
        assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
        assert!(o.stderr.contains(&format!("pid {me}")), "{}", o.stderr);
        assert!(
            !started.exists(),
            "the command ran although the output was taken"
        );
        assert!(!out.exists(), "the held output was touched");
    }
    drop(held);
    assert!(
        !imc::sys::file::lock_path(&out).exists(),
        "the lock file goes with the lock"
    );
}

#[test]
fn record_checks_its_output_before_it_starts_the_command() {
    // As root every directory is writable: /proc/sys is one where nothing can be created.
    if !sampler_prerequisites() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let touch = format!("touch {}", started.display());
    let a = [
        "record",
        "-e",
        "page-faults",
        "-o",
        "/proc/sys/x.imc",
        "--",
        "sh",
        "-c",
        &touch,
    ];
    let o = run(&mut imc(&a));
    assert!(matches!(o.code, Some(1 | 2)), "{}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    assert!(o.stderr.contains("/proc/sys/x.imc"), "{}", o.stderr);
    assert!(
        !started.exists(),
        "the command ran before the output was checked"
    );
}

/// Whether process `pid` exists (a zombie counts).
fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[test]
fn a_run_that_fails_after_the_command_started_ends_it_and_says_so() {
    if !sampler_prerequisites() {
        return;
    }
    // A full file system: the lock file (an inode, no data) is created, the recording's first
    // write fails once the command runs.
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("full");
    std::fs::create_dir(&mnt).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap();
    if !imc_tests::require(st.success(), "mounting a tmpfs") {
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.clone());
    let _ = std::fs::write(mnt.join("filler"), vec![0u8; 1 << 20]);
    let pidfile = dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 60", pidfile.display());
    let out = mnt.join("x.imc");
    let a = [
        "record",
        "-e",
        "page-faults",
        "-o",
        out.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &script,
    ];
    let o = run(&mut imc(&a));
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .map(|s| s.trim().parse().unwrap())
        .unwrap_or(0);
    let abandoned = pid > 0 && alive(pid);
    if abandoned {
        // SAFETY: ending the sleep this test started through imc.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(!abandoned, "imc left its command running: {}", o.stderr);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("No space left") && o.stderr.contains(&format!("pid {pid}")),
        "{}",
        o.stderr
    );
}

/// The base recording's header with `source` replaced, then a task named `comm` with one
/// interval of traffic and the end marker.
fn recording_with_names(dir: &Path, source: &str, comm: &str) -> PathBuf {
    let (_, data) = recording(dir);
    let hlen = u32::from_le_bytes(data[10..14].try_into().unwrap()) as usize;
    let mut h: serde_json::Value = serde_json::from_slice(&data[14..14 + hlen]).unwrap();
    h["source"] = source.into();
    let slots = h["slots"].as_array().unwrap().len();
    let pkg = h["packages"][0]["id"].as_u64().unwrap_or(0);
    let json = serde_json::to_vec(&h).unwrap();
    let mut f = data[..10].to_vec();
    f.extend((json.len() as u32).to_le_bytes());
    f.extend(&json);
    f.extend(imc::record::codec::crc32(&[&json]).to_le_bytes());
    let mut p = vec![1];
    varint(&mut p, comm.len() as u64);
    p.extend(comm.as_bytes());
    f.extend(chunk(1, &p));
    f.extend(chunk(2, &[1, 7, 7, 1, 0]));
    let mut p = Vec::new();
    for v in [
        1_000,
        1_000_000_000,
        0,
        0,
        0,
        1,
        pkg,
        1 << 20,
        1 << 20,
        0,
        1,
        0,
    ] {
        varint(&mut p, v);
    }
    for _ in 0..slots {
        varint(&mut p, 1000);
    }
    f.extend(chunk(3, &p));
    f.extend(chunk(5, &[1, 0, 0]));
    let path = dir.join("names.imc");
    std::fs::write(&path, f).unwrap();
    path
}

#[test]
fn report_prints_names_from_the_recording_as_text_never_as_terminal_controls() {
    let dir = tempfile::tempdir().unwrap();
    let evil = "\u{1b}[2J\u{1b}]0;pwned\u{7}";
    let path = recording_with_names(dir.path(), evil, "\u{1b}[31mred\u{9b}");
    let o = run(&mut imc(&["report", path.to_str().unwrap()]));
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    for text in [&o.stdout, &o.stderr] {
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "a control character reached the terminal: {text:?}"
        );
    }
    assert!(
        o.stdout.contains("\\x1b[2J\\x1b]0;pwned\\x07"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("\\x1b[31mred\\x9b"), "{}", o.stdout);
    // JSON keeps the names as they are (its encoder escapes them).
    let o = run(&mut imc(&["report", "--json", path.to_str().unwrap()]));
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["source"], evil);
}

#[test]
fn list_prints_sysfs_names_as_text_never_as_terminal_controls() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/zen3-ibs");
    assert!(
        Command::new("cp")
            .arg("-a")
            .arg(&src)
            .arg(&root)
            .status()
            .unwrap()
            .success()
    );
    // IBS's capabilities are listed as name=content: both from sysfs.
    let caps = root.join("sys/devices/ibs_op/caps");
    std::fs::create_dir_all(&caps).unwrap();
    std::fs::write(caps.join("evil\u{1b}]0;t"), "x\u{1b}[2Jy").unwrap();
    let o = run(&mut imc(&["--root", root.to_str().unwrap(), "list", "-v"]));
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(
        o.stdout.contains("evil\\x1b]0;t=x\\x1b[2Jy"),
        "{}",
        o.stdout
    );
    for text in [&o.stdout, &o.stderr] {
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "a control character reached the terminal: {text:?}"
        );
    }
}

#[test]
fn report_views_replace_an_existing_file_only_with_force() {
    let dir = tempfile::tempdir().unwrap();
    let (rec, _) = recording(dir.path());
    let rec = rec.to_str().unwrap();
    for flag in ["--plot", "--perfetto"] {
        // `--plot` writes SVG and takes only a name that says so.
        let ext = if flag == "--plot" { ".svg" } else { "" };
        let out = dir.path().join(format!("old{flag}{ext}"));
        std::fs::write(&out, b"kept").unwrap();
        let o = run(&mut imc(&["report", rec, flag, out.to_str().unwrap()]));
        assert_eq!(o.code, Some(2), "{flag}: {}", o.stderr);
        assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
        assert!(o.stderr.contains("--force"), "{}", o.stderr);
        assert_eq!(std::fs::read(&out).unwrap(), b"kept", "{flag}");
        let o = run(&mut imc(&[
            "report",
            rec,
            flag,
            out.to_str().unwrap(),
            "--force",
        ]));
        assert_eq!(o.code, Some(0), "{flag}: {}", o.stderr);
        assert_ne!(std::fs::read(&out).unwrap(), b"kept", "{flag}");
    }
}

/// A copy of the icx-gaps fixture to damage.
fn tree_copy(dir: &Path, name: &str) -> PathBuf {
    let root = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/icx-gaps");
    assert!(
        Command::new("cp")
            .arg("-a")
            .arg(&src)
            .arg(&root)
            .status()
            .unwrap()
            .success()
    );
    root
}

#[test]
fn oversize_sysfs_files_are_refused_by_name_never_cut_and_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let mut cases = Vec::new();
    let imc0 = "sys/devices/uncore_imc_0";
    // (file, its new content or a sparse length, what the message must name)
    let big_event = format!("event=0x04,umask=0x03{}", ",umask=0x03".repeat(6_500));
    let big_list: String = (0..1_000_000u32)
        .map(|i| (i % 8).to_string())
        .collect::<Vec<_>>()
        .join(",");
    let files: Vec<(String, Option<String>, u64)> = vec![
        (format!("{imc0}/events/cas_count_read"), Some(big_event), 0),
        (
            "sys/devices/system/node/node0/cpulist".into(),
            Some(big_list),
            0,
        ),
        (format!("{imc0}/cpumask"), None, 2 << 30),
        (format!("{imc0}/type"), None, 1 << 20),
    ];
    for (i, (file, content, sparse)) in files.iter().enumerate() {
        let root = tree_copy(dir.path(), &format!("t{i}"));
        let f = root.join(file);
        match content {
            Some(c) => std::fs::write(&f, c).unwrap(),
            None => std::fs::File::create(&f).unwrap().set_len(*sparse).unwrap(),
        }
        let r = root.to_str().unwrap();
        cases.push((file.clone(), imc(&["--root", r, "list"])));
    }
    class("oversize sysfs files", cases, |label, o| {
        assert_eq!(o.code, Some(2), "{label}: {}", o.stderr);
        let name = Path::new(label).file_name().unwrap().to_str().unwrap();
        assert!(o.stderr.contains(name), "{label}: {}", o.stderr);
        assert!(o.stderr.contains("larger than"), "{label}: {}", o.stderr);
        assert!(o.stderr.len() < 400, "{label}: {} bytes", o.stderr.len());
        assert!(!o.stderr.contains('\0'), "{label}");
    });
}

#[test]
fn errors_quote_bad_input_escaped_and_clipped() {
    let dir = tempfile::tempdir().unwrap();
    let root = tree_copy(dir.path(), "t");
    // A page of NULs and escapes where a CPU list should be: within a cpulist's size, so it is
    // parsed and refused, and the message quotes it.
    let junk = "\0\u{1b}[2J".repeat(1000);
    std::fs::write(root.join("sys/devices/uncore_imc_0/cpumask"), &junk).unwrap();
    let o = run(&mut imc(&["--root", root.to_str().unwrap(), "list"]));
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    assert!(o.stderr.contains("cpumask"), "{}", o.stderr);
    assert!(
        o.stderr.len() < 600,
        "{} bytes: {}",
        o.stderr.len(),
        o.stderr
    );
    assert!(
        !o.stderr.chars().any(|c| c.is_control() && c != '\n'),
        "{:?}",
        o.stderr
    );
}

/// The icx-gaps tree with `n` more `uncore_imc_N` PMUs (copies of uncore_imc_0): a machine with
/// far more PMUs than any real one, for planning.
fn tree_with_many_pmus(dir: &Path, n: u32) -> PathBuf {
    let root = tree_copy(dir, "many");
    let devices = root.join("sys/devices");
    let src = devices.join("uncore_imc_0");
    for i in 0..n {
        let name = format!("uncore_imc_{}", 100 + i);
        let d = devices.join(&name);
        for sub in ["format", "events"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
            for f in std::fs::read_dir(src.join(sub)).unwrap() {
                let f = f.unwrap();
                std::fs::hard_link(f.path(), d.join(sub).join(f.file_name())).unwrap();
            }
        }
        std::fs::hard_link(src.join("cpumask"), d.join("cpumask")).unwrap();
        std::fs::write(d.join("type"), format!("{}\n", 1000 + i)).unwrap();
        std::os::unix::fs::symlink(
            format!("../../../devices/{name}"),
            root.join("sys/bus/event_source/devices").join(&name),
        )
        .unwrap();
    }
    root
}

/// Whether `pid` has a handler for `sig` installed (/proc/PID/status, SigCgt).
fn catches(pid: u32, sig: i32) -> Option<bool> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hex = s.lines().find_map(|l| l.strip_prefix("SigCgt:"))?.trim();
    let mask = u64::from_str_radix(hex, 16).ok()?;
    Some(mask & (1 << (sig - 1)) != 0)
}

#[test]
fn a_stop_signal_during_discovery_and_planning_ends_imc_at_once() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let root = tree_with_many_pmus(dir.path(), 1000);
    let mut child = imc(&["--root", root.to_str().unwrap(), "stat", "--dry-run"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Once stat has its handlers in place it is reading thousands of PMUs: signal it then.
    loop {
        if child.try_wait().unwrap().is_some() {
            panic!("stat --dry-run ended before its handlers were seen");
        }
        if catches(pid, libc::SIGTERM) == Some(true) {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let st = child.wait().unwrap();
    assert_eq!(
        st.signal(),
        Some(libc::SIGTERM),
        "SIGTERM during planning must end imc as it comes ({st})"
    );
}

/// A read-only tmpfs mounted on a new temporary directory, unmounted when dropped.
struct ReadOnlyMount(tempfile::TempDir);

impl ReadOnlyMount {
    fn new() -> Option<ReadOnlyMount> {
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "ro", "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(ReadOnlyMount(dir))
    }
}

impl Drop for ReadOnlyMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

#[test]
fn an_output_file_that_cannot_be_written_is_one_rule_whether_denied_or_read_only() {
    // EACCES (a directory the user may not write in) exited 2 and EROFS (a read-only file
    // system) 1: both are a path the user is to fix.
    let Some(ro) = imc_tests::is_root().then(ReadOnlyMount::new).flatten() else {
        imc_tests::require(false, "mounting a read-only tmpfs needs root");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (rec, _) = recording(dir.path());
    let rec = rec.to_str().unwrap();
    let denied = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        denied.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o555),
    )
    .unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let mut failed = Vec::new();
    for (place, why) in [
        (ro.0.path(), "Read-only file system"),
        (denied.path(), "Permission denied"),
    ] {
        let trace = place.join("t.pftrace");
        let args = ["report", rec, "--perfetto", trace.to_str().unwrap()];
        // Root may write anywhere a mode says it may not: the denied case runs as nobody.
        let cmd = if why == "Permission denied" {
            imc_tests::as_nobody(&args)
        } else {
            Some(imc(&args))
        };
        let Some(mut cmd) = cmd else { continue };
        let o = run(&mut cmd);
        if o.code != Some(2) || !o.stderr.contains(why) || o.stderr.lines().count() != 1 {
            failed.push(format!(
                "{}: exit {:?}: {}",
                trace.display(),
                o.code,
                o.stderr
            ));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

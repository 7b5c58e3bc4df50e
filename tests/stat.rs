//! End-to-end tests of `imc stat`: the real binary on this VM (msr/tsc and software events, the
//! MCHBAR backend on a regular file standing in for /dev/mem), and the whole command in-process
//! against the fixture trees with the perf syscall layer replaced by `FakePerf`.
use imc::cli::{BackendChoice, GlobalArgs, StatArgs};
use imc::commands::stat::{StatEnv, run_with};
use imc::counting::Backend;
use imc::counting::clock::MonotonicClock;
use imc::counting::from_plan::MchbarCounter;
use imc::counting::mchbar::MchbarBackend;
use imc::counting::{CounterSpec, Memory};
use imc::model::{Direction, Scope};
use imc::sys::devmem::{DevMem, DevMemError, RealDevMem, Region};
use imc::sys::perf::{FakePerf, PerfSys, TYPE_SOFTWARE};
use imc_tests::{imc, memory_device, own_fixtures, run_ok};
use serde_json::Value;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// `imc --root ROOT [--devmem PATH] stat -I interval --duration S --json [--backend B]`, built
/// directly (the tests crate does not depend on clap).
fn parse(
    root: &str,
    devmem: &str,
    interval_ms: u64,
    duration: f64,
    backend: &str,
) -> (GlobalArgs, StatArgs) {
    (
        GlobalArgs {
            root: PathBuf::from(root),
            devmem: PathBuf::from(devmem),
            verbose: 0,
        },
        StatArgs {
            interval_ms,
            duration: Some(duration),
            events: Vec::new(),
            per_channel: false,
            json: true,
            separator: None,
            backend: BackendChoice::parse(backend).expect("a backend name"),
            dry_run: false,
            latency: None,
            command: Vec::new(),
        },
    )
}

/// Runs `imc stat` in-process with `perf` as the syscall layer; returns (exit code or error
/// message, stdout JSON lines, stderr).
fn run_fake(
    perf: Arc<FakePerf>,
    devmem: &dyn DevMem,
    (g, a): (GlobalArgs, StatArgs),
) -> (Result<(), String>, Vec<Value>, String) {
    let env = StatEnv {
        perf: perf as Arc<dyn PerfSys>,
        devmem,
        clock: &MonotonicClock,
    };
    let mut out = Vec::new();
    let mut err = Vec::new();
    let r = run_with(&g, &a, &env, &mut out, &mut err)
        .map(|_| ())
        .map_err(|e| e.to_string());
    let text = String::from_utf8(out).expect("utf-8 output");
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l}: {e}")))
        .collect();
    (r, lines, String::from_utf8_lossy(&err).into_owned())
}

/// `run_fake` for the table or CSV: the run must succeed; returns what it printed.
fn run_fake_text(perf: Arc<FakePerf>, (g, a): (GlobalArgs, StatArgs)) -> String {
    assert!(!a.json, "run_fake parses JSON");
    let env = StatEnv {
        perf: perf as Arc<dyn PerfSys>,
        devmem: &RealDevMem,
        clock: &MonotonicClock,
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    run_with(&g, &a, &env, &mut out, &mut err)
        .map_err(|e| e.to_string())
        .unwrap();
    String::from_utf8(out).expect("utf-8 output")
}

fn fixture(name: &str) -> String {
    own_fixtures().join(name).display().to_string()
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

// ---------------------------------------------------------------------------------------------
// The perf backend against fixture trees, syscalls substituted.

#[test]
fn skx_uncore_opens_each_channel_on_each_designated_cpu_with_the_right_encoding() {
    let perf = Arc::new(FakePerf::new());
    perf.set_step(0x0304, 1000);
    perf.set_step(0x0c04, 250);
    let root = fixture("skx-2socket");
    let (r, lines, err) = run_fake(
        perf.clone(),
        &RealDevMem,
        parse(&root, "/dev/mem", 10, 0.03, "auto"),
    );
    assert_eq!(r, Ok(()), "stderr: {err}");
    let opens = perf.opens();
    // 6 channels × 2 events × 2 packages, system-wide on CPUs 0 and 20.
    assert_eq!(opens.len(), 24, "{opens:#?}");
    for o in &opens {
        assert_eq!(o.pid, -1);
        assert!(o.cpu == 0 || o.cpu == 20, "cpu {}", o.cpu);
        assert!((13..=18).contains(&o.attr.type_), "type {}", o.attr.type_);
        assert!(o.attr.config == 0x0304 || o.attr.config == 0x0c04);
        assert_eq!(o.attr.sample_period, 0, "uncore events must not sample");
    }
    // Read and write of one channel on one CPU share a group (one read per group).
    assert_eq!(opens.iter().filter(|o| o.group.is_some()).count(), 12);
    assert!(!lines.is_empty());
    for l in &lines {
        assert_eq!(l["source"], "intel-uncore-imc");
        let pk = l["packages"].as_array().expect("packages");
        assert_eq!(pk.len(), 2);
        for p in pk {
            // Each read advances every counter by its step: 6 channels × step × 64 B.
            assert_eq!(num(&p["read_bytes"]), 6.0 * 1000.0 * 64.0);
            assert_eq!(num(&p["write_bytes"]), 6.0 * 250.0 * 64.0);
            let ch = p["channels"].as_array().expect("channels");
            assert_eq!(ch.len(), 6);
            assert_eq!(num(&ch[0]["read_bytes"]), 64000.0);
            let el = (num(&l["t_end_ns"]) - num(&l["t_start_ns"])) / 1e9;
            let rate = num(&p["read_bytes_per_s"]);
            assert!(
                (rate - 384000.0 / el).abs() <= 1.0,
                "rate {rate} over {el} s"
            );
        }
        assert_eq!(num(&l["values"]["read"]), 2.0 * 6.0 * 1000.0);
    }
    assert_eq!(pk_ids(&lines[0]), vec![0, 1]);
}

fn pk_ids(l: &Value) -> Vec<u64> {
    l["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| p["id"].as_u64().expect("id"))
        .collect()
}

#[test]
fn power9_nest_opens_one_event_per_chip_and_applies_the_sysfs_scale() {
    let perf = Arc::new(FakePerf::new());
    let root = fixture("power9-2chip");
    let (r, lines, err) = run_fake(
        perf.clone(),
        &RealDevMem,
        parse(&root, "/dev/mem", 10, 0.02, "auto"),
    );
    assert_eq!(r, Ok(()), "stderr: {err}");
    let opens = perf.opens();
    assert!(!opens.is_empty());
    for o in &opens {
        assert_eq!(o.pid, -1);
        // One CPU per chip (cpumask 0,64): never any other CPU of the chip.
        assert!(o.cpu == 0 || o.cpu == 64, "cpu {}", o.cpu);
    }
    let mcs01_rd: Vec<_> = opens
        .iter()
        .filter(|o| o.attr.config == 0xd0 && o.cpu == 64)
        .collect();
    assert_eq!(
        mcs01_rd.len(),
        1,
        "PM_MCS01_128B_RD_DISP_PORT01 once on chip 1"
    );
    let l = &lines[0];
    assert_eq!(l["source"], "power-nest-imc");
    assert_eq!(pk_ids(l), vec![0, 8], "chip ids are the package ids");
    // Default step 1000 per read; discovery's bytes per count for the 128B events is 256 × 64.
    let reads_per_chip = opens
        .iter()
        .filter(|o| o.cpu == 0 && [0xd0, 0xf0, 0x50, 0x70].contains(&o.attr.config))
        .count() as f64;
    let p0 = &l["packages"][0];
    let mcs_bytes = reads_per_chip * 1000.0 * 16384.0;
    assert!(
        num(&p0["read_bytes"]) >= mcs_bytes,
        "{} < {mcs_bytes}",
        p0["read_bytes"]
    );
}

#[test]
fn knl_shows_ddr_and_mcdram_apart() {
    let perf = Arc::new(FakePerf::new());
    let root = fixture("knl");
    let (r, lines, err) = run_fake(
        perf.clone(),
        &RealDevMem,
        parse(&root, "/dev/mem", 10, 0.02, "auto"),
    );
    assert_eq!(r, Ok(()), "stderr: {err}");
    let l = &lines[0];
    let mem = l["packages"][0]["memory"].as_array().expect("memory kinds");
    let kinds: Vec<&str> = mem
        .iter()
        .map(|m| m["kind"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(kinds, vec!["DDR", "MCDRAM"]);
    // 6 DDR channels and 8 MCDRAM EDCs, 1000 counts × 64 B each per interval.
    assert_eq!(num(&mem[0]["read_bytes"]), 6.0 * 64000.0);
    assert_eq!(num(&mem[1]["read_bytes"]), 8.0 * 64000.0);
    assert_eq!(num(&l["packages"][0]["read_bytes"]), 14.0 * 64000.0);
    assert!(l["values"]["mcdram_read"].is_number());
}

#[test]
fn a_package_whose_counters_fail_to_open_is_reported_and_the_others_keep_going() {
    let perf = Arc::new(FakePerf::new());
    perf.fail_open(None, 20, libc::ENODEV);
    let root = fixture("skx-2socket");
    let (r, lines, err) = run_fake(
        perf,
        &RealDevMem,
        parse(&root, "/dev/mem", 10, 0.02, "auto"),
    );
    assert_eq!(r, Ok(()), "stderr: {err}");
    assert!(err.contains("CPU 20") && err.contains("package 1"), "{err}");
    assert!(err.contains("CPU offline"), "{err}");
    for l in &lines {
        assert_eq!(pk_ids(l), vec![0], "only package 0 has counters");
        assert!(num(&l["packages"][0]["read_bytes"]) > 0.0);
    }
}

#[test]
fn a_cpu_going_offline_stops_its_counters_only() {
    let perf = Arc::new(FakePerf::new());
    // After two reads the kernel returns 0 bytes for CPU 20's events (error state).
    perf.fail_reads_after(20, 2, 0);
    let root = fixture("skx-2socket");
    let (r, lines, err) = run_fake(perf, &RealDevMem, parse(&root, "/dev/mem", 5, 0.03, "auto"));
    assert_eq!(r, Ok(()), "stderr: {err}");
    assert!(
        err.contains("stopped counting") && err.contains("CPU 20"),
        "{err}"
    );
    assert!(err.contains("offline"), "{err}");
    let last = lines.last().expect("intervals");
    let missing = last["missing"].as_array().expect("missing counters listed");
    assert_eq!(missing.len(), 12);
    assert_eq!(num(&last["packages"][0]["read_bytes"]), 6.0 * 64000.0);
    assert_eq!(num(&last["packages"][1]["read_bytes"]), 0.0);

    // The table says so too, under each interval whose rows lack those counters.
    let perf = Arc::new(FakePerf::new());
    perf.fail_reads_after(20, 2, 0);
    let (g, mut a) = parse(&root, "/dev/mem", 5, 0.03, "auto");
    a.json = false;
    let text = run_fake_text(perf, (g.clone(), a.clone()));
    let notes: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("# not counted in this interval:"))
        .collect();
    assert!(!notes.is_empty(), "{text}");
    assert!(
        notes
            .iter()
            .all(|l| l.contains("on CPU 20") && l.matches(';').count() == 11),
        "{notes:?}"
    );

    // And CSV, as a comment line (CSV readers skip those, as they skip the header).
    let perf = Arc::new(FakePerf::new());
    perf.fail_reads_after(20, 2, 0);
    a.separator = Some(",".to_string());
    let text = run_fake_text(perf, (g, a));
    assert!(text.starts_with("# time_s,elapsed_s,"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("# not counted in this interval:") && l.contains("on CPU 20")),
        "{text}"
    );
}

/// Checks a `-x SEP` table: exactly one header line, and every data row has its fields.
/// Returns the header's column names.
fn one_csv_table(text: &str, sep: char) -> Vec<String> {
    let headers: Vec<&str> = text.lines().filter(|l| l.starts_with("# time_s")).collect();
    assert_eq!(headers.len(), 1, "one header line: {text}");
    let cols: Vec<String> = headers[0][2..].split(sep).map(str::to_string).collect();
    let rows: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(!rows.is_empty(), "{text}");
    for r in rows {
        assert_eq!(
            r.split(sep).count(),
            cols.len(),
            "row {r:?} vs header {cols:?}"
        );
    }
    cols
}

#[test]
fn csv_has_one_header_that_matches_package_and_event_rows() {
    let (g, mut a) = parse(&fixture("skx-2socket"), "/dev/mem", 10, 0.03, "auto");
    a.json = false;
    a.separator = Some(",".to_string());
    a.events = vec![
        "uncore_imc_0/cas_count_read/".to_string(),
        "uncore_imc_0/clockticks/".to_string(),
    ];
    let perf = Arc::new(FakePerf::new());
    perf.set_step(0x0304, 1000);
    let text = run_fake_text(perf, (g, a));
    let cols = one_csv_table(&text, ',');
    let col = |name: &str| cols.iter().position(|c| c == name).unwrap();
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(',').collect())
        .collect();
    let kinds: std::collections::BTreeSet<&str> = rows.iter().map(|r| r[col("kind")]).collect();
    assert!(
        kinds.contains("event") && kinds.contains("package"),
        "{text}"
    );
    for r in &rows {
        let (bytes, count) = (r[col("read_bytes")], r[col("count")]);
        match r[col("kind")] {
            "event" => assert!(bytes.is_empty() && count.parse::<f64>().is_ok(), "{r:?}"),
            _ => assert!(bytes.parse::<f64>().is_ok() && count.is_empty(), "{r:?}"),
        }
    }
}

#[test]
fn pmus_that_refuse_groups_get_one_fd_per_event() {
    let perf = Arc::new(FakePerf::new());
    perf.refuse_groups();
    let root = fixture("icl-client");
    let (r, lines, err) = run_fake(
        perf.clone(),
        &RealDevMem,
        parse(&root, "/dev/mem", 10, 0.02, "auto"),
    );
    assert_eq!(r, Ok(()), "stderr: {err}");
    assert_eq!(
        lines[0]["source"], "intel-client-imc",
        "auto prefers the kernel PMU"
    );
    let opens = perf.opens();
    // The grouped attempt (leader, refused sibling), then one fd per event.
    assert_eq!(opens.len(), 4, "{opens:#?}");
    assert!(opens[1].group.is_some() && opens[1].fd.is_none());
    assert!(
        opens[2..]
            .iter()
            .all(|o| o.group.is_none() && o.fd.is_some() && o.cpu == 0)
    );
    assert_eq!(num(&lines[0]["packages"][0]["read_bytes"]), 64000.0);
}

#[test]
fn auto_falls_back_to_mchbar_when_the_kernel_pmu_does_not_open() {
    let perf = Arc::new(FakePerf::new());
    perf.fail_open(None, 0, libc::ENOENT);
    let root = fixture("icl-client");
    let (r, _, err) = run_fake(
        perf,
        &RealDevMem,
        parse(&root, "/nonexistent/mem", 10, 0.01, "auto"),
    );
    // The fallback is tried: its error (no /dev/mem) is not the answer, the first one is.
    let msg = r.expect_err("nothing opens");
    assert!(msg.contains("uncore_imc"), "{msg} / {err}");
}

// ---------------------------------------------------------------------------------------------
// /dev/mem: a regular file through the real mmap path.

/// Physical addresses of icl-client's DRAM_DATA_READS/WRITES (MCHBAR 0xfed10000 + 0x5050/4).
const READS: u64 = 0xfed1_5050;
const WRITES: u64 = 0xfed1_5054;

/// A sparse file as large as the physical address space up to the counters' page.
fn fake_devmem(dir: &Path) -> PathBuf {
    let path = dir.join("mem");
    let f = std::fs::File::create(&path).expect("create");
    f.set_len(0xfed1_6000).expect("sparse file");
    path
}

/// Advances the two counters at `read_rate` and `write_rate` counts per second of
/// CLOCK_MONOTONIC, from `start` (32-bit, so they wrap), until `stop`.
fn counter_writer(
    path: &Path,
    start: u32,
    read_rate: f64,
    write_rate: f64,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u32> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open");
    std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        let page: u64 = 0xfed1_5000;
        // SAFETY: a shared writable mapping of one page of our own file.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                page as libc::off_t,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: both offsets are inside the page and 4-byte aligned.
        let (rd, wr) = unsafe {
            (
                &*(p.cast::<u8>().add((READS - page) as usize) as *const AtomicU32),
                &*(p.cast::<u8>().add((WRITES - page) as usize) as *const AtomicU32),
            )
        };
        let t0 = std::time::Instant::now();
        let mut last = start;
        while !stop.load(Ordering::SeqCst) {
            let s = t0.elapsed().as_secs_f64();
            last = start.wrapping_add((s * read_rate) as u64 as u32);
            rd.store(last, Ordering::SeqCst);
            wr.store(
                start.wrapping_add((s * write_rate) as u64 as u32),
                Ordering::SeqCst,
            );
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
        last
    })
}

#[test]
fn mchbar_measures_a_known_rate_across_32_bit_wraps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mem = fake_devmem(dir.path());
    // 8e9 lines/s wraps the 32-bit read counter every 0.54 s, i.e. about twice in each 1 s
    // interval: only the backend's own poller can see every wrap.
    let (read_rate, write_rate) = (8.0e9, 1.0e9);
    let start = u32::MAX - 100_000_000;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = counter_writer(&mem, start, read_rate, write_rate, stop.clone());
    std::thread::sleep(std::time::Duration::from_millis(20));
    let out = imc()
        .args(["--root", &fixture("icl-client"), "--devmem"])
        .arg(&mem)
        .args([
            "stat",
            "--backend",
            "intel-client-mchbar",
            "-I",
            "1000",
            "--duration",
            "2",
        ])
        .arg("--json")
        .output()
        .expect("run imc");
    stop.store(true, Ordering::SeqCst);
    let last = writer.join().expect("writer");
    assert!(last < start, "the read counter wrapped during the run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(lines.len(), 2);
    let (mut rb, mut wb, mut ns) = (0.0, 0.0, 0.0);
    for l in &lines {
        assert_eq!(l["source"], "intel-client-mchbar");
        let p = &l["packages"][0];
        rb += num(&p["read_bytes"]);
        wb += num(&p["write_bytes"]);
        ns += num(&l["t_end_ns"]) - num(&l["t_start_ns"]);
    }
    let (r, w) = (rb / ns * 1e9, wb / ns * 1e9);
    let within = |got: f64, want: f64| (got - want).abs() / want < 0.01;
    assert!(
        within(r, read_rate * 64.0),
        "read {r:e} B/s, want {:e}",
        read_rate * 64.0
    );
    assert!(
        within(w, write_rate * 64.0),
        "write {w:e} B/s, want {:e}",
        write_rate * 64.0
    );
}

fn mchbar_counter(name: &str, address: u64, direction: Direction) -> MchbarCounter {
    MchbarCounter {
        spec: CounterSpec {
            event: name.into(),
            pmu: "mchbar".into(),
            cpu: None,
            scope: Scope::Package(0),
            package: Some(0),
            direction: Some(direction),
            memory: Memory::Dram,
            bytes_per_count: Some(64.0),
            scale: 1.0,
            counter_bits: 64,
            config: 0,
            sub_channel: None,
        },
        address,
        width: 32,
    }
}

#[test]
fn mchbar_maps_only_the_counters_page_and_refuses_addresses_outside_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mem = fake_devmem(dir.path());
    let mut b = MchbarBackend::open(
        &RealDevMem,
        &mem,
        vec![
            mchbar_counter("read", READS, Direction::Read),
            mchbar_counter("write", WRITES, Direction::Write),
        ],
    )
    .expect("maps");
    assert_eq!(b.windows(), vec![(0xfed1_5000, 4096)]);
    assert!(b.read_address(READS, 32).is_ok());
    for addr in [0xfed1_4ffc, 0xfed1_6000, 0] {
        assert!(
            matches!(
                b.read_address(addr, 32),
                Err(DevMemError::OutsideWindow { .. })
            ),
            "{addr:#x} must be refused"
        );
    }
    let mut out = vec![Default::default(); 2];
    b.read(&mut out);
    assert!(out.iter().all(|r| r.ok));
    assert!(b.poll_period().is_some(), "32-bit counters need the poller");
}

#[test]
fn a_missing_devmem_says_so_and_names_the_kernel_pmu() {
    let out = imc()
        .args([
            "--root",
            &fixture("icl-client"),
            "--devmem",
            "/nonexistent/mem",
            "stat",
            "--backend",
            "intel-client-mchbar",
            "--duration",
            "0.1",
        ])
        .output()
        .expect("run imc");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("/nonexistent/mem") && err.contains("intel-client-imc"),
        "{err}"
    );
}

/// A /dev/mem whose mmap the kernel forbids (STRICT_DEVMEM, lockdown).
struct ForbiddingDevMem;

impl DevMem for ForbiddingDevMem {
    fn map_readonly(
        &self,
        path: &Path,
        base: u64,
        len: usize,
    ) -> Result<Box<dyn Region>, DevMemError> {
        Err(DevMemError::Map {
            path: path.to_path_buf(),
            addr: base,
            len,
            source: io::Error::from_raw_os_error(libc::EPERM),
        })
    }
}

#[test]
fn a_forbidden_mapping_names_strict_devmem_and_the_alternative() {
    let root = fixture("icl-client");
    let (r, _, _) = run_fake(
        Arc::new(FakePerf::new()),
        &ForbiddingDevMem,
        parse(&root, "/dev/mem", 1000, 1.0, "intel-client-mchbar"),
    );
    let msg = r.expect_err("refused");
    assert!(
        msg.contains("STRICT_DEVMEM") && msg.contains("lockdown"),
        "{msg}"
    );
    assert!(msg.contains("--backend intel-client-imc"), "{msg}");
    assert!(!msg.contains('\n'));
}

// ---------------------------------------------------------------------------------------------
// The real binary on this VM.

fn json_lines(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// `imc stat -I interval --duration secs -e msr/tsc/ --json` (with IMC_STAT_MODE=mode when
/// given), which must succeed; its interval objects.
fn tsc_json(mode: Option<&str>, interval: &str, secs: &str) -> Vec<Value> {
    tsc_json_with(mode, interval, secs, &[]).0
}

/// `tsc_json` with more arguments; also returns what imc wrote to stderr.
fn tsc_json_with(
    mode: Option<&str>,
    interval: &str,
    secs: &str,
    extra: &[&str],
) -> (Vec<Value>, String) {
    let mut cmd = imc();
    if let Some(m) = mode {
        cmd.env("IMC_STAT_MODE", m);
    }
    let out = cmd
        .args([
            "stat",
            "-I",
            interval,
            "--duration",
            secs,
            "-e",
            "msr/tsc/",
            "--json",
        ])
        .args(extra)
        .output()
        .expect("run imc");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (json_lines(&out), stderr)
}

fn perf_usable() -> bool {
    let attr = imc::sys::perf::PerfEventAttr::counting(TYPE_SOFTWARE, 0);
    imc::sys::perf::RealPerf.open(&attr, -1, 0, None).is_ok()
}

#[test]
fn msr_tsc_counts_at_a_steady_rate_per_real_elapsed_time() {
    if !imc_tests::require(
        perf_usable() && Path::new("/sys/bus/event_source/devices/msr").exists(),
        "system-wide perf events and the msr PMU",
    ) {
        return;
    }
    // -I 5 runs kernel-timed, -I 150 wakes per interval: both must divide by real time.
    for (interval, duration) in [("5", "0.2"), ("150", "0.45")] {
        let lines = tsc_json(None, interval, duration);
        assert!(lines.len() >= 3, "{} intervals", lines.len());
        // The TSC ticks at a constant rate on every CPU, so count / elapsed is the same in every
        // interval however late a wake-up was; compare each interval with the run's total.
        let rate = |l: &Value| {
            num(&l["values"]["msr/tsc/"]) / (num(&l["t_end_ns"]) - num(&l["t_start_ns"]))
        };
        let total: f64 = lines.iter().map(|l| num(&l["values"]["msr/tsc/"])).sum();
        let span = num(&lines[lines.len() - 1]["t_end_ns"]) - num(&lines[0]["t_start_ns"]);
        let mean = total / span;
        for l in &lines {
            // Each CPU's counters are read by its own sampling timer; when a vCPU is not
            // scheduled, its read lands late and one short interval carries a little of the
            // next. 3% covers that skew on a loaded 2-vCPU machine (0.3 ms of 10 ms).
            assert!(
                (rate(l) / mean - 1.0).abs() < 0.03,
                "{l} vs {mean} ticks/ns"
            );
            assert_eq!(l["source"], "events");
            assert_eq!(l["packages"], Value::Array(vec![]));
        }
        // Consecutive intervals share their boundary.
        for w in lines.windows(2) {
            assert_eq!(w[0]["t_end_ns"], w[1]["t_start_ns"]);
        }
    }
}

#[test]
fn software_events_count_system_wide() {
    if !imc_tests::require(perf_usable(), "system-wide perf events") {
        return;
    }
    let out = run_ok(imc().args([
        "stat",
        "-I",
        "20",
        "--duration",
        "0.1",
        "-e",
        "cpu-clock",
        "-x",
        ";",
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    let cols = one_csv_table(&text, ';');
    let count = cols
        .iter()
        .position(|c| c == "count")
        .expect("a count column");
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(';').collect())
        .collect();
    // Nominally 5; a late sample on a loaded machine merges two intervals, and a stop that
    // lands just after a boundary adds a short last one.
    assert!((4..=6).contains(&rows.len()), "{text}");
    for r in &rows {
        assert_eq!(r[2], "event");
        assert_eq!(r[3], "cpu-clock");
        // cpu-clock on every CPU counts wall time: ns per CPU ≈ elapsed.
        let ns: f64 = r[count].parse().expect("count");
        let el: f64 = r[1].parse().expect("elapsed");
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        assert!((ns / (el * 1e9) / cpus - 1.0).abs() < 0.05, "{r:?}");
    }
}

#[test]
fn without_a_memory_controller_stat_counts_the_stand_in_top_and_record_use() {
    let perf = Arc::new(FakePerf::new());
    perf.set_step(2, 500);
    let (r, lines, err) = run_fake(
        perf.clone(),
        &RealDevMem,
        parse(&fixture("vm-guest"), "/dev/mem", 10, 0.03, "auto"),
    );
    assert_eq!(r, Ok(()), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no memory-controller counters")
            && err.contains("hypervisor")
            && err.contains("counting page-faults system-wide as a stand-in (counts, not bytes)"),
        "{err}"
    );
    assert!(!lines.is_empty());
    for l in &lines {
        assert_eq!(l["source"], "proxy:page-faults", "{l}");
        assert_eq!(
            l["packages"].as_array().map(Vec::len),
            Some(0),
            "no bytes: {l}"
        );
        assert!(num(&l["values"]["page-faults"]) > 0.0, "{l}");
    }
    // page-faults system-wide on each of the guest's 4 CPUs.
    let opens = perf.opens();
    let mut cpus: Vec<i32> = opens.iter().map(|o| o.cpu).collect();
    cpus.sort();
    assert_eq!(cpus, [0, 1, 2, 3], "{opens:#?}");
    for o in &opens {
        assert_eq!((o.pid, o.attr.type_, o.attr.config), (-1, TYPE_SOFTWARE, 2));
    }
    // Asking for something else is not overridden by the stand-in.
    let (g, mut a) = parse(&fixture("vm-guest"), "/dev/mem", 10, 0.03, "auto");
    a.events = vec!["msr/tsc/".into()];
    let (r, lines, err) = run_fake(Arc::new(FakePerf::new()), &RealDevMem, (g, a));
    assert_eq!(r, Ok(()), "stderr: {err}");
    assert!(err.is_empty(), "{err}");
    assert_eq!(lines[0]["source"], "events");
}

#[test]
fn stat_on_this_guest_names_its_stand_in_like_top() {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    if !cpuinfo.contains(" hypervisor") {
        eprintln!("SKIPPED: not a VM guest (this machine may have memory-controller counters)");
        return;
    }
    if !imc_tests::require(perf_usable(), "system-wide perf events") {
        return;
    }
    let out = imc()
        .args(["stat", "--duration", "0.2", "--json"])
        .output()
        .expect("run imc");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("as a stand-in (counts, not bytes)"), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    let first: Value = serde_json::from_str(text.lines().next().expect("an interval")).unwrap();
    assert!(
        first["source"]
            .as_str()
            .is_some_and(|s| s.starts_with("proxy:")),
        "{first}"
    );
    // No package counted: utilisation is there, null, as where the peak is unknown.
    assert!(
        first.get("utilisation").is_some_and(Value::is_null),
        "{first}"
    );
}

#[test]
fn bad_input_exits_2() {
    for args in [
        vec!["stat", "-I", "0"],
        vec!["stat", "--backend", "nonsense"],
        vec!["stat", "-e", "nosuchpmu/foo/", "--duration", "0.1"],
        vec!["stat", "-x", "", "--duration", "0.1"],
        vec!["stat", "--duration", "1", "--", "true"],
    ] {
        let out = imc().args(&args).output().expect("run imc");
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stderr).lines().count(),
            1,
            "{args:?}"
        );
    }
}

#[test]
fn the_child_command_decides_the_exit_status() {
    if !imc_tests::require(perf_usable(), "system-wide perf events") {
        return;
    }
    let out = imc()
        .args([
            "stat",
            "-I",
            "10",
            "-e",
            "msr/tsc/",
            "--json",
            "--",
            "sh",
            "-c",
            "sleep 0.3; exit 3",
        ])
        .output()
        .expect("run imc");
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!json_lines(&out).is_empty());
    let out = imc()
        .args([
            "stat",
            "-I",
            "10",
            "-e",
            "msr/tsc/",
            "--",
            "sh",
            "-c",
            "kill -TERM $$",
        ])
        .output()
        .expect("run imc");
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM));
}

// ---------------------------------------------------------------------------------------------
// Utilisation against the theoretical peak (SMBIOS memory devices under --root).

/// A copy of a fixture tree with SMBIOS entries added: `devices` of (size MB, MT/s).
fn fixture_with_dmi(name: &str, devices: &[(u16, u16)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", fixture(name)))
        .arg(dir.path())
        .status()
        .expect("cp");
    assert!(st.success());
    let entries = dir.path().join("sys/firmware/dmi/entries");
    for (i, &(size, mts)) in devices.iter().enumerate() {
        let d = entries.join(format!("17-{i}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("raw"), memory_device(0x1100 + i as u16, size, mts)).unwrap();
    }
    // A truncated entry beside them is reported with -v and otherwise ignored.
    let d = entries.join(format!("17-{}", devices.len()));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("raw"), &memory_device(0x1200, 8192, 2666)[..0x10]).unwrap();
    dir
}

#[test]
fn utilisation_is_shown_against_the_smbios_peak() {
    // Twelve DDR4-2933 DIMMs run at 2666 MT/s, two empty slots; SKX has 6 channels a socket,
    // so each package's peak is 6 × 2666 MT/s × 8 B.
    let mut devices = vec![(16384u16, 2666u16); 12];
    devices.extend([(0, 0), (0, 0)]);
    let dir = fixture_with_dmi("skx-2socket", &devices);
    let root = dir.path().display().to_string();
    let perf = Arc::new(FakePerf::new());
    perf.set_step(0x0304, 1000);
    perf.set_step(0x0c04, 250);
    let (r, lines, err) = run_fake(
        perf.clone(),
        &RealDevMem,
        parse(&root, "/dev/mem", 10, 0.03, "auto"),
    );
    assert_eq!(r, Ok(()), "stderr: {err}");
    let peak: f64 = 6.0 * 2666e6 * 8.0;
    assert!(!lines.is_empty());
    for l in &lines {
        for p in l["packages"].as_array().expect("packages") {
            assert_eq!(num(&p["peak_bytes_per_s"]), peak.round());
            let total = num(&p["read_bytes_per_s"]) + num(&p["write_bytes_per_s"]);
            let u = num(&p["utilisation"]);
            assert!(
                (u - total / peak).abs() < 1e-9 * (1.0 + u),
                "{u} vs {total}"
            );
            // The fields other tools rely on are still there.
            for k in ["id", "read_bytes", "write_bytes", "channels"] {
                assert!(!p[k].is_null(), "{k} missing");
            }
        }
    }
    // The human table has a util column on package and channel rows.
    let (g, mut a) = parse(&root, "/dev/mem", 10, 0.03, "auto");
    a.json = false;
    a.per_channel = true;
    let text = run_fake_text(Arc::new(FakePerf::new()), (g, a));
    let header = text.lines().next().unwrap();
    assert!(header.ends_with("util"), "{text}");
    let rows: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(!rows.is_empty());
    for row in rows {
        assert!(row.trim_end().ends_with('%'), "no utilisation in: {row}");
    }
}

#[test]
fn without_smbios_entries_utilisation_is_unknown() {
    let (r, lines, err) = run_fake(
        Arc::new(FakePerf::new()),
        &RealDevMem,
        parse(&fixture("skx-2socket"), "/dev/mem", 10, 0.02, "auto"),
    );
    assert_eq!(r, Ok(()), "stderr: {err}");
    for l in &lines {
        for p in l["packages"].as_array().expect("packages") {
            assert!(p["utilisation"].is_null(), "{p}");
            assert!(p.get("peak_bytes_per_s").is_none(), "{p}");
        }
    }
    let (g, mut a) = parse(&fixture("skx-2socket"), "/dev/mem", 10, 0.02, "auto");
    a.json = false;
    let text = run_fake_text(Arc::new(FakePerf::new()), (g, a));
    assert!(
        text.lines()
            .any(|l| l.starts_with("# utilisation unknown: no SMBIOS memory device")),
        "{text}"
    );
}

// ---------------------------------------------------------------------------------------------
// Kernel-timed intervals on the real machine, idle and busy.

/// Held by each test below for its whole run: one keeps every CPU busy, the others need the
/// machine quiet, and cargo runs a binary's tests in parallel.
static WHOLE_MACHINE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The machine to itself, when it has system-wide perf events and the msr PMU (else the test
/// says why it skips).
fn whole_machine_with_msr() -> Option<std::sync::MutexGuard<'static, ()>> {
    if !imc_tests::require(
        perf_usable() && Path::new("/sys/bus/event_source/devices/msr").exists(),
        "system-wide perf events and the msr PMU",
    ) {
        return None;
    }
    // A test that failed while holding it leaves nothing to repair.
    Some(WHOLE_MACHINE.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Runs `imc stat -I interval_ms --duration secs -e msr/tsc/ --json` forced kernel-timed and
/// checks every interval against the TSC: msr/tsc counts TSC ticks on every CPU, so an
/// interval's count over the run's ticks per ns is how long it really lasted. Returns the
/// intervals' lengths in ns.
fn kernel_timed_intervals(interval_ms: u64, secs: f64, tolerance: f64) -> Vec<f64> {
    let lines = tsc_json(
        Some("kernel-timed"),
        &interval_ms.to_string(),
        &secs.to_string(),
    );
    lengths_checked_against_tsc(&lines, interval_ms, tolerance)
}

/// The lengths of `lines`' intervals in ns, each checked against the TSC to within `tolerance`
/// of the nominal interval, and checked to share their boundaries. An interval that lists a
/// counter as `missing` (the kernel stopped it: a throttle) has only the others' counts and is
/// not compared; such intervals must stay rare.
fn lengths_checked_against_tsc(lines: &[Value], interval_ms: u64, tolerance: f64) -> Vec<f64> {
    assert!(lines.len() >= 2, "{} intervals", lines.len());
    let complete: Vec<&Value> = lines
        .iter()
        .filter(|l| l.get("missing").is_none())
        .collect();
    assert!(
        complete.len() * 50 >= lines.len() * 49,
        "{} of {} intervals miss a counter",
        lines.len() - complete.len(),
        lines.len()
    );
    let span: f64 = complete
        .iter()
        .map(|l| num(&l["t_end_ns"]) - num(&l["t_start_ns"]))
        .sum();
    let ticks: f64 = complete.iter().map(|l| num(&l["values"]["msr/tsc/"])).sum();
    let per_ns = ticks / span;
    let mut lengths = Vec::new();
    for l in lines {
        let reported = num(&l["t_end_ns"]) - num(&l["t_start_ns"]);
        if l.get("missing").is_none() {
            let measured = num(&l["values"]["msr/tsc/"]) / per_ns;
            assert!(
                (reported - measured).abs() <= tolerance * interval_ms as f64 * 1e6,
                "reported {reported} ns, the TSC says {measured} ns: {l}"
            );
        }
        lengths.push(reported);
    }
    for w in lines.windows(2) {
        assert_eq!(
            w[0]["t_end_ns"], w[1]["t_start_ns"],
            "intervals share boundaries"
        );
    }
    lengths
}

/// Checks that `lines`, a kernel-timed run of `expected` boundaries on the clock `grid` (its
/// boundary 0 and period, in ns, as `-v` says them), accounts for every boundary of that clock
/// and invents none: each interval ends at a boundary of its own, later than the one before,
/// and the last ends `expected` boundaries after the first interval's start. A time belongs to
/// the boundary just before it, however late (the host may not run a vCPU for most of a
/// period), with a twentieth of a period for clock rounding, as imc assigns readings. The run's
/// last reading may come a whole period late (both vCPUs busy) and then maps to the boundary
/// after its own: the span may be one more, never less, and the intervals never more than
/// `expected`. A boundary no group closed lies inside a longer interval; returns how many did.
fn boundaries_accounted_for(lines: &[Value], grid: (u64, u64), expected: u64) -> u64 {
    let (base, period) = grid;
    let boundary = |t: &Value| {
        let t = num(t) as u64;
        assert!(
            t >= base,
            "a time {t} ns before the clock's boundary 0 at {base} ns"
        );
        (t - base + period / 20) / period
    };
    let first = boundary(&lines[0]["t_start_ns"]);
    let mut last_k = first;
    for l in lines {
        let k = boundary(&l["t_end_ns"]);
        assert!(
            k > last_k,
            "an interval ending at boundary {k} closes no boundary of its own (the one before \
             ended at {last_k}; boundary 0 at {base} ns, {period} ns apart): {l}"
        );
        last_k = k;
    }
    let span = last_k - first;
    assert!(
        span == expected || span == expected + 1,
        "the intervals cover {span} boundaries of the run's {expected}"
    );
    let intervals = lines.len() as u64;
    assert!(
        intervals <= expected,
        "{intervals} intervals for the run's {expected} boundaries"
    );
    expected - intervals
}

/// Whole intervals (the last may be partial) and how many of them merged boundaries.
fn merged(lengths: &[f64], interval_ms: u64) -> usize {
    lengths[..lengths.len() - 1]
        .iter()
        .filter(|&&l| l > 1.5 * interval_ms as f64 * 1e6)
        .count()
}

#[test]
fn kernel_timed_intervals_close_on_time_on_an_idle_machine() {
    let Some(_machine) = whole_machine_with_msr() else {
        return;
    };
    // On a quiet machine (CI) cpu-clock misses boundaries on idle CPUs; their groups must be
    // read from userspace so every 10 ms boundary still closes: 100 intervals, none merged.
    // A busy 2-vCPU machine can delay imc's own wake-up past a whole interval now and then,
    // hence the small allowance; before the fallback reads an idle CPU merged nearly all.
    // Boundaries of a vCPU the host did not run (steal time) merge too.
    let stolen = imc_tests::stolen_ns();
    let lengths = kernel_timed_intervals(10, 1.0, 0.03);
    let stolen = imc_tests::stolen_ns().saturating_sub(stolen) as usize;
    let m = merged(&lengths, 10);
    let lost_to_host = stolen.div_ceil(10_000_000);
    assert!(
        lengths.len() + lost_to_host >= 97 && lengths.len() <= 101 && m <= 2 + lost_to_host,
        "{} intervals, {m} merged, {} ms stolen by the host: {lengths:?}",
        lengths.len(),
        stolen / 1_000_000
    );
}

#[test]
fn kernel_timed_intervals_close_on_time_with_every_cpu_busy() {
    let Some(_machine) = whole_machine_with_msr() else {
        return;
    };
    // Every CPU busy: the kernel's samples arrive and imc only collects them every 10 ms, so
    // at -I 2 five boundaries pass between wake-ups.
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let stolen = imc_tests::stolen_ns();
    let spin = imc_tests::Spinners::start(cpus);
    let lengths = kernel_timed_intervals(2, 1.0, 0.1);
    drop(spin);
    let stolen = imc_tests::stolen_ns().saturating_sub(stolen) as usize;
    let m = merged(&lengths, 2);
    // 500 nominal. A boundary whose CPU the host did not run has no sample and no reading
    // anyone could take (a read of that CPU's group waits for it to run), so it merges into the
    // next: what the host stole (steal time) is allowed for. Now and then a vCPU the host runs
    // late merges one more.
    let lost_to_host = stolen.div_ceil(2_000_000);
    assert!(
        lengths.len() + 25 + lost_to_host >= 500 && m <= 15,
        "{} intervals, {m} merged, {} ms stolen by the host",
        lengths.len(),
        stolen / 1_000_000
    );
}

/// The integer just before `phrase` in `text` (`-v` statistics), or None.
fn count_before(text: &str, phrase: &str) -> Option<u64> {
    let head = &text[..text.find(phrase)?];
    let digits: String = head
        .trim_end()
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.chars().rev().collect::<String>().parse().ok()
}

#[test]
fn cpus_without_kernel_samples_are_read_on_their_own_cpu_at_1_ms() {
    let Some(_machine) = whole_machine_with_msr() else {
        return;
    };
    // At -I 1 a CPU whose cpu-clock samples do not come (an idle vCPU on this project's test
    // VMs: their kernel drops samples taken while that vCPU's idle task runs) is read at every
    // boundary by a thread pinned to it, so imc's own thread still wakes once per 10 ms and
    // every reading is a local one, timed to a few µs.
    let (lines, err) = tsc_json_with(Some("kernel-timed"), "1", "2", &["-v"]);
    let lengths = lengths_checked_against_tsc(&lines, 1, 0.25);
    let stats = err
        .lines()
        .find(|l| l.contains("kernel-timed:"))
        .unwrap_or_else(|| panic!("no -v statistics: {err}"));
    let boundaries = count_before(stats, " boundaries").expect(stats);
    let grid = (
        count_before(stats, " ns (CLOCK_MONOTONIC)").expect(stats),
        count_before(stats, " ns apart").expect(stats),
    );
    let wakes = count_before(stats, " wake-ups").expect(stats);
    let own_reads = count_before(stats, " group reads from imc's thread").expect(stats);
    let local_reads = count_before(stats, " group reads by").expect(stats);
    // How many boundaries closed on their own is the machine's to say (`cargo xtask
    // bench-stat` reports it); what holds anywhere is that the intervals cover the run's 2000
    // boundaries, each of them once.
    let merged_into_others = boundaries_accounted_for(&lines, grid, 2000);
    eprintln!(
        "{} intervals, {merged_into_others} boundaries inside longer intervals: {stats}",
        lengths.len()
    );
    let samples = &stats[stats.find("kernel samples per group:").expect(stats)..];
    let quiet = samples
        .split(", ")
        .filter_map(|p| p.rsplit(": ").next()?.trim().parse::<u64>().ok())
        .any(|n| n < boundaries / 2);
    if !quiet {
        eprintln!("every CPU delivered its own samples here; the local readers were not needed");
        return;
    }
    assert!(
        local_reads >= boundaries / 2 && own_reads <= boundaries / 20,
        "a CPU without samples must be read by its own reader, not through IPIs: {stats}"
    );
    assert!(
        wakes <= boundaries / 4,
        "imc's thread woke {wakes} times for {boundaries} boundaries: {stats}"
    );
}

// ---------------------------------------------------------------------------------------------
// `stat --latency` on KNL, with scripted offcore-response counts.

/// libpfm4 reads LIBPFM_FORCE_PMU once per process, when it initialises (the binary sets it
/// from --root at start-up). A test that encodes for KNL in-process runs itself again in a
/// child with the variable set: true in the child (run the body), false in the parent once the
/// child passed.
fn in_knl_child(test: &str) -> bool {
    const CHILD: &str = "IMC_STAT_TEST_CHILD";
    if std::env::var(CHILD).as_deref() == Ok(test) {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, test)
        .env("LIBPFM_FORCE_PMU", "knl")
        .output()
        .expect("run the test binary again");
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && so.contains("1 passed"),
        "child run of {test} failed:\n{so}\n{se}"
    );
    false
}

fn latency_args(request_types: &str, json: bool) -> (GlobalArgs, StatArgs) {
    let (g, mut a) = parse(&fixture("knl"), "/dev/mem", 10, 0.03, "auto");
    a.latency = Some(request_types.to_string());
    a.json = json;
    (g, a)
}

#[test]
fn knl_latency_is_outstanding_cycles_over_requests_beside_ddr_and_mcdram() {
    if !in_knl_child("knl_latency_is_outstanding_cycles_over_requests_beside_ddr_and_mcdram") {
        return;
    }
    if let Err(e) = imc::events::pfm::available() {
        eprintln!("SKIPPED: libpfm4 not available: {e}");
        return;
    }
    let perf = Arc::new(FakePerf::new());
    // Per read and CPU: 5000 cycles × requests outstanding, 100 completed requests.
    perf.set_step(0x01b7, 5000);
    perf.set_step(0x02b7, 100);
    let (r, lines, err) = run_fake(
        perf.clone(),
        &RealDevMem,
        latency_args("DMND_DATA_RD:DMND_RFO", true),
    );
    assert_eq!(r, Ok(()), "stderr: {err}");
    assert!(!lines.is_empty());
    let o_key = "OFFCORE_RESPONSE_0:DMND_DATA_RD:DMND_RFO:OUTSTANDING";
    let r_key = "OFFCORE_RESPONSE_1:DMND_DATA_RD:DMND_RFO:ANY_RESPONSE";
    for l in &lines {
        assert_eq!(num(&l["latency_cycles"]), 50.0, "{l}");
        // The fields every platform's `latency` has: what KNL does not measure is null.
        let p = &l["latency"][0];
        assert_eq!(num(&p["read_latency_core_cycles"]), 50.0, "{l}");
        assert!(
            p["read_latency_ns"].is_null() && p["write_latency_ns"].is_null(),
            "{l}"
        );
        // both counts summed over the 256 CPUs, in the same ratio
        let (o, q) = (num(&l["values"][o_key]), num(&l["values"][r_key]));
        assert_eq!(o / q, 50.0, "{l}");
        assert_eq!(o % (256.0 * 5000.0), 0.0, "{l}");
        // DDR and MCDRAM bandwidth beside it
        let kinds: Vec<&str> = l["packages"][0]["memory"]
            .as_array()
            .expect("memory kinds")
            .iter()
            .map(|m| m["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["DDR", "MCDRAM"]);
    }
    // What was asked of the kernel: the pair on every CPU, same request bits (0x3), OUTSTANDING
    // (bit 38) only on RSP_0, ANY_RESPONSE (bit 16) only on RSP_1.
    let opens = perf.opens();
    let of = |config: u64| -> Vec<_> {
        opens
            .iter()
            .filter(|o| o.attr.type_ == 4 && o.attr.config == config)
            .collect()
    };
    let (rsp0, rsp1) = (of(0x01b7), of(0x02b7));
    assert_eq!(rsp0.len(), 256);
    assert_eq!(rsp1.len(), 256);
    assert!(
        rsp0.iter()
            .all(|o| o.attr.config1 == 0x40_0000_0003 && o.pid == -1)
    );
    assert!(rsp1.iter().all(|o| o.attr.config1 == 0x1_0003));
    let mut cpus: Vec<i32> = rsp0.iter().map(|o| o.cpu).collect();
    cpus.sort();
    assert_eq!(cpus, (0..256).collect::<Vec<i32>>());

    // No completed requests: the latency is unknown (null), not a division by zero.
    let perf = Arc::new(FakePerf::new());
    perf.set_step(0x02b7, 0);
    let (r, lines, err) = run_fake(perf, &RealDevMem, latency_args("DMND_DATA_RD", true));
    assert_eq!(r, Ok(()), "stderr: {err}");
    assert!(
        lines.iter().all(|l| l["latency_cycles"].is_null()),
        "{lines:?}"
    );

    // The table shows it as a row of its own.
    let perf = Arc::new(FakePerf::new());
    perf.set_step(0x01b7, 3000);
    perf.set_step(0x02b7, 20);
    let text = run_fake_text(perf, latency_args("DMND_DATA_RD", false));
    let row = text
        .lines()
        .find(|l| l.contains("average latency (core cycles)"))
        .unwrap_or_else(|| panic!("no latency row in\n{text}"));
    assert!(row.contains("150.0"), "{row}");
}

#[test]
fn knl_latency_refusals_are_one_line() {
    if !in_knl_child("knl_latency_refusals_are_one_line") {
        return;
    }
    if imc::events::pfm::available().is_err() {
        return;
    }
    let refused = |req: &str, root: &str, code: u8, what: &[&str]| {
        let (g, mut a) = latency_args(req, true);
        let g = GlobalArgs {
            root: PathBuf::from(fixture(root)),
            ..g
        };
        a.latency = Some(req.to_string());
        let env = StatEnv {
            perf: Arc::new(FakePerf::new()) as Arc<dyn PerfSys>,
            devmem: &RealDevMem,
            clock: &MonotonicClock,
        };
        let e = run_with(&g, &a, &env, &mut Vec::new(), &mut Vec::new()).unwrap_err();
        let message = e.to_string();
        assert_eq!(e.code(), code, "{req}: {message}");
        assert_eq!(message.lines().count(), 1, "{message}");
        for w in what {
            assert!(message.contains(w), "{req}: '{w}' not in {message}");
        }
    };
    refused("DMND_DATA_RD:DDR", "knl", 2, &["DDR", "response types"]);
    refused(
        "DMND_DATA_RDX",
        "knl",
        2,
        &["OFFCORE_RESPONSE_0", "dmnd_data_rdx"],
    );
    refused("DMND_DATA_RD:c=1", "knl", 2, &["c=1", "request type"]);
    // Off KNL, request types mean nothing (the queues take none).
    refused(
        "DMND_RFO",
        "skx-2socket",
        2,
        &["DMND_RFO", "Knights Landing"],
    );
    // What `--dry-run` shows: the two checked encodings.
    let (o, r) = imc::commands::latency::encodings(Path::new(&fixture("knl")), "DMND_DATA_RD")
        .expect("encodings");
    assert_eq!(
        (o.pmu_type, o.config, o.config1),
        (4, 0x01b7, 0x40_0000_0001)
    );
    assert_eq!((r.pmu_type, r.config, r.config1), (4, 0x02b7, 0x1_0001));
    assert_eq!(o.pmu, "cpu");
}

// ---------------------------------------------------------------------------------------------
// `stat --latency` from the memory controller's queues, with scripted counts.

fn queue_latency_args(tree: &str, per_channel: bool, json: bool) -> (GlobalArgs, StatArgs) {
    let (g, mut a) = parse(&fixture(tree), "/dev/mem", 10, 0.03, "auto");
    a.latency = Some("DMND_DATA_RD".into()); // what a bare --latency gives
    a.per_channel = per_channel;
    a.json = json;
    (g, a)
}

#[test]
fn skx_queue_latency_is_occupancy_over_inserts_per_channel_and_package() {
    let perf = Arc::new(FakePerf::new());
    // Per read of each box: 8000 read-queue entries × clocks over 100 reads (80 DRAM clocks
    // each), 1600 DRAM clocks on the fixed counter.
    perf.set_step(0x80, 8000);
    perf.set_step(0x10, 100);
    perf.set_step(0xff, 1600);
    let (r, lines, err) = run_fake(
        perf.clone(),
        &RealDevMem,
        queue_latency_args("skx-2socket", true, true),
    );
    assert_eq!(r, Ok(()), "stderr: {err}");
    assert!(!lines.is_empty());
    for l in &lines {
        let lat = l["latency"].as_array().expect("latency per package");
        assert_eq!(lat.len(), 2, "{l}");
        let elapsed = num(&l["t_end_ns"]) - num(&l["t_start_ns"]);
        // Clock ticks of one box in this interval (12 boxes counted).
        let ticks = num(&l["values"]["dram_clockticks"]) / 12.0;
        for p in lat {
            assert_eq!(num(&p["read_latency_dram_clocks"]), 80.0, "{p}");
            let ns = num(&p["read_latency_ns"]);
            assert!((ns - 80.0 * elapsed / ticks).abs() < 1e-6 * ns, "{p}");
            // The write queue is not counted (no room beside bandwidth): null, not made up.
            assert!(p["write_latency_ns"].is_null() && p["write_latency_dram_clocks"].is_null());
            assert!(p["utilisation"].is_null());
            let chans = p["channels"].as_array().expect("--per-channel");
            assert_eq!(chans.len(), 6);
            assert!(
                chans
                    .iter()
                    .all(|c| num(&c["read_latency_dram_clocks"]) == 80.0)
            );
        }
        // Bandwidth beside it.
        assert!(num(&l["packages"][0]["read_bytes"]) > 0.0, "{l}");
    }
    // Never more than four generic counters on one box: CAS read/write, RPQ occupancy/inserts.
    let mut per_box = std::collections::BTreeMap::new();
    for o in perf.opens().iter().filter(|o| o.attr.config != 0xff) {
        *per_box.entry((o.attr.type_, o.cpu)).or_insert(0) += 1;
    }
    assert!(per_box.values().all(|&n| n == 4), "{per_box:?}");

    // No reads entered the queue: null, not a division by zero.
    let perf = Arc::new(FakePerf::new());
    perf.set_step(0x10, 0);
    let (r, lines, err) = run_fake(
        perf,
        &RealDevMem,
        queue_latency_args("skx-2socket", false, true),
    );
    assert_eq!(r, Ok(()), "stderr: {err}");
    for l in &lines {
        let p = &l["latency"][0];
        assert!(p["read_latency_ns"].is_null(), "{l}");
        assert!(
            p.get("channels").is_none(),
            "channels only with --per-channel"
        );
    }

    // The table: a latency row per package.
    let perf = Arc::new(FakePerf::new());
    perf.set_step(0x80, 4000);
    perf.set_step(0x10, 100);
    let text = run_fake_text(perf, queue_latency_args("skx-2socket", false, false));
    let row = text
        .lines()
        .find(|l| l.contains("package 1") && l.contains("latency read"))
        .unwrap_or_else(|| panic!("no latency row in\n{text}"));
    assert!(row.contains("40.0 DRAM clocks"), "{row}");
}

#[test]
fn gnr_shows_12_channels_a_package_each_with_its_two_sub_channels() {
    let perf = Arc::new(FakePerf::new());
    // Scheduler 1 reads three times what scheduler 0 does.
    perf.set_step(0xcf05, 1000);
    perf.set_step(0xcf06, 3000);
    let (g, mut a) = parse(&fixture("gnr-2socket"), "/dev/mem", 10, 0.03, "auto");
    a.per_channel = true;
    let (r, lines, err) = run_fake(perf.clone(), &RealDevMem, (g.clone(), a.clone()));
    assert_eq!(r, Ok(()), "stderr: {err}");
    assert!(!lines.is_empty());
    for l in &lines {
        for p in l["packages"].as_array().unwrap() {
            let chans = p["channels"].as_array().unwrap();
            assert_eq!(chans.len(), 12, "channels, not schedulers: {p}");
            for c in chans {
                let subs = c["sub_channels"].as_array().expect("sub_channels");
                let ids: Vec<u64> = subs
                    .iter()
                    .map(|s| s["sub_channel"].as_u64().unwrap())
                    .collect();
                assert_eq!(ids, [0, 1]);
                let (s0, s1) = (num(&subs[0]["read_bytes"]), num(&subs[1]["read_bytes"]));
                assert_eq!(s1, 3.0 * s0, "{c}");
                assert_eq!(s0 + s1, num(&c["read_bytes"]), "sub-channels roll up: {c}");
            }
        }
    }
    drop(perf);
    // The table and CSV say the sub-channels under their channel.
    a.json = false;
    let text = run_fake_text(Arc::new(FakePerf::new()), (g.clone(), a.clone()));
    assert_eq!(
        text.lines().filter(|l| l.contains("sub-channel 1")).count() % 24,
        0
    );
    assert!(text.contains("sub-channel 1"), "{text}");
    a.separator = Some(",".into());
    let csv = run_fake_text(Arc::new(FakePerf::new()), (g, a));
    assert!(
        csv.lines()
            .any(|l| l.contains(",sub_channel,1:uncore_imc_11:1,")),
        "{csv}"
    );
}

#[test]
fn queue_latency_off_a_platform_with_queues_is_one_line_exit_2() {
    for (tree, what) in [
        ("vm-guest", "hypervisor"),
        ("tgl-client", "client"),
        ("zen2-1socket", "Zen 1-3"),
    ] {
        let (g, a) = queue_latency_args(tree, false, true);
        let env = StatEnv {
            perf: Arc::new(FakePerf::new()) as Arc<dyn PerfSys>,
            devmem: &RealDevMem,
            clock: &MonotonicClock,
        };
        let e = run_with(&g, &a, &env, &mut Vec::new(), &mut Vec::new()).unwrap_err();
        let message = e.to_string();
        assert_eq!(e.code(), 2, "{tree}: {message}");
        assert_eq!(message.lines().count(), 1, "{message}");
        assert!(message.contains(what), "{tree}: {message}");
        assert!(!message.contains("umask"), "no libpfm4 talk: {message}");
    }
}

#[test]
fn stat_latency_dry_run_shows_the_queue_counters_of_every_channel() {
    for (tree, per_pkg) in [
        ("skx-2socket", 6 * 3),
        ("spr-2socket", 8 * 3),
        ("gnr-2socket", 12 * 5),
        ("zen4-2socket", 4),
    ] {
        let out = run_ok(imc().args([
            "--root",
            &fixture(tree),
            "stat",
            "--latency",
            "--dry-run",
            "--json",
        ]));
        let plan: Value = serde_json::from_slice(&out.stdout).expect("plan JSON");
        let lat: Vec<&Value> = plan["counters"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["role"] == "latency")
            .collect();
        assert_eq!(lat.len(), 2 * per_pkg, "{tree}");
        assert!(
            lat.iter()
                .all(|c| c["encoding"]["config"].is_u64() && c["queue"].is_string())
        );
    }
}

#[test]
fn sampling_only_and_per_task_pmus_are_refused_before_anything_opens() {
    for (tree, event, what) in [
        ("zen3-ibs", "ibs_op/cnt_ctl=1/", "only samples"),
        ("power9-imc-full", "trace_imc/trace_cycles/", "only samples"),
        (
            "power9-imc-full",
            "thread_imc/CPM_CS_INST_USER/",
            "per task",
        ),
    ] {
        let perf = Arc::new(FakePerf::new());
        let (g, mut a) = parse(&fixture(tree), "/dev/mem", 10, 0.02, "auto");
        a.events = vec![event.to_string()];
        let (r, lines, _) = run_fake(perf.clone(), &RealDevMem, (g, a));
        let m = r.unwrap_err();
        assert!(m.contains(event) && m.contains(what), "{m}");
        assert_eq!(m.lines().count(), 1);
        assert!(lines.is_empty());
        assert!(
            perf.opens().is_empty(),
            "{event}: opened {:?}",
            perf.opens()
        );
    }
    // core_imc counts CPU-wide: one counter per core, on the cpumask CPU.
    let perf = Arc::new(FakePerf::new());
    let (g, mut a) = parse(&fixture("power9-imc-full"), "/dev/mem", 10, 0.02, "auto");
    a.events = vec!["core_imc/CPM_CCYC/".to_string()];
    let (r, _, err) = run_fake(perf.clone(), &RealDevMem, (g, a));
    assert_eq!(r, Ok(()), "{err}");
    let mut cpus: Vec<i32> = perf
        .opens()
        .iter()
        .filter(|o| o.attr.type_ == 30)
        .map(|o| o.cpu)
        .collect();
    cpus.sort();
    cpus.dedup();
    assert_eq!(cpus, (0..32).map(|k| 4 * k).collect::<Vec<i32>>());
}

// ---------------------------------------------------------------------------------------------
// A CXL memory expander: the second tier beside DRAM.

/// The cxl-expander tree's CXL device counts 3000 lines read and 500 written an interval, each
/// DRAM channel the fake's 1000 of each: the package shows DDR and CXL apart (JSON `memory`,
/// the table's `0 CXL` row), its totals are both, and its utilisation is DRAM's alone (SMBIOS
/// describes the DIMMs, not the expander: 2 channels of 4800 MT/s × 8 B).
#[test]
fn a_cxl_expander_is_shown_beside_dram_per_package() {
    const CXL_READ: u64 = 0x1e98_0025_0000_0001;
    const CXL_WRITE: u64 = 0x1e98_0021_0000_0002;
    let dir = fixture_with_dmi("cxl-expander", &[(16384, 4800), (16384, 4800)]);
    let root = dir.path().display().to_string();
    let perf = Arc::new(FakePerf::new());
    perf.set_step(CXL_READ, 3000);
    perf.set_step(CXL_WRITE, 500);
    let (r, lines, err) = run_fake(
        perf.clone(),
        &RealDevMem,
        parse(&root, "/dev/mem", 10, 0.03, "auto"),
    );
    assert_eq!(r, Ok(()), "stderr: {err}");
    assert!(!lines.is_empty());
    let peak = 2.0 * 4800e6 * 8.0;
    for l in &lines {
        let p = &l["packages"][0];
        let mem = p["memory"].as_array().expect("memory kinds");
        let kinds: Vec<&str> = mem.iter().map(|m| m["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["DDR", "CXL"], "{p}");
        let (ddr, cxl) = (&mem[0], &mem[1]);
        assert_eq!(num(&ddr["read_bytes"]), 2.0 * 1000.0 * 64.0, "{p}");
        assert_eq!(num(&ddr["write_bytes"]), 2.0 * 1000.0 * 64.0, "{p}");
        assert_eq!(num(&cxl["read_bytes"]), 3000.0 * 64.0, "{p}");
        assert_eq!(num(&cxl["write_bytes"]), 500.0 * 64.0, "{p}");
        assert_eq!(num(&p["read_bytes"]), (2000.0 + 3000.0) * 64.0, "{p}");
        // The device is a channel row of its own, marked CXL.
        let cxl_channel: Vec<&Value> = p["channels"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["memory"] == "CXL")
            .collect();
        assert_eq!(cxl_channel.len(), 1, "{p}");
        assert_eq!(cxl_channel[0]["pmu"], "cxl_pmu_mem0.0");
        assert_eq!(num(&p["peak_bytes_per_s"]), peak);
        let dram_rate = num(&ddr["read_bytes_per_s"]) + num(&ddr["write_bytes_per_s"]);
        let u = num(&p["utilisation"]);
        assert!((u - dram_rate / peak).abs() < 1e-9 * (1.0 + u), "{u} {p}");
        assert!(l["values"]["cxl_read"].is_number(), "{l}");
    }
    // The table: the package row, then its DDR and CXL rows; the utilisation is on DDR's.
    let (g, mut a) = parse(&root, "/dev/mem", 10, 0.03, "auto");
    a.json = false;
    let text = run_fake_text(Arc::new(FakePerf::new()), (g, a));
    let rows: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    let row = |name: &str| {
        rows.iter()
            .find(|r| r.contains(name))
            .unwrap_or_else(|| panic!("no {name} row in:\n{text}"))
    };
    let (ddr_row, cxl_row) = (row("0 DDR"), row("0 CXL"));
    assert!(ddr_row.trim_end().ends_with('%'), "{text}");
    assert!(!cxl_row.trim_end().ends_with('%'), "{text}");
    // No line in the table names an event the package rows already show.
    assert!(!text.contains("cxl_read"), "{text}");
}

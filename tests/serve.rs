//! `imc serve` as a fleet runs it: scraped by a real Prometheus server (Debian's `prometheus`,
//! installed by scripts/setup.sh) on loopback, its stored values checked against imc's own JSON
//! for the same intervals; its output linted by `promtool check metrics`; its series count
//! bounded while thousands of short processes come and go.
use imc_tests::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn have(cmd: &str) -> bool {
    Command::new(cmd)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A child killed (and reaped) on every way out of the test.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        // SIGTERM first so that imc detaches its programs; SIGKILL if it does not end.
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `imc serve` on an ephemeral loopback port, its JSON lines going to `json`.
struct Serve {
    _guard: Guard,
    addr: SocketAddr,
    /// Every line imc wrote to stderr so far.
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

fn start_serve(extra: &[&str], json: &Path) -> Serve {
    let mut cmd = imc();
    cmd.args([
        "serve",
        "-e",
        "page-faults",
        "--freq",
        "250",
        "--listen",
        "127.0.0.1:0",
    ])
    .args(["--json"])
    .args(extra)
    .stdout(std::fs::File::create(json).unwrap());
    spawn_serve(cmd, "http")
}

/// Starts `cmd` (an `imc serve`) and waits for the line naming where it serves `scheme`.
fn spawn_serve(mut cmd: Command, scheme: &str) -> Serve {
    let mut child = cmd.stderr(Stdio::piped()).spawn().expect("spawn imc serve");
    let stderr = child.stderr.take().unwrap();
    let guard = Guard(child);
    // The line naming the bound address; the rest of stderr is drained so imc never blocks.
    let (tx, rx) = mpsc::channel();
    let prefix = format!("imc: serving {scheme}://");
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let lines = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("[imc] {line}");
            lines.lock().unwrap().push(line.clone());
            if let Some(rest) = line.strip_prefix(&prefix) {
                let _ = tx.send(rest.trim_end_matches("/metrics").to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("imc serve did not say where it listens within 30 s");
    Serve {
        _guard: guard,
        addr: addr.parse().expect("a socket address"),
        log,
    }
}

/// A plain HTTP/1.0 GET (the test's own client; imc's server is axum): (status, body).
fn http_get(addr: SocketAddr, path_and_query: &str, accept: &str) -> (u32, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path_and_query} HTTP/1.0\r\nHost: {addr}\r\nAccept: {accept}\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a header and a body");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    (status, body.to_string())
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A Prometheus server on loopback with its storage in a temp dir, scraping `target` every
/// second.
struct Prometheus {
    _guard: Guard,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

fn start_prometheus(target: SocketAddr) -> Prometheus {
    start_prometheus_with(target, "", &[])
}

/// A Prometheus scraping `target` with `job_extra` added to its job (indented by four spaces,
/// e.g. `scheme: https`) and `rule_files` loaded.
fn start_prometheus_with(
    target: SocketAddr,
    job_extra: &str,
    rule_files: &[PathBuf],
) -> Prometheus {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    let rules: String = rule_files
        .iter()
        .map(|f| format!("  - '{}'\n", f.display()))
        .collect();
    let rules = if rules.is_empty() {
        String::new()
    } else {
        format!("rule_files:\n{rules}")
    };
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n{rules}scrape_configs:\n  - job_name: imc\n{job_extra}    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("prometheus.log")).unwrap())
        .spawn()
        .expect("spawn prometheus");
    let guard = Guard(child);
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
            && http_get(addr, "/-/ready", "*/*").0 == 200;
        if ready {
            break;
        }
        assert!(
            Instant::now() < end,
            "prometheus not ready within 60 s: {}",
            std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    Prometheus {
        _guard: guard,
        addr,
        dir,
    }
}

impl Prometheus {
    /// The `data.result` of an instant query.
    fn query(&self, promql: &str) -> Vec<serde_json::Value> {
        let (status, body) = http_get(
            self.addr,
            &format!("/api/v1/query?query={}", percent_encode(promql)),
            "application/json",
        );
        assert_eq!(status, 200, "{promql}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("Prometheus JSON");
        assert_eq!(v["status"], "success", "{promql}: {body}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// What Prometheus says of its scrapes: each target's health and last error, the
    /// scrapes' `up` values, and the series of `pid` (under any name): for failure messages.
    fn scrape_report(&self, pid: u32) -> String {
        let (_, targets) = http_get(self.addr, "/api/v1/targets", "application/json");
        let targets: serde_json::Value = serde_json::from_str(&targets).unwrap_or_default();
        let health: Vec<String> = targets["data"]["activeTargets"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| format!("{} last error {:?}", t["health"], t["lastError"]))
            .collect();
        let up: Vec<f64> = self.samples("up", "5m").into_iter().map(|s| s.1).collect();
        let series: Vec<String> = self
            .query(&format!("{{pid=\"{pid}\"}}"))
            .iter()
            .map(|s| s["metric"].to_string())
            .collect();
        format!(
            "targets: {health:?}; up over the run: {up:?}; series of pid {pid}: {series:?}; log: {}",
            std::fs::read_to_string(self.dir.path().join("prometheus.log"))
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("level=WARN") || l.contains("level=ERROR"))
                .collect::<Vec<_>>()
                .join(" | ")
        )
    }

    /// Raw samples (timestamp in ms, value) of one series over the last `range`.
    fn samples(&self, selector: &str, range: &str) -> Vec<(i64, f64)> {
        let r = self.query(&format!("{selector}[{range}]"));
        assert!(r.len() <= 1, "{selector} matches several series: {r:?}");
        r.first()
            .and_then(|s| s["values"].as_array())
            .into_iter()
            .flatten()
            .map(|p| {
                let t = p[0].as_f64().unwrap();
                let v: f64 = p[1].as_str().unwrap().parse().unwrap();
                ((t * 1000.0).round() as i64, v)
            })
            .collect()
    }
}

/// A single-threaded process faulting fresh pages for `secs` seconds: each round maps 8 MiB,
/// writes a byte a page and unmaps it. (A buffer from the allocator is not enough: glibc
/// raises its mmap threshold after the first large free and serves the next ones from a heap
/// it no longer returns, so such a loop faults only in its first rounds.)
fn page_toucher(secs: u32) -> Guard {
    let script = format!(
        "import mmap, time\nend = time.time() + {secs}\nwhile time.time() < end:\n    m = mmap.mmap(-1, 8 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\n    for i in range(0, 8 << 20, 4096):\n        m[i] = 1\n    m.close()\n    time.sleep(0.01)\n"
    );
    Guard(
        Command::new("python3")
            .args(["-c", &script])
            .spawn()
            .expect("spawn python3"),
    )
}

/// What imc's JSON lines say so far of `pid` and of the run: for failure messages.
fn json_report(path: &Path, pid: u32) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let ivs: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let rows = |iv: &serde_json::Value| iv["tasks"].as_array().cloned().unwrap_or_default();
    let of_pid: Vec<String> = ivs
        .iter()
        .flat_map(rows)
        .filter(|t| t["tgid"].as_u64() == Some(u64::from(pid)))
        .map(|t| t.to_string())
        .collect();
    let last: Vec<String> = ivs
        .last()
        .map(rows)
        .unwrap_or_default()
        .iter()
        .map(|t| format!("{}:{}", t["tgid"], t["comm"]))
        .collect();
    format!(
        "{} intervals; rows of pid {pid}: {of_pid:?}; tasks of the last: {last:?}",
        ivs.len()
    )
}

fn read_intervals(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

/// Page faults attributed in one interval to the tasks `pick` selects.
fn faults_of(iv: &serde_json::Value, pick: impl Fn(&serde_json::Value) -> bool) -> f64 {
    iv["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| pick(t))
        .map(|t| t["values"]["page-faults"].as_f64().unwrap_or(0.0))
        .sum()
}

fn prerequisites() -> bool {
    sampler_prerequisites()
        && require(
            have("prometheus") && have("promtool"),
            "prometheus/promtool not installed: scripts/setup.sh installs Debian's prometheus",
        )
        && require(have("python3"), "python3 runs the page-touching workload")
}

fn scratch(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    (dir, p)
}

#[test]
fn prometheus_stores_what_imc_reported_for_the_same_intervals() {
    if !prerequisites() {
        return;
    }
    let (_dir, json) = scratch("intervals.jsonl");
    let serve = start_serve(&["-I", "500"], &json);
    let prom = start_prometheus(serve.addr);
    // The workload outlives the wait below; it is stopped once Prometheus has what it needs.
    let workload = page_toucher(90);
    let pid = workload.0.id();

    // Wait (bounded) until Prometheus has scraped the workload's series several times.
    // Before its exec the child had the test's name; the series of its pid moved to python3.
    let selector = format!(
        "imc_process_dram_events_total{{pid=\"{pid}\",comm=\"python3\",event=\"page-faults\"}}"
    );
    let end = Instant::now() + Duration::from_secs(60);
    while prom.samples(&selector, "5m").len() < 5 {
        assert!(
            Instant::now() < end,
            "Prometheus never stored 5 samples of {selector}; {}; imc's JSON: {}",
            prom.scrape_report(pid),
            json_report(&json, pid)
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // promtool lints what a plain scraper gets; Prometheus itself was given OpenMetrics.
    let (status, classic) = http_get(serve.addr, "/metrics", "*/*");
    assert_eq!(status, 200);
    let mut lint = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    lint.stdin
        .take()
        .unwrap()
        .write_all(classic.as_bytes())
        .unwrap();
    let lint = lint.wait_with_output().unwrap();
    assert!(
        lint.status.success(),
        "promtool check metrics: {}{}\n{classic}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );
    let (_, om) = http_get(
        serve.addr,
        "/metrics",
        "application/openmetrics-text;version=1.0.0",
    );
    assert!(om.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");

    drop(workload);
    let intervals_seen = prom.samples("imc_intervals_total", "5m");
    let process = prom.samples(&selector, "5m");
    let cgroup_of_workload = prom.query(&selector)[0]["metric"]["cgroup"]
        .as_str()
        .unwrap()
        .to_string();
    let cgroup = prom.samples(
        &format!(
            "imc_cgroup_dram_events_total{{cgroup=\"{cgroup_of_workload}\",event=\"page-faults\"}}"
        ),
        "5m",
    );
    // Stand-in source: no byte series at all, and imc_info says what was counted.
    assert!(
        prom.query(r#"{__name__=~"imc_.*_bytes_total"}"#).is_empty(),
        "a page-fault source exported bytes"
    );
    let info = prom.query("imc_info");
    assert_eq!(info.len(), 1);
    assert_eq!(info[0]["metric"]["source"], "events:page-faults");
    // Per-CPU counts need no dividing: each goes to the task that ran.
    assert_eq!(info[0]["metric"]["weighting"], "traffic");
    drop(serve);

    // imc's own JSON of the same run: interval k is what imc_intervals_total = k included.
    let ivs = read_intervals(&json);
    let prefix = |pick: &dyn Fn(&serde_json::Value) -> bool| -> Vec<f64> {
        let mut acc = 0.0;
        let mut v = vec![0.0];
        for iv in &ivs {
            acc += faults_of(iv, pick);
            v.push(acc);
        }
        v
    };
    let by_pid = prefix(&|t| t["tgid"].as_u64() == Some(u64::from(pid)));
    // Where imc resolved the workload's cgroup (its JSON rows carry the path), the series is
    // labelled by that path, not by the number.
    let workload_path = ivs
        .iter()
        .flat_map(|iv| iv["tasks"].as_array().into_iter().flatten())
        .filter(|t| t["tgid"].as_u64() == Some(u64::from(pid)))
        .find_map(|t| t["cgroup_path"].as_str());
    if let Some(p) = workload_path {
        assert_eq!(cgroup_of_workload, p, "the cgroup label is the path");
    }
    // The cgroup label is the resolved path (the id where a cgroup did not resolve).
    let by_cgroup = prefix(&|t| {
        t["cgroup"].as_u64().map(|c| c.to_string()).as_deref() == Some(&cgroup_of_workload)
            || t["cgroup_path"].as_str() == Some(&cgroup_of_workload)
    });
    let (mut checked, mut checked_cgroup) = (0, 0);
    for (t, k) in &intervals_seen {
        let k = *k as usize;
        assert!(
            k < by_pid.len(),
            "Prometheus saw interval {k}, imc wrote {}",
            ivs.len()
        );
        if let Some((_, v)) = process.iter().find(|(tp, _)| tp == t) {
            assert_eq!(*v, by_pid[k], "process series at scrape {t} (interval {k})");
            checked += 1;
        }
        if let Some((_, v)) = cgroup.iter().find(|(tp, _)| tp == t) {
            assert_eq!(
                *v, by_cgroup[k],
                "cgroup series at scrape {t} (interval {k})"
            );
            checked_cgroup += 1;
        }
    }
    assert!(checked >= 5, "only {checked} scrapes compared");
    assert!(
        checked_cgroup >= 5,
        "only {checked_cgroup} scrapes of the cgroup"
    );
    let last = process.last().unwrap().1;
    assert!(last > 1000.0, "the workload faulted {last} pages");
    eprintln!(
        "compared {checked} scrapes ({checked_cgroup} of cgroup {cgroup_of_workload}); workload {pid}: {last} page faults over {} intervals",
        ivs.len()
    );
}

#[test]
fn series_stay_bounded_while_thousands_of_processes_come_and_go() {
    if !prerequisites() {
        return;
    }
    const SPAWNS: usize = 2000;
    const MAX: usize = 5;
    let (_dir, json) = scratch("churn.jsonl");
    let serve = start_serve(&["-I", "200", "--max-processes", "5"], &json);
    let count_series = |text: &str| {
        text.lines()
            .filter(|l| l.starts_with("imc_process_dram_events_total{"))
            .count()
    };
    let mut most = 0;
    let mut fetches = 0;
    let end = Instant::now() + Duration::from_secs(240);
    for i in 0..SPAWNS {
        let st = Command::new("true").status().expect("run true");
        assert!(st.success());
        if i % 100 == 0 {
            let (_, text) = http_get(serve.addr, "/metrics", "*/*");
            most = most.max(count_series(&text));
            fetches += 1;
        }
        assert!(Instant::now() < end, "spawning took over 240 s");
    }
    std::thread::sleep(Duration::from_millis(600));
    let (_, text) = http_get(serve.addr, "/metrics", "*/*");
    most = most.max(count_series(&text));
    let series_total = text.lines().filter(|l| !l.starts_with('#')).count();
    drop(serve);

    // The churn really went through the exporter: far more processes had traffic than the
    // bound lets through. (A process shorter than a tick period gets a tick only by chance,
    // so not all of them are seen.)
    let seen: std::collections::HashSet<u64> = read_intervals(&json)
        .iter()
        .flat_map(|iv| iv["tasks"].as_array().cloned().unwrap_or_default())
        .filter(|t| t["comm"] == "true")
        .filter_map(|t| t["tgid"].as_u64())
        .collect();
    eprintln!(
        "{} of {SPAWNS} short processes attributed; at most {most} process series in {fetches} scrapes; {series_total} series in all at the end",
        seen.len()
    );
    assert!(
        seen.len() >= 20 * MAX,
        "only {} short processes seen",
        seen.len()
    );
    assert!(
        most <= MAX,
        "{most} process series exported with --max-processes {MAX}"
    );
    assert!(most > 0, "no process series at all");
    assert!(series_total < 200, "{series_total} series after the churn");
}

/// `imc serve --dry-run` on a fixture tree: no privileges, no socket, the labels it would use.
fn dry_run(fixture: &str, extra: &[&str]) -> String {
    // A port held busy: a dry run must not try to listen.
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = busy.local_addr().unwrap().to_string();
    let root = own_fixtures().join(fixture);
    let out = run_ok(
        imc()
            .arg("--root")
            .arg(&root)
            .args(["serve", "--dry-run", "--listen", &listen])
            .args(extra),
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn memory_controller_counters_are_exported_in_bytes_per_channel() {
    let text = dry_run("zen4-2socket", &[]);
    assert!(text.contains("backend=amd-umc source=amd-umc"), "{text}");
    // The memory controller's slots; the weights beside them are not exported.
    let slots: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("slot ") && !l.contains("not a traffic counter"))
        .collect();
    assert!(!slots.is_empty(), "{text}");
    for l in &slots {
        assert!(l.ends_with("-> imc_dram_bytes_total"), "{l}");
        assert!(l.contains("(channel amd_umc_"), "{l}");
    }
    assert!(!text.contains("_events_total"), "{text}");
}

#[test]
fn one_event_over_several_pmus_is_one_channel_each() {
    let text = dry_run("spr-2socket", &["-e", "uncore_imc/cas_count_read/"]);
    assert!(text.contains("backend=intel-uncore-imc"), "{text}");
    let channels: std::collections::BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.split("(channel ").nth(1))
        .filter_map(|l| l.split(',').next())
        .collect();
    assert_eq!(channels.len(), 8, "{text}");
    assert!(channels.contains("uncore_imc_7"), "{text}");
}

#[test]
fn a_stand_in_is_exported_as_events_with_its_name() {
    let text = dry_run("zen4-2socket", &["-e", "page-faults"]);
    assert!(text.contains("backend=software"), "{text}");
    assert!(
        text.contains(
            "(channel software, total, counts) -> imc_dram_events_total{event=\"page-faults\"}"
        ),
        "{text}"
    );
    assert!(!text.contains("bytes_total"), "{text}");
}

/// A self-signed certificate for 127.0.0.1 and its key (P-256), made by openssl in `dir`.
fn self_signed(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (cert, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    run_ok(
        Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
            .args(["-subj", "/CN=imc test", "-addext"])
            .args(["subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert),
    );
    (cert, key)
}

fn tls_tools() -> bool {
    require(
        Command::new("openssl")
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "openssl makes the test's certificates: scripts/setup.sh installs it",
    ) && require(
        have("curl"),
        "curl is the TLS client: scripts/setup.sh installs it",
    )
}

/// `curl` the URL with `args`: the HTTP status (0: no HTTP answer) and the body.
fn curl(url: &str, args: &[&str]) -> (u32, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "10", "-w", "\n%{http_code}"])
        .args(args)
        .arg(url)
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

#[test]
fn tls_with_basic_auth_answers_only_the_right_password_and_prometheus_scrapes_it() {
    if !prerequisites() || !tls_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, _) = self_signed(dir.path(), "server");
    let hash = bcrypt::hash("s3cret pass", 6).unwrap();
    // Relative paths: the certificate and key beside the config.
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n  prometheus: '{hash}'\n"
        ),
    )
    .unwrap();
    let mut cmd = imc();
    cmd.args([
        "serve",
        "-e",
        "page-faults",
        "-I",
        "500",
        "--listen",
        "127.0.0.1:0",
    ])
    .arg("--web.config.file")
    .arg(&web);
    let serve = spawn_serve(cmd, "https");
    let url = format!("https://{}/metrics", serve.addr);
    let ca = cert.to_str().unwrap();

    let (code, body) = curl(&url, &["--cacert", ca, "-u", "prometheus:s3cret pass"]);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("imc_info{"), "{body}");
    assert_eq!(curl(&url, &["--cacert", ca]).0, 401, "no password");
    assert_eq!(
        curl(&url, &["--cacert", ca, "-u", "prometheus:wrong"]).0,
        401,
        "wrong password"
    );
    assert_eq!(
        curl(&url, &["--cacert", ca, "-u", "nobody:s3cret pass"]).0,
        401,
        "unknown user"
    );
    // Plain HTTP to the TLS port: refused with a 400 that says why.
    let (code, body) = curl(&format!("http://{}/metrics", serve.addr), &[]);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("HTTPS"), "{body}");
    // A client that does not trust the certificate gets no answer.
    assert_eq!(curl(&url, &["-u", "prometheus:s3cret pass"]).0, 0);

    // A real Prometheus over TLS with basic auth.
    let job = format!(
        "    scheme: https\n    tls_config:\n      ca_file: '{ca}'\n    basic_auth:\n      username: prometheus\n      password: 's3cret pass'\n"
    );
    let prom = start_prometheus_with(serve.addr, &job, &[]);
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let up = prom.query("up");
        if up.len() == 1 && up[0]["value"][1] == "1" {
            break;
        }
        assert!(Instant::now() < end, "up never became 1 over TLS: {up:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(prom.query("imc_info").len(), 1);
}

/// `imc serve --web.config.file` with `text` (written to web.yml in `dir`): exit 2, one line
/// naming the problem, nothing served.
fn refused(dir: &Path, text: &str, expect: &str) {
    let web = dir.join("web.yml");
    std::fs::write(&web, text).unwrap();
    refused_file(&web, expect);
}

fn refused_file(web: &Path, expect: &str) {
    let out = imc()
        .args(["serve", "-e", "page-faults", "--listen", "127.0.0.1:0"])
        .arg("--web.config.file")
        .arg(web)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains(expect), "expected '{expect}' in: {err}");
    assert!(!err.contains("serving"), "{err}");
}

#[test]
fn a_bad_web_config_is_one_line_and_exit_2_before_listening() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    refused(
        d,
        "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  ciphers: [x]\n",
        "ciphers",
    );
    refused(
        d,
        "basic_auth_users:\n  prometheus: hunter2\n",
        "not a bcrypt hash",
    );
    refused(
        d,
        "tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n",
        "missing.crt",
    );
    refused_file(&d.join("no-such-web.yml"), "no-such-web.yml");
    refused_file(d, "is a directory");
    if !tls_tools() {
        return;
    }
    // A key that is not the certificate's.
    self_signed(d, "one");
    self_signed(d, "two");
    refused(
        d,
        "tls_server_config:\n  cert_file: one.crt\n  key_file: two.key\n",
        "is not the private key of cert_file",
    );
    // A certificate file that holds no certificate.
    refused(
        d,
        "tls_server_config:\n  cert_file: two.key\n  key_file: two.key\n",
        "cert_file",
    );
    // Client certificates need a CA to verify them with.
    refused(
        d,
        "tls_server_config:\n  cert_file: one.crt\n  key_file: one.key\n  client_auth_type: RequireAndVerifyClientCert\n",
        "client_ca_file",
    );
}

/// An idle connection to `addr`, held open.
fn idle(addr: SocketAddr) -> Option<TcpStream> {
    TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()
}

#[test]
fn idle_connections_at_the_file_limit_do_not_keep_the_scraper_out() {
    // With the file limit at 1024 (systemd's default), 1,100 idle connections must not make
    // every scrape time out until they close.
    if !prerequisites() {
        return;
    }
    const HELD: usize = 1100;
    // This test holds the connections itself: its own soft limit up to the hard one.
    let (_, hard) = imc::sys::rlimit::nofile().unwrap();
    assert!(
        imc::sys::rlimit::raise_nofile().unwrap() > HELD as u64 + 100,
        "the hard file limit ({hard}) is too low for this test"
    );
    let (_dir, json) = scratch("held.jsonl");
    let mut cmd = imc();
    cmd.args(["serve", "-e", "page-faults", "--listen", "127.0.0.1:0"])
        .stdout(std::fs::File::create(&json).unwrap());
    // SAFETY: setrlimit is async-signal-safe; the closure touches nothing else.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            let r = libc::rlimit {
                rlim_cur: 1024,
                rlim_max: 1024,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let serve = spawn_serve(cmd, "http");
    let start = Instant::now();
    let held: Vec<TcpStream> = (0..HELD).filter_map(|_| idle(serve.addr)).collect();
    eprintln!(
        "{} of {HELD} idle connections opened in {:?}",
        held.len(),
        start.elapsed()
    );
    assert!(held.len() >= 1024, "only {} connections opened", held.len());
    // The scraper gets its answer while they are held.
    let t = Instant::now();
    let (status, body) = http_get(serve.addr, "/metrics", "*/*");
    let took = t.elapsed();
    eprintln!("scrape answered in {took:?} with {} held", held.len());
    assert_eq!(status, 200);
    assert!(body.contains("imc_info"), "{body}");
    assert!(took < Duration::from_secs(2), "scrape took {took:?}");

    // The idle ones are closed by the server: the oldest were made room for at once, the
    // others within the header timeout (5 s).
    let mut closed = 0;
    for mut s in held {
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let mut b = [0u8; 64];
        match s.read(&mut b) {
            Ok(0) => closed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => closed += 1,
            other => panic!("an idle connection was not closed: {other:?}"),
        }
    }
    eprintln!("{closed} idle connections closed by imc");
}

#[test]
fn idle_and_kept_alive_connections_are_closed_after_the_header_timeout() {
    if !prerequisites() {
        return;
    }
    let (_dir, json) = scratch("keepalive.jsonl");
    let serve = start_serve(&[], &json);
    // A client that sends half a request line and then nothing.
    let mut dripping = TcpStream::connect(serve.addr).unwrap();
    dripping.write_all(b"GET /metr").unwrap();
    // A kept-alive connection after one answered request.
    let mut kept = TcpStream::connect(serve.addr).unwrap();
    write!(
        kept,
        "GET / HTTP/1.1\r\nHost: {}\r\nConnection: keep-alive\r\n\r\n",
        serve.addr
    )
    .unwrap();
    let start = Instant::now();
    for (name, s) in [("dripping", &mut dripping), ("kept-alive", &mut kept)] {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut all = Vec::new();
        let r = s.read_to_end(&mut all);
        let took = start.elapsed();
        eprintln!("{name}: closed after {took:?}: {r:?}");
        assert!(
            r.is_ok()
                || r.as_ref()
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "{name}: not closed within 20 s: {r:?}"
        );
        if name == "kept-alive" {
            assert!(String::from_utf8_lossy(&all).starts_with("HTTP/1.1 200"));
        }
    }
}

#[test]
fn serve_as_nobody_fails_without_saying_it_serves() {
    // Serve never prints "serving http://…" and then fails to load the sampler.
    let Some(mut cmd) = as_nobody(&["serve", "-e", "page-faults", "--listen", "127.0.0.1:0"])
    else {
        return;
    };
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("serving"), "{err}");
    assert!(err.contains("CAP_BPF"), "{err}");
}

#[test]
fn loopback_written_as_mapped_ipv6_gets_no_warning() {
    // [::ffff:127.0.0.1] is loopback, not warned about as a public address. Run as
    // nobody, serve stops after the warning (or its absence), at the sampler.
    for (listen, warned) in [("[::ffff:127.0.0.1]:0", false), ("0.0.0.0:0", true)] {
        let Some(mut cmd) = as_nobody(&["serve", "-e", "page-faults", "--listen", listen]) else {
            return;
        };
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.contains("warning"), warned, "{listen}: {err}");
    }
}

fn packaging() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/prometheus")
}

/// Every PromQL expression of packaging/prometheus: the rules' and the dashboard's (its
/// Grafana variables given values).
fn shipped_expressions() -> Vec<String> {
    let rules = std::fs::read_to_string(packaging().join("imc.rules.yml")).unwrap();
    let docs = yaml_rust2::YamlLoader::load_from_str(&rules).expect("rules are YAML");
    let mut exprs: Vec<String> = docs[0]["groups"]
        .as_vec()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_vec().unwrap())
        .map(|r| r["expr"].as_str().unwrap().to_string())
        .collect();
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(packaging().join("imc-dashboard.json")).unwrap(),
    )
    .unwrap();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            exprs.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    // A variable's `label_values(METRIC, LABEL)` reads METRIC.
    for v in dash["templating"]["list"].as_array().unwrap() {
        if let Some(q) = v["query"]["query"].as_str() {
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|r| r.split(',').next())
                .expect("label_values(METRIC, LABEL)");
            exprs.push(inner.trim().to_string());
        }
    }
    exprs
        .into_iter()
        .map(|e| {
            e.replace("$__rate_interval", "1m")
                .replace("$instance", ".*")
        })
        .collect()
}

#[test]
fn every_shipped_rule_and_panel_runs_on_a_real_prometheus_scraping_imc() {
    if !prerequisites() {
        return;
    }
    let exprs = shipped_expressions();
    assert!(exprs.len() >= 20, "{} expressions", exprs.len());
    let (_dir, json) = scratch("rules.jsonl");
    let serve = start_serve(&["-I", "500"], &json);
    let prom = start_prometheus_with(serve.addr, "", &[packaging().join("imc.rules.yml")]);
    let _workload = page_toucher(8);
    // A few scrapes, so that rates have two points.
    let end = Instant::now() + Duration::from_secs(60);
    while prom.samples("imc_intervals_total", "5m").len() < 4 {
        assert!(Instant::now() < end, "Prometheus never scraped imc 4 times");
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut answered = 0;
    for e in &exprs {
        // query() asserts HTTP 200 and status success: the expression parsed and ran.
        let r = prom.query(e);
        answered += usize::from(!r.is_empty());
    }
    // The rules as Prometheus evaluates them: every one healthy.
    std::thread::sleep(Duration::from_secs(2));
    let (status, body) = http_get(prom.addr, "/api/v1/rules", "application/json");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let rules: Vec<&serde_json::Value> = v["data"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect();
    assert_eq!(rules.len(), 16, "{body}");
    for r in &rules {
        assert_eq!(r["health"], "ok", "{r}");
    }
    eprintln!(
        "{} expressions ran, {answered} with a result (a VM has no byte families); {} rules healthy",
        exprs.len(),
        rules.len()
    );
    // In this run (a stand-in source) the stand-in panel has data.
    assert!(answered >= 5, "only {answered} expressions returned data");
}

#[test]
fn the_smbios_peak_is_exported_per_package_where_known() {
    // skx-2socket with twelve DIMMs at 2666 MT/s: 6 channels a package of 2666e6 x 8 bytes.
    let dir = tempfile::tempdir().unwrap();
    let st = Command::new("cp")
        .arg("-a")
        .arg(format!(
            "{}/.",
            own_fixtures().join("skx-2socket").display()
        ))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(st.success());
    for i in 0..12u16 {
        let d = dir.path().join(format!("sys/firmware/dmi/entries/17-{i}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("raw"), memory_device(0x1100 + i, 16384, 2666)).unwrap();
    }
    let out = run_ok(
        imc()
            .arg("--root")
            .arg(dir.path())
            .args(["serve", "--dry-run"]),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for p in 0..2 {
        let want = format!(
            "imc_dram_peak_bytes_per_second{{package=\"{p}\"}} {}",
            6.0 * 2666e6 * 8.0
        );
        assert!(text.contains(&want), "{want} not in:\n{text}");
    }
    // Without SMBIOS entries, or with a stand-in source, none.
    assert!(!dry_run("skx-2socket", &[]).contains("peak"));
    let text = String::from_utf8_lossy(
        &imc()
            .arg("--root")
            .arg(dir.path())
            .args(["serve", "--dry-run", "-e", "page-faults"])
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned();
    assert!(!text.contains("peak"), "{text}");
}

/// `GET path` over a new connection: the status, None when the connection is refused, reset
/// or closed without an answer.
fn try_get(addr: SocketAddr, path: &str, auth: Option<&str>) -> Option<u32> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let auth = auth.map_or(String::new(), |a| {
        format!("Authorization: Basic {}\r\n", base64(a.as_bytes()))
    });
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n").ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    String::from_utf8_lossy(&raw)
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// RFC 4648 base64 with padding (the test's own, for `Authorization: Basic`).
fn base64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A connection whose receive buffer is as small as the kernel allows, so that answers it never
/// reads fill it after a few (as 600 such clients filled every slot in the probe).
fn small_window(addr: SocketAddr) -> TcpStream {
    use std::os::fd::FromRawFd;
    let SocketAddr::V4(v4) = addr else {
        panic!("{addr}: IPv4 only")
    };
    // SAFETY: plain socket calls on a descriptor this function owns until it is handed to
    // TcpStream.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let size: libc::c_int = 2048;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: v4.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*v4.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        let r = libc::connect(
            fd,
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(r, 0, "connect: {}", std::io::Error::last_os_error());
        TcpStream::from_raw_fd(fd)
    }
}

/// `n` pipelined `GET /metrics` on a connection that will not read them.
fn pipeline_metrics(addr: SocketAddr, n: usize) -> TcpStream {
    let mut s = small_window(addr);
    let one = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(one.repeat(n).as_bytes());
    s
}

/// Answers read from a connection until it ends (the server closed it, or it answered all and
/// closed it as idle).
fn answers_until_closed(mut s: TcpStream) -> usize {
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    String::from_utf8_lossy(&raw)
        .matches("HTTP/1.1 200")
        .count()
}

#[test]
fn the_tests_base64_is_rfc_4648() {
    assert_eq!(
        base64(b"prometheus:s3cret:x"),
        "cHJvbWV0aGV1czpzM2NyZXQ6eA=="
    );
    assert_eq!(base64(b"ab"), "YWI=");
    assert_eq!(base64(b"abc"), "YWJj");
}

#[test]
fn clients_that_pipeline_and_never_read_do_not_keep_the_scraper_out() {
    // Clients that pipeline GET /metrics and never read must not hold every slot, nor one for
    // 300 s and more (600 such clients against 512 slots in life). Here 8 slots and 10 such
    // clients.
    if !prerequisites() {
        return;
    }
    let (_dir, json) = scratch("pipelined.jsonl");
    let serve = start_serve(&["--web.max-connections", "8"], &json);
    let held: Vec<TcpStream> = (0..10).map(|_| pipeline_metrics(serve.addr, 300)).collect();
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        try_get(serve.addr, "/metrics", None),
        Some(200),
        "a scrape while every slot is held by clients that do not read"
    );
    // And without the scrape to make room: a client that does not read is closed once its
    // answers have waited on it, before all its pipelined requests are answered.
    // (More requests than the socket buffers hold answers to.)
    const MANY: usize = 4000;
    let lone = pipeline_metrics(serve.addr, MANY);
    drop(held);
    std::thread::sleep(Duration::from_secs(20));
    let answered = answers_until_closed(lone);
    eprintln!("a client that did not read got {answered} of {MANY} answers before it was closed");
    assert!(answered < MANY, "all {answered} answered: never closed");
}

/// A client that sends `GET /` every `every` on one kept-alive connection until `stop`, and
/// says how many it was answered.
fn keep_alive_client(
    addr: SocketAddr,
    every: Duration,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
            return 0;
        };
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut answered = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if write!(s, "GET / HTTP/1.1\r\nHost: {addr}\r\n\r\n").is_err() {
                break;
            }
            let mut b = [0u8; 4096];
            match s.read(&mut b) {
                Ok(n) if n > 0 => answered += 1,
                _ => break,
            }
            std::thread::sleep(every);
        }
        answered
    })
}

#[test]
fn keep_alive_clients_make_way_for_a_scrape_and_a_scraper_outlives_them() {
    // Keep-alive clients sending a cheap GET every 3 s (600 of them in life) must not hold every
    // slot.
    if !prerequisites() {
        return;
    }
    let (_dir, json) = scratch("keepalive-flood.jsonl");
    let serve = start_serve(&["--web.max-connections", "8"], &json);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients: Vec<_> = (0..8)
        .map(|_| keep_alive_client(serve.addr, Duration::from_millis(500), stop.clone()))
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    // A scraper on a kept-alive connection of its own gets in…
    let mut scraper = TcpStream::connect(serve.addr).unwrap();
    scraper
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let scrape = |s: &mut TcpStream| -> bool {
        let sent = write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").is_ok();
        let mut b = [0u8; 64];
        sent && s.read(&mut b).is_ok_and(|n| n > 0) && b.starts_with(b"HTTP/1.1 200")
    };
    assert!(scrape(&mut scraper), "the first scrape");
    // …and once answered, more keep-alive clients arriving close others, not it.
    clients.extend(
        (0..8).map(|_| keep_alive_client(serve.addr, Duration::from_millis(500), stop.clone())),
    );
    std::thread::sleep(Duration::from_secs(2));
    // Drain what the first scrape left unread, then scrape again on the same connection.
    scraper
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut sink = [0u8; 65536];
    while scraper.read(&mut sink).is_ok_and(|n| n > 0) {}
    scraper
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert!(scrape(&mut scraper), "the scraper's connection was closed");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let answered: Vec<usize> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    eprintln!("keep-alive clients answered: {answered:?}");
}

#[test]
fn a_wrong_password_flood_is_held_per_address_and_a_known_scraper_passes() {
    // bcrypt must not run for every request, two at a time in arrival order: 200 clients with
    // wrong passwords must not make a real scrape take 34 s.
    if !prerequisites() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("right", 6).unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prom: '{hash}'\n")).unwrap();
    let (_d, json) = scratch("flood.jsonl");
    let serve = start_serve(&["--web.config.file", web.to_str().unwrap()], &json);
    // The scraper has been scraping before the flood.
    assert_eq!(
        try_get(serve.addr, "/metrics", Some("prom:right")),
        Some(200)
    );
    let addr = serve.addr;
    let flood: Vec<_> = (0..16)
        .map(|i| {
            std::thread::spawn(move || {
                (0..4)
                    .map(|_| try_get(addr, "/metrics", Some(&format!("prom:wrong{i}"))))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let during = try_get(serve.addr, "/metrics", Some("prom:right"));
    let codes: Vec<Option<u32>> = flood.into_iter().flat_map(|t| t.join().unwrap()).collect();
    let count = |c: u32| codes.iter().filter(|&&x| x == Some(c)).count();
    eprintln!(
        "flood of 64: {} answered 401, {} 429",
        count(401),
        count(429)
    );
    assert_eq!(during, Some(200), "the scraper during the flood");
    assert_eq!(count(401) + count(429), codes.len(), "{codes:?}");
    // One address: a few bcrypt checks, the rest held without one.
    assert!(count(429) > count(401), "{codes:?}");
    // An unknown user and no credentials: still 401 (or held).
    assert!(matches!(
        try_get(serve.addr, "/metrics", Some("nobody:right")),
        Some(401 | 429)
    ));
    assert_eq!(try_get(serve.addr, "/metrics", None), Some(401));
}

#[test]
fn a_scraper_new_to_imc_passes_a_flood_of_one_wrong_password_from_its_own_address() {
    // A flood of one wrong password from the scraper's own address (localhost here; one host
    // or a NAT in life) must not spend that address's budget, or a scraper whose credentials
    // imc has not verified yet (its first scrape, or any after a restart) is answered 429 for
    // as long as the flood lasts (0 of 40 scrapes in 20 s under 200 clients). Failed
    // credentials are remembered as exporter-toolkit does, and cost no budget again.
    if !prerequisites() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("right", 6).unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prom: '{hash}'\n")).unwrap();
    let (_d, json) = scratch("flood_first.jsonl");
    let serve = start_serve(&["--web.config.file", web.to_str().unwrap()], &json);
    let addr = serve.addr;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood: Vec<_> = (0..16)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut codes = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    codes.push(try_get(addr, "/metrics", Some("prom:wrong")));
                }
                codes
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    // Prometheus scrapes once an interval and keeps what failed as failed: three tries.
    let tries: Vec<Option<u32>> = (0..3)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(300));
            try_get(addr, "/metrics", Some("prom:right"))
        })
        .collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let codes: Vec<Option<u32>> = flood.into_iter().flat_map(|t| t.join().unwrap()).collect();
    let wrong_401 = codes.iter().filter(|&&c| c == Some(401)).count();
    eprintln!(
        "flood: {} requests, {wrong_401} answered 401; the scraper's tries {tries:?}",
        codes.len()
    );
    assert!(
        tries.contains(&Some(200)),
        "the scraper new to imc: {tries:?}"
    );
    assert!(
        codes.iter().all(|c| matches!(c, Some(401 | 429))),
        "the flood is never let in"
    );
}

/// `imc serve --dry-run --web.config.file` with `text` in web.yml: (exit code, stdout, stderr).
fn dry_run_with_web(dir: &Path, text: &[u8]) -> (Option<i32>, String, String) {
    let web = dir.join("web.yml");
    std::fs::write(&web, text).unwrap();
    let out = imc()
        .args([
            "serve",
            "--dry-run",
            "-e",
            "page-faults",
            "--web.config.file",
        ])
        .arg(&web)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn hostile_web_configs_are_refused_in_one_line_or_read_as_meant() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Anchors and aliases are refused: 254 bytes of nested aliases would take 1.1 GB.
    let mut laughs = String::from(
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    for (p, n) in ["a", "b", "c", "d", "e", "f", "g", "h"]
        .iter()
        .zip(["b", "c", "d", "e", "f", "g", "h", "i"])
    {
        laughs.push_str(&format!(
            "{n}: &{n} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n"
        ));
    }
    refused(d, &laughs, "anchors and aliases");
    // A bcrypt cost of 99 is refused at load, not a silent 401 for every request.
    let h = bcrypt::hash("x", 4).unwrap().replacen("$04$", "$99$", 1);
    refused(
        d,
        &format!("basic_auth_users:\n  scraper: '{h}'\n"),
        "'scraper'",
    );
    // A byte-order mark (Windows editors) before the first key.
    let h = bcrypt::hash("x", 4).unwrap();
    let (code, out, err) = dry_run_with_web(
        d,
        format!("\u{feff}basic_auth_users:\n  prom: '{h}'\n").as_bytes(),
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("basic auth: prom\n"), "{out}");
    // User names with ESC and BEL are printed escaped, never raw.
    let (code, out, err) = dry_run_with_web(
        d,
        format!("basic_auth_users:\n  \"a\\e[31mb\\a\": '{h}'\n").as_bytes(),
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(!out.contains('\x1b') && !out.contains('\x07'), "{out:?}");
    assert!(out.contains("a\\x1b[31mb\\x07"), "{out}");
}

#[test]
fn an_x509_v1_certificate_is_named_as_such() {
    // Named as an X.509 v1 certificate, not as "key_file is not the private key of cert_file".
    if !tls_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(d)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-subj",
        "/CN=v1",
        "-keyout",
        "v1.key",
        "-out",
        "v1.csr",
    ]);
    // `x509 -req` without extensions signs a version 1 certificate.
    run(&[
        "x509", "-req", "-in", "v1.csr", "-signkey", "v1.key", "-days", "2", "-out", "v1.crt",
    ]);
    refused(
        d,
        "tls_server_config:\n  cert_file: v1.crt\n  key_file: v1.key\n",
        "X.509 v1 certificate",
    );
}

#[test]
fn a_rotated_certificate_is_picked_up_and_a_bad_new_config_keeps_the_old() {
    // The web config's files are read again, as exporter-toolkit reads them, not once.
    if !prerequisites() || !tls_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (old_cert, _) = self_signed(d, "old");
    let (new_cert, new_key) = self_signed(d, "new");
    // The served pair starts as the old one.
    std::fs::copy(&old_cert, d.join("server.crt")).unwrap();
    std::fs::copy(d.join("old.key"), d.join("server.key")).unwrap();
    let web = d.join("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
    )
    .unwrap();
    let mut cmd = imc();
    cmd.args(["serve", "-e", "page-faults", "--listen", "127.0.0.1:0"])
        .arg("--web.config.file")
        .arg(&web);
    let serve = spawn_serve(cmd, "https");
    let url = format!("https://{}/metrics", serve.addr);
    let trusts = |ca: &Path| curl(&url, &["--cacert", ca.to_str().unwrap()]).0 == 200;
    assert!(trusts(&old_cert));
    assert!(!trusts(&new_cert));
    // Rotated as cert-manager and certbot do: new files renamed into place.
    for (from, to) in [(&new_key, "server.key"), (&new_cert, "server.crt")] {
        std::fs::copy(from, d.join("tmp")).unwrap();
        std::fs::rename(d.join("tmp"), d.join(to)).unwrap();
    }
    let end = Instant::now() + Duration::from_secs(20);
    while !trusts(&new_cert) {
        assert!(Instant::now() < end, "the new certificate was never served");
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(!trusts(&old_cert));
    // A broken new config: said once, the running one kept. (A poll that fell between the
    // two renames above may have said the pair did not match: counted from here.)
    let said = || {
        serve
            .log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains("stays in use"))
            .count()
    };
    let before = said();
    std::fs::write(&web, "tls_server_config:\n  cert_file: server.crt\n").unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    while said() == before {
        assert!(Instant::now() < end, "the bad config was never said");
        std::thread::sleep(Duration::from_millis(300));
    }
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(said(), before + 1, "{:?}", serve.log.lock().unwrap());
    assert!(trusts(&new_cert));
}

#[test]
fn node_exporters_listen_address_with_a_port_alone_listens_everywhere() {
    // `--web.listen-address :10160` (a port alone) is accepted. Run as nobody, serve stops after
    // the warning, at the sampler.
    let Some(mut cmd) = as_nobody(&["serve", "-e", "page-faults", "--web.listen-address", ":0"])
    else {
        return;
    };
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("ADDR:PORT"), "{err}");
    assert!(
        err.contains("warning: serving on 0.0.0.0:0 without TLS"),
        "{err}"
    );
}

#[test]
fn every_dashboard_aggregation_keeps_hosts_apart() {
    // No panel sums same-named cgroups (system.slice, …) across hosts: every `by (…)` of a
    // panel keeps `instance`.
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(packaging().join("imc-dashboard.json")).unwrap(),
    )
    .unwrap();
    let mut checked = 0;
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap();
            for clause in expr.split(" by (").skip(1) {
                let labels = clause.split(')').next().unwrap();
                assert!(
                    labels.split(',').any(|l| l.trim() == "instance"),
                    "panel '{}': `by ({labels})` sums hosts together: {expr}",
                    p["title"]
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 10, "{checked} aggregations");
}

#[test]
fn latency_gauges_are_exported_only_where_the_plan_reads_queues() {
    // Skylake-SP: the read queue of every channel fits beside bandwidth, the write queue not.
    let text = dry_run("skx-2socket", &[]);
    assert!(
        text.contains(
            "latency: imc_dram_read_latency_seconds{package,channel} (gauge, each interval) \
             on 12 channel(s)"
        ),
        "{text}"
    );
    assert!(
        text.contains("latency: no imc_dram_write_latency_seconds"),
        "{text}"
    );
    // Granite Rapids: bandwidth fills every box; a guest has no queues: no series at all.
    for tree in ["gnr-2socket", "vm-guest"] {
        let text = dry_run(tree, &[]);
        assert!(
            text.contains("latency: no imc_dram_*_latency_seconds"),
            "{tree}: {text}"
        );
        assert!(!text.contains("latency_seconds{"), "{tree}: {text}");
    }
}

/// On this machine's own plan: the latency gauges exist exactly where the plan reads queues (on
/// a VM none: no series made up).
#[test]
fn a_live_scrape_has_latency_gauges_only_where_planned() {
    if !sampler_prerequisites() {
        return;
    }
    let plan = imc()
        .args(["serve", "--dry-run", "--json"])
        .output()
        .unwrap();
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let planned = plan["latency"]["read"] == true;
    let mut cmd = imc();
    cmd.args(["serve", "-I", "300", "--listen", "127.0.0.1:0"]);
    let serve = spawn_serve(cmd, "http");
    std::thread::sleep(Duration::from_millis(1500));
    let (status, body) = http_get(serve.addr, "/metrics", "*/*");
    assert_eq!(status, 200);
    assert!(body.contains("imc_intervals_total"), "{body}");
    assert_eq!(
        body.contains("# TYPE imc_dram_read_latency_seconds gauge"),
        planned,
        "{body}"
    );
    if !planned {
        assert!(!body.contains("latency_seconds"), "{body}");
    }
}

/// A client that pipelines `GET /metrics` and never reads, sending more every 100 ms and
/// connecting again whenever imc closes it, until `stop`.
fn pipeliner(
    addr: SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let one = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n");
        let (first, more) = (one.repeat(200), one.repeat(20));
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            s.set_write_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let mut chunk = first.as_bytes();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match s.write_all(chunk) {
                    Err(e)
                        if !matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        break;
                    }
                    _ => {}
                }
                chunk = more.as_bytes();
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    })
}

#[test]
fn a_scraper_on_new_connections_gets_every_scrape_through_a_pipelining_flood() {
    // 1,000 clients that pipeline and never read, connecting again when closed, with a scraper
    // opening a new connection for each scrape (as Prometheus does after an error or a
    // restart): 9 of 36 scrapes got an empty reply. Here 8 slots and 128 such clients.
    if !prerequisites() {
        return;
    }
    let (_dir, json) = scratch("pipeline-flood.jsonl");
    let serve = start_serve(&["--web.max-connections", "8"], &json);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood: Vec<_> = (0..128)
        .map(|_| pipeliner(serve.addr, stop.clone()))
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let scrapes: Vec<Option<u32>> = (0..40)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            try_get(serve.addr, "/metrics", None)
        })
        .collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in flood {
        t.join().unwrap();
    }
    let failed = scrapes.iter().filter(|s| **s != Some(200)).count();
    assert_eq!(
        failed,
        0,
        "{failed} of {} scrapes failed: {scrapes:?}",
        scrapes.len()
    );
}

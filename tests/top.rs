//! `imc top`'s full-screen view as a person meets it: the real binary in a real terminal (a
//! detached tmux pane), read back from the screen, driven by key presses, and the terminal
//! checked after it quits.
use imc_tests::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn have_tmux() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A tmux server of our own (its own socket, no user config), killed on every way out of the
/// test so a failed run leaves no `imc top` behind.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(width: u16, height: u16, shell_command: &str) -> Tmux {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let t = Tmux {
            socket: format!(
                "imc-top-test-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::SeqCst)
            ),
        };
        let out = t.run(&[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            shell_command,
        ]);
        assert!(
            out.status.success(),
            "tmux new-session: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        t
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .expect("tmux runs")
    }

    fn screen(&self) -> String {
        let out = self.run(&["capture-pane", "-p", "-t", "top"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &str) {
        let out = self.run(&["send-keys", "-t", "top", keys]);
        assert!(out.status.success(), "tmux send-keys {keys}");
    }

    fn pane_flag(&self, name: &str) -> String {
        let out = self.run(&[
            "display-message",
            "-p",
            "-t",
            "top",
            &format!("#{{{name}}}"),
        ]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Polls the pane until `ok` holds for its text; panics with the last screen after `within`.
    fn wait_for(&self, what: &str, within: Duration, ok: impl Fn(&str) -> bool) -> String {
        let end = Instant::now() + within;
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(
                Instant::now() < end,
                "waited {within:?} for {what}; the pane shows:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(150));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// Threads that take page faults without pause (map, touch every page, unmap), so the stand-in
/// counter has tasks to rank, named so their rows can be recognised; `tids[i]` is thread i's id.
struct Faulters {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    tids: Vec<u32>,
}

impl Faulters {
    fn start(n: usize) -> Faulters {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let threads = (0..n)
            .map(|i| {
                let (stop, tx) = (stop.clone(), tx.clone());
                std::thread::Builder::new()
                    .name(format!("imc-faulter{i}"))
                    .spawn(move || {
                        // SAFETY: gettid has no preconditions.
                        tx.send((i, unsafe { libc::gettid() } as u32)).unwrap();
                        const LEN: usize = 4 << 20;
                        while !stop.load(Ordering::Relaxed) {
                            touch_fresh_pages(LEN);
                        }
                    })
                    .expect("spawn faulter")
            })
            .collect();
        // In thread order (they start in any order), so tids[i] is the thread named i.
        let mut tids: Vec<(usize, u32)> = (0..n).map(|_| rx.recv().unwrap()).collect();
        tids.sort();
        let tids = tids.into_iter().map(|(_, tid)| tid).collect();
        Faulters {
            stop,
            threads,
            tids,
        }
    }
}

impl Drop for Faulters {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The PIDs of the task table's rows, top to bottom: the lines under the header that start
/// with a number.
fn row_pids(screen: &str) -> Vec<u32> {
    screen
        .lines()
        .skip_while(|l| !l.contains("PID"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

fn header_line(screen: &str) -> &str {
    screen.lines().find(|l| l.contains("PID")).unwrap_or("")
}

fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

/// Runs `ENV imc ARGS` in a fresh 150x45 terminal. After imc exits, the same shell prints its
/// exit status, writes the terminal's line discipline to the returned file (raw mode would show
/// -icanon -echo), and stays, so the pane can still be read.
fn in_terminal(env: &str, args: &str) -> (Tmux, AfterExit) {
    let dir = tempfile::tempdir().unwrap();
    let after = dir.path().join("after");
    let script = format!(
        "{env} {} {args}; echo \"imc exited $?\"; \
         stty -a | tr ' ;' '\\n\\n' | grep -x -e icanon -e -icanon -e echo -e -echo \
         | tr '\\n' ' ' > {}; sleep 120",
        shell_quote(&imc_bin()),
        shell_quote(&after),
    );
    (
        Tmux::start(150, 45, &script),
        AfterExit { _dir: dir, after },
    )
}

/// Where the shell reports the terminal's modes after imc exits (in a directory of its own).
struct AfterExit {
    _dir: tempfile::TempDir,
    after: PathBuf,
}

/// The terminal as imc found it: main screen, cursor shown, line editing and echo back on.
fn assert_restored(tmux: &Tmux, after: &AfterExit) {
    assert_eq!(tmux.pane_flag("alternate_on"), "0", "alternate screen left");
    assert_eq!(tmux.pane_flag("cursor_flag"), "1", "cursor shown again");
    let deadline = Instant::now() + Duration::from_secs(5);
    let modes = loop {
        match std::fs::read_to_string(&after.after) {
            Ok(m) if !m.is_empty() => break m,
            _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            other => panic!("stty's report never came: {other:?}"),
        }
    };
    let modes: Vec<&str> = modes.split_whitespace().collect();
    assert!(
        modes.contains(&"icanon") && modes.contains(&"echo"),
        "raw mode not given back: {modes:?}"
    );
}

/// A failure after the view took the terminal (here the sampler cannot load its program) gives
/// the terminal back before the one-line error prints, so the error is readable and the shell
/// usable. Needs neither root nor the eBPF object: the object named is missing on purpose.
#[test]
fn a_failure_inside_the_view_gives_the_terminal_back_and_says_why() {
    if !require(
        have_tmux(),
        "tmux runs the view in a terminal: apt-get install tmux (scripts/setup.sh)",
    ) {
        return;
    }
    let (tmux, after) = in_terminal(
        "IMC_BPF_OBJECT=/nonexistent/imc.bpf.o",
        "top -e page-faults",
    );
    let end = tmux.wait_for("imc to fail", Duration::from_secs(20), |s| {
        s.contains("imc exited")
    });
    // A missing object is the user's to fix: the contract's exit 2.
    assert!(end.contains("imc exited 2"), "{end}");
    // The error starts its own line at the left edge: output processing was back on when it
    // printed (in raw mode the next line would start where this one ended).
    let lines: Vec<&str> = end.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("imc: ") && l.contains("/nonexistent/imc.bpf.o")),
        "{end}"
    );
    assert!(lines.iter().any(|l| l.starts_with("imc exited 2")), "{end}");
    assert_restored(&tmux, &after);
}

#[test]
fn live_view_shows_tasks_sorts_on_keys_and_quits_restoring_the_terminal() {
    if !sampler_prerequisites() {
        return;
    }
    if !require(
        have_tmux(),
        "tmux runs the view in a terminal: apt-get install tmux (scripts/setup.sh)",
    ) {
        return;
    }
    let faulters = Faulters::start(2);
    let (tmux, after) = in_terminal("", "top -e page-faults -I 300");

    let first = tmux.wait_for(
        "the view with our faulting threads",
        Duration::from_secs(30),
        |s| {
            s.contains("source events:page-faults")
                && faulters.tids.iter().all(|t| row_pids(s).contains(t))
        },
    );
    assert!(
        tmux.pane_flag("alternate_on") == "1",
        "the view is on the alternate screen"
    );
    assert!(
        first.contains("counts/s, not bandwidth"),
        "page faults have no bytes: the header says so\n{first}"
    );
    assert!(
        !first.contains("MB/s"),
        "no bandwidth columns for counts\n{first}"
    );
    // Our faulters' rows: their names, and a page-fault rate that is not zero.
    for (i, tid) in faulters.tids.iter().enumerate() {
        let row = first
            .lines()
            .find(|l| l.split_whitespace().next() == Some(&tid.to_string()))
            .unwrap();
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[2], format!("imc-faulter{i}"), "row {row:?}");
        let rate = cols.last().unwrap();
        assert!(
            rate.trim_end_matches(['k', 'M']).parse::<f64>().unwrap() > 0.0,
            "page-faults/s of a faulting thread: {row:?}"
        );
    }
    assert!(header_line(&first).contains("SHARE▼"), "{first}");

    // p sorts by PID ascending, p again descending: the rows change order on the screen.
    tmux.keys("p");
    let asc = tmux.wait_for("rows by PID ascending", Duration::from_secs(5), |s| {
        let p = row_pids(s);
        header_line(s).contains("PID▲") && p.len() >= 2 && p.is_sorted()
    });
    tmux.keys("p");
    let desc = tmux.wait_for("rows by PID descending", Duration::from_secs(5), |s| {
        let p = row_pids(s);
        header_line(s).contains("PID▼") && p.len() >= 2 && p.is_sorted_by(|a, b| a >= b)
    });
    assert_ne!(row_pids(&asc), row_pids(&desc), "the order changed");

    // A smaller window: the view fits itself to it, keys line at the bottom, sort kept.
    let out = tmux.run(&["resize-window", "-t", "top", "-x", "100", "-y", "16"]);
    assert!(out.status.success(), "tmux resize-window");
    tmux.wait_for("the view redrawn at 100x16", Duration::from_secs(5), |s| {
        let lines: Vec<&str> = s.lines().collect();
        lines.len() == 16
            && lines[15].contains("q quit")
            && lines.iter().all(|l| l.chars().count() <= 100)
            && header_line(s).contains("PID▼")
            && row_pids(s).len() >= 2
    });

    tmux.keys("q");
    let end = tmux.wait_for("imc to exit", Duration::from_secs(10), |s| {
        s.contains("imc exited")
    });
    assert!(end.contains("imc exited 0"), "{end}");
    assert!(
        !end.contains("PID"),
        "the view is gone with the alternate screen:\n{end}"
    );
    assert_restored(&tmux, &after);
}

/// Counts are never shown as bytes: with page-faults as the traffic counter, every byte field
/// of the JSON lines is null (nothing measured bytes), not 0.
#[test]
fn json_lines_of_counts_carry_null_bytes() {
    if !sampler_prerequisites() {
        return;
    }
    let _faulters = Faulters::start(1);
    let out = imc()
        .args([
            "top",
            "-e",
            "page-faults",
            "-I",
            "200",
            "--duration",
            "0.7",
            "--json",
        ])
        .output()
        .expect("run imc");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut tasks = 0;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        assert!(v["unattributed_bytes"].is_null(), "{v}");
        for p in v["packages"].as_array().unwrap() {
            assert!(
                p["read_bytes"].is_null() && p["write_bytes"].is_null(),
                "{p}"
            );
        }
        for t in v["tasks"].as_array().unwrap() {
            assert!(
                t["read_bytes"].is_null() && t["write_bytes"].is_null(),
                "{t}"
            );
            assert!(t["values"]["page-faults"].is_number(), "{t}");
            tasks += 1;
        }
    }
    assert!(tasks > 0, "no task in {text}");
}

/// cpu-clock counts nanoseconds: its column says ns/s.
#[test]
fn live_view_gives_cpu_clock_its_unit() {
    if !sampler_prerequisites() {
        return;
    }
    if !require(
        have_tmux(),
        "tmux runs the view in a terminal: apt-get install tmux (scripts/setup.sh)",
    ) {
        return;
    }
    let (tmux, _after) = in_terminal("", "top -e page-faults -e cpu-clock -I 300");
    let screen = tmux.wait_for("the task table", Duration::from_secs(30), |s| {
        !row_pids(s).is_empty()
    });
    let head = header_line(&screen);
    assert!(head.contains("cpu-clock ns/s"), "{screen}");
    assert!(head.contains("page-faults/s"), "{screen}");
    tmux.keys("q");
}

/// Which of `ours` are still loaded (ids are never reused while the machine runs). Other
/// tests' imc runs load programs of their own meanwhile: only the ones the imc under test held
/// are its to unload.
fn still_loaded(ours: &std::collections::BTreeSet<u64>) -> Vec<u64> {
    loaded_imc_programs()
        .into_iter()
        .filter(|id| ours.contains(id))
        .collect()
}

/// Whether process `pid` has ended (gone, or a zombie nobody reaped yet).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => {
            s.rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next())
                == Some("Z")
        }
    }
}

fn wait_ended(pid: u32, within: Duration) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if ended(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    ended(pid)
}

/// The view up in `tmux` and imc's own process id: the pane's process (`exec`) or its child.
fn view_up(tmux: &Tmux) -> u32 {
    tmux.wait_for("the task table", Duration::from_secs(30), |s| {
        s.contains("PID") && !row_pids(s).is_empty()
    });
    let pane: u32 = tmux.pane_flag("pane_pid").parse().expect("pane pid");
    let comm = std::fs::read_to_string(format!("/proc/{pane}/comm")).unwrap_or_default();
    if comm.trim() == "imc" {
        return pane;
    }
    let children =
        std::fs::read_to_string(format!("/proc/{pane}/task/{pane}/children")).unwrap_or_default();
    children
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .find(|c: &u32| {
            std::fs::read_to_string(format!("/proc/{c}/comm")).is_ok_and(|n| n.trim() == "imc")
        })
        .expect("imc runs in the pane")
}

/// Closing the terminal (the tmux session) ends `imc top`: the hang-up ends the run and its
/// programs are unloaded; its key thread never spins on the dead terminal, and SIGTERM still
/// ends it.
#[test]
fn top_whose_terminal_goes_away_exits_and_unloads() {
    if !sampler_prerequisites() {
        return;
    }
    if !require(
        have_tmux(),
        "tmux runs the view in a terminal: apt-get install tmux (scripts/setup.sh)",
    ) {
        return;
    }
    let tmux = Tmux::start(
        120,
        40,
        &format!("exec {} top -e page-faults -I 200", shell_quote(&imc_bin())),
    );
    let pid = view_up(&tmux);
    let ours = imc_tests::bpf_programs_held_by(pid);
    assert!(!ours.is_empty(), "imc top holds no program");
    let out = tmux.run(&["kill-session", "-t", "top"]);
    assert!(out.status.success(), "tmux kill-session");
    let gone = wait_ended(pid, Duration::from_secs(5));
    if !gone {
        // Leave nothing behind, then fail.
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    assert!(
        gone,
        "imc top (pid {pid}) still runs 5 s after its terminal closed"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while !still_loaded(&ours).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        still_loaded(&ours),
        Vec::<u64>::new(),
        "programs left loaded"
    );
}

/// SIGTERM and SIGINT sent to the live view end it like q: exit 0, the terminal restored.
#[test]
fn top_ends_on_sigterm_and_sigint_restoring_the_terminal() {
    if !sampler_prerequisites() {
        return;
    }
    if !require(
        have_tmux(),
        "tmux runs the view in a terminal: apt-get install tmux (scripts/setup.sh)",
    ) {
        return;
    }
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let (tmux, after) = in_terminal("", "top -e page-faults -I 200");
        let pid = view_up(&tmux);
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(pid as i32, sig) };
        let gone = wait_ended(pid, Duration::from_secs(5));
        if !gone {
            // SAFETY: as above.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        assert!(gone, "imc top still runs 5 s after signal {sig}");
        let end = tmux.wait_for("imc to exit", Duration::from_secs(5), |s| {
            s.contains("imc exited")
        });
        assert!(end.contains("imc exited 0"), "signal {sig}: {end}");
        assert_restored(&tmux, &after);
    }
}

/// `top --by comm --json` rows never show a member's pid (0) as if it were one: a group row's
/// pid and tgid are null; the name is its key.
#[test]
fn top_group_rows_carry_their_key() {
    if !sampler_prerequisites() {
        return;
    }
    let _faulters = Faulters::start(2);
    let out = imc()
        .args([
            "top",
            "-e",
            "page-faults",
            "-I",
            "200",
            "--duration",
            "0.7",
            "--json",
            "--by",
            "comm",
        ])
        .output()
        .expect("run imc");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let mut rows = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        for t in v["tasks"].as_array().unwrap() {
            assert!(t["pid"].is_null() && t["tgid"].is_null(), "{t}");
            assert!(t["comm"].is_string(), "{t}");
            rows += 1;
        }
    }
    assert!(rows > 0, "no rows");
}

/// With `-v` the log lines are never drawn over the table (`…el'21979 tim21979tmemchurn…`) nor
/// lost at exit, and the stand-in's explanation is not cut at any width: the log is held while
/// the view is up (its last lines in a region of their own above the keys), all of it printed
/// once the terminal is back, and the explanation wraps to the width.
#[test]
fn verbose_log_never_lands_on_the_view_and_the_explanation_wraps() {
    if !sampler_prerequisites() {
        return;
    }
    if !require(
        have_tmux(),
        "tmux runs the view in a terminal: apt-get install tmux (scripts/setup.sh)",
    ) {
        return;
    }
    let _faulters = Faulters::start(1);
    for width in [80u16, 160, 200] {
        let script = format!(
            "{} -v top -I 200; echo \"imc exited $?\"; sleep 120",
            shell_quote(&imc_bin())
        );
        let tmux = Tmux::start(width, 40, &script);
        let screen = tmux.wait_for("the task table", Duration::from_secs(30), |s| {
            row_pids(s).len() >= 2
        });
        let lines: Vec<&str> = screen.lines().collect();
        assert!(
            lines.iter().all(|l| l.chars().count() <= width as usize),
            "{screen}"
        );
        let head = lines.iter().position(|l| l.contains("PID")).unwrap();
        let keys = lines.iter().rposition(|l| l.starts_with("sort:")).unwrap();
        for l in &lines[head + 1..keys] {
            let t = l.trim();
            let row = t
                .split_whitespace()
                .next()
                .is_some_and(|f| f.parse::<u32>().is_ok());
            // Rows, blank lines, or the log's own region (whole log lines, cut at the edge).
            assert!(
                t.is_empty() || row || t.starts_with("imc:") || t.starts_with('['),
                "at {width} columns a line that is no row: {l:?}\n{screen}"
            );
        }
        // The stand-in explanation, whole, however it wrapped (this machine has no memory
        // controller; a machine with one has no stand-in to explain).
        let joined = lines[..head].join(" ");
        let words = joined.split_whitespace().collect::<Vec<_>>().join(" ");
        if words.contains("as a stand-in") {
            assert!(
                words.contains("(counts, not bytes)")
                    && words.contains("streaming through memory it already has shows none"),
                "at {width} columns the explanation is cut:\n{screen}"
            );
        }
        tmux.keys("q");
        let end = tmux.wait_for("imc to exit", Duration::from_secs(10), |s| {
            s.contains("imc exited")
        });
        assert!(end.contains("imc exited 0"), "{end}");
        // The held log, printed on the restored terminal.
        assert!(
            end.contains("imc: tick:") && end.contains("imc: drain:"),
            "the log after exit at {width} columns:\n{end}"
        );
    }
}

/// Each package of `top --json` carries its loaded latency: numbers where the plan reads the
/// controller's queues, null where it reads none (a VM: no queues), and the plan says why.
#[test]
fn json_packages_carry_latency_null_where_the_plan_reads_none() {
    if !sampler_prerequisites() {
        return;
    }
    let plan = imc()
        .args(["top", "--dry-run", "--json"])
        .output()
        .expect("run imc");
    assert_eq!(plan.status.code(), Some(0));
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let planned = plan["latency"]["read"] == true;
    if !planned {
        let why = plan["latency"]["reason"].as_str().unwrap();
        assert!(why.starts_with("no loaded latency: "), "{why}");
        assert_eq!(why.lines().count(), 1);
    }
    let _faulters = Faulters::start(1);
    let out = imc()
        .args(["top", "-I", "200", "--duration", "0.7", "--json"])
        .output()
        .expect("run imc");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut packages = 0;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        for p in v["packages"].as_array().unwrap() {
            for k in ["read_latency_ns", "write_latency_ns", "utilisation"] {
                let f = p.get(k).unwrap_or_else(|| panic!("no {k} in {p}"));
                if !planned {
                    assert!(f.is_null(), "{k} made up without queues: {p}");
                } else if let Some(ns) = f.as_f64() {
                    assert!(ns > 0.0 && ns < 1e6, "{k}: {p}");
                }
            }
            packages += 1;
        }
    }
    assert!(packages > 0, "no package in {text}");
}

//! `imc record -- CMD` marks the command's process tree (its own cgroup: short-lived children
//! included, a process beside it not), and `imc record -p PID` keeps only those processes. The
//! recordings need root and the eBPF object (they skip, saying so, without them); the refusals
//! of bad pids need neither.
use imc::model::CommandTree;
use imc::record::{Item, Reader};
use imc_tests::{imc, require, run_ok, sampler_prerequisites};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};

/// One sampler at a time: these tests load the eBPF program.
static MACHINE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    MACHINE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether this process may make a cgroup v2 directory beside itself, as `record -- CMD` does
/// (said when not: a container without its own cgroup namespace, a read-only mount).
fn cgroups_writable() -> bool {
    let Ok(mount) = imc::discovery::cgroup::find_cgroup2_mount(Path::new("/")) else {
        return false;
    };
    let own = imc::discovery::process_tree::own_cgroup2_path(Path::new("/")).unwrap_or_default();
    let probe = mount
        .join(own.trim_start_matches('/'))
        .join(format!("imc-test-probe-{}", std::process::id()));
    let ok = std::fs::create_dir(&probe).is_ok();
    let _ = std::fs::remove_dir(&probe);
    ok
}

fn report_json(path: &Path) -> Value {
    let out = run_ok(imc().args(["report", "--json"]).arg(path));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// This test process touching fresh pages on a thread of its own (a page fault per page, the
/// stand-in's unit on a VM) until dropped: a process beside the command, or the one `-p` names.
struct Toucher {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Toucher {
    fn start() -> Toucher {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                imc_tests::touch_fresh_pages(1 << 20);
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        });
        Toucher {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Toucher {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A shell beside the test, looping over short children (killed at drop).
struct Shell(std::process::Child);

impl Shell {
    fn start() -> Shell {
        Shell(
            Command::new("sh")
                .args([
                    "-c",
                    "while :; do head -c 2000000 /dev/zero > /dev/null; done",
                ])
                .spawn()
                .unwrap(),
        )
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn record_command_marks_its_whole_tree_by_its_cgroup_short_lived_children_included() {
    if !sampler_prerequisites()
        || !require(
            cgroups_writable(),
            "no cgroup v2 directory can be made here",
        )
    {
        return;
    }
    let _machine = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cmd.imc");
    let _outsider = Toucher::start();
    let outsider = std::process::id();
    // Ten children of a few milliseconds each, then a subshell and its child dd (a grandchild).
    let script = "for i in 1 2 3 4 5 6 7 8 9 10; do head -c 4000000 /dev/zero > /dev/null; \
                  done; sh -c 'dd if=/dev/zero of=/dev/null bs=4M count=50 2>/dev/null; true'; \
                  sleep 0.3";
    let child = imc()
        .args(["record", "-o"])
        .arg(&file)
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let imc_pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("marked by its cgroup"), "{stderr}");
    let cgroup_dir = format!("/imc-record-{imc_pid}");

    let r = Reader::open(&file).unwrap();
    let cmd = r
        .header()
        .command
        .clone()
        .expect("the command is in the header");
    assert_eq!(cmd.argv, ["sh", "-c", script]);
    assert_eq!(cmd.tree, CommandTree::Cgroup);
    assert_eq!(cmd.cgroup_path.as_deref(), Some(&*cgroup_dir));
    let cgroup_id = cmd.cgroup_id.unwrap();
    // The directory went with the run.
    let mount = imc::discovery::cgroup::find_cgroup2_mount(Path::new("/")).unwrap();
    assert!(!mount.join(cgroup_dir.trim_start_matches('/')).exists());

    // Every row in the command's cgroup is marked, and only those and the command's own.
    let mut r = Reader::open(&file).unwrap();
    r.command_only(true);
    let mut marked = std::collections::BTreeSet::new();
    while let Some(it) = r.next_item() {
        if let Item::Interval(iv) = it {
            for t in iv.tasks {
                assert!(
                    t.cgroup == cgroup_id || t.tgid == cmd.pid,
                    "marked but not the command's: {t:?}"
                );
                marked.insert((t.tgid, t.comm));
            }
        }
    }
    let mut r = Reader::open(&file).unwrap();
    let mut unmarked_in_cgroup = 0;
    let mut outsider_rows = 0;
    while let Some(it) = r.next_item() {
        if let Item::Interval(iv) = it {
            for t in &iv.tasks {
                let is_marked = marked.contains(&(t.tgid, t.comm.clone()));
                if t.cgroup == cgroup_id && !is_marked {
                    unmarked_in_cgroup += 1;
                }
                if t.tgid == outsider {
                    outsider_rows += 1;
                    assert!(!is_marked, "the process beside the command is not its");
                }
            }
        }
    }
    assert_eq!(unmarked_in_cgroup, 0);
    assert!(outsider_rows > 0, "the outsider ran and was recorded");
    // Thirteen processes below the command (ten heads, the subshell, its dd, sleep), counted
    // by process: a row's name can be its parent's (`sh`) when it ran briefly after exec.
    let children: std::collections::BTreeSet<u32> = marked
        .iter()
        .map(|(tgid, _)| *tgid)
        .filter(|&t| t != cmd.pid)
        .collect();
    assert!(
        children.len() >= 10,
        "short-lived children marked: {} of 13 ({marked:?})",
        children.len()
    );

    // The report: the command first, its rows those marked, its share what they add up to.
    let v = report_json(&file);
    let c = &v["command"];
    assert_eq!(c["pid"], cmd.pid);
    let tasks = c["tasks"].as_array().unwrap();
    assert!(
        tasks
            .iter()
            .all(|t| t["tgid"].as_u64() != Some(u64::from(outsider)))
    );
    let sum: f64 = tasks
        .iter()
        .map(|t| t["values"]["page-faults"].as_f64().unwrap_or(0.0))
        .sum();
    let traffic = c["traffic"].as_f64().unwrap();
    assert!((sum - traffic).abs() < 0.5, "{sum} vs {traffic}");
    let share = c["share_of_total"].as_f64().unwrap();
    assert!(share > 0.0 && share < 1.0, "{share}");
}

#[test]
fn record_p_keeps_only_that_process_and_its_threads() {
    if !sampler_prerequisites() {
        return;
    }
    let _machine = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.imc");
    let _kept = Toucher::start();
    let _other = Shell::start();
    let pid = std::process::id();
    run_ok(
        imc()
            .args(["record", "--duration", "1", "-p", &pid.to_string(), "-o"])
            .arg(&file),
    );
    let mut r = Reader::open(&file).unwrap();
    assert_eq!(r.header().pids, [pid]);
    let (mut rows, mut ticks) = (0, 0);
    while let Some(it) = r.next_item() {
        match it {
            Item::Interval(iv) => {
                for t in iv.tasks {
                    assert!(
                        t.tgid == pid || t.pid == pid,
                        "{t:?} recorded with -p {pid}"
                    );
                    rows += 1;
                }
            }
            Item::Ticks(block) => {
                for t in block {
                    assert!(t.tgid == pid || t.pid == pid);
                    ticks += 1;
                }
            }
            Item::Stacks(_) => {}
        }
    }
    assert!(
        rows > 0,
        "the process ran: its rows are there ({ticks} raw records)"
    );
    let v = report_json(&file);
    assert!(v.get("command").is_none());
    assert_eq!(v["recorded_pids"], serde_json::json!([pid]));
    let text = imc().arg("report").arg(&file).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.starts_with(&format!(
            "recorded with -p {pid}: only those processes' rows"
        )),
        "{text}"
    );
}

fn record_refused(args: &[&str], dir: &Path) -> String {
    let file = dir.join("never.imc");
    let out = imc()
        .args(["record", "-o"])
        .arg(&file)
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert!(out.stdout.is_empty());
    assert!(!file.exists(), "{args:?} created the recording");
    err
}

#[test]
fn bad_pids_are_one_line_and_exit_2_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    // A pid that was, and is no more.
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    for (args, says) in [
        (vec!["-p", "0"], "not a process id"),
        (vec!["-p", "4294967295"], "not a process id"),
        (vec!["-p", "99999999999"], "99999999999"),
        (vec!["-p", "x1"], "x1"),
        (vec!["-p", &*gone_pid.to_string()], "no such process"),
        (vec!["-p", "1", "--", "true"], "not both"),
    ] {
        let err = record_refused(&args, dir.path());
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// `top -p` takes the same pids as `record -p`: 0, one past pid_max or one not running is
/// refused, never an empty table for as long as top runs with exit 0.
#[test]
fn top_refuses_the_pids_record_refuses() {
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    for (args, says) in [
        (vec!["-p", "0"], "not a process id"),
        (vec!["-p", "99999999"], "not a process id"),
        (vec!["-p", &*gone_pid.to_string()], "no such process"),
    ] {
        let out = imc()
            .args(["top", "--json", "--duration", "1", "-e", "page-faults"])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing sampled");
    }
}

#[test]
fn record_help_says_how_it_differs_from_perf() {
    let out = imc().args(["record", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Unlike perf record"), "{help}");
    assert!(help.contains("-p, --pid"), "{help}");
    let out = imc().args(["report", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("--command") && help.contains("--no-command"),
        "{help}"
    );
}

/// Where imc cannot make a cgroup (here: it runs in one whose `cgroup.max.descendants` is 0),
/// the command's tree is followed through /proc parentage, and the recording says so.
#[test]
fn where_no_cgroup_can_be_made_the_tree_is_followed_by_parentage() {
    if !sampler_prerequisites()
        || !require(
            cgroups_writable(),
            "no cgroup v2 directory can be made here",
        )
    {
        return;
    }
    let _machine = exclusive();
    let mount = imc::discovery::cgroup::find_cgroup2_mount(Path::new("/")).unwrap();
    let jail = mount.join(format!("imc-test-jail-{}", std::process::id()));
    let _ = std::fs::remove_dir(&jail);
    std::fs::create_dir(&jail).unwrap();
    std::fs::write(jail.join("cgroup.max.descendants"), "0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("par.imc");
    let _outsider = Toucher::start();
    // imc joins the jail before it executes; the command's sleep lives long enough for a scan.
    let script = "echo 0 > \"$1\"/cgroup.procs && shift && exec \"$@\"";
    let out = Command::new("sh")
        .args(["-c", script, "sh"])
        .arg(&jail)
        .arg(imc_tests::imc_bin())
        .args(["record", "-o"])
        .arg(&file)
        .args([
            "--",
            "sh",
            "-c",
            "sleep 0.6 & head -c 8000000 /dev/zero | cat > /dev/null; wait",
        ])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir(&jail);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("marked by /proc parentage"), "{stderr}");
    assert!(
        stderr.contains("parentage instead"),
        "the fallback is said: {stderr}"
    );
    let mut r = Reader::open(&file).unwrap();
    let cmd = r.header().command.clone().unwrap();
    assert_eq!(cmd.tree, CommandTree::Parentage);
    assert_eq!(cmd.cgroup_id, None);
    r.command_only(true);
    let mut marked = std::collections::BTreeSet::new();
    while let Some(it) = r.next_item() {
        if let Item::Interval(iv) = it {
            for t in iv.tasks {
                assert_ne!(
                    t.tgid,
                    std::process::id(),
                    "the process beside it is not its"
                );
                marked.insert((t.tgid, t.comm));
            }
        }
    }
    // The 0.6 s sleep at least (the 1 ms head and cat may fall between two scans).
    assert!(
        marked.iter().any(|(tgid, _)| *tgid != cmd.pid),
        "no child of the command marked: {marked:?}"
    );
}

#[test]
fn the_commands_own_process_is_named_by_what_it_executed() {
    // `record -- sh -c '…'` labels the command's sh by what it executed, never as `imc` (the name
    // its fork has before exec): a CPU that described the forked child must not keep that name.
    if !sampler_prerequisites() {
        return;
    }
    let _machine = exclusive();
    let dir = tempfile::tempdir().unwrap();
    // It failed in 2 of 3 runs: three runs, each must name it right.
    for run in 0..3 {
        let file = dir.path().join(format!("comm{run}.imc"));
        named_by_what_it_executed(&file);
    }
}

fn named_by_what_it_executed(file: &Path) {
    let script = "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; \
                  head -c 20000000 /dev/zero > /dev/null";
    run_ok(
        imc()
            .args(["record", "-o"])
            .arg(file)
            .args(["--", "sh", "-c", script])
            .stdout(Stdio::null()),
    );
    let mut r = Reader::open(file).unwrap();
    let pid = r.header().command.clone().expect("a command").pid;
    let mut by_comm: std::collections::BTreeMap<String, f64> = Default::default();
    while let Some(it) = r.next_item() {
        if let Item::Interval(iv) = it {
            for t in iv.tasks.iter().filter(|t| t.pid == pid) {
                *by_comm.entry(t.comm.clone()).or_default() += t.values.values().sum::<f64>();
            }
        }
    }
    // Before its exec the fork is imc's copy and may count a few faults under that name; what
    // sh ran is sh's.
    let sh = by_comm.get("sh").copied().unwrap_or(0.0);
    let imc_named = by_comm.get("imc").copied().unwrap_or(0.0);
    assert!(sh > imc_named, "pid {pid} by comm: {by_comm:?}");
}

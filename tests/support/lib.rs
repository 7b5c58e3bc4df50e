//! Helpers shared by the end-to-end tests: finding the built `imc` binary, the fixture trees,
//! and deciding whether a privileged test may skip (never in CI).
pub mod cross;
pub mod deb;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `imc` binary the way Cargo documents it: `CARGO_BIN_EXE_imc` when the tests are compiled
/// in imc-user's own package (Cargo sets it only there), else `<target dir>/<profile>/imc`, the
/// target directory being `CARGO_TARGET_DIR` or what `cargo metadata` says (which honours
/// `build.target-dir` in config files). Not found by walking up from the test executable:
/// where that lives is Cargo's business (nightly moved it under `build/<crate>/<hash>/out`).
pub fn imc_bin() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = option_env!("CARGO_BIN_EXE_imc") {
            return PathBuf::from(bin);
        }
        let profile = if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        };
        let bin = target_dir().join(profile).join("imc");
        assert!(
            bin.is_file(),
            "{} not built: run `cargo build -p imc-user` (cargo xtask test does)",
            bin.display()
        );
        bin
    })
    .clone()
}

/// `cargo metadata --no-deps` of the workspace (its packages, their declared dependencies and
/// targets, the target directory), offline.
pub fn cargo_metadata() -> serde_json::Value {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // `cargo test` runs tests with CARGO set to the cargo that built them.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(&cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(&workspace)
        .output()
        .unwrap_or_else(|e| panic!("running {} metadata: {e}", cargo.display()));
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata JSON")
}

/// The workspace's target directory: `CARGO_TARGET_DIR` when set (a relative one is taken from
/// the workspace root, where `cargo xtask` runs cargo; Cargo itself reads it from the directory
/// it was started in, which a test cannot know), else `cargo metadata`'s `target_directory`.
pub fn target_dir() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        return workspace.join(dir);
    }
    let v = cargo_metadata();
    let dir = v["target_directory"]
        .as_str()
        .expect("cargo metadata has no target_directory");
    PathBuf::from(dir)
}

pub fn imc() -> Command {
    Command::new(imc_bin())
}

/// Runs `cmd` to its end and returns its output, failing the test where it did not succeed:
/// the message names the command, its exit and what it printed (stderr whole, the end of
/// stdout).
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?} did not start: {e}"));
    if !out.status.success() {
        let stdout = String::from_utf8_lossy(&out.stdout);
        let tail: String = {
            let chars: Vec<char> = stdout.chars().collect();
            chars[chars.len().saturating_sub(STDOUT_SHOWN)..]
                .iter()
                .collect()
        };
        panic!(
            "{cmd:?}: {}\nstderr: {}\nstdout (its end): {tail}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// Characters of a failed command's stdout that [`run_ok`] shows (its end).
const STDOUT_SHOWN: usize = 2000;

/// [`run_ok`], its stdout parsed as one JSON value.
pub fn run_json(cmd: &mut Command) -> serde_json::Value {
    let out = run_ok(cmd);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{cmd:?}: stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The shared reference fixtures, when this checkout has them: IMC_SHARED_FIXTURES, else
/// ../shared/fixtures beside the checkout. Only optional cross-checks use them (a user's clone
/// has none); every tree a test runs against is under [`own_fixtures`].
pub fn shared_fixtures() -> Option<PathBuf> {
    let dir = match std::env::var_os("IMC_SHARED_FIXTURES") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures"),
    };
    dir.is_dir().then_some(dir)
}

/// This project's own fixture trees (tests/fixtures).
pub fn own_fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Returns true when a privileged test should run. Outside CI a missing prerequisite skips with
/// the reason printed; in CI it fails the test, because there every prerequisite must be met.
pub fn require(ok: bool, why: &str) -> bool {
    if ok {
        return true;
    }
    if in_ci() {
        panic!("prerequisite missing in CI: {why}");
    }
    eprintln!("SKIPPED: {why}");
    false
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether the linked imc library carries its eBPF program (built by `cargo xtask`) or
/// IMC_BPF_OBJECT names one.
pub fn have_bpf_object() -> bool {
    imc::sampler::object::program_bytes().is_ok()
}

/// Root and the eBPF object: what every sampler test needs. Skips (outside CI) with the reason.
pub fn sampler_prerequisites() -> bool {
    require(is_root(), "loading eBPF needs root")
        && require(
            have_bpf_object(),
            "imc was built without its eBPF program: run the suite with `cargo xtask test`",
        )
}

/// bpftool, found on PATH or where Debian installs it (/usr/sbin, not on a user's PATH).
pub fn bpftool() -> Command {
    let on_path = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("bpftool").is_file()));
    let sbin = ["/usr/sbin/bpftool", "/sbin/bpftool"]
        .into_iter()
        .find(|p| Path::new(p).is_file());
    match (on_path, sbin) {
        (false, Some(p)) => Command::new(p),
        _ => Command::new("bpftool"),
    }
}
/// Ids of loaded BPF programs whose name starts with `imc_` (bpftool's JSON listing).
pub fn loaded_imc_programs() -> Vec<u64> {
    let out = bpftool().args(["prog", "show", "--json"]).output();
    let out = match out {
        Ok(o) if o.status.success() => o,
        Ok(o) => panic!(
            "bpftool prog show failed: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!("bpftool not found ({e}): scripts/setup.sh installs it"),
    };
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bpftool JSON");
    v.as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["name"].as_str().is_some_and(|n| n.starts_with("imc_")))
        .filter_map(|p| p["id"].as_u64())
        .collect()
}

/// Ids of the BPF programs process `pid` holds now (the `prog_id` of its program and link fds,
/// /proc/PID/fdinfo): how a leak check names its own child's programs, whatever other imc runs
/// on the machine (bpftool lists no holders on some kernels).
pub fn bpf_programs_held_by(pid: u32) -> std::collections::BTreeSet<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return Default::default();
    };
    fds.filter_map(|f| std::fs::read_to_string(f.ok()?.path()).ok())
        .filter_map(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("prog_id:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .collect()
}

/// Checks `done` every `every` until it holds or `within` has passed; whether it held. A test
/// asserts what it waited for afterwards, naming it.
pub fn wait_until(
    within: std::time::Duration,
    every: std::time::Duration,
    mut done: impl FnMut() -> bool,
) -> bool {
    let end = std::time::Instant::now() + within;
    loop {
        if done() {
            return true;
        }
        if std::time::Instant::now() >= end {
            return false;
        }
        std::thread::sleep(every);
    }
}

/// Spawns `cmd` and collects the BPF programs it holds while it runs (polled every 20 ms) until
/// it exits: its output and those program ids.
pub fn run_collecting_bpf_programs(
    mut cmd: Command,
) -> (std::process::Output, std::collections::BTreeSet<u64>) {
    use std::io::Read;
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // Drained on their own threads, so a full pipe never stalls the child.
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out_pipe.read_to_end(&mut v);
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err_pipe.read_to_end(&mut v);
        v
    });
    let mut ids = std::collections::BTreeSet::new();
    let status = loop {
        ids.extend(bpf_programs_held_by(child.id()));
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let output = std::process::Output {
        status,
        stdout: out_t.join().unwrap(),
        stderr: err_t.join().unwrap(),
    };
    (output, ids)
}

/// Which of `ids` are still loaded BPF programs (bpftool's listing, any name).
pub fn still_loaded(ids: &std::collections::BTreeSet<u64>) -> Vec<u64> {
    let out = bpftool()
        .args(["prog", "show", "--json"])
        .output()
        .unwrap_or_else(|e| panic!("bpftool not found ({e}): scripts/setup.sh installs it"));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bpftool JSON");
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["id"].as_u64())
        .filter(|id| ids.contains(id))
        .collect()
}

/// Busy-loops on every CPU until the returned guard is dropped: cpu-clock barely fires on an
/// idle CPU, so sampler tests keep the CPUs busy.
pub struct Spinners {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Spinners {
    pub fn start(n: usize) -> Spinners {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 1u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        for _ in 0..10_000 {
                            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                        }
                        std::hint::black_box(x);
                    }
                })
            })
            .collect();
        Spinners { stop, threads }
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Time the hypervisor kept this guest's vCPUs from running, summed over CPUs, in ns (steal
/// time: /proc/stat's `cpu` line, eighth value, in USER_HZ ticks; 0 where the kernel does not
/// account it). A vCPU the host does not run takes no samples and runs no reader, so tests of
/// timing allow for what was stolen during their run.
pub fn stolen_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .unwrap_or(100)
        .max(1);
    let ticks = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .and_then(|l| l.split_whitespace().nth(8)?.parse::<u64>().ok())
        .unwrap_or(0);
    ticks.saturating_mul(1_000_000_000 / hz)
}

/// The host's online CPUs, read by imc's own discovery.
pub fn online_cpus() -> Vec<u32> {
    imc::discovery::topology::online_cpus(std::path::Path::new("/")).expect("cpu online list")
}

/// CLOCK_MONOTONIC in ns: the clock bpf_ktime_get_ns reads (the library's own reading).
pub use imc::sampler::monotonic_ns;

/// Maps `len` bytes of fresh anonymous memory, writes one byte per page and unmaps it again:
/// one minor page fault per page, the workload whose counter use the sampler tests know.
pub fn touch_fresh_pages(len: usize) {
    // SAFETY: a fresh private anonymous mapping, written within its length, then unmapped.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED, "mmap of {len} bytes");
        for off in (0..len).step_by(4096) {
            (p as *mut u8).add(off).write_volatile(1);
        }
        libc::munmap(p, len);
    }
}

/// Pure CPU work with no memory traffic until `end`: the known-innocent workload beside a
/// page-toucher.
pub fn spin_until(end: std::time::Instant) {
    let mut x = 1u64;
    while std::time::Instant::now() < end {
        for _ in 0..100_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
    }
}

/// `page-faults` as the kernel's software PMU encodes it (type 1, config 2): the stand-in counter
/// the sampler tests open where this machine kind has no memory controller.
pub fn page_faults() -> imc::model::Encoded {
    imc::model::Encoded {
        event: "page-faults".into(),
        pmu: "software".into(),
        pmu_type: 1,
        config: 2,
        ..Default::default()
    }
}

/// `setpriv` to run imc as nobody, when this test runs as root and setpriv exists.
pub fn as_nobody(args: &[&str]) -> Option<Command> {
    if !require(is_root(), "dropping privileges needs root") {
        return None;
    }
    let ok = Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !require(ok, "setpriv (util-linux) not found") {
        return None;
    }
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
    ])
    .arg(imc_bin())
    .args(args);
    Some(c)
}

/// An SMBIOS 3.3 Memory Device (type 17) entry as the kernel exposes it in
/// sys/firmware/dmi/entries/17-N/raw: data width at 0Ah, size at 0Ch, speed at 15h, configured
/// speed at 20h (little endian), formatted area 5Ch bytes, then the string set.
pub fn memory_device(handle: u16, size_mb: u16, configured_mts: u16) -> Vec<u8> {
    let mut b = vec![0u8; 0x5c];
    b[0] = 17;
    b[1] = 0x5c;
    b[2..4].copy_from_slice(&handle.to_le_bytes());
    b[0x08..0x0a].copy_from_slice(&72u16.to_le_bytes());
    b[0x0a..0x0c].copy_from_slice(&64u16.to_le_bytes());
    b[0x0c..0x0e].copy_from_slice(&size_mb.to_le_bytes());
    b[0x10] = 1;
    b[0x12] = 0x1a;
    b[0x15..0x17].copy_from_slice(&2933u16.to_le_bytes());
    b[0x20..0x22].copy_from_slice(&configured_mts.to_le_bytes());
    b.extend_from_slice(b"CPU1_DIMM_A1\0\0");
    b
}

/// The kernel's own count of one process's page faults from now on (every thread it has now,
/// and the threads and children they start later): a counter opened on each of its threads
/// (that thread, any CPU, inherited), the truth a sampler's attribution of that process is
/// checked against, whatever else runs on the machine.
pub struct TaskPageFaults(Vec<std::os::fd::OwnedFd>);

impl TaskPageFaults {
    pub fn open(pid: u32) -> TaskPageFaults {
        use imc::sys::perf::{FLAG_INHERIT, PerfEventAttr, PerfSys, RealPerf};
        let pf = page_faults();
        let mut attr = PerfEventAttr::counting(pf.pmu_type, pf.config);
        attr.flags |= FLAG_INHERIT;
        let tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap_or_else(|e| panic!("threads of pid {pid}: {e}"))
            .filter_map(|d| d.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        let fds = tids
            .iter()
            .map(|&tid| {
                RealPerf
                    .open(&attr, tid, -1, None)
                    .unwrap_or_else(|e| panic!("perf_event_open(page-faults, thread {tid}): {e}"))
            })
            .collect();
        TaskPageFaults(fds)
    }

    /// Page faults the process made since [`open`](Self::open).
    pub fn read(&self) -> u64 {
        use std::os::fd::AsFd;
        self.0
            .iter()
            .map(|fd| {
                imc::sys::perf::read_counter(&imc::sys::perf::RealPerf, fd.as_fd())
                    .expect("read of a thread's page-fault counter")
                    .value
            })
            .sum()
    }
}

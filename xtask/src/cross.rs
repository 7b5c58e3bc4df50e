//! The other architectures imc ships to, kept building by the suite: POWER's nest IMC users get
//! a ppc64le `imc` that tests/cross/cross_power.rs runs under qemu-user on the POWER9 fixture
//! trees, and Arm servers' users an aarch64 `imc` that tests/cross/cross_arm.rs runs on the Arm
//! and CXL trees. scripts/setup.sh installs Debian's cross compilers, qemu-user and the rustup targets.
//!
//! The cross linker and C compiler (ring's build script compiles C for the target) are set
//! here, in the environment of the one cargo command that needs them, not in a config file a
//! user's own builds would pick up.
use anyhow::{Context, Result, bail};
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

pub const POWER: &str = "powerpc64le-unknown-linux-gnu";
pub const ARM: &str = "aarch64-unknown-linux-gnu";

/// Debian's cross gcc for a Rust target: (Cargo's env key, the gcc).
fn gcc(target: &str) -> (String, &'static str) {
    let key = target.replace('-', "_");
    let gcc = match target {
        POWER => "powerpc64le-linux-gnu-gcc",
        ARM => "aarch64-linux-gnu-gcc",
        _ => unreachable!("no cross gcc for {target}"),
    };
    (key, gcc)
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// `cargo SUBCOMMAND --package imc-user --target TARGET…` with each target's cross gcc as
/// linker and C compiler (unless the caller set them).
fn cargo(root: &Path, ebpf_object: &Path, subcommand: &str, targets: &[&str]) -> Result<Command> {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(root)
        .env("IMC_EBPF_OBJECT", ebpf_object)
        .args([subcommand, "--package", "imc-user"]);
    for &target in targets {
        let (key, gcc) = gcc(target);
        if !on_path(gcc) {
            bail!("{gcc} not found: run scripts/setup.sh (it installs Debian's cross compilers)");
        }
        cmd.args(["--target", target]);
        let linker = format!("CARGO_TARGET_{}_LINKER", key.to_uppercase());
        for var in [linker, format!("CC_{key}")] {
            if std::env::var_os(&var).is_none() {
                cmd.env(var, gcc);
            }
        }
    }
    Ok(cmd)
}

/// The cross-built `imc` binaries the suite runs under qemu-user.
pub struct Binaries {
    pub power: PathBuf,
    pub arm: PathBuf,
}

/// Where the cross builds of the suite go: a target directory of their own, so they build
/// while Cargo builds and tests the host's in the main one (a target directory takes one
/// build at a time).
pub fn dir(target_dir: &Path) -> PathBuf {
    target_dir.join("cross")
}

/// The ppc64le and aarch64 `imc` (debug, with the eBPF object embedded) in the making: one
/// Cargo for both targets, at idle priority (SCHED_IDLE, which its compilers inherit), so it
/// takes only what the host's builds and tests leave of the CPUs. It runs in a process group of
/// its own, which [`Background::pauser`] stops and continues, and which ends with this one (dropped, or killed: Cargo is told to die with its parent). Its output
/// goes to a log, shown where it fails.
pub struct Background {
    /// Cargo's pid, its process group's id.
    group: i32,
    /// Cargo's exit and when it came, from the thread that waits for it.
    exited: Receiver<(std::io::Result<ExitStatus>, Instant)>,
    started: Instant,
    log: PathBuf,
    target_dir: PathBuf,
    /// Whether [`Background::wait`] saw Cargo exit.
    ended: bool,
}

/// Starts [`Background`]; `tests/cross` runs what it builds.
pub fn start(root: &Path, target_dir: &Path, ebpf_object: &Path) -> Result<Background> {
    let dir = dir(target_dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let log = dir.join("build.log");
    let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let mut cmd = cargo(root, ebpf_object, "build", &[POWER, ARM])?;
    // tests/cross runs these binaries' commands and packages one; none is debugged or
    // symbolized, so imc's own crates need no line tables either (the dev profile keeps them).
    cmd.args(["--bin", "imc"])
        .env("CARGO_PROFILE_DEV_DEBUG", "false")
        .env("CARGO_TARGET_DIR", &dir)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .process_group(0);
    // SAFETY: sched_setscheduler and prctl are async-signal-safe; nothing else runs between
    // fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let param = libc::sched_param { sched_priority: 0 };
            if libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) != 0
                || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    eprintln!(
        "xtask: building imc for {POWER} and {ARM} beside the host's build and tests, at idle \
         priority (log: {}); tests/cross runs them under qemu-user",
        log.display()
    );
    let mut child = cmd
        .spawn()
        .with_context(|| format!("running {cmd:?} (scripts/setup.sh adds the targets)"))?;
    let group = child.id() as i32;
    let (tx, exited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let status = child.wait();
        let _ = tx.send((status, Instant::now()));
    });
    Ok(Background {
        group,
        exited,
        started: Instant::now(),
        log,
        target_dir: dir,
        ended: false,
    })
}

impl Background {
    fn signal(&self, sig: i32) {
        // SAFETY: kill has no memory preconditions; the group is Cargo's own.
        unsafe {
            libc::kill(-self.group, sig);
        }
    }

    fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    /// A function that pauses the builds while the test binaries named in `quiet` run and
    /// resumes them for the others.
    pub fn pauser(&self, quiet: &'static [&'static str]) -> Box<dyn FnMut(&str) + Send> {
        let group = self.group;
        Box::new(move |binary| {
            let sig = if quiet.contains(&binary) {
                libc::SIGSTOP
            } else {
                libc::SIGCONT
            };
            // SAFETY: as in `signal`.
            unsafe {
                libc::kill(-group, sig);
            }
        })
    }

    /// Waits for the builds; their binaries, and the builds' wall time from start to end.
    pub fn wait(mut self) -> Result<(Binaries, Duration)> {
        self.resume();
        let (status, ended) = self.exited.recv().context("waiting for the cross builds")?;
        self.ended = true;
        let status = status.context("waiting for the cross builds")?;
        let took = ended.saturating_duration_since(self.started);
        if !status.success() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
            bail!(
                "the cross builds failed ({status}); their whole output is in {}",
                self.log.display()
            );
        }
        let bin = |target: &str| -> Result<PathBuf> {
            let bin = self.target_dir.join(target).join("debug").join("imc");
            if !bin.is_file() {
                bail!(
                    "the {target} build succeeded but {} is missing",
                    bin.display()
                );
            }
            Ok(bin)
        };
        Ok((
            Binaries {
                power: bin(POWER)?,
                arm: bin(ARM)?,
            },
            took,
        ))
    }
}

impl Drop for Background {
    /// A suite that ends early (a phase failed) stops the builds, compilers and all, with it;
    /// after [`Background::wait`] the group is gone and this finds nothing.
    fn drop(&mut self) {
        if !self.ended {
            self.signal(libc::SIGKILL);
        }
    }
}

/// The release aarch64 `imc` the arm64 package ships, with the eBPF object embedded, built in
/// the main target directory.
pub fn build_arm_release(root: &Path, target_dir: &Path, ebpf_object: &Path) -> Result<PathBuf> {
    eprintln!("xtask: building the release imc for {ARM} (the arm64 package's)");
    let mut cmd = cargo(root, ebpf_object, "build", &[ARM])?;
    cmd.args(["--bin", "imc", "--release"]);
    crate::run(&mut cmd).with_context(|| {
        format!("cargo build --target {ARM} (scripts/setup.sh adds the target)")
    })?;
    let bin = target_dir.join(ARM).join("release").join("imc");
    if !bin.is_file() {
        bail!("the {ARM} build succeeded but {} is missing", bin.display());
    }
    Ok(bin)
}

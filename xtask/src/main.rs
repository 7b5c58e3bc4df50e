//! `cargo xtask …`: builds the eBPF program with the toolchain scripts/setup.sh chose, embeds it
//! in `imc`, and runs imc, the tests or the benchmarks.
//!
//!   cargo xtask build [--release]      eBPF object + imc (embedded)
//!   cargo xtask run [-- ARGS]          build, then `imc ARGS` (default: `imc top`) as root
//!   cargo xtask test                   build (and package), the ppc64le imc (and an aarch64
//!                                      check), then the whole test suite; then the wall
//!                                      time of each phase
//!   cargo xtask cross                  the ppc64le and aarch64 imc (debug), as `test` does
//!   cargo xtask package [--target aarch64-unknown-linux-gnu]
//!                                      target/debian/imc_<version>_<arch>.deb (release, stripped;
//!                                      arm64 from the aarch64 cross build)
//!   cargo xtask bench-tick [--breakdown]  ns per program run: imc's tick vs a bpftrace-like baseline
//!   cargo xtask bench-stat             `imc stat -I 1` vs `perf stat -I 1`: CPU and intervals
//!   cargo xtask bench-overhead         workload slowdown, interrupts, CPU: imc record vs perf record
//!   cargo xtask bench-scale [--json]   userspace CPU and RSS replaying a 192-CPU machine's records
//!   cargo xtask bench-serve [--seconds S]  a correct scrape's latency under hostile clients vs none
//!   cargo xtask bench-report [--tasks N]  imc report's peak RSS on a million tasks, every mode
//!   cargo xtask accuracy [--weight auto|cpu-time] [--json] SCENARIO.json...
//!                                      attribution against known truth on simulated machines
//!                                      (tests/scenarios/README.md)
//!   cargo xtask accuracy --live [--rounds R] [SCENARIO.json...]
//!                                      also `imc validate` R times here: mean error ± s.e.
//!   cargo xtask accuracy --live --load [--rounds R]
//!                                      `imc validate` in five modes, quiet and beside two CPU
//!                                      hogs and a page faulter: passes and worst error
//!   cargo xtask accuracy --stacks [--rounds R]
//!                                      traffic by call stack against `perf record -g` here
//!   cargo xtask protos [--check]       imc-proto/src/generated/ from imc-proto/proto/ (the
//!                                      pprof and Perfetto message types; --check compares)
mod accuracy_live;
mod accuracy_stacks;
mod bench_overhead;
mod bench_scale;
mod bench_serve;
mod bench_stat;
mod bench_tick;
mod cross;
mod host;
mod package;
mod timings;

use anyhow::{Context, Result, anyhow, bail};
use package::{Arch, Compression};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use timings::Timings;

fn workspace_root() -> PathBuf {
    // `cargo run` sets CARGO_MANIFEST_DIR for the process; the compile-time value is the
    // fallback (it is wrong if the binary was built from another checkout).
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    dir.parent().map(Path::to_path_buf).unwrap_or(dir)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// What scripts/setup.sh recorded: route (nightly|debian) and the rustc to use.
struct EbpfToolchain {
    route: String,
    rustc: PathBuf,
    /// Where setup.sh's bpf-linker is (older state files do not say: then it is on PATH).
    linker: Option<PathBuf>,
}

fn state_file() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    cache.join("imc-setup/ebpf-toolchain")
}

fn ebpf_toolchain() -> Result<EbpfToolchain> {
    let path = state_file();
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{} missing: run scripts/setup.sh first", path.display()))?;
    let get = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .map(str::to_string)
            .ok_or_else(|| {
                anyhow!(
                    "{} has no {k}= line: run scripts/setup.sh again",
                    path.display()
                )
            })
    };
    Ok(EbpfToolchain {
        route: get("route")?,
        rustc: PathBuf::from(get("rustc")?),
        linker: get("linker").ok().map(PathBuf::from),
    })
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

/// Which eBPF object to build: the one imc embeds, or the benchmark's (imc's programs plus the
/// baseline and cost probes `bench-tick` compares against).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum EbpfObject {
    Production,
    Bench,
}

/// Builds imc-ebpf for bpfel-unknown-none and returns the object's path.
pub fn build_ebpf(which: EbpfObject) -> Result<PathBuf> {
    let tc = ebpf_toolchain()?;
    let root = workspace_root();
    let tdir = target_dir().join(match which {
        EbpfObject::Production => "ebpf",
        EbpfObject::Bench => "ebpf-bench",
    });
    // The nested build must not inherit the outer cargo's toolchain choices.
    let mut cmd = match tc.route.as_str() {
        "nightly" => {
            let mut c = Command::new("rustup");
            c.args(["run", "nightly", "cargo"]);
            c
        }
        _ => {
            let mut c = Command::new(tc.rustc.with_file_name("cargo"));
            c.env("RUSTC_BOOTSTRAP", "1");
            c
        }
    };
    for v in [
        "RUSTUP_TOOLCHAIN",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "CARGO",
    ] {
        cmd.env_remove(v);
    }
    // rustc finds bpf-linker on PATH: put the one setup.sh built first.
    if let Some(dir) = tc.linker.as_deref().and_then(Path::parent) {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let dirs = std::iter::once(dir.to_path_buf()).chain(std::env::split_paths(&path));
        cmd.env(
            "PATH",
            std::env::join_paths(dirs).context("PATH with bpf-linker's directory")?,
        );
    }
    cmd.env("RUSTC", &tc.rustc)
        .env("CARGO_TARGET_DIR", &tdir)
        .current_dir(&root)
        .args([
            "build",
            "--package",
            "imc-ebpf",
            "--release",
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
        ]);
    if which == EbpfObject::Bench {
        cmd.args(["--features", "bench"]);
    }
    eprintln!("xtask: building the eBPF program ({} route)", tc.route);
    run(&mut cmd)?;
    let obj = tdir.join("bpfel-unknown-none/release/imc");
    if !obj.is_file() {
        bail!("eBPF build succeeded but {} is missing", obj.display());
    }
    Ok(obj)
}

/// Builds the eBPF object, then `imc` with it embedded. Returns the imc binary's path.
fn build(release: bool) -> Result<PathBuf> {
    build_imc(&build_ebpf(EbpfObject::Production)?, release)
}

/// Builds `imc` with the eBPF object `obj` embedded. Returns the imc binary's path.
fn build_imc(obj: &Path, release: bool) -> Result<PathBuf> {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(workspace_root())
        .env("IMC_EBPF_OBJECT", obj)
        .args(["build", "--package", "imc-user"]);
    if release {
        cmd.arg("--release");
    }
    run(&mut cmd)?;
    Ok(target_dir()
        .join(if release { "release" } else { "debug" })
        .join("imc"))
}

fn main() -> ExitCode {
    match real_main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn real_main() -> Result<ExitCode> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        bail!(
            "usage: cargo xtask build|run|test|cross|package|bench-tick|bench-stat|bench-overhead|bench-scale|bench-serve|bench-report|accuracy|protos [--release] [-- ARGS]"
        );
    }
    let cmd = args.remove(0);
    let release = args.first().is_some_and(|a| a == "--release");
    if release {
        args.remove(0);
    }
    if args.first().is_some_and(|a| a == "--") {
        args.remove(0);
    }
    match cmd.as_str() {
        "build" => {
            let bin = build(release)?;
            eprintln!("xtask: built {}", bin.display());
        }
        "run" => {
            let bin = build(true)?;
            if args.is_empty() {
                args.push("top".into());
            }
            let status = Command::new(&bin)
                .args(&args)
                .status()
                .with_context(|| format!("running {}", bin.display()))?;
            return Ok(ExitCode::from(status.code().unwrap_or(1) as u8));
        }
        "package" => {
            let deb = package_for(&args)?;
            eprintln!("xtask: built {}", deb.display());
        }
        "test" => test_all(&args)?,
        "cross" => {
            let obj = build_ebpf(EbpfObject::Production)?;
            let (bins, _) = cross::start(&workspace_root(), &target_dir(), &obj)?.wait()?;
            eprintln!(
                "xtask: built {} and {}",
                bins.power.display(),
                bins.arm.display()
            );
        }
        "bench-tick" => {
            let bench = build_tool("imc-bench-tick")?;
            let object = build_ebpf(EbpfObject::Bench)?;
            bench_tick::run(&bench, &object, &args)?;
        }
        "bench-stat" => {
            let bin = build(true)?;
            let workload = build_tool("imc-workload")?;
            bench_stat::run(&bin, &workload)?;
        }
        "bench-overhead" => {
            let bin = build(true)?;
            let workload = build_tool("imc-workload")?;
            let object = build_ebpf(EbpfObject::Bench)?;
            bench_overhead::run(&bin, &workload, &object)?;
        }
        "bench-scale" => {
            let bin = build_tool("imc-bench-scale")?;
            bench_scale::run(&bin, &args)?;
        }
        "bench-report" => {
            let bench = build_tool("imc-bench-report")?;
            run(Command::new(bench).arg(build(true)?).args(&args))?;
        }
        "bench-serve" => {
            let bin = build(true)?;
            bench_serve::run(&bin, &args)?;
        }
        "accuracy" => return accuracy(args),
        "protos" => {
            // The generator is imc-proto's own binary, built only here (its feature `codegen`).
            run(Command::new(env!("CARGO"))
                .current_dir(workspace_root())
                .args([
                    "run",
                    "--quiet",
                    "--package",
                    "imc-proto",
                    "--features",
                    "codegen",
                ])
                .args(["--bin", "imc-protogen", "--"])
                .args(&args))?;
        }
        other => {
            bail!(
                "unknown xtask command '{other}' (build, run, test, cross, package, bench-tick, \
                 bench-stat, bench-overhead, bench-scale, bench-serve, bench-report, accuracy, \
                 protos)"
            )
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `package --target T`: None for this machine's package, else the one other target packaged
/// (aarch64, as arm64).
fn package_target(args: &[String]) -> Result<Option<&'static str>> {
    match args {
        [] => Ok(None),
        [flag, t] if flag == "--target" && t == cross::ARM => Ok(Some(cross::ARM)),
        [flag, t] if flag == "--target" => {
            bail!(
                "package --target {t}: imc packages {} (arm64) or this machine",
                cross::ARM
            )
        }
        _ => bail!("package takes --target {} or nothing: {args:?}", cross::ARM),
    }
}

/// `cargo xtask package [--target T]`: this machine's package, or arm64's.
fn package_for(args: &[String]) -> Result<PathBuf> {
    match package_target(args)? {
        None => {
            let (root, bin) = (workspace_root(), build(true)?);
            package::package(&root, &target_dir(), &bin, Arch::Host, Compression::Shipped)
        }
        Some(_) => arm64_package(&build(false)?),
    }
}

/// The arm64 package: the aarch64 release build, its completions and man page generated by
/// `host`, an imc of this checkout that runs here.
fn arm64_package(host: &Path) -> Result<PathBuf> {
    let obj = build_ebpf(EbpfObject::Production)?;
    let root = workspace_root();
    let bin = cross::build_arm_release(&root, &target_dir(), &obj)?;
    let arm64 = Arch::Arm64 { generator: host };
    package::package(&root, &target_dir(), &bin, arm64, Compression::Shipped)
}

/// `cargo xtask test`: the binaries (host, POWER and aarch64), the packages of them (this
/// machine's and arm64), then the whole suite; at the end, the wall time of each phase (also
/// when one fails).
fn test_all(args: &[String]) -> Result<()> {
    let mut t = Timings::new();
    let r = test_phases(args, &mut t);
    eprint!("{}", t.report());
    r
}

/// The host's builds and tests run while the POWER and Arm builds are made beside them at idle
/// priority; tests/cross (the cross-built binaries under qemu-user, the arm64 package) runs
/// last, once those are built. Cargo arguments (a package, a test file) select what the one
/// test run runs, after every build.
fn test_phases(args: &[String], t: &mut Timings) -> Result<()> {
    let root = workspace_root();
    let obj = t.time("eBPF object", || build_ebpf(EbpfObject::Production))?;
    let cross = cross::start(&root, &target_dir(), &obj)?;
    // The default members' libraries (everything but the BPF-only crate, which only builds
    // for bpfel-unknown-none, and tests/cross) and the binaries the suite runs: `imc`, and the
    // bench-scale tool tests/bench_scale.rs runs small. The other tools are release binaries
    // of the benchmarks; the default members stay selected, so dependencies are resolved with
    // the features the test build uses.
    t.time("debug build (cargo build)", || {
        run(Command::new(env!("CARGO"))
            .current_dir(&root)
            .env("IMC_EBPF_OBJECT", &obj)
            .args(["build", "--lib", "--bin", "imc", "--bin", "imc-bench-scale"]))
    })?;
    let bin = target_dir().join("debug").join("imc");
    // The packages tests/packaging.rs and tests/cross check (IMC_TEST_DEB, IMC_TEST_DEB_ARM64),
    // made as `cargo xtask package` makes them (strip, fields, Depends, completions, the unit)
    // of the builds the suite already runs: `cargo xtask package` ships release builds, whose
    // build here would add five minutes to every test run from a fresh clone. Compressed at
    // xz's fastest level: the tests read what the package holds, not how small it is.
    let deb = t.time(".deb package", || {
        package::package(&root, &target_dir(), &bin, Arch::Host, Compression::Fast)
    })?;
    // Cargo's own arguments (a package, a test file) apply to the build too; the test
    // binaries' (after `--`) to the run only.
    let mut split = args.split(|a| a == "--");
    let cargo_args = split.next().unwrap_or_default();
    let harness_args: Vec<String> = match split.next() {
        Some(_) => args[cargo_args.len()..].to_vec(),
        None => Vec::new(),
    };
    let test = |extra: &[&str], with: &[String]| {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.current_dir(&root)
            .env("IMC_EBPF_OBJECT", &obj)
            .env("IMC_TEST_DEB", &deb)
            .args(["test", "--no-fail-fast"])
            .args(extra)
            .args(with);
        cmd
    };
    let cross_part = |t: &mut Timings, cross| cross_binaries(t, cross, &root, &bin);
    if !cargo_args.is_empty() {
        let env = cross_part(t, cross)?;
        t.time("test build (cargo test --no-run)", || {
            run(test(&["--no-run"], cargo_args).envs(env.clone()))
        })?;
        return t.time_tests("test run", test(&[], args).envs(env));
    }
    t.time("test build (cargo test --no-run)", || {
        run(&mut test(&["--no-run"], &[]))
    })?;
    let host = t.time_tests_telling("test run", &mut test(&[], args), cross.pauser(QUIET));
    let cross = cross_part(t, cross).and_then(|env| {
        let cross_tests: Vec<String> = CROSS_TESTS.iter().map(|a| a.to_string()).collect();
        t.time("cross test build (cargo test --no-run)", || {
            run(test(&["--no-run"], &cross_tests).envs(env.clone()))
        })?;
        t.time_tests(
            "cross test run (tests/cross)",
            test(&[], &cross_tests).envs(env).args(&harness_args),
        )
    });
    match (host, cross) {
        (Err(h), Err(c)) => bail!("{h:#}\n{c:#}"),
        (host, cross) => host.and(cross),
    }
}

/// The waited-for cross builds (their time recorded beside the other phases) and the arm64
/// package of the aarch64 one: the variables tests/cross finds them by.
fn cross_binaries(
    t: &mut Timings,
    cross: cross::Background,
    root: &Path,
    host_imc: &Path,
) -> Result<Vec<(&'static str, PathBuf)>> {
    let (bins, took) = t.time("waiting for the cross builds", || cross.wait())?;
    t.beside("cross builds (ppc64le, aarch64; idle priority)", took);
    let deb_arm64 = t.time(".deb package (arm64)", || {
        let arm64 = Arch::Arm64 {
            generator: host_imc,
        };
        package::package(root, &target_dir(), &bins.arm, arm64, Compression::Fast)
    })?;
    Ok(vec![
        ("IMC_CROSS_POWER_BIN", bins.power),
        ("IMC_CROSS_ARM_BIN", bins.arm),
        ("IMC_TEST_DEB_ARM64", deb_arm64),
    ])
}

/// tests/cross's test target, selected in the whole workspace (the BPF-only crate left out),
/// so Cargo resolves the dependencies' features as for the host's run and builds only the
/// tests' binary: selected alone, the package would rebuild imc with fewer features.
const CROSS_TESTS: &[&str] = &["--workspace", "--exclude", "imc-ebpf", "--test", "cross"];

/// The test binaries that judge imc's live readings against the kernel's own counts of the
/// whole machine (validate's truth, the eBPF path's page faults and ticks, the package counter
/// read on one CPU against each CPU's faults, `stat`'s 1 ms intervals): the cross builds pause
/// while they run, so no compiler shares the machine they measure. What imc keeps under load is
/// the loaded accuracy benchmark's to say (`cargo xtask accuracy --live --load`).
const QUIET: &[&str] = &["validate.rs", "ebpf.rs", "package.rs", "stat.rs"];

/// `cargo xtask accuracy`: the scenarios through the simulator, and with --live the real
/// workloads through `imc validate`.
fn accuracy(mut args: Vec<String>) -> Result<ExitCode> {
    if let Some(i) = args.iter().position(|a| a == "--stacks") {
        args.remove(i);
        let rounds = match args.iter().position(|a| a == "--rounds") {
            Some(j) if j + 1 < args.len() => args[j + 1]
                .parse::<u32>()
                .ok()
                .filter(|&r| (1..=100).contains(&r))
                .with_context(|| format!("--rounds {}: give 1 to 100", args[j + 1]))?,
            Some(_) => bail!("--rounds needs a number of rounds (1 or more)"),
            None => 3,
        };
        let bin = build(true)?;
        let ok = accuracy_stacks::run(&bin, rounds)?;
        return Ok(ExitCode::from(u8::from(!ok)));
    }
    let live = accuracy_live::take_live(&mut args)?;
    let scenarios = args.iter().any(|a| !a.starts_with('-'));
    if live.is_some_and(|l| l.load) && scenarios {
        bail!("--load runs imc validate's own modes: give no scenario with it");
    }
    let mut code = 0;
    if live.is_none() || scenarios {
        let bin = build_tool("imc-accuracy")?;
        let status = Command::new(&bin)
            .args(&args)
            .status()
            .with_context(|| format!("running {}", bin.display()))?;
        code = status.code().unwrap_or(1) as u8;
    }
    if let Some(live) = live {
        let bin = build(true)?;
        let ok = if live.load {
            accuracy_live::run_loaded(&bin, live.rounds, &target_dir().join("accuracy-live"))?
        } else {
            accuracy_live::run(&bin, live.rounds, &args)?
        };
        if !ok {
            code = code.max(1);
        }
    }
    Ok(ExitCode::from(code))
}

/// Builds `name`, a release binary of imc-tools (the simulator's accuracy harness, the
/// benchmarks, the overhead workload), a crate apart from imc-user so the product never depends
/// on it. It is built with the same environment as `build` so the two share one compiled imc
/// library. Returns its path.
fn build_tool(name: &str) -> Result<PathBuf> {
    let obj = build_ebpf(EbpfObject::Production)?;
    run(Command::new(env!("CARGO"))
        .current_dir(workspace_root())
        .env("IMC_EBPF_OBJECT", &obj)
        .args([
            "build",
            "--release",
            "--package",
            "imc-tools",
            "--bin",
            name,
        ]))?;
    Ok(target_dir().join("release").join(name))
}

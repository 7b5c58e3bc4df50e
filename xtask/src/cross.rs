//! The other architectures imc ships to, kept building by the suite: POWER's nest IMC users get
//! a ppc64le `imc` that tests/cross_power.rs runs under qemu-user on the POWER9 fixture trees,
//! and Arm servers' users an aarch64 `imc` that tests/cross_arm.rs runs on the Arm and CXL
//! trees. scripts/setup.sh installs Debian's cross compilers, qemu-user and the rustup targets.
//!
//! The cross linker and C compiler (ring's build script compiles C for the target) are set
//! here, in the environment of the one cargo command that needs them, not in a config file a
//! user's own builds would pick up.
use crate::timings::Timings;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// `cargo SUBCOMMAND --package imc-user --target TARGET` with the target's cross gcc as linker
/// and C compiler (unless the caller set them).
fn cargo(root: &Path, ebpf_object: &Path, subcommand: &str, target: &str) -> Result<Command> {
    let (key, gcc) = gcc(target);
    if !on_path(gcc) {
        bail!("{gcc} not found: run scripts/setup.sh (it installs Debian's cross compilers)");
    }
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(root)
        .env("IMC_EBPF_OBJECT", ebpf_object)
        .args([subcommand, "--package", "imc-user", "--target", target]);
    let linker = format!("CARGO_TARGET_{}_LINKER", key.to_uppercase());
    for var in [linker, format!("CC_{key}")] {
        if std::env::var_os(&var).is_none() {
            cmd.env(var, gcc);
        }
    }
    Ok(cmd)
}

/// The cross-built `imc` binaries the suite runs under qemu-user.
pub struct Binaries {
    pub power: PathBuf,
    pub arm: PathBuf,
}

/// Builds the ppc64le and aarch64 `imc` (debug, with the eBPF object embedded) and returns
/// their paths, under the target directory as Cargo lays it out; each build is a phase of `t`.
pub fn build(
    root: &Path,
    target_dir: &Path,
    ebpf_object: &Path,
    t: &mut Timings,
) -> Result<Binaries> {
    let mut one = |target, runner| {
        t.time(&format!("cross build ({target})"), || {
            eprintln!("xtask: building imc for {target} ({runner} runs it under qemu-user)");
            build_one(root, target_dir, ebpf_object, target, false)
        })
    };
    Ok(Binaries {
        power: one(POWER, "tests/cross_power.rs")?,
        arm: one(ARM, "tests/cross_arm.rs")?,
    })
}

/// The release aarch64 `imc` the arm64 package ships, with the eBPF object embedded.
pub fn build_arm_release(root: &Path, target_dir: &Path, ebpf_object: &Path) -> Result<PathBuf> {
    eprintln!("xtask: building the release imc for {ARM} (the arm64 package's)");
    build_one(root, target_dir, ebpf_object, ARM, true)
}

fn build_one(
    root: &Path,
    target_dir: &Path,
    ebpf_object: &Path,
    target: &str,
    release: bool,
) -> Result<PathBuf> {
    let mut cmd = cargo(root, ebpf_object, "build", target)?;
    cmd.args(["--bin", "imc"]);
    if release {
        cmd.arg("--release");
    }
    crate::run(&mut cmd).with_context(|| {
        format!("cargo build --target {target} (scripts/setup.sh adds the target)")
    })?;
    let profile = if release { "release" } else { "debug" };
    let bin = target_dir.join(target).join(profile).join("imc");
    if !bin.is_file() {
        bail!(
            "the {target} build succeeded but {} is missing",
            bin.display()
        );
    }
    Ok(bin)
}

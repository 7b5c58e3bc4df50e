//! Helpers shared by the end-to-end tests: finding the built `imc` binary, the fixture trees,
//! and deciding whether a privileged test may skip (never in CI).
use std::path::{Path, PathBuf};
use std::process::Command;

/// The `imc` binary built beside this test executable (target/<profile>/imc).
pub fn imc_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test>-<hash> → target/<profile>/imc
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let bin = dir.join("imc");
    assert!(
        bin.is_file(),
        "{} not built: run `cargo build -p imc-user` (cargo xtask test does)",
        bin.display()
    );
    bin
}

pub fn imc() -> Command {
    Command::new(imc_bin())
}

/// ../shared/fixtures (the fixtures every imc checkout is given beside it).
pub fn shared_fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures")
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

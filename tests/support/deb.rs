//! The Debian packages `cargo xtask test` builds (and `cargo xtask package` ships): where they
//! are, lintian's verdict, and the output of the tools that read them.
use crate::{require, run_ok, target_dir};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The package `cargo xtask package` built for `arch` (a Debian architecture): `env` (set by
/// `cargo xtask test`), else the one for it in the target directory.
pub fn built_deb_for(env: &str, arch: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let suffix = format!("_{arch}.deb");
    std::fs::read_dir(target_dir().join("debian"))
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_str().is_some_and(|n| n.ends_with(&suffix)))
}

/// lintian's verdict on `deb`: no error (skipped, saying why, where lintian is missing).
pub fn lintian_passes(deb: &Path) {
    let have_lintian = Command::new("lintian")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !require(
        have_lintian,
        "lintian not installed: scripts/setup.sh installs it",
    ) {
        return;
    }
    let out = Command::new("lintian")
        .args(["--fail-on", "error", "--no-tag-display-limit"])
        .arg(deb)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    eprintln!("lintian:\n{report}");
    assert!(
        out.status.success() && !report.lines().any(|l| l.starts_with("E: ")),
        "lintian reports errors:\n{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `cmd`'s stdout; it must succeed.
pub fn stdout_ok(cmd: &mut Command) -> String {
    String::from_utf8_lossy(&run_ok(cmd).stdout).into_owned()
}

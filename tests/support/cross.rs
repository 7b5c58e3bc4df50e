//! imc cross-built for another CPU and run under qemu-user (tests/cross/cross_power.rs,
//! tests/cross/cross_arm.rs): where each target's binary, loader and emulator are, and running a
//! command both there and on the host build, which must print the same.
//!
//! Outside `cargo xtask test` (which builds the binary and names it in the target's variable)
//! a test skips, saying why, when the binary or qemu is missing; under xtask or in CI a missing
//! piece fails it.
use crate::{imc, in_ci, target_dir};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A CPU imc is cross-built for.
pub struct Target {
    /// Rust's target triple.
    pub triple: &'static str,
    /// Where Debian's cross libc puts the target's dynamic loader and libc.
    pub sysroot: &'static str,
    /// qemu-user's names for the CPU.
    pub qemu: [&'static str; 2],
    /// The variable `cargo xtask test` names the built binary in.
    pub env: &'static str,
    /// What users call the machines, and Debian's name of the architecture.
    pub name: &'static str,
    pub debian: &'static str,
}

pub const POWER: Target = Target {
    triple: "powerpc64le-unknown-linux-gnu",
    sysroot: "/usr/powerpc64le-linux-gnu",
    qemu: ["qemu-ppc64le", "qemu-ppc64le-static"],
    env: "IMC_CROSS_POWER_BIN",
    name: "POWER",
    debian: "ppc64el",
};

pub const ARM: Target = Target {
    triple: "aarch64-unknown-linux-gnu",
    sysroot: "/usr/aarch64-linux-gnu",
    qemu: ["qemu-aarch64", "qemu-aarch64-static"],
    env: "IMC_CROSS_ARM_BIN",
    name: "aarch64",
    debian: "arm64",
};

/// The target's imc and the emulator that runs it.
pub struct Cross {
    target: &'static Target,
    bin: PathBuf,
    qemu: PathBuf,
}

fn find_on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|n| {
        std::env::split_paths(&path)
            .map(|d| d.join(n))
            .find(|p| p.is_file())
    })
}

impl Cross {
    /// The target's imc and qemu-user, or None (after saying why) where a plain `cargo test`
    /// runs without them.
    pub fn find(target: &'static Target) -> Option<Cross> {
        let named = std::env::var_os(target.env).filter(|v| !v.is_empty());
        let must = named.is_some() || in_ci();
        let bin = named.map(PathBuf::from).unwrap_or_else(|| {
            // Where `cargo xtask cross` and `cargo xtask test` build it.
            target_dir()
                .join("cross")
                .join(target.triple)
                .join("debug")
                .join("imc")
        });
        let sysroot = target.sysroot;
        let missing = if !bin.is_file() {
            Some(format!(
                "{} not built: `cargo xtask test` cross-builds it",
                bin.display()
            ))
        } else if !Path::new(sysroot).join("lib").is_dir() {
            Some(format!(
                "no {sysroot}: scripts/setup.sh installs Debian's {} cross libc",
                target.debian
            ))
        } else {
            None
        };
        let qemu = find_on_path(&target.qemu);
        let missing = missing.or_else(|| {
            qemu.is_none().then(|| {
                format!(
                    "no {} on PATH: scripts/setup.sh installs qemu-user",
                    target.qemu[0]
                )
            })
        });
        if let Some(why) = missing {
            assert!(!must, "the {} binary cannot run: {why}", target.name);
            eprintln!("SKIPPED: {why}");
            return None;
        }
        Some(Cross {
            target,
            bin,
            qemu: qemu?,
        })
    }

    /// `imc ARGS` on the target under qemu, and as the host build; asserts both succeed with
    /// the same output and returns it.
    pub fn both(&self, args: &[&str]) -> String {
        let mut cross = Command::new(&self.qemu);
        cross
            .arg("-L")
            .arg(self.target.sysroot)
            .arg(&self.bin)
            .args(args);
        let name = self.target.name;
        let there = stdout_of(cross, &format!("{name} imc {args:?}"));
        let mut host = imc();
        host.args(args);
        let host = stdout_of(host, &format!("imc {args:?}"));
        assert_eq!(
            there, host,
            "imc {args:?}: the {name} build's output differs from the host's"
        );
        there
    }

    /// Every planning command's dry run (`stat`, `top`, `record -o RECORDING`, `serve`) on the
    /// tree at `root`, as text and as JSON, each the same on the target as on the host and none
    /// writing `recording`: (what ran, its text, its JSON).
    pub fn dry_runs(
        &self,
        name: &str,
        root: &Path,
        recording: &Path,
    ) -> Vec<(String, String, serde_json::Value)> {
        let (r, o) = (root.to_str().unwrap(), recording.to_str().unwrap());
        let commands = [
            vec!["stat"],
            vec!["top"],
            vec!["record", "-o", o],
            vec!["serve"],
        ];
        commands
            .into_iter()
            .map(|command| {
                let what = format!("{name} {}", command[0]);
                let mut args = vec!["--root", r];
                args.extend(&command);
                args.push("--dry-run");
                let text = self.both(&args);
                args.push("--json");
                let v = json(&self.both(&args), &what);
                assert!(!recording.exists(), "{what}: a dry run wrote {o}");
                (what, text, v)
            })
            .collect()
    }
}

/// What `cmd` prints, which must succeed and print UTF-8.
pub fn stdout_of(mut cmd: Command, what: &str) -> String {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        o.status.success(),
        "{what}: {}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap_or_else(|e| panic!("{what}: output not UTF-8: {e}"))
}

/// A JSON text, which must parse.
pub fn json(text: &str, what: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{what}: {e}: {text}"))
}

/// A sysfs file's text, trimmed; it must be there.
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_string()
}

/// The PMUs under `root` whose names start with `prefix`, sorted.
pub fn pmus(root: &Path, prefix: &str) -> Vec<PathBuf> {
    let dir = root.join("sys/bus/event_source/devices");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .collect();
    out.sort();
    out
}

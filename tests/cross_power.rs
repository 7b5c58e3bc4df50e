//! POWER users get a binary that is built and exercised: `cargo xtask test` cross-builds imc for
//! ppc64le (xtask/src/cross.rs) and these tests run that binary under qemu-user on the POWER9
//! fixture trees: `list`, `encode` and every command's `--dry-run`, each checked against the trees'
//! own sysfs files (the nest IMC PMUs, the MCS channels of both chips, the kernel's event encodings
//! and scales) and against the host build's output, byte for byte.
//!
//! Outside `cargo xtask test` (which builds the binary and names it in IMC_CROSS_POWER_BIN) the
//! tests skip, saying why, when the binary or qemu-ppc64le is missing; under xtask or in CI a
//! missing piece fails them.
use imc_tests::{imc, in_ci, own_fixtures, target_dir};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "powerpc64le-unknown-linux-gnu";
/// Where Debian's libc6-ppc64el-cross puts the target's dynamic loader and libc.
const SYSROOT: &str = "/usr/powerpc64le-linux-gnu";
const TREES: [&str; 2] = ["power9-2chip", "power9-imc-full"];

struct Power {
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

/// The ppc64le imc and qemu-user, or None (after saying why) where a plain `cargo test` runs
/// without them.
fn power() -> Option<Power> {
    let named = std::env::var_os("IMC_CROSS_POWER_BIN").filter(|v| !v.is_empty());
    let must = named.is_some() || in_ci();
    let bin = named
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join(TARGET).join("debug").join("imc"));
    let missing = if !bin.is_file() {
        Some(format!(
            "{} not built: `cargo xtask test` cross-builds it",
            bin.display()
        ))
    } else if !Path::new(SYSROOT).join("lib").is_dir() {
        Some(format!(
            "no {SYSROOT}: scripts/setup.sh installs Debian's ppc64le cross libc"
        ))
    } else {
        None
    };
    let qemu = find_on_path(&["qemu-ppc64le", "qemu-ppc64le-static"]);
    let missing = missing.or_else(|| {
        qemu.is_none()
            .then(|| "no qemu-ppc64le on PATH: scripts/setup.sh installs qemu-user".to_string())
    });
    if let Some(why) = missing {
        assert!(!must, "the POWER binary cannot run: {why}");
        eprintln!("SKIPPED: {why}");
        return None;
    }
    Some(Power {
        bin,
        qemu: qemu.unwrap(),
    })
}

fn tree(name: &str) -> PathBuf {
    own_fixtures().join(name)
}

fn stdout_of(mut cmd: Command, what: &str) -> String {
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

/// `imc ARGS` as ppc64le under qemu, and as the host build; asserts both succeed with the same
/// output and returns it.
fn both(p: &Power, args: &[&str]) -> String {
    let mut cross = Command::new(&p.qemu);
    cross.arg("-L").arg(SYSROOT).arg(&p.bin).args(args);
    let power = stdout_of(cross, &format!("ppc64le imc {args:?}"));
    let mut host = imc();
    host.args(args);
    let host = stdout_of(host, &format!("imc {args:?}"));
    assert_eq!(
        power, host,
        "imc {args:?}: the ppc64le build's output differs from the host's"
    );
    power
}

fn json(text: &str, what: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{what}: {e}: {text}"))
}

/// The PMU directories of a tree whose name starts with `prefix`.
fn pmus(root: &Path, prefix: &str) -> Vec<PathBuf> {
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

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_string()
}

/// The `config` the kernel's sysfs spells for an event file (`event=0xd0,…`), through the PMU's
/// `format/` fields (`config:0-61`), as perf builds it.
fn sysfs_config(pmu: &Path, event: &str) -> u64 {
    let mut config = 0u64;
    for term in read(&pmu.join("events").join(event)).split(',') {
        let (k, v) = term.split_once('=').unwrap_or((term, "1"));
        let v = match v.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).unwrap(),
            None => v.parse().unwrap(),
        };
        let format = read(&pmu.join("format").join(k));
        let bits = format
            .strip_prefix("config:")
            .unwrap_or_else(|| panic!("{}: format {k} = {format}", pmu.display()));
        let lo: u32 = bits.split('-').next().unwrap().parse().unwrap();
        config |= v << lo;
    }
    config
}

#[test]
fn list_finds_the_nest_imc_pmus_of_both_chips() {
    let Some(p) = power() else { return };
    for name in TREES {
        let root = tree(name);
        let r = root.to_str().unwrap();
        both(&p, &["--root", r, "list"]);
        let v = json(&both(&p, &["--root", r, "list", "--json"]), name);
        let ids: Vec<u64> = v["packages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["id"].as_u64().unwrap())
            .collect();
        assert_eq!(ids, [0, 8], "{name}: the two chips");
        let nest = v["sources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["backend"] == "power-nest-imc")
            .unwrap_or_else(|| panic!("{name}: no power-nest-imc source"));
        assert_eq!(nest["available"], true, "{name}: {nest}");
        let found: Vec<(String, u64)> = nest["pmus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                assert_eq!(p["cpus"], serde_json::json!([0, 64]), "{name}: {p}");
                (
                    p["name"].as_str().unwrap().to_string(),
                    p["type"].as_u64().unwrap(),
                )
            })
            .collect();
        let expected: Vec<(String, u64)> = pmus(&root, "nest_mcs")
            .iter()
            .map(|d| {
                (
                    d.file_name().unwrap().to_string_lossy().to_string(),
                    read(&d.join("type")).parse().unwrap(),
                )
            })
            .collect();
        assert_eq!(found.len(), 2, "{name}: {found:?}");
        assert_eq!(found, expected, "{name}: the MCS PMUs sysfs has");
        if name == "power9-imc-full" {
            let others: BTreeSet<&str> = v["other_sources"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|s| s["pmu"].as_str())
                .collect();
            let per_core = BTreeSet::from(["core_imc", "thread_imc", "trace_imc"]);
            assert_eq!(others, per_core, "{name}: the other sources");
        }
    }
}

#[test]
fn encode_matches_the_kernels_sysfs_encoding() {
    let Some(p) = power() else { return };
    let root = tree("power9-2chip");
    let mut events = Vec::new();
    let mut expected = Vec::new();
    for pmu in pmus(&root, "nest_mcs") {
        let pmu_name = pmu.file_name().unwrap().to_string_lossy().to_string();
        let pmu_type: u64 = read(&pmu.join("type")).parse().unwrap();
        let mut names: Vec<String> = std::fs::read_dir(pmu.join("events"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.contains("_128B_") && !n.contains('.'))
            .collect();
        names.sort();
        for n in names {
            let scale: f64 = read(&pmu.join("events").join(format!("{n}.scale")))
                .parse()
                .unwrap();
            events.push(format!("{pmu_name}/{n}/"));
            expected.push((pmu_type, sysfs_config(&pmu, &n), scale));
        }
    }
    // Read and write, ports 01 and 23, on each of the two MCS PMUs.
    assert_eq!(events.len(), 8, "{events:?}");
    let mut args = vec!["--root", root.to_str().unwrap(), "encode", "--json"];
    args.extend(events.iter().map(String::as_str));
    let out = both(&p, &args);
    let got: Vec<(u64, u64, f64)> = out
        .lines()
        .map(|l| {
            let v = json(l, "encode");
            (
                v["type"].as_u64().unwrap(),
                v["config"].as_u64().unwrap(),
                v["scale"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, expected, "{events:?}");
}

#[test]
fn every_dry_run_plans_every_mcs_channel_of_both_chips() {
    let Some(p) = power() else { return };
    let scratch = tempfile::tempdir().unwrap();
    let recording = scratch.path().join("run.imc");
    for name in TREES {
        let root = tree(name);
        // Each (pmu, direction)'s 128-byte dispatch events as the kernel encodes them, and
        // IBM's bytes per count (scale × 64).
        let mut kernel: BTreeMap<(String, &str), BTreeSet<u64>> = BTreeMap::new();
        let mut bytes = BTreeSet::new();
        for pmu in pmus(&root, "nest_mcs") {
            let pmu_name = pmu.file_name().unwrap().to_string_lossy().to_string();
            for (dir, tag) in [("read", "_128B_RD_DISP_"), ("write", "_128B_WR_DISP_")] {
                for e in std::fs::read_dir(pmu.join("events")).unwrap() {
                    let n = e.unwrap().file_name().to_string_lossy().to_string();
                    if n.contains(tag) && !n.contains('.') {
                        kernel
                            .entry((pmu_name.clone(), dir))
                            .or_default()
                            .insert(sysfs_config(&pmu, &n));
                        let scale: f64 = read(&pmu.join("events").join(format!("{n}.scale")))
                            .parse()
                            .unwrap();
                        bytes.insert((scale * 64.0) as u64);
                    }
                }
            }
        }
        let r = root.to_str().unwrap();
        let o = recording.to_str().unwrap();
        for command in [
            vec!["stat"],
            vec!["top"],
            vec!["record", "-o", o],
            vec!["serve"],
        ] {
            let what = format!("{name} {}", command[0]);
            let mut args = vec!["--root", r];
            args.extend(&command);
            args.push("--dry-run");
            let human = both(&p, &args);
            assert!(human.contains("source power-nest-imc"), "{what}: {human}");
            args.push("--json");
            let v = json(&both(&p, &args), &what);
            assert_eq!(v["source"], "power-nest-imc", "{what}");
            let traffic: Vec<&Value> = v["counters"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|c| c["role"] == "traffic")
                .collect();
            let mut channels = BTreeSet::new();
            let mut planned: BTreeMap<(String, &str), BTreeSet<u64>> = BTreeMap::new();
            for c in &traffic {
                let pmu = c["pmu"].as_str().unwrap().to_string();
                let dir = match c["direction"].as_str().unwrap() {
                    "read" => "read",
                    "write" => "write",
                    d => panic!("{what}: direction {d} in {c}"),
                };
                channels.insert((
                    c["package"].as_u64().unwrap(),
                    c["channel"].as_u64().unwrap(),
                    dir,
                ));
                let pmu_type: u64 = read(
                    &root
                        .join("sys/bus/event_source/devices")
                        .join(&pmu)
                        .join("type"),
                )
                .parse()
                .unwrap();
                assert_eq!(c["encoding"]["type"], pmu_type, "{what}: {c}");
                assert!(
                    bytes.contains(&(c["bytes_per_count"].as_f64().unwrap() as u64)),
                    "{what}: bytes per count {} is not scale × 64 ({bytes:?})",
                    c["bytes_per_count"]
                );
                planned
                    .entry((pmu, dir))
                    .or_default()
                    .insert(c["encoding"]["config"].as_u64().unwrap());
            }
            // Both chips (0 and 8), the four MCS channels of each, read and write: one counter each.
            let mut every = BTreeSet::new();
            for package in [0, 8] {
                for channel in 0..4 {
                    for dir in ["read", "write"] {
                        every.insert((package, channel, dir));
                    }
                }
            }
            assert_eq!(traffic.len(), every.len(), "{what}: {traffic:?}");
            assert_eq!(channels, every, "{what}");
            assert_eq!(planned, kernel, "{what}: configs against sysfs");
            assert!(!recording.exists(), "{what}: a dry run wrote {o}");
        }
    }
}

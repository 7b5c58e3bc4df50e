//! POWER users get a binary that is built and exercised: `cargo xtask test` cross-builds imc for
//! ppc64le (xtask/src/cross.rs) and these tests run that binary under qemu-user on the POWER9
//! fixture trees: `list`, `encode` and every command's `--dry-run`, each checked against the trees'
//! own sysfs files (the nest IMC PMUs, the MCS channels of both chips, the kernel's event encodings
//! and scales) and against the host build's output, byte for byte.
//!
//! Outside `cargo xtask test` (which builds the binary and names it in IMC_CROSS_POWER_BIN) the
//! tests skip, saying why, when the binary or qemu-ppc64le is missing; under xtask or in CI a
//! missing piece fails them.
use imc_tests::cross::{self, Cross, json, pmus, read};
use imc_tests::own_fixtures;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const TREES: [&str; 2] = ["power9-2chip", "power9-imc-full"];

fn tree(name: &str) -> PathBuf {
    own_fixtures().join(name)
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
    let Some(p) = Cross::find(&cross::POWER) else {
        return;
    };
    for name in TREES {
        let root = tree(name);
        let r = root.to_str().unwrap();
        p.both(&["--root", r, "list"]);
        let v = json(&p.both(&["--root", r, "list", "--json"]), name);
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
    let Some(p) = Cross::find(&cross::POWER) else {
        return;
    };
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
    let out = p.both(&args);
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
    let Some(p) = Cross::find(&cross::POWER) else {
        return;
    };
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
        for (what, human, v) in p.dry_runs(name, &root, &recording) {
            assert!(human.contains("source power-nest-imc"), "{what}: {human}");
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
        }
    }
}

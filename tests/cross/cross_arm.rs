//! Arm users get a binary that is built and exercised: `cargo xtask test` cross-builds imc for
//! aarch64 (xtask/src/cross.rs) and these tests run that binary under qemu-user on the Arm and
//! CXL fixture trees: `list`, `encode` and every command's `--dry-run`, each checked against the
//! trees' own sysfs files (the memory-side PMUs, their types, their cpumask CPUs) and against the
//! host build's output, byte for byte.
//!
//! Outside `cargo xtask test` (which builds the binary and names it in IMC_CROSS_ARM_BIN) the
//! tests skip, saying why, when the binary or qemu-aarch64 is missing; under xtask or in CI a
//! missing piece fails them.
use imc_tests::cross::{self, Cross, json, read};
use imc_tests::own_fixtures;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// (tree, backend, the PMU name prefix of its instances).
const TREES: [(&str, &str, &str); 6] = [
    ("grace-2socket", "nvidia-scf", "nvidia_scf_pmu_"),
    ("graviton3-64core", "arm-cmn", "arm_cmn_"),
    ("altra-1socket", "arm-dmc620", "arm_dmc620_"),
    ("kunpeng920-4die", "hisi-ddrc", "hisi_sccl"),
    ("ampereone-1socket", "ampere-mcu", "ampere_mcu_pmu_"),
    ("cxl-expander", "cxl-pmu", "cxl_pmu_mem"),
];

fn tree(name: &str) -> PathBuf {
    own_fixtures().join(name)
}

/// The PMU instances of a tree whose name starts with `prefix`: (name, type, cpumask CPU).
fn instances(root: &Path, prefix: &str) -> Vec<(String, u64, u64)> {
    let dir = root.join("sys/bus/event_source/devices");
    let mut out: Vec<(String, u64, u64)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().to_string(),
                read(&p.join("type")).parse().unwrap(),
                read(&p.join("cpumask")).parse().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn list_finds_every_memory_side_pmu_of_the_arm_trees() {
    let Some(a) = Cross::find(&cross::ARM) else {
        return;
    };
    for (name, backend, prefix) in TREES {
        let root = tree(name);
        let r = root.to_str().unwrap();
        a.both(&["--root", r, "list"]);
        let v = json(&a.both(&["--root", r, "list", "--json"]), name);
        let source = v["sources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["backend"] == backend && s["available"] == true)
            .unwrap_or_else(|| panic!("{name}: no available {backend}"));
        let mut found: Vec<(String, u64, u64)> = source["pmus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let cpus = p["cpus"].as_array().unwrap();
                assert_eq!(cpus.len(), 1, "{name}: {p}");
                (
                    p["name"].as_str().unwrap().to_string(),
                    p["type"].as_u64().unwrap(),
                    cpus[0].as_u64().unwrap(),
                )
            })
            .collect();
        found.sort();
        assert_eq!(
            found,
            instances(&root, prefix),
            "{name}: the PMUs sysfs has"
        );
    }
}

#[test]
fn encode_matches_the_drivers_sysfs_aliases() {
    let Some(a) = Cross::find(&cross::ARM) else {
        return;
    };
    // (tree, event, its type, the perf_event_attr word it sets and the value there).
    let cases = [
        (
            "grace-2socket",
            "nvidia_scf_pmu_1/cmem_rd_data/",
            21,
            "config",
            0x1a5,
        ),
        (
            "graviton3-64core",
            "arm_cmn_0/hnf_mc_reqs/",
            20,
            "config",
            0xd_0005,
        ),
        (
            "altra-1socket",
            "arm_dmc620_100010000/clkdiv2_rdwr/",
            30,
            "config2",
            0x12 << 3 | 1 << 9,
        ),
        (
            "kunpeng920-4die",
            "hisi_sccl5_ddrc2/flux_rd/",
            50,
            "config",
            1,
        ),
        (
            "ampereone-1socket",
            "ampere_mcu_pmu_7/wr_wra_sent/",
            27,
            "config",
            0x10,
        ),
        (
            "cxl-expander",
            "cxl_pmu_mem0.0/s2m_drs_memdata/",
            60,
            "config",
            0x1e98 << 48 | 0x25 << 32 | 1,
        ),
    ];
    for (name, event, ty, word, value) in cases {
        let root = tree(name);
        let out = a.both(&["--root", root.to_str().unwrap(), "encode", "--json", event]);
        let v = json(out.trim(), event);
        assert_eq!(v["type"], ty, "{event}: {v}");
        assert_eq!(v[word].as_u64(), Some(value), "{event}: {v}");
    }
}

/// Each tree's plans are checked on a thread of their own: each run is a debug aarch64 imc
/// under qemu-user and its host twin, 48 of each, and this test is the suite's last to finish.
#[test]
fn every_dry_run_plans_every_instance_on_its_cpumask_cpu() {
    let Some(a) = Cross::find(&cross::ARM) else {
        return;
    };
    std::thread::scope(|s| {
        for (name, backend, prefix) in TREES {
            let a = &a;
            s.spawn(move || plans_every_instance(a, name, backend, prefix));
        }
    });
}

/// Every command's dry run on tree `name` plans each `prefix` instance on its cpumask's CPU,
/// the same on aarch64 as on the host, and writes nothing.
fn plans_every_instance(a: &Cross, name: &str, backend: &str, prefix: &str) {
    let scratch = tempfile::tempdir().unwrap();
    let recording = scratch.path().join("run.imc");
    let root = tree(name);
    let expected: BTreeSet<(String, u64)> = instances(&root, prefix)
        .into_iter()
        .map(|(n, _, cpu)| (n, cpu))
        .collect();
    for (what, _, v) in a.dry_runs(name, &root, &recording) {
        let planned: BTreeSet<(String, u64)> = v["counters"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["role"] == "traffic" && c["pmu"].as_str().unwrap().starts_with(prefix))
            .map(|c| {
                assert!(c["limits"]["rule"].is_string(), "{what}: {c}");
                (
                    c["pmu"].as_str().unwrap().to_string(),
                    c["cpus"][0].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(planned, expected, "{what}: {backend}'s instances and CPUs");
    }
}

//! Arm servers and CXL memory on their fixture trees (tests/fixtures/gen_arm.py), through the
//! real binary: `--dry-run --json` names every memory-controller counter of every socket and
//! channel (or mesh), the CPU its driver lets imc read it on, and the driver's limits; a CXL
//! device is its own tier; an instance the tree does not allow is refused in one line and the
//! rest is planned.
use imc_tests::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A private copy of a fixture tree to change.
fn copy(tree: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ok = std::process::Command::new("cp")
        .arg("-a")
        .arg(own_fixtures().join(tree))
        .arg(dir.path().join("root"))
        .status()
        .unwrap()
        .success();
    assert!(ok, "copying {tree}");
    let root = dir.path().join("root");
    (dir, root)
}

fn plan(root: &Path, args: &[&str]) -> Value {
    run_json(
        imc()
            .arg("--root")
            .arg(root)
            .args(args)
            .args(["--dry-run", "--json"]),
    )
}

fn traffic(p: &Value) -> Vec<&Value> {
    p["counters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["role"] == "traffic")
        .collect()
}

/// The CPU a PMU instance's driver names in its cpumask.
fn cpumask(root: &Path, pmu: &str) -> u64 {
    let p = root
        .join("sys/bus/event_source/devices")
        .join(pmu)
        .join("cpumask");
    let t = std::fs::read_to_string(&p).unwrap();
    t.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{}: {t}", p.display()))
}

struct Case {
    tree: &'static str,
    source: &'static str,
    /// (package, channels) of the tree.
    channels: &'static [(u64, u64)],
    directions: &'static [&'static str],
    /// (event direction, config word, its value) of every instance.
    encoding: &'static [(&'static str, &'static str, u64)],
    bytes: &'static [(&'static str, f64)],
}

const CASES: [Case; 5] = [
    Case {
        tree: "grace-2socket",
        source: "nvidia-scf",
        channels: &[(0, 1), (1, 1)],
        directions: &["read", "write"],
        encoding: &[("read", "config", 0x1a5), ("write", "config", 0x1db)],
        bytes: &[("read", 32.0), ("write", 1.0)],
    },
    Case {
        tree: "graviton3-64core",
        source: "arm-cmn",
        channels: &[(0, 1)],
        directions: &["total"],
        // type 0x5 | eventid 0xd << 16, bynodeid (bit 31) clear.
        encoding: &[("total", "config", 0xd_0005)],
        bytes: &[("total", 64.0)],
    },
    Case {
        tree: "altra-1socket",
        source: "arm-dmc620",
        channels: &[(0, 8)],
        directions: &["total"],
        // event 0x12 into config2:3-8, clkdiv2 into config2:9.
        encoding: &[("total", "config2", 0x12 << 3 | 1 << 9)],
        bytes: &[("total", 64.0)],
    },
    Case {
        tree: "kunpeng920-4die",
        source: "hisi-ddrc",
        channels: &[(0, 8), (1, 8)],
        directions: &["read", "write"],
        encoding: &[("read", "config", 1), ("write", "config", 0)],
        bytes: &[("read", 32.0), ("write", 32.0)],
    },
    Case {
        tree: "ampereone-1socket",
        source: "ampere-mcu",
        channels: &[(0, 8)],
        directions: &["read", "write"],
        encoding: &[("read", "config", 0xf), ("write", "config", 0x10)],
        bytes: &[("read", 64.0), ("write", 64.0)],
    },
];

#[test]
fn every_arm_tree_plans_every_channel_on_the_cpu_its_driver_allows() {
    for case in &CASES {
        let root = own_fixtures().join(case.tree);
        for command in ["stat", "top", "record", "serve"] {
            let p = plan(&root, &[command]);
            let what = format!("{} {command}", case.tree);
            assert_eq!(p["source"], case.source, "{what}");
            let counters = traffic(&p);
            let want: u64 =
                case.channels.iter().map(|(_, n)| n).sum::<u64>() * case.directions.len() as u64;
            assert_eq!(counters.len() as u64, want, "{what}");
            let mut seen = BTreeSet::new();
            for c in &counters {
                let pmu = c["pmu"].as_str().unwrap();
                let dir = c["direction"].as_str().unwrap();
                // Opened on its driver's CPU only, and read there (or by userspace).
                assert_eq!(
                    c["cpus"],
                    serde_json::json!([cpumask(&root, pmu)]),
                    "{what}: {c}"
                );
                let reader = &c["reader"];
                match reader["kind"].as_str().unwrap() {
                    "package-tick" => assert_eq!(reader["cpus"], c["cpus"], "{what}: {c}"),
                    "userspace" => {}
                    other => panic!("{what}: reader {other}: {c}"),
                }
                let limits = &c["limits"]["rule"];
                assert!(
                    limits.as_str().is_some_and(|r| !r.is_empty()),
                    "{what}: {c}"
                );
                // A mesh's count covers every home node, and its rule says why not one each.
                if case.source == "arm-cmn" {
                    let rule = limits.as_str().unwrap();
                    assert!(
                        rule.contains("whole mesh") && rule.contains("per home node"),
                        "{what}: {rule}"
                    );
                }
                assert!(
                    c.get("tier").is_none(),
                    "{what}: DRAM has no tier field: {c}"
                );
                let (_, word, value) = case.encoding.iter().find(|e| e.0 == dir).unwrap();
                assert_eq!(c["encoding"][*word].as_u64(), Some(*value), "{what}: {c}");
                let (_, bytes) = case.bytes.iter().find(|b| b.0 == dir).unwrap();
                assert_eq!(c["bytes_per_count"].as_f64(), Some(*bytes), "{what}: {c}");
                seen.insert((c["package"].as_u64().unwrap(), c["channel"].as_u64(), dir));
            }
            for &(pkg, n) in case.channels {
                for ch in 0..n {
                    for dir in case.directions {
                        let channel = (n > 1).then_some(ch);
                        assert!(
                            seen.contains(&(pkg, channel, *dir)),
                            "{what}: {pkg}/{ch}/{dir}"
                        );
                    }
                }
            }
            // Nothing of the memory side is refused (the core's stall table may be).
            for r in refusals(&p) {
                assert!(!r.starts_with(case.source), "{what}: {r}");
            }
            if command != "stat" {
                check_weights(&p, &what);
            }
        }
    }
}

/// Neoverse, AmpereOne and TSV110 cores weigh by their L2's read refills and victim
/// write-backs (0x52, 0x56), read by each CPU for itself.
fn check_weights(p: &Value, what: &str) {
    let w = &p["weighting"];
    assert_eq!(w["method"], "traffic", "{what}: {w}");
    assert_eq!(w["read"], "L2D_CACHE_REFILL_RD", "{what}: {w}");
    assert_eq!(w["write"], "L2D_CACHE_WB_VICTIM", "{what}: {w}");
    let weights: Vec<&Value> = p["counters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["role"] == "weight")
        .collect();
    let configs: BTreeSet<u64> = weights
        .iter()
        .map(|c| c["encoding"]["config"].as_u64().unwrap())
        .collect();
    assert_eq!(configs, BTreeSet::from([0x52, 0x56]), "{what}");
    for c in weights {
        assert_eq!(c["pmu"], "armv8_pmuv3_0", "{what}: {c}");
        assert_eq!(c["reader"]["kind"], "tick", "{what}: {c}");
    }
}

#[test]
fn the_dmc620_plan_states_its_one_event_per_group() {
    let p = plan(&own_fixtures().join("altra-1socket"), &["top"]);
    for c in traffic(&p) {
        assert_eq!(c["limits"]["events_per_group"], 1, "{c}");
        assert_eq!(c["limits"]["counter_bits"], 32, "{c}");
    }
    let text = imc()
        .arg("--root")
        .arg(own_fixtures().join("altra-1socket"))
        .args(["top", "--dry-run"])
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    let limits: Vec<&str> = text.lines().filter(|l| l.starts_with("limits:")).collect();
    assert_eq!(limits.len(), 1, "{text}");
    assert!(limits[0].contains("arm_dmc620_1001d0000") && limits[0].contains("one"));
}

#[test]
fn a_cxl_device_is_a_tier_of_its_own_beside_dram() {
    let root = own_fixtures().join("cxl-expander");
    for command in ["stat", "top", "record", "serve"] {
        let p = plan(&root, &[command]);
        assert_eq!(p["source"], "intel-uncore-imc", "{command}");
        let counters = traffic(&p);
        let cxl: Vec<&&Value> = counters.iter().filter(|c| c["tier"] == "cxl").collect();
        let dram = counters.iter().filter(|c| c.get("tier").is_none()).count();
        assert_eq!(dram, 4, "{command}: two channels, read and write");
        let dirs: BTreeSet<&str> = cxl
            .iter()
            .map(|c| c["direction"].as_str().unwrap())
            .collect();
        assert_eq!(dirs, BTreeSet::from(["read", "write"]), "{command}");
        for c in &cxl {
            assert_eq!(c["pmu"], "cxl_pmu_mem0.0");
            assert_eq!(c["package"], 0);
            assert_eq!(c["cpus"], serde_json::json!([0]));
            let config = c["encoding"]["config"].as_u64().unwrap();
            // CXL vendor id 0x1e98 in config:48-63; S2M DRS (0x25) or M2S RwD (0x21).
            assert_eq!(config >> 48, 0x1e98, "{c}");
            let gid = (config >> 32) & 0xffff;
            assert_eq!(
                gid,
                if c["direction"] == "read" { 0x25 } else { 0x21 },
                "{c}"
            );
        }
        let notes: Vec<&str> = p["notes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n.as_str())
            .collect();
        assert!(
            notes
                .iter()
                .any(|n| n.contains("cxl_pmu_mem0.0 on NUMA node 1")),
            "{command}: {notes:?}"
        );
        let says_weights = notes.iter().any(|n| n.contains("DRAM weights"));
        assert_eq!(says_weights, command != "stat", "{command}: {notes:?}");
        if command != "stat" {
            // Its own slots: CXL bytes are never summed with DRAM's.
            let slots: Vec<&str> = p["slots"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|s| s["event"].as_str())
                .collect();
            assert!(
                slots.contains(&"cxl_read") && slots.contains(&"read"),
                "{slots:?}"
            );
        }
    }
}

/// The plan's refusals of memory-side PMUs (not the core PMU's weights or stall counters),
/// each checked to be one line.
fn refusals(p: &Value) -> Vec<String> {
    let out: Vec<String> = p["refusals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["reason"].as_str().unwrap().to_string())
        .filter(|r| !r.starts_with("weights on ") && !r.starts_with("stalls on "))
        .collect();
    for r in &out {
        assert!(!r.contains('\n'), "one line: {r}");
    }
    out
}

#[test]
fn a_ddrc_whose_cpumask_names_an_offline_cpu_is_refused_and_the_rest_planned() {
    let (_d, root) = copy("kunpeng920-4die");
    std::fs::write(root.join("sys/devices/hisi_sccl3_ddrc2/cpumask"), "95\n").unwrap();
    let p = plan(&root, &["top"]);
    let r = refusals(&p);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(
        r[0].starts_with("hisi-ddrc:")
            && r[0].contains("hisi_sccl3_ddrc2/cpumask")
            && r[0].contains("offline"),
        "{r:?}"
    );
    let counters = traffic(&p);
    assert_eq!(counters.len(), 30, "the other 15 channels");
    assert!(counters.iter().all(|c| c["pmu"] != "hisi_sccl3_ddrc2"));
}

#[test]
fn a_cmn_without_the_node_filter_is_refused_and_the_rest_planned() {
    // Altra: the mesh is refused, its DMC-620 channels still planned.
    let (_d, root) = copy("altra-1socket");
    std::fs::remove_file(root.join("sys/devices/arm_cmn_0/format/bynodeid")).unwrap();
    let p = plan(&root, &["top"]);
    assert_eq!(p["source"], "arm-dmc620");
    let r = refusals(&p);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(
        r[0].starts_with("arm-cmn:") && r[0].contains("format/bynodeid"),
        "{r:?}"
    );
    assert_eq!(traffic(&p).len(), 8);
    // Graviton: the mesh is all there is, so the plan says why and falls back to a stand-in.
    let (_d, root) = copy("graviton3-64core");
    std::fs::remove_file(root.join("sys/devices/arm_cmn_0/format/nodeid")).unwrap();
    let p = plan(&root, &["stat"]);
    assert!(
        p["source"].as_str().unwrap().starts_with("proxy:"),
        "{}",
        p["source"]
    );
    let r = refusals(&p);
    assert!(
        r.iter().any(|r| r.contains("arm_cmn_0/format/nodeid")),
        "{r:?}"
    );
}

#[test]
fn an_unknown_event_refuses_its_instance_and_the_rest_is_planned() {
    let (_d, root) = copy("grace-2socket");
    let ev = root.join("sys/devices/nvidia_scf_pmu_1/events/cmem_rd_data");
    std::fs::write(&ev, "event=0x1a5,no_such_term=0x1\n").unwrap();
    let p = plan(&root, &["record"]);
    let r = refusals(&p);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(
        r[0].starts_with("nvidia-scf:") && r[0].contains("nvidia_scf_pmu_1"),
        "{r:?}"
    );
    let counters = traffic(&p);
    assert_eq!(counters.len(), 2);
    assert!(counters.iter().all(|c| c["pmu"] == "nvidia_scf_pmu_0"));
    // An event the driver does not export at all: the same.
    std::fs::remove_file(&ev).unwrap();
    let r = refusals(&plan(&root, &["record"]));
    assert!(
        r.len() == 1 && r[0].contains("no event cmem_rd_data"),
        "{r:?}"
    );
}

#[test]
fn a_cxl_device_without_a_node_is_refused_and_dram_planned() {
    let (_d, root) = copy("cxl-expander");
    std::fs::write(root.join("sys/bus/cxl/devices/mem0/numa_node"), "-1\n").unwrap();
    let p = plan(&root, &["top"]);
    let r = refusals(&p);
    let cxl: Vec<&String> = r.iter().filter(|r| r.starts_with("cxl-pmu:")).collect();
    assert_eq!(cxl.len(), 1, "{r:?}");
    assert!(
        cxl[0].contains("mem0/numa_node") && cxl[0].contains("NUMA node"),
        "{r:?}"
    );
    let counters = traffic(&p);
    assert_eq!(counters.len(), 4);
    assert!(counters.iter().all(|c| c.get("tier").is_none()));
}

#[test]
fn list_names_the_arm_and_cxl_backends() {
    for (tree, backend) in [
        ("grace-2socket", "nvidia-scf"),
        ("graviton3-64core", "arm-cmn"),
        ("altra-1socket", "arm-dmc620"),
        ("kunpeng920-4die", "hisi-ddrc"),
        ("ampereone-1socket", "ampere-mcu"),
        ("cxl-expander", "cxl-pmu"),
    ] {
        let o = run_ok(
            imc()
                .arg("--root")
                .arg(own_fixtures().join(tree))
                .args(["list", "--json"]),
        );
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let text = v.to_string();
        assert!(text.contains(&format!("\"{backend}\"")), "{tree}");
    }
}

#[test]
fn list_names_each_arm_core_from_its_midr() {
    for (tree, cpu) in [
        (
            "grace-2socket",
            "Arm Neoverse V2 [implementer 0x41, part 0xd4f]",
        ),
        (
            "graviton3-64core",
            "Arm Neoverse V1 [implementer 0x41, part 0xd40]",
        ),
        (
            "altra-1socket",
            "Arm Neoverse N1 [implementer 0x41, part 0xd0c]",
        ),
        (
            "kunpeng920-4die",
            "HiSilicon TSV110 (Kunpeng 920) [implementer 0x48, part 0xd01]",
        ),
        (
            "ampereone-1socket",
            "Ampere AmpereOne [implementer 0xc0, part 0xac3]",
        ),
    ] {
        let o = run_ok(
            imc()
                .arg("--root")
                .arg(own_fixtures().join(tree))
                .arg("list"),
        );
        let text = String::from_utf8_lossy(&o.stdout);
        let first = text.lines().next().unwrap_or("");
        assert!(
            first.starts_with(&format!("machine: {cpu}, ")),
            "{tree}: {first}"
        );
    }
    // A part imc has no name for keeps its numbers rather than a guess.
    let (_d, root) = copy("grace-2socket");
    let cpuinfo = root.join("proc/cpuinfo");
    let text = std::fs::read_to_string(&cpuinfo).unwrap();
    std::fs::write(&cpuinfo, text.replace("0xd4f", "0xd99")).unwrap();
    let o = imc().arg("--root").arg(&root).arg("list").output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.starts_with("machine: Arm core unknown to imc [implementer 0x41, part 0xd99], "),
        "{text}"
    );
}

/// On Linux 6.7+ any CPU of a package may read Intel's uncore counters, but no other CPU than
/// its own may read a CXL device's: a package holding both is read on that one CPU.
#[test]
fn a_cxl_device_keeps_its_package_read_on_its_own_cpu() {
    let (_d, root) = copy("cxl-expander");
    let release = root.join("proc/sys/kernel/osrelease");
    std::fs::create_dir_all(release.parent().unwrap()).unwrap();
    std::fs::write(&release, "6.8.0-45-generic\n").unwrap();
    let readers = |p: &Value| -> BTreeSet<String> {
        traffic(p)
            .iter()
            .map(|c| c["reader"]["cpus"].to_string())
            .collect()
    };
    let p = plan(&root, &["top"]);
    assert_eq!(
        readers(&p),
        BTreeSet::from(["[0]".to_string()]),
        "{}",
        p["counters"]
    );
    // Without the device, the uncore counters are read by any CPU of the package.
    std::fs::remove_file(root.join("sys/bus/event_source/devices/cxl_pmu_mem0.0")).unwrap();
    let p = plan(&root, &["top"]);
    assert_eq!(
        readers(&p),
        BTreeSet::from(["[0,1,2,3]".to_string()]),
        "{}",
        p["counters"]
    );
}

/// `imc serve --dry-run` on the CXL tree: the device's counters say their tier, the label every
/// series carries beside package, channel and direction (the family names stay).
#[test]
fn serve_labels_the_cxl_device_with_its_tier() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = busy.local_addr().unwrap().to_string();
    let o = run_ok(
        imc()
            .arg("--root")
            .arg(own_fixtures().join("cxl-expander"))
            .args(["serve", "--dry-run", "--listen", &listen]),
    );
    let text = String::from_utf8_lossy(&o.stdout);
    let slots: Vec<&str> = text
        .lines()
        .filter(|l| l.ends_with("-> imc_dram_bytes_total"))
        .collect();
    assert_eq!(slots.len(), 6, "{text}");
    // The CXL device's two counters name their tier; DRAM's, the default, say nothing.
    for l in &slots {
        let cxl = l.contains("(channel cxl_pmu_mem0.0,");
        assert_eq!(l.contains(", tier cxl)"), cxl, "{l}");
        assert!(!l.contains("tier dram"), "{l}");
    }
    assert_eq!(slots.iter().filter(|l| l.contains("tier cxl")).count(), 2);
}

/// A recording of the CXL tree's package slots (its plan's record slots), each interval's
/// tiers as the attributor makes them, read back by `imc report`: the package's totals are
/// both tiers, JSON `tiers` and the text's `tier` lines each apart. The same recording without
/// the CXL slots has no tiers at all.
#[test]
fn report_shows_each_tier_of_a_recording_of_cxl_memory() {
    use imc::model::result::{IntervalResult, PackageRow};
    use imc::model::{Direction, Package, SlotRole, SlotScope, SlotSpec, Topology};
    use imc::record::{RecordHeader, Writer};
    let p = plan(&own_fixtures().join("cxl-expander"), &["record"]);
    let keys: Vec<&str> = p["slots"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["role"] == "traffic")
        .map(|s| s["event"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["read", "write", "cxl_read", "cxl_write"], "{p}");
    let spec = |event: &str| SlotSpec {
        event: event.into(),
        scope: SlotScope::Package,
        role: SlotRole::Traffic(if event.ends_with("read") {
            Direction::Read
        } else {
            Direction::Write
        }),
        bytes_per_count: Some(64.0),
        counter_bits: 48,
    };
    let topo = Topology {
        packages: vec![Package {
            id: 0,
            cpus: vec![0, 1, 2, 3],
        }],
        ..Topology::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let record = |name: &str, keys: &[&str]| {
        let specs: Vec<SlotSpec> = keys.iter().map(|k| spec(k)).collect();
        let path = dir.path().join(name);
        let header = RecordHeader::new(&specs, &topo, 250, "intel-uncore-imc", 1_000_000_000);
        let mut w = Writer::create(&path, header, None).unwrap();
        // Lines a second: DRAM 1000 read and 200 written, CXL 3000 read and 100 written.
        let counts = [1000.0, 200.0, 3000.0, 100.0];
        for i in 0..3u64 {
            let counts = &counts[..specs.len()];
            let mut all = [0.0; imc_common::MAX_SLOTS];
            all[..counts.len()].copy_from_slice(counts);
            let (read_bytes, write_bytes, total_bytes) = imc::attribution::bytes_of(&specs, &all);
            w.push_interval(&IntervalResult {
                t_start_ns: i * 1_000_000_000,
                t_end_ns: (i + 1) * 1_000_000_000,
                source: "intel-uncore-imc".into(),
                packages: vec![PackageRow {
                    id: 0,
                    read_bytes,
                    write_bytes,
                    total_bytes,
                    tiers: imc::attribution::tier_bytes(&specs, counts),
                    ..PackageRow::default()
                }],
                ..IntervalResult::default()
            })
            .unwrap();
        }
        w.finish().unwrap();
        path
    };
    let report = |path: &Path, json: bool| {
        let mut cmd = imc();
        cmd.arg("report").arg(path);
        if json {
            cmd.arg("--json");
        }
        let o = run_ok(&mut cmd);
        String::from_utf8(o.stdout).unwrap()
    };
    let cxl = record("cxl.imc", &keys);
    let v: Value = serde_json::from_str(&report(&cxl, true)).unwrap();
    let pkg = &v["packages"][0];
    assert_eq!(pkg["read_bytes"], 3 * 4000 * 64, "{pkg}");
    let tiers: Vec<(String, u64, u64)> = pkg["tiers"]
        .as_array()
        .unwrap_or_else(|| panic!("no tiers: {pkg}"))
        .iter()
        .map(|t| {
            let n = |k: &str| t[k].as_u64().unwrap();
            (
                t["tier"].as_str().unwrap().to_string(),
                n("read_bytes"),
                n("write_bytes"),
            )
        })
        .collect();
    assert_eq!(
        tiers,
        [
            ("dram".to_string(), 3 * 1000 * 64, 3 * 200 * 64),
            ("cxl".to_string(), 3 * 3000 * 64, 3 * 100 * 64)
        ]
    );
    let text = report(&cxl, false);
    let line = |tier: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("tier {tier}:")))
            .unwrap_or_else(|| panic!("no tier {tier} line in:\n{text}"))
            .to_string()
    };
    // 3000 lines of 64 bytes a second: 192,000 B/s, 187.5 KiB/s.
    assert!(line("cxl").contains("(187.50 KiB/s)"), "{text}");
    line("dram");
    // The Perfetto trace has each tier's counter tracks beside the package's totals.
    let tracks = |path: &Path| -> Vec<String> {
        use imc::output::perfetto_proto::Trace;
        use protobuf::Message;
        let out = dir.path().join("t.pftrace");
        run_ok(
            imc()
                .arg("report")
                .arg(path)
                .arg("--perfetto")
                .arg(&out)
                .arg("--force"),
        );
        let t = Trace::parse_from_bytes(&std::fs::read(&out).unwrap()).unwrap();
        t.packet
            .iter()
            .filter(|p| p.has_track_descriptor())
            .map(|p| p.track_descriptor())
            .map(|d| d.name().to_string())
            .filter(|n| n.starts_with("package "))
            .collect()
    };
    let with_tiers = tracks(&cxl);
    for name in [
        "package 0 read",
        "package 0 dram read",
        "package 0 dram write",
        "package 0 cxl read",
        "package 0 cxl write",
    ] {
        assert!(
            with_tiers
                .iter()
                .any(|t| t.starts_with(&format!("{name} ("))),
            "no track {name} in {with_tiers:?}"
        );
    }
    let plain = record("dram.imc", &keys[..2]);
    let v: Value = serde_json::from_str(&report(&plain, true)).unwrap();
    assert!(v["packages"][0].get("tiers").is_none(), "{v}");
    assert!(!report(&plain, false).contains("tier "));
    let without = tracks(&plain);
    assert_eq!(
        without.len(),
        2,
        "one track a direction, no tier's: {without:?}"
    );
}

/// A Grace pair whose resctrl is MPAM's (the tree's copy with resctrl mounted, as an arm64
/// kernel with the MPAM driver shows it: `mbm_total_bytes` alone in `info/L3_MON/mon_features`,
/// one `mon_L3_<cache-id>` per socket's L3): `validate --dry-run` plans the MBM cross-check as
/// it does on x86, naming MPAM; with fewer monitor groups than its workloads need, it says so
/// and plans no MBM bound.
#[test]
fn validate_cross_checks_against_mpam_where_resctrl_is_backed_by_it() {
    let (_dir, root) = copy("grace-2socket");
    std::fs::create_dir_all(root.join("proc/self")).unwrap();
    std::fs::write(
        root.join("proc/self/mountinfo"),
        "22 1 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n\
         40 22 0:38 / /sys/fs/resctrl rw,relatime shared:20 - resctrl resctrl rw\n",
    )
    .unwrap();
    let resctrl = root.join("sys/fs/resctrl");
    let mon = resctrl.join("info/L3_MON");
    std::fs::create_dir_all(&mon).unwrap();
    std::fs::write(mon.join("mon_features"), "llc_occupancy\nmbm_total_bytes\n").unwrap();
    for cache_id in [0, 1] {
        let d = resctrl.join(format!("mon_data/mon_L3_{cache_id:02}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("mbm_total_bytes"), "0\n").unwrap();
    }
    std::fs::create_dir_all(resctrl.join("mon_groups")).unwrap();
    let dry = |rmids: u32| -> Value {
        std::fs::write(mon.join("num_rmids"), format!("{rmids}\n")).unwrap();
        let o = run_ok(
            imc()
                .arg("--root")
                .arg(&root)
                .args(["validate", "--dry-run", "--json"]),
        );
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let mbm_bound = |v: &Value| {
        v["bounds"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["figure"] == "mbm")
    };
    let v = dry(64);
    let reason = v["mbm"]["reason"].as_str().unwrap();
    assert_eq!(v["mbm"]["available"], true, "{reason}");
    assert!(reason.contains("mbm_total_bytes"), "{reason}");
    assert!(reason.contains("Arm MPAM"), "{reason}");
    assert!(!reason.contains("mbm_local_bytes"), "{reason}");
    assert!(mbm_bound(&v), "{v}");
    // MPAM with two PMGs: room for one group beside the default one, not one per workload.
    let workloads = v["workloads"].as_array().unwrap().len();
    let v = dry(2);
    let reason = v["mbm"]["reason"].as_str().unwrap();
    assert_eq!(v["mbm"]["available"], false, "{reason}");
    assert!(reason.contains("num_rmids is 2"), "{reason}");
    assert!(
        reason.contains(&format!("{workloads} workloads")),
        "{reason}"
    );
    assert!(!mbm_bound(&v), "{v}");
}

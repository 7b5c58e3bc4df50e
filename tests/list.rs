//! End-to-end tests of `imc list`: the real binary against every fixture root of tests/fixtures,
//! asserting the PMU types, designated CPUs and exact config integers the READMEs state, and
//! that bad input fails with exit 2 and one line on stderr naming the file.
use imc_tests::{imc, own_fixtures, shared_fixtures};
use serde_json::Value;
use std::path::{Path, PathBuf};

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(root: &Path, args: &[&str]) -> Out {
    let o = imc()
        .arg("--root")
        .arg(root)
        .arg("list")
        .args(args)
        .output()
        .expect("run imc");
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn json(root: &Path) -> Value {
    let o = run(root, &["--json"]);
    assert_eq!(o.code, 0, "imc list --json failed: {}", o.stderr);
    assert!(o.stderr.is_empty(), "stderr not empty: {}", o.stderr);
    serde_json::from_str(&o.stdout).expect("valid JSON")
}

fn own(name: &str) -> PathBuf {
    own_fixtures().join(name)
}

fn source<'a>(v: &'a Value, backend: &str) -> &'a Value {
    v["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .find(|s| s["backend"] == backend)
        .unwrap_or_else(|| panic!("no source {backend}"))
}

fn available(v: &Value, backend: &str) -> bool {
    source(v, backend)["available"]
        .as_bool()
        .expect("available")
}

/// (name, type, cpus) of every PMU of a source.
fn pmus(s: &Value) -> Vec<(String, u64, Vec<u64>)> {
    s["pmus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["type"].as_u64().unwrap(),
                p["cpus"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c.as_u64().unwrap())
                    .collect(),
            )
        })
        .collect()
}

/// Configs of the events named `name` on PMU `pmu`.
fn configs(s: &Value, pmu: &str, name: &str) -> Vec<u64> {
    s["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["pmu"] == pmu && e["name"] == name)
        .map(|e| e["config"].as_u64().expect("config"))
        .collect()
}

fn all_bytes_per_count(s: &Value) -> Vec<f64> {
    s["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["bytes_per_count"].as_f64().expect("bytes_per_count"))
        .collect()
}

fn uncore_pmus(
    types: std::ops::Range<u64>,
    cpus: &[u64],
    ids: &[u32],
) -> Vec<(String, u64, Vec<u64>)> {
    ids.iter()
        .zip(types)
        .map(|(i, t)| (format!("uncore_imc_{i}"), t, cpus.to_vec()))
        .collect()
}

fn assert_cas(s: &Value, pmu_names: &[String], read: u64, write: u64) {
    for p in pmu_names {
        assert_eq!(configs(s, p, "read"), vec![read], "read on {p}");
        assert_eq!(configs(s, p, "write"), vec![write], "write on {p}");
    }
    assert_eq!(s["events"].as_array().unwrap().len(), pmu_names.len() * 2);
    assert!(all_bytes_per_count(s).iter().all(|&b| b == 64.0));
}

#[test]
fn skx_2socket_uncore_imc() {
    let v = json(&own("skx-2socket"));
    assert_eq!(v["hypervisor"], false);
    let pk = v["packages"].as_array().unwrap();
    assert_eq!(pk.len(), 2);
    assert_eq!(pk[0]["id"], 0);
    assert_eq!(pk[1]["id"], 1);
    assert_eq!(pk[1]["cpus"][0], 20);
    assert_eq!(pk[0]["cpus"].as_array().unwrap().len(), 40);
    let s = source(&v, "intel-uncore-imc");
    assert_eq!(s["available"], true);
    assert_eq!(pmus(s), uncore_pmus(13..19, &[0, 20], &[0, 1, 2, 3, 4, 5]));
    let names: Vec<String> = (0..6).map(|i| format!("uncore_imc_{i}")).collect();
    assert_cas(s, &names, 0x0304, 0x0c04);
    // The JSON contract: exactly these fields on a perf event.
    let e = &s["events"][0];
    let mut keys: Vec<&str> = e.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        ["bytes_per_count", "config", "config1", "name", "pmu"]
    );
    assert_eq!(e["config1"], 0);
    assert!(!available(&v, "intel-client-imc"));
    assert!(!available(&v, "knl-imc"));
}

#[test]
fn human_table_shows_pmus_types_cpus_and_configs() {
    let o = run(&own("skx-2socket"), &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("intel-uncore-imc     available"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("uncore_imc_5"));
    assert!(o.stdout.contains("type 18"));
    assert!(o.stdout.contains("cpus 0,20"));
    assert!(o.stdout.contains("config 0x304"));
    assert!(o.stdout.contains("64 B/count"));
    assert!(o.stdout.contains("amd-umc              unavailable: "));
}

#[test]
fn icl_client_imc_and_mchbar() {
    let v = json(&own("icl-client"));
    let s = source(&v, "intel-client-imc");
    assert_eq!(s["available"], true);
    assert_eq!(pmus(s), vec![("uncore_imc".to_string(), 12, vec![0])]);
    assert_eq!(configs(s, "uncore_imc", "read"), vec![1]);
    assert_eq!(configs(s, "uncore_imc", "write"), vec![2]);
    assert!(!available(&v, "intel-uncore-imc"));

    let m = source(&v, "intel-client-mchbar");
    assert_eq!(m["available"], true, "{m}");
    let ev = m["events"].as_array().unwrap();
    let addr = |name: &str| {
        ev.iter()
            .find(|e| e["name"] == name)
            .map(|e| (e["address"].as_u64().unwrap(), e["width"].as_u64().unwrap()))
    };
    assert_eq!(addr("read"), Some((0xfed1_5050, 32)));
    assert_eq!(addr("write"), Some((0xfed1_5054, 32)));
    // mchbar events carry address/width instead of config.
    assert!(ev.iter().all(|e| e.get("config").is_none()));
}

#[test]
fn knl_ddr_and_mcdram() {
    let v = json(&own("knl"));
    assert!(!available(&v, "intel-uncore-imc"));
    let imc = source(&v, "knl-imc");
    assert_eq!(pmus(imc), uncore_pmus(14..20, &[0], &[0, 1, 2, 3, 4, 5]));
    let names: Vec<String> = (0..6).map(|i| format!("uncore_imc_{i}")).collect();
    assert_cas(imc, &names, 0x0103, 0x0203);
    let edc = source(&v, "knl-edc");
    assert_eq!(edc["available"], true);
    let p = pmus(edc);
    assert_eq!(p.len(), 8);
    assert_eq!(p[0], ("uncore_edc_eclk_0".to_string(), 28, vec![0]));
    let names: Vec<String> = (0..8).map(|i| format!("uncore_edc_eclk_{i}")).collect();
    assert_cas(edc, &names, 0x0101, 0x0102);
    // The MCDRAM node has no CPUs and is still listed.
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[1]["id"], 1);
    assert_eq!(nodes[1]["cpus"].as_array().unwrap().len(), 0);
}

#[test]
fn power9_nest_one_event_per_chip() {
    let v = json(&own("power9-2chip"));
    let ids: Vec<u64> = v["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [0, 8]);
    let nodes: Vec<u64> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_u64().unwrap())
        .collect();
    assert_eq!(nodes, [0, 8]);
    let s = source(&v, "power-nest-imc");
    assert_eq!(s["available"], true);
    assert_eq!(
        pmus(s),
        vec![
            ("nest_mcs01_imc".to_string(), 20, vec![0, 64]),
            ("nest_mcs23_imc".to_string(), 21, vec![0, 64]),
        ]
    );
    let mut rd = configs(s, "nest_mcs01_imc", "read");
    rd.sort();
    assert_eq!(rd, [0xd0, 0xf0]);
    let mut wr = configs(s, "nest_mcs23_imc", "write");
    wr.sort();
    assert_eq!(wr, [0x58, 0x78]);
    // No MBA events alongside: that would count the same traffic twice.
    assert!(
        s["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["pmu"] != "nest_mba0_imc")
    );
    // IBM's recipe: scaled count (× 256) × 64 bytes.
    assert!(all_bytes_per_count(s).iter().all(|&b| b == 256.0 * 64.0));
}

#[test]
fn vm_guest_reports_no_backend_without_errors() {
    let v = json(&own("vm-guest"));
    assert_eq!(v["hypervisor"], true);
    for s in v["sources"].as_array().unwrap() {
        let b = s["backend"].as_str().unwrap();
        if b == "msr" || b == "software" {
            assert_eq!(s["available"], true, "{b}");
            continue;
        }
        assert_eq!(s["available"], false, "{b}");
        assert!(
            s["reason"].as_str().unwrap().contains("hypervisor"),
            "{b}: {}",
            s["reason"]
        );
    }
    let msr = source(&v, "msr");
    assert_eq!(pmus(msr), vec![("msr".to_string(), 8, vec![0, 1, 2, 3])]);
    assert_eq!(configs(msr, "msr", "tsc"), [0]);
    let sw = source(&v, "software");
    assert_eq!(configs(sw, "software", "page-faults"), [2]);
    assert_eq!(pmus(sw)[0].1, 1);

    let o = run(&own("vm-guest"), &[]);
    assert_eq!(o.code, 0);
    assert!(o.stderr.is_empty(), "{}", o.stderr);
    assert!(o.stdout.contains("no memory-bandwidth backend available"));
}

#[test]
fn spr_split_umask_and_aliases() {
    let v = json(&own("spr-2socket"));
    let s = source(&v, "intel-uncore-imc");
    let ids: Vec<u32> = (0..8).collect();
    assert_eq!(pmus(s), uncore_pmus(40..48, &[0, 4], &ids));
    let names: Vec<String> = (0..8).map(|i| format!("uncore_imc_{i}")).collect();
    assert_cas(s, &names, 0xcf05, 0xf005);
}

#[test]
fn spr_split_umask_encodes_high_bits_through_the_library() {
    let pmu = imc::discovery::read_pmu(&own("spr-2socket"), "uncore_imc_0").unwrap();
    assert_eq!(pmu.formats["umask"].bits, vec![8..=15, 32..=55]);
    let w = imc::discovery::encode_terms(&pmu, "event=0x05,umask=0x1cf").unwrap();
    assert_eq!(w.config, 0x1_0000_cf05);
}

#[test]
fn icx_gapped_numbering_and_free_running_ignored() {
    let v = json(&own("icx-gaps"));
    let s = source(&v, "intel-uncore-imc");
    let ids = [0, 1, 3, 4, 6, 7, 9, 10];
    assert_eq!(pmus(s), uncore_pmus(30..38, &[0, 4], &ids));
    let names: Vec<String> = ids.iter().map(|i| format!("uncore_imc_{i}")).collect();
    assert_cas(s, &names, 0x0f04, 0x3004);
    assert!(!available(&v, "intel-client-imc"));
}

#[test]
fn skx_without_events_uses_raw_encodings_through_formats() {
    let v = json(&own("skx-noevents"));
    let s = source(&v, "intel-uncore-imc");
    assert_eq!(s["available"], true, "{s}");
    assert_eq!(pmus(s), uncore_pmus(13..19, &[0, 4], &[0, 1, 2, 3, 4, 5]));
    let names: Vec<String> = (0..6).map(|i| format!("uncore_imc_{i}")).collect();
    assert_cas(s, &names, 772, 3076);
}

#[test]
fn tiger_lake_free_running_and_mchbar() {
    let v = json(&own("tgl-client"));
    let s = source(&v, "intel-client-imc");
    assert_eq!(
        pmus(s),
        vec![
            ("uncore_imc_free_running_0".to_string(), 14, vec![0]),
            ("uncore_imc_free_running_1".to_string(), 15, vec![0]),
        ]
    );
    for p in ["uncore_imc_free_running_0", "uncore_imc_free_running_1"] {
        assert_eq!(configs(s, p, "read"), [0x20ff]);
        assert_eq!(configs(s, p, "write"), [0x30ff]);
        assert_eq!(configs(s, p, "total"), [0x10ff]);
    }
    let m = source(&v, "intel-client-mchbar");
    assert_eq!(m["available"], true, "{m}");
    let mut got: Vec<(String, String, u64, u64)> = m["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["pmu"].as_str().unwrap().to_string(),
                e["name"].as_str().unwrap().to_string(),
                e["address"].as_u64().unwrap(),
                e["width"].as_u64().unwrap(),
            )
        })
        .collect();
    got.sort();
    let want = |p: &str, n: &str, a: u64| (p.to_string(), n.to_string(), a, 64);
    assert_eq!(
        got,
        vec![
            want("mchbar_mc0", "read", 0xfedc_d858),
            want("mchbar_mc0", "total", 0xfedc_d840),
            want("mchbar_mc0", "write", 0xfedc_d8a0),
            want("mchbar_mc1", "read", 0xfedd_d858),
            want("mchbar_mc1", "total", 0xfedd_d840),
            want("mchbar_mc1", "write", 0xfedd_d8a0),
        ]
    );
}

/// Copies a fixture tree into a temporary directory, keeping symlinks as symlinks.
fn copy_tree(from: &Path) -> tempfile::TempDir {
    fn walk(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            let (src, dst) = (e.path(), to.join(e.file_name()));
            let ft = e.file_type().unwrap();
            if ft.is_symlink() {
                std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
            } else if ft.is_dir() {
                walk(&src, &dst);
            } else {
                std::fs::copy(&src, &dst).unwrap();
                let mut perm = std::fs::metadata(&dst).unwrap().permissions();
                #[allow(clippy::permissions_set_readonly_false)]
                perm.set_readonly(false);
                std::fs::set_permissions(&dst, perm).unwrap();
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    walk(from, dir.path());
    dir
}

fn mchbar_reason(root: &Path) -> (bool, String) {
    let v = json(root);
    let m = source(&v, "intel-client-mchbar");
    (
        m["available"].as_bool().unwrap(),
        m["reason"].as_str().unwrap_or("").to_string(),
    )
}

#[test]
fn mchbar_unavailable_cases_say_why() {
    let cfg = "sys/devices/pci0000:00/0000:00:00.0/config";

    // Non-root reads of config are cut to 64 bytes.
    let t = copy_tree(&own("tgl-client"));
    let full = std::fs::read(t.path().join(cfg)).unwrap();
    std::fs::write(t.path().join(cfg), &full[..64]).unwrap();
    let (ok, why) = mchbar_reason(t.path());
    assert!(!ok && why.contains("run as root"), "{why}");

    // Enable bit clear.
    let mut off = full.clone();
    off[0x48] &= !1;
    std::fs::write(t.path().join(cfg), &off).unwrap();
    let (ok, why) = mchbar_reason(t.path());
    assert!(!ok && why.contains("disabled"), "{why}");

    // Zero BAR (only the enable bit).
    let mut zero = full.clone();
    zero[0x48..0x50].copy_from_slice(&1u64.to_le_bytes());
    std::fs::write(t.path().join(cfg), &zero).unwrap();
    let (ok, why) = mchbar_reason(t.path());
    assert!(!ok && why.contains("no address"), "{why}");

    // Beyond the expected range.
    let mut high = full.clone();
    high[0x48..0x50].copy_from_slice(&0x100_fedc_0001u64.to_le_bytes());
    std::fs::write(t.path().join(cfg), &high).unwrap();
    let (ok, why) = mchbar_reason(t.path());
    assert!(!ok && why.contains("outside the expected range"), "{why}");

    // Kernel lockdown blocks /dev/mem.
    std::fs::write(t.path().join(cfg), &full).unwrap();
    std::fs::write(
        t.path().join("sys/kernel/security/lockdown"),
        "none [integrity] confidentiality\n",
    )
    .unwrap();
    let (ok, why) = mchbar_reason(t.path());
    assert!(!ok && why.contains("lockdown (integrity)"), "{why}");
}

#[test]
fn zen4_umc_per_socket_owner_cpu() {
    let v = json(&own("zen4-2socket"));
    let s = source(&v, "amd-umc");
    assert_eq!(
        pmus(s),
        vec![
            ("amd_umc_0".to_string(), 20, vec![0]),
            ("amd_umc_1".to_string(), 21, vec![0]),
            ("amd_umc_2".to_string(), 22, vec![4]),
            ("amd_umc_3".to_string(), 23, vec![4]),
        ]
    );
    let names: Vec<String> = (0..4).map(|i| format!("amd_umc_{i}")).collect();
    assert_cas(s, &names, 0x10a, 0x20a);
    let df = source(&v, "amd-df");
    assert_eq!(df["available"], false);
    assert!(df["reason"].as_str().unwrap().contains("amd-umc"));
}

#[test]
fn zen2_df_legacy_split_event_bits() {
    let v = json(&own("zen2-1socket"));
    let s = source(&v, "amd-df");
    assert_eq!(s["available"], true, "{s}");
    assert_eq!(pmus(s), vec![("amd_df".to_string(), 10, vec![0])]);
    let got = configs(s, "amd_df", "total");
    let want: Vec<u64> = (0..8u64)
        .map(|n| {
            let ev = 0x07 + 0x40 * n;
            (ev & 0xff) | (0x38 << 8) | ((ev >> 8) << 32)
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!(got[0], 14343);
    assert_eq!(got[4], 4_294_981_639);
    assert!(!available(&v, "amd-umc"));
}

fn assert_one_line_error(o: &Out, must_name: &str) {
    assert_eq!(o.code, 2, "stdout {} stderr {}", o.stdout, o.stderr);
    assert_eq!(o.stderr.trim_end().lines().count(), 1, "{}", o.stderr);
    assert!(
        o.stderr.contains(must_name),
        "{} lacks {must_name}",
        o.stderr
    );
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
}

#[test]
fn truncated_type_is_a_one_line_error_naming_the_file() {
    let o = run(&own("broken-type"), &["--json"]);
    assert_one_line_error(&o, "uncore_imc_0/type");
    assert!(o.stderr.contains("decimal PMU type"), "{}", o.stderr);
    assert!(o.stdout.is_empty());
}

#[test]
fn bad_roots_and_malformed_files_are_bad_input() {
    // A root without sys/.
    let empty = tempfile::tempdir().unwrap();
    assert_one_line_error(&run(empty.path(), &[]), "sys");
    // A root that does not exist.
    assert_one_line_error(
        &run(Path::new("/nonexistent/imc-root"), &[]),
        "/nonexistent/imc-root",
    );

    // Garbage cpumask.
    let t = copy_tree(&own("skx-noevents"));
    std::fs::write(t.path().join("sys/devices/uncore_imc_2/cpumask"), "0,x\n").unwrap();
    assert_one_line_error(&run(t.path(), &[]), "uncore_imc_2/cpumask");

    // Malformed format file.
    let t = copy_tree(&own("skx-noevents"));
    std::fs::write(
        t.path().join("sys/devices/uncore_imc_1/format/umask"),
        "config:15-8\n",
    )
    .unwrap();
    assert_one_line_error(&run(t.path(), &[]), "uncore_imc_1/format/umask");

    // Reversed range in the online CPU list.
    let t = copy_tree(&own("skx-noevents"));
    std::fs::write(t.path().join("sys/devices/system/cpu/online"), "7-0\n").unwrap();
    assert_one_line_error(&run(t.path(), &[]), "cpu/online");

    // A dangling PMU link.
    let t = copy_tree(&own("skx-noevents"));
    std::os::unix::fs::symlink(
        "../../../devices/nowhere",
        t.path().join("sys/bus/event_source/devices/uncore_imc_9"),
    )
    .unwrap();
    assert_one_line_error(&run(t.path(), &[]), "uncore_imc_9");
}

#[test]
fn alias_needed_but_events_missing_makes_backend_unavailable_with_the_file() {
    // Without aliases, a model imc has no table for is unavailable and names the missing file.
    let t = copy_tree(&own("skx-noevents"));
    let info = std::fs::read_to_string(t.path().join("proc/cpuinfo")).unwrap();
    std::fs::write(
        t.path().join("proc/cpuinfo"),
        info.replace("model\t\t: 85", "model\t\t: 200"),
    )
    .unwrap();
    let v = json(t.path());
    let s = source(&v, "intel-uncore-imc");
    assert_eq!(s["available"], false);
    let why = s["reason"].as_str().unwrap();
    assert!(why.contains("uncore_imc_0/events/cas_count_read"), "{why}");
}

/// The trees tests/fixtures/gen.py captured from the shared reference set.
const CAPTURED: [&str; 7] = [
    "skx-2socket",
    "icl-client",
    "power9-2chip",
    "power9-imc-full",
    "knl",
    "vm-guest",
    "zen3-ibs",
];

/// Every file of `root` by relative path: a symlink as its target, a file as its bytes.
fn tree_contents(root: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut std::collections::BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            let ft = e.file_type().unwrap();
            if ft.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.insert(rel, target.into_os_string().into_encoded_bytes());
            } else if ft.is_dir() {
                walk(root, &path, out);
            } else {
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// A file gen.py adds to a captured tree (its CORE_OVERLAY): the POWER9 core PMU's format/
/// files and caps/pmu_name, as arch/powerpc/perf/power9-pmu.c and core-book3s.c create them.
fn core_overlay(tree: &str, rel: &Path) -> bool {
    matches!(tree, "power9-2chip" | "power9-imc-full")
        && (rel.starts_with("sys/devices/cpu/format")
            || rel == Path::new("sys/devices/cpu/caps/pmu_name"))
}

#[test]
fn captured_trees_match_their_shared_originals() {
    let Some(shared) = shared_fixtures() else {
        eprintln!(
            "SKIPPED: no shared reference fixtures beside this checkout (../shared/fixtures or \
             IMC_SHARED_FIXTURES): the committed trees are used as they are"
        );
        return;
    };
    for name in CAPTURED {
        let original = shared.join(name);
        if !original.is_dir() {
            eprintln!("SKIPPED {name}: not in {}", shared.display());
            continue;
        }
        let mine = tree_contents(&own(name));
        let theirs = tree_contents(&original);
        // gen.py's CORE_OVERLAY adds the core PMU files a capture lacks (the POWER9 trees have
        // only `cpu/type`), and nothing else.
        let extra: Vec<_> = mine
            .keys()
            .filter(|k| !theirs.contains_key(*k) && !core_overlay(name, k))
            .collect();
        let missing: Vec<_> = theirs.keys().filter(|k| !mine.contains_key(*k)).collect();
        assert!(
            extra.is_empty() && missing.is_empty(),
            "{name}: the file lists differ (extra {extra:?}, missing {missing:?}): rerun \
             tests/fixtures/gen.py"
        );
        for (rel, want) in &theirs {
            let got = &mine[rel];
            let same = if rel.ends_with("README.md") {
                got.starts_with(want)
            } else {
                // A copy without symlinks holds the link target, perhaps with a newline.
                got == want || got.as_slice() == want.trim_ascii_end()
            };
            assert!(
                same,
                "{name}/{}: differs from the shared original",
                rel.display()
            );
        }
    }
}

#[test]
fn every_fixture_tree_says_what_a_correct_tool_finds_and_where_the_facts_come_from() {
    for e in std::fs::read_dir(own_fixtures()).unwrap() {
        let dir = e.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        let readme = std::fs::read_to_string(dir.join("README.md"))
            .unwrap_or_else(|err| panic!("{}: README.md: {err}", dir.display()));
        let lower = readme.to_lowercase();
        assert!(
            lower.contains("correct tool") && (lower.contains("source") || readme.contains(".c")),
            "{}: README.md must say what a correct tool finds and name its kernel sources",
            dir.display()
        );
    }
}

/// The non-bandwidth source `pmu` of `imc list --json`.
fn other<'a>(v: &'a Value, pmu: &str) -> &'a Value {
    v["other_sources"]
        .as_array()
        .expect("other_sources array")
        .iter()
        .find(|s| s["pmu"] == pmu)
        .unwrap_or_else(|| panic!("no other source {pmu} in {}", v["other_sources"]))
}

#[test]
fn zen3_ibs_is_a_profiling_source_with_formats_and_no_caps() {
    let root = own("zen3-ibs");
    let v = json(&root);
    // IBS is not among the bandwidth sources: amd_df is the DRAM source here.
    assert!(available(&v, "amd-df"));
    for s in v["sources"].as_array().unwrap() {
        let names: Vec<&str> = s["pmus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert!(!names.iter().any(|n| n.starts_with("ibs_")), "{names:?}");
    }
    let fetch = other(&v, "ibs_fetch");
    let op = other(&v, "ibs_op");
    for (s, ty) in [(fetch, 8), (op, 9)] {
        assert_eq!(s["type"], ty);
        assert_eq!(s["role"], "profiling");
        assert_eq!(s["can_sample"], true);
        assert_eq!(s["can_count"], false);
        assert_eq!(s["per_task"], true);
        // no cpumask file: any CPU
        assert_eq!(s["cpus"], serde_json::json!([]));
        // caps/ is empty (or absent in a git checkout) on Zen 3
        assert_eq!(s["caps"], serde_json::json!({}));
        assert!(s["why"].as_str().unwrap().contains("not bandwidth"), "{s}");
    }
    assert_eq!(
        fetch["formats"],
        serde_json::json!({"rand_en": "config:57", "swfilt": "config2:0"})
    );
    assert_eq!(
        op["formats"],
        serde_json::json!({"cnt_ctl": "config:19", "swfilt": "config2:0"})
    );
    let notes = op["notes"].to_string();
    assert!(notes.contains("no l3missonly"), "{notes}");
    assert!(notes.contains("DRAM"), "{notes}");

    let o = run(&root, &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let text = &o.stdout;
    assert!(text.contains("other sources (not bandwidth):"), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("ibs_op"))
        .expect("an ibs_op line");
    assert!(
        line.contains("profiling") && line.contains("cannot count"),
        "{line}"
    );
    assert!(
        text.contains("formats cnt_ctl=config:19 swfilt=config2:0"),
        "{text}"
    );
}

#[test]
fn ibs_caps_are_listed_when_the_kernel_exports_them() {
    // A Zen 4 kernel: caps/zen4_ibs_extensions and format/l3missonly.
    let tree = copy_tree(&own("zen3-ibs"));
    let op = tree.path().join("sys/devices/ibs_op");
    std::fs::create_dir_all(op.join("caps")).unwrap();
    std::fs::write(op.join("caps/zen4_ibs_extensions"), "1\n").unwrap();
    std::fs::write(op.join("format/l3missonly"), "config:16\n").unwrap();
    let v = json(tree.path());
    let s = other(&v, "ibs_op");
    assert_eq!(s["caps"], serde_json::json!({"zen4_ibs_extensions": "1"}));
    assert_eq!(s["formats"]["l3missonly"], "config:16");
    assert!(
        s["notes"].to_string().contains("l3missonly=1 keeps only"),
        "{s}"
    );
}

#[test]
fn power9_core_thread_trace_imc_scopes_exclusivity_and_scales() {
    let root = own("power9-imc-full");
    let v = json(&root);
    // The nest PMUs stay the bandwidth source, per chip, as on power9-2chip.
    let nest = source(&v, "power-nest-imc");
    assert_eq!(nest["available"], true);
    for (name, _, cpus) in pmus(nest) {
        assert!(name.starts_with("nest_"), "{name}");
        assert_eq!(cpus, [0, 64]);
    }
    let core = other(&v, "core_imc");
    let thread = other(&v, "thread_imc");
    let trace = other(&v, "trace_imc");
    assert_eq!(
        (
            core["type"].as_u64(),
            thread["type"].as_u64(),
            trace["type"].as_u64()
        ),
        (Some(30), Some(31), Some(32))
    );
    // core_imc: per core, one CPU per core, each with its SMT4 siblings
    assert_eq!(core["scope"], "core");
    assert_eq!(core["role"], "counting");
    let cpus: Vec<u64> = core["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert_eq!(cpus, (0..32).map(|k| 4 * k).collect::<Vec<u64>>());
    assert_eq!(core["cores"][1], serde_json::json!([4, 5, 6, 7]));
    assert_eq!(core["cores"].as_array().unwrap().len(), 32);
    assert_eq!(
        (
            core["can_count"].as_bool(),
            core["can_sample"].as_bool(),
            core["per_task"].as_bool()
        ),
        (Some(true), Some(false), Some(false))
    );
    // thread_imc: per task, no CPU-wide opens, CAP_PERFMON
    assert_eq!(thread["scope"], "thread");
    assert_eq!(thread["cpu_wide"], false);
    assert_eq!(thread["per_task"], true);
    assert_eq!(thread["needs_perfmon"], true);
    assert_eq!(thread["cpus"], serde_json::json!([]));
    // trace_imc: sampling only, a profiling source
    assert_eq!(trace["role"], "profiling");
    assert_eq!(trace["can_sample"], true);
    assert_eq!(trace["can_count"], false);
    assert!(
        trace["notes"]
            .to_string()
            .contains("trace_imc/trace_cycles/")
    );
    // one system-wide lock for the three, none for nest
    for s in [core, thread, trace] {
        assert_eq!(s["exclusive"]["errno"], "EBUSY");
        assert_eq!(
            s["exclusive"]["members"],
            serde_json::json!(["core_imc", "thread_imc", "trace_imc"])
        );
    }
    assert!(
        !v["other_sources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["pmu"].as_str().unwrap().starts_with("nest_"))
    );
    // formats and events with their scales (README table)
    assert_eq!(core["formats"]["offset"], "config:0-31");
    assert_eq!(core["formats"]["mode"], "config:33-40");
    assert_eq!(trace["formats"]["cpmc_load"], "config:30-61");
    let ev = |s: &Value, n: &str| -> (u64, Option<f64>) {
        let e = s["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == n)
            .unwrap_or_else(|| panic!("no event {n}"));
        (e["config"].as_u64().unwrap(), e["scale"].as_f64())
    };
    assert_eq!(ev(core, "CPM_CCYC"), (0x98, Some(512.0)));
    assert_eq!(ev(core, "CPM_CS_FROM_MEM_LOCAL"), (0xfe0, Some(512.0)));
    assert_eq!(
        ev(thread, "CPM_CS_FROM_MEM_LDATA_USER"),
        (0x1560, Some(512.0))
    );
    assert_eq!(ev(trace, "trace_cycles"), (0x1020_0000, None));
    assert_eq!(core["events"].as_array().unwrap().len(), 19);
    assert_eq!(thread["events"].as_array().unwrap().len(), 12);

    let o = run(&root, &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let line = |p: &str| {
        o.stdout
            .lines()
            .find(|l| l.starts_with(p))
            .unwrap_or_else(|| panic!("no {p} line in {}", o.stdout))
            .to_string()
    };
    assert!(line("core_imc").contains("per core"));
    assert!(line("thread_imc").contains("per thread"));
    assert!(line("trace_imc").contains("cannot count"));
    assert!(
        o.stdout
            .contains("exclusive group power-imc-core-thread-trace")
    );
}

#[test]
fn machines_without_them_have_no_other_sources() {
    for tree in ["skx-2socket", "power9-2chip", "vm-guest"] {
        let v = json(&own(tree));
        assert_eq!(v["other_sources"], serde_json::json!([]), "{tree}");
    }
}

//! End-to-end: the built `imc encode` against the project's fixture trees with `--root`.
use imc_tests::{imc, own_fixtures};
use serde_json::Value;
use std::process::Output;

fn encode(root: &str, args: &[&str], envs: &[(&str, &str)]) -> Output {
    imc()
        .arg("--root")
        .arg(own_fixtures().join(root))
        .arg("encode")
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .expect("run imc")
}

fn json_lines(out: &Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// Exit 2, nothing on stdout, and exactly one stderr line that names `event` and `what`.
fn refused(root: &str, event: &str, what: &[&str]) {
    let out = encode(root, &[event], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{event}: {err}");
    assert!(out.stdout.is_empty(), "{event}: printed {:?}", out.stdout);
    assert_eq!(err.lines().count(), 1, "{event}: {err}");
    assert!(err.contains(event), "{event}: {err}");
    for w in what {
        assert!(err.contains(w), "{event}: '{w}' missing in {err}");
    }
}

#[test]
fn skx_alias_wildcard_gives_one_object_per_instance() {
    let v = json_lines(&encode(
        "skx-2socket",
        &["--json", "uncore_imc/cas_count_read/"],
        &[],
    ));
    assert_eq!(v.len(), 6);
    for (i, o) in v.iter().enumerate() {
        assert_eq!(o["event"], "uncore_imc/cas_count_read/");
        assert_eq!(o["pmu"], format!("uncore_imc_{i}"));
        // types come from each PMU's `type` file (13..18 on this fixture)
        assert_eq!(o["type"], 13 + i as u64);
        assert_eq!(o["config"], 772);
        assert_eq!(o["config1"], 0);
        assert_eq!(o["config2"], 0);
        assert_eq!(o["exclude_user"], false);
        assert_eq!(o["exclude_kernel"], false);
        assert_eq!(o["bytes_per_count"], 64.0);
        assert_eq!(o["unit"], "MiB");
        assert_eq!(o["cpus"], serde_json::json!([0, 20]));
    }
}

#[test]
fn raw_terms_and_several_events() {
    let v = json_lines(&encode(
        "skx-2socket",
        &[
            "--json",
            "uncore_imc_4/event=0x04,umask=0x0c/",
            "cpu/event=0xb7,umask=0x1,offcore_rsp=0x10001/u",
            "cycles:k",
        ],
        &[],
    ));
    assert_eq!(v.len(), 3);
    assert_eq!(
        (
            v[0]["pmu"].clone(),
            v[0]["type"].clone(),
            v[0]["config"].clone()
        ),
        ("uncore_imc_4".into(), 17.into(), 0xc04.into())
    );
    assert!(v[0].get("bytes_per_count").is_none());
    assert_eq!(
        (
            v[1]["type"].as_u64(),
            v[1]["config"].as_u64(),
            v[1]["config1"].as_u64()
        ),
        (Some(4), Some(0x1b7), Some(0x10001))
    );
    assert_eq!(
        (
            v[1]["exclude_user"].as_bool(),
            v[1]["exclude_kernel"].as_bool()
        ),
        (Some(false), Some(true))
    );
    assert_eq!(
        (
            v[2]["type"].as_u64(),
            v[2]["config"].as_u64(),
            v[2]["exclude_user"].as_bool()
        ),
        (Some(0), Some(0), Some(true))
    );
}

#[test]
fn icl_single_imc_and_power9_scale_without_unit() {
    let v = json_lines(&encode(
        "icl-client",
        &["--json", "uncore_imc/data_writes/"],
        &[],
    ));
    assert_eq!(v.len(), 1);
    assert_eq!(
        (v[0]["pmu"].as_str(), v[0]["config"].as_u64()),
        (Some("uncore_imc"), Some(2))
    );
    assert_eq!(v[0]["bytes_per_count"], 64.0);
    let v = json_lines(&encode(
        "power9-2chip",
        &["--json", "nest_mcs01_imc/PM_MCS01_128B_RD_DISP_PORT01/"],
        &[],
    ));
    assert_eq!(v.len(), 1);
    assert_eq!(v[0]["config"], 0xd0);
    assert_eq!(v[0]["scale"], 256.0);
    assert!(v[0].get("bytes_per_count").is_none(), "{}", v[0]);
}

#[test]
fn human_output_is_one_line_per_counter_in_hex() {
    let out = encode("skx-2socket", &["uncore_imc/cas_count_write/"], &[]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 6);
    let first = text.lines().next().unwrap();
    assert!(
        first.contains("uncore_imc_0")
            && first.contains("config=0xc04")
            && first.contains("type=13"),
        "{first}"
    );
}

#[test]
fn bad_strings_exit_2_with_one_line() {
    refused(
        "skx-2socket",
        "uncore_imx/cas_count_read/",
        &["unknown PMU", "uncore_imc"],
    );
    refused(
        "skx-2socket",
        "uncore_imc/cas_count_reed/",
        &["cas_count_read"],
    );
    refused(
        "skx-2socket",
        "uncore_imc/event=0x4,bogus=1/",
        &["unknown term", "bogus"],
    );
    refused(
        "skx-2socket",
        "uncore_imc/event=0x100/",
        &["event", "does not fit"],
    );
    refused("skx-2socket", "uncore_imc/cas_count_read", &["malformed"]);
    refused("skx-2socket", "cycles:x", &["'x'"]);
    refused(
        "knl",
        "uncore_edc_eclk/UNC_E_RPQ_INSERTS/",
        &["no event aliases"],
    );
    // a bad string among good ones: nothing is printed for the good ones either
    let out = encode(
        "skx-2socket",
        &["cycles", "uncore_imx/cas_count_read/"],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}

#[test]
fn knl_offcore_response_through_libpfm4() {
    let envs = [("LIBPFM_FORCE_PMU", "knl")];
    let probe = encode(
        "knl",
        &[
            "--json",
            "knl::OFFCORE_RESPONSE_0:DMND_DATA_RD:ANY_RESPONSE:u=1:c=2",
        ],
        &envs,
    );
    let err = String::from_utf8_lossy(&probe.stderr);
    if err.contains("apt-get install libpfm4") {
        eprintln!("SKIPPED: libpfm.so.4 is not installed here: {err}");
        return;
    }
    let v = json_lines(&probe);
    assert_eq!(v.len(), 1);
    // type 4 is the knl tree's `cpu` PMU; c=2 lands in bits 24-31, the MSR value in config1
    assert_eq!(v[0]["pmu"], "cpu");
    assert_eq!(v[0]["type"], 4);
    assert_eq!(v[0]["config"], 0x0200_01b7);
    assert_eq!(v[0]["config1"], 0x10001);
    assert_eq!(v[0]["exclude_user"], false);
    assert_eq!(v[0]["exclude_kernel"], true);
    let out = encode(
        "knl",
        &["knl::OFFCORE_RESPONSE_0:DMND_DATA_RD:ANY_RESPONSE:t=1"],
        &envs,
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("'t'"), "{err}");
}

#[test]
fn missing_libpfm_is_one_line_saying_what_to_install() {
    let out = encode(
        "skx-2socket",
        &["INST_RETIRED:ANY_P"],
        &[("IMC_LIBPFM", "/nonexistent/libpfm.so.4")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("INST_RETIRED:ANY_P") && err.contains("apt-get install libpfm4"),
        "{err}"
    );
    // the sysfs and generic forms still work without it
    let v = json_lines(&encode(
        "skx-2socket",
        &["--json", "uncore_imc_0/cas_count_read/", "page-faults"],
        &[("IMC_LIBPFM", "/nonexistent/libpfm.so.4")],
    ));
    assert_eq!(v.len(), 2);
}

#[test]
fn ibs_events_encode_through_their_formats() {
    let v = json_lines(&encode(
        "zen3-ibs",
        &[
            "--json",
            "ibs_op/cnt_ctl=1/",
            "ibs_fetch/rand_en=1,swfilt=1/",
        ],
        &[],
    ));
    assert_eq!(
        (v[0]["pmu"].as_str(), v[0]["type"].as_u64()),
        (Some("ibs_op"), Some(9))
    );
    assert_eq!(v[0]["config"], 1u64 << 19);
    assert_eq!(v[1]["type"], 8);
    assert_eq!(v[1]["config"], 1u64 << 57);
    assert_eq!(v[1]["config2"], 1);
    // Zen 3 has no L3-miss filter: one line naming the PMU, the term and why.
    refused(
        "zen3-ibs",
        "ibs_op/cnt_ctl=1,l3missonly=1/",
        &["ibs_op", "l3missonly", "Zen 4"],
    );
}

#[test]
fn power_core_thread_trace_imc_events_encode_as_offsets_with_scales() {
    let v = json_lines(&encode(
        "power9-imc-full",
        &[
            "--json",
            "core_imc/CPM_CCYC/",
            "thread_imc/CPM_CS_FROM_MEM_LDATA_USER/",
            "trace_imc/trace_cycles/",
        ],
        &[],
    ));
    assert_eq!(v.len(), 3);
    assert_eq!(
        (v[0]["type"].as_u64(), v[0]["config"].as_u64()),
        (Some(30), Some(0x98))
    );
    assert_eq!(v[0]["scale"], 512.0);
    // core_imc is opened on its cpumask: one CPU per core
    assert_eq!(v[0]["cpus"].as_array().unwrap().len(), 32);
    assert_eq!(
        (v[1]["type"].as_u64(), v[1]["config"].as_u64()),
        (Some(31), Some(0x1560))
    );
    assert_eq!(v[1]["scale"], 512.0);
    assert!(v[1].get("cpus").is_none());
    assert_eq!(
        (v[2]["type"].as_u64(), v[2]["config"].as_u64()),
        (Some(32), Some(0x1020_0000))
    );
    assert!(v[2].get("scale").is_none());
    // the DD2 catalogue has only the _USER thread variant
    refused(
        "power9-imc-full",
        "thread_imc/CPM_CS_FROM_L4_MEM_X_DPTEG/",
        &["thread_imc", "CPM_CS_FROM_L4_MEM_X_DPTEG_USER"],
    );
}

#[test]
fn root_chooses_the_libpfm4_model_without_libpfm_force_pmu() {
    let out = imc()
        .arg("-v")
        .arg("--root")
        .arg(own_fixtures().join("knl"))
        .args([
            "encode",
            "--json",
            "OFFCORE_RESPONSE_0:DMND_DATA_RD:OUTSTANDING",
        ])
        .env_remove("LIBPFM_FORCE_PMU")
        .output()
        .expect("run imc");
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("apt-get install libpfm4") {
        eprintln!("SKIPPED: libpfm.so.4 is not installed here: {err}");
        return;
    }
    let v = json_lines(&out);
    // KNL's OUTSTANDING is bit 38 of MSR_OFFCORE_RSP_0, a KNL-only umask.
    assert_eq!(v[0]["config"], 0x01b7);
    assert_eq!(v[0]["config1"], 0x40_0000_0001u64);
    assert_eq!(v[0]["pmu"], "cpu");
    // -v says which libpfm4 PMU and why
    assert!(err.contains("libpfm4 PMU knl"), "{err}");
    assert!(err.contains("Knights Landing"), "{err}");
    // A user's LIBPFM_FORCE_PMU wins and is named.
    let out = imc()
        .arg("-v")
        .arg("--root")
        .arg(own_fixtures().join("knl"))
        .args(["encode", "OFFCORE_RESPONSE_0:DMND_DATA_RD:OUTSTANDING"])
        .env("LIBPFM_FORCE_PMU", "skx")
        .output()
        .expect("run imc");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("LIBPFM_FORCE_PMU=skx is set"), "{err}");
}

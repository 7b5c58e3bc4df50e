//! Tests of the four event forms against hand-built PMUs shaped like the fixture trees, and of
//! the libpfm4 binding against libpfm4's own expected encodings (tests/validate_x86.c) and the
//! knl fixture README.
use super::terms::close_matches;
use super::*;
use crate::discovery::format::{FormatError, parse_format};
use crate::model::EventAlias;
use crate::sys::perf::{TYPE_HARDWARE, TYPE_HW_CACHE, TYPE_SOFTWARE};
use std::collections::BTreeMap;
use std::process::Command;

fn pmu(
    name: &str,
    ty: u32,
    formats: &[(&str, &str)],
    events: &[(&str, &str, Option<f64>, Option<&str>)],
) -> Pmu {
    Pmu {
        name: name.into(),
        pmu_type: ty,
        cpumask: None,
        formats: formats
            .iter()
            .map(|(n, t)| (n.to_string(), parse_format(n, t).expect("test format")))
            .collect::<BTreeMap<_, _>>(),
        events: events
            .iter()
            .map(|(n, t, s, u)| {
                (
                    n.to_string(),
                    EventAlias {
                        name: n.to_string(),
                        terms: t.to_string(),
                        scale: *s,
                        unit: u.map(str::to_string),
                    },
                )
            })
            .collect(),
        path: Default::default(),
    }
}

const SKX_FORMATS: &[(&str, &str)] = &[
    ("event", "config:0-7"),
    ("umask", "config:8-15"),
    ("edge", "config:18"),
    ("inv", "config:23"),
    ("thresh", "config:24-31"),
];
const MIB64: Option<f64> = Some(6.103515625e-5);

fn skx_imc(n: u32) -> Pmu {
    let mut p = pmu(
        &format!("uncore_imc_{n}"),
        13 + n,
        SKX_FORMATS,
        &[
            (
                "cas_count_read",
                "event=0x04,umask=0x03",
                MIB64,
                Some("MiB"),
            ),
            (
                "cas_count_write",
                "event=0x04,umask=0x0c",
                MIB64,
                Some("MiB"),
            ),
            ("clockticks", "event=0x00,umask=0x00", None, None),
        ],
    );
    p.cpumask = Some(vec![0, 20]);
    p
}

/// skx-2socket: cpu (type 4) and uncore_imc_0..5 (types 13..18), listed out of order on purpose.
fn skx() -> Vec<Pmu> {
    let mut v = vec![pmu(
        "cpu",
        4,
        &[
            ("event", "config:0-7"),
            ("umask", "config:8-15"),
            ("edge", "config:18"),
            ("inv", "config:23"),
            ("cmask", "config:24-31"),
            ("offcore_rsp", "config1:0-63"),
        ],
        &[],
    )];
    for n in [5, 1, 0, 3, 2, 4] {
        v.push(skx_imc(n));
    }
    v
}

fn icl() -> Vec<Pmu> {
    let mut imc = pmu(
        "uncore_imc",
        15,
        &[("event", "config:0-7")],
        &[
            ("data_reads", "event=0x01", MIB64, Some("MiB")),
            ("data_writes", "event=0x02", MIB64, Some("MiB")),
        ],
    );
    imc.cpumask = Some(vec![0]);
    vec![
        pmu(
            "cpu",
            4,
            &[("event", "config:0-7")],
            &[("cpu-cycles", "event=0x3c", None, None)],
        ),
        imc,
    ]
}

/// knl: uncore PMUs without events/, and a cpu PMU of type 4.
fn knl() -> Vec<Pmu> {
    let mut v = vec![pmu(
        "cpu",
        4,
        &[("event", "config:0-7"), ("offcore_rsp", "config1:0-63")],
        &[],
    )];
    for n in 0..6 {
        v.push(pmu(&format!("uncore_imc_{n}"), 20 + n, SKX_FORMATS, &[]));
    }
    v.push(pmu("uncore_imc_uclk_0", 30, SKX_FORMATS, &[]));
    v
}

fn one(pmus: &[Pmu], text: &str) -> Encoded {
    let mut v = parse_event(pmus, text).unwrap_or_else(|e| panic!("{text}: {e}"));
    assert_eq!(v.len(), 1, "{text}: {v:?}");
    v.remove(0)
}

fn err(pmus: &[Pmu], text: &str) -> EventError {
    match parse_event(pmus, text) {
        Ok(v) => panic!("{text} encoded: {v:?}"),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains(text), "message does not name the event: {msg}");
            assert!(!msg.contains('\n'), "message is not one line: {msg}");
            e
        }
    }
}

#[test]
fn forms_are_chosen_by_the_documented_rule() {
    assert_eq!(form_of("uncore_imc/cas_count_read/"), Form::Sysfs);
    assert_eq!(form_of("cpu/cycles/"), Form::Sysfs);
    assert_eq!(form_of("cycles"), Form::Generic);
    assert_eq!(form_of("cycles:u"), Form::Generic);
    assert_eq!(form_of("LLC-load-misses"), Form::Generic);
    assert_eq!(
        form_of("knl::OFFCORE_RESPONSE_0:DMND_DATA_RD"),
        Form::Libpfm
    );
    assert_eq!(form_of("INST_RETIRED:ANY_P"), Form::Libpfm);
    assert_eq!(form_of("perf::cycles"), Form::Libpfm);
    assert_eq!(form_of("CYCLES"), Form::Libpfm);
}

#[test]
fn alias_without_suffix_means_every_instance() {
    let v = parse_event(&skx(), "uncore_imc/cas_count_read/").unwrap();
    assert_eq!(v.len(), 6);
    for (i, e) in v.iter().enumerate() {
        assert_eq!(e.pmu, format!("uncore_imc_{i}"));
        assert_eq!(e.pmu_type, 13 + i as u32);
        assert_eq!(e.config, 0x304);
        assert_eq!(e.config1, 0);
        assert_eq!(e.event, "uncore_imc/cas_count_read/");
        assert_eq!(e.scale, MIB64);
        assert_eq!(e.unit.as_deref(), Some("MiB"));
        assert_eq!(e.bytes_per_count, Some(64.0));
        assert_eq!(e.cpus, Some(vec![0, 20]));
        assert!(!e.exclude_user && !e.exclude_kernel);
    }
    // perf also finds uncore PMUs without their uncore_ prefix
    assert_eq!(
        parse_event(&skx(), "imc/cas_count_write/").unwrap().len(),
        6
    );
    assert_eq!(one(&skx(), "uncore_imc_3/cas_count_write/").config, 0xc04);
    assert_eq!(one(&skx(), "uncore_imc_3/cas_count_write/").pmu_type, 16);
}

#[test]
fn instances_are_in_numeric_order_with_gaps() {
    let pmus = vec![skx_imc(10), skx_imc(2), skx_imc(0)];
    let v = parse_event(&pmus, "uncore_imc/clockticks/").unwrap();
    let names: Vec<&str> = v.iter().map(|e| e.pmu.as_str()).collect();
    assert_eq!(names, ["uncore_imc_0", "uncore_imc_2", "uncore_imc_10"]);
    // no unit → no bytes_per_count
    assert!(
        v.iter()
            .all(|e| e.bytes_per_count.is_none() && e.scale.is_none())
    );
}

#[test]
fn single_instance_pmu_is_matched_exactly() {
    let e = one(&icl(), "uncore_imc/data_reads/");
    assert_eq!(
        (e.pmu.as_str(), e.pmu_type, e.config),
        ("uncore_imc", 15, 1)
    );
    assert_eq!(e.bytes_per_count, Some(64.0));
    assert_eq!(e.cpus, Some(vec![0]));
    // aliases are also found ignoring case, as perf does
    assert_eq!(one(&icl(), "uncore_imc/DATA_WRITES/").config, 2);
}

#[test]
fn raw_terms() {
    let e = one(&skx(), "uncore_imc_0/event=0x04,umask=0x03/");
    assert_eq!(e.config, 0x304);
    assert_eq!(e.scale, None);
    assert_eq!(e.bytes_per_count, None);
    let e = one(
        &skx(),
        "uncore_imc_0/event=4,umask=3,edge,inv=1,thresh=0xff/",
    );
    assert_eq!(e.config, 0xff84_0304);
    let e = one(&skx(), "cpu/config=0x1234,config1=0x10001,config2=7/");
    assert_eq!((e.config, e.config1, e.config2), (0x1234, 0x10001, 7));
    assert_eq!(e.pmu_type, 4);
    let e = one(&skx(), "cpu/event=0xb7,umask=0x1,offcore_rsp=0x10001/");
    assert_eq!((e.config, e.config1), (0x1b7, 0x10001));
    // every instance gets the raw encoding too
    let v = parse_event(&skx(), "uncore_imc/event=0x4,umask=0xc/").unwrap();
    assert_eq!(v.len(), 6);
    assert!(v.iter().all(|e| e.config == 0xc04));
}

#[test]
fn split_format_field_spreads_the_value() {
    // Sapphire Rapids style umask: low 8 bits in 8-15, the rest from bit 32.
    let spr = vec![pmu(
        "uncore_imc_0",
        40,
        &[("event", "config:0-7"), ("umask", "config:8-15,32-55")],
        &[],
    )];
    let e = one(&spr, "uncore_imc/event=0x5,umask=0x123456/");
    assert_eq!(e.config, 0x1234_0000_5605);
    let e = err(&spr, "uncore_imc/umask=0x100000000/");
    assert!(e.to_string().contains("umask"), "{e}");
}

#[test]
fn alias_with_extra_terms_user_wins() {
    let e = one(&skx(), "uncore_imc_0/cas_count_read,umask=0x1/");
    assert_eq!(e.config, 0x104);
    // the alias' scale and unit stay with it
    assert_eq!(e.bytes_per_count, Some(64.0));
    let e = one(&skx(), "uncore_imc_0/thresh=1,cas_count_read/");
    assert_eq!(e.config, 0x0100_0304);
}

#[test]
fn modifiers_after_the_slash() {
    let e = one(&skx(), "cpu/event=0x3c/u");
    assert!(!e.exclude_user && e.exclude_kernel);
    let e = one(&skx(), "cpu/event=0x3c/:k");
    assert!(e.exclude_user && !e.exclude_kernel);
    let e = one(&skx(), "cpu/event=0x3c/uk");
    assert!(!e.exclude_user && !e.exclude_kernel);
    assert!(matches!(
        err(&skx(), "cpu/event=0x3c/x"),
        EventError::Modifier { .. }
    ));
    assert!(matches!(
        err(&skx(), "cpu/event=0x3c/,cycles"),
        EventError::Modifier { .. }
    ));
}

#[test]
fn instances_without_the_alias_are_skipped() {
    let mut pmus = skx();
    pmus.retain(|p| p.name != "uncore_imc_2");
    pmus.push(pmu("uncore_imc_2", 15, SKX_FORMATS, &[]));
    let v = parse_event(&pmus, "uncore_imc/cas_count_read/").unwrap();
    assert_eq!(v.len(), 5);
    assert!(v.iter().all(|e| e.pmu != "uncore_imc_2"));
}

#[test]
fn unknown_pmu_lists_close_matches() {
    let e = err(&skx(), "uncore_imx/cas_count_read/");
    assert!(matches!(e, EventError::UnknownPmu { .. }));
    let m = e.to_string();
    assert!(
        m.contains("'uncore_imx'") && m.contains("did you mean") && m.contains("uncore_imc"),
        "{m}"
    );
    let m = err(&skx(), "zzz/x/").to_string();
    assert!(
        m.contains("PMUs here") && m.contains("uncore_imc") && m.contains("cpu"),
        "{m}"
    );
    let m = err(&[], "uncore_imc/cas_count_read/").to_string();
    assert!(m.contains("no PMUs"), "{m}");
    // an instance number that does not exist is not silently another instance
    assert!(matches!(
        err(&skx(), "uncore_imc_6/cas_count_read/"),
        EventError::UnknownPmu { .. }
    ));
}

#[test]
fn unknown_alias_lists_close_matches() {
    let e = err(&skx(), "uncore_imc/cas_count_reed/");
    let m = e.to_string();
    assert!(matches!(e, EventError::UnknownAlias { .. }));
    assert!(
        m.contains("'cas_count_reed'") && m.contains("cas_count_read"),
        "{m}"
    );
    let m = err(&skx(), "uncore_imc/bogus/").to_string();
    assert!(m.contains("events:") && m.contains("clockticks"), "{m}");
    // KNL uncore PMUs have no events/: say which terms to give instead
    let m = err(&knl(), "uncore_imc/UNC_M_CAS_COUNT.RD/").to_string();
    assert!(
        m.contains("no event aliases") && m.contains("umask=VALUE"),
        "{m}"
    );
    let e = one(&knl(), "uncore_imc_0/event=0x03,umask=0x01/");
    assert_eq!(e.config, 0x103);
    assert_eq!(
        parse_event(&knl(), "uncore_imc/event=0x03,umask=0x02/")
            .unwrap()
            .len(),
        6
    );
}

#[test]
fn unknown_term_and_too_wide_values() {
    let e = err(&skx(), "uncore_imc/event=1,bogus=2/");
    assert!(
        matches!(
            e,
            EventError::Term {
                source: FormatError::UnknownTerm { .. },
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("bogus"), "{e}");
    let e = err(&skx(), "uncore_imc_0/event=0x100/");
    let m = crate::text::error_line(&e);
    assert!(matches!(e, EventError::Term { .. }));
    assert!(
        m.contains("event") && m.contains("0x100") && m.contains("8 bit"),
        "{m}"
    );
    let m = err(&skx(), "uncore_imc_0/edge=2/").to_string();
    assert!(m.contains("edge"), "{m}");
    let m = err(&skx(), "uncore_imc_0/event=zz/").to_string();
    assert!(m.contains("zz"), "{m}");
}

#[test]
fn malformed_sysfs_strings() {
    for bad in [
        "uncore_imc/",
        "uncore_imc//",
        "uncore_imc/cas_count_read",
        "/cas_count_read/",
        "uncore_imc/a,,b/",
        "uncore_imc/cas_count_read/extra/",
        "uncore_imc/event=/",
        "uncore_imc/cas_count_read,cas_count_write/",
        "cpu/config3=1/",
    ] {
        assert!(
            matches!(
                err(&skx(), bad),
                EventError::Syntax { .. } | EventError::Term { .. }
            ),
            "{bad}"
        );
    }
}

#[test]
fn generic_names() {
    let e = one(&skx(), "cycles");
    assert_eq!((e.pmu_type, e.config), (TYPE_HARDWARE, 0));
    assert_eq!(e.pmu, "hardware");
    let e = one(&skx(), "cycles:u");
    assert!(!e.exclude_user && e.exclude_kernel);
    let e = one(&skx(), "instructions:k");
    assert_eq!(e.config, 1);
    assert!(e.exclude_user && !e.exclude_kernel);
    let e = one(&skx(), "page-faults");
    assert_eq!(
        (e.pmu_type, e.config, e.pmu.as_str()),
        (TYPE_SOFTWARE, 2, "software")
    );
    let e = one(&skx(), "LLC-load-misses");
    assert_eq!(
        (e.pmu_type, e.config, e.pmu.as_str()),
        (TYPE_HW_CACHE, 0x10002, "hw_cache")
    );
    // on a root with a sysfs `software` PMU (vm-guest), its name and type agree
    let sw = vec![pmu("software", 1, &[], &[])];
    assert_eq!(one(&sw, "cpu-clock").pmu, "software");
    assert!(matches!(
        err(&skx(), "cycles:x"),
        EventError::Modifier { .. }
    ));
    assert!(matches!(
        err(&skx(), "cycles:u:k"),
        EventError::Modifier { .. }
    ));
}

#[test]
fn whitespace_and_empty_are_refused() {
    assert!(matches!(
        parse_event(&skx(), ""),
        Err(EventError::Syntax { .. })
    ));
    assert!(matches!(
        parse_event(&skx(), "   "),
        Err(EventError::Syntax { .. })
    ));
    assert!(matches!(err(&skx(), " cycles"), EventError::Syntax { .. }));
}

#[test]
fn close_matches_ranks_by_distance() {
    let c = close_matches(
        "cas_count_reed",
        ["cas_count_read", "cas_count_write", "clockticks"],
    );
    assert_eq!(c, ["cas_count_read", "cas_count_write"]);
    assert!(close_matches("xyz", ["cas_count_read"]).is_empty());
    assert_eq!(close_matches("imc", ["uncore_imc", "cpu"]), ["uncore_imc"]);
}

#[test]
fn bad_input_classification() {
    let no_lib = EventError::NoLibpfm {
        event: "X".into(),
        detail: "d".into(),
    };
    assert!(!no_lib.is_bad_input());
    assert!(err(&skx(), "uncore_imx/a/").is_bad_input());
}

// ---- libpfm4 -------------------------------------------------------------------------------

/// Skips (with the reason printed) when libpfm.so.4 cannot be loaded.
fn libpfm_or_skip() -> bool {
    match pfm::available() {
        Ok(()) => true,
        Err(e) => {
            eprintln!("SKIPPED: libpfm4 not loadable here ({e}); apt-get install libpfm4");
            false
        }
    }
}

const CHILD: &str = "IMC_EVENTS_TEST_CHILD";

/// libpfm reads its environment (LIBPFM_FORCE_PMU) once, when it initialises, and that happens
/// once per process. A test that needs another environment runs itself again in a child process
/// with it; this returns true in the child, which then runs the body, and false in the parent
/// once the child passed.
fn in_child(test: &str, envs: &[(&str, &str)]) -> bool {
    if std::env::var(CHILD).as_deref() == Ok(test) {
        return true;
    }
    let exe = std::env::current_exe().expect("test binary path");
    let out = Command::new(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, test)
        .envs(envs.iter().copied())
        .output()
        .expect("run the test binary again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child run of {test} failed:\n{stdout}\n{stderr}"
    );
    false
}

fn pfm_one(pmus: &[Pmu], text: &str) -> (u32, u64, u64, bool, bool, String) {
    let e = one(pmus, text);
    (
        e.pmu_type,
        e.config,
        e.config1,
        e.exclude_user,
        e.exclude_kernel,
        e.pmu,
    )
}

/// libpfm4's tests/validate_x86.c lists raw PERFEVTSEL codes (with en, int, usr, os set); the
/// perf encoding clears those four and expresses usr/os as exclude_user/exclude_kernel.
fn perf_config_of(raw: u64) -> (u64, bool, bool) {
    const USR: u64 = 1 << 16;
    const OS: u64 = 1 << 17;
    const INT: u64 = 1 << 20;
    const EN: u64 = 1 << 22;
    (raw & !(USR | OS | INT | EN), raw & USR == 0, raw & OS == 0)
}

#[test]
fn knl_encodings_match_libpfm4_validate_x86() {
    if !libpfm_or_skip()
        || !in_child(
            "events::tests::knl_encodings_match_libpfm4_validate_x86",
            &[("LIBPFM_FORCE_PMU", "knl")],
        )
    {
        return;
    }
    // (event, codes[0], codes[1]) from validate_x86.c's knl entries
    let cases: &[(&str, u64, u64)] = &[
        ("knl::no_alloc_cycles:all", 0x537fca, 0),
        ("knl::MEM_UOPS_RETIRED:DTLB_MISS_LOADS", 0x530804, 0),
        ("knl::unhalted_reference_cycles:u:t", 0x710300, 0),
        ("knl::instructions_retired:k:t", 0x7200c0, 0),
        ("knl::unhalted_core_cycles:k:t", 0x72003c, 0),
        ("knl::offcore_response_1:any_request", 0x5302b7, 0x18000),
        ("knl::offcore_response_0:any_read", 0x5301b7, 0x132e7),
        ("knl::offcore_response_1:any_read", 0x5302b7, 0x132e7),
        (
            "knl::offcore_response_0:any_request:ddr_near",
            0x5301b7,
            0x80808000,
        ),
        (
            "knl::offcore_response_0:any_request:L2_HIT_NEAR_TILE:L2_HIT_FAR_TILE",
            0x5301b7,
            0x1800588000,
        ),
        (
            "knl::offcore_response_0:dmnd_data_rd:outstanding",
            0x5301b7,
            0x4000000001,
        ),
    ];
    for (text, raw, config1) in cases {
        let (config, eu, ek) = perf_config_of(*raw);
        let e = one(&[], text);
        assert_eq!(e.pmu_type, 4, "{text}");
        assert_eq!(
            (e.config, e.config1, e.exclude_user, e.exclude_kernel),
            (config, *config1, eu, ek),
            "{text}"
        );
        assert_eq!(e.pmu, "knl", "{text}");
    }
    // validate_x86.c's expected failures
    for text in [
        "knl::uops_retired:any:t",
        "knl::offcore_response_0:dmnd_data_rd:ddr_near:outstanding",
        "knl::offcore_response_1:dmnd_data_rd:outstanding",
    ] {
        assert!(
            matches!(err(&[], text), EventError::Libpfm { .. }),
            "{text}"
        );
    }
}

/// True in a child process where libpfm4 sees only the Knights Landing PMU (LIBPFM_FORCE_PMU):
/// the KNL offcore-response tests below run their body there.
fn knl_libpfm_child(test: &str) -> bool {
    libpfm_or_skip() && in_child(test, &[("LIBPFM_FORCE_PMU", "knl")])
}

/// KNL offcore-response events: the request, response and supplier bits in config1.
#[test]
fn knl_offcore_response_encodings() {
    if !knl_libpfm_child("events::tests::knl_offcore_response_encodings") {
        return;
    }
    let k = knl();
    // The knl README's example: config 0x01b7, MSR value 0x10001 in config1; on a root with a
    // type-4 `cpu` PMU the counter is named after it.
    assert_eq!(
        pfm_one(&k, "knl::OFFCORE_RESPONSE_0:DMND_DATA_RD:ANY_RESPONSE"),
        (4, 0x1b7, 0x10001, false, false, "cpu".into())
    );
    // The libpfm4 form: u=1 alone counts user only; c=2 is the counter mask (24-31).
    assert_eq!(
        pfm_one(
            &k,
            "knl::OFFCORE_RESPONSE_0:DMND_DATA_RD:ANY_RESPONSE:u=1:c=2"
        ),
        (4, 0x200_01b7, 0x10001, false, true, "cpu".into())
    );
    // Without a PMU prefix (LIBPFM_FORCE_PMU makes knl the only PMU) and in lower case.
    assert_eq!(one(&k, "offcore_response_0:dmnd_data_rd").config1, 0x10001);
    // ANY_RESPONSE is the default response; naming a supplier replaces it (no bit 16) …
    assert_eq!(
        one(&k, "knl::OFFCORE_RESPONSE_0:DMND_DATA_RD").config1,
        0x10001
    );
    assert_eq!(
        one(&k, "knl::OFFCORE_RESPONSE_0:DMND_DATA_RD:DDR_NEAR").config1,
        0x8080_0001
    );
    // … suppliers combine (DDR = 32|31|24|23, MCDRAM = 32|31|22|21) …
    assert_eq!(
        one(&k, "knl::OFFCORE_RESPONSE_0:DMND_DATA_RD:DDR:MCDRAM").config1,
        0x1_81e0_0001
    );
    // … and ANY_RESPONSE next to a supplier is refused by libpfm4 4.13 as a bad combination.
    let m = err(
        &k,
        "knl::OFFCORE_RESPONSE_0:DMND_DATA_RD:ANY_RESPONSE:DDR_NEAR",
    )
    .to_string();
    assert!(m.contains("cannot be combined"), "{m}");
    // OFFCORE_RESPONSE_1 uses MSR_OFFCORE_RSP_1 with its own event code 0x02b7.
    assert_eq!(
        pfm_one(&k, "knl::OFFCORE_RESPONSE_1:DMND_RFO:DDR_NEAR"),
        (4, 0x2b7, 0x8080_0002, false, false, "cpu".into())
    );
    // OUTSTANDING (bit 38) exists only on _0, and excludes response bits.
    assert_eq!(
        one(&k, "knl::OFFCORE_RESPONSE_0:OUTSTANDING").config1,
        0x40_0000_8000
    );
    let m = err(&k, "knl::OFFCORE_RESPONSE_1:OUTSTANDING").to_string();
    assert!(
        m.contains("'outstanding'") && m.contains("modifiers:"),
        "{m}"
    );
}

/// KNL offcore-response modifiers: i, e (which needs c>=1), k.
#[test]
fn knl_offcore_response_modifiers() {
    if !knl_libpfm_child("events::tests::knl_offcore_response_modifiers") {
        return;
    }
    let k = knl();
    // Modifiers: i is bit 23, e bit 18 and needs c>=1, k alone excludes user.
    assert_eq!(
        one(&k, "knl::OFFCORE_RESPONSE_0:DMND_DATA_RD:c=1:e=1").config,
        0x104_01b7
    );
    assert_eq!(
        one(
            &k,
            "knl::OFFCORE_RESPONSE_0:DMND_DATA_RD:ANY_RESPONSE:u=1:c=2:i=1:e=1"
        )
        .config,
        0x284_01b7
    );
    let m = err(&k, "knl::OFFCORE_RESPONSE_0:DMND_DATA_RD:e=1").to_string();
    assert!(m.contains("c>=1"), "{m}");
    let m = err(&k, "knl::OFFCORE_RESPONSE_0:DMND_DATA_RD:e").to_string();
    assert!(m.contains("c>=1"), "{m}");
    let e = one(&k, "knl::OFFCORE_RESPONSE_0:DMND_DATA_RD:k");
    assert!(e.exclude_user && !e.exclude_kernel);
}

/// What libpfm4 refuses for KNL offcore-response events, and how imc names it.
#[test]
fn knl_offcore_response_refusals() {
    if !knl_libpfm_child("events::tests::knl_offcore_response_refusals") {
        return;
    }
    let k = knl();
    // t (any thread) is not a KNL modifier for these events.
    let m = err(&k, "knl::OFFCORE_RESPONSE_0:DMND_DATA_RD:ANY_RESPONSE:t=1").to_string();
    assert!(m.contains("'t'") && m.contains("modifiers:"), "{m}");
    // Out-of-range values and unknown umasks are named.
    let m = err(&k, "knl::OFFCORE_RESPONSE_0:DMND_DATA_RD:c=256").to_string();
    assert!(m.contains("out of range"), "{m}");
    assert!(matches!(
        err(&k, "knl::OFFCORE_RESPONSE_0:DMND_DATA_RD:u=2"),
        EventError::Libpfm { .. }
    ));
    let m = err(&k, "knl::OFFCORE_RESPONSE_0:DMND_DATA_RDX").to_string();
    assert!(
        m.contains("'dmnd_data_rdx'") && m.contains("DMND_DATA_RD"),
        "{m}"
    );
    // Sampling attributes have no place in a counting tool.
    let m = err(&k, "knl::OFFCORE_RESPONSE_0:DMND_DATA_RD:period=1000").to_string();
    assert!(m.contains("not supported"), "{m}");
    // Only the forced PMU is active: an unknown event says how to pick another.
    let m = err(&k, "skl::INST_RETIRED:ANY_P").to_string();
    assert!(
        m.contains("LIBPFM_FORCE_PMU=skl") && m.contains("knl"),
        "{m}"
    );
}

#[test]
fn libpfm_on_this_host() {
    if !libpfm_or_skip() || std::env::var_os("LIBPFM_FORCE_PMU").is_some() {
        return;
    }
    // libpfm's generic `perf` PMU is active on any Linux host, even without a hardware PMU.
    let e = one(&skx(), "perf::PERF_COUNT_HW_INSTRUCTIONS:u");
    assert_eq!(
        (e.pmu_type, e.config, e.pmu.as_str()),
        (TYPE_HARDWARE, 1, "hardware")
    );
    assert!(!e.exclude_user && e.exclude_kernel);
    let e = one(&skx(), "perf::PERF_COUNT_SW_PAGE_FAULTS");
    assert_eq!((e.pmu_type, e.config), (TYPE_SOFTWARE, 2));
    let m = err(&skx(), "NO_SUCH_EVENT_XYZ").to_string();
    assert!(m.contains("LIBPFM_FORCE_PMU"), "{m}");
    // Unknown first, then the way to another model's tables.
    let unknown = m.find("unknown event").unwrap_or(usize::MAX);
    assert!(unknown < m.find("LIBPFM_FORCE_PMU").unwrap(), "{m}");
    let m = err(&skx(), "knl::OFFCORE_RESPONSE_0").to_string();
    assert!(m.contains("LIBPFM_FORCE_PMU=knl"), "{m}");
    assert!(matches!(
        err(&skx(), "knl::OFFCORE_RESPONSE_0::X"),
        EventError::Syntax { .. }
    ));
}

#[test]
fn missing_libpfm_says_what_to_install() {
    if !in_child(
        "events::tests::missing_libpfm_says_what_to_install",
        &[(pfm::LIBPFM_ENV, "/nonexistent/libpfm.so.4")],
    ) {
        return;
    }
    let e = err(&skx(), "knl::OFFCORE_RESPONSE_0:DMND_DATA_RD");
    assert!(matches!(e, EventError::NoLibpfm { .. }));
    assert!(!e.is_bad_input());
    assert!(e.to_string().contains("apt-get install libpfm4"), "{e}");
    // the other three forms do not need it
    assert_eq!(
        parse_event(&skx(), "uncore_imc/cas_count_read/")
            .unwrap()
            .len(),
        6
    );
    assert_eq!(one(&skx(), "cycles:u").pmu_type, TYPE_HARDWARE);
}

#[test]
fn control_characters_are_escaped_in_messages() {
    for text in ["cycles\n", "uncore_imc/cas\ncount/", "a\tb", "knl::X\r"] {
        let m = parse_event(&skx(), text).unwrap_err().to_string();
        assert!(!m.contains(['\n', '\r', '\t']), "{text:?}: {m:?}");
        assert!(
            m.contains(&text.escape_debug().to_string()),
            "{text:?}: {m:?}"
        );
    }
}

#[test]
fn resolve_reads_the_pmus_under_a_root() {
    // The project's own copy of the Skylake-SP tree (tests/fixtures), so this always runs.
    let root =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/skx-2socket");
    let v = resolve(&root, "uncore_imc/cas_count_read/").unwrap();
    assert_eq!(v.len(), 6);
    assert!(
        v.iter()
            .all(|e| e.config == 0x304 && e.bytes_per_count == Some(64.0))
    );
    let e = resolve(&root.join("nonexistent"), "uncore_imc/cas_count_read/").unwrap_err();
    assert!(matches!(e, EventError::Discovery { .. }), "{e:?}");
}

/// Minimised inputs the event fuzzer (fuzz/fuzz_targets/event.rs) kept, each pinned to the
/// error kind it must produce: never a panic, always one line naming the string.
#[test]
fn fuzz_found_edge_cases() {
    let syntax = [
        "::",
        "0D:::T:::_::l",
        "//",
        "/.ur45</",
        "--------o//",
        ".//",
        "=:R=",
        "𓌐",
        ":",
        "a:",
        "uncore_imc/cas_count_read,cas_count_write/",
        "./t,e,um/;",
    ];
    for text in syntax {
        let e = err(&skx(), text);
        assert!(
            matches!(e, EventError::Syntax { .. } | EventError::Modifier { .. }),
            "{text}: {e:?}"
        );
    }
    // a perf cache name matched case-insensitively, then an empty modifier
    assert!(matches!(
        err(&skx(), "BRANCH-LOADS:"),
        EventError::Modifier { .. }
    ));
    // PMU names made only of name characters are looked up, not refused as malformed
    for text in ["...../7/", ".0....../7/", "---a-//"] {
        assert!(
            matches!(
                parse_event(&skx(), text),
                Err(EventError::UnknownPmu { .. } | EventError::Syntax { .. })
            ),
            "{text}"
        );
    }
    // numbers at the edge of u64
    let e = one(&skx(), "cpu/config=18446744073709551615/");
    assert_eq!(e.config, u64::MAX);
    assert!(matches!(
        err(&skx(), "uncore_imc_0/event=0xffffffffffffffffff/"),
        EventError::Term { .. }
    ));
    // a term given twice is refused, as a repeated modifier is
    assert!(matches!(
        err(&skx(), "uncore_imc_0/edge,edge/"),
        EventError::Syntax { .. }
    ));
    assert!(matches!(
        err(&skx(), "uncore_imc_0/event=0x4,event=0x5/"),
        EventError::Syntax { .. }
    ));
    // Strings of libpfm characters only reach libpfm, which must refuse them cleanly.
    if libpfm_or_skip() {
        for text in ["+", "===", "+-+E++++++", "....", "-", "0x10"] {
            assert!(
                matches!(
                    parse_event(&skx(), text),
                    Err(EventError::Libpfm { .. } | EventError::Syntax { .. })
                ),
                "{text}"
            );
        }
    }
}

/// Format and cpulist inputs the other two fuzzers kept, as a record of what discovery's parsers
/// were shown to accept or refuse without panicking.
#[test]
fn fuzz_found_format_and_cpulist_cases() {
    use crate::discovery::cpulist::parse_cpulist;
    assert!(parse_format("f", "config:0-63").is_ok());
    assert!(parse_format("f", "config:63").is_ok());
    assert!(parse_format("f", "config:0-7,8-15,16-23,24-31,32-39,40-47,48-55,56-63").is_ok());
    for bad in [
        "config:",
        "config:0-",
        "config:-",
        "config:99",
        "config:0-7,,8",
        "config1:63-0",
    ] {
        assert!(parse_format("f", bad).is_err(), "{bad}");
    }
    assert_eq!(parse_cpulist("0,20\n").unwrap(), vec![0, 20]);
    for bad in ["3-1", "0,,1", "-", "4294967296", "0-4294967295"] {
        assert!(parse_cpulist(bad).is_err(), "{bad}");
    }
}

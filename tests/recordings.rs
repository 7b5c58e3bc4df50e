//! Recordings that earlier versions of imc wrote still read: files committed under
//! tests/recordings, each made once by the imc of its date and never rewritten.
use imc::model::{Direction, SlotRole, SlotScope, StallPart};
use imc::record::Reader;
use imc_tests::{imc, run_ok};
use serde_json::Value;
use std::path::Path;

/// `imc record -o … --duration 1 -I 200` on a 2-vCPU VM (page faults as the stand-in), by the
/// imc of 2026-11-27 before the plan's slots were typed: the header spells the slot's role and
/// scope in words.
const PAGE_FAULTS_2026_11: &str = "recordings/page-faults-2026-11.imc";

#[test]
fn a_recording_of_an_earlier_version_reads_with_its_typed_slots() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE_FAULTS_2026_11);
    let reader = Reader::open(&path).unwrap();
    let specs = reader.header().specs().unwrap();
    assert_eq!(specs.len(), 1, "{specs:?}");
    assert_eq!(specs[0].event, "page-faults");
    assert_eq!(specs[0].scope, SlotScope::Cpu);
    assert_eq!(specs[0].role, SlotRole::Traffic(Direction::Total));

    let out = run_ok(imc().args(["report", "--json"]).arg(&path));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["source"], "proxy:page-faults");
    let tasks = v["tasks"].as_array().unwrap();
    // What the file holds: 24 processes and 36,900 page faults among them.
    assert_eq!(tasks.len(), 24);
    let faults: f64 = tasks
        .iter()
        .map(|t| t["values"]["page-faults"].as_f64().unwrap())
        .sum();
    assert_eq!(faults, 36_900.0);
}

#[test]
fn every_slot_role_keeps_its_word_in_the_header() {
    use imc::record::HeaderSlot;
    let words = [
        ("read", SlotRole::Traffic(Direction::Read)),
        ("write", SlotRole::Traffic(Direction::Write)),
        ("total", SlotRole::Traffic(Direction::Total)),
        ("weight", SlotRole::Weight(None)),
        ("weight-read", SlotRole::Weight(Some(Direction::Read))),
        ("weight-write", SlotRole::Weight(Some(Direction::Write))),
        ("weight-remote", SlotRole::RemoteWeight(None)),
        (
            "weight-read-remote",
            SlotRole::RemoteWeight(Some(Direction::Read)),
        ),
        (
            "weight-write-remote",
            SlotRole::RemoteWeight(Some(Direction::Write)),
        ),
        ("other", SlotRole::Other),
        ("stall", SlotRole::Stall(StallPart::Stalled)),
        ("stall-cycles", SlotRole::Stall(StallPart::Cycles)),
        ("stall-time", SlotRole::Stall(StallPart::Time)),
    ];
    for (word, role) in words {
        let slot = HeaderSlot {
            event: "e".into(),
            scope: SlotScope::Package,
            role,
            bytes_per_count: Some(64.0),
            counter_bits: 48,
        };
        let json = serde_json::to_value(&slot).unwrap();
        assert_eq!(json["role"], word);
        assert_eq!(json["scope"], "package");
        let back: HeaderSlot = serde_json::from_value(json).unwrap();
        assert_eq!(back, slot);
    }
    // A weight of every direction is written as the plain word.
    let total = HeaderSlot {
        event: "e".into(),
        scope: SlotScope::Cpu,
        role: SlotRole::Weight(Some(Direction::Total)),
        bytes_per_count: None,
        counter_bits: 64,
    };
    assert_eq!(serde_json::to_value(&total).unwrap()["role"], "weight");
    let bad =
        r#"{"event":"e","scope":"cpu","role":"sideways","bytes_per_count":null,"counter_bits":64}"#;
    let err = serde_json::from_str::<HeaderSlot>(bad)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown slot role 'sideways'"), "{err}");
}

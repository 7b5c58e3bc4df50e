//! The core traffic and stall tables: every listed CPU, its encodings, and the reasons where none.
use super::amd::NOTE_ZEN_NO_WRITE;
use super::intel::NOTE_ATOM_LLC;
use super::*;
use crate::model::Direction;

fn intel(model: u32) -> Machine {
    Machine {
        vendor: Some("GenuineIntel".into()),
        family: Some(6),
        model: Some(model),
        ..Default::default()
    }
}
fn amd(family: u32, model: u32) -> Machine {
    Machine {
        vendor: Some("AuthenticAMD".into()),
        family: Some(family),
        model: Some(model),
        ..Default::default()
    }
}
fn power(generation: &str) -> Machine {
    Machine {
        power: Some(generation.into()),
        ..Default::default()
    }
}

fn find<'a>(t: &'a CoreTraffic, name: &str) -> &'a CoreTrafficEvent {
    t.events
        .iter()
        .chain(t.alt_write.iter())
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("{} has no {name}: {:?}", t.model, t.events))
}

/// Every CPU the table covers: (machine, core PMU).
fn all() -> Vec<(Machine, &'static str)> {
    let mut v = Vec::new();
    for m in [
        0x55, 0x6a, 0x6c, 0x8f, 0xcf, 0xad, 0xae, 0x57, 0x85, 0x4e, 0x5e, 0x8e, 0x9e, 0xa5, 0xa6,
        0x7d, 0x7e, 0x8c, 0x8d, 0xa7,
    ] {
        v.push((intel(m), "cpu"));
    }
    for m in [
        0x97, 0x9a, 0xb7, 0xba, 0xbf, 0xaa, 0xac, 0xb5, 0xc5, 0xc6, 0xbd,
    ] {
        v.push((intel(m), "cpu_core"));
        v.push((intel(m), "cpu_atom"));
    }
    for (f, m) in [
        (0x17, 0x31),
        (0x17, 0x71),
        (0x19, 0x01),
        (0x19, 0x21),
        (0x19, 0x50),
        (0x19, 0x11),
        (0x19, 0x61),
        (0x19, 0xa0),
        (0x1a, 0x02),
        (0x1a, 0x44),
    ] {
        v.push((amd(f, m), "cpu"));
    }
    for g in ["POWER8", "POWER9", "POWER10"] {
        v.push((power(g), "cpu"));
    }
    v
}

#[test]
fn every_listed_cpu_has_a_read_weight_within_the_budget() {
    for (m, pmu) in all() {
        let t = core_traffic(&m, pmu, None).unwrap_or_else(|e| panic!("{m:?} {pmu}: {e}"));
        assert!(!t.events.is_empty() && t.events.len() <= 4, "{}", t.model);
        assert!(
            t.events.iter().any(|e| e.direction == Direction::Read),
            "{} has no read weight",
            t.model
        );
        let offcore = t.events.iter().filter(|e| e.offcore_register).count();
        assert!(
            offcore <= 2,
            "{} needs {offcore} offcore registers",
            t.model
        );
        // The alternative write replaces the write and frees the remote reads' registers.
        if let Some(alt) = &t.alt_write {
            assert_eq!(alt.direction, Direction::Write);
            let kept = t
                .events
                .iter()
                .filter(|e| e.offcore_register && e.locality != Locality::Remote)
                .count();
            assert!(kept + usize::from(alt.offcore_register) <= 2, "{}", t.model);
        }
        for e in t.events.iter().chain(t.alt_write.iter()) {
            assert!(
                !e.source.is_empty() && e.terms.starts_with("event=0x"),
                "{e:?}"
            );
            assert_eq!(
                e.offcore_register,
                e.terms.contains("offcore_rsp="),
                "{}: {e:?}",
                t.model
            );
            let line = if m.power.is_some() { 128.0 } else { 64.0 };
            assert_eq!(e.bytes_per_count, line);
            assert!(!e.terms.contains("cache-misses"));
        }
        if m.is_amd() {
            assert!(t.notes.contains(&NOTE_ZEN_NO_WRITE), "{}", t.model);
            assert!(t.events.iter().all(|e| e.direction == Direction::Read));
        }
    }
}

#[test]
fn intel_server_encodings() {
    let t = core_traffic(&intel(0x55), "cpu", Some("skylake")).unwrap();
    let l = find(&t, "OCR.ALL_READS.L3_MISS_LOCAL_DRAM.SNOOP_MISS_OR_NO_FWD");
    assert_eq!(l.terms, "event=0xb7,umask=0x01,offcore_rsp=0x6040007f7");
    assert_eq!(l.locality, Locality::Local);
    let r = find(&t, "OCR.ALL_READS.L3_MISS_REMOTE_DRAM.SNOOP_MISS_OR_NO_FWD");
    assert_eq!(r.terms, "event=0xb7,umask=0x01,offcore_rsp=0x63b8007f7");
    assert_eq!(
        find(&t, "L2_LINES_OUT.NON_SILENT").terms,
        "event=0xf2,umask=0x02"
    );

    let t = core_traffic(&intel(0x6a), "cpu", Some("icelake")).unwrap();
    assert_eq!(
        find(&t, "OCR.READS_TO_CORE.LOCAL_SOCKET_DRAM").terms,
        "event=0xb7,umask=0x01,offcore_rsp=0x70c000477"
    );
    assert_eq!(
        find(&t, "OCR.WRITE_ESTIMATE.MEMORY").terms,
        "event=0xb7,umask=0x01,offcore_rsp=0xfbff80822"
    );

    for model in [0x8f, 0xcf, 0xad] {
        let t = core_traffic(&intel(model), "cpu", None).unwrap();
        let l = find(&t, "OCR.READS_TO_CORE.LOCAL_SOCKET_DRAM");
        assert_eq!(l.terms, "event=0x2a,umask=0x01,offcore_rsp=0x70c004477");
        assert_eq!(l.counter_mask, Some(0xf));
        assert_eq!(
            find(&t, "OCR.READS_TO_CORE.REMOTE_DRAM").terms,
            "event=0x2a,umask=0x01,offcore_rsp=0x730004477"
        );
        assert_eq!(
            find(&t, "L2_LINES_OUT.NON_SILENT").terms,
            "event=0x26,umask=0x02"
        );
        let w = t.alt_write.as_ref().unwrap();
        assert_eq!(w.name, "OCR.MODIFIED_WRITE.ANY_RESPONSE");
        assert_eq!(w.terms, "event=0x2a,umask=0x01,offcore_rsp=0x10808");
    }
}

#[test]
fn intel_client_and_hybrid_encodings() {
    let t = core_traffic(&intel(0x8d), "cpu", Some("icelake")).unwrap();
    let llc = find(&t, "LONGEST_LAT_CACHE.MISS");
    assert_eq!(
        (llc.terms, llc.locality),
        ("event=0x2e,umask=0x41", Locality::Any)
    );

    let core = core_traffic(&intel(0x97), "cpu_core", Some("alderlake_hybrid")).unwrap();
    assert_eq!(
        find(&core, "L2_LINES_OUT.NON_SILENT").terms,
        "event=0x26,umask=0x02"
    );
    let atom = core_traffic(&intel(0x97), "cpu_atom", Some("alderlake_hybrid")).unwrap();
    assert_eq!(atom.model, "Alder/Raptor Lake (cpu_atom)");
    assert_eq!(
        find(&atom, "OCR.COREWB_M.ANY_RESPONSE").terms,
        "event=0xb7,umask=0x01,offcore_rsp=0x10008"
    );
    assert!(atom.notes.contains(&NOTE_ATOM_LLC));
    // Meteor Lake's Crestmont has no modified-writeback event.
    let mtl = core_traffic(&intel(0xaa), "cpu_atom", None).unwrap();
    assert!(mtl.events.iter().all(|e| e.direction == Direction::Read));
    // A hybrid part with its E-cores off registers plain `cpu` for the P-cores.
    assert_eq!(
        core_traffic(&intel(0x97), "cpu", None).unwrap().model,
        "Alder/Raptor Lake (cpu_core)"
    );
}

#[test]
fn knl_weighs_ddr_and_mcdram() {
    let t = core_traffic(&intel(0x57), "cpu", Some("knights-landing")).unwrap();
    let ddr = find(&t, "OFFCORE_RESPONSE.ANY_READ.DDR");
    assert_eq!(ddr.terms, "event=0xb7,umask=0x01,offcore_rsp=0x1818032f7");
    assert_eq!((ddr.memory, ddr.counter_mask), (Memory::Dram, Some(0x3)));
    let mc = find(&t, "OFFCORE_RESPONSE.ANY_READ.MCDRAM");
    assert_eq!(mc.terms, "event=0xb7,umask=0x01,offcore_rsp=0x1806032f7");
    assert_eq!(mc.memory, Memory::Mcdram);
}

#[test]
fn amd_encodings() {
    let z2 = core_traffic(&amd(0x17, 0x31), "cpu", None).unwrap();
    assert_eq!(z2.model, "Zen 2");
    assert_eq!(
        find(&z2, "ls_refills_from_sys.ls_mabresp_lcl_dram").terms,
        "event=0x43,umask=0x08"
    );
    assert_eq!(
        find(&z2, "ls_refills_from_sys.ls_mabresp_rmt_dram").locality,
        Locality::Remote
    );
    let z3 = core_traffic(&amd(0x19, 0x01), "cpu", None).unwrap();
    assert_eq!(z3.model, "Zen 3");
    assert_eq!(
        find(&z3, "ls_any_fills_from_sys.mem_io_remote").terms,
        "event=0x44,umask=0x40"
    );
    assert_eq!(
        core_traffic(&amd(0x19, 0x50), "cpu", None).unwrap().model,
        "Zen 3"
    );
    let z4 = core_traffic(&amd(0x19, 0x11), "cpu", None).unwrap();
    assert_eq!(z4.model, "Zen 4");
    assert_eq!(
        find(&z4, "ls_any_fills_from_sys.dram_io_near").terms,
        "event=0x44,umask=0x08"
    );
    assert_eq!(
        find(&z4, "l2_pf_miss_l2_l3 (L2 prefetchers)").terms,
        "event=0x72,umask=0x1f"
    );
    let z5 = core_traffic(&amd(0x1a, 0x02), "cpu", None).unwrap();
    assert_eq!(z5.events.len(), 2);
    assert_eq!(
        find(&z5, "l2_fill_rsp_src.dram_io_far").terms,
        "event=0x165,umask=0x40"
    );
}

#[test]
fn power_encodings() {
    let p9 = core_traffic(&power("POWER9"), "cpu", Some("POWER9")).unwrap();
    let co = find(&p9, "PM_MEM_CO");
    assert_eq!(
        (co.terms, co.direction),
        ("event=0x4c058", Direction::Write)
    );
    assert_eq!(co.counter_mask, Some(0b1000));
    assert_eq!(find(&p9, "PM_MEM_READ").counter_mask, Some(0b0001));
    let p8 = core_traffic(&power("POWER8"), "cpu", None).unwrap();
    assert_eq!(find(&p8, "PM_DATA_ALL_FROM_LMEM").terms, "event=0x62c048");
    assert_eq!(
        find(&p8, "PM_DATA_ALL_FROM_DMEM").locality,
        Locality::Remote
    );
    let p10 = core_traffic(&power("POWER10"), "cpu", None).unwrap();
    assert!(p10.events.iter().all(|e| e.direction == Direction::Read));
}

#[test]
fn unknown_cpus_are_refused_with_a_reason() {
    let cases: Vec<(Machine, &str, Option<&str>, &str)> = vec![
        (amd(0x17, 0x01), "cpu", None, "Zen/Zen+"),
        (amd(0x17, 0x18), "cpu", None, "Zen/Zen+"),
        (amd(0x15, 0x02), "cpu", None, "predates Zen 2"),
        (amd(0x10, 0x02), "cpu", None, "predates Zen 2"),
        (
            Machine {
                vendor: Some("HygonGenuine".into()),
                family: Some(0x18),
                model: Some(0),
                ..Default::default()
            },
            "cpu",
            None,
            "HygonGenuine",
        ),
        (intel(0x3f), "cpu", None, "model 0x3f"),
        (
            intel(0x55),
            "cpu",
            Some("generic_arch_v4"),
            "architectural mode",
        ),
        (intel(0x55), "cpu", Some("icelake"), "does not fit"),
        (intel(0x55), "cpu_atom", None, "no core PMU 'cpu_atom'"),
        (intel(0x97), "uncore_imc_0", None, "no core PMU"),
        (amd(0x19, 0x11), "cpu_core", None, "no core PMU"),
        (power("POWER7"), "cpu", None, "POWER7"),
        (power("POWER10"), "cpu", Some("ISAv3"), "ISAv3"),
        (Machine::default(), "cpu", None, "no CPU vendor"),
        (
            Machine {
                vendor: Some("GenuineIntel".into()),
                family: Some(15),
                model: Some(4),
                ..Default::default()
            },
            "cpu",
            None,
            "not family 6",
        ),
    ];
    for (m, pmu, caps, want) in cases {
        let err = core_traffic(&m, pmu, caps).unwrap_err();
        assert!(err.contains(want), "{m:?} {pmu}: '{err}' lacks '{want}'");
        assert!(!err.contains('\n'), "{err}");
    }
}

/// On every fixture tree with a memory-controller source, each core PMU the kernel would
/// expose gets its weights, and every term encodes through that PMU's own format/ files.
#[test]
fn fixture_trees_encode_their_weights() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let cases: &[(&str, &[&str], &str)] = &[
        ("skx-2socket", &["cpu"], "Skylake-SP/Cascade Lake"),
        ("skx-noevents", &["cpu"], "Skylake-SP/Cascade Lake"),
        ("icx-gaps", &["cpu"], "Ice Lake-SP"),
        ("spr-2socket", &["cpu"], "Sapphire Rapids"),
        ("icl-client", &["cpu"], "Ice Lake client"),
        ("tgl-client", &["cpu"], "Tiger Lake"),
        ("adl-hybrid", &["cpu_core", "cpu_atom"], "Alder/Raptor Lake"),
        ("knl", &["cpu"], "Knights Landing"),
        ("zen2-1socket", &["cpu"], "Zen 2"),
        ("zen3-ibs", &["cpu"], "Zen 3"),
        ("zen4-2socket", &["cpu"], "Zen 4"),
        ("power9-2chip", &["cpu"], "POWER9"),
        ("power9-imc-full", &["cpu"], "POWER9"),
    ];
    for (tree, pmus, model) in cases {
        let root = fixtures.join(tree);
        let m = crate::discovery::machine::read_machine(&root).unwrap();
        for name in *pmus {
            let pmu =
                crate::discovery::read_pmu(&root, name).unwrap_or_else(|e| panic!("{tree}: {e}"));
            let caps = std::fs::read_to_string(pmu.path.join("caps/pmu_name")).ok();
            let t = core_traffic(&m, name, caps.as_deref().map(str::trim))
                .unwrap_or_else(|e| panic!("{tree} {name}: {e}"));
            assert!(t.model.starts_with(model), "{tree}: {}", t.model);
            for e in t.events.iter().chain(t.alt_write.iter()) {
                let w = crate::discovery::encode_terms(&pmu, e.terms)
                    .unwrap_or_else(|err| panic!("{tree} {name} {}: {err}", e.name));
                assert_ne!(w.config, 0, "{tree} {}", e.name);
                assert_eq!(w.config1 != 0, e.offcore_register, "{tree} {}", e.name);
            }
        }
    }
    // The format files place what the names say: event 0x165 splits over bits 0-7 and
    // 32-35 on AMD; offcore_rsp fills config1 on Intel.
    let zen = crate::discovery::read_pmu(&fixtures.join("zen4-2socket"), "cpu").unwrap();
    let w = crate::discovery::encode_terms(&zen, "event=0x165,umask=0x08").unwrap();
    assert_eq!(w.config, 0x1_0000_0865);
    let spr = crate::discovery::read_pmu(&fixtures.join("spr-2socket"), "cpu").unwrap();
    let t = core_traffic(&intel(0x8f), "cpu", Some("sapphire_rapids")).unwrap();
    let w = crate::discovery::encode_terms(&spr, t.events[0].terms).unwrap();
    assert_eq!((w.config, w.config1), (0x012a, 0x7_0c00_4477));
}

#[test]
fn stall_events_are_chosen_per_model_with_a_source_and_a_reason_where_none() {
    for m in [0x55, 0x6a, 0x6c, 0x8f, 0xcf, 0xad, 0xae] {
        let t = core_stall(&intel(m), "cpu", None).unwrap();
        assert_eq!(t.stalled.name, "CYCLE_ACTIVITY.STALLS_L3_MISS");
        assert_eq!(t.stalled.terms, "event=0xa3,umask=0x06,cmask=6");
        assert_eq!(t.stalled.counter_mask, Some(0xf));
        assert!(t.cycles.fixed && t.cycles.terms == "event=0x3c");
        assert_eq!(t.generic_counters, if m == 0x55 { 4 } else { 8 });
        assert!(t.stalled.source.contains("memory.json"), "{}", t.model);
    }
    for (f, m) in [(0x19, 0x11), (0x19, 0xa0), (0x1a, 0x02)] {
        let t = core_stall(&amd(f, m), "cpu", None).unwrap();
        assert_eq!(t.stalled.terms, "event=0xd6,umask=0xa2");
        // Each generation's own event table, not another's.
        let table = if f == 0x1a {
            "amdzen5/execution.json"
        } else {
            "amdzen4/core.json"
        };
        assert!(t.stalled.source.contains(table), "{}", t.stalled.source);
        assert_eq!(t.cycles.terms, "event=0x76");
        assert_eq!((t.generic_counters, t.watchdog), (6, Watchdog::Generic));
    }
    let p9 = core_stall(&power("POWER9"), "cpu", None).unwrap();
    assert_eq!(
        (p9.stalled.terms, p9.stalled.counter_mask),
        ("event=0x4c01a", Some(0x8))
    );
    let p10 = core_stall(&power("POWER10"), "cpu", None).unwrap();
    assert_eq!(
        (p10.stalled.terms, p10.stalled.counter_mask),
        ("event=0x2c018", Some(0x2))
    );
    assert!(p10.cycles.fixed && p10.watchdog == Watchdog::None);
    for (m, pmu, why) in [
        (amd(0x19, 0x01), "cpu", "Zen 3"),
        (amd(0x17, 0x31), "cpu", "before Zen 4"),
        (intel(0x57), "cpu", "no L3"),
        (intel(0x97), "cpu_atom", "cpu_atom"),
        (intel(0x8c), "cpu", "server parts only"),
    ] {
        let e = core_stall(&m, pmu, None).unwrap_err();
        assert!(e.contains(why), "{m:?} {pmu}: {e}");
    }
    let e = core_stall(&intel(0x55), "cpu", Some("generic_arch_v4")).unwrap_err();
    assert!(e.contains("architectural"), "{e}");
}

//! The contract between the eBPF program and userspace, checked without root on the built
//! object: every map, global and program userspace names is in the object with the kind
//! userspace takes it as, and the object carries the record ABI version this imc reads (an
//! object of another version is refused before it is loaded).
use imc_common as c;
use imc_tests::{have_bpf_object, require};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use std::collections::BTreeMap;

/// The object's symbols: name → the section they live in.
fn symbols(bytes: &[u8]) -> BTreeMap<String, (String, SymbolKind)> {
    let file = object::File::parse(bytes).expect("the eBPF object is an ELF file");
    let mut out = BTreeMap::new();
    for s in file.symbols() {
        let (Ok(name), Some(index)) = (s.name(), s.section_index()) else {
            continue;
        };
        let section = file.section_by_index(index).unwrap();
        out.insert(
            name.to_string(),
            (section.name().unwrap_or("").to_string(), s.kind()),
        );
    }
    out
}

fn object_bytes() -> Option<Vec<u8>> {
    if !require(
        have_bpf_object(),
        "imc was built without its eBPF program: run the suite with `cargo xtask test`",
    ) {
        return None;
    }
    Some(imc::sampler::object::program_bytes().unwrap().into_owned())
}

#[test]
fn every_name_userspace_uses_is_in_the_object() {
    let Some(bytes) = object_bytes() else {
        return;
    };
    let syms = symbols(&bytes);
    let mut maps: Vec<&str> = c::SLOT_MAP_NAMES.to_vec();
    maps.extend([
        c::TICKS_MAP_NAME,
        c::HEADS_MAP_NAME,
        c::WAKE_MAP_NAME,
        c::PKG_MAP_NAME,
        c::PKG_SLOT_MAP_NAME,
        c::READERS_MAP_NAME,
        c::GROUP_LAST_MAP_NAME,
        c::STATS_MAP_NAME,
        c::AGG_MAP_NAME,
    ]);
    let globals = [
        c::NR_SLOTS_GLOBAL,
        c::TIMED_SLOTS_GLOBAL,
        c::RING_LEN_GLOBAL,
        c::WAKE_EVERY_GLOBAL,
        c::PKG_SLOTS_GLOBAL,
        c::PKG_MIN_GAP_GLOBAL,
        c::AGGREGATE_GLOBAL,
        c::LONG_SLICE_GLOBAL,
        c::MIN_FLUSH_GLOBAL,
        c::ABI_VERSION_GLOBAL,
    ];
    let programs = [c::TICK_PROGRAM, c::TICK_TP_PROGRAM, c::SWITCH_PROGRAM];
    let mut missing = Vec::new();
    for m in maps {
        match syms.get(m) {
            Some((section, _)) if section == "maps" || section == ".maps" => {}
            other => missing.push(format!("map {m} ({other:?})")),
        }
    }
    for g in globals {
        // Set by the loader before the verifier sees them: read-only data.
        match syms.get(g) {
            Some((section, SymbolKind::Data)) if section == ".rodata" => {}
            other => missing.push(format!("global {g} ({other:?})")),
        }
    }
    for p in programs {
        match syms.get(p) {
            Some((section, SymbolKind::Text)) if section != ".text" => {}
            other => missing.push(format!("program {p} ({other:?})")),
        }
    }
    assert!(
        missing.is_empty(),
        "names userspace uses that the object lacks: {missing:?}"
    );
    // Userspace names its programs through these constants only: a string literal would
    // escape this check.
    let sampler = concat!(env!("CARGO_MANIFEST_DIR"), "/../imc-user/src/sampler");
    for e in std::fs::read_dir(sampler).unwrap() {
        let path = e.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for p in programs {
            assert!(
                !text.contains(&format!("\"{p}\"")),
                "{} names program {p} by a literal",
                path.display()
            );
        }
    }
}

#[test]
fn the_object_carries_this_imcs_abi_and_another_is_refused() {
    let Some(bytes) = object_bytes() else {
        return;
    };
    assert_eq!(
        imc::sampler::object::abi_version(&bytes),
        Some(c::RECORD_ABI_VERSION)
    );
    imc::sampler::object::check_abi(&bytes).expect("this build's object is accepted");

    // The same object claiming the previous version.
    let file = object::File::parse(&*bytes).unwrap();
    let sym = file
        .symbols()
        .find(|s| s.name() == Ok(c::ABI_VERSION_GLOBAL))
        .unwrap();
    let section = file.section_by_index(sym.section_index().unwrap()).unwrap();
    let (offset, _) = section.file_range().unwrap();
    let at = (offset + sym.address() - section.address()) as usize;
    drop(file);
    let mut old = bytes.clone();
    old[at..at + 4].copy_from_slice(&(c::RECORD_ABI_VERSION - 1).to_le_bytes());
    assert_eq!(
        imc::sampler::object::abi_version(&old),
        Some(c::RECORD_ABI_VERSION - 1)
    );
    let e = imc::sampler::object::check_abi(&old)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("ABI {}", c::RECORD_ABI_VERSION - 1))
            && e.contains("cargo xtask build"),
        "{e}"
    );
    assert!(!e.contains('\n'), "one line: {e}");
    // Not an object at all.
    assert_eq!(imc::sampler::object::abi_version(b"not an ELF file"), None);
    assert!(imc::sampler::object::check_abi(b"not an ELF file").is_err());
}

/// The value size in the `maps` section's definition of `map` (aya-ebpf's bpf_map_def: type,
/// key size, value size, ...).
fn value_size(bytes: &[u8], map: &str) -> u32 {
    let file = object::File::parse(bytes).unwrap();
    let sym = file.symbols().find(|s| s.name() == Ok(map)).unwrap();
    let section = file.section_by_index(sym.section_index().unwrap()).unwrap();
    let (offset, _) = section.file_range().unwrap();
    let at = (offset + sym.address() - section.address()) as usize + 8;
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

#[test]
fn the_rings_are_loaded_with_entries_of_the_configured_slots() {
    let Some(bytes) = object_bytes() else {
        return;
    };
    // As built, an entry is a whole record: that this reads TickRecord's size shows the offset
    // is the definition's value size.
    assert_eq!(
        value_size(&bytes, c::TICKS_MAP_NAME),
        c::TickRecord::SIZE as u32
    );
    let entry = c::TickRecord::entry_size(2) as u32;
    assert_eq!(entry, 112);
    let sized =
        imc::sampler::object::with_value_size(&bytes, c::TICKS_MAP_NAME, entry).expect("sized");
    assert_eq!(value_size(&sized, c::TICKS_MAP_NAME), entry);
    // Nothing else changed: the four bytes of that one field differ.
    let differing = bytes.iter().zip(&sized).filter(|(a, b)| a != b).count();
    assert!((1..=4).contains(&differing), "{differing} bytes changed");
    assert_eq!(
        value_size(&sized, c::HEADS_MAP_NAME),
        value_size(&bytes, c::HEADS_MAP_NAME)
    );
    // A name that is no map definition, or no object, is refused rather than guessed at.
    assert!(imc::sampler::object::with_value_size(&bytes, c::ABI_VERSION_GLOBAL, 8).is_none());
    assert!(imc::sampler::object::with_value_size(&bytes, "NO_SUCH_MAP", 8).is_none());
    assert!(imc::sampler::object::with_value_size(b"not an ELF file", "TICKS", 8).is_none());
}

/// compiler_builtins' memset/memcpy copy a byte at a time in eBPF (about five instructions a
/// byte); a struct assignment or a zeroed array the compiler turns into one of them cost a
/// switch most of its own time. The programs call none: they store field by field.
#[test]
fn no_program_calls_a_byte_wise_copy() {
    let Some(bytes) = object_bytes() else {
        return;
    };
    let file = object::File::parse(&*bytes).unwrap();
    let mut calls = Vec::new();
    let mut programs = 0;
    for section in file.sections() {
        let name = section.name().unwrap_or("").to_string();
        let is_program = name.starts_with("raw_tp") || name.starts_with("perf_event");
        if !is_program {
            continue;
        }
        programs += 1;
        for (_, reloc) in section.relocations() {
            if let object::RelocationTarget::Symbol(index) = reloc.target() {
                let sym = file.symbol_by_index(index).unwrap();
                let target = sym.name().unwrap_or("");
                if ["memset", "memcpy", "memmove", "memcmp", "bcmp"].contains(&target) {
                    calls.push(format!("{name} calls {target}"));
                }
            }
        }
    }
    assert!(programs >= 3, "{programs} program sections");
    assert!(calls.is_empty(), "{calls:?}");
}

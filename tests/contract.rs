//! The contract between the eBPF program and userspace, checked without root on the built
//! object: every map, global and program userspace names is in the object with the kind
//! userspace takes it as, and the object carries the record ABI version this imc reads (an
//! object of another version is refused before it is loaded).
use imc_common as c;
use imc_tests::{have_bpf_object, require};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use std::collections::{BTreeMap, BTreeSet};

/// The object's exported symbols: name → the section they live in and their kind.
fn symbols(bytes: &[u8]) -> BTreeMap<String, (String, SymbolKind)> {
    let file = object::File::parse(bytes).expect("the eBPF object is an ELF file");
    let mut out = BTreeMap::new();
    for s in file.symbols() {
        // Only the names the object exports: the compiler's own constants (`anon.*`) are local.
        let (Ok(name), Some(index), true) = (s.name(), s.section_index(), s.is_global()) else {
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

/// The object's symbols in the map sections, in read-only data, and the programs, by name.
fn object_names(
    syms: &BTreeMap<String, (String, SymbolKind)>,
) -> (BTreeSet<&str>, BTreeSet<&str>, BTreeSet<&str>) {
    let mut maps = BTreeSet::new();
    let mut globals = BTreeSet::new();
    let mut programs = BTreeSet::new();
    for (name, (section, kind)) in syms {
        match (section.as_str(), kind) {
            ("maps" | ".maps", _) => {
                maps.insert(name.as_str());
            }
            // A writable global in a data section of its own: the loader makes the section a
            // one-entry array named after it, which userspace writes.
            (s, SymbolKind::Data) if s.starts_with(".data.") => {
                maps.insert(section.as_str());
            }
            // Set by the loader before the verifier sees them: read-only data.
            (".rodata", SymbolKind::Data) => {
                globals.insert(name.as_str());
            }
            (s, SymbolKind::Text) if s != ".text" && !s.is_empty() => {
                programs.insert(name.as_str());
            }
            _ => {}
        }
    }
    (maps, globals, programs)
}

/// What aya-log adds to every object that logs: its ring and its level.
const AYA_LOG_NAMES: [&str; 2] = ["AYA_LOGS", "AYA_LOG_LEVEL"];

#[test]
fn every_name_userspace_uses_is_in_the_object() {
    let Some(bytes) = object_bytes() else {
        return;
    };
    let syms = symbols(&bytes);
    let (maps, globals, programs) = object_names(&syms);
    // Both ways: each name imc-common lists is in the object with the kind userspace takes it
    // as, and each map, global and program of the object is one imc-common lists (or
    // aya-log's), so neither half can add a name the other does not know.
    let mut mismatched = Vec::new();
    for (kind, listed, found) in [
        ("map", &c::MAP_NAMES[..], &maps),
        ("global", &c::GLOBAL_NAMES[..], &globals),
        ("program", &c::PROGRAM_NAMES[..], &programs),
    ] {
        for name in listed {
            if !found.contains(name) {
                mismatched.push(format!(
                    "{kind} {name} is not in the object ({:?})",
                    syms.get(*name)
                ));
            }
        }
        for name in found.iter() {
            if !listed.contains(name) && !AYA_LOG_NAMES.contains(name) {
                mismatched.push(format!(
                    "{kind} {name} of the object is not listed in imc-common"
                ));
            }
        }
    }
    assert!(mismatched.is_empty(), "{mismatched:?}");
    // The lists hold each name once, and the slot maps are the ones userspace indexes by slot.
    let all: Vec<&str> = c::MAP_NAMES
        .iter()
        .chain(&c::GLOBAL_NAMES)
        .chain(&c::PROGRAM_NAMES)
        .copied()
        .collect();
    let unique: BTreeSet<&str> = all.iter().copied().collect();
    assert_eq!(unique.len(), all.len(), "a name listed twice: {all:?}");
    assert!(c::SLOT_MAP_NAMES.iter().all(|m| c::MAP_NAMES.contains(m)));
    let programs = c::PROGRAM_NAMES;
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
    // As built, an entry is a whole record: that this reads Record's size shows the offset
    // is the definition's value size.
    assert_eq!(
        value_size(&bytes, c::TICKS_MAP_NAME),
        c::Record::SIZE as u32
    );
    let entry = c::Record::entry_size(2) as u32;
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

/// The interval clock's section holds the clock alone, so the array the loader makes of it has
/// one value of exactly the size userspace writes.
#[test]
fn the_interval_clock_is_alone_in_its_section() {
    let Some(bytes) = object_bytes() else {
        return;
    };
    let file = object::File::parse(&*bytes).expect("the eBPF object is an ELF file");
    let section = file
        .section_by_name(c::INTERVALS_MAP_NAME)
        .expect("the interval clock's section is in the object");
    let clock = std::mem::size_of::<c::IntervalClock>() as u64;
    assert_eq!(section.size(), clock, "the section is the clock's size");
    let held: Vec<_> = file
        .symbols()
        .filter(|s| s.section_index() == Some(section.index()) && s.size() > 0)
        .map(|s| (s.name().unwrap_or("").to_string(), s.size()))
        .collect();
    assert_eq!(held.len(), 1, "one global in the section: {held:?}");
    assert_eq!(held[0].1, clock, "{held:?}");
}

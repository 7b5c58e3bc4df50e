//! perf's generic event names (`cycles`, `page-faults`, `LLC-load-misses`, …) with perf-style
//! `:u` / `:k` modifiers.
//!
//! The tables follow perf's lexer (tools/perf/util/parse-events.l) and the legacy-cache decoder
//! (parse_events__decode_legacy_cache): a hardware or software name is matched exactly; a
//! hardware-cache name is `CACHE[-OP][-RESULT]` (or `CACHE-RESULT`) with perf's aliases, matched
//! case-insensitively. Hardware and software names win over cache names, so `branch-misses` is
//! PERF_COUNT_HW_BRANCH_MISSES and not the BPU cache event, as in perf.
use super::error::EventError;
use super::terms::Modifiers;
use crate::model::Encoded;
use crate::sys::perf::{TYPE_HARDWARE, TYPE_HW_CACHE, TYPE_SOFTWARE};

/// `PERF_COUNT_HW_*` (include/uapi/linux/perf_event.h), with perf's alternative spellings.
const HARDWARE: &[(&str, u64)] = &[
    ("cpu-cycles", 0),
    ("cycles", 0),
    ("instructions", 1),
    ("cache-references", 2),
    ("cache-misses", 3),
    ("branch-instructions", 4),
    ("branches", 4),
    ("branch-misses", 5),
    ("bus-cycles", 6),
    ("stalled-cycles-frontend", 7),
    ("idle-cycles-frontend", 7),
    ("stalled-cycles-backend", 8),
    ("idle-cycles-backend", 8),
    ("ref-cycles", 9),
];

/// `PERF_COUNT_SW_*`.
const SOFTWARE: &[(&str, u64)] = &[
    ("cpu-clock", 0),
    ("task-clock", 1),
    ("page-faults", 2),
    ("faults", 2),
    ("context-switches", 3),
    ("cs", 3),
    ("cpu-migrations", 4),
    ("migrations", 4),
    ("minor-faults", 5),
    ("major-faults", 6),
    ("alignment-faults", 7),
    ("emulation-faults", 8),
    ("dummy", 9),
    ("bpf-output", 10),
    ("cgroup-switches", 11),
];

/// `PERF_COUNT_HW_CACHE_*` ids and perf's names for them. Longer spellings first so that a
/// prefix match never stops early (`L1-dcache` before `L1`-anything, `branches` before `branch`).
const CACHES: &[(&str, u64)] = &[
    ("l1-instruction", 1),
    ("instruction-tlb", 4),
    ("l1-dcache", 0),
    ("l1-icache", 1),
    ("data-tlb", 3),
    ("branches", 5),
    ("l1-data", 0),
    ("branch", 5),
    ("d-tlb", 3),
    ("i-tlb", 4),
    ("node", 6),
    ("l1-d", 0),
    ("l1-i", 1),
    ("dtlb", 3),
    ("itlb", 4),
    ("llc", 2),
    ("l1d", 0),
    ("l1i", 1),
    ("bpu", 5),
    ("btb", 5),
    ("bpc", 5),
    ("l2", 2),
];

/// `PERF_COUNT_HW_CACHE_OP_*`: READ 0, WRITE 1, PREFETCH 2.
const OPS: &[(&str, u64)] = &[
    ("speculative-read", 2),
    ("speculative-load", 2),
    ("prefetches", 2),
    ("prefetch", 2),
    ("stores", 1),
    ("store", 1),
    ("write", 1),
    ("loads", 0),
    ("load", 0),
    ("read", 0),
];

/// `PERF_COUNT_HW_CACHE_RESULT_*`: ACCESS 0, MISS 1.
const RESULTS: &[(&str, u64)] = &[
    ("reference", 0),
    ("access", 0),
    ("misses", 1),
    ("refs", 0),
    ("miss", 1),
    ("ops", 0),
];

/// The perf attr type and config of a generic name, None if `name` is not one, or an error for
/// a cache name whose operation perf does not offer for that cache (`L1-icache-stores`).
pub fn lookup(name: &str) -> Option<Result<(u32, u64), String>> {
    if let Some((_, c)) = HARDWARE.iter().find(|(n, _)| *n == name) {
        return Some(Ok((TYPE_HARDWARE, *c)));
    }
    if let Some((_, c)) = SOFTWARE.iter().find(|(n, _)| *n == name) {
        return Some(Ok((TYPE_SOFTWARE, *c)));
    }
    hw_cache(name).map(|r| r.map(|c| (TYPE_HW_CACHE, c)))
}

/// Is `name` (the part of an event string before any `:`) a generic name?
pub fn is_generic(name: &str) -> bool {
    lookup(name).is_some()
}

/// Which operations perf accepts per cache (evsel__hw_cache_stat): bit n = op n.
const CACHE_OPS_VALID: [u8; 7] = [
    0b111, // L1D: read, write, prefetch
    0b101, // L1I: read, prefetch
    0b111, // LL
    0b111, // DTLB
    0b001, // ITLB: read
    0b001, // BPU: read
    0b111, // NODE
];

const CACHE_NAMES: [&str; 7] = [
    "L1-dcache",
    "L1-icache",
    "LLC",
    "dTLB",
    "iTLB",
    "branch",
    "node",
];
const OP_NAMES: [&str; 3] = ["loads", "stores", "prefetches"];

/// Longest alias of `table` that `s` starts with, followed by the end or a '-'.
fn alias_prefix<'a>(s: &'a str, table: &[(&str, u64)]) -> Option<(u64, &'a str)> {
    table
        .iter()
        .filter_map(|(n, v)| {
            let rest = s.strip_prefix(n)?;
            (rest.is_empty() || rest.starts_with('-')).then_some((n.len(), *v, rest))
        })
        .max_by_key(|(len, _, _)| *len)
        .map(|(_, v, rest)| (v, rest))
}

/// Decodes `CACHE[-OP_OR_RESULT[-OP_OR_RESULT]]` as perf does (case-insensitive aliases, at most
/// one op and one result, op defaulting to read and result to access):
/// config = cache | op << 8 | result << 16. Leftover text makes it not a cache name.
fn hw_cache(name: &str) -> Option<Result<u64, String>> {
    let lower = name.to_ascii_lowercase();
    let (cache, mut rest) = alias_prefix(&lower, CACHES)?;
    let mut op = None;
    let mut result = None;
    for _ in 0..2 {
        let Some(part) = rest.strip_prefix('-') else {
            break;
        };
        if let Some((v, r)) = alias_prefix(part, OPS).filter(|_| op.is_none()) {
            op = Some(v);
            rest = r;
        } else if let Some((v, r)) = alias_prefix(part, RESULTS).filter(|_| result.is_none()) {
            result = Some(v);
            rest = r;
        } else {
            return None;
        }
    }
    if !rest.is_empty() {
        return None;
    }
    let op = op.unwrap_or(0);
    let valid = CACHE_OPS_VALID.get(cache as usize).copied().unwrap_or(0);
    if valid & (1 << op) == 0 {
        return Some(Err(format!(
            "perf offers no {} for {}",
            OP_NAMES.get(op as usize).unwrap_or(&"such operation"),
            CACHE_NAMES.get(cache as usize).unwrap_or(&"this cache")
        )));
    }
    Some(Ok(cache | op << 8 | result.unwrap_or(0) << 16))
}

/// Name used for the `pmu` field of generic events (the kernel has no sysfs PMU for types 0
/// and 3; type 1 is the `software` PMU).
pub fn type_name(pmu_type: u32) -> Option<&'static str> {
    match pmu_type {
        TYPE_HARDWARE => Some("hardware"),
        TYPE_SOFTWARE => Some("software"),
        crate::sys::perf::TYPE_TRACEPOINT => Some("tracepoint"),
        TYPE_HW_CACHE => Some("hw_cache"),
        crate::sys::perf::TYPE_BREAKPOINT => Some("breakpoint"),
        _ => None,
    }
}

/// Encodes `NAME[:MODS]` where NAME is generic (checked by the caller) and MODS is perf's
/// privilege-level subset `u`, `k` or both.
pub fn encode(text: &str, name: &str, mods: Option<&str>) -> Result<Encoded, EventError> {
    let (pmu_type, config) = match lookup(name) {
        Some(Ok(tc)) => tc,
        Some(Err(reason)) => {
            return Err(EventError::Syntax {
                event: text.to_string(),
                reason,
            });
        }
        None => {
            return Err(EventError::Syntax {
                event: text.to_string(),
                reason: format!("'{name}' is not a perf generic event name"),
            });
        }
    };
    let m = match mods {
        None => Modifiers::default(),
        Some(m) => Modifiers::parse_perf(text, m)?,
    };
    Ok(Encoded {
        event: text.to_string(),
        pmu: type_name(pmu_type).unwrap_or("cpu").to_string(),
        pmu_type,
        config,
        exclude_user: m.exclude_user,
        exclude_kernel: m.exclude_kernel,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lk(name: &str) -> Option<(u32, u64)> {
        lookup(name).and_then(Result::ok)
    }

    #[test]
    fn hardware_and_software_names() {
        assert_eq!(lk("cycles"), Some((TYPE_HARDWARE, 0)));
        assert_eq!(lk("cpu-cycles"), Some((TYPE_HARDWARE, 0)));
        assert_eq!(lk("instructions"), Some((TYPE_HARDWARE, 1)));
        assert_eq!(lk("branch-misses"), Some((TYPE_HARDWARE, 5)));
        assert_eq!(lk("ref-cycles"), Some((TYPE_HARDWARE, 9)));
        assert_eq!(lk("cpu-clock"), Some((TYPE_SOFTWARE, 0)));
        assert_eq!(lk("task-clock"), Some((TYPE_SOFTWARE, 1)));
        assert_eq!(lk("page-faults"), Some((TYPE_SOFTWARE, 2)));
        assert_eq!(lk("faults"), Some((TYPE_SOFTWARE, 2)));
        assert_eq!(lk("context-switches"), Some((TYPE_SOFTWARE, 3)));
        assert_eq!(lk("cs"), Some((TYPE_SOFTWARE, 3)));
        assert_eq!(lk("major-faults"), Some((TYPE_SOFTWARE, 6)));
        // perf's lexer is exact for these: upper case is not the generic event
        assert_eq!(lk("CYCLES"), None);
    }

    #[test]
    fn hw_cache_names() {
        // LL=2, READ=0, MISS=1 → 0x10002
        assert_eq!(lk("LLC-load-misses"), Some((TYPE_HW_CACHE, 0x10002)));
        assert_eq!(lk("LLC-loads"), Some((TYPE_HW_CACHE, 0x2)));
        assert_eq!(lk("LLC-store-misses"), Some((TYPE_HW_CACHE, 0x10102)));
        assert_eq!(lk("LLC-prefetches"), Some((TYPE_HW_CACHE, 0x202)));
        assert_eq!(lk("L1-dcache-load-misses"), Some((TYPE_HW_CACHE, 0x10000)));
        assert_eq!(lk("L1-icache-load-misses"), Some((TYPE_HW_CACHE, 0x10001)));
        assert_eq!(lk("dTLB-load-misses"), Some((TYPE_HW_CACHE, 0x10003)));
        assert_eq!(lk("iTLB-loads"), Some((TYPE_HW_CACHE, 0x4)));
        assert_eq!(lk("branch-loads"), Some((TYPE_HW_CACHE, 0x5)));
        assert_eq!(lk("node-stores"), Some((TYPE_HW_CACHE, 0x106)));
        assert_eq!(lk("node-load-misses"), Some((TYPE_HW_CACHE, 0x10006)));
        // CACHE-RESULT with the op defaulting to read, and the bare cache name
        assert_eq!(lk("LLC-misses"), Some((TYPE_HW_CACHE, 0x10002)));
        assert_eq!(lk("L1-dcache"), Some((TYPE_HW_CACHE, 0x0)));
        assert_eq!(lk("llc-load-misses"), Some((TYPE_HW_CACHE, 0x10002)));
        assert_eq!(
            lk("L1-dcache-speculative-read"),
            Some((TYPE_HW_CACHE, 0x200))
        );
        // perf takes the result before the op too
        assert_eq!(lk("LLC-misses-load"), Some((TYPE_HW_CACHE, 0x10002)));
    }

    #[test]
    fn cache_ops_perf_does_not_offer_are_refused() {
        for n in ["L1-icache-stores", "iTLB-prefetches", "branch-store-misses"] {
            let err = lookup(n).expect("recognised as a cache name").unwrap_err();
            assert!(err.contains("perf offers no"), "{n}: {err}");
        }
        let err = encode("L1-icache-stores", "L1-icache-stores", None).unwrap_err();
        assert!(err.to_string().contains("L1-icache-stores"), "{err}");
    }

    #[test]
    fn not_generic() {
        for n in [
            "",
            "LLC-",
            "LLC-load-load",
            "LLC-misses-misses",
            "LLCX",
            "l1-dcachex",
            "OFFCORE_RESPONSE_0",
            "cycle",
            "cycles-",
        ] {
            assert_eq!(lk(n), None, "{n}");
        }
    }

    #[test]
    fn modifiers_follow_perf() {
        let e = encode("cycles:u", "cycles", Some("u")).unwrap();
        assert!(!e.exclude_user && e.exclude_kernel);
        let e = encode("cycles:k", "cycles", Some("k")).unwrap();
        assert!(e.exclude_user && !e.exclude_kernel);
        let e = encode("cycles:uk", "cycles", Some("uk")).unwrap();
        assert!(!e.exclude_user && !e.exclude_kernel);
        let e = encode("cycles", "cycles", None).unwrap();
        assert!(!e.exclude_user && !e.exclude_kernel);
        assert_eq!(e.pmu, "hardware");
        let err = encode("cycles:p", "cycles", Some("p"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("cycles:p") && err.contains("'p'"), "{err}");
        assert!(encode("cycles:", "cycles", Some("")).is_err());
        assert!(encode("cycles:uu", "cycles", Some("uu")).is_err());
    }
}

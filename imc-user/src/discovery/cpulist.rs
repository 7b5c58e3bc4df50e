//! The kernel's cpulist format (`cpumask`, `cpus`, `online`, `possible`, node `cpulist`):
//! comma-separated CPU numbers and inclusive ranges, e.g. `0-3,8,10-11\n`. An empty line is an
//! empty list (a memory-only NUMA node such as KNL's MCDRAM has one).
use crate::text::quote;
use thiserror::Error;

/// The most CPUs one list may name. The kernel's NR_CPUS tops out at 8192 on x86 (CONFIG_MAXSMP)
/// and 2048/8192 elsewhere; anything far beyond is corrupt input, and refusing it keeps a
/// malicious `0-4294967295` from allocating gigabytes.
pub const MAX_CPUS: u32 = 1 << 16;

/// The longest cpulist file of at most [`MAX_CPUS`] CPUs: the kernel's own bound for one
/// (CPULIST_FILE_MAX_BYTES, NR_CPUS * 7 / 2, every other CPU named alone).
pub const MAX_CPULIST_BYTES: u64 = MAX_CPUS as u64 * 7 / 2;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CpuListError {
    #[error("'{}' is not a CPU number or range (expected e.g. 0-3,8)", quote(item))]
    Garbage { item: String },
    #[error("range '{}' is reversed (start above end)", quote(item))]
    Reversed { item: String },
    #[error(
        "'{}' names CPU {cpu}, above the largest plausible CPU number {max}",
        quote(item)
    )]
    TooLarge { item: String, cpu: u64, max: u32 },
    #[error("empty item in '{}' (doubled or trailing comma)", quote(text))]
    EmptyItem { text: String },
}

/// A CPU list the way the kernel writes one: `0-3,8,10-11` (empty for none).
pub fn format_cpulist(cpus: &[u32]) -> String {
    let mut v = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// Parses a cpulist into sorted, de-duplicated CPU numbers.
pub fn parse_cpulist(text: &str) -> Result<Vec<u32>, CpuListError> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(Vec::new());
    }
    // A bitset rather than pushing every CPU: `0-65535` repeated a thousand times must stay
    // cheap, not build a 65-million-entry vector before de-duplicating.
    let mut set: Vec<u64> = Vec::new();
    for item in t.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(CpuListError::EmptyItem {
                text: t.to_string(),
            });
        }
        let (lo, hi) = match item.split_once('-') {
            Some((a, b)) => (cpu_number(item, a)?, cpu_number(item, b)?),
            None => {
                let n = cpu_number(item, item)?;
                (n, n)
            }
        };
        if lo > hi {
            return Err(CpuListError::Reversed {
                item: item.to_string(),
            });
        }
        let words = hi as usize / 64 + 1;
        if set.len() < words {
            set.resize(words, 0);
        }
        for cpu in lo..=hi {
            set[cpu as usize / 64] |= 1 << (cpu % 64);
        }
    }
    let mut cpus = Vec::new();
    for (w, bits) in set.iter().enumerate() {
        for b in 0..64 {
            if bits & (1 << b) != 0 {
                cpus.push(w as u32 * 64 + b);
            }
        }
    }
    Ok(cpus)
}

fn cpu_number(item: &str, digits: &str) -> Result<u32, CpuListError> {
    let d = digits.trim();
    // Only plain decimal digits: `+1`, `0x3`, ` ` and `1.5` are not kernel output.
    if d.is_empty() || !d.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CpuListError::Garbage {
            item: item.to_string(),
        });
    }
    let n: u64 = d.parse().map_err(|_| CpuListError::TooLarge {
        item: item.to_string(),
        cpu: u64::MAX,
        max: MAX_CPUS - 1,
    })?;
    if n >= u64::from(MAX_CPUS) {
        return Err(CpuListError::TooLarge {
            item: item.to_string(),
            cpu: n,
            max: MAX_CPUS - 1,
        });
    }
    Ok(n as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_singles() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11\n").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpulist("5").unwrap(), vec![5]);
        assert_eq!(parse_cpulist("7-7").unwrap(), vec![7]);
    }

    #[test]
    fn empty_line_is_empty_list() {
        assert_eq!(parse_cpulist("").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_cpulist("\n").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_cpulist("  \n").unwrap(), Vec::<u32>::new());
    }

    #[test]
    fn sorted_and_deduplicated() {
        assert_eq!(parse_cpulist("8,0-2,1").unwrap(), vec![0, 1, 2, 8]);
    }

    #[test]
    fn garbage_rejected() {
        for bad in [
            "a", "0-", "-3", "1-2-3", "0x3", "+1", "1.5", "0 - 3x", "1 2", "0-a", "--",
        ] {
            assert!(
                matches!(parse_cpulist(bad), Err(CpuListError::Garbage { .. })),
                "{bad:?} accepted: {:?}",
                parse_cpulist(bad)
            );
        }
    }

    #[test]
    fn empty_items_rejected() {
        for bad in ["0,,1", "0,", ",0"] {
            assert!(matches!(
                parse_cpulist(bad),
                Err(CpuListError::EmptyItem { .. })
            ));
        }
    }

    #[test]
    fn reversed_range_rejected() {
        assert_eq!(
            parse_cpulist("3-1"),
            Err(CpuListError::Reversed { item: "3-1".into() })
        );
    }

    #[test]
    fn absurd_sizes_rejected() {
        assert!(matches!(
            parse_cpulist("0-4294967295"),
            Err(CpuListError::TooLarge { .. })
        ));
        assert!(matches!(
            parse_cpulist("99999999999999999999999"),
            Err(CpuListError::TooLarge { .. })
        ));
        assert!(matches!(
            parse_cpulist("65536"),
            Err(CpuListError::TooLarge { .. })
        ));
        assert_eq!(parse_cpulist("65535").unwrap(), vec![65535]);
    }

    #[test]
    fn error_messages_say_what_was_expected() {
        let e = parse_cpulist("x").unwrap_err().to_string();
        assert!(e.contains("'x'") && e.contains("expected"), "{e}");
    }
}

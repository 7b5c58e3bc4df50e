//! What every form's encoder reads the same way: perf's privilege modifiers, numbers, and the
//! close matches a refusal suggests.
use super::error::EventError;

/// perf's privilege-level modifiers: `u` counts user space only, `k` kernel only, both (or none)
/// count both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Modifiers {
    pub exclude_user: bool,
    pub exclude_kernel: bool,
}

impl Modifiers {
    /// Parses perf's modifier letters (`u`, `k`, `uk`, `ku`); anything else is refused, since
    /// imc carries no other attr bit from a modifier.
    pub fn parse_perf(event: &str, mods: &str) -> Result<Modifiers, EventError> {
        if mods.is_empty() {
            return Err(EventError::Modifier {
                event: event.to_string(),
                reason: "empty modifier (expected u, k or uk)".into(),
            });
        }
        let (mut u, mut k) = (false, false);
        for c in mods.chars() {
            let seen = match c {
                'u' => std::mem::replace(&mut u, true),
                'k' => std::mem::replace(&mut k, true),
                _ => {
                    return Err(EventError::Modifier {
                        event: event.to_string(),
                        reason: format!("modifier '{c}' is not supported (expected u, k or uk)"),
                    });
                }
            };
            if seen {
                return Err(EventError::Modifier {
                    event: event.to_string(),
                    reason: format!("modifier '{c}' given twice (expected u, k or uk)"),
                });
            }
        }
        Ok(Modifiers {
            exclude_user: !u,
            exclude_kernel: !k,
        })
    }
}

/// Parses a decimal or `0x` hex number as perf and libpfm accept them.
pub(crate) fn parse_u64(s: &str) -> Option<u64> {
    crate::discovery::format::parse_number(s)
}

/// Up to five names from `candidates` close to `wanted` (case-insensitive edit distance within
/// a third of the length, or one containing the other), closest first.
pub(crate) fn close_matches<'a>(
    wanted: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Vec<String> {
    let w = wanted.to_ascii_lowercase();
    let limit = (w.chars().count() / 3).max(2);
    let mut scored: Vec<(usize, String)> = candidates
        .into_iter()
        .filter_map(|c| {
            let lc = c.to_ascii_lowercase();
            let d = edit_distance(&w, &lc);
            let contains = w.len() >= 3 && (lc.contains(&w) || w.contains(&lc));
            (d <= limit || contains).then(|| (d, c.to_string()))
        })
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().take(5).map(|(_, c)| c).collect()
}

/// Levenshtein distance; inputs are short names, and long ones are cut so a fuzzed string cannot
/// make this quadratic in something large.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().take(64).collect();
    let b: Vec<char> = b.chars().take(64).collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

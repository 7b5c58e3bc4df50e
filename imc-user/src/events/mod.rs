//! Event strings → `perf_event_attr` fields (`Encoded`).
//!
//! Four forms are accepted (shared/design.md, "Event strings"). Which one a string is follows
//! one rule, checked in this order, so that no string is ever read two ways:
//!
//! 1. it contains `/` → **sysfs**: `PMU/alias/`, `PMU/term=value,.../`, or an alias plus extra
//!    terms (`PMU/alias,thresh=1/`), optionally followed by perf modifiers `u`, `k` or `uk`
//!    (`cpu/event=0x3c/u`). A PMU name without its `_N` suffix means every instance
//!    (`uncore_imc` → `uncore_imc_0` … `uncore_imc_5`, gaps allowed), and `uncore_` may be
//!    left out (`imc/…/`), as perf does; one `Encoded` per instance, in instance order.
//! 2. the part before the first `:` is a **perf generic name** (`cycles`, `page-faults`,
//!    `LLC-load-misses`, …) → that event, with an optional perf modifier `:u`, `:k` or `:uk`.
//! 3. anything else is **libpfm4**: `[pmu::]EVENT[:UMASK]...[:MOD=VAL]`, encoded by the real
//!    libpfm4 loaded at run time (see [`pfm`] for `LIBPFM_FORCE_PMU`).
//!
//! Terms and format fields are discovery's (`discovery::format::encode_terms`); this module
//! parses the grammar, picks the PMU instances and the alias, and carries scale and unit.
use crate::model::{Encoded, Pmu};
use std::path::Path;
use thiserror::Error;

pub mod core_traffic;
pub mod generic;
pub mod pfm;
pub mod pfm_model;
pub mod sysfs;

/// Why an event string could not be encoded. Every message names the string and says what was
/// expected, on one line.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum EventError {
    #[error("event '{event}': malformed: {reason}")]
    Syntax { event: String, reason: String },
    #[error("event '{event}': unknown PMU '{pmu}'{hint}")]
    UnknownPmu {
        event: String,
        pmu: String,
        /// Close matches or the PMUs there are, already formatted (` (did you mean …?)`).
        hint: String,
    },
    #[error("event '{event}': PMU '{pmu}' has no event '{alias}'{hint}")]
    UnknownAlias {
        event: String,
        pmu: String,
        alias: String,
        hint: String,
    },
    #[error("event '{event}': {source}")]
    Term {
        event: String,
        #[source]
        source: crate::discovery::format::FormatError,
    },
    #[error("event '{event}': {reason}")]
    Modifier { event: String, reason: String },
    #[error("event '{event}': {reason}")]
    Libpfm { event: String, reason: String },
    #[error(
        "event '{event}' is libpfm4 syntax but libpfm4 is not available ({detail}): install it \
         (apt-get install libpfm4)"
    )]
    NoLibpfm { event: String, detail: String },
    #[error("cannot read the PMUs under {root}: {reason}")]
    Discovery {
        root: String,
        reason: String,
        /// Discovery's own verdict: a wrong tree is bad input, a permission problem is not.
        bad_input: bool,
    },
}

impl EventError {
    /// The same error with control characters in the event text escaped, so the message stays
    /// one line whatever the user passed (`$'a\nb'`).
    fn escaped(mut self) -> Self {
        let (EventError::Syntax { event, .. }
        | EventError::UnknownPmu { event, .. }
        | EventError::UnknownAlias { event, .. }
        | EventError::Term { event, .. }
        | EventError::Modifier { event, .. }
        | EventError::Libpfm { event, .. }
        | EventError::NoLibpfm { event, .. }) = &mut self
        else {
            return self;
        };
        if event.chars().any(char::is_control) {
            *event = event.escape_debug().to_string();
        }
        self
    }

    /// True when the input is at fault (exit 2): the event string, or a `--root` that is not a
    /// sysfs tree; false for a missing library or a permission problem (exit 1).
    pub fn is_bad_input(&self) -> bool {
        match self {
            EventError::NoLibpfm { .. } => false,
            EventError::Discovery { bad_input, .. } => *bad_input,
            _ => true,
        }
    }
}

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

/// Which form a string is, by the rule in the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    Sysfs,
    Generic,
    Libpfm,
}

pub fn form_of(text: &str) -> Form {
    if text.contains('/') {
        Form::Sysfs
    } else if generic::is_generic(text.split(':').next().unwrap_or("")) {
        Form::Generic
    } else {
        Form::Libpfm
    }
}

/// Encodes one event string against the PMUs discovery found. Sysfs strings may yield several
/// counters (one per PMU instance); the other forms yield one.
pub fn parse_event(pmus: &[Pmu], text: &str) -> Result<Vec<Encoded>, EventError> {
    parse_event_inner(pmus, text).map_err(EventError::escaped)
}

fn parse_event_inner(pmus: &[Pmu], text: &str) -> Result<Vec<Encoded>, EventError> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(EventError::Syntax {
            event: text.to_string(),
            reason: "empty event (expected PMU/alias/, PMU/terms/, a perf name or libpfm4 syntax)"
                .into(),
        });
    }
    // Rejected up front so no part of the string is echoed raw into a message below.
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        return Err(EventError::Syntax {
            event: text.to_string(),
            reason: format!("control character {c:?} in event"),
        });
    }
    if trimmed != text {
        return Err(EventError::Syntax {
            event: text.to_string(),
            reason: "leading or trailing whitespace".into(),
        });
    }
    match form_of(text) {
        Form::Sysfs => sysfs::encode(pmus, text),
        Form::Generic => {
            let (name, mods) = match text.split_once(':') {
                Some((n, m)) => (n, Some(m)),
                None => (text, None),
            };
            let mut e = generic::encode(text, name, mods)?;
            attach_sysfs_pmu(pmus, &mut e);
            Ok(vec![e])
        }
        Form::Libpfm => {
            let p = pfm::encode(text)?;
            let mut e = Encoded {
                event: text.to_string(),
                pmu: generic::type_name(p.pmu_type)
                    .map(str::to_string)
                    .or(p.pfm_pmu)
                    .unwrap_or_else(|| format!("type{}", p.pmu_type)),
                pmu_type: p.pmu_type,
                config: p.config,
                config1: p.config1,
                config2: p.config2,
                exclude_user: p.exclude_user,
                exclude_kernel: p.exclude_kernel,
                ..Default::default()
            };
            attach_sysfs_pmu(pmus, &mut e);
            Ok(vec![e])
        }
    }
}

/// Names a non-sysfs event after the sysfs PMU of the same type, when there is one (`cpu` for
/// type 4 on x86, `software` for type 1), and takes its cpumask.
fn attach_sysfs_pmu(pmus: &[Pmu], e: &mut Encoded) {
    if let Some(p) = pmus.iter().find(|p| p.pmu_type == e.pmu_type) {
        e.pmu = p.name.clone();
        e.cpus = p.cpumask.clone();
    }
}

/// Reads the PMUs under `root` (as `--root` gives it) and encodes `text`.
pub fn resolve(root: &Path, text: &str) -> Result<Vec<Encoded>, EventError> {
    let pmus = read_pmus(root)?;
    parse_event(&pmus, text)
}

/// Discovery's PMU reader with its error turned into ours.
pub fn read_pmus(root: &Path) -> Result<Vec<Pmu>, EventError> {
    crate::discovery::read_pmus(root).map_err(|e| EventError::Discovery {
        root: root.display().to_string(),
        bad_input: e.is_bad_input(),
        reason: e.to_string(),
    })
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

#[cfg(test)]
mod tests;

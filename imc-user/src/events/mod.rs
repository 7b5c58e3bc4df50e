//! Event strings → `perf_event_attr` fields (`Encoded`).
//!
//! Four forms are accepted (README, "Event strings"). Which one a string is follows one rule,
//! checked in this order, so that no string is ever read two ways:
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

pub mod core_traffic;
mod error;
pub mod generic;
pub mod pfm;
pub mod pfm_model;
pub mod sysfs;
mod terms;

pub use error::EventError;
pub use terms::Modifiers;

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
            let mut e = pfm::encode(text)?;
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
        reason: crate::text::error_line(&e),
    })
}

#[cfg(test)]
mod tests;

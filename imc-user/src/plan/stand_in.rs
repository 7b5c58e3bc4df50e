//! The stand-in counter of a machine without memory-controller counters (a VM guest, a machine
//! whose PMUs are hidden): `imc stat`, `top` and `record` all say so in one line and count the
//! same labelled stand-in instead, core LLC load misses where a core PMU exists, else page
//! faults. Its source is `proxy:NAME`, and it is never shown as bytes. The choice and the line
//! said about it are the plan's: the commands only pass them on.
use super::types::{Plan, PlanError};
use crate::discovery;
use crate::model::Discovery;
use crate::model::Encoded;
use std::path::Path;

pub struct StandIn {
    /// The perf name of the stand-in event (`page-faults`, `LLC-load-misses`).
    pub name: &'static str,
    pub event: Encoded,
    /// Why there are no memory-controller counters.
    pub why: String,
}

impl StandIn {
    /// The `source` of what it measures: `proxy:page-faults`.
    pub fn source(&self) -> String {
        format!("proxy:{}", self.name)
    }
}

/// Whether a command that was given neither `-e` nor `--backend` must use the stand-in: no
/// memory-controller backend is available.
pub fn needed(found: &Discovery) -> bool {
    !found
        .sources
        .iter()
        .any(|s| s.available && s.backend.is_memory_controller())
}

/// The stand-in for this root: LLC-load-misses when a core PMU encodes it, else page-faults.
pub fn choose(root: &Path, found: &Discovery) -> Result<StandIn, PlanError> {
    let why = found
        .sources
        .iter()
        .filter(|s| s.backend.is_memory_controller())
        .find_map(|s| s.reason.clone())
        .unwrap_or_else(|| "no memory-controller PMU found".into());
    let first = |name: &str| {
        crate::events::resolve(root, name)
            .ok()
            .and_then(|v| v.into_iter().next())
    };
    if discovery::read_pmu(root, "cpu").is_ok()
        && let Some(event) = first("LLC-load-misses")
    {
        return Ok(StandIn {
            name: "LLC-load-misses",
            event,
            why,
        });
    }
    let event = crate::events::resolve(root, "page-faults")
        .map_err(|e| PlanError::StandIn(Box::new(e)))?
        .into_iter()
        .next()
        .ok_or(PlanError::StandInEmpty)?;
    Ok(StandIn {
        name: "page-faults",
        event,
        why,
    })
}

/// The one line said on stderr when the plan counts a stand-in; `how`: "per process",
/// "system-wide".
pub fn notice(plan: &Plan, how: &str) -> Option<String> {
    let name = plan.source.stand_in()?;
    let why = plan.refusals.first().map_or_else(
        || "no memory-controller PMU found".to_string(),
        |r| {
            // The refusal names its backend first; the reason is what the user needs.
            r.reason
                .split_once(": ")
                .map_or(r.reason.clone(), |(_, why)| why.to_string())
        },
    );
    // Page faults see memory the first time it is touched, not traffic: say so where the
    // stand-in is announced, or a streaming process reads as idle.
    let caveat = if name == "page-faults" {
        "; page faults count first touches of memory, so a process streaming through memory it already has shows none"
    } else {
        ""
    };
    Some(format!(
        "no memory-controller counters ({why}); counting {name} {how} as a stand-in (counts, not bytes){caveat}"
    ))
}

//! `imc stat --latency` at the command boundary: the counters to open, the output column, and
//! the two encodings `--dry-run` shows, with `counting::latency` errors turned into one-line
//! `CliError`s (exit 2 for bad request types, 1 when the machine is not a KNL).
use crate::counting::latency::{self, LatencyError};
use crate::counting::stat_loop::Layout;
use crate::error::CliResult;
use crate::model::Encoded;
use crate::output::latency::LatencyCols;
use std::path::Path;

/// The latency column of the output, found by the two events' keys.
pub fn columns(layout: &Layout, request_types: &str) -> Option<LatencyCols> {
    let keys = latency::event_strings(request_types).ok()?;
    LatencyCols::find(layout, &keys)
}

/// The two checked encodings (OFFCORE_RESPONSE_0 … OUTSTANDING, OFFCORE_RESPONSE_1 …
/// ANY_RESPONSE) for `--dry-run`.
pub fn encodings(root: &Path, request_types: &str) -> CliResult<(Encoded, Encoded)> {
    let pmus = crate::events::read_pmus(root).map_err(LatencyError::from)?;
    Ok(latency::encodings(&pmus, request_types)?)
}

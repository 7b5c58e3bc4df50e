//! `imc stat --latency` at the command boundary: the counters to open, the output column, and
//! the two encodings `--dry-run` shows, with `counting::latency` errors turned into one-line
//! `CliError`s (exit 2 for bad request types, 1 when the machine is not a KNL).
use crate::counting::latency::{self, LatencyError};
use crate::counting::stat_loop::Layout;
use crate::error::CliError;
use crate::error::CliResult;
use crate::model::{BackendKind, Discovery, Encoded};
use crate::output::latency::LatencyCols;
use crate::plan::LatencyRequest;
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

/// What `--latency [REQUEST-TYPES]` asks of this machine: KNL's offcore-response pair for
/// the request types, elsewhere the memory controller's queues (which take no request types).
pub fn request(root: &Path, found: &Discovery, request_types: &str) -> CliResult<LatencyRequest> {
    let knl = found
        .sources
        .iter()
        .any(|s| matches!(s.backend, BackendKind::KnlImc | BackendKind::KnlEdc) && s.available);
    if knl {
        let (o, r) = encodings(root, request_types)?;
        return Ok(LatencyRequest::Offcore(Box::new((o, r))));
    }
    if request_types != latency::DEFAULT_REQUEST_TYPES {
        return Err(CliError::bad_input(format!(
            "--latency {request_types}: request types are Knights Landing/Mill offcore-response \
             umasks; on this machine give --latency alone (it reads the memory controller's \
             queues)"
        )));
    }
    Ok(LatencyRequest::Queues)
}

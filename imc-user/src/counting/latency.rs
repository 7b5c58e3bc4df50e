//! `imc stat --latency` on Knights Landing/Mill: average memory latency in core cycles.
//!
//! libpfm4's KNL documentation (intel_knl_events.h, the OUTSTANDING umask) defines it: count
//! OFFCORE_RESPONSE_0 with the request types of interest and only OUTSTANDING (bit 38 of
//! MSR_OFFCORE_RSP_0: each cycle adds the number of such requests in flight), and
//! OFFCORE_RESPONSE_1 with the same request types and ANY_RESPONSE (each completed request adds
//! one); the first count divided by the second is the average latency in core cycles. libpfm4
//! encodes each event alone, so that both name the same request types is checked here, on the
//! request bits of the two MSR values.
//!
//! Both events are core events: one pair per online CPU, summed; the KNL DDR (knl-imc) and
//! MCDRAM (knl-edc) bandwidth counters are opened beside them. Summing keeps the ratio right
//! even where the threads of a core (or tile) see the same requests: both counts are
//! duplicated alike.
use crate::events::{self, EventError};
use crate::model::{Encoded, Pmu};

/// The request types when `--latency` is given without a value: demand data reads.
pub const DEFAULT_REQUEST_TYPES: &str = "DMND_DATA_RD";

/// Request-type bits of MSR_OFFCORE_RSP_x on KNL (libpfm4 intel_knl_events.h, group 0: bits
/// 0-15, DMND_DATA_RD … ANY_REQUEST).
const REQUEST_BITS: u64 = 0xffff;
/// ANY_RESPONSE (bit 16) and OUTSTANDING (bit 38, MSR_OFFCORE_RSP_0 only).
const ANY_RESPONSE: u64 = 1 << 16;
const OUTSTANDING: u64 = 1 << 38;
/// Event select + umask of the two offcore-response events (0xb7, umask 0x01 / 0x02).
const RSP_0: u64 = 0x01b7;
const RSP_1: u64 = 0x02b7;

/// Why `--latency` cannot run: one line naming the PMU, the event and the reason.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LatencyError {
    /// The request types are not a list of libpfm4 umask names.
    #[error("--latency {given}: {reason}")]
    BadRequestTypes { given: String, reason: String },
    /// libpfm4 refused one of the two events.
    #[error("--latency: {0}")]
    Encode(#[from] EventError),
    /// The two encodings do not describe the average-latency pair.
    #[error("--latency: cpu/{event}/: {reason}")]
    Mismatch { event: String, reason: String },
    /// Not a Knights Landing/Mill, or its memory counters are unavailable.
    #[error("--latency: {0}")]
    NotKnl(String),
}

impl LatencyError {
    /// True when the user's input is at fault (exit 2).
    pub fn is_bad_input(&self) -> bool {
        match self {
            LatencyError::Encode(e) => e.is_bad_input(),
            LatencyError::NotKnl(_) => false,
            _ => true,
        }
    }
}

/// The two event strings for `request_types` (`DMND_DATA_RD`, `DMND_DATA_RD:PF_L2_RFO`, commas
/// allowed too), after checking that they are umask names and nothing else.
pub fn event_strings(request_types: &str) -> Result<(String, String), LatencyError> {
    let bad = |reason: &str| LatencyError::BadRequestTypes {
        given: request_types.to_string(),
        reason: reason.to_string(),
    };
    let names: Vec<&str> = request_types.split([':', ',']).map(str::trim).collect();
    if names.iter().any(|n| n.is_empty()) {
        return Err(bad(
            "empty request type (give libpfm4 umask names such as DMND_DATA_RD:DMND_RFO)",
        ));
    }
    if let Some(n) = names
        .iter()
        .find(|n| !n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
    {
        return Err(bad(&format!(
            "'{n}' is not a request type: only umask names (no modifiers such as u=1)"
        )));
    }
    if let Some(n) = names.iter().find(|n| {
        let u = n.to_ascii_uppercase();
        u == "OUTSTANDING" || u == "ANY_RESPONSE"
    }) {
        return Err(bad(&format!(
            "'{n}' is added by --latency itself (OUTSTANDING on OFFCORE_RESPONSE_0, ANY_RESPONSE on OFFCORE_RESPONSE_1)"
        )));
    }
    let joined = names.join(":");
    Ok((
        format!("OFFCORE_RESPONSE_0:{joined}:OUTSTANDING"),
        format!("OFFCORE_RESPONSE_1:{joined}:ANY_RESPONSE"),
    ))
}

/// Checks that two encodings are the average-latency pair: RSP_0 with only OUTSTANDING besides
/// its request bits, RSP_1 with only ANY_RESPONSE, and the same request bits in both.
pub fn check_pair(outstanding: &Encoded, requests: &Encoded) -> Result<(), LatencyError> {
    let mismatch = |e: &Encoded, reason: String| LatencyError::Mismatch {
        event: e.event.clone(),
        reason,
    };
    for (e, code) in [(outstanding, RSP_0), (requests, RSP_1)] {
        if e.config & 0xffff != code {
            return Err(mismatch(
                e,
                format!(
                    "encodes event/umask {:#06x}, not {code:#06x}: is libpfm4 encoding for KNL?",
                    e.config & 0xffff
                ),
            ));
        }
    }
    if outstanding.config1 & !REQUEST_BITS != OUTSTANDING {
        return Err(mismatch(
            outstanding,
            format!(
                "MSR_OFFCORE_RSP_0 value {:#x} has response bits besides OUTSTANDING",
                outstanding.config1
            ),
        ));
    }
    if requests.config1 & !REQUEST_BITS != ANY_RESPONSE {
        return Err(mismatch(
            requests,
            format!(
                "MSR_OFFCORE_RSP_1 value {:#x} has response bits besides ANY_RESPONSE",
                requests.config1
            ),
        ));
    }
    let (a, b) = (
        outstanding.config1 & REQUEST_BITS,
        requests.config1 & REQUEST_BITS,
    );
    if a != b {
        return Err(mismatch(
            requests,
            format!(
                "request types differ from OFFCORE_RESPONSE_0's ({b:#x} vs {a:#x}); both must count the same requests"
            ),
        ));
    }
    Ok(())
}

/// The two encodings of `--latency REQUEST-TYPES` against the PMUs under the root, checked:
/// what `--dry-run` shows and what `stat` opens.
pub fn encodings(pmus: &[Pmu], request_types: &str) -> Result<(Encoded, Encoded), LatencyError> {
    let (o, r) = event_strings(request_types)?;
    let one = |text: &str| -> Result<Encoded, LatencyError> {
        let mut v = events::parse_event(pmus, text)?;
        v.pop().ok_or_else(|| LatencyError::Mismatch {
            event: text.to_string(),
            reason: "libpfm4 returned no encoding".into(),
        })
    };
    let o = one(&o).map_err(|e| response_types_named(pmus, request_types).unwrap_or(e))?;
    let r = one(&r)?;
    check_pair(&o, &r)?;
    Ok((o, r))
}

/// When the request types name response types (DDR, MCDRAM_NEAR …), which OUTSTANDING
/// excludes, a clearer refusal than libpfm4's "cannot be combined".
fn response_types_named(pmus: &[Pmu], request_types: &str) -> Option<LatencyError> {
    let text = format!("OFFCORE_RESPONSE_1:{}", request_types.replace(',', ":"));
    let e = events::parse_event(pmus, &text).ok()?.pop()?;
    let response = e.config1 & !REQUEST_BITS & !ANY_RESPONSE;
    (response != 0).then(|| LatencyError::BadRequestTypes {
        given: request_types.to_string(),
        reason: format!(
            "names response types (MSR_OFFCORE_RSP bits {response:#x}); OUTSTANDING counts requests \
             in flight whatever answers them: give request types only, e.g. DMND_DATA_RD"
        ),
    })
}

/// Average latency in core cycles: outstanding-request cycles over completed requests; None
/// when either count is zero (nothing to average, or the outstanding counter did not count).
pub fn latency_cycles(outstanding: f64, requests: f64) -> Option<f64> {
    (outstanding > 0.0 && requests > 0.0 && outstanding.is_finite() && requests.is_finite())
        .then(|| outstanding / requests)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(event: &str, config: u64, config1: u64) -> Encoded {
        Encoded {
            event: event.into(),
            pmu: "cpu".into(),
            pmu_type: 4,
            config,
            config1,
            ..Default::default()
        }
    }

    #[test]
    fn request_types_become_the_two_events() {
        assert_eq!(
            event_strings("DMND_DATA_RD").unwrap(),
            (
                "OFFCORE_RESPONSE_0:DMND_DATA_RD:OUTSTANDING".to_string(),
                "OFFCORE_RESPONSE_1:DMND_DATA_RD:ANY_RESPONSE".to_string()
            )
        );
        assert_eq!(
            event_strings("DMND_DATA_RD,PF_L2_RFO").unwrap().0,
            "OFFCORE_RESPONSE_0:DMND_DATA_RD:PF_L2_RFO:OUTSTANDING"
        );
        for bad in [
            "",
            "DMND_DATA_RD:",
            "DMND_DATA_RD:u=1",
            "OUTSTANDING",
            "a b",
        ] {
            let e = event_strings(bad).unwrap_err();
            assert!(e.is_bad_input(), "{bad}");
            assert_eq!(e.to_string().lines().count(), 1);
        }
    }

    #[test]
    fn the_pair_must_share_request_types_and_nothing_else() {
        let o = enc(
            "OFFCORE_RESPONSE_0:DMND_DATA_RD:OUTSTANDING",
            0x1b7,
            0x40_0000_0001,
        );
        let r = enc(
            "OFFCORE_RESPONSE_1:DMND_DATA_RD:ANY_RESPONSE",
            0x2b7,
            0x10001,
        );
        assert_eq!(check_pair(&o, &r), Ok(()));
        // different request bits
        let r2 = enc("OFFCORE_RESPONSE_1:DMND_RFO:ANY_RESPONSE", 0x2b7, 0x10002);
        let m = check_pair(&o, &r2).unwrap_err().to_string();
        assert!(
            m.contains("request types differ") && m.contains("OFFCORE_RESPONSE_1"),
            "{m}"
        );
        // a response type on RSP_1 instead of ANY_RESPONSE
        let r3 = enc("x", 0x2b7, 0x8080_0001);
        assert!(
            check_pair(&o, &r3)
                .unwrap_err()
                .to_string()
                .contains("ANY_RESPONSE")
        );
        // RSP_0 without OUTSTANDING
        let o2 = enc("y", 0x1b7, 0x10001);
        assert!(
            check_pair(&o2, &r)
                .unwrap_err()
                .to_string()
                .contains("OUTSTANDING")
        );
        // the events swapped (another model's encoding)
        assert!(
            check_pair(&r, &o)
                .unwrap_err()
                .to_string()
                .contains("0x01b7")
        );
    }

    #[test]
    fn latency_is_null_when_a_count_is_zero() {
        assert_eq!(latency_cycles(5000.0, 100.0), Some(50.0));
        assert_eq!(latency_cycles(0.0, 100.0), None);
        assert_eq!(latency_cycles(5000.0, 0.0), None);
    }
}

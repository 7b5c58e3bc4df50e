//! The average-latency column of `imc stat --latency` (KNL): which two `values` keys it divides,
//! and how each output format shows it (JSON `latency_cycles`, null when a count is zero).
use crate::counting::latency::latency_cycles;
use crate::counting::stat_loop::{IntervalReport, Layout};
use std::io::Write;

/// Positions in the layout's `values` of the outstanding-cycles and the requests counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencyCols {
    pub outstanding: usize,
    pub requests: usize,
}

impl LatencyCols {
    /// The columns of the two keys `counting::latency::counters` returned.
    pub fn find(layout: &Layout, keys: &(String, String)) -> Option<LatencyCols> {
        let at = |k: &str| layout.value_keys.iter().position(|v| v == k);
        Some(LatencyCols {
            outstanding: at(&keys.0)?,
            requests: at(&keys.1)?,
        })
    }

    /// This interval's average latency in core cycles (None: a count is zero or not counted).
    pub fn cycles(&self, r: &IntervalReport) -> Option<f64> {
        let counted = |i: usize| r.value_counted.get(i).copied().unwrap_or(false);
        if !counted(self.outstanding) || !counted(self.requests) {
            return None;
        }
        latency_cycles(r.values[self.outstanding], r.values[self.requests])
    }

    /// `,"latency_cycles":N` (or null), after `values`.
    pub fn json(&self, b: &mut Vec<u8>, r: &IntervalReport) {
        match self.cycles(r) {
            Some(c) => {
                let _ = write!(b, ",\"latency_cycles\":{c}");
            }
            None => b.extend_from_slice(b",\"latency_cycles\":null"),
        }
    }

    /// A CSV event row `latency_cycles` (empty count when unknown).
    pub fn csv(&self, b: &mut Vec<u8>, r: &IntervalReport, time: f64, el: f64, sep: &str) {
        let _ = write!(b, "{time:.9}{sep}{el:.9}{sep}event{sep}latency_cycles{sep}");
        if let Some(c) = self.cycles(r) {
            let _ = write!(b, "{c:.3}");
        }
        b.push(b'\n');
    }

    /// A table row under the bandwidth rows.
    pub fn human(&self, b: &mut Vec<u8>, r: &IntervalReport, time: f64, ms: f64) {
        let _ = write!(b, "{time:12.6} {ms:9.3} ");
        match self.cycles(r) {
            Some(c) => {
                let _ = write!(b, "{c:>20.1}");
            }
            None => {
                let _ = write!(b, "{:>20}", "<no requests>");
            }
        }
        b.extend_from_slice(b"  average latency (core cycles)\n");
    }
}

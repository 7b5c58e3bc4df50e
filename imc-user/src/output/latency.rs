//! The latency figures of `imc stat --latency`: on KNL the average-latency column (which two
//! `values` keys it divides; JSON `latency_cycles`, null when a count is zero), elsewhere the
//! memory controller's queue latency per package and channel ([`QueueCols`]).
use crate::counting::latency::{LatencyFigures, QueueLayout, latency_cycles};
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

    /// `,"latency_cycles":N` (or null), after `values`; then the fields other platforms'
    /// `latency` has, for the one KNL package: the read latency in core cycles, and null
    /// where KNL's counters say nothing (ns would need the core clock, which is not counted;
    /// DRAM clocks and writes are not measured by the offcore pair).
    pub fn json(&self, b: &mut Vec<u8>, r: &IntervalReport) {
        let cycles = self.cycles(r);
        match cycles {
            Some(c) => {
                let _ = write!(b, ",\"latency_cycles\":{c}");
            }
            None => b.extend_from_slice(b",\"latency_cycles\":null"),
        }
        b.extend_from_slice(b",\"latency\":[{\"package\":0");
        figures_json(b, &LatencyFigures::default());
        num(b, "read_latency_core_cycles", cycles);
        b.extend_from_slice(b"}]");
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

/// The loaded-latency figures of `imc stat --latency` everywhere but KNL: per package (and
/// channel with `--per-channel`), from the controller's queues. JSON `latency`: [{`package`,
/// `read_latency_ns`, `write_latency_ns`, `read_latency_dram_clocks`,
/// `write_latency_dram_clocks`, `read_latency_remote_ns`, `utilisation`, `channels`}], null
/// where a count is zero or the platform does not count it.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueCols {
    pub layout: QueueLayout,
    pub per_channel: bool,
}

fn num(b: &mut Vec<u8>, key: &str, v: Option<f64>) {
    match v {
        Some(x) if x.is_finite() => {
            let _ = write!(b, ",\"{key}\":{x}");
        }
        _ => {
            let _ = write!(b, ",\"{key}\":null");
        }
    }
}

fn figures_json(b: &mut Vec<u8>, f: &LatencyFigures) {
    num(b, "read_latency_ns", f.read_ns);
    num(b, "write_latency_ns", f.write_ns);
    num(b, "read_latency_dram_clocks", f.read_dram_clocks);
    num(b, "write_latency_dram_clocks", f.write_dram_clocks);
    num(b, "read_latency_remote_ns", f.read_remote_ns);
    // How busy the channel is needs its DRAM clocks per burst, which imc does not know yet.
    b.extend_from_slice(b",\"utilisation\":null");
}

fn show(v: Option<f64>, unit: &str) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x:.1} {unit}"))
}

impl QueueCols {
    /// `,"latency":[…]` after `values`.
    pub fn json(&self, b: &mut Vec<u8>, r: &IntervalReport) {
        let sums = self.layout.sums(&r.counts);
        let el = r.elapsed_ns();
        b.extend_from_slice(b",\"latency\":[");
        for (pi, ((pkg, chans), id)) in sums.iter().zip(&self.layout.packages).enumerate() {
            if pi > 0 {
                b.push(b',');
            }
            let _ = write!(b, "{{\"package\":{id}");
            figures_json(b, &pkg.figures(el));
            if self.per_channel {
                b.extend_from_slice(b",\"channels\":[");
                for (ci, (c, (label, number))) in
                    chans.iter().zip(&self.layout.channels[pi]).enumerate()
                {
                    if ci > 0 {
                        b.push(b',');
                    }
                    let _ = write!(b, "{{\"pmu\":{}", crate::output::json::json_string(label));
                    match number {
                        Some(n) => {
                            let _ = write!(b, ",\"channel\":{n}");
                        }
                        None => b.extend_from_slice(b",\"channel\":null"),
                    }
                    figures_json(b, &c.figures(el));
                    b.push(b'}');
                }
                b.push(b']');
            }
            b.push(b'}');
        }
        b.push(b']');
    }

    /// CSV event rows `read_latency_ns:PKG[:PMU]` … (empty count when unknown).
    pub fn csv(&self, b: &mut Vec<u8>, r: &IntervalReport, time: f64, el: f64, sep: &str) {
        let sums = self.layout.sums(&r.counts);
        let mut row = |name: &str, v: Option<f64>| {
            let _ = write!(b, "{time:.9}{sep}{el:.9}{sep}event{sep}{name}{sep}");
            for _ in 0..5 {
                b.extend_from_slice(sep.as_bytes());
            }
            if let Some(x) = v {
                let _ = write!(b, "{x:.3}");
            }
            b.push(b'\n');
        };
        for (pi, ((pkg, chans), id)) in sums.iter().zip(&self.layout.packages).enumerate() {
            let mut rows: Vec<(String, LatencyFigures)> =
                vec![(id.to_string(), pkg.figures(r.elapsed_ns()))];
            if self.per_channel {
                for (c, (label, _)) in chans.iter().zip(&self.layout.channels[pi]) {
                    rows.push((format!("{id}:{label}"), c.figures(r.elapsed_ns())));
                }
            }
            for (name, f) in rows {
                row(&format!("read_latency_ns:{name}"), f.read_ns);
                row(&format!("write_latency_ns:{name}"), f.write_ns);
                row(
                    &format!("read_latency_dram_clocks:{name}"),
                    f.read_dram_clocks,
                );
                row(
                    &format!("write_latency_dram_clocks:{name}"),
                    f.write_dram_clocks,
                );
            }
        }
    }

    /// A table row per package (and channel) under the bandwidth rows.
    pub fn human(&self, b: &mut Vec<u8>, r: &IntervalReport, time: f64, ms: f64) {
        let sums = self.layout.sums(&r.counts);
        for (pi, ((pkg, chans), id)) in sums.iter().zip(&self.layout.packages).enumerate() {
            let mut rows = vec![(format!("package {id}"), pkg.figures(r.elapsed_ns()))];
            if self.per_channel {
                for (c, (label, _)) in chans.iter().zip(&self.layout.channels[pi]) {
                    rows.push((format!("  {label}"), c.figures(r.elapsed_ns())));
                }
            }
            for (label, f) in rows {
                let _ = writeln!(
                    b,
                    "{time:12.6} {ms:9.3} {label:<16} latency read {} ({}), write {} ({})",
                    show(f.read_ns, "ns"),
                    show(f.read_dram_clocks, "DRAM clocks"),
                    show(f.write_ns, "ns"),
                    show(f.write_dram_clocks, "DRAM clocks"),
                );
            }
        }
    }
}

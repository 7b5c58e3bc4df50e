//! Bytes: what the workloads' kernels moved against what the weights saw (their fidelity,
//! saved for the plan), and MBM's bytes per workload.

use super::counts::{Ident, owner};
use super::truth::{Truth, TruthEvent};
use super::workloads::Kind;
use crate::error::{CliError, CliResult};
use crate::model::Direction;
use crate::model::result::IntervalResult;
use crate::plan::Plan;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct KernelBytes {
    pub(super) name: &'static str,
    pub(super) passes: Option<u64>,
    pub(super) expected_read: f64,
    pub(super) expected_write: f64,
    /// What imc charged the workload, by direction (total: controllers that do not split).
    pub(super) imc_read: f64,
    pub(super) imc_write: f64,
    pub(super) imc_total: f64,
    /// What each weight event saw of it: the truth count × the event's bytes per count.
    pub(super) weights: BTreeMap<String, f64>,
    /// The expected bytes of the direction each weight event weighs.
    pub(super) expected_for: BTreeMap<String, f64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct BytesSection {
    pub(super) available: bool,
    pub(super) reason: String,
    pub(super) kernels: Vec<KernelBytes>,
}

#[derive(Clone, Debug, Serialize)]
pub(super) struct Fidelity {
    /// f per weight event: the bytes it saw over the bytes the kernels moved in its direction.
    pub(super) weights: BTreeMap<String, f64>,
    /// f per weight event and kernel.
    pub(super) per_kernel: BTreeMap<String, BTreeMap<String, f64>>,
    /// The error the spread of f implies: the largest |f_kernel / f − 1|.
    pub(super) bound: f64,
}

/// The direction a weight event weighs, from the plan's counter.
pub(super) fn weight_direction(plan: &Plan, event: &str) -> Option<Direction> {
    plan.counters
        .iter()
        .find(|c| c.value_key == event || c.event == event)
        .and_then(|c| c.direction)
}

pub(super) fn byte_rows(
    plan: &Plan,
    events: &[TruthEvent],
    kinds: &[&'static Kind],
    idents: &[Ident],
    passes: &[Option<u64>],
    intervals: &[IntervalResult],
    truth: &Truth,
) -> Vec<KernelBytes> {
    let (first, last) = match (intervals.first(), intervals.last()) {
        (Some(a), Some(b)) => (a.t_start_ns, b.t_end_ns),
        _ => return Vec::new(),
    };
    let (t0, t1) = (truth.at(first), truth.at(last));
    let mut out = Vec::new();
    for (w, kind) in kinds.iter().enumerate() {
        let Some((r, wr)) = kind.per_pass else {
            continue;
        };
        let n = passes.get(w).copied().flatten();
        let mut row = KernelBytes {
            name: kind.name,
            passes: n,
            expected_read: r * n.unwrap_or(0) as f64,
            expected_write: wr * n.unwrap_or(0) as f64,
            ..Default::default()
        };
        for iv in intervals {
            for t in iv
                .tasks
                .iter()
                .filter(|t| owner(idents, t.tgid, &t.comm) == Some(w))
            {
                row.imc_read += t.read_bytes as f64;
                row.imc_write += t.write_bytes as f64;
                row.imc_total += t.total_bytes as f64;
            }
        }
        for (k, e) in events.iter().enumerate() {
            if matches!(e.event.as_str(), "cpu-clock" | "task-clock") {
                continue;
            }
            // A weight counts lines (64 bytes) unless its alias says otherwise.
            let bpc = e
                .encodings
                .first()
                .and_then(|x| x.bytes_per_count)
                .unwrap_or(64.0);
            let d = (t1[w][k] - t0[w][k]).max(0.0);
            row.weights.insert(e.event.clone(), d * bpc);
            let expected = match weight_direction(plan, &e.event) {
                Some(Direction::Read) => row.expected_read,
                Some(Direction::Write) => row.expected_write,
                _ => row.expected_read + row.expected_write,
            };
            row.expected_for.insert(e.event.clone(), expected);
        }
        out.push(row);
    }
    out
}

pub(super) fn fidelity_of(rows: &[KernelBytes]) -> Fidelity {
    let mut weights = BTreeMap::new();
    let mut per_kernel: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    let events: Vec<String> = rows
        .iter()
        .flat_map(|r| r.weights.keys().cloned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for e in &events {
        let (mut saw, mut moved) = (0.0, 0.0);
        for r in rows {
            let expected = r.expected_for.get(e).copied().unwrap_or(0.0);
            let s = r.weights.get(e).copied().unwrap_or(0.0);
            saw += s;
            moved += expected;
            if expected > 0.0 {
                per_kernel
                    .entry(e.clone())
                    .or_default()
                    .insert(r.name.to_string(), s / expected);
            }
        }
        if moved > 0.0 {
            weights.insert(e.clone(), saw / moved);
        }
    }
    let bound = per_kernel
        .iter()
        .filter_map(|(e, ks)| {
            let f = *weights.get(e)?;
            (f > 0.0).then(|| ks.values().map(|k| (k / f - 1.0).abs()).fold(0.0, f64::max))
        })
        .fold(0.0, f64::max);
    Fidelity {
        weights,
        per_kernel,
        bound,
    }
}

/// `--save`: `{"weights": {"<event>": f}}` written whole (a temporary file renamed over it).
pub(super) fn save_fidelity(f: &Fidelity) -> CliResult<()> {
    let path = crate::settings::get().fidelity_path();
    crate::plan::fidelity::save(&path, &f.weights)
        .map_err(|e| CliError::runtime_because(format!("--save: writing {}", path.display()), e))?;
    eprintln!("imc: validate: fidelity saved in {}", path.display());
    Ok(())
}

#[derive(Clone, Debug, Serialize)]
pub(super) struct MbmRow {
    pub(super) name: &'static str,
    pub(super) mbm_bytes: Option<u64>,
    pub(super) imc_bytes: u64,
    /// |imc − MBM| / MBM.
    pub(super) error: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct MbmSection {
    pub(super) available: bool,
    pub(super) reason: String,
    pub(super) workloads: Vec<MbmRow>,
}

pub(super) fn mbm_rows(
    idents: &[Ident],
    intervals: &[IntervalResult],
    mbm: &[Option<u64>],
) -> Vec<MbmRow> {
    idents
        .iter()
        .enumerate()
        .map(|(w, i)| {
            let imc: u64 = intervals
                .iter()
                .flat_map(|iv| iv.tasks.iter())
                .filter(|t| owner(idents, t.tgid, &t.comm) == Some(w))
                .map(|t| t.bytes())
                .sum();
            let m = mbm.get(w).copied().flatten();
            MbmRow {
                name: i.name,
                mbm_bytes: m,
                imc_bytes: imc,
                // Under a megabyte either way is noise of the counters' granularity.
                error: m
                    .filter(|&m| m.max(imc) >= 1 << 20)
                    .map(|m| (imc as f64 - m as f64).abs() / (m.max(1)) as f64),
            }
        })
        .collect()
}

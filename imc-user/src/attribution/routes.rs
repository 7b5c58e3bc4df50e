//! Routing of remote weights with three or more packages: which package's memory a task's
//! remote weight read, fitted to what each package's own CPUs' local weights leave
//! unexplained.

use super::spread::MAX_CLASSES;
use super::state::{Attributor, PkgState};
use super::tasks::IDLE;
use std::collections::BTreeMap;

impl Attributor {
    /// With three or more packages a remote weight does not say whose memory it read: per
    /// target package (index), the part of each task's remote weight that goes to it (indexed
    /// by task). Estimated from the spans about to be spread: each package's traffic its own
    /// CPUs' local weights do not account for is what remote weights may claim there; each
    /// task's remote weight is divided among the packages it could have read, fitted
    /// iteratively so that no package is given more than its unexplained traffic while
    /// another can take it, preferring few targets per task (a task's memory is mostly on one
    /// package). Empty (all of it everywhere) with two packages, where it is exact, or when
    /// the weights count no bytes to compare.
    pub(super) fn routes(&self, packages: &[PkgState]) -> Vec<Vec<f64>> {
        let n = packages.len();
        if n < 3 || !self.numa {
            return Vec::new();
        }
        let Some((slot, class, price)) = (0..self.specs.len()).find_map(|s| {
            let c = usize::from(self.slot_class[s]).min(MAX_CLASSES - 1);
            let price = self.accounts[s]?;
            (self.classes[c].remote != 0).then_some((s, c, price))
        }) else {
            return Vec::new();
        };
        let (row_of, supply, unexplained) = remote_supply(packages, slot, class, price);
        let x = fit_routes(&supply, &unexplained);
        let ntasks = row_of.keys().next_back().map_or(0, |&t| t as usize + 1);
        (0..n)
            .map(|p| {
                let mut r = vec![1.0; ntasks];
                for (&t, &row) in &row_of {
                    r[t as usize] = x[row][p];
                }
                r
            })
            .collect()
    }
}

/// Rows: the tasks with remote weight on some package (by task index); per row the remote
/// weight (bytes) over each package's spans of `slot`; per package the traffic its own CPUs'
/// local weights leave unexplained (bytes).
#[allow(clippy::type_complexity)]
fn remote_supply(
    packages: &[PkgState],
    slot: usize,
    class: usize,
    price: f64,
) -> (BTreeMap<u32, usize>, Vec<Vec<f64>>, Vec<f64>) {
    let n = packages.len();
    let mut row_of: BTreeMap<u32, usize> = BTreeMap::new();
    let mut supply: Vec<Vec<f64>> = Vec::new();
    let mut unexplained = vec![0.0f64; n];
    for (pi, p) in packages.iter().enumerate() {
        let Some(ps) = p.slots.iter().find(|ps| ps.slot == slot) else {
            continue;
        };
        let (Some(first), Some(last)) = (ps.spans.first(), ps.spans.last()) else {
            continue;
        };
        let (f0, f1) = (first.t0, last.t1);
        let counted: f64 = ps.spans.iter().map(|sp| sp.d).sum::<f64>() / price;
        let mut local = 0.0;
        for sg in &p.segs {
            let overlap = sg.end.min(f1).saturating_sub(sg.start.max(f0)) as f64;
            let w = sg.wrate[class] * overlap;
            if !sg.foreign {
                local += w;
            } else if w > 0.0 && sg.task != IDLE {
                let r = *row_of.entry(sg.task).or_insert_with(|| {
                    supply.push(vec![0.0; n]);
                    supply.len() - 1
                });
                supply[r][pi] += w;
            }
        }
        unexplained[pi] = (counted - local).max(0.0);
    }
    (row_of, supply, unexplained)
}

/// Per row the part of its remote weight that is each package's: spread over the packages it
/// could have read, then sharpened and capped at each package's unexplained traffic, in turn.
fn fit_routes(supply: &[Vec<f64>], unexplained: &[f64]) -> Vec<Vec<f64>> {
    let n = unexplained.len();
    // x[row][p]: the part of the row's remote weight that is package p's.
    let mut x: Vec<Vec<f64>> = supply
        .iter()
        .map(|row| {
            row.iter()
                .zip(unexplained)
                .map(|(&w, &u)| if w > 0.0 { u } else { 0.0 })
                .collect()
        })
        .collect();
    let normalise = |x: &mut Vec<Vec<f64>>| {
        for (row, sup) in x.iter_mut().zip(supply) {
            let tot: f64 = row.iter().sum();
            let could = sup.iter().filter(|&&w| w > 0.0).count().max(1) as f64;
            for (v, &w) in row.iter_mut().zip(sup) {
                *v = if w <= 0.0 {
                    0.0
                } else if tot > 0.0 {
                    *v / tot
                } else {
                    1.0 / could
                };
            }
        }
    };
    normalise(&mut x);
    for _ in 0..64 {
        // Sharpen (fewer targets per task), then cap each package at what it can take.
        for row in x.iter_mut() {
            for v in row.iter_mut() {
                *v *= *v;
            }
        }
        normalise(&mut x);
        for p in 0..n {
            let got: f64 = x.iter().zip(supply).map(|(r, s)| r[p] * s[p]).sum();
            if got > unexplained[p] && got > 0.0 {
                let k = unexplained[p] / got;
                for row in x.iter_mut() {
                    row[p] *= k;
                }
            }
        }
        normalise(&mut x);
    }
    x
}

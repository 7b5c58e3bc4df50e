//! An interval's result: the package totals, each task's row and share, and what no task
//! took (device traffic apart), the counts rounded and taken so that attributed +
//! unattributed = the controller's total every interval.

use super::state::{Attributor, Placed};
use super::summary;
use super::tasks;
use crate::model::result::{IntervalResult, PackageRow, ShareBasis, TaskRow, package_bytes};
use crate::model::{Direction, SlotRole, SlotSpec, Tier, TierBytes};
use imc_common::MAX_SLOTS;
use std::collections::BTreeMap;

impl Attributor {
    pub(super) fn build_result(&mut self, t_start: u64, t_end: u64) -> IntervalResult {
        let packages = self.take_package_rows();
        let idle_counts = rounded(&mut self.idle_acc, self.specs.len());
        let (ur, uw, ut) = bytes_of(&self.specs, &idle_counts);
        let unattributed_bytes = ur + uw + ut;
        let device_counts = rounded(&mut self.device_acc, self.specs.len());
        let (dr, dw, dt) = bytes_of(&self.specs, &device_counts);
        let device_bytes = (dr + dw + dt).min(unattributed_bytes);
        let unattributed = crate::model::result::Unattributed {
            device_bytes,
            other_bytes: unattributed_bytes - device_bytes,
        };
        let mut traffic_total = traffic_counts(&self.specs, &idle_counts);
        let rows = self.take_task_rows(&mut traffic_total);
        let basis = if crate::model::measures_bytes(&self.specs) {
            ShareBasis::Bytes(package_bytes(&packages))
        } else {
            ShareBasis::Counts(traffic_total)
        };
        let mut tasks: Vec<TaskRow> = rows
            .into_iter()
            .map(|(tc, mut row)| {
                row.share = basis.share(row.bytes(), tc);
                row
            })
            .collect();
        summary::sort_rows(&mut tasks);
        IntervalResult {
            t_start_ns: t_start,
            t_end_ns: t_end,
            source: self.source.clone(),
            packages,
            tasks,
            unattributed_bytes,
            unattributed,
            lost_samples: self.lost,
            weighting: Some(self.weighting.clone()),
            weight_fallbacks: std::mem::take(&mut self.time_fallbacks),
        }
    }

    /// Each package's row of the interval, its counts taken (the next interval starts at 0).
    fn take_package_rows(&mut self) -> Vec<PackageRow> {
        let specs = &self.specs;
        self.packages
            .iter_mut()
            .map(|p| {
                let counts = rounded(&mut p.acc, specs.len());
                let unattributed_counts = p.idle[..specs.len()]
                    .iter()
                    .map(|&v| round_count(v))
                    .collect();
                p.idle = [0.0; MAX_SLOTS];
                let device_counts = p.device[..specs.len()]
                    .iter()
                    .map(|&v| round_count(v))
                    .collect();
                p.device = [0.0; MAX_SLOTS];
                let (read_bytes, write_bytes, total_bytes) = bytes_of(specs, &counts);
                PackageRow {
                    id: p.id,
                    read_bytes,
                    write_bytes,
                    total_bytes,
                    slot_counts: counts[..specs.len()].to_vec(),
                    tiers: tier_bytes(specs, &counts[..specs.len()]),
                    unattributed_counts,
                    device_counts,
                    channels: Vec::new(),
                    ..PackageRow::default()
                }
            })
            .collect()
    }

    /// The row of every task that counted anything this interval, with its traffic count (for
    /// its share, added to `traffic_total`); its counts taken.
    fn take_task_rows(&mut self, traffic_total: &mut f64) -> Vec<(f64, TaskRow)> {
        let specs = &self.specs;
        let mut placed: std::collections::HashMap<u32, [Slack; MAX_SLOTS]> = Default::default();
        for (task, slot, how) in self.placed.drain(..) {
            if let Some(s) = placed
                .entry(task)
                .or_insert([Slack::NONE; MAX_SLOTS])
                .get_mut(usize::from(slot))
            {
                s.add(how);
            }
        }
        let mut rows = Vec::with_capacity(self.tasks.touched.len());
        for &ti in &self.tasks.touched {
            let Some(e) = self.tasks.entries.get_mut(ti as usize) else {
                continue;
            };
            let counts = rounded(&mut e.acc, specs.len());
            e.touched = false;
            if counts.iter().all(|&c| c == 0.0) {
                continue;
            }
            *traffic_total += traffic_counts(specs, &counts);
            let mut row = task_row(specs, e, &counts);
            if let Some(slots) = placed.get(&ti) {
                row.placed_by_time =
                    per_event(specs, slots, |s| (s.by_time > 0.0).then_some(s.by_time));
                row.placed_late = per_event(specs, slots, |s| {
                    (s.late > 0.0).then_some((s.late, s.since))
                });
            }
            rows.push((traffic_counts(specs, &counts), row));
        }
        self.tasks.touched.clear();
        rows
    }
}

/// What one task's slot placed without knowing when, summed over the interval.
#[derive(Clone, Copy)]
struct Slack {
    by_time: f64,
    late: f64,
    /// The earliest start of a late count's span.
    since: u64,
}

impl Slack {
    const NONE: Slack = Slack {
        by_time: 0.0,
        late: 0.0,
        since: u64::MAX,
    };

    fn add(&mut self, how: Placed) {
        match how {
            Placed::ByTime(v) => self.by_time += v,
            Placed::Late(v, since) => {
                self.late += v;
                self.since = self.since.min(since);
            }
        }
    }
}

/// Per event, what `f` takes from each slot's slack where it takes anything.
fn per_event<T>(
    specs: &[SlotSpec],
    slots: &[Slack],
    f: impl Fn(&Slack) -> Option<T>,
) -> BTreeMap<String, T> {
    specs
        .iter()
        .zip(slots)
        .filter_map(|(spec, s)| Some((spec.event.clone(), f(s)?)))
        .collect()
}

/// A count as the results give it: whole, never negative.
pub(super) fn round_count(v: f64) -> f64 {
    if v > 0.0 { v.round() } else { 0.0 }
}

/// The first `n` of `acc`, rounded, and `acc` emptied for the next interval.
pub(super) fn rounded(acc: &mut [f64; MAX_SLOTS], n: usize) -> [f64; MAX_SLOTS] {
    let mut counts = [0.0; MAX_SLOTS];
    for (s, c) in counts.iter_mut().enumerate().take(n) {
        *c = round_count(acc[s]);
    }
    *acc = [0.0; MAX_SLOTS];
    counts
}

/// A task's row of the interval from its rounded counts (its share is set by the caller).
pub(super) fn task_row(
    specs: &[SlotSpec],
    e: &tasks::TaskEntry,
    counts: &[f64; MAX_SLOTS],
) -> TaskRow {
    let (read_bytes, write_bytes, total_bytes) = bytes_of(specs, counts);
    let values: BTreeMap<String, f64> = specs
        .iter()
        .enumerate()
        .map(|(s, spec)| (spec.event.clone(), counts[s]))
        .collect();
    let mut row = TaskRow {
        pid: e.key.pid,
        tgid: e.key.tgid,
        comm: e.key.comm_str(),
        cgroup: e.key.cgroup,
        read_bytes,
        write_bytes,
        total_bytes,
        share: 0.0,
        values,
        ..TaskRow::default()
    };
    // The stall pair is charged like any CPU count (its `values`), never weighs traffic.
    row.set_stalls(
        crate::model::Victims::keys(specs),
        crate::model::Victims::key(specs, crate::model::StallPart::Time),
    );
    row
}

/// (read, write, total) bytes of whole counts per slot: Traffic slots with a byte size.
pub fn bytes_of(specs: &[SlotSpec], counts: &[f64; MAX_SLOTS]) -> (u64, u64, u64) {
    bytes_where(specs, counts, |_| true)
}

/// Each memory tier's bytes, DRAM then CXL, where the slots count bytes of a CXL tier (by their
/// value keys, [`Tier::of_key`]); none otherwise.
pub fn tier_bytes(specs: &[SlotSpec], counts: &[f64]) -> Vec<TierBytes> {
    let tier = |spec: &SlotSpec| Tier::of_key(&spec.event);
    if !specs
        .iter()
        .any(|s| s.counts_bytes() && tier(s) == Tier::Cxl)
    {
        return Vec::new();
    }
    let mut all = [0.0; MAX_SLOTS];
    for (a, c) in all.iter_mut().zip(counts) {
        *a = *c;
    }
    [Tier::Dram, Tier::Cxl]
        .into_iter()
        .map(|t| {
            let (read_bytes, write_bytes, total_bytes) = bytes_where(specs, &all, |s| tier(s) == t);
            TierBytes {
                tier: t,
                read_bytes,
                write_bytes,
                total_bytes,
            }
        })
        .collect()
}

/// (read, write, total) bytes of the Traffic slots with a byte size that `keep` takes.
fn bytes_where(
    specs: &[SlotSpec],
    counts: &[f64; MAX_SLOTS],
    keep: impl Fn(&SlotSpec) -> bool,
) -> (u64, u64, u64) {
    let (mut r, mut w, mut t) = (0.0, 0.0, 0.0);
    for (s, spec) in specs.iter().enumerate().take(MAX_SLOTS) {
        if !keep(spec) {
            continue;
        }
        if let (SlotRole::Traffic(dir), Some(bpc)) = (spec.role, spec.bytes_per_count) {
            let b = counts[s] * bpc;
            match dir {
                Direction::Read => r += b,
                Direction::Write => w += b,
                Direction::Total => t += b,
            }
        }
    }
    (r.round() as u64, w.round() as u64, t.round() as u64)
}

/// Sum of the Traffic slots' counts (the share basis of stand-in sources without bytes).
pub fn traffic_counts(specs: &[SlotSpec], counts: &[f64; MAX_SLOTS]) -> f64 {
    specs
        .iter()
        .enumerate()
        .take(MAX_SLOTS)
        .filter(|(_, s)| matches!(s.role, SlotRole::Traffic(_)))
        .map(|(i, _)| counts[i])
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Package, SlotScope, Topology};

    fn traffic(event: &str, d: Direction) -> SlotSpec {
        SlotSpec {
            event: event.into(),
            scope: SlotScope::Package,
            role: SlotRole::Traffic(d),
            bytes_per_count: Some(64.0),
            counter_bits: 48,
        }
    }

    /// A package whose DRAM read 100 lines and wrote 20, and whose CXL device read 300: its
    /// row is both, and its tiers each apart; without a CXL slot there are no tiers.
    #[test]
    fn a_package_row_has_its_tiers_where_a_cxl_slot_counts() {
        let specs = [
            traffic("read", Direction::Read),
            traffic("write", Direction::Write),
            traffic("cxl_read", Direction::Read),
        ];
        let topo = Topology {
            packages: vec![Package {
                id: 0,
                cpus: vec![0],
            }],
            ..Topology::default()
        };
        let mut a = Attributor::new(&specs, &topo, "intel-uncore-imc");
        for (slot, lines) in [(0, 100), (1, 20), (2, 300)] {
            a.push_package_read(0, slot, 1_000, 5_000);
            a.push_package_read(0, slot, 2_000, 5_000 + lines);
        }
        let iv = a.finish(3_000);
        let p = &iv.packages[0];
        assert_eq!((p.read_bytes, p.write_bytes), (400 * 64, 20 * 64));
        let tiers: Vec<(Tier, u64, u64)> = p
            .tiers
            .iter()
            .map(|t| (t.tier, t.read_bytes, t.write_bytes))
            .collect();
        assert_eq!(
            tiers,
            [(Tier::Dram, 100 * 64, 20 * 64), (Tier::Cxl, 300 * 64, 0)]
        );
        assert!(tier_bytes(&specs[..2], &[100.0, 20.0]).is_empty());
    }
}

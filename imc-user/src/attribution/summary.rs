//! What is done with finished intervals: summing them over a run, grouping tasks by
//! pid/tgid/comm/cgroup, finding bursts, and comparing the tick-only answer with the precise one.
use crate::model::GroupBy;
use crate::model::result::{
    IntervalResult, PackageRow, PrecisionRow, ShareBasis, Stalls, TaskRow, package_bytes,
};
use crate::model::{SlotRole, SlotSpec, StallPart, Victims};
use foldhash::{HashMap, HashMapExt};
use std::collections::BTreeMap;

/// Largest bytes first; stand-ins (no bytes) by share; then by pid for a stable order.
pub fn sort_rows(rows: &mut [TaskRow]) {
    // A row is a few hundred bytes: the sort orders indices (by each row's bytes, summed once),
    // then each row moves along its cycle of the permutation once (a sort of the rows
    // themselves copies each one per merge).
    let bytes: Vec<u64> = rows.iter().map(TaskRow::bytes).collect();
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by(|&a, &b| (bytes[b].cmp(&bytes[a])).then_with(|| row_order(&rows[a], &rows[b])));
    // Position i takes the row at order[i]; a placed position points at itself.
    for start in 0..order.len() {
        let mut at = start;
        while order[at] != start {
            let from = order[at];
            rows.swap(at, from);
            order[at] = at;
            at = from;
        }
        order[at] = at;
    }
}

/// The order of [`sort_rows`].
fn row_order(a: &TaskRow, b: &TaskRow) -> std::cmp::Ordering {
    b.bytes()
        .cmp(&a.bytes())
        .then(b.share.total_cmp(&a.share))
        .then(a.pid.cmp(&b.pid))
        .then(a.comm.cmp(&b.comm))
}

fn traffic_keys(specs: &[SlotSpec]) -> Vec<String> {
    specs
        .iter()
        .filter(|s| matches!(s.role, SlotRole::Traffic(_)))
        .map(|s| s.event.clone())
        .collect()
}

fn row_traffic(row: &TaskRow, keys: &[String]) -> f64 {
    keys.iter().filter_map(|k| row.values.get(k)).sum()
}

/// How much traffic an interval carried, for burst detection: package bytes, or for stand-in
/// sources without bytes, the traffic counters' counts attributed plus unattributed (recovered
/// from the shares, which are relative to that total).
pub fn traffic_amount(interval: &IntervalResult, specs: &[SlotSpec]) -> f64 {
    let bytes = interval.package_bytes();
    if bytes > 0 {
        return bytes as f64;
    }
    let keys = traffic_keys(specs);
    stand_in_total(interval, &keys)
}

fn stand_in_total(interval: &IntervalResult, keys: &[String]) -> f64 {
    let counts: f64 = interval.tasks.iter().map(|r| row_traffic(r, keys)).sum();
    let shares: f64 = interval.tasks.iter().map(|r| r.share).sum();
    amount_of(0, counts, shares)
}

/// [`traffic_amount`] of an interval from its package bytes and the sums, over all its task
/// rows, of their traffic counts and their shares (for a reader that does not keep every row).
pub fn amount_of(package_bytes: u64, counts: f64, shares: f64) -> f64 {
    if package_bytes > 0 {
        package_bytes as f64
    } else if shares > 0.0 {
        counts / shares
    } else {
        counts
    }
}

/// Sums intervals over a run (or a burst): packages by id, tasks by (pid, tgid, comm, cgroup).
pub struct Summary {
    keys: Vec<String>,
    /// The stall pair's value keys and the on-CPU time's: rows read back from a recording
    /// store values only, and their stall fields are derived from them here.
    stall_keys: Option<(String, String)>,
    stall_time: Option<String>,
    /// How the run divided package traffic (from its first interval).
    pub weighting: Option<crate::model::Weighting>,
    pub weight_fallbacks: u64,
    pub t_start_ns: Option<u64>,
    pub t_end_ns: u64,
    pub source: String,
    packages: BTreeMap<u32, PackageRow>,
    tasks: HashMap<(u32, u32, String, u64), TaskRow>,
    unattributed_bytes: u64,
    unattributed: crate::model::result::Unattributed,
    lost_samples: u64,
    /// Denominator of stand-in shares: traffic counts attributed + unattributed.
    stand_in_den: f64,
    pub intervals: u64,
}

impl Summary {
    pub fn new(specs: &[SlotSpec]) -> Summary {
        Summary {
            weighting: None,
            weight_fallbacks: 0,
            keys: traffic_keys(specs),
            stall_keys: Victims::keys(specs).map(|(s, c)| (s.to_string(), c.to_string())),
            stall_time: Victims::key(specs, StallPart::Time).map(str::to_string),
            t_start_ns: None,
            t_end_ns: 0,
            source: String::new(),
            packages: BTreeMap::new(),
            tasks: HashMap::new(),
            unattributed_bytes: 0,
            unattributed: Default::default(),
            lost_samples: 0,
            stand_in_den: 0.0,
            intervals: 0,
        }
    }

    pub fn add(&mut self, iv: &IntervalResult) {
        let amount = stand_in_total(iv, &self.keys);
        self.add_amount(iv, amount);
    }

    /// Distinct tasks summed so far.
    pub fn tasks(&self) -> usize {
        self.tasks.len()
    }

    /// [`add`](Self::add) for an interval whose task rows may be a part of its rows: `amount`
    /// is [`traffic_amount`] of the whole interval (the reader's, over every row).
    pub fn add_amount(&mut self, iv: &IntervalResult, amount: f64) {
        self.intervals += 1;
        self.t_start_ns = Some(
            self.t_start_ns
                .map_or(iv.t_start_ns, |t| t.min(iv.t_start_ns)),
        );
        self.t_end_ns = self.t_end_ns.max(iv.t_end_ns);
        if self.source.is_empty() {
            self.source.clone_from(&iv.source);
        }
        if self.weighting.is_none() {
            self.weighting.clone_from(&iv.weighting);
        }
        self.weight_fallbacks = self.weight_fallbacks.saturating_add(iv.weight_fallbacks);
        for p in &iv.packages {
            let e = self.packages.entry(p.id).or_insert_with(|| PackageRow {
                id: p.id,
                ..PackageRow::default()
            });
            e.read_bytes = e.read_bytes.saturating_add(p.read_bytes);
            e.write_bytes = e.write_bytes.saturating_add(p.write_bytes);
            e.total_bytes = e.total_bytes.saturating_add(p.total_bytes);
            add_tiers(&mut e.tiers, &p.tiers);
        }
        self.unattributed_bytes = self
            .unattributed_bytes
            .saturating_add(iv.unattributed_bytes);
        let u = &mut self.unattributed;
        u.device_bytes = u.device_bytes.saturating_add(iv.unattributed.device_bytes);
        u.other_bytes = u.other_bytes.saturating_add(iv.unattributed.other_bytes);
        self.lost_samples = self.lost_samples.saturating_add(iv.lost_samples);
        self.stand_in_den += amount;
        for r in &iv.tasks {
            // Look up by reference first: the common case (a known task) must not allocate.
            let key = (r.pid, r.tgid, r.comm.clone(), r.cgroup);
            let e = self.tasks.entry(key).or_insert_with(|| TaskRow {
                pid: r.pid,
                tgid: r.tgid,
                comm: r.comm.clone(),
                cgroup: r.cgroup,
                ..TaskRow::default()
            });
            if e.cgroup_path.is_none() && r.cgroup_path.is_some() {
                e.cgroup_path.clone_from(&r.cgroup_path);
                e.container_id.clone_from(&r.container_id);
                e.pod_uid.clone_from(&r.pod_uid);
            }
            add_row(e, r);
            if r.cycles.is_none()
                && let Some((s, c)) = &self.stall_keys
            {
                let keys = Some((s.as_str(), c.as_str()));
                e.add_stall_fields(&Stalls::of_values(
                    &r.values,
                    keys,
                    self.stall_time.as_deref(),
                ));
            }
        }
    }

    /// The run as one interval object, tasks grouped `by` and sorted, shares over the run.
    pub fn finish(&self, by: GroupBy) -> IntervalResult {
        let rows: Vec<TaskRow> = self.tasks.values().cloned().collect();
        self.result(group_rows(self.with_shares(rows), by))
    }

    /// The summed task rows, one per task, with their shares over the run, taken out of the
    /// summary (no copy: a report's pass hands them on and reads the next part of the file).
    pub fn take_rows(&mut self) -> Vec<TaskRow> {
        let rows: Vec<TaskRow> = std::mem::take(&mut self.tasks).into_values().collect();
        self.with_shares(rows)
    }

    fn basis(&self) -> ShareBasis {
        let packages: Vec<PackageRow> = self.packages.values().cloned().collect();
        match package_bytes(&packages) {
            0 => ShareBasis::Counts(self.stand_in_den),
            b => ShareBasis::Bytes(b),
        }
    }

    fn with_shares(&self, mut rows: Vec<TaskRow>) -> Vec<TaskRow> {
        let basis = self.basis();
        for r in &mut rows {
            r.share = basis.share(r.bytes(), row_traffic(r, &self.keys));
        }
        rows
    }

    /// The run as one interval object with these task rows.
    pub fn result(&self, tasks: Vec<TaskRow>) -> IntervalResult {
        let packages: Vec<PackageRow> = self.packages.values().cloned().collect();
        IntervalResult {
            t_start_ns: self.t_start_ns.unwrap_or(0),
            t_end_ns: self.t_end_ns,
            source: self.source.clone(),
            packages,
            tasks,
            unattributed_bytes: self.unattributed_bytes,
            unattributed: self.unattributed,
            lost_samples: self.lost_samples,
            weighting: self.weighting.clone(),
            weight_fallbacks: self.weight_fallbacks,
        }
    }
}

fn add_row(e: &mut TaskRow, r: &TaskRow) {
    e.read_bytes = e.read_bytes.saturating_add(r.read_bytes);
    e.write_bytes = e.write_bytes.saturating_add(r.write_bytes);
    e.total_bytes = e.total_bytes.saturating_add(r.total_bytes);
    e.share += r.share;
    e.add_stalls(r);
    for (k, v) in &r.values {
        if let Some(x) = e.values.get_mut(k) {
            *x += v;
        } else {
            e.values.insert(k.clone(), *v);
        }
    }
}

/// Merges rows by the grouping key and sorts them. Shares add (they share a denominator).
/// Fields that are not the key keep their value when every member agrees; otherwise pid and
/// tgid become 0 (for `tgid` grouping pid becomes the tgid, the process' main thread), cgroup
/// becomes 0, cgroup_path, container_id and pod_uid become null, and comm is the main thread's
/// (tgid grouping) or the largest member's. Tasks in no container (pod) are one group of their
/// own under `container` (`pod`) grouping, with a null id.
pub fn group_rows(rows: Vec<TaskRow>, by: GroupBy) -> Vec<TaskRow> {
    if by == GroupBy::Pid {
        let mut rows = rows;
        sort_rows(&mut rows);
        return rows;
    }
    let mut groups = Groups::new(by);
    for r in rows {
        groups.add(r);
    }
    groups.into_rows()
}

/// Groups being built from their members (complete rows: a member's size decides whose names
/// a group shows), in the order they were first seen. [`group_rows`] in steps: a report adds the
/// members of each part of a recording as it reads them.
pub struct Groups {
    by: GroupBy,
    groups: HashMap<String, Group>,
    order: Vec<String>,
}

struct Group {
    row: TaskRow,
    best: u64,
    best_is_main: bool,
}

impl Groups {
    pub fn new(by: GroupBy) -> Groups {
        Groups {
            by,
            groups: HashMap::new(),
            order: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.groups.len()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Adds one member: the whole of a task's row (its sum over the run or the burst).
    pub fn add(&mut self, r: TaskRow) {
        let by = self.by;
        let key = by.key(&r);
        let size = r.bytes().max((r.share * 1e12) as u64);
        let is_main = r.pid == r.tgid;
        match self.groups.get_mut(&key) {
            None => {
                self.order.push(key.clone());
                let mut row = r;
                if by == GroupBy::Tgid {
                    row.pid = row.tgid;
                }
                self.groups.insert(
                    key,
                    Group {
                        row,
                        best: size,
                        best_is_main: is_main,
                    },
                );
            }
            Some(g) => {
                let better = match by {
                    GroupBy::Tgid => {
                        (is_main && !g.best_is_main) || (is_main == g.best_is_main && size > g.best)
                    }
                    _ => size > g.best,
                };
                if better {
                    g.best = size;
                    g.best_is_main = is_main;
                    if by != GroupBy::Comm {
                        g.row.comm.clone_from(&r.comm);
                    }
                }
                if by != GroupBy::Tgid && g.row.pid != r.pid {
                    g.row.pid = 0;
                }
                if by != GroupBy::Tgid && g.row.tgid != r.tgid {
                    g.row.tgid = 0;
                }
                if by != GroupBy::Cgroup && g.row.cgroup != r.cgroup {
                    g.row.cgroup = 0;
                }
                if by == GroupBy::Cgroup {
                    // The names follow from the id: any member that has them has the right ones.
                    if g.row.cgroup_path.is_none() && r.cgroup_path.is_some() {
                        g.row.cgroup_path.clone_from(&r.cgroup_path);
                        g.row.container_id.clone_from(&r.container_id);
                        g.row.pod_uid.clone_from(&r.pod_uid);
                    }
                } else {
                    keep_if_same(&mut g.row.cgroup_path, &r.cgroup_path);
                    keep_if_same(&mut g.row.container_id, &r.container_id);
                    keep_if_same(&mut g.row.pod_uid, &r.pod_uid);
                }
                add_row(&mut g.row, &r);
            }
        }
    }

    /// The groups' rows, sorted.
    pub fn into_rows(mut self) -> Vec<TaskRow> {
        let mut out: Vec<TaskRow> = self
            .order
            .into_iter()
            .filter_map(|k| self.groups.remove(&k).map(|g| g.row))
            .collect();
        sort_rows(&mut out);
        out
    }
}

/// The busiest `n` rows of a report, exactly, from rows handed in parts (each row whole: a
/// group's every member summed), and the rest summed into one row.
pub struct TopRows {
    n: usize,
    rows: Vec<TaskRow>,
    others: crate::model::result::OthersRow,
}

impl TopRows {
    pub fn new(n: usize) -> TopRows {
        TopRows {
            n,
            rows: Vec::new(),
            others: Default::default(),
        }
    }

    /// Adds whole rows: the best `n` of all rows so far are kept, the others summed. The kept
    /// rows and the part are merged into a list of at most `n`, so what stays between parts is
    /// `n` rows, never a part's worth of capacity (40 000 rows of a pass held twice over, by
    /// the run's and the bursts' tops, made a million-task `report --bursts` pass 200 MB).
    pub fn push(&mut self, mut rows: Vec<TaskRow>) {
        sort_rows(&mut rows);
        let kept = std::mem::take(&mut self.rows);
        let mut top = Vec::with_capacity(self.n.min(kept.len() + rows.len()));
        let (mut a, mut b) = (kept.into_iter().peekable(), rows.into_iter().peekable());
        // A merge of two sorted lists, ties to the rows kept before: as a stable sort of both.
        loop {
            let from_kept = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) => row_order(x, y) != std::cmp::Ordering::Greater,
                (x, _) => x.is_some(),
            };
            let Some(r) = (if from_kept { a.next() } else { b.next() }) else {
                break;
            };
            if top.len() < self.n {
                top.push(r);
            } else {
                self.add_other(r);
            }
        }
        self.rows = top;
    }

    fn add_other(&mut self, r: TaskRow) {
        let o = &mut self.others;
        o.rows += 1;
        o.read_bytes = o.read_bytes.saturating_add(r.read_bytes);
        o.write_bytes = o.write_bytes.saturating_add(r.write_bytes);
        o.total_bytes = o.total_bytes.saturating_add(r.total_bytes);
        o.share += r.share;
        for (k, v) in r.values {
            *o.values.entry(k).or_default() += v;
        }
    }

    /// The kept rows, sorted, and the others' sum (None when there were none).
    pub fn finish(self) -> (Vec<TaskRow>, Option<crate::model::result::OthersRow>) {
        let others = (self.others.rows > 0).then_some(self.others);
        (self.rows, others)
    }
}

/// A group's name field stays only while every member has the same one.
fn keep_if_same(group: &mut Option<String>, member: &Option<String>) {
    if group != member {
        *group = None;
    }
}

/// Nearest-rank percentile (q in 0..=100) of `values`; None when empty.
pub fn percentile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v: Vec<f64> = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// One interval as burst detection sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IntervalRate {
    pub t_start_ns: u64,
    pub t_end_ns: u64,
    /// Bytes (or stand-in counts) in the interval.
    pub amount: f64,
}

impl IntervalRate {
    pub fn per_s(&self) -> f64 {
        let dt = self.t_end_ns.saturating_sub(self.t_start_ns);
        if dt == 0 {
            0.0
        } else {
            self.amount * 1e9 / dt as f64
        }
    }
}

/// A run of adjacent intervals above the threshold: indices into the input, inclusive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BurstSpan {
    pub first: usize,
    pub last: usize,
    pub t_start_ns: u64,
    pub t_end_ns: u64,
    pub bytes_per_s: f64,
}

/// The peak level of a run, against which the default threshold is set.
pub const DEFAULT_BURST_PERCENTILE: f64 = 99.0;
/// A run whose peak level is less than this many times its typical (median) level is flat:
/// it has no bursts, only noise.
pub const BURST_MIN_PEAK_RATIO: f64 = 1.5;

/// The default burst threshold from a run's median (`p50`) and peak (`p99`) bandwidth: halfway
/// between them, so every interval nearer the peak level than the typical level is a burst.
/// A plain high percentile would keep only the top 1% of intervals and so hide most bursts of a
/// periodic workload, whose on-phases all reach about the same height; halfway still leaves
/// ordinary noise around the typical level out. None for a flat run.
pub fn default_burst_threshold(p50: f64, p99: f64) -> Option<f64> {
    (p99 > 0.0 && p99 >= BURST_MIN_PEAK_RATIO * p50).then(|| p50 + (p99 - p50) / 2.0)
}

/// Bursts: intervals whose bandwidth is above `threshold` (bytes/s), adjacent ones merged
/// (consecutive in the input with no gap longer than an interval). Without a threshold,
/// [`default_burst_threshold`] of the run's median and 99th percentile (no bursts, and an
/// infinite threshold, for a flat run).
pub fn find_bursts(rates: &[IntervalRate], threshold: Option<f64>) -> (f64, Vec<BurstSpan>) {
    let per_s: Vec<f64> = rates.iter().map(IntervalRate::per_s).collect();
    let threshold = threshold.unwrap_or_else(|| {
        match (
            percentile(&per_s, 50.0),
            percentile(&per_s, DEFAULT_BURST_PERCENTILE),
        ) {
            (Some(p50), Some(p99)) => default_burst_threshold(p50, p99).unwrap_or(f64::INFINITY),
            _ => f64::INFINITY,
        }
    });
    let is_burst = |v: f64| v > threshold;
    let mut out: Vec<BurstSpan> = Vec::new();
    let mut amount = 0.0;
    for (i, r) in rates.iter().enumerate() {
        if !is_burst(per_s[i]) {
            continue;
        }
        if let Some(b) = out.last_mut() {
            let gap = r.t_start_ns.saturating_sub(b.t_end_ns);
            let len = r.t_end_ns.saturating_sub(r.t_start_ns);
            if b.last + 1 == i && gap <= len {
                b.last = i;
                b.t_end_ns = r.t_end_ns;
                amount += r.amount;
                let dt = b.t_end_ns.saturating_sub(b.t_start_ns).max(1);
                b.bytes_per_s = amount * 1e9 / dt as f64;
                continue;
            }
        }
        amount = r.amount;
        out.push(BurstSpan {
            first: i,
            last: i,
            t_start_ns: r.t_start_ns,
            t_end_ns: r.t_end_ns,
            bytes_per_s: per_s[i],
        });
    }
    (threshold, out)
}

/// How far the tick-only shares are from the precise ones (per thread).
pub fn compare(precise: &IntervalResult, tick_only: &IntervalResult) -> PrecisionRow {
    let mut shares: HashMap<u32, (f64, f64)> = HashMap::new();
    for r in &precise.tasks {
        shares.entry(r.pid).or_default().0 += r.share;
    }
    for r in &tick_only.tasks {
        shares.entry(r.pid).or_default().1 += r.share;
    }
    let mut row = PrecisionRow::default();
    let mut l1 = 0.0;
    let mut pids: Vec<_> = shares.into_iter().collect();
    pids.sort_by_key(|(pid, _)| *pid);
    for (pid, (p, t)) in pids {
        let d = (p - t).abs();
        l1 += d;
        if d > row.max_share_diff {
            row.max_share_diff = d;
            row.max_diff_pid = pid;
        }
    }
    row.share_distance = l1 / 2.0;
    row
}

/// Adds an interval's tier bytes of a package to its sums, tier by tier.
fn add_tiers(sums: &mut Vec<crate::model::TierBytes>, tiers: &[crate::model::TierBytes]) {
    for t in tiers {
        let i = match sums.iter().position(|s| s.tier == t.tier) {
            Some(i) => i,
            None => {
                sums.push(crate::model::TierBytes {
                    tier: t.tier,
                    ..Default::default()
                });
                sums.len() - 1
            }
        };
        let s = &mut sums[i];
        s.read_bytes = s.read_bytes.saturating_add(t.read_bytes);
        s.write_bytes = s.write_bytes.saturating_add(t.write_bytes);
        s.total_bytes = s.total_bytes.saturating_add(t.total_bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows end in the order a stable sort by [`row_order`] gives, ties (same bytes, pid
    /// and comm) in the order they came, whatever cycles the permutation has.
    #[test]
    fn sort_rows_orders_as_a_stable_sort_of_the_rows() {
        let mut x = 0x9e37_79b9_u64;
        for n in [0, 1, 2, 3, 7, 64, 1000] {
            let rows: Vec<TaskRow> = (0..n)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    TaskRow {
                        pid: (x % 5) as u32,
                        comm: "c".into(),
                        read_bytes: (x >> 8) % 4,
                        cgroup: i,
                        ..Default::default()
                    }
                })
                .collect();
            let mut want = rows.clone();
            want.sort_by(row_order);
            let mut got = rows;
            sort_rows(&mut got);
            let ids = |r: &[TaskRow]| r.iter().map(|r| r.cgroup).collect::<Vec<_>>();
            assert_eq!(ids(&got), ids(&want), "{n} rows");
        }
    }

    #[test]
    fn top_rows_keep_the_best_n_of_every_part_and_sum_the_rest_holding_n_rows() {
        let row = |pid: u32, bytes: u64| TaskRow {
            pid,
            comm: format!("t{pid}"),
            read_bytes: bytes,
            values: [("e".to_string(), bytes as f64)].into(),
            ..Default::default()
        };
        // Three parts, ties across parts included (pid breaks them).
        let parts: Vec<Vec<TaskRow>> = (0..3u32)
            .map(|p| {
                (0..40u32)
                    .map(|i| row(p * 100 + i, u64::from((i * 7 + p) % 23)))
                    .collect()
            })
            .collect();
        let mut all: Vec<TaskRow> = parts.iter().flatten().cloned().collect();
        sort_rows(&mut all);
        let mut top = TopRows::new(5);
        for part in parts {
            top.push(part);
            assert!(
                top.rows.capacity() <= 5,
                "{} rows held",
                top.rows.capacity()
            );
        }
        let (rows, others) = top.finish();
        let pids = |r: &[TaskRow]| r.iter().map(|t| t.pid).collect::<Vec<_>>();
        assert_eq!(pids(&rows), pids(&all[..5]));
        let others = others.unwrap();
        assert_eq!(others.rows, 115);
        let rest: u64 = all[5..].iter().map(|t| t.read_bytes).sum();
        assert_eq!((others.read_bytes, others.values["e"]), (rest, rest as f64));
    }

    fn rate(t: u64, amount: f64) -> IntervalRate {
        IntervalRate {
            t_start_ns: t * 100,
            t_end_ns: (t + 1) * 100,
            amount,
        }
    }

    #[test]
    fn adjacent_bursts_merge_and_percentile_default() {
        let mut rates: Vec<IntervalRate> = (0..100).map(|t| rate(t, 10.0)).collect();
        rates[40].amount = 50.0;
        rates[41].amount = 70.0;
        rates[90].amount = 30.0;
        let (_, b) = find_bursts(&rates, Some(20.0e7));
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].first, b[0].last), (40, 41));
        assert_eq!(b[0].t_start_ns, 4000);
        assert_eq!(b[0].t_end_ns, 4200);
        assert!((b[0].bytes_per_s - 120.0 * 1e9 / 200.0).abs() < 1e-3);
        // p99 of 100 values is the 99th smallest (50), the median 10: the default threshold is
        // 30, which the 50 and 70 intervals pass and the 30 one does not.
        let (thr, b) = find_bursts(&rates, None);
        assert_eq!(thr, 30.0e7);
        assert_eq!(b.len(), 1);
        assert_eq!((b[0].first, b[0].last), (40, 41));
        // A flat run has no bursts.
        let flat: Vec<IntervalRate> = (0..100).map(|t| rate(t, 10.0)).collect();
        assert!(find_bursts(&flat, None).1.is_empty());
    }

    #[test]
    fn periodic_bursts_of_noisy_equal_height_are_all_found() {
        // 20 on-phases of 10 intervals at 100 ± 15, off-phases of 20 intervals at 5 ± 3: the
        // top 1% alone would be six intervals in two or three phases.
        let noise = |i: usize, amp: f64| ((i * 7919 % 101) as f64 / 50.0 - 1.0) * amp;
        let rates: Vec<IntervalRate> = (0..600)
            .map(|i| {
                let on = i % 30 < 10;
                let level = if on {
                    100.0 + noise(i, 15.0)
                } else {
                    5.0 + noise(i, 3.0)
                };
                rate(i as u64, level)
            })
            .collect();
        let (_, b) = find_bursts(&rates, None);
        assert_eq!(b.len(), 20, "{b:?}");
        for (k, span) in b.iter().enumerate() {
            assert_eq!((span.first, span.last), (k * 30, k * 30 + 9));
        }
        // The same run without its bursts, noise only (±30% around the level): none.
        let flat: Vec<IntervalRate> = (0..600)
            .map(|i| rate(i as u64, 100.0 + noise(i, 30.0)))
            .collect();
        assert!(find_bursts(&flat, None).1.is_empty());
    }

    #[test]
    fn rows_read_back_with_values_only_get_their_stall_fields_from_them() {
        use crate::model::{SlotScope, StallPart};
        let spec = |event: &str, part| SlotSpec {
            event: event.into(),
            scope: SlotScope::Cpu,
            role: SlotRole::Stall(part),
            bytes_per_count: None,
            counter_bits: 64,
        };
        let specs = [
            spec("stalled", StallPart::Stalled),
            spec("cycles", StallPart::Cycles),
            spec("cpu-clock", StallPart::Time),
        ];
        // As a recording stores a row: its values, no stall fields.
        let row = |stalled: f64, cycles: f64, ns: f64| TaskRow {
            pid: 7,
            values: [
                ("stalled".to_string(), stalled),
                ("cycles".to_string(), cycles),
                ("cpu-clock".to_string(), ns),
            ]
            .into(),
            ..TaskRow::default()
        };
        let iv = |r: TaskRow| IntervalResult {
            tasks: vec![r],
            ..IntervalResult::default()
        };
        let mut s = Summary::new(&specs);
        s.add(&iv(row(1e9, 4e9, 2e9)));
        s.add(&iv(row(3e9, 4e9, 2e9)));
        let r = &s.finish(GroupBy::Pid).tasks[0];
        assert_eq!((r.stall_cycles, r.cycles), (Some(4e9), Some(8e9)));
        assert_eq!(r.stall_share, Some(0.5));
        // Each interval's share times its time: 0.25 × 2 s + 0.75 × 2 s.
        assert!((r.stall_seconds.unwrap() - 2.0).abs() < 1e-12);
        // Without the pair in the slots, nothing is made up.
        let mut plain = Summary::new(&[]);
        plain.add(&iv(row(1e9, 4e9, 2e9)));
        assert_eq!(plain.finish(GroupBy::Pid).tasks[0].stall_share, None);
    }

    #[test]
    fn grouping_by_tgid_names_the_process_after_its_main_thread() {
        let row = |pid, tgid, comm: &str, bytes| TaskRow {
            pid,
            tgid,
            comm: comm.into(),
            cgroup: 7,
            read_bytes: bytes,
            share: bytes as f64 / 1000.0,
            ..TaskRow::default()
        };
        let rows = vec![
            row(11, 10, "worker", 500),
            row(10, 10, "server", 100),
            row(20, 20, "other", 300),
        ];
        let g = group_rows(rows.clone(), GroupBy::Tgid);
        assert_eq!(g.len(), 2);
        assert_eq!(
            (g[0].pid, g[0].tgid, g[0].comm.as_str()),
            (10, 10, "server")
        );
        assert_eq!(g[0].read_bytes, 600);
        assert!((g[0].share - 0.6).abs() < 1e-12);
        let c = group_rows(rows.clone(), GroupBy::Cgroup);
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].pid, c[0].tgid, c[0].cgroup), (0, 0, 7));
        assert_eq!(c[0].comm, "worker");
    }

    #[test]
    fn grouping_by_container_and_pod_keeps_the_shared_names_only() {
        let row = |pid, cgroup, path: &str, bytes| {
            let mut r = TaskRow {
                pid,
                tgid: pid,
                comm: format!("t{pid}"),
                cgroup,
                read_bytes: bytes,
                share: bytes as f64 / 1000.0,
                ..TaskRow::default()
            };
            r.set_cgroup_names(&crate::discovery::cgroup::names_of_path(path));
            r
        };
        let pod = "kubepods-pod0a1b2c3d_0000_4000_8000_00000000000a.slice";
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        let rows = vec![
            row(
                1,
                10,
                &format!("/kubepods.slice/{pod}/cri-containerd-{a}.scope"),
                100,
            ),
            row(
                2,
                11,
                &format!("/kubepods.slice/{pod}/cri-containerd-{a}.scope/sub"),
                50,
            ),
            row(
                3,
                12,
                &format!("/kubepods.slice/{pod}/cri-containerd-{b}.scope"),
                300,
            ),
            row(4, 13, "/system.slice/sshd.service", 20),
            row(5, 14, "/user.slice", 30),
        ];
        let c = group_rows(rows.clone(), GroupBy::Container);
        let ids: Vec<(Option<&str>, u64)> = c
            .iter()
            .map(|r| (r.container_id.as_deref(), r.read_bytes))
            .collect();
        assert_eq!(ids, [(Some(&*b), 300), (Some(&*a), 150), (None, 50)]);
        // Container a spans two cgroups: no single path; its pod is shared.
        assert_eq!(c[1].cgroup_path, None);
        assert_eq!(c[1].cgroup, 0);
        assert_eq!(
            c[1].pod_uid.as_deref(),
            Some("0a1b2c3d-0000-4000-8000-00000000000a")
        );
        let p = group_rows(rows, GroupBy::Pod);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].read_bytes, 450);
        assert_eq!(p[0].container_id, None);
        assert_eq!((p[1].pod_uid.as_deref(), p[1].read_bytes), (None, 50));
    }
}

//! Victims of bursts: per task (or group), the memory stall a burst added to the task's own
//! baseline, from the same summed rows the report derives for the run and for each burst.
//!
//! A task's stall share is its core cycles stalled on a memory (L3-miss) load ÷ its cycles. Its
//! baseline is that share outside every burst of the run (the run's sums less the bursts'). In
//! a burst:
//!
//! - added stall cycles = (share in the burst − baseline) × its cycles in the burst;
//! - added stall seconds = the same × the seconds one of its cycles took in the burst (its
//!   on-CPU time there ÷ its cycles there), that is (share in the burst − baseline) × its
//!   on-CPU seconds in the burst.
//!
//! Negative when the task stalled less than usual during the burst. A task that ran no cycle
//! outside the bursts has no baseline: its added stall is null, and it ranks after every task
//! that has one. Over the run, a task's added stall is the sum over the bursts it ran in.
use crate::model::GroupBy;
use crate::model::result::{TaskRow, stall_share};
use serde::Serialize;
use std::collections::HashMap;

/// A task's stall counts over a span (a burst, the bursts, the run, the rest of it).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stalls {
    /// Core cycles stalled on a memory load.
    pub stalled: f64,
    /// Core cycles run.
    pub cycles: f64,
    /// On-CPU seconds (null where the recording counts no on-CPU time beside the pair).
    pub on_cpu_s: Option<f64>,
    /// Stalled seconds as the attributor charged them (each interval's share × its on-CPU
    /// time, summed).
    pub stall_s: Option<f64>,
}

impl Stalls {
    /// A row's stall counts; None where it holds none (no stall pair recorded).
    pub fn of(row: &TaskRow, time_key: Option<&str>) -> Option<Stalls> {
        let cycles = row.cycles?;
        Some(Stalls {
            stalled: row.stall_cycles.unwrap_or(0.0),
            cycles,
            on_cpu_s: time_key.map(|k| row.values.get(k).copied().unwrap_or(0.0) / 1e9),
            stall_s: row.stall_seconds,
        })
    }

    pub fn share(&self) -> Option<f64> {
        stall_share(Some(self.stalled), Some(self.cycles))
    }

    fn add(&mut self, o: &Stalls) {
        let opt = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.stalled += o.stalled;
        self.cycles += o.cycles;
        self.on_cpu_s = opt(self.on_cpu_s, o.on_cpu_s);
        self.stall_s = opt(self.stall_s, o.stall_s);
    }

    /// This span less a part of it (never below zero: the parts were read from the same rows).
    fn less(&self, part: &Stalls) -> Stalls {
        let sub = |a: f64, b: f64| (a - b).max(0.0);
        Stalls {
            stalled: sub(self.stalled, part.stalled),
            cycles: sub(self.cycles, part.cycles),
            on_cpu_s: self.on_cpu_s.map(|a| sub(a, part.on_cpu_s.unwrap_or(0.0))),
            stall_s: self.stall_s.map(|a| sub(a, part.stall_s.unwrap_or(0.0))),
        }
    }

    /// The stall this span added over `baseline` (a share): (cycles, seconds).
    fn added(&self, baseline: Option<f64>) -> (Option<f64>, Option<f64>) {
        match (self.share(), baseline) {
            (Some(s), Some(b)) => (
                Some((s - b) * self.cycles),
                self.on_cpu_s.map(|t| (s - b) * t),
            ),
            _ => (None, None),
        }
    }
}

/// Who a victim row is: the report row's identity (a group's key fields, see
/// [`group_rows`](super::group_rows)).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Who {
    pub pid: u32,
    pub tgid: u32,
    pub comm: String,
    pub cgroup: u64,
    pub cgroup_path: Option<String>,
    pub container_id: Option<String>,
    pub pod_uid: Option<String>,
}

impl Who {
    fn of(r: &TaskRow) -> Who {
        Who {
            pid: r.pid,
            tgid: r.tgid,
            comm: r.comm.clone(),
            cgroup: r.cgroup,
            cgroup_path: r.cgroup_path.clone(),
            container_id: r.container_id.clone(),
            pod_uid: r.pod_uid.clone(),
        }
    }
}

impl Who {
    /// A task row of this identity (no counts): for the grouping's key and label.
    pub fn row(&self) -> TaskRow {
        TaskRow {
            pid: self.pid,
            tgid: self.tgid,
            comm: self.comm.clone(),
            cgroup: self.cgroup,
            cgroup_path: self.cgroup_path.clone(),
            container_id: self.container_id.clone(),
            pod_uid: self.pod_uid.clone(),
            ..TaskRow::default()
        }
    }
}

/// The stall share of the top victims interval by interval (a Perfetto counter track each),
/// summed from their rows of each interval: the members of a group together.
pub struct StallSeries {
    by: GroupBy,
    /// Per series: the group's key and its label (`chaser (pid 12)`).
    pub keys: Vec<String>,
    pub labels: Vec<String>,
    stall_keys: (String, String),
    time: Option<String>,
    /// Per interval: its span and each series' stall share (null where it ran no cycle).
    pub points: Vec<(u64, u64, Vec<Option<f64>>)>,
}

impl StallSeries {
    /// Series for the first `n` of `victims` (ranked); None where the slots hold no stall pair.
    pub fn new(
        specs: &[crate::model::SlotSpec],
        by: GroupBy,
        victims: &[RunVictim],
        n: usize,
    ) -> Option<StallSeries> {
        let (s, c) = crate::model::Victims::keys(specs)?;
        let time = crate::model::Victims::key(specs, crate::model::StallPart::Time);
        let top = victims.iter().filter(|v| v.stall_share_in_bursts.is_some());
        let rows: Vec<TaskRow> = top.take(n).map(|v| v.who.row()).collect();
        Some(StallSeries {
            by,
            keys: rows.iter().map(|r| by.key(r)).collect(),
            labels: rows.iter().map(|r| by.label(r)).collect(),
            stall_keys: (s.to_string(), c.to_string()),
            time: time.map(str::to_string),
            points: Vec::new(),
        })
    }

    /// The key hashes of the rows the series read (`Reader::keep_rows`).
    pub fn hashes(&self, victims: &[RunVictim]) -> std::collections::HashSet<u64> {
        victims
            .iter()
            .map(|v| v.who.row())
            .filter(|r| self.keys.contains(&self.by.key(r)))
            .map(|r| self.by.key_hash(crate::model::KeyParts::of(&r)))
            .collect()
    }

    /// One interval: each series' members' stalled cycles over their cycles.
    pub fn add(&mut self, iv: &crate::model::result::IntervalResult) {
        let mut sums = vec![(0.0, 0.0); self.keys.len()];
        let keys = Some((self.stall_keys.0.as_str(), self.stall_keys.1.as_str()));
        for r in &iv.tasks {
            let key = self.by.key(r);
            let Some(i) = self.keys.iter().position(|k| *k == key) else {
                continue;
            };
            let st = match r.cycles {
                Some(c) => (r.stall_cycles.unwrap_or(0.0), c),
                None => {
                    let f = crate::model::result::Stalls::of_values(
                        &r.values,
                        keys,
                        self.time.as_deref(),
                    );
                    (f.stall_cycles.unwrap_or(0.0), f.cycles.unwrap_or(0.0))
                }
            };
            sums[i].0 += st.0;
            sums[i].1 += st.1;
        }
        let shares = sums
            .into_iter()
            .map(|(s, c)| stall_share(Some(s), Some(c)))
            .collect();
        self.points.push((iv.t_start_ns, iv.t_end_ns, shares));
    }
}

/// One row of a span, reduced to its key, identity and stall counts.
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    pub key: String,
    pub who: Who,
    pub stalls: Stalls,
}

/// The members of these (grouped) rows that hold stall counts.
pub fn members(rows: &[TaskRow], by: GroupBy, time_key: Option<&str>) -> Vec<Member> {
    rows.iter()
        .filter_map(|r| {
            Some(Member {
                key: by.key(r),
                who: Who::of(r),
                stalls: Stalls::of(r, time_key)?,
            })
        })
        .collect()
}

/// A task's victimhood in one burst.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BurstVictim {
    #[serde(flatten)]
    pub who: Who,
    /// Its stall share in the burst, and outside every burst (its baseline; null where it ran
    /// no cycle outside them).
    pub stall_share: Option<f64>,
    pub baseline_stall_share: Option<f64>,
    /// Its cycles, on-CPU seconds and stalled seconds in the burst.
    pub cycles: f64,
    pub on_cpu_seconds: Option<f64>,
    pub stall_seconds: Option<f64>,
    /// (stall_share − baseline_stall_share) × cycles, and × on_cpu_seconds.
    pub added_stall_cycles: Option<f64>,
    pub added_stall_seconds: Option<f64>,
}

/// A task's victimhood over the run: in the bursts, outside them, and what the bursts added.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunVictim {
    #[serde(flatten)]
    pub who: Who,
    pub stall_share_in_bursts: Option<f64>,
    pub stall_share_outside: Option<f64>,
    pub stall_seconds_in_bursts: Option<f64>,
    pub stall_seconds_outside: Option<f64>,
    /// The sum of its [`BurstVictim`] added stall over the bursts (null without a baseline).
    pub added_stall_cycles: Option<f64>,
    pub added_stall_seconds: Option<f64>,
}

/// Most added stall first (seconds where counted, else cycles); tasks without a baseline last;
/// then by pid and name for a stable order.
fn rank_key(
    a: (Option<f64>, Option<f64>, &Who),
    b: (Option<f64>, Option<f64>, &Who),
) -> std::cmp::Ordering {
    let v = |x: (Option<f64>, Option<f64>, &Who)| x.1.or(x.0).unwrap_or(f64::NEG_INFINITY);
    v(b).total_cmp(&v(a))
        .then(a.2.pid.cmp(&b.2.pid))
        .then(a.2.comm.cmp(&b.2.comm))
        .then(a.2.cgroup.cmp(&b.2.cgroup))
}

pub fn rank_bursts(v: &mut [BurstVictim]) {
    v.sort_by(|a, b| {
        rank_key(
            (a.added_stall_cycles, a.added_stall_seconds, &a.who),
            (b.added_stall_cycles, b.added_stall_seconds, &b.who),
        )
    });
}

pub fn rank_run(v: &mut [RunVictim]) {
    v.sort_by(|a, b| {
        rank_key(
            (a.added_stall_cycles, a.added_stall_seconds, &a.who),
            (b.added_stall_cycles, b.added_stall_seconds, &b.who),
        )
    });
}

/// The victims of a run: `run` is every member's sums over the run, `bursts` each burst's
/// members (whole groups, keyed as `run`). Each list ranked, most added stall first.
pub fn victims(run: &[Member], bursts: &[Vec<Member>]) -> (Vec<RunVictim>, Vec<Vec<BurstVictim>>) {
    let mut acc = Victimhood::new(baselines(run, bursts.iter().flatten()));
    let per_burst = bursts.iter().map(|b| acc.burst(b)).collect();
    (acc.run(run), per_burst)
}

/// Each member's baseline, its stall share outside the bursts: its sums over the run (`run`)
/// less its sums in the bursts (`in_bursts`, every burst's members).
pub fn baselines<'a>(
    run: &[Member],
    in_bursts: impl Iterator<Item = &'a Member>,
) -> HashMap<String, Option<f64>> {
    let mut inside: HashMap<&str, Stalls> = HashMap::new();
    for m in in_bursts {
        inside.entry(&m.key).or_default().add(&m.stalls);
    }
    run.iter()
        .map(|m| {
            let i = inside.get(m.key.as_str()).copied().unwrap_or_default();
            (m.key.clone(), m.stalls.less(&i).share())
        })
        .collect()
}

/// Victims burst by burst, once the baselines are known (so no burst's rows need be kept):
/// each burst's ranked victims as it ends, and what the bursts added summed per member for
/// the run's.
pub struct Victimhood {
    baseline: HashMap<String, Option<f64>>,
    in_bursts: HashMap<String, Stalls>,
    added: HashMap<String, (Option<f64>, Option<f64>)>,
}

impl Victimhood {
    pub fn new(baseline: HashMap<String, Option<f64>>) -> Victimhood {
        Victimhood {
            baseline,
            in_bursts: HashMap::new(),
            added: HashMap::new(),
        }
    }

    /// One burst's members: its victims, ranked.
    pub fn burst(&mut self, members: &[Member]) -> Vec<BurstVictim> {
        let mut v: Vec<BurstVictim> = members
            .iter()
            .map(|m| {
                let base = self.baseline.get(m.key.as_str()).copied().flatten();
                let (cy, s) = m.stalls.added(base);
                let e = self.added.entry(m.key.clone()).or_default();
                *e = (sum(e.0, cy), sum(e.1, s));
                self.in_bursts
                    .entry(m.key.clone())
                    .or_default()
                    .add(&m.stalls);
                BurstVictim {
                    who: m.who.clone(),
                    stall_share: m.stalls.share(),
                    baseline_stall_share: base,
                    cycles: m.stalls.cycles,
                    on_cpu_seconds: m.stalls.on_cpu_s,
                    stall_seconds: m.stalls.stall_s,
                    added_stall_cycles: cy,
                    added_stall_seconds: s,
                }
            })
            .collect();
        rank_bursts(&mut v);
        v
    }

    /// The run's members, after every burst: their victimhood over the run, ranked.
    pub fn run(&self, run: &[Member]) -> Vec<RunVictim> {
        let mut over_run: Vec<RunVictim> = run
            .iter()
            .map(|m| {
                let inside = self
                    .in_bursts
                    .get(m.key.as_str())
                    .copied()
                    .unwrap_or_default();
                let outside = m.stalls.less(&inside);
                let (cy, s) = self.added.get(m.key.as_str()).copied().unwrap_or_default();
                RunVictim {
                    who: m.who.clone(),
                    stall_share_in_bursts: inside.share(),
                    stall_share_outside: outside.share(),
                    stall_seconds_in_bursts: m
                        .stalls
                        .stall_s
                        .map(|_| inside.stall_s.unwrap_or(0.0)),
                    stall_seconds_outside: outside.stall_s,
                    added_stall_cycles: cy,
                    added_stall_seconds: s,
                }
            })
            .collect();
        rank_run(&mut over_run);
        over_run
    }
}

/// Both present: their sum; else whichever is (a burst without a baseline adds nothing known).
fn sum(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    }
}

/// The most victimized rows of a report, from victims computed part by part (each part's
/// groups whole): the best `n` of the run and of each burst are kept.
pub struct VictimTop {
    n_run: usize,
    n_burst: usize,
    pub run: Vec<RunVictim>,
    pub bursts: Vec<Vec<BurstVictim>>,
}

impl VictimTop {
    /// Keeping `n_run` rows over the run and `n_burst` per each of `bursts` bursts.
    pub fn new(n_run: usize, n_burst: usize, bursts: usize) -> VictimTop {
        VictimTop {
            n_run,
            n_burst,
            run: Vec::new(),
            bursts: vec![Vec::new(); bursts],
        }
    }

    pub fn push(&mut self, run: Vec<RunVictim>, bursts: Vec<Vec<BurstVictim>>) {
        self.push_run(run);
        for (k, b) in bursts.into_iter().enumerate() {
            self.push_burst(k, b);
        }
    }

    /// Victims over the run, of one part.
    pub fn push_run(&mut self, run: Vec<RunVictim>) {
        self.run.extend(run);
        rank_run(&mut self.run);
        self.run.truncate(self.n_run);
    }

    /// Burst `k`'s victims, of one part.
    pub fn push_burst(&mut self, k: usize, victims: Vec<BurstVictim>) {
        if let Some(kept) = self.bursts.get_mut(k) {
            kept.extend(victims);
            rank_bursts(kept);
            kept.truncate(self.n_burst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pid: u32, stalled: f64, cycles: f64, on_cpu_ns: f64) -> TaskRow {
        let mut r = TaskRow {
            pid,
            tgid: pid,
            comm: format!("t{pid}"),
            values: [
                ("stalled".to_string(), stalled),
                ("cycles".to_string(), cycles),
                ("cpu-clock".to_string(), on_cpu_ns),
            ]
            .into(),
            ..TaskRow::default()
        };
        r.set_stalls(Some(("stalled", "cycles")), Some("cpu-clock"));
        r
    }

    fn m(rows: &[TaskRow]) -> Vec<Member> {
        members(rows, GroupBy::Pid, Some("cpu-clock"))
    }

    #[test]
    fn the_added_stall_is_the_share_over_the_baseline_times_the_burst_s_cycles_and_time() {
        // Task 1: 10% stalled over 8 s outside (8e9 cycles), 50% over 2 s in the burst.
        // Task 2: 20% everywhere. Task 3: ran only in the burst (no baseline).
        let run = [
            row(1, 0.1 * 8e9 + 0.5 * 2e9, 10e9, 10e9),
            row(2, 0.2 * 10e9, 10e9, 10e9),
            row(3, 0.3 * 2e9, 2e9, 2e9),
        ];
        let burst = [
            row(1, 0.5 * 2e9, 2e9, 2e9),
            row(2, 0.2 * 2e9, 2e9, 2e9),
            row(3, 0.3 * 2e9, 2e9, 2e9),
        ];
        let (over, per) = victims(&m(&run), &[m(&burst)]);
        let b = &per[0];
        assert_eq!(
            b.iter().map(|v| v.who.pid).collect::<Vec<_>>(),
            [1, 2, 3],
            "{b:?}"
        );
        let close = |a: Option<f64>, e: f64| (a.unwrap() - e).abs() < 1e-6 * e.abs().max(1.0);
        assert!(close(b[0].baseline_stall_share, 0.1));
        assert!(close(b[0].added_stall_cycles, 0.4 * 2e9));
        assert!(close(b[0].added_stall_seconds, 0.4 * 2.0));
        assert!(close(b[1].added_stall_seconds, 0.0));
        assert_eq!(b[2].baseline_stall_share, None);
        assert_eq!(b[2].added_stall_seconds, None);
        assert_eq!(over[0].who.pid, 1);
        assert!(close(over[0].stall_seconds_in_bursts, 1.0));
        assert!(close(over[0].stall_seconds_outside, 0.8));
        assert!(close(over[0].added_stall_seconds, 0.8));
        assert_eq!(over[2].added_stall_seconds, None);
    }

    #[test]
    fn without_on_cpu_time_cycles_rank_and_seconds_are_null() {
        let run = [row(1, 3e9, 10e9, 0.0), row(2, 1e9, 10e9, 0.0)];
        let burst = [row(1, 1e9, 2e9, 0.0), row(2, 0.1e9, 2e9, 0.0)];
        let mm = |rows: &[TaskRow]| members(rows, GroupBy::Pid, None);
        let (over, per) = victims(&mm(&run), &[mm(&burst)]);
        assert_eq!(per[0][0].who.pid, 1);
        assert_eq!(per[0][0].added_stall_seconds, None);
        // 0.5 in the burst against 2/8 outside.
        assert!((per[0][0].added_stall_cycles.unwrap() - 0.25 * 2e9).abs() < 1.0);
        assert_eq!(over[0].who.pid, 1);
        // Rows without the pair are no members.
        let mut plain = row(3, 0.0, 0.0, 0.0);
        plain.set_stalls(None, None);
        assert!(members(&[plain], GroupBy::Pid, None).is_empty());
    }

    #[test]
    fn the_top_keeps_the_most_victimized_of_every_part() {
        let run = |rows: &[TaskRow]| victims(&m(rows), &[m(rows)]);
        let mut top = VictimTop::new(1, 1, 1);
        // Each part: its rows over the run are its burst's (no baseline), then with baselines.
        let a = [row(1, 1e9, 10e9, 10e9)];
        let b_run = [row(2, 1e9 + 0.9e9, 11e9, 11e9)];
        let b_burst = [row(2, 0.9e9, 1e9, 1e9)];
        let (o, p) = run(&a);
        top.push(o, p);
        let (o, p) = victims(&m(&b_run), &[m(&b_burst)]);
        top.push(o, p);
        assert_eq!(top.bursts[0].len(), 1);
        assert_eq!(top.bursts[0][0].who.pid, 2);
        assert_eq!(top.run[0].who.pid, 2);
    }
}

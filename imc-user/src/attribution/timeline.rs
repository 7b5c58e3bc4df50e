//! A recording as series over time, for the Perfetto trace and the plot: per interval, the
//! package counters' rate by package and direction, and the rate of each of the run's top groups
//! (processes, cgroups, containers, … as the report groups them), the rest in one series.
//!
//! Amounts are bytes when the source has bytes, else the traffic counters' counts (a stand-in
//! such as page faults): the unit says which, and no count is ever called a byte.
use super::summary::{group_rows, traffic_amount};
use crate::model::GroupBy;
use crate::model::result::{IntervalResult, PackageRow, TaskRow};
use crate::model::{Direction, SlotSpec, Tier};
use std::collections::HashMap;

/// What a series' values are per second of (the model's one unit rule).
pub use crate::model::Unit;

/// One top group of the run.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    /// The grouping key (see [`GroupBy::key`]).
    pub key: String,
    /// What a person reads: `stream (pid 1234)`, a cgroup path, `container 3f2a…`.
    pub label: String,
    /// The process (or thread) id when grouping by tgid (pid): a Perfetto process track.
    pub pid: Option<u32>,
    pub comm: String,
    /// Its share of the run's traffic.
    pub share: f64,
}

/// One interval's rates.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Point {
    pub t_start_ns: u64,
    pub t_end_ns: u64,
    /// Per [`Timeline::package_tracks`] entry, per second.
    pub packages: Vec<f64>,
    /// Per [`Timeline::groups`] entry, per second.
    pub groups: Vec<f64>,
    /// Everything else (other tasks and unattributed traffic), per second.
    pub rest: f64,
}

/// A package counter series: a package and a direction (for stand-ins, all CPUs together), of
/// both memory tiers together or of one (`package 0 cxl read`) where the package has several.
#[derive(Clone, Debug, PartialEq)]
pub struct PackageTrack {
    pub package: Option<u32>,
    pub direction: Option<Direction>,
    pub tier: Option<Tier>,
    pub name: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    pub unit: Unit,
    pub by: GroupBy,
    pub package_tracks: Vec<PackageTrack>,
    pub groups: Vec<Group>,
    pub points: Vec<Point>,
    specs: Vec<SlotSpec>,
    index: HashMap<String, usize>,
}

impl Timeline {
    /// An empty timeline whose series are the first `top` groups of `total` (the run's report
    /// object, grouped `by`) with any traffic, and the package directions `total` has.
    pub fn new(specs: &[SlotSpec], total: &IntervalResult, by: GroupBy, top: usize) -> Timeline {
        let unit = Unit::of(specs);
        let package_tracks = package_tracks(&unit, total);
        let mut t = Timeline {
            unit,
            by,
            package_tracks,
            groups: Vec::new(),
            points: Vec::new(),
            specs: specs.to_vec(),
            index: HashMap::new(),
        };
        for r in &total.tasks {
            if t.groups.len() >= top {
                break;
            }
            if t.amount(r) <= 0.0 {
                continue;
            }
            let key = by.key(r);
            t.index.insert(key.clone(), t.groups.len());
            t.groups.push(Group {
                key,
                label: by.label(r),
                pid: match by {
                    GroupBy::Tgid if r.tgid > 0 => Some(r.tgid),
                    GroupBy::Pid if r.pid > 0 => Some(r.pid),
                    _ => None,
                },
                comm: r.comm.clone(),
                share: r.share,
            });
        }
        t
    }

    /// A task's traffic: bytes, or the traffic counters' counts for sources without bytes.
    fn amount(&self, r: &TaskRow) -> f64 {
        match self.unit {
            Unit::Bytes => r.bytes() as f64,
            Unit::Counts(ref keys) => keys.iter().filter_map(|k| r.values.get(k)).sum(),
        }
    }

    /// Adds one interval (in time order).
    pub fn add(&mut self, iv: &IntervalResult) {
        self.add_amount(iv, traffic_amount(iv, &self.specs));
    }

    /// [`add`](Self::add) for an interval that holds only some of its task rows (those of the
    /// top groups, as a report reads it): `all` is the whole interval's traffic amount.
    pub fn add_amount(&mut self, iv: &IntervalResult, all: f64) {
        let dt = iv.t_end_ns.saturating_sub(iv.t_start_ns);
        if dt == 0 {
            return;
        }
        let per_s = |v: f64| v * 1e9 / dt as f64;
        let packages = self
            .package_tracks
            .iter()
            .map(|tr| per_s(package_amount(iv, all, tr)))
            .collect();
        let mut groups = vec![0.0; self.groups.len()];
        // Group first, so a key's members (a process' threads) land in one series.
        for r in group_rows(iv.tasks.clone(), self.by) {
            if let Some(&i) = self.index.get(&self.by.key(&r)) {
                groups[i] += self.amount(&r);
            }
        }
        let rest = (all - groups.iter().sum::<f64>()).max(0.0);
        self.points.push(Point {
            t_start_ns: iv.t_start_ns,
            t_end_ns: iv.t_end_ns,
            packages,
            groups: groups.into_iter().map(per_s).collect(),
            rest: per_s(rest),
        });
    }

    /// The largest stacked value (groups plus rest) of any interval.
    pub fn peak(&self) -> f64 {
        self.points
            .iter()
            .map(|p| p.groups.iter().sum::<f64>() + p.rest)
            .fold(0.0, f64::max)
    }
}

fn package_tracks(unit: &Unit, total: &IntervalResult) -> Vec<PackageTrack> {
    match unit {
        Unit::Counts(events) => vec![PackageTrack {
            package: None,
            direction: None,
            tier: None,
            name: format!("{} (all CPUs)", events.join("+")),
        }],
        Unit::Bytes => {
            let mut v = Vec::new();
            for p in &total.packages {
                // The package's totals, then each tier's where it has several.
                let tiers = p.tiers.iter().map(|t| Some(t.tier));
                for tier in std::iter::once(None).chain(tiers) {
                    let series = match tier {
                        None => format!("package {}", p.id),
                        Some(t) => format!("package {} {}", p.id, t.as_str()),
                    };
                    for d in [Direction::Read, Direction::Write, Direction::Total] {
                        if package_bytes(p, tier, d) > 0 {
                            v.push(PackageTrack {
                                package: Some(p.id),
                                direction: Some(d),
                                tier,
                                name: format!("{series} {}", d.name()),
                            });
                        }
                    }
                }
            }
            v
        }
    }
}

/// A package's bytes in direction `d`: of both tiers, or of `tier` alone.
fn package_bytes(p: &PackageRow, tier: Option<Tier>, d: Direction) -> u64 {
    match tier {
        None => p.bytes_in(d),
        Some(tier) => p
            .tiers
            .iter()
            .filter(|t| t.tier == tier)
            .map(|t| t.bytes_in(d))
            .sum(),
    }
}

/// A package track's amount in `iv`: the package's bytes in that direction (of its tier, for a
/// tier's track), or for a source without bytes `all`, the whole interval's counts (`iv` may
/// hold only the top groups' rows).
fn package_amount(iv: &IntervalResult, all: f64, tr: &PackageTrack) -> f64 {
    let (Some(id), Some(d)) = (tr.package, tr.direction) else {
        return all;
    };
    iv.packages
        .iter()
        .filter(|p| p.id == id)
        .map(|p| package_bytes(p, tr.tier, d) as f64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{SlotRole, SlotScope};

    fn spec(event: &str, d: Direction, bpc: Option<f64>) -> SlotSpec {
        SlotSpec {
            event: event.into(),
            scope: SlotScope::Package,
            role: SlotRole::Traffic(d),
            bytes_per_count: bpc,
            counter_bits: 48,
        }
    }

    fn task(pid: u32, tgid: u32, comm: &str, read: u64) -> TaskRow {
        TaskRow {
            pid,
            tgid,
            comm: comm.into(),
            read_bytes: read,
            ..TaskRow::default()
        }
    }

    /// The timeline of `ivs` by process, its series the run's top process, as a report makes it.
    fn by_process(specs: &[SlotSpec], ivs: &[IntervalResult]) -> Timeline {
        let mut sum = crate::attribution::Summary::new(specs);
        for i in ivs {
            sum.add(i);
        }
        let total = sum.finish(GroupBy::Tgid);
        let mut t = Timeline::new(specs, &total, GroupBy::Tgid, 1);
        for i in ivs {
            t.add(i);
        }
        t
    }

    #[test]
    fn bytes_series_by_process_with_the_rest_and_packages() {
        let specs = [spec("r", Direction::Read, Some(64.0))];
        let iv = |t: u64, tasks: Vec<TaskRow>, pkg: u64| IntervalResult {
            t_start_ns: t * 500_000_000,
            t_end_ns: (t + 1) * 500_000_000,
            packages: vec![PackageRow {
                id: 0,
                read_bytes: pkg,
                ..PackageRow::default()
            }],
            tasks,
            ..IntervalResult::default()
        };
        let ivs = [
            iv(
                0,
                vec![
                    task(11, 10, "a", 100),
                    task(12, 10, "a2", 50),
                    task(20, 20, "b", 30),
                ],
                200,
            ),
            iv(1, vec![task(20, 20, "b", 400)], 500),
        ];
        let t = by_process(&specs, &ivs);
        assert_eq!(t.unit, Unit::Bytes);
        assert_eq!(t.groups.len(), 1);
        assert_eq!(t.groups[0].pid, Some(20));
        assert_eq!(t.groups[0].label, "b (pid 20)");
        assert_eq!(t.package_tracks.len(), 1);
        assert_eq!(t.package_tracks[0].name, "package 0 read");
        // Per second over half-second intervals.
        assert_eq!(t.points[0].packages, [400.0]);
        assert_eq!(t.points[0].groups, [60.0]);
        assert_eq!(t.points[0].rest, 340.0);
        assert_eq!(t.points[1].groups, [800.0]);
        assert_eq!(t.points[1].rest, 200.0);
        assert_eq!(t.peak(), 1000.0);
    }

    #[test]
    fn a_package_with_a_cxl_tier_has_each_tier_s_track_beside_its_totals() {
        use crate::model::TierBytes;
        let specs = [spec("r", Direction::Read, Some(64.0))];
        let tier = |tier, read_bytes, write_bytes| TierBytes {
            tier,
            read_bytes,
            write_bytes,
            ..TierBytes::default()
        };
        let iv = |t: u64, dram: (u64, u64), cxl: (u64, u64)| IntervalResult {
            t_start_ns: t * 500_000_000,
            t_end_ns: (t + 1) * 500_000_000,
            packages: vec![PackageRow {
                id: 0,
                read_bytes: dram.0 + cxl.0,
                write_bytes: dram.1 + cxl.1,
                tiers: vec![
                    tier(Tier::Dram, dram.0, dram.1),
                    tier(Tier::Cxl, cxl.0, cxl.1),
                ],
                ..PackageRow::default()
            }],
            ..IntervalResult::default()
        };
        // CXL reads only: no CXL write track, as no package track of a direction without bytes.
        let ivs = [iv(0, (100, 40), (30, 0)), iv(1, (200, 10), (70, 0))];
        let t = by_process(&specs, &ivs);
        let names: Vec<&str> = t.package_tracks.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "package 0 read",
                "package 0 write",
                "package 0 dram read",
                "package 0 dram write",
                "package 0 cxl read"
            ]
        );
        // Per second over half-second intervals: the totals are both tiers.
        assert_eq!(t.points[0].packages, [260.0, 80.0, 200.0, 80.0, 60.0]);
        assert_eq!(t.points[1].packages, [540.0, 20.0, 400.0, 20.0, 140.0]);
    }

    #[test]
    fn stand_ins_are_counts_not_bytes() {
        let specs = [spec("page-faults", Direction::Total, None)];
        let mut a = task(5, 5, "x", 0);
        a.values.insert("page-faults".into(), 30.0);
        a.share = 0.75;
        let iv = IntervalResult {
            t_start_ns: 0,
            t_end_ns: 1_000_000_000,
            tasks: vec![a],
            ..IntervalResult::default()
        };
        let mut sum = crate::attribution::Summary::new(&specs);
        sum.add(&iv);
        let mut t = Timeline::new(&specs, &sum.finish(GroupBy::Comm), GroupBy::Comm, 5);
        t.add(&iv);
        assert_eq!(t.unit.per_s(), "page-faults/s");
        assert_eq!(t.package_tracks[0].package, None);
        assert_eq!(t.points[0].groups, [30.0]);
        // 30 faults are 75% of the traffic: 40 in all, 10 not attributed to x.
        assert_eq!(t.points[0].packages, [40.0]);
        assert_eq!(t.points[0].rest, 10.0);
    }

    #[test]
    fn a_counts_package_track_holds_the_whole_interval_when_only_top_rows_are_read() {
        // A report reads an interval's rows of its top groups only, and passes the whole
        // interval's amount beside them: the package track is that amount, not the top rows'
        // (it lost every other process' faults, failing views.rs on a busy machine).
        let specs = [spec("page-faults", Direction::Total, None)];
        let mut top = task(5, 5, "x", 0);
        top.values.insert("page-faults".into(), 30.0);
        top.share = 0.3;
        let iv = IntervalResult {
            t_start_ns: 0,
            t_end_ns: 1_000_000_000,
            tasks: vec![top],
            ..IntervalResult::default()
        };
        let mut sum = crate::attribution::Summary::new(&specs);
        sum.add(&iv);
        let mut t = Timeline::new(&specs, &sum.finish(GroupBy::Comm), GroupBy::Comm, 1);
        t.add_amount(&iv, 100.0);
        assert_eq!(t.points[0].packages, [100.0]);
        assert_eq!(t.points[0].groups, [30.0]);
        assert_eq!(t.points[0].rest, 70.0);
    }
}

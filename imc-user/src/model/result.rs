//! The per-interval attribution object of `imc top --json` and the report object of
//! `imc report --json` (README, "Commands"). The field names and nesting are the contract; the
//! structs are shared by the attributor (which fills them), the recording file (which stores
//! them) and the report (which sums them), so all three agree by construction.
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One package's traffic in an interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PackageRow {
    pub id: u32,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Bytes of `Total`-direction counters (controllers that do not split read and write).
    /// Absent from JSON when zero, so read/write-only sources print exactly the contract.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub total_bytes: u64,
    /// Counts of each sampler slot in this package over the interval (by slot index, scaled,
    /// rounded): a channel's own figures, for `imc serve`. Not part of the JSON contract.
    #[serde(skip)]
    pub slot_counts: Vec<f64>,
    /// The part of `slot_counts` no task could take (idle CPUs, spans nobody ran in).
    #[serde(skip)]
    pub unattributed_counts: Vec<f64>,
    /// The part of `unattributed_counts` no core counter saw (device traffic, see
    /// [`Unattributed::device_bytes`]).
    #[serde(skip)]
    pub device_counts: Vec<f64>,
    /// Each memory channel's own counts over the interval, where the loop reads them (`imc
    /// serve`). Not part of the JSON contract.
    #[serde(skip)]
    pub channels: Vec<ChannelRow>,
    /// Loaded latency over the interval: the average time a read (write) waited in the memory
    /// controller's queues, in ns, from the counters the plan reads at each interval; null
    /// where the plan reads none (no queues, no room beside bandwidth) or nothing was queued.
    #[serde(default)]
    pub read_latency_ns: Option<f64>,
    #[serde(default)]
    pub write_latency_ns: Option<f64>,
    /// How busy the channels were (0–1); null: not measured yet.
    #[serde(default)]
    pub utilisation: Option<f64>,
    /// Each channel's (or CCX's) own latency (`imc serve`). Not part of the JSON contract.
    #[serde(skip)]
    pub latency_channels: Vec<ChannelLatency>,
    /// Each memory tier's part of the bytes above, DRAM then CXL, where the plan counts a CXL
    /// tier; absent otherwise (a package of one tier is its own totals).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<TierBytes>,
}

/// One memory tier's bytes of a package over an interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TierBytes {
    pub tier: crate::model::Tier,
    pub read_bytes: u64,
    pub write_bytes: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub total_bytes: u64,
}

/// One channel's loaded latency over an interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChannelLatency {
    /// The channel's label as `imc serve` names it (`uncore_imc_3`, `amd_l3@cpu8` for a CCX).
    pub channel: String,
    pub read_ns: Option<f64>,
    pub write_ns: Option<f64>,
}

/// One package counter's counts over an interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChannelRow {
    /// The channel's label (`uncore_imc_3`, `amd_df#2`).
    pub channel: String,
    /// The slot the counter is summed into (its direction and bytes per count).
    pub slot: usize,
    pub counts: f64,
}

/// What a cgroup path says about the task in it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupNames {
    /// The path relative to the cgroup2 root, starting with `/` (`/` is the root cgroup).
    pub path: String,
    /// The innermost systemd unit (`nginx.service`, `docker-<id>.scope`, `session-2.scope`),
    /// or the innermost slice when the task is in no service or scope.
    pub unit: Option<String>,
    /// Docker, containerd, CRI-O or Podman container id (hex).
    pub container_id: Option<String>,
    /// Kubernetes pod UID, with dashes (`1f2e…-…`).
    pub pod_uid: Option<String>,
}

/// One task (or group of tasks, in reports) and what was attributed to it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskRow {
    /// Thread id (or the group's representative, see `attribution::group`).
    pub pid: u32,
    pub tgid: u32,
    pub comm: String,
    /// cgroup v2 id.
    pub cgroup: u64,
    /// The cgroup's path under the cgroup2 root (`/system.slice/nginx.service`), and the
    /// container and Kubernetes pod it names; null when unknown (a cgroup gone before it was
    /// resolved, a recording made before paths were stored) or, in groups, when members differ.
    #[serde(default)]
    pub cgroup_path: Option<String>,
    #[serde(default)]
    pub container_id: Option<String>,
    #[serde(default)]
    pub pod_uid: Option<String>,
    pub read_bytes: u64,
    pub write_bytes: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub total_bytes: u64,
    /// Fraction of all measured traffic (attributed + unattributed) in the interval: by bytes
    /// when the source has bytes, else by the traffic counters' counts (stand-ins).
    pub share: f64,
    /// Attributed amount of every counter, by event string (counts, scaled for multiplexing).
    pub values: BTreeMap<String, f64>,
    /// Victims: the core cycles this task spent stalled on a memory load, the cycles it ran,
    /// and the first as a share of the second; null where the plan counts no stalls (a VM, a
    /// core without the event, a counter budget spent) or the task ran no counted cycle.
    #[serde(default)]
    pub stall_cycles: Option<f64>,
    #[serde(default)]
    pub cycles: Option<f64>,
    #[serde(default)]
    pub stall_share: Option<f64>,
    /// The seconds of its on-CPU time it spent stalled: `stall_share` × its on-CPU time (the
    /// plan's `cpu-clock` slot); null where either is not counted.
    #[serde(default)]
    pub stall_seconds: Option<f64>,
    /// Of `values`, how much the interval's split placed by time: a count read across the
    /// interval's start or end is divided between the two intervals in proportion to time, so
    /// up to this much of it may belong to the neighbouring interval (the larger part of each
    /// such count). In memory only (`imc validate` allows for it); never written.
    #[serde(skip)]
    pub placed_by_time: BTreeMap<String, f64>,
    /// Of `values`, what was read late: counts whose span began in an interval already
    /// closed (a CPU the host took away across its end reported after it was delivered), so
    /// any of it may belong to any interval from the span's start on. Per event: the count,
    /// and the earliest start of such a span (CLOCK_MONOTONIC ns). In memory only.
    #[serde(skip)]
    pub placed_late: BTreeMap<String, (f64, u64)>,
}

/// `stalled ÷ cycles`, where there are cycles to divide by (never more than 1: a counter read
/// a tick apart from its divisor can run ahead of it).
pub fn stall_share(stalled: Option<f64>, cycles: Option<f64>) -> Option<f64> {
    match (stalled, cycles) {
        (Some(s), Some(c)) if c > 0.0 && s.is_finite() => Some((s / c).clamp(0.0, 1.0)),
        _ => None,
    }
}

/// A row's stall fields, as [`TaskRow::set_stalls`] derives them from its `values`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stalls {
    pub stall_cycles: Option<f64>,
    pub cycles: Option<f64>,
    pub stall_share: Option<f64>,
    pub stall_seconds: Option<f64>,
}

impl Stalls {
    /// From counter values by the stall pair's keys and the on-CPU time's (ns); null where the
    /// plan has none (a row read back from a recording stores its values only).
    pub fn of_values(
        values: &BTreeMap<String, f64>,
        keys: Option<(&str, &str)>,
        time: Option<&str>,
    ) -> Stalls {
        let (stalled, cycles) = match keys {
            Some((s, c)) => (
                Some(values.get(s).copied().unwrap_or(0.0)),
                Some(values.get(c).copied().unwrap_or(0.0)),
            ),
            None => (None, None),
        };
        let share = stall_share(stalled, cycles);
        let on_cpu_s = time.map(|k| values.get(k).copied().unwrap_or(0.0) / 1e9);
        Stalls {
            stall_cycles: stalled,
            cycles,
            stall_share: share,
            stall_seconds: match (share, on_cpu_s) {
                (Some(share), Some(s)) => Some(share * s),
                (None, Some(_)) if keys.is_some() => Some(0.0),
                _ => None,
            },
        }
    }
}

impl TaskRow {
    /// Sets the cgroup path and the names that follow from it.
    pub fn set_cgroup_names(&mut self, names: &CgroupNames) {
        self.cgroup_path = Some(names.path.clone());
        self.container_id.clone_from(&names.container_id);
        self.pod_uid.clone_from(&names.pod_uid);
    }

    pub fn bytes(&self) -> u64 {
        traffic_bytes(self.read_bytes, self.write_bytes, self.total_bytes)
    }

    /// Sets the stall fields from this row's own `values` of the stall pair's keys
    /// (`model::Victims::keys`) and of its on-CPU time (ns, the `cpu-clock` slot's key); null
    /// where the plan has none.
    pub fn set_stalls(&mut self, keys: Option<(&str, &str)>, time: Option<&str>) {
        let s = Stalls::of_values(&self.values, keys, time);
        self.stall_cycles = s.stall_cycles;
        self.cycles = s.cycles;
        self.stall_share = s.stall_share;
        self.stall_seconds = s.stall_seconds;
    }

    /// Adds another row's stall fields to this one's (rows merged into a group, a burst, a
    /// report's total): the counts add, the share is of the sums.
    pub fn add_stalls(&mut self, other: &TaskRow) {
        self.add_stall_fields(&Stalls {
            stall_cycles: other.stall_cycles,
            cycles: other.cycles,
            stall_share: other.stall_share,
            stall_seconds: other.stall_seconds,
        });
    }

    /// [`add_stalls`](Self::add_stalls) of another row's stall fields.
    pub fn add_stall_fields(&mut self, other: &Stalls) {
        let add = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        self.stall_cycles = add(self.stall_cycles, other.stall_cycles);
        self.cycles = add(self.cycles, other.cycles);
        self.stall_share = stall_share(self.stall_cycles, self.cycles);
        self.stall_seconds = add(self.stall_seconds, other.stall_seconds);
    }
}

/// Why traffic was left unattributed: `device_bytes` + `other_bytes` = `unattributed_bytes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unattributed {
    /// Traffic no core counter saw, so no task's: controller bytes beyond what every weight
    /// accounts for (each weight's bytes per count over its measured fidelity) and spans in
    /// which no CPU of the package ran. Device (DMA) traffic, or what the weights do not see.
    pub device_bytes: u64,
    /// The rest: the idle task's share of the weights, readings with no time to spread over.
    pub other_bytes: u64,
}

/// One interval of `imc top --json`, and the body of `imc report --json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IntervalResult {
    pub t_start_ns: u64,
    pub t_end_ns: u64,
    pub source: String,
    pub packages: Vec<PackageRow>,
    /// Sorted by bytes (then traffic counts), largest first.
    pub tasks: Vec<TaskRow>,
    /// Bytes no task could take: traffic while every CPU of a package was idle (DMA, the
    /// controller's own refresh traffic), the idle task's weight share, spans nobody ran in.
    pub unattributed_bytes: u64,
    /// `unattributed_bytes` split by why no task took it (absent in recordings made before it
    /// was kept: all zero).
    #[serde(default)]
    pub unattributed: Unattributed,
    pub lost_samples: u64,
    /// How package traffic was divided among the tasks (absent in recordings' stored rows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weighting: Option<crate::model::Weighting>,
    /// Spans of package traffic divided by on-CPU time because their weight counters did not
    /// run (multiplexed out) or could not be read (absent when none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub weight_fallbacks: u64,
}

impl PackageRow {
    /// Read + write + total bytes (saturating).
    pub fn bytes(&self) -> u64 {
        traffic_bytes(self.read_bytes, self.write_bytes, self.total_bytes)
    }

    /// Its bytes in direction `d` (`Total`: the undivided bytes).
    pub fn bytes_in(&self, d: crate::model::Direction) -> u64 {
        by_direction(d, self.read_bytes, self.write_bytes, self.total_bytes)
    }
}

impl TierBytes {
    /// Its bytes in direction `d` (`Total`: the undivided bytes).
    pub fn bytes_in(&self, d: crate::model::Direction) -> u64 {
        by_direction(d, self.read_bytes, self.write_bytes, self.total_bytes)
    }
}

fn by_direction(d: crate::model::Direction, read: u64, write: u64, total: u64) -> u64 {
    use crate::model::Direction;
    match d {
        Direction::Read => read,
        Direction::Write => write,
        Direction::Total => total,
    }
}

/// A row's bytes: its read, write and total (undivided) bytes together, saturating.
fn traffic_bytes(read: u64, write: u64, total: u64) -> u64 {
    read.saturating_add(write).saturating_add(total)
}

/// Read + write + total bytes of every package (saturating): the one sum of package traffic.
pub fn package_bytes(packages: &[PackageRow]) -> u64 {
    packages
        .iter()
        .fold(0u64, |acc, p| acc.saturating_add(p.bytes()))
}

/// What a task's `share` is a fraction of: the packages' bytes where the source measures bytes,
/// else the traffic counters' counts (a stand-in source). Nothing to share: every share is 0.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ShareBasis {
    Bytes(u64),
    Counts(f64),
}

impl ShareBasis {
    /// The share of a task with these bytes and these traffic counts.
    pub fn share(self, bytes: u64, traffic_counts: f64) -> f64 {
        match self {
            ShareBasis::Bytes(total) if total > 0 => bytes as f64 / total as f64,
            ShareBasis::Counts(total) if total > 0.0 => traffic_counts / total,
            _ => 0.0,
        }
    }
}

impl IntervalResult {
    /// Read + write + total bytes of every package.
    pub fn package_bytes(&self) -> u64 {
        package_bytes(&self.packages)
    }

    /// Each package's utilisation over the interval: its bytes per second over its theoretical
    /// peak (`peaks`: package id, bytes/s), where the peak is known; null elsewhere.
    pub fn set_utilisation(&mut self, peaks: &[(u32, f64)]) {
        let seconds = self.t_end_ns.saturating_sub(self.t_start_ns) as f64 / 1e9;
        for p in &mut self.packages {
            p.utilisation = peaks
                .iter()
                .find(|(id, peak)| *id == p.id && *peak > 0.0)
                .filter(|_| seconds > 0.0)
                .map(|(_, peak)| p.bytes() as f64 / seconds / peak);
        }
    }

    /// Package bandwidth in bytes per second over the interval (0 for an empty interval).
    pub fn bytes_per_s(&self) -> f64 {
        let dt = self.t_end_ns.saturating_sub(self.t_start_ns);
        if dt == 0 {
            0.0
        } else {
            self.package_bytes() as f64 * 1e9 / dt as f64
        }
    }
}

/// One burst of `imc report --json`: adjacent intervals above the threshold, merged.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BurstRow {
    pub t_start_ns: u64,
    pub t_end_ns: u64,
    pub bytes_per_s: f64,
    /// The burst's top tasks, grouped like the report, with their share of the burst.
    pub tasks: Vec<TaskRow>,
}

/// How much the tick-only answer differs from the precise (context-switch) answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PrecisionRow {
    /// Half the L1 distance between the two share vectors (0: identical, 1: disjoint).
    pub share_distance: f64,
    /// The largest difference of one task's share, and whose it is.
    pub max_share_diff: f64,
    pub max_diff_pid: u32,
    /// Ticks and switch records the comparison ran over.
    pub ticks: u64,
    pub switches: u64,
}

/// `imc report --json`: the interval object over the whole recording plus the bursts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReportResult {
    #[serde(flatten)]
    pub total: IntervalResult,
    pub bursts: Vec<BurstRow>,
    /// Present when the recording holds context-switch records (a `--precise` run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precise_vs_tick: Option<PrecisionRow>,
    /// The rows past the ones `tasks` lists (a report keeps the busiest exactly, the rest
    /// summed here); absent when `tasks` lists every row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub others: Option<OthersRow>,
}

/// The rows a report did not list, summed: how many, their bytes, share and counter values.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OthersRow {
    pub rows: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub total_bytes: u64,
    pub share: f64,
    pub values: BTreeMap<String, f64>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utilisation_is_bytes_per_second_over_the_peak_where_it_is_known() {
        let mut r = IntervalResult {
            t_start_ns: 1_000_000_000,
            t_end_ns: 1_500_000_000,
            packages: vec![
                PackageRow {
                    id: 0,
                    read_bytes: 3_000_000_000,
                    write_bytes: 1_000_000_000,
                    ..PackageRow::default()
                },
                PackageRow {
                    id: 1,
                    read_bytes: 5,
                    ..PackageRow::default()
                },
            ],
            ..IntervalResult::default()
        };
        // 4 GB in half a second is 8 GB/s: a quarter of package 0's 32 GB/s peak; package 1's
        // peak is unknown.
        r.set_utilisation(&[(0, 32e9)]);
        assert_eq!(r.packages[0].utilisation, Some(0.25));
        assert_eq!(r.packages[1].utilisation, None);
        // No time, no rate.
        r.t_end_ns = r.t_start_ns;
        r.set_utilisation(&[(0, 32e9), (1, 1e9)]);
        assert!(r.packages.iter().all(|p| p.utilisation.is_none()));
    }
}

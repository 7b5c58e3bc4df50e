//! Traffic by call stack: each process's attributed traffic, spread over the stacks its
//! charged slices (or sampled overflows) were taken in, by the weight each stack carried.
//!
//! The rule, written once here for every output: a stack's value in a direction is its
//! process's attributed traffic in that direction over the span × the stack's share of the
//! process's weight events of that direction (its read weights for reads, write weights for
//! writes, an undirected weight or a stand-in's own count for both); where the process's
//! stacks carried no such event, their on-CPU time is the weight. A stand-in's per-CPU count
//! is its own traffic, so there the spread gives each stack exactly the events it counted.
//! A stack charged in two cgroups (a thread moved, threads of one process in two) is two
//! samples, each labelled with the cgroup its slices ran in.
use crate::model::result::IntervalResult;
use crate::model::stacks::{
    Frame, LOST_STACK_FRAME, SampleType, Stack, StackBatch, StackProfile, StackSample,
    TRUNCATED_FRAME, TimedSample, UNRESOLVED_FRAME,
};
use crate::model::{Direction, SlotRole, SlotScope, SlotSpec};
use std::collections::HashMap;
use std::sync::Arc;

/// Which sample type a weight slot weighs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Weighs {
    One(usize),
    All,
}

/// The sums a stack profile is made of, fed interval by interval and batch by batch.
pub struct StackTotals {
    types: Vec<SampleType>,
    /// Per record slot: what it weighs, or None (not a weight).
    weighs: Vec<Option<Weighs>>,
    /// How a task row's amount of each type is read.
    amounts: Amounts,
    /// Per process: its attributed amount per type, its name and its cgroup.
    processes: HashMap<u32, Process>,
    /// Each cgroup id's path, as the task rows name it.
    cgroup_paths: HashMap<u64, Arc<str>>,
    /// Every distinct frame, numbered in the order first seen: a stack is its frames'
    /// numbers, so memory follows the distinct frames and stacks, not frames × stacks.
    frames: HashMap<Frame, u32>,
    /// Per stack: its number, in the order first seen.
    stacks: HashMap<StackOf, u32>,
    /// Per stack number: its weight per type and on-CPU ns.
    sums: Vec<Sums>,
    dropped: u64,
    truncated: u64,
    /// Each drain's charges, where their times are kept (see [`StackTotals::keep_times`]).
    times: Option<Times>,
}

/// A stack as its samples tell it apart: the process, the cgroup its slices ran in (None where
/// charges carry none), and its frames' numbers, leaf first.
type StackOf = (u32, Option<u64>, Box<[u32]>);

/// A process as its samples name it: what it was attributed per sample type, and its main
/// thread's name and cgroup v2 path as last seen (a thread's until the main thread is seen), each
/// shared by the process's samples (the path only by those whose charges carry no cgroup).
struct Process {
    amount: Vec<f64>,
    comm: Arc<str>,
    cgroup: Option<Arc<str>>,
    named_by_main: bool,
}

/// The drains' charges, kept to place a profile's samples in time.
#[derive(Default)]
struct Times {
    /// Each drain's time (CLOCK_MONOTONIC), in drain order.
    drains: Vec<u64>,
    charges: Vec<Charged>,
}

/// Sample types a profile has at most (read, write, total).
const MAX_TYPES: usize = 3;

/// A stack's weight per sample type and its on-CPU ns.
#[derive(Clone, Copy, Default)]
struct Sums {
    weight: [f64; MAX_TYPES],
    on_ns: f64,
}

/// What one stack (by number) was charged in one drain (by number): its weight events of
/// every type together, and its on-CPU ns. Single precision is enough for a drain's part of a
/// stack's whole (its relative error is 6e-8), and a million charges take 16 MB; aligned as a
/// placed sample is, so placing reuses their buffer.
#[repr(C, align(8))]
struct Charged {
    drain: u32,
    stack: u32,
    weight: f32,
    on_ns: f32,
}

// Placing reuses the charges' buffer only where the two are laid out alike.
const _: () = assert!(
    size_of::<Charged>() == size_of::<TimedSample>()
        && align_of::<Charged>() == align_of::<TimedSample>()
);

/// How a task row's traffic of each sample type is read.
enum Amounts {
    /// Read bytes, write bytes (and total bytes where a slot counts undirected bytes).
    Bytes { total: bool },
    /// The stand-in's counts, by event name.
    Counts(Vec<String>),
}

impl StackTotals {
    pub fn new(specs: &[SlotSpec]) -> StackTotals {
        let bytes = crate::model::measures_bytes(specs);
        let traffic_total = specs
            .iter()
            .any(|s| s.counts_bytes() && s.role == SlotRole::Traffic(Direction::Total));
        let (types, amounts) = if bytes {
            let mut t = vec![sample("read", "bytes"), sample("write", "bytes")];
            if traffic_total {
                t.push(sample("total", "bytes"));
            }
            (
                t,
                Amounts::Bytes {
                    total: traffic_total,
                },
            )
        } else {
            let events: Vec<String> = specs
                .iter()
                .filter(|s| matches!(s.role, SlotRole::Traffic(_)))
                .map(|s| s.event.clone())
                .collect();
            let name = events.first().cloned().unwrap_or_else(|| "traffic".into());
            (vec![sample(&name, "count")], Amounts::Counts(events))
        };
        let weighs = specs.iter().map(|s| weighs(s, &types, bytes)).collect();
        StackTotals {
            types,
            weighs,
            amounts,
            processes: HashMap::new(),
            cgroup_paths: HashMap::new(),
            frames: HashMap::new(),
            stacks: HashMap::new(),
            sums: Vec::new(),
            dropped: 0,
            truncated: 0,
            times: None,
        }
    }

    /// Keeps each drain's charges, so that [`StackTotals::timed_profile`] can place the
    /// profile's samples in time (memory: one entry per stack per drain).
    pub fn keep_times(mut self) -> StackTotals {
        self.times = Some(Times::default());
        self
    }

    /// Adds one interval's task rows to their processes' amounts.
    pub fn add_interval(&mut self, iv: &IntervalResult) {
        let n = self.types.len();
        for row in &iv.tasks {
            if let Some(path) = &row.cgroup_path
                && self.cgroup_paths.get(&row.cgroup).map(|p| &**p) != Some(path.as_str())
            {
                self.cgroup_paths.insert(row.cgroup, path.as_str().into());
            }
            let e = self.processes.entry(row.tgid).or_insert_with(|| Process {
                amount: vec![0.0; n],
                comm: row.comm.as_str().into(),
                cgroup: None,
                named_by_main: false,
            });
            // The main thread's name and cgroup, as last seen: a command imc started is named
            // by its own program once it has exec'ed, not by the imc it was forked from, and a
            // process moved into a container is shown in it. Each is made anew only when it
            // changed; a cgroup not known in this row leaves the one known before.
            if row.pid == row.tgid || !e.named_by_main {
                if *e.comm != *row.comm {
                    e.comm = row.comm.as_str().into();
                }
                if let Some(path) = &row.cgroup_path
                    && e.cgroup.as_deref() != Some(path.as_str())
                {
                    e.cgroup = Some(path.as_str().into());
                }
                e.named_by_main = row.pid == row.tgid;
            }
            let amount = &mut e.amount;
            match &self.amounts {
                Amounts::Bytes { total } => {
                    amount[0] += row.read_bytes as f64;
                    amount[1] += row.write_bytes as f64;
                    if *total {
                        amount[2] += row.total_bytes as f64;
                    }
                }
                Amounts::Counts(events) => {
                    amount[0] += events
                        .iter()
                        .filter_map(|ev| row.values.get(ev))
                        .sum::<f64>();
                }
            }
        }
    }

    /// Adds one drain's stack charges.
    pub fn add_batch(&mut self, b: &StackBatch) {
        self.dropped += b.dropped;
        let drain = self.times.as_mut().and_then(|t| {
            (!b.charges.is_empty()).then(|| {
                t.drains.push(b.t_ns);
                (t.drains.len() - 1) as u32
            })
        });
        for c in &b.charges {
            let stack = self.number(c.tgid, c.cgroup, &c.frames);
            let e = &mut self.sums[stack as usize];
            let before: f64 = e.weight.iter().sum();
            for (s, &v) in c.slots.iter().enumerate() {
                match self.weighs.get(s).copied().flatten() {
                    Some(Weighs::One(t)) => e.weight[t] += v as f64,
                    Some(Weighs::All) => e.weight.iter_mut().for_each(|w| *w += v as f64),
                    None => {}
                }
            }
            e.on_ns += c.on_ns as f64;
            let weight = e.weight.iter().sum::<f64>() - before;
            if let (Some(times), Some(drain)) = (self.times.as_mut(), drain) {
                times.charges.push(Charged {
                    drain,
                    stack,
                    weight: weight as f32,
                    on_ns: c.on_ns as f32,
                });
            }
        }
    }

    /// The number of process `tgid`'s stack of `frames` in `cgroup`, given on first sight.
    fn number(&mut self, tgid: u32, cgroup: Option<u64>, frames: &[Frame]) -> u32 {
        let ids: Box<[u32]> = frames
            .iter()
            .map(|f| match self.frames.get(f) {
                Some(&id) => id,
                None => {
                    let id = self.frames.len() as u32;
                    self.frames.insert(f.clone(), id);
                    id
                }
            })
            .collect();
        let next = self.sums.len() as u32;
        let n = *self.stacks.entry((tgid, cgroup, ids)).or_insert(next);
        if n == next {
            self.sums.push(Sums::default());
        }
        n
    }

    /// The profile, and each of its samples placed at the drains that charged it, in drain
    /// order: a sample's share at a drain is the weight its stack carried there over all it
    /// carried (its on-CPU time, where it carried no weight). Nothing is placed unless
    /// [`StackTotals::keep_times`] was asked.
    pub fn timed_profile(
        mut self,
        start_realtime_ns: u64,
        duration_ns: u64,
    ) -> (StackProfile, Vec<TimedSample>) {
        let times = self.times.take();
        let sums = std::mem::take(&mut self.sums);
        let (p, sample_of) = self.build(&sums, start_realtime_ns, duration_ns);
        let Some(times) = times else {
            return (p, Vec::new());
        };
        // The charges are consumed as they are placed (their buffer is reused, not held beside).
        let Times { drains, charges } = times;
        let placed = charges.into_iter().filter_map(|c| {
            let sample = sample_of[c.stack as usize]?;
            let all = sums[c.stack as usize];
            let share = match (all.weight.iter().sum::<f64>(), all.on_ns) {
                (w, _) if w > 0.0 => f64::from(c.weight) / w,
                (_, on) if on > 0.0 => f64::from(c.on_ns) / on,
                _ => return None,
            };
            (share > 0.0).then_some(TimedSample {
                t_ns: drains[c.drain as usize],
                sample,
                share: share as f32,
            })
        });
        let placed = placed.collect();
        (p, placed)
    }

    /// The profile of everything added: each process's traffic spread over its stacks.
    pub fn profile(self, start_realtime_ns: u64, duration_ns: u64) -> StackProfile {
        self.timed_profile(start_realtime_ns, duration_ns).0
    }

    /// The profile (samples in the order their stacks were first seen), and which sample each
    /// stack number became. The stacks' frame numbers move into the profile, renumbered to the
    /// frames the samples use, in the order first used.
    fn build(
        self,
        sums: &[Sums],
        start_realtime_ns: u64,
        duration_ns: u64,
    ) -> (StackProfile, Vec<Option<u32>>) {
        let n = self.types.len();
        // Per process: the weight per type of all its stacks, and their time.
        let mut of_process: HashMap<u32, Sums> = HashMap::new();
        for ((tgid, ..), &k) in &self.stacks {
            let (s, all) = (sums[k as usize], of_process.entry(*tgid).or_default());
            (0..n).for_each(|i| all.weight[i] += s.weight[i]);
            all.on_ns += s.on_ns;
        }
        let mut by_number: Vec<Option<StackOf>> = vec![None; sums.len()];
        for (key, k) in self.stacks {
            by_number[k as usize] = Some(key);
        }
        let mut frames: Vec<Option<Frame>> = vec![None; self.frames.len()];
        for (f, id) in self.frames {
            frames[id as usize] = Some(f);
        }
        let mut p = StackProfile {
            sample_types: self.types,
            start_realtime_ns,
            duration_ns,
            lost_stacks: self.dropped,
            truncated_stacks: self.truncated,
            ..Default::default()
        };
        // At most one stack and one sample per stack number: made at their size, never grown
        // (a doubling holds both buffers at once, on a million stacks tens of MB).
        p.stacks.reserve_exact(by_number.len());
        p.samples.reserve_exact(by_number.len());
        let mut renumbered: Vec<Option<u32>> = vec![None; frames.len()];
        let mut sample_of = vec![None; sums.len()];
        let mut counted: std::collections::HashSet<(u32, Box<[u32]>)> = Default::default();
        for (k, key) in by_number.into_iter().enumerate() {
            let Some((tgid, cgroup, mut ids)) = key else {
                continue;
            };
            let Some(process) = self.processes.get(&tgid) else {
                continue;
            };
            let s = sums[k];
            let all = of_process[&tgid];
            let values = spread(
                &process.amount,
                (&s.weight[..n], s.on_ns),
                (&all.weight[..n], all.on_ns),
            );
            if values.iter().all(|&v| v == 0) {
                continue;
            }
            for id in ids.iter_mut() {
                *id = *renumbered[*id as usize].get_or_insert_with(|| {
                    p.frames.push(
                        frames[*id as usize]
                            .take()
                            .unwrap_or_else(|| Frame::marker(UNRESOLVED_FRAME)),
                    );
                    p.frames.len() as u32 - 1
                });
            }
            let marked = |m: &str| {
                ids.iter()
                    .any(|&i| p.frames[i as usize].function.as_deref() == Some(m))
            };
            let (lost, cut) = (marked(LOST_STACK_FRAME), marked(TRUNCATED_FRAME));
            // A stack is counted once, whichever cgroups it was charged in.
            if (lost || cut) && counted.insert((tgid, ids.clone())) {
                p.lost_stacks += u64::from(lost);
                p.truncated_stacks += u64::from(cut);
            }
            sample_of[k] = Some(p.samples.len() as u32);
            p.stacks.push(Stack {
                frames: ids.into_vec(),
            });
            p.samples.push(StackSample {
                tgid,
                comm: process.comm.clone(),
                cgroup: match cgroup {
                    Some(id) => self.cgroup_paths.get(&id).cloned(),
                    None => process.cgroup.clone(),
                },
                stack: p.stacks.len() as u32 - 1,
                values,
            });
        }
        (p, sample_of)
    }
}

/// A stack's values: per type, its process's `amount` × the stack's share of the process's
/// weight (`(weights, on-CPU ns)` of the stack and of all the process's stacks), or of its
/// on-CPU time where the process carried no weight of that type.
fn spread(
    amount: &[f64],
    stack: (&[f64], f64),
    process: (&[f64], f64),
) -> crate::model::stacks::SampleValues {
    let share = |i: usize| match (process.0[i] > 0.0, process.1 > 0.0) {
        (true, _) => stack.0[i] / process.0[i],
        (false, true) => stack.1 / process.1,
        (false, false) => 0.0,
    };
    (0..amount.len())
        .map(|i| (amount[i] * share(i)).round() as u64)
        .collect()
}

fn sample(name: &str, unit: &str) -> SampleType {
    SampleType {
        name: name.to_string(),
        unit: unit.to_string(),
    }
}

/// What slot `s` weighs among `types`: a directed weight its direction's type, an undirected
/// one (or, without bytes, a per-CPU traffic count) every type.
fn weighs(s: &SlotSpec, types: &[SampleType], bytes: bool) -> Option<Weighs> {
    if s.scope != SlotScope::Cpu {
        return None;
    }
    let dir = match s.role {
        SlotRole::Weight(d) | SlotRole::RemoteWeight(d) => d,
        SlotRole::Traffic(d) if !bytes || s.bytes_per_count.is_some() => Some(d),
        _ => return None,
    };
    match dir {
        Some(d @ (Direction::Read | Direction::Write)) if bytes => types
            .iter()
            .position(|t| t.name == d.name())
            .map(Weighs::One),
        _ => Some(Weighs::All),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::result::TaskRow;
    use crate::model::stacks::{FrameKind, StackCharge};
    use std::sync::Arc;

    fn spec(event: &str, role: SlotRole) -> SlotSpec {
        SlotSpec {
            event: event.into(),
            scope: SlotScope::Cpu,
            role,
            bytes_per_count: None,
            counter_bits: 64,
        }
    }

    fn frames(name: &str) -> Arc<[Frame]> {
        vec![Frame {
            kind: FrameKind::User,
            function: Some(name.into()),
            module: None,
            offset: 0,
            build_id: None,
            file: None,
            line: None,
        }]
        .into()
    }

    /// A charge that carries no cgroup, as in a recording made before stacks carried theirs.
    fn charge(tgid: u32, f: &Arc<[Frame]>, weight: u64, on_ns: u64) -> StackCharge {
        StackCharge {
            tgid,
            cgroup: None,
            frames: f.clone(),
            on_ns,
            slices: 1,
            slots: vec![weight],
        }
    }

    fn interval(tgid: u32, faults: f64) -> IntervalResult {
        let mut row = TaskRow {
            pid: tgid,
            tgid,
            comm: "two".into(),
            ..Default::default()
        };
        row.values.insert("page-faults".into(), faults);
        IntervalResult {
            tasks: vec![row],
            ..Default::default()
        }
    }

    #[test]
    fn a_process_traffic_is_spread_over_its_stacks_by_their_weight() {
        let specs = [spec("page-faults", SlotRole::Traffic(Direction::Total))];
        let mut t = StackTotals::new(&specs);
        let (a, b) = (frames("hot_three"), frames("hot_one"));
        t.add_interval(&interval(7, 400.0));
        t.add_batch(&StackBatch {
            t_ns: 1,
            charges: vec![charge(7, &a, 30, 10), charge(7, &b, 10, 10)],
            dropped: 0,
        });
        t.add_batch(&StackBatch {
            t_ns: 2,
            charges: vec![charge(7, &a, 270, 10), charge(7, &b, 90, 10)],
            dropped: 2,
        });
        let p = t.profile(0, 1);
        assert_eq!(p.sample_types[0].name, "page-faults");
        let value = |name: &str| {
            p.samples
                .iter()
                .find(|s| p.frames[p.stacks[s.stack as usize].frames[0] as usize].label() == name)
                .map(|s| s.values[0])
        };
        // 400 faults, weights 300 : 100.
        assert_eq!(value("hot_three"), Some(300));
        assert_eq!(value("hot_one"), Some(100));
        assert_eq!(p.lost_stacks, 2);
    }

    #[test]
    fn a_stack_charged_in_two_cgroups_is_two_samples_each_labelled_with_its_own() {
        let specs = [spec("page-faults", SlotRole::Traffic(Direction::Total))];
        let mut t = StackTotals::new(&specs);
        // One process, its threads in two cgroups; the main thread's is seen last.
        let mut iv = interval(7, 300.0);
        let mut worker = iv.tasks[0].clone();
        (worker.pid, worker.cgroup) = (8, 21);
        worker.cgroup_path = Some("/batch.slice".into());
        iv.tasks[0].cgroup = 20;
        iv.tasks[0].cgroup_path = Some("/web.slice".into());
        iv.tasks.insert(0, worker);
        t.add_interval(&iv);
        let hot = frames("hot");
        let in_cgroup = |cgroup: u64, weight: u64| StackCharge {
            cgroup: Some(cgroup),
            ..charge(7, &hot, weight, 10)
        };
        t.add_batch(&StackBatch {
            t_ns: 1,
            // A cgroup no task row named (gone before its rows were named) is not made up.
            charges: vec![in_cgroup(20, 2), in_cgroup(21, 1), in_cgroup(99, 1)],
            dropped: 0,
        });
        let p = t.profile(0, 1);
        let mut got: Vec<(Option<&str>, u64)> = p
            .samples
            .iter()
            .map(|s| (s.cgroup.as_deref(), s.values[0]))
            .collect();
        got.sort();
        // The process's 600 faults by the stacks' weights 2 : 1 : 1, each where it ran.
        assert_eq!(
            got,
            [
                (None, 150),
                (Some("/batch.slice"), 150),
                (Some("/web.slice"), 300)
            ]
        );
        // A stack the kernel could not hold, charged in both cgroups, is one stack lost.
        let mut t = StackTotals::new(&specs);
        t.add_interval(&iv);
        let lost: Arc<[Frame]> = vec![Frame::marker(LOST_STACK_FRAME)].into();
        let lost_in = |cgroup: u64| StackCharge {
            cgroup: Some(cgroup),
            ..charge(7, &lost, 1, 10)
        };
        t.add_batch(&StackBatch {
            t_ns: 1,
            charges: vec![lost_in(20), lost_in(21)],
            dropped: 0,
        });
        let p = t.profile(0, 1);
        assert_eq!((p.samples.len(), p.lost_stacks), (2, 1));
    }

    #[test]
    fn without_cgroups_in_its_charges_a_process_samples_carry_its_main_threads_as_last_seen() {
        let specs = [spec("page-faults", SlotRole::Traffic(Direction::Total))];
        let mut t = StackTotals::new(&specs);
        let row = |pid: u32, cgroup: Option<&str>| {
            let mut iv = interval(7, 10.0);
            iv.tasks[0].pid = pid;
            iv.tasks[0].cgroup_path = cgroup.map(str::to_string);
            iv
        };
        // A thread's cgroup stands until the main thread is seen; then the main thread's, the
        // last known (a row whose cgroup is gone keeps it).
        t.add_interval(&row(8, Some("/thread")));
        t.add_interval(&row(7, Some("/system.slice/imc-test.service")));
        t.add_interval(&row(8, Some("/thread")));
        t.add_interval(&row(7, None));
        let a = frames("hot");
        t.add_batch(&StackBatch {
            t_ns: 1,
            charges: vec![charge(7, &a, 5, 10)],
            dropped: 0,
        });
        t.add_interval(&interval(9, 10.0));
        t.add_batch(&StackBatch {
            t_ns: 2,
            charges: vec![charge(9, &a, 5, 10)],
            dropped: 0,
        });
        let p = t.profile(0, 1);
        let cgroup = |tgid: u32| {
            let s = p.samples.iter().find(|s| s.tgid == tgid).unwrap();
            s.cgroup.as_deref().map(str::to_string)
        };
        assert_eq!(cgroup(7).as_deref(), Some("/system.slice/imc-test.service"));
        assert_eq!(cgroup(9), None, "no cgroup known: none said");
    }

    #[test]
    fn timed_parts_place_each_sample_at_its_drains_by_weight_or_time() {
        let specs = [spec("page-faults", SlotRole::Traffic(Direction::Total))];
        let mut t = StackTotals::new(&specs).keep_times();
        let (a, b) = (frames("hot_three"), frames("hot_one"));
        t.add_interval(&interval(7, 400.0));
        t.add_interval(&interval(8, 40.0));
        t.add_batch(&StackBatch {
            t_ns: 1,
            charges: vec![charge(7, &a, 30, 10), charge(8, &b, 0, 30)],
            dropped: 0,
        });
        t.add_batch(&StackBatch {
            t_ns: 2,
            charges: vec![charge(7, &a, 270, 10), charge(8, &b, 0, 10)],
            dropped: 0,
        });
        let (p, placed) = t.timed_profile(0, 1);
        let of = |name: &str| -> Vec<(u64, f64)> {
            placed
                .iter()
                .filter(|x| {
                    let s = &p.samples[x.sample as usize];
                    p.frames[p.stacks[s.stack as usize].frames[0] as usize].label() == name
                })
                .map(|x| (x.t_ns, (f64::from(x.share) * 1000.0).round() / 1000.0))
                .collect()
        };
        // hot_three by its weight events; hot_one's process carried none: by on-CPU time.
        assert_eq!(of("hot_three"), [(1, 0.1), (2, 0.9)]);
        assert_eq!(of("hot_one"), [(1, 0.75), (2, 0.25)]);
        let untimed = StackTotals::new(&specs);
        assert!(untimed.timed_profile(0, 1).1.is_empty());
    }

    #[test]
    fn without_weight_events_on_cpu_time_weighs_and_bytes_keep_their_direction() {
        let mut rd = spec("read", SlotRole::Traffic(Direction::Read));
        rd.scope = SlotScope::Package;
        rd.bytes_per_count = Some(64.0);
        let specs = [rd, spec("llc", SlotRole::Weight(Some(Direction::Read)))];
        let mut t = StackTotals::new(&specs);
        let (a, b) = (frames("a"), frames("b"));
        let mut iv = interval(9, 0.0);
        iv.tasks[0].read_bytes = 1000;
        iv.tasks[0].write_bytes = 500;
        t.add_interval(&iv);
        // Read weights 1:3; no write weight: write bytes by time, 4:1.
        let mk = |f: &Arc<[Frame]>, w: u64, on: u64| StackCharge {
            tgid: 9,
            cgroup: None,
            frames: f.clone(),
            on_ns: on,
            slices: 1,
            slots: vec![0, w],
        };
        t.add_batch(&StackBatch {
            t_ns: 1,
            charges: vec![mk(&a, 1, 80), mk(&b, 3, 20)],
            dropped: 0,
        });
        let p = t.profile(0, 1);
        let names: Vec<&str> = p.sample_types.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["read", "write"]);
        let of = |name: &str| {
            p.samples
                .iter()
                .find(|s| p.frames[p.stacks[s.stack as usize].frames[0] as usize].label() == name)
                .map(|s| s.values.to_vec())
                .unwrap()
        };
        assert_eq!(of("a"), vec![250, 400]);
        assert_eq!(of("b"), vec![750, 100]);
    }
}

//! A scenario run: its tasks scheduled on their CPUs, the record stream synthesized from the
//! plan's slots, attributed by the real attributor, and each task's result set against the
//! truth.

use super::*;

impl Loaded {
    /// The synthetic timeline of this scenario under `plan`.
    pub fn synth(&self, plan: &Plan) -> Scenario {
        let specs = imc::sampler::from_plan::slot_specs(plan);
        let topo = &self.found.topology;
        let hz = plan
            .tick
            .hz
            .map_or(self.kernel.hz_or_default(), |h| h.round() as u32)
            .max(1);
        let duration_ns = (self.file.duration_s * 1e9).round() as u64;
        let slots = specs.iter().map(|s| synth_slot(s, &specs)).collect();
        let readers = topo
            .packages
            .iter()
            .map(|p| {
                plan.counters
                    .iter()
                    .filter(|c| c.package == Some(p.id) && c.slot.is_some())
                    .find_map(|c| match &c.reader {
                        Reader::PackageTick { cpus, .. } => Some(cpus.clone()),
                        _ => None,
                    })
                    .unwrap_or_default()
            })
            .collect();
        let drain_ms = plan.drain.as_ref().map_or(100, |d| d.every_ms).max(1);
        let layout = Layout {
            slots,
            package_ids: topo.packages.iter().map(|p| p.id).collect(),
            readers,
            // The program's rule (sampler: once per tick period, with a margin).
            min_gap_ns: 900_000_000 / u64::from(hz),
            drain_ns: drain_ms * 1_000_000,
            max_age_ns: imc::sampler::fallback::max_age_ns(hz, drain_ms as u32),
        };
        let ncpu = topo.online.iter().max().map_or(0, |&m| m as usize + 1);
        let mut sc = Scenario::busy(0, hz, duration_ns);
        sc.packages = topo.packages.iter().map(|p| p.cpus.clone()).collect();
        sc.tasks = self
            .file
            .tasks
            .iter()
            .map(|t| SynthTask {
                pid: t.pid,
                tgid: t.pid,
                comm: t.comm.clone(),
                cgroup: 1,
                read_bps: t.read_bps,
                write_bps: t.write_bps,
            })
            .collect();
        sc.traits = self
            .file
            .tasks
            .iter()
            .zip(&self.task_memory)
            .map(|(t, &m)| TaskTraits {
                memory_package: m,
                read_weight_per_byte: t.read_weight_per_byte,
                write_weight_per_byte: t.write_weight_per_byte,
                stall_per_miss: t.stall_per_miss,
            })
            .collect();
        sc.schedule = self.schedule(ncpu);
        sc.dma_bps = (0..topo.packages.len())
            .map(|i| self.file.dma_read_bps.get(i).copied().unwrap_or(0.0))
            .collect();
        sc.peak_bps = self.file.peak_bps.clone();
        sc.latency.idle_ns = self.file.idle_latency_ns;
        sc.precise = plan.tick.switches;
        sc.weights = false;
        sc.nohz = true;
        // Package sums start where an earlier run left the kernel's counts, not at zero.
        sc.counter_start = 1 << 40;
        sc.mark_every_ns = Some(self.file.interval_ms * 1_000_000);
        sc.layout = Some(layout);
        sc
    }

    /// Every CPU's schedule: the tasks alive on it take turns in rounds, each running its
    /// share of the round; the round is as long as makes the most demanding task's run one
    /// slice. A task on n CPUs runs on its k-th one k/n of a round later, so one that wants
    /// 1/n of each migrates among them.
    pub(super) fn schedule(&self, ncpu: usize) -> Vec<Vec<(u64, Option<usize>)>> {
        let end_ns = secs_ns(self.file.duration_s);
        let mut on_cpu: Vec<Vec<usize>> = vec![Vec::new(); ncpu];
        for (i, cpus) in self.task_cpus.iter().enumerate() {
            for &c in cpus {
                on_cpu[c as usize].push(i);
            }
        }
        (0..ncpu)
            .map(|c| self.cpu_schedule(c, &on_cpu[c], end_ns))
            .collect()
    }

    /// Task entry `i`'s life: from its start to its end (the run's end where it has none).
    fn life(&self, i: usize, end_ns: u64) -> (u64, u64) {
        let t = &self.file.tasks[i];
        (secs_ns(t.start_s), t.end_s.map_or(end_ns, secs_ns))
    }

    /// CPU `c`'s schedule, where the task entries `mine` may run: (time, who runs from then,
    /// None: nobody), epoch by epoch between the tasks' starts and ends.
    fn cpu_schedule(&self, c: usize, mine: &[usize], end_ns: u64) -> Vec<(u64, Option<usize>)> {
        let mut bounds: Vec<u64> = vec![0, end_ns];
        for &i in mine {
            let (a, b) = self.life(i, end_ns);
            bounds.push(a);
            bounds.push(b);
        }
        bounds.sort_unstable();
        bounds.dedup();
        let mut out: Vec<(u64, Option<usize>)> = Vec::new();
        push_turn(&mut out, 0, None);
        for w in bounds.windows(2) {
            let (e0, e1) = (w[0], w[1]);
            if e0 >= end_ns {
                break;
            }
            self.epoch(&mut out, c, mine, (e0, e1), end_ns);
        }
        push_turn(&mut out, end_ns, None);
        out
    }

    /// The rounds of one epoch `e0 .. e1` of CPU `c`, in which the same tasks are alive.
    fn epoch(
        &self,
        out: &mut Vec<(u64, Option<usize>)>,
        c: usize,
        mine: &[usize],
        (e0, e1): (u64, u64),
        end_ns: u64,
    ) {
        let tasks = &self.file.tasks;
        // Alive through the whole epoch; a task on several CPUs first, as the
        // one whose runs are staggered.
        let mut alive: Vec<usize> = mine
            .iter()
            .copied()
            .filter(|&i| {
                let (a, b) = self.life(i, end_ns);
                a <= e0 && b >= e1
            })
            .collect();
        alive.sort_by_key(|&i| std::cmp::Reverse(self.task_cpus[i].len() > 1));
        if alive.is_empty() {
            push_turn(out, e0, None);
            return;
        }
        let want: f64 = alive.iter().map(|&i| tasks[i].cpu_share).sum();
        let scale = if want > 1.0 { 1.0 / want } else { 1.0 };
        let frac: Vec<f64> = alive.iter().map(|&i| tasks[i].cpu_share * scale).collect();
        let round = alive
            .iter()
            .zip(&frac)
            .map(|(&i, &f)| tasks[i].slice_ms * 1e6 / f)
            .fold(f64::INFINITY, f64::min)
            .max(1_000.0);
        let first = alive[0];
        let n = self.task_cpus[first].len();
        let k = self.task_cpus[first]
            .iter()
            .position(|&x| x as usize == c)
            .unwrap_or(0);
        let phase = round * k as f64 / n as f64;
        // Rounds start at e0 + phase + (r - 1)·round, clipped to the epoch.
        let mut r = 0u64;
        loop {
            let start = e0 as f64 + phase + (r as f64 - 1.0) * round;
            if start >= e1 as f64 {
                break;
            }
            let mut t = start;
            for (&i, &f) in alive.iter().zip(&frac) {
                let run_end = t + f * round;
                let (a, b) = (t.max(e0 as f64), run_end.min(e1 as f64));
                if b > a {
                    push_turn(out, a.round() as u64, Some(i));
                }
                t = run_end;
            }
            let round_end = start + round;
            let (a, b) = (t.max(e0 as f64), round_end.min(e1 as f64));
            if b - a >= 1.0 {
                push_turn(out, a.round() as u64, None);
            }
            r += 1;
        }
    }

    /// Plans, synthesizes and attributes the scenario; `progress` is told the fraction of the
    /// simulated time done at every interval.
    pub fn run(
        &self,
        opts: &RunOptions,
        progress: &mut dyn FnMut(f64),
    ) -> Result<Outcome, ScenarioError> {
        let plan = self.plan(opts)?;
        let specs = imc::sampler::from_plan::slot_specs(&plan);
        let mut sc = self.synth(&plan);
        sc.aggregate = sc.precise && !opts.precise;
        let duration_ns = sc.duration_ns;
        let (acc, stream) = self.attribute(&sc, &specs, &plan, progress);

        let truth = &stream.truth;
        let total_bytes: f64 = stream.controller_bytes().iter().map(|(r, w)| r + w).sum();
        let truth_device_bytes: f64 = truth.dma.iter().sum();
        let stalls = imc::model::Victims::keys(&specs).is_some();
        let tasks = self.task_results(truth, &acc, sc.latency.cpu_hz, stalls, total_bytes);
        let max_error = tasks.iter().map(|t| t.error).fold(0.0, f64::max);
        let victims_ranked_right = stalls.then(|| ranked_alike(&tasks));
        let latency: Vec<LatencyResult> = truth
            .queues
            .iter()
            .zip(&self.found.topology.packages)
            .map(|(q, p)| latency_result(p.id, q, duration_ns))
            .collect();
        let latency_max_error = latency
            .iter()
            .filter_map(|l| l.error)
            .fold(None, |m: Option<f64>, e| Some(m.map_or(e, |m| m.max(e))));
        let weights = weight_names(&specs);
        let weighting = plan
            .weighting
            .clone()
            .unwrap_or_else(|| imc::model::Weighting::cpu_time("the plan chose no weighting"));
        Ok(Outcome {
            name: self.file.name.clone(),
            weighting,
            total_bytes,
            tasks,
            max_error,
            aggregated: sc.aggregate,
            precise_max_error: None,
            package_bytes: acc.package_bytes,
            unattributed_bytes: acc.unattributed,
            device_bytes: acc.device,
            truth_device_bytes,
            device_error: if total_bytes > 0.0 {
                (acc.device - truth_device_bytes).abs() / total_bytes
            } else {
                0.0
            },
            weights,
            victims_ranked_right,
            latency,
            latency_max_error,
        })
    }

    /// Each task's truth and what it was charged (entries with the same pid and comm are one
    /// task), its error a part of the run's `total_bytes`.
    fn task_results(
        &self,
        truth: &super::super::Truth,
        acc: &Accumulated,
        cpu_hz: f64,
        stalls: bool,
        total_bytes: f64,
    ) -> Vec<TaskResult> {
        // Entries of one task (pid, comm) are one task.
        let mut by_task: BTreeMap<(u32, String), TaskResult> = BTreeMap::new();
        let mut stall_truth: BTreeMap<(u32, String), [f64; 2]> = BTreeMap::new();
        for (i, t) in self.file.tasks.iter().enumerate() {
            let e = by_task
                .entry((t.pid, t.comm.clone()))
                .or_insert_with(|| TaskResult {
                    pid: t.pid,
                    comm: t.comm.clone(),
                    truth_bytes: 0.0,
                    attributed_bytes: 0.0,
                    error: 0.0,
                    truth_read_bytes: 0.0,
                    truth_write_bytes: 0.0,
                    attributed_read_bytes: 0.0,
                    attributed_write_bytes: 0.0,
                    truth_stall_share: None,
                    attributed_stall_share: None,
                    truth_stall_seconds: 0.0,
                    attributed_stall_seconds: None,
                });
            e.truth_read_bytes += truth.task_read[i];
            e.truth_write_bytes += truth.task_write[i];
            let st = stall_truth.entry((t.pid, t.comm.clone())).or_default();
            st[0] += truth.task_stall[i];
            st[1] += truth.task_cycles[i];
            e.truth_stall_seconds += truth.task_stall[i] / cpu_hz;
        }
        for (key, e) in by_task.iter_mut() {
            e.truth_bytes = e.truth_read_bytes + e.truth_write_bytes;
            if let Some(a) = acc.tasks.get(key) {
                e.attributed_read_bytes = a[0];
                e.attributed_write_bytes = a[1];
                e.attributed_bytes = a[0] + a[1] + a[2];
            }
            let st = stall_truth.get(key).copied().unwrap_or_default();
            e.truth_stall_share = imc::model::result::stall_share(Some(st[0]), Some(st[1]));
            if stalls {
                let a = acc.stalls.get(key).copied().unwrap_or_default();
                e.attributed_stall_share = imc::model::result::stall_share(Some(a[0]), Some(a[1]));
                e.attributed_stall_seconds = acc.stall_seconds.get(key).copied();
            }
            e.error = if total_bytes > 0.0 {
                (e.attributed_bytes - e.truth_bytes).abs() / total_bytes
            } else {
                0.0
            };
        }
        by_task.into_values().collect()
    }
    /// The synthesized stream through the real attributor, interval by interval (folded into
    /// per-task aggregates first where `sc.aggregate`): what it charged, and the stream (its
    /// truth).
    fn attribute(
        &self,
        sc: &Scenario,
        specs: &[SlotSpec],
        plan: &Plan,
        progress: &mut dyn FnMut(f64),
    ) -> (Accumulated, super::super::SynthStream) {
        let duration_ns = sc.duration_ns;
        let mut attr = Attributor::new(specs, &self.found.topology, plan.source.to_string())
            .tick_hz(sc.freq_hz)
            .weighting(plan.weighting.clone());
        let mut acc = Accumulated::default();
        // The kernel folds switches into per-task aggregates unless asked for each one, its
        // flush periods cut at the intervals' ends as the sampler hands it their clock.
        let mut fold = sc.aggregate.then(|| {
            let agg = Aggregator::new(specs, sc.freq_hz);
            match sc.mark_every_ns {
                Some(every) => agg.interval_clock(0, every),
                None => agg,
            }
        });
        let mut folded = Vec::new();
        let mut stream = sc.stream();
        for item in stream.by_ref() {
            match item {
                SynthItem::Tick(r) => match fold.as_mut() {
                    Some(agg) => {
                        agg.push(&r, &mut folded);
                        for a in folded.drain(..) {
                            attr.push_tick(&a);
                        }
                    }
                    None => attr.push_tick(&r),
                },
                SynthItem::PackageRead(p, s, t, v) => attr.push_package_read(p, s, t, v),
                SynthItem::Mark(t) => {
                    acc.add(&attr.close_interval(t));
                    progress(t as f64 / duration_ns.max(1) as f64);
                }
            }
        }
        // As imc does before its last interval: every package read, then everything spread.
        for item in stream.read_all_packages() {
            if let SynthItem::PackageRead(p, s, t, v) = item {
                attr.push_package_read(p, s, t, v);
            }
        }
        acc.add(&attr.finish(duration_ns));
        progress(1.0);
        (acc, stream)
    }
}

/// Whether the charged stall shares order the tasks as the true ones do: every pair whose
/// true shares differ by more than 0.01 is in the same order (a task charged no cycles ranks
/// last).
pub(super) fn ranked_alike(tasks: &[TaskResult]) -> bool {
    let charged = |t: &TaskResult| t.attributed_stall_share.unwrap_or(-1.0);
    tasks.iter().all(|a| {
        tasks.iter().all(|b| {
            let (Some(ta), Some(tb)) = (a.truth_stall_share, b.truth_stall_share) else {
                return true;
            };
            ta <= tb + 0.01 || charged(a) > charged(b)
        })
    })
}

/// A package's read latency from its queue's whole counts, as `stat --latency` computes it
/// (occupancy ÷ inserts in DRAM clocks, in ns through the clock's measured rate), against the
/// mean latency its reads had.
fn latency_result(package: u32, q: &QueueTruth, duration_ns: u64) -> LatencyResult {
    let sums = imc::counting::latency::Sums {
        read_occupancy: q.occupancy.floor(),
        read_inserts: q.inserts.floor(),
        dram_clocks: q.dram_clocks.floor(),
        clock_boxes: 1,
        ..Default::default()
    };
    let measured_ns = sums.figures(duration_ns).read_ns;
    let truth_ns = q.latency_ns();
    let error = match (measured_ns, truth_ns) {
        (Some(m), Some(t)) if t > 0.0 => Some((m - t).abs() / t),
        _ => None,
    };
    LatencyResult {
        package,
        truth_ns,
        measured_ns,
        error,
    }
}

fn role_name(role: SlotRole) -> String {
    match role {
        SlotRole::Traffic(d) => format!("traffic {d:?}").to_lowercase(),
        SlotRole::Weight(None) => "weight".into(),
        SlotRole::Weight(Some(d)) => format!("weight {d:?}").to_lowercase(),
        SlotRole::RemoteWeight(None) => "remote weight".into(),
        SlotRole::RemoteWeight(Some(d)) => format!("remote weight {d:?}").to_lowercase(),
        SlotRole::Other => "other".into(),
        SlotRole::Stall(part) => format!("stall {}", part.as_str()),
    }
}

/// What a plan's slot holds in the synthetic records (`all`: every slot of the plan).
fn synth_slot(spec: &SlotSpec, all: &[SlotSpec]) -> SynthSlot {
    // A local weight whose direction has a remote counterpart counts local traffic only.
    let remote_beside = |d: Option<Direction>| {
        all.iter().any(|o| match o.role {
            SlotRole::RemoteWeight(od) => od == d || od.is_none() || d.is_none(),
            _ => false,
        })
    };
    // Events of one role add up: each counts its part of the traffic, in its own lines (a
    // task's weight per byte is given in 64-byte lines: 1/64 is faithful; POWER's are 128).
    let line = spec.bytes_per_count.filter(|&b| b > 0.0).unwrap_or(64.0);
    let share = 64.0
        / line
        / all
            .iter()
            .filter(|o| o.scope == SlotScope::Cpu && o.role == spec.role)
            .count()
            .max(1) as f64;
    match (spec.scope, spec.role) {
        (SlotScope::Package, SlotRole::Traffic(direction)) => SynthSlot::Traffic {
            direction,
            bytes_per_count: spec.bytes_per_count.unwrap_or(64.0),
        },
        (SlotScope::Package, _) => SynthSlot::Traffic {
            direction: Direction::Total,
            bytes_per_count: spec.bytes_per_count.unwrap_or(64.0),
        },
        (SlotScope::Cpu, SlotRole::Weight(direction)) => SynthSlot::Weight {
            direction,
            remote: false,
            sees_remote: !remote_beside(direction),
            share,
        },
        (SlotScope::Cpu, SlotRole::RemoteWeight(direction)) => SynthSlot::Weight {
            direction,
            remote: true,
            sees_remote: false,
            share,
        },
        (SlotScope::Cpu, SlotRole::Stall(part)) => SynthSlot::Stall(part),
        (SlotScope::Cpu, _) => SynthSlot::Other,
    }
}

/// The intervals' sums: per task (pid, comm) its read, write and total bytes; every package's
/// bytes and the unattributed part.
#[derive(Default)]
struct Accumulated {
    tasks: BTreeMap<(u32, String), [f64; 3]>,
    /// Per task: the stalled cycles and cycles charged to it, and its stall seconds.
    stalls: BTreeMap<(u32, String), [f64; 2]>,
    stall_seconds: BTreeMap<(u32, String), f64>,
    package_bytes: f64,
    unattributed: f64,
    device: f64,
}

impl Accumulated {
    fn add(&mut self, iv: &IntervalResult) {
        for t in &iv.tasks {
            let e = self.tasks.entry((t.pid, t.comm.clone())).or_default();
            e[0] += t.read_bytes as f64;
            e[1] += t.write_bytes as f64;
            e[2] += t.total_bytes as f64;
            if let (Some(st), Some(cy)) = (t.stall_cycles, t.cycles) {
                let e = self.stalls.entry((t.pid, t.comm.clone())).or_default();
                e[0] += st;
                e[1] += cy;
            }
            if let Some(secs) = t.stall_seconds {
                *self
                    .stall_seconds
                    .entry((t.pid, t.comm.clone()))
                    .or_default() += secs;
            }
        }
        self.package_bytes += iv.package_bytes() as f64;
        self.unattributed += iv.unattributed_bytes as f64;
        self.device += iv.unattributed.device_bytes as f64;
    }
}

/// The plan's weight slots, as `event (role)`.
fn weight_names(specs: &[SlotSpec]) -> Vec<String> {
    specs
        .iter()
        .filter(|s| {
            s.scope == SlotScope::Cpu
                && matches!(s.role, SlotRole::Weight(_) | SlotRole::RemoteWeight(_))
        })
        .map(|s| format!("{} ({})", s.event, role_name(s.role)))
        .collect()
}

fn secs_ns(s: f64) -> u64 {
    (s * 1e9).round() as u64
}

/// A turn of `who` (None: nobody) from `t` on a CPU's schedule: merged into the last turn when
/// it is the same one, replacing it when it starts at the same time.
fn push_turn(out: &mut Vec<(u64, Option<usize>)>, t: u64, who: Option<usize>) {
    if out.last().is_some_and(|&(_, w)| w == who) {
        return;
    }
    if out.last().is_some_and(|&(lt, _)| lt == t) {
        out.pop();
        if out.last().is_some_and(|&(_, w)| w == who) {
            return;
        }
    }
    out.push((t, who));
}

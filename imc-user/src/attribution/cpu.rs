//! A CPU's record stream: each record admitted, its task named, its CPU-scope deltas charged to
//! their owner, and the segments of the CPU's time line (with their weight rates) handed to
//! the packages whose traffic they weigh.

use super::classes::class_rate;
use super::package::scaled_delta;
use super::spread::{MAX_CLASSES, SHARE_ONE, Segment};
use super::state::{Attributor, CpuState, MAX_CPU, Reading};
use super::tasks::{IDLE, TaskKey};
use imc_common::{KIND_AGGREGATE, KIND_SWITCH, MAX_SLOTS, Record, SlotReading};

impl Attributor {
    /// One program run on one CPU. Records of one CPU must come in time order; CPUs may
    /// interleave arbitrarily.
    ///
    /// The steps: admit the record (and the CPU), name its task, give its package readings to
    /// the package, then on the CPU's own time line close what the record ends (the CPU-scope
    /// deltas to their owner, the segment that weighs the package's traffic) and make it the
    /// CPU's new baseline.
    pub fn push_tick(&mut self, rec: &Record) {
        let Some(cpu) = self.admit(rec) else {
            return;
        };
        let nslots = (rec.nr_slots as usize).min(self.specs.len());
        let valid: u8 = (((1u16 << nslots) - 1) as u8) & !rec.failed_mask;
        let task = self.task_of(cpu, rec);
        if rec.kind == KIND_AGGREGATE {
            self.push_aggregate(cpu, rec, task, valid);
            return;
        }
        self.push_package_points(cpu, rec, valid & self.pkg_mask);
        let cpu_valid = valid & self.cpu_mask;
        let st = &mut self.cpus[cpu];
        if !st.have_t {
            // First record (or a restart): only baselines.
            st.owner_since = rec.t_ns;
            st.seg_start = rec.t_ns;
            st.seg_base_t = rec.t_ns;
        } else if rec.t_ns > st.t_last {
            let held = self.close_held_segment(cpu, task, rec.t_ns);
            let (wdelta, w_ok) = self.cpu_deltas(cpu, rec, task, cpu_valid);
            let ended = self.end_segment(cpu, rec.t_ns, task, cpu_valid, &wdelta, w_ok);
            self.hand_segments(cpu, held, ended, (&wdelta, w_ok));
        }
        self.rebase(cpu, rec, task, cpu_valid);
    }

    /// A task's aggregate of one flush period `t0_ns .. t_ns` of its CPU (KIND_AGGREGATE): its
    /// CPU-scope deltas are its own; for the package it is a segment over the whole period
    /// whose weight rates are its weight deltas over the period and whose claim by time is its
    /// on-CPU share of it. The aggregates of one period overlap: the kernel kept each task's
    /// time and weight in the period, not their order, so both are spread evenly over it
    /// (at thousands of switches a second the tasks interleave finely within a tick).
    fn push_aggregate(&mut self, cpu: usize, rec: &Record, task: u32, valid: u8) {
        self.push_package_points(cpu, rec, valid & self.pkg_mask);
        let cpu_valid = valid & self.cpu_mask;
        let mut wdelta = [0.0f64; MAX_SLOTS];
        let mut w_ok = 0u8;
        let pkg = self.cpus[cpu].pkg;
        let mut bits = cpu_valid;
        while bits != 0 {
            let s = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            // Σvalue scaled by Σenabled / Σrunning over the task's slices, spread evenly over
            // the period as its time is.
            let d = scaled_delta(&SlotReading::default(), &rec.slots[s], self.masks[s], true);
            self.charge(task, pkg, s, d, rec.t0_ns.min(rec.t_ns), rec.t_ns);
            if self.weight_mask & (1 << s) != 0 {
                wdelta[s] = d;
                // A multiplexed weight that never ran in the task's slices knows nothing.
                let r = &rec.slots[s];
                if r.running > 0 || r.enabled == 0 {
                    w_ok |= 1 << s;
                }
            }
        }
        // Per-switch chains (a `--precise` run's) restart after aggregates.
        let st = &mut self.cpus[cpu];
        st.base_ok = 0;
        st.prev_task = task;
        st.owner_since = rec.t_ns;
        st.seg_start = rec.t_ns.max(st.seg_start);
        st.seg_base_t = st.seg_start;
        st.t_last = rec.t_ns;
        st.have_t = true;
        if self.pkg_mask == 0 || rec.t0_ns >= rec.t_ns {
            return;
        }
        let dt = (rec.t_ns - rec.t0_ns) as f64;
        let mut wrate = [0.0; MAX_CLASSES];
        let mut weight_ok = 0u8;
        for (c, class) in self.classes.iter().enumerate() {
            if let Some(rate) = class_rate(class.local, &wdelta, w_ok, dt, &self.wscale) {
                weight_ok |= 1 << c;
                wrate[c] = rate;
            }
        }
        let share = (rec.on_ns as f64 / dt).clamp(0.0, 1.0);
        let seg = Segment {
            start: rec.t0_ns,
            end: rec.t_ns,
            wrate,
            task,
            weight_ok,
            foreign: false,
            time_share: (share * f64::from(SHARE_ONE)).round() as u32,
        };
        self.hand_segments(cpu, None, Some(seg), (&wdelta, w_ok));
    }

    /// Counts the record and makes room for its CPU; None for a record to leave out (a switch
    /// record in tick-only mode, a corrupt CPU number). A CPU whose time went backwards
    /// restarts its chain rather than invent a delta.
    fn admit(&mut self, rec: &Record) -> Option<usize> {
        if self.tick_only && rec.kind == KIND_SWITCH {
            return None;
        }
        if rec.cpu >= MAX_CPU {
            self.lost += 1;
            return None;
        }
        self.records += 1;
        if rec.kind == KIND_SWITCH {
            self.switches += 1;
        }
        // The first interval starts where the first counts it holds begin: an aggregate's
        // period began before its record (the time the program first ran on its CPU).
        let begins = if rec.kind == KIND_AGGREGATE {
            rec.t0_ns.min(rec.t_ns)
        } else {
            rec.t_ns
        };
        self.t_start = match self.t_start {
            Some(t) if self.closed_any => Some(t),
            Some(t) => Some(t.min(begins)),
            None => Some(begins),
        };
        let cpu = rec.cpu as usize;
        if cpu >= self.cpus.len() {
            let old = self.cpus.len();
            self.cpus.resize(cpu + 1, CpuState::default());
            for (c, st) in self.cpus.iter_mut().enumerate().skip(old) {
                st.pkg = self.cpu_pkg_init.get(c).copied().unwrap_or(u32::MAX);
                st.cache_idx = IDLE;
                st.loc_task = IDLE;
            }
        }
        let st = &mut self.cpus[cpu];
        if st.have_t && rec.t_ns < st.t_last {
            st.have_t = false;
            st.base_ok = 0;
        }
        Some(cpu)
    }

    /// The record's task index (IDLE for the idle task), skipping the table lookup while the
    /// same task keeps running on the CPU.
    fn task_of(&mut self, cpu: usize, rec: &Record) -> u32 {
        if rec.pid == 0 {
            return IDLE;
        }
        let key = TaskKey {
            pid: rec.pid,
            tgid: rec.tgid,
            cgroup: rec.cgroup_id,
            comm: rec.comm,
        };
        let st = &mut self.cpus[cpu];
        if st.cache_idx != IDLE && st.cache_key == key {
            return st.cache_idx;
        }
        let i = self.tasks.lookup(&key);
        st.cache_key = key;
        st.cache_idx = i;
        i
    }

    /// Package readings: the record of a CPU that read its package's slots is a point of
    /// each.
    fn push_package_points(&mut self, cpu: usize, rec: &Record, pkg_valid: u8) {
        if pkg_valid == 0 {
            return;
        }
        let Some(p) = self.packages.get_mut(self.cpus[cpu].pkg as usize) else {
            return;
        };
        for ps in &mut p.slots {
            if pkg_valid & (1 << ps.slot) != 0 {
                ps.pending.push(Reading {
                    t: rec.t_ns,
                    r: rec.slots[ps.slot],
                    times: true,
                });
            }
        }
    }

    /// The segment held open since before a silence or a change of task, closed for its owner
    /// up to the last record; moves the open segment's start for what follows.
    fn close_held_segment(&mut self, cpu: usize, task: u32, t: u64) -> Option<Segment> {
        let max_gap_ns = self.max_gap_ns;
        let st = &mut self.cpus[cpu];
        let held = |st: &CpuState| {
            (st.seg_start < st.t_last).then_some(Segment {
                start: st.seg_start,
                end: st.t_last,
                wrate: [0.0; MAX_CLASSES],
                task: st.prev_task,
                weight_ok: 0,
                foreign: false,
                time_share: SHARE_ONE,
            })
        };
        let mut out = None;
        if t - st.t_last > max_gap_ns {
            // Silent longer than two ticks (NOHZ idle): only the last stretch is known to be
            // this record's task; the open part before the silence is closed as is.
            out = held(st);
            st.seg_base_t = st.t_last;
            st.seg_start = t - max_gap_ns;
        } else if task != st.prev_task && st.seg_start < st.t_last {
            out = held(st);
            st.seg_start = st.t_last;
            st.seg_base_t = st.t_last;
        }
        if task != st.prev_task {
            st.owner_since = st.t_last;
        }
        out
    }

    /// CPU-scope deltas since the baseline go to this record's task when every record since
    /// the baseline was this task's; otherwise the delta spans two owners and is dropped, not
    /// split by guess. Returns each Weight slot's delta, and the bits of those measured over
    /// exactly the open segment (a clean baseline of this owner at the segment's start).
    fn cpu_deltas(
        &mut self,
        cpu: usize,
        rec: &Record,
        task: u32,
        cpu_valid: u8,
    ) -> ([f64; MAX_SLOTS], u8) {
        let mut wdelta = [0.0f64; MAX_SLOTS];
        let mut w_ok: u8 = 0;
        let pkg = self.cpus[cpu].pkg;
        let mut bits = cpu_valid;
        while bits != 0 {
            let s = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let st = &self.cpus[cpu];
            let usable = st.base_ok & (1 << s) != 0 && st.base_t[s] >= st.owner_since;
            if !usable {
                continue;
            }
            let (prev, cur) = (&st.last[s], &rec.slots[s]);
            let d = scaled_delta(prev, cur, self.masks[s], true);
            // A multiplexed weight that never ran in the segment knows nothing of it.
            let ran = cur.running > prev.running || cur.enabled <= prev.enabled;
            let whole_segment = st.base_t[s] == st.seg_base_t;
            // Over the whole span since the baseline, a silence included: a CPU the host took
            // away stops counting with it, so its counts were made before the silence or after.
            self.charge(task, pkg, s, d, st.base_t[s], rec.t_ns);
            if self.weight_mask & (1 << s) != 0 {
                wdelta[s] = d;
                if whole_segment && ran {
                    w_ok |= 1 << s;
                }
            }
        }
        (wdelta, w_ok)
    }

    /// The open segment, ended at this record with its weight rates, when its Weight counters
    /// were read (else it stays open until a clean read closes it with a real delta).
    fn end_segment(
        &mut self,
        cpu: usize,
        t: u64,
        task: u32,
        cpu_valid: u8,
        wdelta: &[f64; MAX_SLOTS],
        w_ok: u8,
    ) -> Option<Segment> {
        let weights_read = cpu_valid & self.weight_mask == self.weight_mask;
        if !(weights_read || self.weight_mask == 0) {
            return None;
        }
        let st = &mut self.cpus[cpu];
        let dt = (t - st.seg_start) as f64;
        let mut wrate = [0.0; MAX_CLASSES];
        let mut weight_ok = 0u8;
        for (c, class) in self.classes.iter().enumerate() {
            if let Some(rate) = class_rate(class.local, wdelta, w_ok, dt, &self.wscale) {
                weight_ok |= 1 << c;
                wrate[c] = rate;
            }
        }
        let seg = Segment {
            start: st.seg_start,
            end: t,
            wrate,
            task,
            weight_ok,
            foreign: false,
            time_share: SHARE_ONE,
        };
        st.seg_start = t;
        st.seg_base_t = t;
        Some(seg)
    }

    /// Closed segments to the CPU's package, which spreads its traffic over them; with remote
    /// weights, also to every other package, weighed there by what the CPU sent to remote
    /// memory.
    fn hand_segments(
        &mut self,
        cpu: usize,
        held: Option<Segment>,
        ended: Option<Segment>,
        weights: (&[f64; MAX_SLOTS], u8),
    ) {
        if self.pkg_mask == 0 {
            return;
        }
        let own = self.cpus[cpu].pkg as usize;
        for (seg, w) in [(held, None), (ended, Some(weights))] {
            let Some(mut seg) = seg.filter(|s| s.end > s.start) else {
                continue;
            };
            // A blind weight's rate is split by where the task's memory is: its local part
            // weighs this package, the rest the others.
            let mut blind_remote = [None; MAX_CLASSES];
            if let Some((wdelta, w_ok)) = w {
                let blind = self.blind;
                for (c, (b, out)) in blind.iter().zip(blind_remote.iter_mut()).enumerate() {
                    if let Some(masks) = *b
                        && seg.weight_ok & (1 << c) != 0
                    {
                        let loc = self.locality(cpu, seg.task, masks, wdelta, w_ok);
                        let full = seg.wrate[c];
                        seg.wrate[c] = full * loc;
                        *out = Some(full * (1.0 - loc));
                    }
                }
            }
            if self.numa {
                let mut remote = self.remote_segment(&seg, w);
                for (c, r) in blind_remote.iter().enumerate() {
                    if let Some(r) = *r {
                        remote.wrate[c] = r;
                    }
                }
                for (i, p) in self.packages.iter_mut().enumerate() {
                    if i != own {
                        p.segs.push(remote);
                    }
                }
            }
            if let Some(p) = self.packages.get_mut(own) {
                p.segs.push(seg);
            }
        }
    }

    /// A segment as another package sees it: the rates of its remote weights, and no claim
    /// by time (the CPU's time is never a claim on another package's traffic). A class without
    /// remote weights gives it no weight, cleanly; `wdelta`/`w_ok` None: the weights are
    /// unknown (a held segment).
    fn remote_segment(&self, seg: &Segment, weights: Option<(&[f64; MAX_SLOTS], u8)>) -> Segment {
        let mut out = Segment {
            foreign: true,
            wrate: [0.0; MAX_CLASSES],
            weight_ok: 0,
            ..*seg
        };
        let dt = (seg.end - seg.start) as f64;
        for (c, class) in self.classes.iter().enumerate() {
            if class.remote == 0 {
                out.weight_ok |= 1 << c;
            } else if let Some((wdelta, w_ok)) = weights
                && let Some(rate) = class_rate(class.remote, wdelta, w_ok, dt, &self.wscale)
            {
                out.weight_ok |= 1 << c;
                out.wrate[c] = rate;
            }
        }
        out
    }

    /// The local fraction of a task's memory traffic, from its weights of the other direction
    /// over the segment (`masks`: their local and remote slots); when it moved none there, the
    /// fraction it last showed on this CPU, else local.
    fn locality(
        &mut self,
        cpu: usize,
        task: u32,
        masks: (u8, u8),
        wdelta: &[f64; MAX_SLOTS],
        w_ok: u8,
    ) -> f64 {
        let l = class_rate(masks.0, wdelta, w_ok, 1.0, &self.wscale);
        let r = class_rate(masks.1, wdelta, w_ok, 1.0, &self.wscale);
        let st = &mut self.cpus[cpu];
        if let (Some(l), Some(r)) = (l, r)
            && l + r > 0.0
        {
            st.loc_task = task;
            st.loc = l / (l + r);
            return st.loc;
        }
        if st.loc_task == task && task != IDLE {
            st.loc
        } else {
            1.0
        }
    }

    /// The record becomes the CPU's baseline for the slots it read.
    fn rebase(&mut self, cpu: usize, rec: &Record, task: u32, cpu_valid: u8) {
        let st = &mut self.cpus[cpu];
        let mut bits = cpu_valid;
        while bits != 0 {
            let s = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            st.last[s] = rec.slots[s];
            st.base_t[s] = rec.t_ns;
        }
        st.base_ok |= cpu_valid;
        if !st.have_t {
            st.base_ok = cpu_valid;
        }
        st.prev_task = task;
        st.t_last = rec.t_ns;
        st.have_t = true;
    }
}

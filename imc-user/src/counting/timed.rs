//! Boundary bookkeeping of kernel-timed counting: which reading of each counter group closes
//! which interval, and when imc must wake.
//!
//! Each group's cpu-clock leader makes the kernel read the group at every boundary
//! `base + k × period` into a ring, so imc need not wake per interval. But cpu-clock barely fires
//! on an idle CPU, so a group can miss boundaries. A group that missed one is *watched*: imc
//! then wakes just after every boundary and reads the groups whose sample is not there from
//! userspace (one group read, timestamped), so the boundary still closes on time with real
//! elapsed time. A watched group that delivers every boundary by itself for a while is trusted
//! again: `MIN_HOLD_NS` after a lone miss (a busy vCPU the host ran late), doubling up to
//! `MAX_HOLD_NS` when it keeps missing soon after being trusted (an idle CPU). While no group
//! is watched imc wakes once per `COLLECT_NS` only, on a boundary, and patches any group missing
//! there; only boundaries between two such wake-ups that a group misses merge, once per
//! busy-to-idle transition of its CPU. A group that delivered the previous boundary but not yet
//! this one is most likely just late (the host ran its vCPU late): imc looks again half a period
//! later before reading it, since a read of another CPU's group costs an IPI.
//!
//! A reading's time is where its group's time_enabled puts it on CLOCK_MONOTONIC (see
//! `Anchor`): the kernel takes time_enabled with the counts, while a sample's own timestamp comes
//! before them and a userspace read is bracketed by clock reads around a syscall, either of which
//! the host can stretch by a stalled vCPU.
//!
//! Everything here is arithmetic on timestamps and queues, so tests drive it with scripted
//! samples and times.
use std::collections::VecDeque;

/// Wake-up period while every group delivers its own samples: bounds the output latency.
pub const COLLECT_NS: u64 = 10_000_000;
/// How long a watched group must deliver every boundary by itself before imc stops watching it:
/// at first, and after a miss long after the previous one.
pub const MIN_HOLD_NS: u64 = 20_000_000;
/// The longest such hold, for a group that keeps missing boundaries soon after being trusted.
pub const MAX_HOLD_NS: u64 = 1_000_000_000;
/// A miss within this many holds of being trusted doubles the hold.
const RELAPSE_HOLDS: u64 = 8;
/// Margin after a group's usual sample time before its sample counts as missing.
const MARGIN_NS: u64 = 50_000;

/// How far apart the kernel's perf clock (which time_enabled counts) and CLOCK_MONOTONIC may
/// drift, as a fraction of elapsed time: NTP slews CLOCK_MONOTONIC by up to 500 ppm.
const DRIFT_PER: u64 = 1_000;

/// Where CLOCK_MONOTONIC stood when a group's time_enabled was 0: a group's readings bound it,
/// and a reading's time is that offset plus its time_enabled. A kernel sample's timestamp is
/// taken before its counts are read (time_enabled with them), so timestamp − time_enabled is at
/// most the offset; a userspace read's counts (time_enabled with them) lie between the clock
/// reads before and after it, so the offset lies between those minus time_enabled. The estimate
/// is the tightest lower bound so far, let down by `DRIFT_PER` of the time_enabled since it was
/// learnt, and never above the latest upper bound.
#[derive(Debug, Clone, Copy)]
struct Anchor {
    offset: u64,
    at_enabled: u64,
}

impl Anchor {
    /// A reading with time_enabled `enabled` whose offset is at least `lo` and, when known, at
    /// most `hi`: its time on CLOCK_MONOTONIC.
    fn time(&mut self, enabled: u64, lo: u64, hi: Option<u64>) -> u64 {
        let slack = enabled.saturating_sub(self.at_enabled) / DRIFT_PER;
        let mut offset = self.offset.saturating_sub(slack).max(lo);
        if let Some(hi) = hi {
            offset = offset.min(hi);
        }
        self.offset = offset;
        self.at_enabled = self.at_enabled.max(enabled);
        offset.saturating_add(enabled)
    }
}

/// One group's readings not yet emitted and its delivery record.
#[derive(Debug)]
struct GroupState {
    /// Flat readings: `[k, t, enabled, running, value × width]` each, k strictly increasing.
    queue: VecDeque<u64>,
    width: usize,
    /// Last boundary queued (by the kernel or a userspace read); 0: none yet. And the time of
    /// that reading: a later reading must be later in time too, or counts would run backwards.
    last_k: u64,
    last_t: u64,
    /// The counts of that reading: perf counts are 64-bit and never go down.
    last_vals: Vec<u64>,
    /// Last boundary the kernel sampled by itself, and how many consecutive boundaries up to it.
    kernel_k: u64,
    streak: u64,
    /// Read from userspace at every boundary whose sample is missing.
    watched: bool,
    /// Boundaries delivered in a row that end the watch, the boundary it last ended at, and the
    /// last boundary it missed while trusted.
    hold: u64,
    trusted_at: u64,
    last_miss_k: u64,
    /// How long after its boundary the kernel's sample usually comes (the leader's timer phase).
    phase_ns: Option<u64>,
    /// A reader on the group's own CPU reads it at every boundary while it is watched (see
    /// `local`), so imc's own thread neither reads it nor wakes for it.
    covered: bool,
    /// Taken off every later reading's time_running: the running time of past pauses (see
    /// `pause`). While a pause is open, `(to, running)`: readings before `to`, and the first
    /// at or after it, get the running time of the last reading before the pause.
    run_offset: u64,
    frozen: Option<(u64, u64)>,
    /// time_running of the last reading handed out; time_enabled of the last one queued.
    popped_run: u64,
    /// The group's clock: readings' times from their time_enabled.
    anchor: Anchor,
    last_enabled: u64,
    dead: bool,
}

impl GroupState {
    /// The group missed boundary `k` while trusted: watch it again, for longer when it was
    /// trusted only recently.
    /// Returns false (and only remembers the miss) for a lone miss: a busy vCPU the host ran
    /// late misses one boundary now and then, which merges one interval, while waking at every
    /// boundary for it would cost more than a whole collect period's worth of wake-ups.
    fn relapse(&mut self, k: u64, min_hold: u64, max_hold: u64) -> bool {
        let lone = k.saturating_sub(self.last_miss_k) > RELAPSE_HOLDS * min_hold;
        self.last_miss_k = k;
        if lone {
            return false;
        }
        self.watched = true;
        self.streak = 0;
        self.hold = if k.saturating_sub(self.trusted_at) < RELAPSE_HOLDS * self.hold {
            (self.hold * 2).min(max_hold)
        } else {
            min_hold
        };
        true
    }

    fn push(&mut self, k: u64, t: u64, enabled: u64, running: u64, values: &[u64]) {
        let mut running = running.saturating_sub(self.run_offset);
        if let Some((to, base)) = self.frozen {
            if t >= to {
                self.run_offset += running.saturating_sub(base);
                self.frozen = None;
            }
            running = base;
        }
        self.last_enabled = enabled;
        self.queue.extend([k, t, enabled, running]);
        for j in 0..self.width {
            self.queue.push_back(values.get(j).copied().unwrap_or(0));
        }
        self.last_k = k;
        self.last_t = t;
        for (j, v) in self.last_vals.iter_mut().enumerate() {
            *v = values.get(j).copied().unwrap_or(0);
        }
    }

    /// Whether a reading of boundary `k` at `t` with `values` may follow the queued ones. The
    /// counts matter too: a read of an idle vCPU's group waits for that vCPU to wake, and the
    /// kernel's late sample taken as it wakes can carry a time after the read's midpoint but
    /// counts from before the read.
    fn fits(&self, k: u64, t: u64, values: &[u64]) -> bool {
        k > self.last_k
            && t > self.last_t
            && self.last_vals.iter().zip(values).all(|(last, v)| v >= last)
    }

    fn record(&self) -> usize {
        4 + self.width
    }
}

/// Boundaries `base + k × period` (k ≥ 1) of every group.
#[derive(Debug)]
pub struct Boundaries {
    base: u64,
    period: u64,
    /// Boundaries between wake-ups while no group is watched.
    stride: u64,
    min_hold: u64,
    max_hold: u64,
    groups: Vec<GroupState>,
    /// Last boundary at which missing groups were considered for a userspace read.
    handled_k: u64,
    /// A boundary whose late groups get a second look half a period after it.
    recheck: Option<u64>,
    /// How often a trusted group was found missing a boundary (for `-v`).
    pub watch_entries: u64,
    /// How long after a boundary a local reader reads its groups.
    reader_offset: u64,
}

impl Boundaries {
    /// `widths[g]`: the counters of group g (its leader's own value left out). `base` is
    /// CLOCK_MONOTONIC just before the leaders were enabled, so samples are never early.
    pub fn new(base: u64, period: u64, widths: &[usize]) -> Boundaries {
        let period = period.max(1);
        Boundaries {
            base,
            period,
            stride: (COLLECT_NS / period).max(1),
            min_hold: (MIN_HOLD_NS / period).max(2),
            max_hold: (MAX_HOLD_NS / period).max(2),
            groups: widths
                .iter()
                .map(|&width| GroupState {
                    queue: VecDeque::with_capacity((4 + width) * 1024),
                    width,
                    last_k: 0,
                    last_t: 0,
                    last_vals: vec![0; width],
                    kernel_k: 0,
                    streak: 0,
                    // Until a group has shown that it delivers, its boundaries are patched, so
                    // the first intervals never merge.
                    watched: true,
                    hold: (MIN_HOLD_NS / period).max(2),
                    trusted_at: 0,
                    last_miss_k: 0,
                    phase_ns: None,
                    covered: false,
                    run_offset: 0,
                    frozen: None,
                    popped_run: 0,
                    // Every group is enabled after `base`.
                    anchor: Anchor {
                        offset: base,
                        at_enabled: 0,
                    },
                    last_enabled: 0,
                    dead: false,
                })
                .collect(),
            handled_k: 0,
            recheck: None,
            watch_entries: 0,
            reader_offset: 0,
        }
    }

    /// Group `g` is read at every boundary by a reader on its CPU, `offset` after the boundary,
    /// while it is watched (`covered`), or not.
    pub fn set_covered(&mut self, g: usize, covered: bool, offset: u64) {
        if let Some(s) = self.groups.get_mut(g) {
            s.covered = covered;
        }
        self.reader_offset = offset;
    }

    /// The kernel stopped group `g`'s counters from `from` to `to` (a throttle) while their
    /// time_running went on. What they missed is unknown, so every interval from the last
    /// reading before `from` to the first one at or after `to` gets no running time: its
    /// counters are reported as not counted there (JSON `missing`) rather than low. Later
    /// intervals count as usual.
    pub fn pause(&mut self, g: usize, from: u64, to: u64) {
        let Some(s) = self.groups.get_mut(g) else {
            return;
        };
        if to <= from {
            return;
        }
        let r = s.record();
        let mut base = s.popped_run;
        let mut i = 0;
        while i + r <= s.queue.len() && s.queue[i + 1] <= from {
            base = s.queue[i + 3];
            i += r;
        }
        // Queued readings after `from`: frozen up to the first at or after `to`, shifted after.
        let mut shift = None;
        while i + r <= s.queue.len() {
            let (t, run) = (s.queue[i + 1], s.queue[i + 3]);
            match shift {
                None => {
                    if t >= to {
                        shift = Some(run.saturating_sub(base));
                    }
                    s.queue[i + 3] = base;
                }
                Some(d) => s.queue[i + 3] = run.saturating_sub(d),
            }
            i += r;
        }
        match shift {
            Some(d) => s.run_offset += d,
            None => s.frozen = Some((to, base)),
        }
        // The boundaries inside the window it has no reading for get a stand-in, so the other
        // groups' intervals there stay apart instead of merging; with no running time, its
        // counters show as not counted in them. Its time keeps the group's usual phase after
        // the boundary, so the boundary's mean time moves as the other groups' times do.
        let time_of = |k: u64| self.base.saturating_add(k.saturating_mul(self.period));
        // At most what [`Self::sample_boundary`] still labels the boundary's own.
        let phase = s
            .last_t
            .saturating_sub(time_of(s.last_k))
            .min(self.period - self.period / 20 - 1);
        let first = (from.saturating_sub(self.base) / self.period + 1).max(s.last_k + 1);
        let last = to.saturating_sub(self.base) / self.period;
        for k in first..=last {
            let t = time_of(k) + phase;
            let enabled = s.last_enabled + t.saturating_sub(s.last_t.max(from));
            s.queue.extend([k, t, enabled, base]);
            s.queue.extend(s.last_vals.iter().copied());
            s.last_k = k;
        }
    }

    /// Whether group `g` is watched: its boundaries must be read from userspace.
    pub fn is_watched(&self, g: usize) -> bool {
        self.groups.get(g).is_some_and(|s| s.watched && !s.dead)
    }

    /// The boundary a kernel sample taken at `t` belongs to (as `kernel_sample` labels it).
    pub fn sample_boundary(&self, t: u64) -> u64 {
        (t.saturating_sub(self.base) + self.period / 20) / self.period
    }

    pub fn period(&self) -> u64 {
        self.period
    }

    /// CLOCK_MONOTONIC of boundary 0.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The last boundary at or before `t` (0 before the first).
    pub fn boundary_at(&self, t: u64) -> u64 {
        t.saturating_sub(self.base) / self.period
    }

    pub fn time_of(&self, k: u64) -> u64 {
        self.base.saturating_add(k.saturating_mul(self.period))
    }

    /// A sample the kernel took at `t`. It belongs to the boundary just before it: timers start
    /// after `base` and are only ever late, and 5% of a period absorbs clock rounding. Its time
    /// as a reading is its group's clock at `enabled`, `t` at the earliest.
    pub fn kernel_sample(&mut self, g: usize, t: u64, enabled: u64, running: u64, values: &[u64]) {
        let k = self.sample_boundary(t);
        let phase = t.saturating_sub(self.time_of(k));
        let Some(s) = self.groups.get_mut(g) else {
            return;
        };
        if s.dead || k == 0 || k <= s.kernel_k {
            return;
        }
        if k > s.kernel_k + 1 && !s.watched && s.kernel_k > 0 {
            // It skipped a boundary between two collect wake-ups: that one merged.
            if s.relapse(k, self.min_hold, self.max_hold) {
                self.watch_entries += 1;
            }
        }
        s.streak = if k == s.kernel_k + 1 { s.streak + 1 } else { 1 };
        s.kernel_k = k;
        // A decaying maximum: imc wakes after nearly every sample, not after the average one.
        s.phase_ns = Some(s.phase_ns.map_or(phase, |p| phase.max(p - p / 32)));
        if s.watched && s.streak >= s.hold {
            s.watched = false;
            s.trusted_at = k;
        }
        let t = s.anchor.time(enabled, t.saturating_sub(enabled), None);
        // A boundary already patched from userspace keeps that reading. A sample labelled with a
        // later boundary but taken before the last patch (its timer's phase is close to a whole
        // period, after a throttle restarted it) is dropped too.
        if s.fits(k, t, values) {
            s.push(k, t, enabled, running, values);
        }
    }

    /// At `now`: the boundary whose missing groups must be read from userspace now, with those
    /// groups in `out` (empty when none). `final_k` is a boundary that must close on time
    /// whatever the schedule (the end of `--duration`).
    pub fn plan(&mut self, now: u64, final_k: Option<u64>, out: &mut Vec<usize>) -> u64 {
        out.clear();
        let k = self.boundary_at(now);
        let second_look =
            self.recheck == Some(k) && now >= self.time_of(k).saturating_add(self.period / 2);
        if k == 0 || (k <= self.handled_k && !second_look) {
            return k;
        }
        self.handled_k = k;
        self.recheck = None;
        let aligned = k.is_multiple_of(self.stride) || final_k == Some(k);
        for (g, s) in self.groups.iter_mut().enumerate() {
            if s.dead || s.last_k >= k || (s.watched && s.covered) {
                continue;
            }
            // Its sample for the previous boundary never came either: its CPU went quiet.
            let missed = s.kernel_k + 1 < k;
            if !missed && !second_look && (s.watched || aligned) {
                self.recheck = Some(k);
                continue;
            }
            if !s.watched && (missed || aligned) {
                if s.relapse(k, self.min_hold, self.max_hold) {
                    self.watch_entries += 1;
                } else if aligned {
                    // A lone miss at a collect wake-up: read it this once.
                    out.push(g);
                    continue;
                }
            }
            if s.watched {
                s.streak = 0;
                out.push(g);
            }
        }
        k
    }

    /// A userspace read of group `g` for boundary `k` (from `plan`), between the clock reads
    /// `(before, after)`; its time is its group's clock at `enabled`, within them. A read that
    /// only happened after the next boundary (imc was preempted) may postdate the kernel's
    /// sample of that boundary, so it is dropped rather than let counts run backwards; boundary
    /// `k` then merges into its neighbour. So is a read so late that a kernel sample taken then
    /// would be labelled the next boundary ([`Self::sample_boundary`]): every time a boundary
    /// is given, and so their mean, its interval's end, is one that rule labels that boundary.
    /// Returns whether the read was kept.
    pub fn patched(
        &mut self,
        g: usize,
        k: u64,
        (before, after): (u64, u64),
        enabled: u64,
        running: u64,
        values: &[u64],
    ) -> bool {
        let next = self.time_of(k + 1).saturating_sub(self.period / 20);
        let Some(s) = self.groups.get_mut(g).filter(|s| !s.dead) else {
            return false;
        };
        let (lo, hi) = (
            before.saturating_sub(enabled),
            after.saturating_sub(enabled),
        );
        let t = s.anchor.time(enabled, lo, Some(hi.max(lo)));
        let kept = s.fits(k, t, values) && t < next;
        if kept {
            s.push(k, t, enabled, running, values);
        }
        kept
    }

    /// Group `g` stopped (its CPU went offline): it no longer holds boundaries back.
    pub fn kill(&mut self, g: usize) {
        if let Some(s) = self.groups.get_mut(g) {
            s.dead = true;
            s.queue.clear();
        }
    }

    pub fn is_dead(&self, g: usize) -> bool {
        self.groups.get(g).is_none_or(|s| s.dead)
    }

    pub fn watched(&self) -> usize {
        self.groups.iter().filter(|s| s.watched && !s.dead).count()
    }

    /// Watched groups no local reader covers: imc's own thread reads them at every boundary.
    fn watched_uncovered(&self) -> usize {
        self.groups
            .iter()
            .filter(|s| s.watched && !s.covered && !s.dead)
            .count()
    }

    /// The next boundary every live group has a reading for, in order: `(k, mean time)`, with
    /// `out[g]` filled with `[enabled, running, values...]` of each live group. Boundaries some
    /// group has no reading for are dropped: the interval around them is longer.
    pub fn pop_complete(&mut self, out: &mut [Vec<u64>]) -> Option<(u64, u64)> {
        loop {
            let mut live = self.groups.iter().filter(|s| !s.dead).peekable();
            live.peek()?;
            let mut kmax = 0;
            for s in live {
                kmax = kmax.max(*s.queue.front()?);
            }
            let mut complete = true;
            for s in self.groups.iter_mut().filter(|s| !s.dead) {
                if s.queue[0] < kmax {
                    complete = false;
                    let n = s.record();
                    s.queue.drain(..n);
                }
            }
            if !complete {
                continue;
            }
            let mut tsum: u128 = 0;
            let mut n: u128 = 0;
            for (g, s) in self.groups.iter_mut().enumerate() {
                if s.dead {
                    continue;
                }
                tsum += u128::from(s.queue[1]);
                n += 1;
                if let Some(o) = out.get_mut(g) {
                    o.clear();
                    o.extend(s.queue.range(2..s.record()));
                }
                s.popped_run = s.queue[3];
                let r = s.record();
                s.queue.drain(..r);
            }
            return Some((kmax, (tsum / n.max(1)) as u64));
        }
    }

    /// When to wake next: just after the next boundary that needs a look (every boundary while
    /// a group no local reader covers is watched, else the next aligned one or `final_k`), late
    /// enough that the delivering groups' samples and the local readers' readings are in.
    pub fn next_wake(&self, final_k: Option<u64>) -> u64 {
        let next = self.handled_k + 1;
        let k = if self.watched_uncovered() > 0 {
            next
        } else {
            let aligned = next.div_ceil(self.stride) * self.stride;
            match final_k {
                Some(f) if f >= next && f < aligned => f,
                _ => aligned,
            }
        };
        let at = self.time_of(k).saturating_add(self.wake_offset());
        match self.recheck {
            Some(r) => at.min(self.time_of(r).saturating_add(self.period / 2)),
            None => at,
        }
    }

    /// How long after a boundary imc wakes: after the latest usual sample time of the groups
    /// that deliver, plus a margin; within the first half of the period.
    fn wake_offset(&self) -> u64 {
        let phase = self
            .groups
            .iter()
            .filter(|s| !s.dead)
            .filter_map(|s| s.phase_ns)
            .max()
            .unwrap_or(MARGIN_NS);
        let read = if self
            .groups
            .iter()
            .any(|s| s.watched && s.covered && !s.dead)
        {
            self.reader_offset
        } else {
            0
        };
        (phase.max(read) + MARGIN_NS).min(self.period / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 1_000_000;
    const BASE: u64 = 5_000_000_000;

    /// time_enabled at `t` of a group enabled at BASE.
    fn en(t: u64) -> u64 {
        t - BASE
    }

    /// Boundary `k`'s time for a `Boundaries::new(BASE, P, ..)`.
    fn at(k: u64) -> u64 {
        BASE + k * P
    }

    /// The kernel's sample of group `g` taken at `t`, its counts with it.
    fn sample_at(b: &mut Boundaries, g: usize, t: u64, values: &[u64]) {
        b.kernel_sample(g, t, en(t), en(t), values);
    }

    /// A tight userspace read of group `g` for boundary `k` at `t`.
    fn read_at(b: &mut Boundaries, g: usize, k: u64, t: u64, values: &[u64]) -> bool {
        b.patched(g, k, (t, t), en(t), en(t), values)
    }

    fn drain(b: &mut Boundaries, groups: usize) -> Vec<(u64, u64, Vec<Vec<u64>>)> {
        let mut out = vec![Vec::new(); groups];
        let mut v = Vec::new();
        while let Some((k, t)) = b.pop_complete(&mut out) {
            v.push((k, t, out.clone()));
        }
        v
    }

    /// Group 0 delivers every boundary 20 µs late; group 1 (an idle CPU) never does: every
    /// boundary still closes, group 1's by a read right after it, and no interval merges.
    #[test]
    fn an_idle_group_is_read_at_every_boundary() {
        let mut b = Boundaries::new(BASE, P, &[1, 1]);
        let mut patch = Vec::new();
        let mut emitted = Vec::new();
        let mut now = BASE;
        let mut wakes = 0;
        while emitted.len() < 2000 {
            wakes += 1;
            assert!(wakes <= 2001, "one wake-up per boundary, two for the first");
            let wake = b.next_wake(None);
            assert!(wake > now, "wake-ups move forward");
            now = wake;
            let k = b.boundary_at(now);
            // The kernel's samples of group 0 up to now.
            b.kernel_sample(0, b.time_of(k) + 20_000, 0, 0, &[k * 10]);
            let kp = b.plan(now, None, &mut patch);
            assert_eq!(kp, k);
            for &g in &patch {
                assert_eq!(g, 1, "group 0 delivered its own sample");
                b.patched(g, k, (now + 3_000, now + 3_000), 0, 0, &[k * 7]);
            }
            emitted.extend(drain(&mut b, 2));
        }
        assert_eq!(emitted.len(), 2000);
        for (i, (k, t, vals)) in emitted.iter().enumerate() {
            assert_eq!(*k, i as u64 + 1, "no boundary dropped");
            assert_eq!(vals[0][2], k * 10);
            assert_eq!(vals[1][2], k * 7);
            // The mean of the sample (20 µs) and the read (offset + 3 µs, or half a period for
            // the first boundary, where group 1 was given a second look) times.
            let off = t - b.time_of(*k);
            assert!(off < if *k == 1 { P / 2 } else { 200_000 }, "{k}: {off}");
        }
        assert_eq!(b.watched(), 1);
    }

    /// A read for a boundary is kept only while a kernel sample taken then would still be
    /// labelled that boundary: a later one would give the interval an end the next boundary's
    /// label covers.
    #[test]
    fn a_read_the_next_boundary_would_label_is_dropped() {
        let mut b = Boundaries::new(BASE, P, &[1]);
        let late = at(3) - P / 20;
        assert_eq!(b.sample_boundary(late), 3);
        assert_eq!(b.sample_boundary(late - 1), 2);
        assert!(
            read_at(&mut b, 0, 2, late - 1, &[1]),
            "the last time labelled 2 is kept"
        );
        assert!(
            !read_at(&mut b, 0, 3, at(4) - P / 20, &[2]),
            "labelled 4: dropped"
        );
        assert!(read_at(&mut b, 0, 3, at(3) + 1_000, &[2]));
        let mut out = vec![Vec::new(); 1];
        while let Some((k, t)) = b.pop_complete(&mut out) {
            assert_eq!(
                b.sample_boundary(t),
                k,
                "an interval's end is its boundary's"
            );
        }
    }

    /// While both groups deliver, imc wakes once per COLLECT_NS and reads nothing.
    #[test]
    fn delivering_groups_are_collected_every_stride_without_reads() {
        let mut b = Boundaries::new(BASE, P, &[1, 1]);
        let mut patch = Vec::new();
        let mut wakes = 0;
        let mut reads = 0;
        let mut now = BASE;
        let mut ksent = 0;
        let mut emitted = 0;
        while now < BASE + 2_000_000_000 {
            now = b.next_wake(None);
            wakes += 1;
            let k = b.boundary_at(now);
            while ksent < k {
                ksent += 1;
                for g in 0..2 {
                    b.kernel_sample(
                        g,
                        b.time_of(ksent) + 10_000 + g as u64 * 5_000,
                        1,
                        1,
                        &[ksent],
                    );
                }
            }
            b.plan(now, None, &mut patch);
            reads += patch.len();
            for &g in &patch {
                b.patched(g, k, (now, now), 1, 1, &[k]);
            }
            emitted += drain(&mut b, 2).len();
        }
        // Watched for MIN_HOLD_NS at the start (every boundary), then one wake per stride.
        let watched_wakes = (MIN_HOLD_NS / P) as usize;
        let rest = (2_000_000_000 - MIN_HOLD_NS) / COLLECT_NS;
        assert!(
            wakes <= watched_wakes + rest as usize + 2,
            "{wakes} wake-ups"
        );
        assert_eq!(reads, 0, "samples arrive before the wake-up");
        assert!(emitted >= 1999, "{emitted}");
        assert_eq!(b.watched(), 0);
    }

    /// A group that stops delivering between two collect wake-ups: the boundaries it missed
    /// merge (twice at most), then it is watched and read at every boundary; when its CPU gets
    /// busy again it is trusted again after MIN_HOLD_NS.
    #[test]
    fn a_group_going_quiet_is_watched_then_trusted_again() {
        let mut b = Boundaries::new(BASE, P, &[1, 1]);
        let mut patch = Vec::new();
        // Quiet from just after a collect wake-up (every 10th boundary) to boundary 800.
        let quiet = 405..800u64;
        let mut ksent = 0;
        let mut ks = Vec::new();
        let mut max_watched_after = 0;
        while ksent < 1600 {
            let now = b.next_wake(None);
            let k = b.boundary_at(now);
            while ksent < k {
                ksent += 1;
                b.kernel_sample(0, b.time_of(ksent) + 10_000, 0, 0, &[ksent]);
                if !quiet.contains(&ksent) {
                    b.kernel_sample(1, b.time_of(ksent) + 12_000, 0, 0, &[ksent]);
                }
            }
            b.plan(now, None, &mut patch);
            for &g in &patch {
                b.patched(g, k, (now, now), 0, 0, &[k]);
            }
            ks.extend(drain(&mut b, 2).into_iter().map(|e| e.0));
            if ksent > 800 + MIN_HOLD_NS / P + COLLECT_NS / P {
                max_watched_after = max_watched_after.max(b.watched());
            }
        }
        let gaps: Vec<u64> = ks
            .windows(2)
            .map(|w| w[1] - w[0])
            .filter(|&d| d > 1)
            .collect();
        // The first miss is taken for a lone one (a merge up to the collect wake-up, where it is
        // read once); the second, a stride later, starts the watch.
        assert!(
            (1..=2).contains(&gaps.len()) && gaps.iter().all(|&g| g <= COLLECT_NS / P),
            "at most two short merges when group 1 went quiet: {gaps:?}"
        );
        assert_eq!(max_watched_after, 0, "trusted again once busy");
    }

    /// Runs `n` boundaries where group 1 misses those `misses` says, waking when told; returns
    /// (wake-ups, boundaries emitted, boundaries at which group 1 was watched).
    fn run_misses(n: u64, misses: impl Fn(u64) -> bool) -> (u64, usize, u64) {
        let mut b = Boundaries::new(BASE, P, &[1, 1]);
        let mut patch = Vec::new();
        let (mut wakes, mut emitted, mut watched) = (0, 0, 0);
        let mut ksent = 0;
        while ksent < n {
            let now = b.next_wake(None);
            wakes += 1;
            let k = b.boundary_at(now);
            let kprev = ksent;
            watched += b.watched() as u64 * (k - kprev);
            while ksent < k {
                ksent += 1;
                b.kernel_sample(0, b.time_of(ksent) + 10_000, 0, 0, &[ksent]);
                if !misses(ksent) {
                    b.kernel_sample(1, b.time_of(ksent) + 10_000, 0, 0, &[ksent]);
                }
            }
            b.plan(now, None, &mut patch);
            for &g in &patch {
                b.patched(g, k, (now, now), 0, 0, &[k]);
            }
            emitted += drain(&mut b, 2).len();
        }
        (wakes, emitted, watched)
    }

    /// A lone miss costs a short watch; a CPU that keeps missing (an idle one) is watched for
    /// longer and longer, so its misses are patched instead of merging.
    #[test]
    fn the_watch_lengthens_for_groups_that_keep_missing() {
        let n = 10_000;
        let lone = run_misses(n, |k| k == 5_003);
        // The start and the lone miss: two short holds, else one wake-up per stride.
        let min = MIN_HOLD_NS / P;
        assert!(
            lone.0 <= 2 * min + 2 * COLLECT_NS / P + n / (COLLECT_NS / P) + 4,
            "{lone:?}"
        );
        assert!(lone.1 as u64 >= n - COLLECT_NS / P, "{lone:?}");
        // Missing one boundary in 37, 2% of them: watched nearly all the time, few merges.
        let idle = run_misses(n, |k| k % 37 == 0);
        assert!(idle.2 > n * 8 / 10, "watched only {} of {n}", idle.2);
        assert!(idle.1 as u64 >= n * 99 / 100, "{idle:?}");
    }

    /// A sample that arrives after its boundary was patched keeps the patched reading; a
    /// sample for the boundary after it is queued as usual.
    #[test]
    fn late_samples_do_not_duplicate_a_patched_boundary() {
        let mut b = Boundaries::new(BASE, P, &[1]);
        let mut patch = Vec::new();
        // Not there yet at the first look; still not there half a period later: read.
        assert_eq!(b.plan(b.time_of(1) + 60_000, None, &mut patch), 1);
        assert!(patch.is_empty());
        assert_eq!(b.boundary_at(b.next_wake(None)), 1);
        let now = b.time_of(1) + P / 2;
        assert_eq!(b.plan(now, None, &mut patch), 1);
        assert_eq!(patch, vec![0]);
        read_at(&mut b, 0, 1, now, &[100]);
        sample_at(&mut b, 0, at(1) + 70_000, &[101]);
        sample_at(&mut b, 0, at(2) + 10_000, &[200]);
        let got = drain(&mut b, 1);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].2[0][2], 100);
        assert_eq!(got[1].2[0][2], 200);
    }

    /// A read that only happened after the next boundary is dropped: the kernel's sample of
    /// that boundary may predate it, and counts must never run backwards.
    #[test]
    fn a_read_after_the_next_boundary_is_dropped() {
        let mut b = Boundaries::new(BASE, P, &[1]);
        let mut patch = Vec::new();
        assert_eq!(b.plan(b.time_of(1) + 60_000, None, &mut patch), 1);
        assert_eq!(b.plan(b.time_of(1) + P / 2, None, &mut patch), 1);
        assert_eq!(patch, vec![0]);
        assert!(!read_at(&mut b, 0, 1, at(2) + 5_000, &[300]));
        sample_at(&mut b, 0, at(2) + 1_000, &[250]);
        let got = drain(&mut b, 1);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].0, got[0].2[0][2]), (2, 250));
    }

    /// A sample whose timer phase is nearly a whole period is labelled with the next boundary.
    /// A read of the current one later still is dropped (a sample then would be the next
    /// boundary's), so the sample is queued in order and closes the next boundary, the current
    /// one merging into it.
    #[test]
    fn a_read_later_than_a_sample_of_the_next_boundary_is_dropped() {
        let mut b = Boundaries::new(BASE, P, &[1]);
        let mut patch = Vec::new();
        b.plan(b.time_of(1) + 60_000, None, &mut patch);
        b.plan(b.time_of(1) + P / 2, None, &mut patch);
        assert!(!read_at(&mut b, 0, 1, at(1) + 980_000, &[1_900]));
        // Taken at 1.96 P, labelled 2, 20 µs before the read that was dropped (at 1.98 P).
        sample_at(&mut b, 0, at(1) + 960_000, &[1_860]);
        sample_at(&mut b, 0, at(2) + 960_000, &[2_860]);
        let got: Vec<(u64, u64)> = drain(&mut b, 1).iter().map(|g| (g.0, g.2[0][2])).collect();
        assert_eq!(got, vec![(2, 1_860), (3, 2_860)]);
    }

    /// A reading taken after the kernel's sample of the same boundary can be dated before that
    /// sample (each date is only as good as its group's clock); the sample, with smaller counts
    /// than the reading queued before it, is dropped.
    #[test]
    fn a_sample_with_smaller_counts_than_the_last_reading_is_dropped() {
        let mut b = Boundaries::new(BASE, P, &[1]);
        let mut patch = Vec::new();
        b.plan(b.time_of(1) + 60_000, None, &mut patch);
        b.plan(b.time_of(1) + P / 2, None, &mut patch);
        assert!(read_at(&mut b, 0, 1, at(1) + P / 2 + 100_000, &[5_000]));
        sample_at(&mut b, 0, at(1) + 970_000, &[4_990]);
        sample_at(&mut b, 0, at(2) + 970_000, &[6_000]);
        let values: Vec<u64> = drain(&mut b, 1).iter().map(|g| g.2[0][2]).collect();
        assert_eq!(values, vec![5_000, 6_000]);
    }

    /// A watched group covered by a local reader: imc's own thread neither reads it nor wakes
    /// per boundary for it; the reader's readings (250 µs after each boundary) close every
    /// boundary, and imc wakes after them.
    #[test]
    fn a_covered_group_needs_no_wake_ups_per_boundary() {
        const OFFSET: u64 = 250_000;
        let mut b = Boundaries::new(BASE, P, &[1, 1]);
        let mut patch = Vec::new();
        let mut now = BASE;
        let (mut wakes, mut emitted, mut ksent) = (0u64, Vec::new(), 0u64);
        while ksent < 1_000 {
            now = b.next_wake(None).max(now + 1);
            wakes += 1;
            let k = b.boundary_at(now);
            while ksent < k {
                ksent += 1;
                b.kernel_sample(0, b.time_of(ksent) + 10_000, 0, 0, &[ksent]);
                // Group 1's CPU is idle: only its reader reads it, once covered.
                if b.time_of(ksent) + OFFSET <= now && ksent > 5 {
                    assert!(b.patched(
                        1,
                        ksent,
                        (b.time_of(ksent) + OFFSET, b.time_of(ksent) + OFFSET),
                        0,
                        0,
                        &[ksent * 3]
                    ));
                }
            }
            b.plan(now, None, &mut patch);
            for &g in &patch {
                assert_eq!(g, 1, "group 0 delivers");
                assert!(
                    k <= 5,
                    "a covered group is never read by imc's thread ({k})"
                );
                b.patched(g, k, (now, now), 0, 0, &[k * 3]);
            }
            if k == 5 {
                // After this wake-up's reads (as the backend does), the reader runs.
                assert!(b.is_watched(1));
                b.set_covered(1, true, OFFSET);
            }
            emitted.extend(drain(&mut b, 2));
        }
        // Boundaries whose reading comes after the wake-up wait for the next one; none is lost.
        let ks: Vec<u64> = emitted.iter().map(|e| e.0).collect();
        let gap = ks.iter().zip(1u64..).find(|(k, i)| *k != i);
        assert!(gap.is_none(), "boundary missing: {gap:?}");
        assert!(ks.len() >= 980, "{}", ks.len());
        // Per boundary until covered (and the first MIN_HOLD of group 0), then per stride.
        assert!(
            wakes <= MIN_HOLD_NS / P + 1_000 / (COLLECT_NS / P) + 4,
            "{wakes} wake-ups"
        );
        // imc wakes after the reader's reading, not before it.
        let w = b.next_wake(None);
        assert!(
            w - b.time_of(b.boundary_at(w)) > OFFSET,
            "wakes before the reader read"
        );
    }

    /// A pause freezes time_running from the last reading before it to the first reading at
    /// or after its end, queued or to come, so those intervals have no running time; the
    /// intervals after count their full time again.
    #[test]
    fn a_pause_leaves_the_intervals_around_it_not_running() {
        let mut b = Boundaries::new(BASE, P, &[1]);
        for k in 1..=3 {
            b.kernel_sample(0, b.time_of(k), 10, k * P, &[k]);
        }
        // Stopped from 2.5 P to 4.25 P: readings 3 (queued) and 4 (in it), and 5 (the first
        // after it) keep reading 2's running time.
        b.pause(0, b.time_of(2) + P / 2, b.time_of(4) + P / 4);
        for k in 4..=7 {
            b.kernel_sample(0, b.time_of(k), 10, k * P, &[k]);
        }
        let running: Vec<u64> = drain(&mut b, 1).iter().map(|e| e.2[0][1]).collect();
        assert_eq!(running, vec![P, 2 * P, 2 * P, 2 * P, 2 * P, 3 * P, 4 * P]);
        // A pause whose end is already queued: shifted at once.
        let mut b = Boundaries::new(BASE, P, &[1]);
        for k in 1..=4 {
            b.kernel_sample(0, b.time_of(k), 10, k * P, &[k]);
        }
        b.pause(0, b.time_of(1) + P / 2, b.time_of(2) + P / 2);
        b.kernel_sample(0, b.time_of(5), 10, 5 * P, &[5]);
        let running: Vec<u64> = drain(&mut b, 1).iter().map(|e| e.2[0][1]).collect();
        assert_eq!(running, vec![P, P, P, 2 * P, 3 * P]);
    }

    /// A group paused for several boundaries with no reading: the other group's boundaries
    /// still close one by one, the paused group's stand-ins keeping its phase, while it shows
    /// no running time until its first reading after the pause.
    #[test]
    fn a_pause_does_not_merge_the_other_groups_intervals() {
        let mut b = Boundaries::new(BASE, P, &[1, 1]);
        for k in 1..=10 {
            b.kernel_sample(0, b.time_of(k) + 5_000, k * P, k * P, &[k]);
            if k <= 3 {
                b.kernel_sample(1, b.time_of(k) + 7_000, k * P, k * P, &[k]);
            }
        }
        // Group 1 was throttled from just after boundary 3 until 8.5 P.
        b.pause(1, b.time_of(3) + 100_000, b.time_of(8) + P / 2);
        for k in 9..=10 {
            b.kernel_sample(1, b.time_of(k) + 7_000, k * P, k * P, &[k]);
        }
        let got = drain(&mut b, 2);
        let ks: Vec<u64> = got.iter().map(|e| e.0).collect();
        assert_eq!(ks, (1..=10).collect::<Vec<_>>());
        for (k, t, vals) in &got {
            assert_eq!(*t, b.time_of(*k) + 6_000, "boundary {k}");
            // Group 1: running frozen at boundary 3's from 4 to 9, enabled still moving.
            let run1 = vals[1][1];
            if (4..=9).contains(k) {
                assert_eq!(run1, 3 * P, "boundary {k}");
            }
            if *k == 10 {
                assert_eq!(run1, 4 * P);
            }
        }
        let enabled1: Vec<u64> = got.iter().map(|e| e.2[1][0]).collect();
        assert!(enabled1.windows(2).all(|w| w[1] > w[0]), "{enabled1:?}");
    }

    /// A dead group holds nothing back; the final boundary of --duration is always looked at.
    #[test]
    fn dead_groups_and_the_final_boundary() {
        let mut b = Boundaries::new(BASE, P, &[1, 2]);
        b.kill(1);
        b.kernel_sample(0, b.time_of(1) + 1_000, 0, 0, &[1]);
        assert_eq!(drain(&mut b, 2).len(), 1);
        // Not watched any more and 3 boundaries before the end: the wake-up lands on the end.
        for k in 2..=300 {
            b.kernel_sample(0, b.time_of(k) + 1_000, 0, 0, &[k]);
        }
        let mut patch = Vec::new();
        b.plan(b.time_of(300) + 2_000, None, &mut patch);
        assert_eq!(b.watched(), 0);
        let w = b.next_wake(Some(303));
        assert_eq!(b.boundary_at(w), 303);
        let w = b.next_wake(None);
        assert_eq!(b.boundary_at(w), 310);
    }

    /// A reading is dated by its time_enabled on its group's clock: a sample stamped before a
    /// stall that delayed its counts, and a read whose clock bracket a stall widened, are both
    /// dated when their counts were taken.
    #[test]
    fn readings_are_dated_by_their_time_enabled() {
        let mut b = Boundaries::new(BASE, P, &[1]);
        // Enabled 4 µs after BASE: the group's clock is BASE + 4 µs + time_enabled.
        let lag = 4_000;
        let at = |t: u64| t - BASE - lag;
        // Stamped 3 µs before its counts: the clock is learnt from below.
        let t1 = b.time_of(1) + 30_000;
        b.kernel_sample(0, t1 - 3_000, at(t1), at(t1), &[10]);
        // Counts of boundary 2 taken 300 µs after the sample's stamp.
        let t2 = b.time_of(2) + 330_000;
        b.kernel_sample(0, b.time_of(2) + 30_000, at(t2), at(t2), &[20]);
        // A read of boundary 3 whose counts came 100 µs into a 2 ms clock bracket.
        let t3 = b.time_of(3) + 100_000;
        let bracket = (t3 - 5_000, t3 + 2_000_000);
        assert!(b.patched(0, 3, bracket, at(t3), at(t3), &[30]));
        // A tight read says the clock is 2 µs later than learnt so far: it moves up.
        let t4 = b.time_of(4) + 250_000;
        assert!(b.patched(0, 4, (t4 + 1_000, t4 + 2_500), at(t4), at(t4), &[40]));
        let times: Vec<u64> = drain(&mut b, 1).iter().map(|o| o.1).collect();
        assert_eq!(times.len(), 4);
        // Each within the 3 µs the first sample's stamp was early and the drift allowance since
        // (1 µs per ms), where the raw times were 300 µs and 1 ms off; the last from the tight
        // read's start.
        for (got, truth) in times.iter().zip([t1, t2, t3]) {
            assert!(
                got.abs_diff(truth) <= 5_000,
                "dated {got}, counts at {truth}"
            );
        }
        assert_eq!(times[3], t4 + 1_000);
    }

    /// The clock learnt from one reading is trusted less as time passes (the kernel's clock
    /// and CLOCK_MONOTONIC drift apart), so a later lower bound below it takes over.
    #[test]
    fn the_group_clock_follows_a_drift() {
        let mut b = Boundaries::new(BASE, P, &[1]);
        let mut k = 0;
        let mut dated = Vec::new();
        // CLOCK_MONOTONIC runs 200 ppm slower than time_enabled: each sample's stamp, 1 µs
        // before its counts, falls behind the clock learnt before.
        for i in 1..=2_000u64 {
            k += 1;
            let enabled = i * P;
            let t = BASE + enabled - enabled / 5_000;
            b.kernel_sample(0, t - 1_000, enabled, enabled, &[i]);
            dated.extend(drain(&mut b, 1).iter().map(|o| (o.1, t)));
        }
        assert_eq!(k, 2_000);
        let worst = dated.iter().map(|&(d, t)| d.abs_diff(t)).max().unwrap();
        assert!(worst <= 2_000, "a reading dated {worst} ns off its counts");
    }
}

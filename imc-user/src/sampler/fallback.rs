//! When userspace must read a package counter itself: when no tick of its package has read it
//! for a while.
//!
//! An idle CPU gets almost no cpu-clock ticks (NOHZ), so while every CPU allowed to read a
//! package counter idles, the counter is not read at all — yet DMA keeps moving bytes. Reading
//! it only at interval ends would keep the bytes but mis-time them: the first span after the
//! idle stretch would run from the last interval end to the first tick, and the idle time's
//! traffic would be spread over whatever ran at the end of that span. Reading it from userspace
//! as soon as no tick has read it for `max_age` bounds that error to `max_age`, costs one
//! `read(2)` per counter per drain while a package idles, and nothing while it is busy.
use imc_common::Record;

/// How long a package counter may go unread by ticks before userspace reads it: two drain
/// periods (a tick read in the last one may still sit undrained), or two tick periods when the
/// tick is slower than the drain.
pub fn max_age_ns(freq_hz: u32, drain_period_ms: u32) -> u64 {
    let tick_ns = 1_000_000_000u64 / u64::from(freq_hz.max(1));
    2 * tick_ns.max(u64::from(drain_period_ms.max(1)) * 1_000_000)
}

#[derive(Clone, Debug)]
struct Instance {
    slot: usize,
    open_cpu: u32,
    /// No tick reads it: due at every drain.
    always: bool,
    /// Time of the newest reading of this counter (tick or userspace); 0: none yet.
    last_t: u64,
}

/// Freshness of every package counter instance (slot, CPU it was opened on).
#[derive(Clone, Debug, Default)]
pub struct IdleFallback {
    instances: Vec<Instance>,
    /// Per CPU: the instances its ticks may read (the array entries it was given).
    by_cpu: Vec<Vec<u16>>,
    max_age_ns: u64,
}

impl IdleFallback {
    /// `instances`: (slot, CPU the counter is opened on, CPUs whose ticks read it).
    pub fn new(instances: &[(usize, u32, Vec<u32>)], max_age_ns: u64) -> IdleFallback {
        let mut f = IdleFallback {
            max_age_ns,
            ..Default::default()
        };
        for (i, (slot, open_cpu, readers)) in instances.iter().enumerate() {
            f.instances.push(Instance {
                slot: *slot,
                open_cpu: *open_cpu,
                always: readers.is_empty(),
                last_t: 0,
            });
            for &r in readers.iter().chain(std::iter::once(open_cpu)) {
                let r = r as usize;
                if f.by_cpu.len() <= r {
                    f.by_cpu.resize(r + 1, Vec::new());
                }
                if !f.by_cpu[r].contains(&(i as u16)) {
                    f.by_cpu[r].push(i as u16);
                }
            }
        }
        f
    }

    /// (slot, CPU it is opened on) of every instance.
    pub fn instances(&self) -> Vec<(usize, u32)> {
        self.instances
            .iter()
            .map(|i| (i.slot, i.open_cpu))
            .collect()
    }

    pub fn max_age_ns(&self) -> u64 {
        self.max_age_ns
    }

    /// One drained record: a package slot it read successfully is fresh as of its time.
    #[inline]
    pub fn observe(&mut self, rec: &Record) {
        let Some(list) = self.by_cpu.get(rec.cpu as usize) else {
            return;
        };
        for &i in list {
            let inst = &mut self.instances[i as usize];
            if inst.slot < usize::from(rec.nr_slots)
                && rec.failed_mask & (1 << inst.slot) == 0
                && rec.t_ns > inst.last_t
            {
                inst.last_t = rec.t_ns;
            }
        }
    }

    /// Instances no reading has refreshed within `max_age` before `now_ns`, and those no tick
    /// reads (all of them when `all`), as (index, slot, CPU the counter is opened on).
    pub fn due(&self, now_ns: u64, all: bool) -> Vec<(usize, usize, u32)> {
        self.instances
            .iter()
            .enumerate()
            .filter(|(_, i)| {
                all || i.always
                    || i.last_t == 0
                    || now_ns.saturating_sub(i.last_t) > self.max_age_ns
            })
            .map(|(n, i)| (n, i.slot, i.open_cpu))
            .collect()
    }

    /// A userspace reading of instance `index` at `t_ns`.
    pub fn mark_read(&mut self, index: usize, t_ns: u64) {
        if let Some(i) = self.instances.get_mut(index) {
            i.last_t = i.last_t.max(t_ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use imc_common::{MAX_SLOTS, SlotReading};

    fn rec(cpu: u32, t: u64, failed: u8) -> Record {
        Record {
            t_ns: t,
            cgroup_id: 0,
            cpu,
            pid: 1,
            tgid: 1,
            kind: 0,
            nr_slots: 2,
            failed_mask: failed,
            flags: 0,
            comm: [0; 16],
            t0_ns: 0,
            on_ns: 0,
            slots: [SlotReading::default(); MAX_SLOTS],
        }
    }

    #[test]
    fn due_only_when_no_reader_ticked_recently() {
        // Two packages: slot 0 opened on CPUs 0 and 2, readable by {0,1} and {2,3}.
        let mut f = IdleFallback::new(&[(0, 0, vec![0, 1]), (0, 2, vec![2, 3])], 20);
        assert_eq!(f.due(5, false).len(), 2, "never read: both due at once");
        f.observe(&rec(1, 100, 0));
        f.observe(&rec(3, 90, 0b01));
        assert_eq!(
            f.due(110, false),
            [(1, 0, 2)],
            "CPU 3's read of slot 0 failed"
        );
        f.mark_read(1, 110);
        assert!(f.due(120, false).is_empty());
        // A tick of another package, or of an unreadable slot, keeps nobody fresh.
        f.observe(&rec(2, 200, 0b01));
        f.observe(&rec(5, 200, 0));
        assert_eq!(f.due(131, false), [(0, 0, 0), (1, 0, 2)]);
        assert_eq!(f.due(0, true).len(), 2);
    }

    #[test]
    fn an_instance_no_tick_reads_is_due_at_every_drain() {
        let mut f = IdleFallback::new(&[(0, 0, vec![])], 20);
        f.mark_read(0, 100);
        assert_eq!(f.due(101, false), [(0, 0, 0)]);
    }
}

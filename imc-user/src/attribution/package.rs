//! A package counter's readings: chained into spans between consecutive readings (modulo the
//! counter's width, scaled for multiplexing), the span across the point spread to divided by
//! time, and each package's spans spread over the tasks that ran on its CPUs when an
//! interval is closed.

use super::spread::{self, Span};
use super::state::{Attributor, MAX_CPU, PkgSlot, PkgState, Reading};
use super::tasks::IDLE;
use crate::model::Topology;
use imc_common::{MAX_SLOTS, SlotReading};

/// Package segments older than this behind the interval end are dropped even if no package
/// reading has come to spread over them (a package counter nobody can read).
pub(super) const MAX_LAG_NS: u64 = 5_000_000_000;

/// Delta of a cumulative counter between two readings: modulo the counter width, scaled by
/// Δenabled/Δrunning when the counter was multiplexed in between.
#[inline]
pub fn scaled_delta(prev: &SlotReading, cur: &SlotReading, mask: u64, times: bool) -> f64 {
    let dv = cur.value.wrapping_sub(prev.value) & mask;
    if !times || cur.enabled < prev.enabled || cur.running < prev.running {
        return dv as f64;
    }
    let de = cur.enabled - prev.enabled;
    let dr = cur.running - prev.running;
    if dr > 0 && de > dr {
        dv as f64 * (de as f64 / dr as f64)
    } else {
        dv as f64
    }
}

pub(super) fn width_mask(bits: u8) -> u64 {
    if bits == 0 || bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

impl PkgSlot {
    /// Chains the pending readings up to `limit` into spans (each from the last reading
    /// used), dropping late and overlapping readings. Returns the count of zero-length spans
    /// at the end that no later span carries yet.
    fn chain_spans(&mut self, limit: u64, mask: u64) -> f64 {
        self.spans.clear();
        self.pending.sort_unstable_by_key(|r| r.t);
        let upto = self.pending.partition_point(|r| r.t <= limit);
        let mut carry = 0.0;
        for r in self.pending.drain(..upto) {
            let Some(b) = self.base else {
                self.base = Some(r);
                continue;
            };
            if r.t < b.t {
                continue; // late reading of an already spread span
            }
            if mask == u64::MAX && r.r.value < b.r.value {
                // A 64-bit count (the kernel's, or a sum of them) never wraps: a smaller
                // one is a reading that overlapped the previous (a userspace read whose
                // counters were read around a tick's), not a wrap. Keep the base.
                continue;
            }
            let d = scaled_delta(&b.r, &r.r, mask, b.times && r.times);
            if r.t == b.t {
                carry += d; // zero-length span: the next one carries it
            } else {
                self.spans.push(Span {
                    t0: b.t,
                    t1: r.t,
                    d: d + carry,
                });
                carry = 0.0;
            }
            self.base = Some(r);
        }
        // The span across the limit (the interval end, or as far as every CPU is known): its
        // part before the limit by time, the reading interpolated there as the new base, so
        // the rest is the next interval's and nothing is counted twice or lost.
        if let (Some(b), Some(r)) = (self.base, self.pending.first().copied())
            && b.t < limit
            && r.t > limit
            && !(mask == u64::MAX && r.r.value < b.r.value)
        {
            let f = (limit - b.t) as f64 / (r.t - b.t) as f64;
            let times = b.times && r.times;
            let mid = Reading {
                t: limit,
                r: interpolate(&b.r, &r.r, mask, f),
                times,
            };
            let d = scaled_delta(&b.r, &mid.r, mask, times);
            self.spans.push(Span {
                t0: b.t,
                t1: limit,
                d: d + carry,
            });
            carry = 0.0;
            self.base = Some(mid);
        }
        carry
    }
}

/// The reading a fraction `f` of the way from `a` to `b` (counts and times alike, so the
/// multiplexing scale of either part is the whole span's).
pub(super) fn interpolate(a: &SlotReading, b: &SlotReading, mask: u64, f: f64) -> SlotReading {
    let part = |from: u64, to: u64, m: u64| {
        let d = to.wrapping_sub(from) & m;
        from.wrapping_add((d as f64 * f) as u64) & m
    };
    let time = |from: u64, to: u64| {
        if to >= from {
            from + ((to - from) as f64 * f) as u64
        } else {
            from
        }
    };
    SlotReading {
        value: part(a.value, b.value, mask),
        enabled: time(a.enabled, b.enabled),
        running: time(a.running, b.running),
    }
}

impl PkgState {
    /// Keeps segments that reach past some slot's frontier: their later part is spread when
    /// the next readings arrive.
    fn keep_unspread_segments(&mut self, t_end: u64) {
        let frontier = self
            .slots
            .iter()
            .map(|ps| ps.base.map_or(0, |b| b.t))
            .min()
            .unwrap_or(u64::MAX);
        let floor = t_end.saturating_sub(MAX_LAG_NS);
        self.segs.retain(|s| s.end > frontier && s.end > floor);
    }
}

/// Each package's state with a slot for every package-scope slot (of `nslots`, bits in
/// `pkg_mask`), and per CPU number the index of its package (u32::MAX: none).
pub(super) fn package_states(
    topology: &Topology,
    nslots: usize,
    pkg_mask: u8,
) -> (Vec<PkgState>, Vec<u32>) {
    let mut cpu_pkg_init = Vec::new();
    let packages = topology
        .packages
        .iter()
        .enumerate()
        .map(|(pi, p)| {
            for &c in &p.cpus {
                if c < MAX_CPU {
                    let c = c as usize;
                    if cpu_pkg_init.len() <= c {
                        cpu_pkg_init.resize(c + 1, u32::MAX);
                    }
                    cpu_pkg_init[c] = pi as u32;
                }
            }
            PkgState {
                id: p.id,
                cpus: p.cpus.clone(),
                slots: (0..nslots)
                    .filter(|s| pkg_mask & (1 << s) != 0)
                    .map(|slot| PkgSlot {
                        slot,
                        pending: Vec::new(),
                        base: None,
                        spans: Vec::new(),
                    })
                    .collect(),
                segs: Vec::new(),
                acc: [0.0; MAX_SLOTS],
                idle: [0.0; MAX_SLOTS],
                device: [0.0; MAX_SLOTS],
            }
        })
        .collect();
    (packages, cpu_pkg_init)
}

impl Attributor {
    /// A userspace read of a package counter (the fallback while every CPU of the package is
    /// idle and no tick reads it). `package` is the package id; readings without
    /// enabled/running are used unscaled.
    pub fn push_package_read(&mut self, package: u32, slot: usize, t_ns: u64, value: u64) {
        self.push_package_reading(
            package,
            slot,
            t_ns,
            SlotReading {
                value,
                enabled: 0,
                running: 0,
            },
        );
    }

    /// Like [`push_package_read`](Self::push_package_read) with enabled/running (from
    /// `read()` with PERF_FORMAT_TOTAL_TIME_ENABLED|RUNNING); zero times mean "unknown".
    pub fn push_package_reading(&mut self, package: u32, slot: usize, t_ns: u64, r: SlotReading) {
        if self.t_start.is_none() {
            self.t_start = Some(t_ns);
        }
        let times = r.enabled != 0 || r.running != 0;
        if let Some(p) = self.packages.iter_mut().find(|p| p.id == package)
            && let Some(ps) = p.slots.iter_mut().find(|ps| ps.slot == slot)
        {
            ps.pending.push(Reading { t: t_ns, r, times });
        }
    }

    /// Spreads each package's counter readings up to `t_end` (the run's end when `last`) over
    /// the tasks that ran on its CPUs.
    pub(super) fn spread_packages(&mut self, t_end: u64, last: bool) {
        // Out of self while spread: the steps below take the rest of self.
        let mut packages = std::mem::take(&mut self.packages);
        for p in &mut packages {
            let limit = if last {
                t_end
            } else {
                self.spread_limit(p, t_end)
            };
            // Chain each slot's readings up to the limit into spans.
            for ps in &mut p.slots {
                let carry = ps.chain_spans(limit, width_mask(self.specs[ps.slot].counter_bits));
                if carry != 0.0 {
                    // Nothing after it yet: count it without a task (it has no time to spread
                    // over) rather than lose it.
                    self.idle_acc[ps.slot] += carry;
                    p.acc[ps.slot] += carry;
                    p.idle[ps.slot] += carry;
                }
            }
        }
        let routes = self.routes(&packages);
        for (pi, p) in packages.iter_mut().enumerate() {
            if p.slots.iter().any(|ps| !ps.spans.is_empty()) {
                spread::build_events(&p.segs, &mut self.events, &mut self.scratch);
            }
            self.scratch.route.clear();
            if let Some(r) = routes.get(pi) {
                self.scratch.route.extend_from_slice(r);
            }
            self.apportion_spans(p);
            p.keep_unspread_segments(t_end);
        }
        self.scratch.route.clear();
        self.packages = packages;
    }

    /// How far a package's readings can be spread now: up to where every CPU whose segments
    /// weigh its traffic is known (no further back than the longest gap allowed).
    fn spread_limit(&self, p: &PkgState, t_end: u64) -> u64 {
        let floor = t_end.saturating_sub(self.max_gap_ns);
        // With remote weights every CPU's segments weigh this package's traffic.
        let cpus: &[u32] = if self.numa { &self.all_cpus } else { &p.cpus };
        cpus.iter()
            .map(|&c| {
                let known = match self.cpus.get(c as usize) {
                    Some(st) if st.have_t => st.seg_start,
                    _ => 0,
                };
                known.max(floor)
            })
            .min()
            .unwrap_or(t_end)
            .min(t_end)
    }

    /// Each slot's spans apportioned to the tasks by the segments' weights: the package's
    /// totals, the tasks' shares, and what no task took.
    fn apportion_spans(&mut self, p: &mut PkgState) {
        let nslots = self.specs.len();
        // (slot list index, class) whose weighing is in the scratch buffers: a read and a
        // write counter read at the same ticks share it, which halves the first sweep.
        let mut weighed: Option<(usize, usize)> = None;
        for (k, ps) in p.slots.iter().enumerate() {
            if ps.spans.is_empty() || ps.slot >= nslots {
                continue;
            }
            let s = ps.slot;
            let total: f64 = ps.spans.iter().map(|sp| sp.d).sum();
            p.acc[s] += total;
            let class = usize::from(self.slot_class[s]);
            let reuse = weighed.is_some_and(|(j, c)| {
                c == class && spread::same_bounds(&p.slots[j].spans, &ps.spans)
            });
            if !reuse {
                spread::weigh(&ps.spans, &p.segs, &self.events, class, &mut self.scratch);
                weighed = Some((k, class));
            }
            // Weights that account for fewer bytes than the controller counted are charged
            // their bytes; the rest no core saw.
            self.scratch.fixed_price = self.accounts[s].filter(|&price| {
                let (w, d) = spread::weighed_totals(&ps.spans, &self.scratch);
                w * price < d
            });
            let tasks = &mut self.tasks;
            let idle_before = self.idle_acc[s];
            let idle = &mut self.idle_acc[s];
            let un = spread::apportion(
                &ps.spans,
                &p.segs,
                &self.events,
                class,
                &mut self.scratch,
                |task, amount| {
                    if task == IDLE {
                        *idle += amount;
                    } else {
                        tasks.add(task, s, amount);
                    }
                },
            );
            let unseen = std::mem::take(&mut self.scratch.unseen);
            self.scratch.fixed_price = None;
            *idle += un + unseen;
            // Spans in which no CPU ran and what the weights did not see: device traffic.
            self.device_acc[s] += un + unseen;
            p.device[s] += un + unseen;
            p.idle[s] += self.idle_acc[s] - idle_before;
            // Spans priced by time although this class has weights: counted, not silent.
            let fell_back = std::mem::take(&mut self.scratch.time_fallbacks);
            if self.classes[class].local != 0 {
                self.time_fallbacks += fell_back;
            }
        }
    }
}

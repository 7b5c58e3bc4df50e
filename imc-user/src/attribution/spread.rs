//! Spreading a package counter's deltas over the tasks that ran on the package's CPUs.
//!
//! The package counter is read now and then (at ticks of CPUs allowed to read it, at context
//! switches in precise mode, by userspace when the package is idle). Between two consecutive
//! readings lies a *span* with a known delta `D`. Each CPU of the package contributes
//! *segments* — the time between two of its records, owned by the task of the later record —
//! each with a weight rate (the Weight counters' delta over the segment, per ns) and a busy flag
//! (a task, not the idle task, ran).
//!
//! Within a span, `D` goes to segments in proportion to the weight they put into the span
//! (`rate × overlap`), or, when the span has no usable weight (no Weight counter, a failed weight
//! read, or zero weight), in proportion to on-CPU time. A segment carries up to
//! [`MAX_CLASSES`] weight rates: one per set of Weight counters some package counter is weighed
//! by (read misses for read traffic, writebacks for write traffic, all of them for the rest). Whatever goes to the idle task, and the
//! whole `D` of a span in which nothing ran, is unattributed: it is returned, never spread.
//!
//! Cost: a span-by-segment overlap loop would cost spans × segments per span (64 CPUs reading
//! at 1 kHz put ~64 spans inside every 1 ms segment). Instead, with `π(t)` the price of one
//! weight unit at time t (`D / W` of the span holding t) and `Π(t)` its integral, a segment with
//! constant rate `r` over `[a, b]` receives `r·(Π(b) − Π(a))`: one term at each of its two
//! boundary events. Two sweeps over the time-sorted events and spans make the whole thing
//! O((events + spans) + sort).
use super::tasks::IDLE;

/// [`Segment::time_share`] of a segment its task ran all of: the fixed point of time shares,
/// kept integral so that the sweep adds and removes them exactly.
pub const SHARE_ONE: u32 = 1 << 20;

/// Distinct weight classes a segment carries: read-direction, write-direction, and undirected
/// weights are all a package counter can be weighed by.
pub const MAX_CLASSES: usize = 3;

#[derive(Clone, Copy, Debug)]
pub struct Segment {
    pub start: u64,
    pub end: u64,
    /// Per weight class: its Weight counters' delta per ns over the segment.
    pub wrate: [f64; MAX_CLASSES],
    /// The owner: a task index, or IDLE.
    pub task: u32,
    /// Bit c: every Weight counter of class c read cleanly at both ends (and it has one).
    pub weight_ok: u8,
    /// A CPU of another package: its rates are its remote-memory weights, and its time is no
    /// claim on this package's traffic (time spreads only over the package's own CPUs).
    pub foreign: bool,
    /// The part of the segment's time its task ran, in units of [`SHARE_ONE`]: all of it for a
    /// segment between two records of one task; `on_ns / period` for a task's aggregate of a
    /// flush period, which overlaps the other tasks' of that period (the kernel keeps their
    /// time and weight in it, not their order, so both are spread evenly over it).
    pub time_share: u32,
}

impl Segment {
    /// The segment's claim by time, per ns of it (0: none, the idle task or a foreign CPU).
    fn time_claim(&self) -> i64 {
        if self.task != IDLE && !self.foreign {
            i64::from(self.time_share)
        } else {
            0
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Span {
    pub t0: u64,
    pub t1: u64,
    pub d: f64,
}

#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub t: u64,
    pub seg: u32,
    pub end: bool,
}

/// Scratch buffers kept between calls so that closing an interval does not allocate once warm.
#[derive(Default)]
pub struct Scratch {
    events: Vec<Event>,
    ww: Vec<f64>,
    wt: Vec<f64>,
    wu: Vec<f64>,
    pw: Vec<f64>,
    pt: Vec<f64>,
    /// Spans with traffic priced by on-CPU time although weights were asked for (a weight
    /// counter that did not run, or failed to read, in the span), since the caller last took
    /// the count.
    pub time_fallbacks: u64,
    /// Set by the caller before [`apportion`]: the price of one weight unit where the weights
    /// account for less than the controller counted (their bytes, in counts of the package
    /// slot). Spans with trusted weights then give each segment exactly its weight × price, and
    /// the rest of their delta is unseen: no core counted it.
    pub fixed_price: Option<f64>,
    /// What [`apportion`] left unseen at `fixed_price` (added to, the caller takes it).
    pub unseen: f64,
    /// Per task (index): the part of its remote weight that goes to the package being spread
    /// (with three or more packages a remote count does not say which); empty or beyond its
    /// end: all of it.
    pub route: Vec<f64>,
}

/// The rate a segment weighs with in class `class`: a foreign segment's remote rate routed to
/// this package.
#[inline]
fn rate_of(s: &Segment, class: usize, route: &[f64]) -> f64 {
    let r = s.wrate[class];
    if s.foreign && !route.is_empty() {
        r * route.get(s.task as usize).copied().unwrap_or(1.0)
    } else {
        r
    }
}

/// Over the spans [`weigh`] measured: the weight in the spans whose weights are trusted (every
/// segment in them has one, and there is some), and those spans' delta.
pub fn weighed_totals(spans: &[Span], scratch: &Scratch) -> (f64, f64) {
    let (mut w, mut d) = (0.0, 0.0);
    for (k, sp) in spans.iter().enumerate() {
        if scratch.wu.get(k).is_some_and(|&u| u <= 0.0)
            && scratch.ww.get(k).is_some_and(|&x| x > 0.0)
        {
            w += scratch.ww[k];
            d += sp.d;
        }
    }
    (w, d)
}

/// Builds the boundary events of `segs`, sorted by time (ties in any order: a zero-length step
/// changes nothing in either sweep).
///
/// Segments arrive in the order their CPUs' records were pushed, which is time order or close
/// to it, so the starts and the ends are each usually sorted already: they are checked, sorted
/// only if not, and merged, instead of sorting all 2n events (a full sort costs a sixth of the
/// attributor's instructions).
pub fn build_events(segs: &[Segment], events: &mut Vec<Event>, scratch: &mut Scratch) {
    let tmp = &mut scratch.events;
    tmp.clear();
    let mk = |(i, s): (usize, &Segment), end: bool| Event {
        t: if end { s.end } else { s.start },
        seg: i as u32,
        end,
    };
    tmp.extend(segs.iter().enumerate().map(|x| mk(x, false)));
    tmp.extend(segs.iter().enumerate().map(|x| mk(x, true)));
    let (starts, ends) = tmp.split_at_mut(segs.len());
    for half in [&mut *starts, &mut *ends] {
        if !half.is_sorted_by_key(|e| e.t) {
            half.sort_unstable_by_key(|e| e.t);
        }
    }
    events.clear();
    events.reserve(2 * segs.len());
    let (mut i, mut j) = (0, 0);
    while i < starts.len() && j < ends.len() {
        if starts[i].t <= ends[j].t {
            events.push(starts[i]);
            i += 1;
        } else {
            events.push(ends[j]);
            j += 1;
        }
    }
    events.extend_from_slice(&starts[i..]);
    events.extend_from_slice(&ends[j..]);
}

/// Spreads `spans` (sorted, contiguous, non-empty) over `segs` through their sorted `events`,
/// weighing by weight class `class`. `give(task, amount)` receives each task's part (IDLE
/// included: the caller counts it as unattributed); the return value is the part of spans in
/// which nothing could take it.
pub fn spread(
    spans: &[Span],
    segs: &[Segment],
    events: &[Event],
    class: usize,
    scratch: &mut Scratch,
    give: impl FnMut(u32, f64),
) -> f64 {
    weigh(spans, segs, events, class, scratch);
    apportion(spans, segs, events, class, scratch, give)
}

/// Whether two span lists have the same bounds, so that what [`weigh`] measured for one holds
/// for the other (package counters read at the same ticks: a read and a write counter).
pub fn same_bounds(a: &[Span], b: &[Span]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.t0 == y.t0 && x.t1 == y.t1)
}

/// The first half of [`spread`]: the weight, busy time and unknown-weight time inside each span,
/// kept in `scratch` for [`apportion`], which may run more than once on them (for other spans
/// with the [`same_bounds`] and the same class).
pub fn weigh(
    spans: &[Span],
    segs: &[Segment],
    events: &[Event],
    class: usize,
    scratch: &mut Scratch,
) {
    let class = class.min(MAX_CLASSES - 1);
    let ok_bit = 1u8 << class;
    let (Some(first), Some(last)) = (spans.first(), spans.last()) else {
        return;
    };
    let (f0, f1) = (first.t0, last.t1);
    let n = spans.len();
    let Scratch {
        ww, wt, wu, route, ..
    } = scratch;
    for v in [&mut *ww, &mut *wt, &mut *wu] {
        v.clear();
        v.resize(n, 0.0);
    }

    // Pass 1: the weight, busy time and unknown-weight time inside each span.
    let mut rw = 0.0f64;
    let mut rt: i64 = 0; // busy time shares active now (an integer: add/remove stays exact)
    let mut ru: i64 = 0; // segments with unknown weight active now
    let mut i = 0usize;
    let mut t_cur = f0;
    let mut advance = |te: u64, rw: f64, rt: i64, ru: i64, i: &mut usize, t_cur: &mut u64| {
        while *i < n && spans[*i].t1 <= te {
            let dt = spans[*i].t1.saturating_sub(*t_cur) as f64;
            ww[*i] += rw * dt;
            wt[*i] += rt as f64 / f64::from(SHARE_ONE) * dt;
            wu[*i] += ru as f64 * dt;
            *t_cur = spans[*i].t1;
            *i += 1;
        }
        if *i < n && te > *t_cur {
            let dt = (te - *t_cur) as f64;
            ww[*i] += rw * dt;
            wt[*i] += rt as f64 / f64::from(SHARE_ONE) * dt;
            wu[*i] += ru as f64 * dt;
            *t_cur = te;
        }
    };
    for e in events {
        let Some(s) = segs.get(e.seg as usize) else {
            continue;
        };
        if s.end <= f0 || s.start >= f1 {
            continue;
        }
        let te = e.t.clamp(f0, f1);
        advance(te, rw, rt, ru, &mut i, &mut t_cur);
        let sign = if e.end { -1 } else { 1 };
        rw += sign as f64 * rate_of(s, class, route);
        rt += sign * s.time_claim();
        if s.weight_ok & ok_bit == 0 {
            ru += sign;
        }
    }
    advance(f1, rw, rt, ru, &mut i, &mut t_cur);
}

/// Pass 1 of [`apportion`]: each span's price per unit of weight (`pw`) or of time (`pt`),
/// from what [`weigh`] left in `scratch`; returns what spans nobody ran in leave unattributed.
fn price_spans(spans: &[Span], scratch: &mut Scratch) -> f64 {
    let n = spans.len();
    let Scratch {
        ww,
        wt,
        wu,
        pw,
        pt,
        time_fallbacks,
        fixed_price,
        unseen,
        ..
    } = scratch;
    assert_eq!(ww.len(), n, "apportion without weigh over the same spans");
    let mut scratch_fallbacks = 0u64;
    for v in [&mut *pw, &mut *pt] {
        v.clear();
        v.resize(n, 0.0);
    }
    // Prices per span; spans nobody ran in stay unattributed.
    let mut unattributed = 0.0;
    for k in 0..n {
        let d = spans[k].d;
        if d == 0.0 {
            continue;
        }
        // Weights are trusted only when every segment in the span has one: mixing known and
        // unknown weights would hand a failed read's share to its neighbours.
        if wu[k] <= 0.0 && ww[k] > 0.0 {
            match *fixed_price {
                Some(price) => {
                    pw[k] = price;
                    *unseen += d - ww[k] * price;
                }
                None => pw[k] = d / ww[k],
            }
        } else if wt[k] > 0.0 {
            pt[k] = d / wt[k];
            if wu[k] > 0.0 {
                scratch_fallbacks += 1;
            }
        } else {
            unattributed += d;
        }
    }
    *time_fallbacks += scratch_fallbacks;
    unattributed
}

/// The second half of [`spread`], on what [`weigh`] left in `scratch` for spans with these
/// bounds and this class.
pub fn apportion(
    spans: &[Span],
    segs: &[Segment],
    events: &[Event],
    class: usize,
    scratch: &mut Scratch,
    mut give: impl FnMut(u32, f64),
) -> f64 {
    let class = class.min(MAX_CLASSES - 1);
    let (Some(first), Some(last)) = (spans.first(), spans.last()) else {
        return 0.0;
    };
    let (f0, f1) = (first.t0, last.t1);
    let n = spans.len();
    let unattributed = price_spans(spans, scratch);
    let Scratch { pw, pt, route, .. } = scratch;

    // Pass 2: Π at each event; a segment gets rate·Π(end) − rate·Π(start).
    let mut i = 0usize;
    let (mut pi_w, mut pi_t) = (0.0f64, 0.0f64); // Π at spans[i].t0
    for e in events {
        let Some(s) = segs.get(e.seg as usize) else {
            continue;
        };
        if s.end <= f0 || s.start >= f1 {
            continue;
        }
        let te = e.t.clamp(f0, f1);
        while i < n && spans[i].t1 <= te {
            let len = (spans[i].t1 - spans[i].t0) as f64;
            pi_w += pw[i] * len;
            pi_t += pt[i] * len;
            i += 1;
        }
        let (at_w, at_t) = if i < n {
            let dt = te.saturating_sub(spans[i].t0) as f64;
            (pi_w + pw[i] * dt, pi_t + pt[i] * dt)
        } else {
            (pi_w, pi_t)
        };
        let mut amount = rate_of(s, class, route) * at_w;
        let claim = s.time_claim();
        if claim != 0 {
            amount += at_t * claim as f64 / f64::from(SHARE_ONE);
        }
        if amount != 0.0 {
            give(s.task, if e.end { amount } else { -amount });
        }
    }
    unattributed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(start: u64, end: u64, w: f64, task: u32) -> Segment {
        Segment {
            start,
            end,
            wrate: [w / (end - start) as f64; MAX_CLASSES],
            task,
            weight_ok: 1,
            foreign: false,
            time_share: SHARE_ONE,
        }
    }

    fn run(spans: &[Span], segs: &[Segment]) -> (Vec<f64>, f64) {
        let mut ev = Vec::new();
        let mut scratch = Scratch::default();
        build_events(segs, &mut ev, &mut scratch);
        let mut got = vec![0.0; 4];
        let mut idle = 0.0;
        let un = spread(spans, segs, &ev, 0, &mut scratch, |t, a| {
            if t == IDLE {
                idle += a
            } else {
                got[t as usize] += a
            }
        });
        (got, un + idle)
    }

    #[test]
    fn weights_split_one_span() {
        let spans = [Span {
            t0: 0,
            t1: 100,
            d: 1000.0,
        }];
        let segs = [seg(0, 100, 30.0, 0), seg(0, 100, 10.0, 1)];
        let (got, un) = run(&spans, &segs);
        assert!((got[0] - 750.0).abs() < 1e-6, "{got:?}");
        assert!((got[1] - 250.0).abs() < 1e-6);
        assert!(un.abs() < 1e-9);
    }

    #[test]
    fn segments_straddling_spans_get_each_spans_price() {
        // Task 0 runs 0..100 on one CPU; task 1 only 50..100 on another, same weight rate.
        // Span 0..50 (100 bytes) is all task 0's; span 50..100 (100 bytes) is split evenly.
        let spans = [
            Span {
                t0: 0,
                t1: 50,
                d: 100.0,
            },
            Span {
                t0: 50,
                t1: 100,
                d: 100.0,
            },
        ];
        let segs = [seg(0, 100, 100.0, 0), seg(50, 100, 50.0, 1)];
        let (got, un) = run(&spans, &segs);
        assert!((got[0] - 150.0).abs() < 1e-6, "{got:?}");
        assert!((got[1] - 50.0).abs() < 1e-6);
        assert!(un.abs() < 1e-9);
    }

    #[test]
    fn no_weight_falls_back_to_time_and_nobody_means_unattributed() {
        let spans = [
            Span {
                t0: 0,
                t1: 10,
                d: 40.0,
            },
            Span {
                t0: 10,
                t1: 20,
                d: 7.0,
            },
        ];
        // Zero weight: on-CPU time decides (task 0 ran 10 ns, task 1 ran 5 ns of span 0).
        let segs = [
            seg(0, 10, 0.0, 0),
            seg(5, 10, 0.0, 1),
            seg(10, 20, 0.0, IDLE),
        ];
        let (got, un) = run(&spans, &segs);
        assert!((got[0] - 40.0 * 10.0 / 15.0).abs() < 1e-9, "{got:?}");
        assert!((got[1] - 40.0 * 5.0 / 15.0).abs() < 1e-9);
        assert_eq!(un, 7.0);
    }
}

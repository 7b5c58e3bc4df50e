//! `imc stat --latency`: loaded memory latency.
//!
//! Everywhere but KNL ([`QueueLayout`]): from the memory controller's queues, average latency
//! = occupancy ÷ inserts in DRAM clocks (Little's law: each DRAM clock the occupancy counter
//! adds the requests waiting, each request is inserted once), and in ns through the DRAM clock
//! rate the box's fixed counter measures over the interval (clockticks ÷ elapsed); sub-channels
//! and pseudo-channels roll up to their channel by summing occupancy and inserts, channels to
//! their package alike. AMD's L3 (Zen 4/5): sampled DRAM-fill latency ÷ sampled requests, in
//! units of 10 ns (perf amdzen4 recommended.json l3_read_miss_latency). A count of zero gives
//! null, never a made-up latency.
//!
//! On Knights Landing/Mill: average memory latency in core cycles.
//!
//! libpfm4's KNL documentation (intel_knl_events.h, the OUTSTANDING umask) defines it: count
//! OFFCORE_RESPONSE_0 with the request types of interest and only OUTSTANDING (bit 38 of
//! MSR_OFFCORE_RSP_0: each cycle adds the number of such requests in flight), and
//! OFFCORE_RESPONSE_1 with the same request types and ANY_RESPONSE (each completed request adds
//! one); the first count divided by the second is the average latency in core cycles. libpfm4
//! encodes each event alone, so that both name the same request types is checked here, on the
//! request bits of the two MSR values.
//!
//! Both events are core events: one pair per online CPU, summed; the KNL DDR (knl-imc) and
//! MCDRAM (knl-edc) bandwidth counters are opened beside them. Summing keeps the ratio right
//! even where the threads of a core (or tile) see the same requests: both counts are
//! duplicated alike.
use super::CounterSpec;
use crate::events::{self, EventError};
use crate::model::{Encoded, Pmu, QueuePart, Scope};

/// The request types when `--latency` is given without a value: demand data reads.
pub const DEFAULT_REQUEST_TYPES: &str = "DMND_DATA_RD";

/// Request-type bits of MSR_OFFCORE_RSP_x on KNL (libpfm4 intel_knl_events.h, group 0: bits
/// 0-15, DMND_DATA_RD … ANY_REQUEST).
const REQUEST_BITS: u64 = 0xffff;
/// ANY_RESPONSE (bit 16) and OUTSTANDING (bit 38, MSR_OFFCORE_RSP_0 only).
const ANY_RESPONSE: u64 = 1 << 16;
const OUTSTANDING: u64 = 1 << 38;
/// Event select + umask of the two offcore-response events (0xb7, umask 0x01 / 0x02).
const RSP_0: u64 = 0x01b7;
const RSP_1: u64 = 0x02b7;

/// Why `--latency` cannot run: one line naming the PMU, the event and the reason.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LatencyError {
    /// The request types are not a list of libpfm4 umask names.
    #[error("--latency {given}: {reason}")]
    BadRequestTypes { given: String, reason: String },
    /// libpfm4 refused one of the two events.
    #[error("--latency")]
    Encode(#[from] EventError),
    /// The two encodings do not describe the average-latency pair.
    #[error("--latency: cpu/{event}/: {reason}")]
    Mismatch { event: String, reason: String },
    /// Not a Knights Landing/Mill, or its memory counters are unavailable.
    #[error("--latency: {0}")]
    NotKnl(String),
}

impl LatencyError {
    /// True when the user's input is at fault (exit 2).
    pub fn is_bad_input(&self) -> bool {
        match self {
            LatencyError::Encode(e) => e.is_bad_input(),
            LatencyError::NotKnl(_) => false,
            _ => true,
        }
    }
}

/// The two event strings for `request_types` (`DMND_DATA_RD`, `DMND_DATA_RD:PF_L2_RFO`, commas
/// allowed too), after checking that they are umask names and nothing else.
pub fn event_strings(request_types: &str) -> Result<(String, String), LatencyError> {
    let bad = |reason: &str| LatencyError::BadRequestTypes {
        given: request_types.to_string(),
        reason: reason.to_string(),
    };
    let names: Vec<&str> = request_types.split([':', ',']).map(str::trim).collect();
    if names.iter().any(|n| n.is_empty()) {
        return Err(bad(
            "empty request type (give libpfm4 umask names such as DMND_DATA_RD:DMND_RFO)",
        ));
    }
    if let Some(n) = names
        .iter()
        .find(|n| !n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
    {
        return Err(bad(&format!(
            "'{n}' is not a request type: only umask names (no modifiers such as u=1)"
        )));
    }
    if let Some(n) = names.iter().find(|n| {
        let u = n.to_ascii_uppercase();
        u == "OUTSTANDING" || u == "ANY_RESPONSE"
    }) {
        return Err(bad(&format!(
            "'{n}' is added by --latency itself (OUTSTANDING on OFFCORE_RESPONSE_0, ANY_RESPONSE on OFFCORE_RESPONSE_1)"
        )));
    }
    let joined = names.join(":");
    Ok((
        format!("OFFCORE_RESPONSE_0:{joined}:OUTSTANDING"),
        format!("OFFCORE_RESPONSE_1:{joined}:ANY_RESPONSE"),
    ))
}

/// Checks that two encodings are the average-latency pair: RSP_0 with only OUTSTANDING besides
/// its request bits, RSP_1 with only ANY_RESPONSE, and the same request bits in both.
pub fn check_pair(outstanding: &Encoded, requests: &Encoded) -> Result<(), LatencyError> {
    let mismatch = |e: &Encoded, reason: String| LatencyError::Mismatch {
        event: e.event.clone(),
        reason,
    };
    for (e, code) in [(outstanding, RSP_0), (requests, RSP_1)] {
        if e.config & 0xffff != code {
            return Err(mismatch(
                e,
                format!(
                    "encodes event/umask {:#06x}, not {code:#06x}: is libpfm4 encoding for KNL?",
                    e.config & 0xffff
                ),
            ));
        }
    }
    if outstanding.config1 & !REQUEST_BITS != OUTSTANDING {
        return Err(mismatch(
            outstanding,
            format!(
                "MSR_OFFCORE_RSP_0 value {:#x} has response bits besides OUTSTANDING",
                outstanding.config1
            ),
        ));
    }
    if requests.config1 & !REQUEST_BITS != ANY_RESPONSE {
        return Err(mismatch(
            requests,
            format!(
                "MSR_OFFCORE_RSP_1 value {:#x} has response bits besides ANY_RESPONSE",
                requests.config1
            ),
        ));
    }
    let (a, b) = (
        outstanding.config1 & REQUEST_BITS,
        requests.config1 & REQUEST_BITS,
    );
    if a != b {
        return Err(mismatch(
            requests,
            format!(
                "request types differ from OFFCORE_RESPONSE_0's ({b:#x} vs {a:#x}); both must count the same requests"
            ),
        ));
    }
    Ok(())
}

/// The two encodings of `--latency REQUEST-TYPES` against the PMUs under the root, checked:
/// what `--dry-run` shows and what `stat` opens.
pub fn encodings(pmus: &[Pmu], request_types: &str) -> Result<(Encoded, Encoded), LatencyError> {
    let (o, r) = event_strings(request_types)?;
    let one = |text: &str| -> Result<Encoded, LatencyError> {
        let mut v = events::parse_event(pmus, text)?;
        v.pop().ok_or_else(|| LatencyError::Mismatch {
            event: text.to_string(),
            reason: "libpfm4 returned no encoding".into(),
        })
    };
    let o = one(&o).map_err(|e| response_types_named(pmus, request_types).unwrap_or(e))?;
    let r = one(&r)?;
    check_pair(&o, &r)?;
    Ok((o, r))
}

/// When the request types name response types (DDR, MCDRAM_NEAR …), which OUTSTANDING
/// excludes, a clearer refusal than libpfm4's "cannot be combined".
fn response_types_named(pmus: &[Pmu], request_types: &str) -> Option<LatencyError> {
    let text = format!("OFFCORE_RESPONSE_1:{}", request_types.replace(',', ":"));
    let e = events::parse_event(pmus, &text).ok()?.pop()?;
    let response = e.config1 & !REQUEST_BITS & !ANY_RESPONSE;
    (response != 0).then(|| LatencyError::BadRequestTypes {
        given: request_types.to_string(),
        reason: format!(
            "names response types (MSR_OFFCORE_RSP bits {response:#x}); OUTSTANDING counts requests \
             in flight whatever answers them: give request types only, e.g. DMND_DATA_RD"
        ),
    })
}

/// Average latency in core cycles: outstanding-request cycles over completed requests; None
/// when either count is zero (nothing to average, or the outstanding counter did not count).
pub fn latency_cycles(outstanding: f64, requests: f64) -> Option<f64> {
    (outstanding > 0.0 && requests > 0.0 && outstanding.is_finite() && requests.is_finite())
        .then(|| outstanding / requests)
}

/// One interval's latency figures of a channel (or CCX) or a package; None where a count is
/// zero or the part is not counted.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LatencyFigures {
    pub read_ns: Option<f64>,
    pub write_ns: Option<f64>,
    pub read_dram_clocks: Option<f64>,
    pub write_dram_clocks: Option<f64>,
    /// AMD: the remote node's DRAM alone (`read_ns` covers local and remote together).
    pub read_remote_ns: Option<f64>,
}

/// The summed counts of one channel or package in one interval.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sums {
    pub read_occupancy: f64,
    pub read_inserts: f64,
    pub write_occupancy: f64,
    pub write_inserts: f64,
    /// DRAM clock ticks summed over `clock_boxes` boxes.
    pub dram_clocks: f64,
    pub clock_boxes: u32,
    /// AMD L3: sampled latency (10 ns units) and requests, local and remote DRAM.
    pub near_latency: f64,
    pub near_requests: f64,
    pub far_latency: f64,
    pub far_requests: f64,
    /// A latency counter of it did not count this interval: a ratio of the rest would be
    /// made up, so its figures are null.
    pub incomplete: bool,
}

fn ratio(num: f64, den: f64) -> Option<f64> {
    (num > 0.0 && den > 0.0 && num.is_finite() && den.is_finite()).then(|| num / den)
}

impl Sums {
    fn add(&mut self, part: QueuePart, v: f64) {
        match part {
            QueuePart::ReadOccupancy => self.read_occupancy += v,
            QueuePart::ReadInserts => self.read_inserts += v,
            QueuePart::WriteOccupancy => self.write_occupancy += v,
            QueuePart::WriteInserts => self.write_inserts += v,
            QueuePart::DramClocks => {
                self.dram_clocks += v;
                self.clock_boxes += 1;
            }
            QueuePart::SampledLatency { remote: false } => self.near_latency += v,
            QueuePart::SampledLatency { remote: true } => self.far_latency += v,
            QueuePart::SampledRequests { remote: false } => self.near_requests += v,
            QueuePart::SampledRequests { remote: true } => self.far_requests += v,
        }
    }

    fn merge(&mut self, o: &Sums) {
        self.read_occupancy += o.read_occupancy;
        self.read_inserts += o.read_inserts;
        self.write_occupancy += o.write_occupancy;
        self.write_inserts += o.write_inserts;
        self.dram_clocks += o.dram_clocks;
        self.clock_boxes += o.clock_boxes;
        self.near_latency += o.near_latency;
        self.near_requests += o.near_requests;
        self.far_latency += o.far_latency;
        self.far_requests += o.far_requests;
        self.incomplete |= o.incomplete;
    }

    /// The figures over an interval of `elapsed_ns`: latency in DRAM clocks = occupancy ÷
    /// inserts; in ns = clocks ÷ (one box's clock ticks ÷ elapsed). AMD: read latency (local and
    /// remote DRAM together) and the remote part alone, 10 ns per sampled unit.
    pub fn figures(&self, elapsed_ns: u64) -> LatencyFigures {
        if self.incomplete {
            return LatencyFigures::default();
        }
        // One box's clock rate in ticks per ns (the boxes of a package share the DRAM clock).
        let per_ns = (self.clock_boxes > 0 && elapsed_ns > 0)
            .then(|| self.dram_clocks / f64::from(self.clock_boxes) / elapsed_ns as f64)
            .filter(|r| *r > 0.0);
        let rd = ratio(self.read_occupancy, self.read_inserts);
        let wr = ratio(self.write_occupancy, self.write_inserts);
        let amd = ratio(
            self.near_latency + self.far_latency,
            self.near_requests + self.far_requests,
        )
        .map(|x| x * 10.0);
        LatencyFigures {
            read_ns: rd.and_then(|c| per_ns.map(|r| c / r)).or(amd),
            write_ns: wr.and_then(|c| per_ns.map(|r| c / r)),
            read_dram_clocks: rd,
            write_dram_clocks: wr,
            read_remote_ns: ratio(self.far_latency, self.far_requests).map(|x| x * 10.0),
        }
    }
}

/// Where each latency counter of `stat`'s backend goes: its package row and channel (a PMU
/// instance, or AMD's CCX), found once from the counters' `values` keys and scopes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueLayout {
    /// Package ids, in order.
    pub packages: Vec<u32>,
    /// Per package: its channels' labels (the PMU instance, `amd_l3@CPU` for a CCX) and
    /// numbers.
    pub channels: Vec<Vec<(String, Option<u32>)>>,
    /// Per counter of the backend: (package row, channel index, part), for latency counters.
    places: Vec<Option<(usize, usize, QueuePart)>>,
}

impl QueueLayout {
    /// None when no counter is a latency counter.
    pub fn new(counters: &[CounterSpec]) -> Option<QueueLayout> {
        let mut l = QueueLayout::default();
        for c in counters {
            let Some(part) = QueuePart::from_key(&c.event) else {
                l.places.push(None);
                continue;
            };
            let (package, channel) = match c.scope {
                Scope::Channel { package, channel } => (package, Some(channel)),
                Scope::Package(p) => (p, None),
                Scope::Cpu(_) => (c.package.unwrap_or(0), None),
            };
            let row = match l.packages.iter().position(|&p| p == package) {
                Some(r) => r,
                None => {
                    l.packages.push(package);
                    l.channels.push(Vec::new());
                    l.packages.len() - 1
                }
            };
            let label = if c.pmu == "amd_l3" {
                format!("amd_l3@cpu{}", c.cpu.unwrap_or(0))
            } else {
                c.pmu.clone()
            };
            let chans = &mut l.channels[row];
            let ch = match chans.iter().position(|(n, _)| *n == label) {
                Some(i) => i,
                None => {
                    chans.push((label, channel));
                    chans.len() - 1
                }
            };
            l.places.push(Some((row, ch, part)));
        }
        l.places.iter().any(Option::is_some).then_some(l)
    }

    /// Per package: its sums and each channel's, from one interval's per-counter counts
    /// (`counts[i]`: None where counter i did not count).
    pub fn sums(&self, counts: &[Option<f64>]) -> Vec<(Sums, Vec<Sums>)> {
        let mut out: Vec<(Sums, Vec<Sums>)> = self
            .channels
            .iter()
            .map(|c| (Sums::default(), vec![Sums::default(); c.len()]))
            .collect();
        for (i, place) in self.places.iter().enumerate() {
            let Some((row, ch, part)) = place else {
                continue;
            };
            match counts.get(i) {
                Some(Some(v)) => out[*row].1[*ch].add(*part, *v),
                _ => out[*row].1[*ch].incomplete = true,
            }
        }
        for (pkg, chans) in &mut out {
            for c in chans.iter() {
                pkg.merge(c);
            }
        }
        out
    }
}

/// One package's latency over an interval of the sampling commands: its figures and each
/// channel's (or CCX's), by the channel's label.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PackageLatency {
    pub package: u32,
    pub figures: LatencyFigures,
    pub channels: Vec<(String, LatencyFigures)>,
}

/// The sampling commands' loaded latency: the plan's queue counters read by userspace at each
/// interval end (`plan::Reader::Interval`), apart from the sampler's tick, and turned into
/// each package's and channel's figures over the time between two reads.
pub struct IntervalLatency {
    backend: Box<dyn super::Backend>,
    layout: QueueLayout,
    last: Vec<super::RawReading>,
    now: Vec<super::RawReading>,
    counts: Vec<Option<f64>>,
    last_t_ns: u64,
}

impl IntervalLatency {
    /// The reader of `backend`'s latency counters, its first reading (at `t_ns`) the baseline;
    /// None when it has none.
    pub fn new(mut backend: Box<dyn super::Backend>, t_ns: u64) -> Option<IntervalLatency> {
        let layout = QueueLayout::new(backend.counters())?;
        let n = backend.counters().len();
        let mut last = vec![super::RawReading::default(); n];
        backend.read(&mut last);
        Some(IntervalLatency {
            backend,
            layout,
            last,
            now: vec![super::RawReading::default(); n],
            counts: vec![None; n],
            last_t_ns: t_ns,
        })
    }

    /// Opens the plan's interval-read counters (through `sys`): None when the plan has none.
    pub fn open(
        plan: &crate::plan::Plan,
        topo: &crate::model::Topology,
        sys: std::sync::Arc<dyn crate::sys::perf::PerfSys>,
        t_ns: u64,
    ) -> Result<Option<IntervalLatency>, super::BackendError> {
        let mut own = plan.clone();
        own.counters
            .retain(|c| matches!(c.reader, crate::plan::Reader::Interval { .. }));
        if own.counters.is_empty() {
            return Ok(None);
        }
        let planned = super::from_plan::perf_counters(&own, topo);
        let backend = super::perf::PerfBackend::open(sys, "latency", planned)?;
        Ok(IntervalLatency::new(Box::new(backend), t_ns))
    }

    /// Counters that failed to open or stopped counting since the last call, said once each.
    pub fn take_failures(&mut self) -> Vec<super::CounterFailure> {
        self.backend.take_failures()
    }

    /// Reads every counter at `t_ns`: each package's figures since the last read (null where a
    /// counter did not count, nothing was queued, or no time passed).
    pub fn read(&mut self, t_ns: u64) -> Vec<PackageLatency> {
        self.backend.read(&mut self.now);
        let elapsed = t_ns.saturating_sub(self.last_t_ns);
        for (i, spec) in self.backend.counters().iter().enumerate() {
            let d = super::counter::delta(&self.last[i], &self.now[i], spec.counter_bits);
            self.counts[i] = d.counted.then_some(d.count);
        }
        std::mem::swap(&mut self.last, &mut self.now);
        self.last_t_ns = t_ns;
        let sums = self.layout.sums(&self.counts);
        sums.iter()
            .zip(&self.layout.packages)
            .zip(&self.layout.channels)
            .map(|(((pkg, chans), &package), labels)| PackageLatency {
                package,
                figures: if elapsed > 0 {
                    pkg.figures(elapsed)
                } else {
                    LatencyFigures::default()
                },
                channels: chans
                    .iter()
                    .zip(labels)
                    .map(|(c, (label, _))| (label.clone(), c.figures(elapsed)))
                    .collect(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_latency_is_occupancy_over_inserts_at_the_measured_clock() {
        // 1 ms at a 1.6 GHz DRAM clock (1.6e6 ticks); 1e5 reads waited 8e6 clock-entries in
        // all: 80 clocks each = 50 ns.
        let s = Sums {
            read_occupancy: 8e6,
            read_inserts: 1e5,
            write_occupancy: 3.2e6,
            write_inserts: 2e4,
            dram_clocks: 1.6e6,
            clock_boxes: 1,
            ..Sums::default()
        };
        let f = s.figures(1_000_000);
        assert_eq!(f.read_dram_clocks, Some(80.0));
        assert!((f.read_ns.unwrap() - 50.0).abs() < 1e-9);
        assert_eq!(f.write_dram_clocks, Some(160.0));
        assert!((f.write_ns.unwrap() - 100.0).abs() < 1e-9);
        // Two boxes' clocks summed: the rate is one box's.
        let two = Sums {
            dram_clocks: 3.2e6,
            clock_boxes: 2,
            ..s
        };
        assert!((two.figures(1_000_000).read_ns.unwrap() - 50.0).abs() < 1e-9);
    }

    #[test]
    fn a_zero_count_gives_null_never_a_made_up_latency() {
        let none = Sums {
            read_occupancy: 5e5,
            read_inserts: 0.0,
            dram_clocks: 1.6e6,
            clock_boxes: 1,
            ..Sums::default()
        };
        let f = none.figures(1_000_000);
        assert_eq!((f.read_ns, f.read_dram_clocks), (None, None));
        assert_eq!((f.write_ns, f.write_dram_clocks), (None, None));
        // Inserts but no clock: clocks known, ns not.
        let no_clock = Sums {
            read_inserts: 10.0,
            read_occupancy: 100.0,
            ..Sums::default()
        };
        let f = no_clock.figures(1_000_000);
        assert_eq!((f.read_dram_clocks, f.read_ns), (Some(10.0), None));
    }

    #[test]
    fn amd_sampled_latency_is_in_ten_ns_units() {
        let s = Sums {
            near_latency: 900.0,
            near_requests: 100.0,
            far_latency: 300.0,
            far_requests: 20.0,
            ..Sums::default()
        };
        let f = s.figures(1_000_000);
        assert!((f.read_ns.unwrap() - 100.0).abs() < 1e-9); // 1200 / 120 × 10
        assert!((f.read_remote_ns.unwrap() - 150.0).abs() < 1e-9);
        assert_eq!(f.read_dram_clocks, None);
    }

    fn spec(event: &str, pmu: &str, package: u32, channel: u32) -> CounterSpec {
        CounterSpec {
            event: event.into(),
            pmu: pmu.into(),
            cpu: Some(package * 4),
            scope: Scope::Channel { package, channel },
            package: Some(package),
            direction: None,
            memory: super::super::Memory::Dram,
            bytes_per_count: None,
            scale: 1.0,
            counter_bits: 48,
            config: 0,
            sub_channel: None,
        }
    }

    #[test]
    fn sub_channels_roll_up_to_their_channel_and_channels_to_the_package() {
        // GNR: one PMU per channel, a read queue per sub-channel.
        let counters = vec![
            spec("read", "uncore_imc_0", 0, 0),
            spec("dram_clockticks", "uncore_imc_0", 0, 0),
            spec("rpq_occupancy", "uncore_imc_0", 0, 0),
            spec("rpq_inserts", "uncore_imc_0", 0, 0),
            spec("rpq_occupancy", "uncore_imc_0", 0, 0),
            spec("rpq_inserts", "uncore_imc_0", 0, 0),
            spec("dram_clockticks", "uncore_imc_1", 0, 1),
            spec("rpq_occupancy", "uncore_imc_1", 0, 1),
            spec("rpq_inserts", "uncore_imc_1", 0, 1),
        ];
        let l = QueueLayout::new(&counters).unwrap();
        assert_eq!(l.channels[0].len(), 2);
        // Sub-channel 0: 100 reads × 40 clocks; sub-channel 1: 300 × 80; channel 1: idle.
        let counts = [1e9, 1e6, 4000.0, 100.0, 24000.0, 300.0, 1e6, 0.0, 0.0].map(Some);
        let sums = l.sums(&counts);
        let ch0 = sums[0].1[0].figures(1_000_000);
        assert_eq!(ch0.read_dram_clocks, Some(70.0)); // 28000 / 400
        assert_eq!(sums[0].1[1].figures(1_000_000).read_dram_clocks, None);
        let pkg = sums[0].0.figures(1_000_000);
        assert_eq!(pkg.read_dram_clocks, Some(70.0));
        // 1e6 ticks per ms per box = 1 GHz: 70 clocks = 70 ns.
        assert!((pkg.read_ns.unwrap() - 70.0).abs() < 1e-9);
        // A counter that did not count: that channel's and its package's figures are null
        // (the rest's ratio would be made up), the other channel's stand.
        let mut missing = counts;
        missing[4] = None;
        let m = l.sums(&missing);
        assert_eq!(m[0].1[0].figures(1_000_000).read_dram_clocks, None);
        assert_eq!(m[0].0.figures(1_000_000).read_ns, None);
        assert!(!m[0].1[1].incomplete);
        assert!(QueueLayout::new(&counters[..1]).is_none());
    }

    /// A backend whose readings are scripted, one list per read.
    struct Scripted {
        counters: Vec<CounterSpec>,
        reads: std::collections::VecDeque<Vec<crate::counting::RawReading>>,
    }

    impl crate::counting::Backend for Scripted {
        fn source(&self) -> &str {
            "latency"
        }
        fn counters(&self) -> &[CounterSpec] {
            &self.counters
        }
        fn read(&mut self, out: &mut [crate::counting::RawReading]) {
            out.copy_from_slice(&self.reads.pop_front().unwrap());
        }
        fn take_failures(&mut self) -> Vec<crate::counting::CounterFailure> {
            Vec::new()
        }
    }

    fn reading(value: u64, ok: bool, t: u64) -> crate::counting::RawReading {
        crate::counting::RawReading {
            value,
            enabled: t,
            running: t,
            ok,
        }
    }

    #[test]
    fn the_interval_reader_gives_each_package_and_channel_its_latency_between_reads() {
        // Two channels of package 1: clock, RPQ occupancy, RPQ inserts each.
        let counters = vec![
            spec("dram_clockticks", "uncore_imc_0", 1, 0),
            spec("rpq_occupancy", "uncore_imc_0", 1, 0),
            spec("rpq_inserts", "uncore_imc_0", 1, 0),
            spec("dram_clockticks", "uncore_imc_1", 1, 1),
            spec("rpq_occupancy", "uncore_imc_1", 1, 1),
            spec("rpq_inserts", "uncore_imc_1", 1, 1),
        ];
        let at = |t: u64, v: [u64; 6], ok: [bool; 6]| -> Vec<crate::counting::RawReading> {
            v.iter().zip(ok).map(|(&v, ok)| reading(v, ok, t)).collect()
        };
        let all = [true; 6];
        // 48-bit counters: channel 0's occupancy wraps between the first two reads.
        let wrap = (1u64 << 48) - 1000;
        let reads = vec![
            at(1, [0, wrap, 0, 0, 0, 0], all),
            // 1 ms at 1.6 GHz: channel 0 100k reads × 80 clocks (50 ns), channel 1 idle.
            at(
                2,
                [1_600_000, 8_000_000 - 1000, 100_000, 1_600_000, 0, 0],
                all,
            ),
            // 2 ms later: channel 1 300k reads × 160 clocks; channel 0's inserts unread.
            at(
                4,
                [
                    4_800_000, 16_000_000, 150_000, 4_800_000, 48_000_000, 300_000,
                ],
                [true, true, false, true, true, true],
            ),
        ];
        let backend = Scripted {
            counters,
            reads: reads.into(),
        };
        let mut l = IntervalLatency::new(Box::new(backend), 10_000_000).unwrap();
        let first = l.read(11_000_000);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].package, 1);
        assert!((first[0].figures.read_ns.unwrap() - 50.0).abs() < 1e-9);
        assert_eq!(first[0].channels[0].0, "uncore_imc_0");
        assert!((first[0].channels[0].1.read_ns.unwrap() - 50.0).abs() < 1e-9);
        // Nothing queued on channel 1: null, never a made-up figure. Writes not counted: null.
        assert_eq!(first[0].channels[1].1.read_ns, None);
        assert_eq!(first[0].figures.write_ns, None);
        let second = l.read(13_000_000);
        // A counter that did not count nulls its channel and its package, not the other
        // channel: 160 clocks at 1.6 GHz = 100 ns.
        assert_eq!(second[0].channels[0].1.read_ns, None);
        assert_eq!(second[0].figures.read_ns, None);
        assert!((second[0].channels[1].1.read_ns.unwrap() - 100.0).abs() < 1e-9);
    }

    /// The sampling plan of a Skylake-SP tree, its latency counters opened through a fake
    /// perf: only they open (the sampler has the bandwidth counters), grouped per box, and each
    /// package's latency comes out of the plan's own encodings.
    #[test]
    fn the_interval_reader_opens_the_plans_latency_counters_and_nothing_else() {
        let root =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/skx-2socket");
        let found = crate::discovery::discover(&root).unwrap();
        let req = crate::plan::Request {
            command: crate::plan::CommandKind::Top,
            events: Vec::new(),
            backend: None,
            exclude: Vec::new(),
            freq: None,
            precise: false,
            interval_ms: 1000,
            drain_ms: 100,
            batch_ms: None,
            stand_in: Vec::new(),
            latency: None,
            weight: Default::default(),
            stacks: None,
        };
        let plan = crate::plan::plan(&found, &crate::plan::Kernel::default(), &req).unwrap();
        let fake = std::sync::Arc::new(crate::sys::perf::FakePerf::new());
        // Per read: 1.6e6 DRAM clocks (1 ms at 1.6 GHz), 1e5 reads waiting 8e6 clock-entries.
        fake.set_step(0xff, 1_600_000);
        fake.set_step(0x80, 8_000_000);
        fake.set_step(0x10, 100_000);
        let mut l = IntervalLatency::open(&plan, &found.topology, fake.clone(), 0)
            .unwrap()
            .unwrap();
        let opens = fake.opens();
        // 6 channels x 2 packages x (clock, occupancy, inserts); no CAS counter.
        assert_eq!(opens.len(), 36);
        assert!(
            opens
                .iter()
                .all(|o| [0xff, 0x80, 0x10].contains(&o.attr.config))
        );
        assert!(opens.iter().any(|o| o.group.is_some()), "grouped per box");
        let read = l.read(1_000_000);
        assert_eq!(read.iter().map(|p| p.package).collect::<Vec<_>>(), [0, 1]);
        for p in &read {
            assert!((p.figures.read_ns.unwrap() - 50.0).abs() < 1e-9, "{p:?}");
            assert_eq!(p.figures.write_ns, None, "write queues are not planned");
            assert_eq!(p.channels.len(), 6);
            assert_eq!(p.channels[0].0, "uncore_imc_0");
        }
    }

    fn enc(event: &str, config: u64, config1: u64) -> Encoded {
        Encoded {
            event: event.into(),
            pmu: "cpu".into(),
            pmu_type: 4,
            config,
            config1,
            ..Default::default()
        }
    }

    #[test]
    fn request_types_become_the_two_events() {
        assert_eq!(
            event_strings("DMND_DATA_RD").unwrap(),
            (
                "OFFCORE_RESPONSE_0:DMND_DATA_RD:OUTSTANDING".to_string(),
                "OFFCORE_RESPONSE_1:DMND_DATA_RD:ANY_RESPONSE".to_string()
            )
        );
        assert_eq!(
            event_strings("DMND_DATA_RD,PF_L2_RFO").unwrap().0,
            "OFFCORE_RESPONSE_0:DMND_DATA_RD:PF_L2_RFO:OUTSTANDING"
        );
        for bad in [
            "",
            "DMND_DATA_RD:",
            "DMND_DATA_RD:u=1",
            "OUTSTANDING",
            "a b",
        ] {
            let e = event_strings(bad).unwrap_err();
            assert!(e.is_bad_input(), "{bad}");
            assert_eq!(e.to_string().lines().count(), 1);
        }
    }

    #[test]
    fn the_pair_must_share_request_types_and_nothing_else() {
        let o = enc(
            "OFFCORE_RESPONSE_0:DMND_DATA_RD:OUTSTANDING",
            0x1b7,
            0x40_0000_0001,
        );
        let r = enc(
            "OFFCORE_RESPONSE_1:DMND_DATA_RD:ANY_RESPONSE",
            0x2b7,
            0x10001,
        );
        assert_eq!(check_pair(&o, &r), Ok(()));
        // different request bits
        let r2 = enc("OFFCORE_RESPONSE_1:DMND_RFO:ANY_RESPONSE", 0x2b7, 0x10002);
        let m = check_pair(&o, &r2).unwrap_err().to_string();
        assert!(
            m.contains("request types differ") && m.contains("OFFCORE_RESPONSE_1"),
            "{m}"
        );
        // a response type on RSP_1 instead of ANY_RESPONSE
        let r3 = enc("x", 0x2b7, 0x8080_0001);
        assert!(
            check_pair(&o, &r3)
                .unwrap_err()
                .to_string()
                .contains("ANY_RESPONSE")
        );
        // RSP_0 without OUTSTANDING
        let o2 = enc("y", 0x1b7, 0x10001);
        assert!(
            check_pair(&o2, &r)
                .unwrap_err()
                .to_string()
                .contains("OUTSTANDING")
        );
        // the events swapped (another model's encoding)
        assert!(
            check_pair(&r, &o)
                .unwrap_err()
                .to_string()
                .contains("0x01b7")
        );
    }

    #[test]
    fn latency_is_null_when_a_count_is_zero() {
        assert_eq!(latency_cycles(5000.0, 100.0), Some(50.0));
        assert_eq!(latency_cycles(0.0, 100.0), None);
        assert_eq!(latency_cycles(5000.0, 0.0), None);
    }
}

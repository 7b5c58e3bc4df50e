//! `imc report --perfetto OUT`: the recording as a Perfetto trace (Perfetto's own protos), for
//! ui.perfetto.dev. Tracks:
//! - a counter track per package and direction (`package 0 read`; with a stand-in source one
//!   track for all CPUs, named after its events and counted in them, never in bytes), and where
//!   a package has a CXL tier, each tier's beside its totals (`package 0 cxl read`);
//! - per top group (a process, with a Perfetto process track when grouped by tgid or pid), a
//!   counter track of its attributed rate, and one for everything else;
//! - a `bursts` track holding one slice per burst, named after its culprits, each culprit's
//!   share also in the slice's arguments, and beside them (where the recording counts stalls)
//!   its victims: the stall each burst added to a task over its own baseline;
//! - where the recording counts stalls, a counter track per top victim of its stall share (%);
//! - where the recording has them, per package a counter track of its loaded read latency
//!   (`package 0 read latency (ns)`), of its write latency and of its utilisation (%), 0 where
//!   an interval has none (nothing queued, or not recorded);
//! - where the recording has stacks, callstack samples of the processes' traffic on the
//!   timeline (see [`crate::output::stacks::perfetto`]).
//!
//! Counter values are rates (per second) over each interval, set at the interval's start;
//! timestamps are the recording's CLOCK_MONOTONIC nanoseconds.
use crate::attribution::timeline::{Timeline, Unit};
use crate::attribution::victims::{BurstVictim, StallSeries};
use crate::model::GroupBy;
use crate::model::result::BurstRow;
use crate::model::stacks::{StackProfile, TimedSample};
use crate::output::perfetto_proto::{
    CounterDescriptor, DebugAnnotation, ProcessDescriptor, Trace, TracePacket, TrackDescriptor,
    TrackEvent, track_event,
};
use crate::output::report::{LatencySeries, PackageLatencyPoint};
use protobuf::Message;
use std::path::Path;

/// Track uuids: one range per kind, the index added.
pub const PACKAGE_UUID: u64 = 1_000;
pub const PROCESS_UUID: u64 = 2_000;
pub const GROUP_UUID: u64 = 3_000;
pub const REST_UUID: u64 = 4_000;
pub const BURSTS_UUID: u64 = 5_000;
/// The recorded command's tree (`record -- CMD`), one track.
pub const COMMAND_UUID: u64 = 6_000;
/// The top victims' stall-share tracks, one each.
pub const VICTIMS_UUID: u64 = 7_000;
/// The packages' latency and utilisation tracks: three per package (by its rank in id order),
/// read latency, write latency and utilisation.
pub const LATENCY_UUID: u64 = 8_000;
/// Victims given a stall-share track.
pub const TRACK_VICTIMS: usize = 4;
/// Culprits named in a burst slice's title (all of them are in its arguments).
const TITLE_CULPRITS: usize = 3;
const SEQUENCE: u32 = 1;

fn packet() -> TracePacket {
    let mut p = TracePacket::new();
    p.set_trusted_packet_sequence_id(SEQUENCE);
    p
}

fn descriptor(uuid: u64, name: &str) -> TracePacket {
    let mut d = TrackDescriptor::new();
    d.set_uuid(uuid);
    d.set_name(name.to_owned());
    let mut p = packet();
    p.set_track_descriptor(d);
    p
}

fn counter_descriptor(uuid: u64, parent: Option<u64>, name: &str, unit: &str) -> TracePacket {
    let mut p = descriptor(uuid, name);
    let d = p.mut_track_descriptor();
    if let Some(parent) = parent {
        d.set_parent_uuid(parent);
    }
    let mut c = CounterDescriptor::new();
    c.set_unit_name(unit.to_owned());
    d.counter = Some(c).into();
    p
}

fn event(t_ns: u64, track: u64, kind: track_event::Type) -> (TracePacket, TrackEvent) {
    let mut p = packet();
    p.set_timestamp(t_ns);
    let mut e = TrackEvent::new();
    e.set_type(kind);
    e.set_track_uuid(track);
    (p, e)
}

fn counter(t_ns: u64, track: u64, value: f64) -> TracePacket {
    let (mut p, mut e) = event(t_ns, track, track_event::Type::TYPE_COUNTER);
    e.set_double_counter_value(value);
    p.set_track_event(e);
    p
}

fn annotation(name: &str, value: String) -> DebugAnnotation {
    let mut a = DebugAnnotation::new();
    a.set_name(name.to_owned());
    a.set_string_value(value);
    a
}

/// A rate in the timeline's unit, for titles: `1.50 GiB/s`, `12345 page-faults/s`.
pub fn fmt_rate(unit: &Unit, v: f64) -> String {
    match unit {
        Unit::Bytes => crate::text::fmt_byte_rate(v),
        Unit::Counts(_) => format!("{} {}", super::fixed(v, 0), unit.per_s()),
    }
}

/// The slice of one burst: `burst 1.50 GiB/s: stream (pid 12) 80%, …`.
fn burst_slices(unit: &Unit, by: GroupBy, b: &BurstRow) -> [TracePacket; 2] {
    let culprits: Vec<String> = b
        .tasks
        .iter()
        .map(|r| format!("{} {:.1}%", by.label(r), r.share * 100.0))
        .collect();
    let mut title = format!("burst {}", fmt_rate(unit, b.bytes_per_s));
    if !culprits.is_empty() {
        title.push_str(": ");
        title.push_str(&culprits[..culprits.len().min(TITLE_CULPRITS)].join(", "));
    }
    let (mut begin, mut e) = event(
        b.t_start_ns,
        BURSTS_UUID,
        track_event::Type::TYPE_SLICE_BEGIN,
    );
    e.set_name(title);
    e.debug_annotations
        .push(annotation("rate", fmt_rate(unit, b.bytes_per_s)));
    for (i, c) in culprits.into_iter().enumerate() {
        e.debug_annotations
            .push(annotation(&format!("culprit {}", i + 1), c));
    }
    begin.set_track_event(e);
    let (mut end, e) = event(b.t_end_ns, BURSTS_UUID, track_event::Type::TYPE_SLICE_END);
    end.set_track_event(e);
    [begin, end]
}

/// The trace of a timeline and its bursts.
pub fn trace(tl: &Timeline, bursts: &[BurstRow]) -> Trace {
    let unit = tl.unit.per_s();
    let mut packets = Vec::new();
    for (i, tr) in tl.package_tracks.iter().enumerate() {
        packets.push(counter_descriptor(
            PACKAGE_UUID + i as u64,
            None,
            &format!("{} ({unit})", tr.name),
            &unit,
        ));
    }
    for (i, g) in tl.groups.iter().enumerate() {
        let parent = g.pid.map(|pid| {
            let mut d = TrackDescriptor::new();
            d.set_uuid(PROCESS_UUID + i as u64);
            let mut pd = ProcessDescriptor::new();
            pd.set_pid(pid as i32);
            pd.set_process_name(g.comm.clone());
            d.process = Some(pd).into();
            let mut p = packet();
            p.set_track_descriptor(d);
            packets.push(p);
            PROCESS_UUID + i as u64
        });
        packets.push(counter_descriptor(
            GROUP_UUID + i as u64,
            parent,
            &format!("{} ({unit})", g.label),
            &unit,
        ));
    }
    packets.push(counter_descriptor(
        REST_UUID,
        None,
        &format!("others and unattributed, device/unseen included ({unit})"),
        &unit,
    ));
    packets.push(descriptor(BURSTS_UUID, "bursts"));

    let mut prev_end: Option<u64> = None;
    let zero_all = |t: u64, packets: &mut Vec<TracePacket>| {
        for i in 0..tl.package_tracks.len() {
            packets.push(counter(t, PACKAGE_UUID + i as u64, 0.0));
        }
        for i in 0..tl.groups.len() {
            packets.push(counter(t, GROUP_UUID + i as u64, 0.0));
        }
        packets.push(counter(t, REST_UUID, 0.0));
    };
    for pt in &tl.points {
        // A gap (the recorder was stopped, a file rotated out): the counters drop to zero.
        if let Some(end) = prev_end
            && pt.t_start_ns > end
        {
            zero_all(end, &mut packets);
        }
        for (i, v) in pt.packages.iter().enumerate() {
            packets.push(counter(pt.t_start_ns, PACKAGE_UUID + i as u64, *v));
        }
        for (i, v) in pt.groups.iter().enumerate() {
            packets.push(counter(pt.t_start_ns, GROUP_UUID + i as u64, *v));
        }
        packets.push(counter(pt.t_start_ns, REST_UUID, pt.rest));
        prev_end = Some(pt.t_end_ns);
    }
    if let Some(end) = prev_end {
        zero_all(end, &mut packets);
    }
    for b in bursts {
        packets.extend(burst_slices(&tl.unit, tl.by, b));
    }
    // Perfetto sorts by timestamp itself, but a sorted file loads without a sorting window.
    packets.sort_by_key(|p| p.timestamp.unwrap_or(0));
    let mut t = Trace::new();
    t.packet = packets;
    t
}

/// Adds the recorded command's tree as a counter track of its own (`command: ARGV (UNIT)`): its
/// rate over each interval, at the interval's start, zero across gaps and after the last.
pub fn add_command(t: &mut Trace, unit: &Unit, c: &crate::output::report::CommandReport) {
    let unit = unit.per_s();
    let name = format!("command: {} (pid {}) ({unit})", c.argv.join(" "), c.pid);
    t.packet
        .push(counter_descriptor(COMMAND_UUID, None, &name, &unit));
    let mut prev_end: Option<u64> = None;
    for sp in &c.per_interval {
        if let Some(end) = prev_end
            && sp.t_start_ns > end
        {
            t.packet.push(counter(end, COMMAND_UUID, 0.0));
        }
        let secs = sp.t_end_ns.saturating_sub(sp.t_start_ns) as f64 / 1e9;
        let rate = if secs > 0.0 { sp.traffic / secs } else { 0.0 };
        t.packet.push(counter(sp.t_start_ns, COMMAND_UUID, rate));
        prev_end = Some(sp.t_end_ns);
    }
    if let Some(end) = prev_end {
        t.packet.push(counter(end, COMMAND_UUID, 0.0));
    }
    t.packet.sort_by_key(|p| p.timestamp.unwrap_or(0));
}

/// Victims in a trace: per burst its ranked victims (as `report --victims`), and the top
/// victims' stall shares interval by interval.
pub struct VictimTracks<'a> {
    pub by: GroupBy,
    pub bursts: &'a [Vec<BurstVictim>],
    pub series: &'a StallSeries,
}

/// A victim as a slice argument: `chaser (pid 12): +1.713 s stalled, 46.8% of its cycles
/// against 12.5% outside bursts`.
fn victim_argument(by: GroupBy, v: &BurstVictim) -> String {
    let pct = |x: Option<f64>| x.map_or_else(|| "-".into(), |x| format!("{:.1}%", x * 100.0));
    let added = match (v.added_stall_seconds, v.added_stall_cycles) {
        (Some(s), _) => format!("{s:+.3} s stalled"),
        (None, Some(c)) => format!("{c:+.3e} cycles stalled"),
        (None, None) => "no baseline".into(),
    };
    format!(
        "{}: {added}, {} of its cycles against {} outside bursts",
        by.label(&v.who.row()),
        pct(v.stall_share),
        pct(v.baseline_stall_share)
    )
}

/// Adds the victims: each burst slice's arguments gain `victim N` beside its culprits, and a
/// counter track per top victim holds its stall share (%) over each interval, at the
/// interval's start (0 where it ran no cycle, across gaps and after the last).
pub fn add_victims(t: &mut Trace, bursts: &[BurstRow], v: &VictimTracks<'_>) {
    for (b, victims) in bursts.iter().zip(v.bursts) {
        let begin = t.packet.iter_mut().find(|p| {
            p.timestamp() == b.t_start_ns
                && p.track_event().track_uuid() == BURSTS_UUID
                && p.track_event().type_() == track_event::Type::TYPE_SLICE_BEGIN
        });
        if let Some(p) = begin {
            let e = p.mut_track_event();
            for (i, x) in victims.iter().enumerate() {
                e.debug_annotations.push(annotation(
                    &format!("victim {}", i + 1),
                    victim_argument(v.by, x),
                ));
            }
        }
    }
    let s = v.series;
    for (i, label) in s.labels.iter().enumerate() {
        let name = format!("stall share: {label} (%)");
        t.packet.push(counter_descriptor(
            VICTIMS_UUID + i as u64,
            None,
            &name,
            "%",
        ));
    }
    let mut prev_end: Option<u64> = None;
    let zero = |t_ns: u64, t: &mut Trace| {
        for i in 0..s.labels.len() {
            t.packet.push(counter(t_ns, VICTIMS_UUID + i as u64, 0.0));
        }
    };
    for (start, end, shares) in &s.points {
        if let Some(e) = prev_end
            && *start > e
        {
            zero(e, t);
        }
        for (i, x) in shares.iter().enumerate() {
            let pct = x.unwrap_or(0.0) * 100.0;
            t.packet.push(counter(*start, VICTIMS_UUID + i as u64, pct));
        }
        prev_end = Some(*end);
    }
    if let Some(e) = prev_end {
        zero(e, t);
    }
    t.packet.sort_by_key(|p| p.timestamp.unwrap_or(0));
}

/// A package's figure `k` at a point: read latency (ns), write latency (ns), utilisation (%).
fn latency_figure(p: &PackageLatencyPoint, k: usize) -> Option<f64> {
    [
        p.read_latency_ns,
        p.write_latency_ns,
        p.utilisation.map(|u| u * 100.0),
    ][k]
}

/// Adds the packages' latency and utilisation: per package and figure the recording has, a
/// counter track with its value over each interval, at the interval's start (0 where an
/// interval has none, across gaps and after the last). Nothing without any.
pub fn add_latency(t: &mut Trace, latency: &LatencySeries) {
    const FIGURES: [(&str, &str); 3] = [
        ("read latency", "ns"),
        ("write latency", "ns"),
        ("utilisation", "%"),
    ];
    let ids: std::collections::BTreeSet<u32> = latency
        .points
        .iter()
        .flat_map(|pt| pt.packages.iter().map(|p| p.id))
        .collect();
    // (package id, figure, track uuid) of every figure some interval has.
    let mut tracks = Vec::new();
    for (i, id) in ids.into_iter().enumerate() {
        for (k, (name, unit)) in FIGURES.iter().enumerate() {
            let has = |p: &PackageLatencyPoint| p.id == id && latency_figure(p, k).is_some();
            if latency.points.iter().any(|pt| pt.packages.iter().any(has)) {
                let uuid = LATENCY_UUID + 3 * i as u64 + k as u64;
                let title = format!("package {id} {name} ({unit})");
                t.packet.push(counter_descriptor(uuid, None, &title, unit));
                tracks.push((id, k, uuid));
            }
        }
    }
    let zero = |t_ns: u64, t: &mut Trace| {
        for &(_, _, uuid) in &tracks {
            t.packet.push(counter(t_ns, uuid, 0.0));
        }
    };
    let mut prev_end: Option<u64> = None;
    for pt in &latency.points {
        if let Some(e) = prev_end
            && pt.t_start_ns > e
        {
            zero(e, t);
        }
        for &(id, k, uuid) in &tracks {
            let v = pt.packages.iter().find(|p| p.id == id);
            let v = v.and_then(|p| latency_figure(p, k)).unwrap_or(0.0);
            t.packet.push(counter(pt.t_start_ns, uuid, v));
        }
        prev_end = Some(pt.t_end_ns);
    }
    if let Some(e) = prev_end {
        zero(e, t);
    }
    t.packet.sort_by_key(|p| p.timestamp.unwrap_or(0));
}

/// What a trace holds beside the timeline and its bursts, where the recording has it.
pub struct Parts<'a> {
    pub command: Option<&'a crate::output::report::CommandReport>,
    pub victims: Option<&'a VictimTracks<'a>>,
    pub latency: &'a LatencySeries,
    /// The run's stack profile and its samples placed in time.
    pub stacks: Option<(&'a StackProfile, &'a [TimedSample])>,
}

/// Writes the trace of `tl` and `bursts` (and the recorded command's track, the victims, the
/// packages' latency and the callstack samples) to `path`.
pub fn write(
    path: &Path,
    tl: &Timeline,
    bursts: &[BurstRow],
    parts: &Parts<'_>,
) -> std::io::Result<()> {
    let mut t = trace(tl, bursts);
    if let Some(c) = parts.command {
        add_command(&mut t, &tl.unit, c);
    }
    if let Some(v) = parts.victims {
        add_victims(&mut t, bursts, v);
    }
    if !parts.latency.is_empty() {
        add_latency(&mut t, parts.latency);
    }
    let bytes = t.write_to_bytes().map_err(std::io::Error::other)?;
    crate::sys::file::replace_by(path, |w| {
        w.write_all(&bytes)?;
        // The callstack samples after the rest, each written as it is made (a trace's packets
        // may come in any order: Perfetto sorts them by time).
        let Some((profile, placed)) = parts.stacks else {
            return Ok(());
        };
        let mut os = protobuf::CodedOutputStream::new(w);
        let each = |p: TracePacket| os.write_message(TRACE_PACKET_FIELD, &p);
        crate::output::stacks::perfetto::for_each_packet(profile, placed, each)
            .and_then(|()| os.flush())
            .map_err(std::io::Error::other)
    })
}

/// `Trace.packet`'s field number in Perfetto's trace.proto.
const TRACE_PACKET_FIELD: u32 = 1;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::Summary;
    use crate::model::result::{IntervalResult, PackageRow, TaskRow};
    use crate::model::{Direction, SlotRole, SlotScope, SlotSpec};

    fn spec(event: &str, d: Direction) -> SlotSpec {
        SlotSpec {
            event: event.into(),
            scope: SlotScope::Package,
            role: SlotRole::Traffic(d),
            bytes_per_count: Some(64.0),
            counter_bits: 48,
        }
    }

    /// Two packages reading and writing, process 7 "stream" reading from both for 1 s.
    fn timeline() -> (Timeline, Vec<BurstRow>) {
        let specs = [spec("r", Direction::Read), spec("w", Direction::Write)];
        let stream = TaskRow {
            pid: 7,
            tgid: 7,
            comm: "stream".into(),
            read_bytes: 3 << 30,
            share: 0.75,
            ..TaskRow::default()
        };
        let iv = IntervalResult {
            t_start_ns: 5_000_000_000,
            t_end_ns: 6_000_000_000,
            packages: (0..2)
                .map(|id| PackageRow {
                    id,
                    read_bytes: 3 << 29,
                    write_bytes: 1 << 29,
                    ..PackageRow::default()
                })
                .collect(),
            tasks: vec![stream.clone()],
            ..IntervalResult::default()
        };
        let mut sum = Summary::new(&specs);
        sum.add(&iv);
        let mut tl = Timeline::new(&specs, &sum.finish(GroupBy::Tgid), GroupBy::Tgid, 8);
        tl.add(&iv);
        let burst = BurstRow {
            t_start_ns: iv.t_start_ns,
            t_end_ns: iv.t_end_ns,
            bytes_per_s: (4u64 << 30) as f64,
            tasks: vec![stream],
        };
        (tl, vec![burst])
    }

    #[test]
    fn tracks_values_and_burst_slices_decode() {
        let (tl, bursts) = timeline();
        let bytes = trace(&tl, &bursts).write_to_bytes().unwrap();
        let t = Trace::parse_from_bytes(&bytes).unwrap();
        let names: Vec<String> = t
            .packet
            .iter()
            .filter(|p| p.has_track_descriptor())
            .map(|p| p.track_descriptor().name().to_owned())
            .collect();
        assert_eq!(
            names,
            [
                "package 0 read (bytes/s)",
                "package 0 write (bytes/s)",
                "package 1 read (bytes/s)",
                "package 1 write (bytes/s)",
                // The process track has no name of its own: Perfetto names it from the pid.
                "",
                "stream (pid 7) (bytes/s)",
                "others and unattributed, device/unseen included (bytes/s)",
                "bursts",
            ]
        );
        let proc_ = t
            .packet
            .iter()
            .find(|p| p.has_track_descriptor() && p.track_descriptor().process.is_some())
            .unwrap();
        assert_eq!(proc_.track_descriptor().process.pid(), 7);
        assert_eq!(proc_.track_descriptor().process.process_name(), "stream");
        let value = |uuid: u64, at: u64| {
            t.packet
                .iter()
                .filter(|p| p.has_track_event() && p.timestamp() == at)
                .map(|p| p.track_event())
                .find(|e| e.track_uuid() == uuid && e.has_double_counter_value())
                .map(|e| e.double_counter_value())
        };
        let gib = f64::from(1u32 << 30);
        assert_eq!(value(PACKAGE_UUID, 5_000_000_000), Some(1.5 * gib));
        assert_eq!(value(PACKAGE_UUID + 3, 5_000_000_000), Some(0.5 * gib));
        assert_eq!(value(GROUP_UUID, 5_000_000_000), Some(3.0 * gib));
        assert_eq!(value(REST_UUID, 5_000_000_000), Some(1.0 * gib));
        // Counters drop to zero at the end of the last interval.
        assert_eq!(value(GROUP_UUID, 6_000_000_000), Some(0.0));
        let slices: Vec<_> = t
            .packet
            .iter()
            .filter(|p| p.has_track_event() && p.track_event().track_uuid() == BURSTS_UUID)
            .collect();
        assert_eq!(slices.len(), 2);
        let begin = slices[0].track_event();
        assert_eq!(begin.type_(), track_event::Type::TYPE_SLICE_BEGIN);
        assert_eq!(begin.name(), "burst 4.00 GiB/s: stream (pid 7) 75.0%");
        assert_eq!(slices[1].timestamp(), 6_000_000_000);
        assert_eq!(
            slices[1].track_event().type_(),
            track_event::Type::TYPE_SLICE_END
        );
        // The timestamps never go back.
        let ts: Vec<u64> = t.packet.iter().map(|p| p.timestamp()).collect();
        assert!(ts.windows(2).all(|w| w[0] <= w[1]));
    }

    /// Package 0's latency and utilisation, package 1's utilisation only (half of package
    /// 0's), at intervals 0, 1 and (after a gap) 3 from 5 s on; interval 1 has no latency.
    fn latency_series() -> LatencySeries {
        let iv = |k: u64, read: Option<f64>, write: Option<f64>, util: Option<f64>| {
            let p0 = PackageRow {
                id: 0,
                read_latency_ns: read,
                write_latency_ns: write,
                utilisation: util,
                ..PackageRow::default()
            };
            let p1 = PackageRow {
                id: 1,
                utilisation: util.map(|u| u / 2.0),
                ..PackageRow::default()
            };
            IntervalResult {
                t_start_ns: 5_000_000_000 + k * 100_000_000,
                t_end_ns: 5_100_000_000 + k * 100_000_000,
                packages: vec![p0, p1],
                ..IntervalResult::default()
            }
        };
        let mut series = LatencySeries::default();
        series.add(&iv(0, Some(85.5), Some(120.0), Some(0.5)));
        series.add(&iv(1, None, None, Some(0.25)));
        series.add(&iv(3, Some(140.0), None, Some(0.75)));
        series
    }

    #[test]
    fn latency_tracks_decode_with_their_values_and_none_without() {
        let (tl, bursts) = timeline();
        let series = latency_series();
        let mut t = trace(&tl, &bursts);
        let before = t.packet.len();
        add_latency(&mut t, &LatencySeries::default());
        assert_eq!(t.packet.len(), before, "no latency, no track");
        add_latency(&mut t, &series);
        let t = Trace::parse_from_bytes(&t.write_to_bytes().unwrap()).unwrap();
        let tracks: Vec<(u64, String, String)> = t
            .packet
            .iter()
            .filter(|p| p.has_track_descriptor())
            .map(|p| p.track_descriptor())
            .filter(|d| d.uuid() >= LATENCY_UUID)
            .map(|d| {
                (
                    d.uuid(),
                    d.name().to_owned(),
                    d.counter.unit_name().to_owned(),
                )
            })
            .collect();
        let named = |u: u64, n: &str, unit: &str| (u, n.to_owned(), unit.to_owned());
        assert_eq!(
            tracks,
            [
                named(LATENCY_UUID, "package 0 read latency (ns)", "ns"),
                named(LATENCY_UUID + 1, "package 0 write latency (ns)", "ns"),
                named(LATENCY_UUID + 2, "package 0 utilisation (%)", "%"),
                named(LATENCY_UUID + 5, "package 1 utilisation (%)", "%"),
            ]
        );
        let values = |uuid: u64| -> Vec<(u64, f64)> {
            t.packet
                .iter()
                .filter(|p| p.has_track_event() && p.track_event().track_uuid() == uuid)
                .map(|p| (p.timestamp(), p.track_event().double_counter_value()))
                .collect()
        };
        let s = |k: u64| 5_000_000_000 + k * 100_000_000;
        // Null at an interval: 0; across the gap and after the last: 0.
        assert_eq!(
            values(LATENCY_UUID),
            [
                (s(0), 85.5),
                (s(1), 0.0),
                (s(2), 0.0),
                (s(3), 140.0),
                (s(4), 0.0)
            ]
        );
        assert_eq!(values(LATENCY_UUID + 1)[0], (s(0), 120.0));
        assert_eq!(
            values(LATENCY_UUID + 2),
            [
                (s(0), 50.0),
                (s(1), 25.0),
                (s(2), 0.0),
                (s(3), 75.0),
                (s(4), 0.0)
            ]
        );
        assert_eq!(values(LATENCY_UUID + 5)[3], (s(3), 37.5));
        let ts: Vec<u64> = t.packet.iter().map(|p| p.timestamp()).collect();
        assert!(ts.windows(2).all(|w| w[0] <= w[1]));
    }
}

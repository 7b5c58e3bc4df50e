//! A profile's samples as Perfetto callstack samples (`PerfSample` packets), placed on the trace's
//! timeline at the drains that charged them, so ui.perfetto.dev shows, for a span picked on the
//! burst timeline, the call stacks its traffic came from.
//!
//! Perfetto counts samples: it has no weight per sample. So each packet stands for the same
//! amount of traffic, the quantum (a 1, 2 or 5 times a power of ten of the profile's unit, the
//! smallest that keeps the trace within [`MAX_SAMPLES`] packets), and a drain's part of a stack
//! becomes as many packets as quanta it holds. Each stack's remainder is carried from drain to
//! drain, so its packets over the run are its traffic over the quantum, rounded once. A
//! descriptor track named `callstack samples: one per Q UNIT` says the quantum.
//!
//! Encoding (Perfetto's profiling protos): on a sequence of its own ([`SEQUENCE`]), the first
//! packet clears the sequence's incremental state, and it and the packets after it intern every
//! function name, module path, build ID, mapping (one per module), frame (one per profile
//! frame) and callstack (one per profile stack, root frame first, as Perfetto orders them), a
//! few thousand frames or stacks a packet; then one
//! `PerfSample` per quantum, its `pid` and `tid` the process, its `callstack_iid` the stack.
//! Packets of one drain are spread evenly over the time since the drain before it.
use super::common::{Stacks, count_name};
use crate::model::stacks::{FrameKind, StackProfile, TimedSample};
use crate::output::perfetto_proto::profiling::CpuMode;
use crate::output::perfetto_proto::trace_packet::SequenceFlags;
use crate::output::perfetto_proto::{
    Callstack, Frame as PFrame, InternedData, InternedString, Mapping, PerfSample, TracePacket,
    TrackDescriptor,
};
use std::borrow::Cow;
use std::collections::HashMap;

/// The sequence the samples and their interned data are written on.
pub const SEQUENCE: u32 = 2;
/// The track that names the quantum.
pub const QUANTUM_TRACK_UUID: u64 = 9_000;
/// The most sample packets a trace holds.
pub const MAX_SAMPLES: u64 = 100_000;
/// How far back the first drain's packets are spread (it has no drain before it).
const FIRST_SPAN_NS: u64 = 1_000_000_000;

/// The packets that put `profile`'s samples, placed as `placed` says (in drain order), on a
/// trace: the quantum's track, the interned data, then the samples. Nothing where no sample
/// carries traffic.
pub fn callstack_packets(profile: &StackProfile, placed: &[TimedSample]) -> Vec<TracePacket> {
    let mut packets = Vec::new();
    let _ = for_each_packet(profile, placed, |p| {
        packets.push(p);
        Ok::<(), std::convert::Infallible>(())
    });
    packets
}

/// [`callstack_packets`], each handed to `f` as it is made (a trace's samples are never held
/// as messages whole).
pub fn for_each_packet<E>(
    profile: &StackProfile,
    placed: &[TimedSample],
    mut f: impl FnMut(TracePacket) -> Result<(), E>,
) -> Result<(), E> {
    let total: f64 = profile.samples.iter().map(|s| s.total() as f64).sum();
    if total <= 0.0 || placed.is_empty() {
        return Ok(());
    }
    let q = quantum(total);
    f(quantum_track(q, &count_name(&profile.sample_types)))?;
    for_each_interned(profile, INTERNED_PER_PACKET, &mut f)?;
    // Each sample's fraction of a trace sample not yet placed (below 1: single precision).
    let mut carried = vec![0.0f32; profile.samples.len()];
    // Each drain's time once (placed is in drain order).
    let mut drains: Vec<u64> = Vec::new();
    for p in placed {
        if drains.last() != Some(&p.t_ns) {
            drains.push(p.t_ns);
        }
    }
    for part in placed {
        let Some(sample) = profile.samples.get(part.sample as usize) else {
            continue;
        };
        let due = &mut carried[part.sample as usize];
        let owed = f64::from(*due) + sample.total() as f64 * f64::from(part.share) / q as f64;
        let n = owed.floor();
        *due = (owed - n) as f32;
        let i = drains.partition_point(|&t| t < part.t_ns);
        let from = match i {
            0 => part.t_ns.saturating_sub(FIRST_SPAN_NS),
            _ => drains[i - 1],
        };
        let step = part.t_ns.saturating_sub(from) / (n as u64 + 1);
        for k in 1..=n as u64 {
            let t = from + step * k;
            f(sample_packet(t, sample.tgid, part.sample))?;
        }
    }
    Ok(())
}

/// The smallest 1, 2 or 5 × 10^k (k ≥ 0) that divides `total` into at most [`MAX_SAMPLES`].
fn quantum(total: f64) -> u64 {
    let mut base = 1u64;
    loop {
        for m in [1, 2, 5] {
            let q = base.saturating_mul(m);
            if total / q as f64 <= MAX_SAMPLES as f64 || q == u64::MAX {
                return q;
            }
        }
        base = base.saturating_mul(10);
    }
}

fn packet() -> TracePacket {
    let mut p = TracePacket::new();
    p.set_trusted_packet_sequence_id(SEQUENCE);
    p
}

fn quantum_track(q: u64, unit: &str) -> TracePacket {
    let mut d = TrackDescriptor::new();
    d.set_uuid(QUANTUM_TRACK_UUID);
    d.set_name(format!("callstack samples: one per {q} {unit}"));
    let mut p = packet();
    p.set_track_descriptor(d);
    p
}

fn sample_packet(t_ns: u64, tgid: u32, stack: u32) -> TracePacket {
    let mut s = PerfSample::new();
    s.set_pid(tgid);
    s.set_tid(tgid);
    s.set_cpu_mode(CpuMode::MODE_USER);
    s.set_callstack_iid(u64::from(stack) + 1);
    let mut p = packet();
    p.set_timestamp(t_ns);
    p.set_perf_sample(s);
    p
}

/// Interned strings, numbered from 1 in the order first asked; `out` holds those not written
/// yet.
/// A string held by the profile is borrowed from it, not copied.
#[derive(Default)]
struct Strings<'a> {
    ids: HashMap<Cow<'a, str>, u64>,
    out: Vec<InternedString>,
}

impl<'a> Strings<'a> {
    fn id(&mut self, s: Cow<'a, str>) -> u64 {
        if let Some(&id) = self.ids.get(&s) {
            return id;
        }
        // Numbered by all asked so far: `out` is emptied at each packet written.
        let id = self.ids.len() as u64 + 1;
        let mut i = InternedString::new();
        i.set_iid(id);
        i.set_str(s.as_bytes().to_vec());
        self.out.push(i);
        self.ids.insert(s, id);
        id
    }
}

/// Frames, or callstacks, interned per packet: the interned data is made and written a part at
/// a time (a million stacks interned in one message held 160 MB more than the profile).
const INTERNED_PER_PACKET: usize = 4096;

/// The sequence's interned data as it is made: what was interned so far, and the part not yet
/// written.
#[derive(Default)]
struct Interner<'a> {
    names: Strings<'a>,
    paths: Strings<'a>,
    builds: Strings<'a>,
    mappings: HashMap<(String, String), u64>,
    data: InternedData,
    written: bool,
}

impl<'a> Interner<'a> {
    /// Interns profile frame `slot` (and its mapping and strings, where new) as iid `slot + 1`.
    fn frame(&mut self, slot: usize, f: &'a crate::model::stacks::Frame) {
        let module = match (f.kind, &f.module) {
            (_, Some(m)) => m.clone(),
            (FrameKind::Kernel, None) => "[kernel.kallsyms]".to_string(),
            (_, None) => "[unknown]".to_string(),
        };
        let build = f.build_id.clone().unwrap_or_default();
        let next = self.mappings.len() as u64 + 1;
        let (paths, builds, data) = (&mut self.paths, &mut self.builds, &mut self.data);
        let mapping = *self
            .mappings
            .entry((module.clone(), build.clone()))
            .or_insert_with(|| {
                let mut m = Mapping::new();
                m.set_iid(next);
                if !build.is_empty() {
                    m.set_build_id(builds.id(Cow::Owned(build.clone())));
                }
                let parts = module.split('/').filter(|p| !p.is_empty());
                m.path_string_ids = parts.map(|p| paths.id(Cow::Owned(p.into()))).collect();
                data.mappings.push(m);
                next
            });
        let mut pf = PFrame::new();
        pf.set_iid(slot as u64 + 1);
        pf.set_function_name_id(self.names.id(f.label_ref()));
        pf.set_mapping_id(mapping);
        pf.set_rel_pc(f.offset);
        self.data.frames.push(pf);
    }

    /// The part not yet written, as one packet: the first clears the sequence's incremental
    /// state, the others add to it.
    fn packet(&mut self) -> TracePacket {
        let mut data = std::mem::take(&mut self.data);
        data.function_names = std::mem::take(&mut self.names.out);
        data.mapping_paths = std::mem::take(&mut self.paths.out);
        data.build_ids = std::mem::take(&mut self.builds.out);
        let mut p = packet();
        if self.written {
            p.set_sequence_flags(SequenceFlags::SEQ_NEEDS_INCREMENTAL_STATE as u32);
        } else {
            p.set_sequence_flags(SequenceFlags::SEQ_INCREMENTAL_STATE_CLEARED as u32);
            p.set_first_packet_on_sequence(true);
        }
        self.written = true;
        p.interned_data = Some(data).into();
        p
    }
}

/// The packets interning every frame and stack of `profile`, `per_packet` frames or stacks a
/// packet, each handed to `f` as it is made: frame `i` (the unresolved marker last) has iid
/// `i + 1`, stack `i` iid `i + 1`, every frame interned before the first stack.
fn for_each_interned<E>(
    profile: &StackProfile,
    per_packet: usize,
    mut f: impl FnMut(TracePacket) -> Result<(), E>,
) -> Result<(), E> {
    let stacks = Stacks::new(profile);
    let per_packet = per_packet.max(1);
    let mut interner = Interner::default();
    for slot in 0..stacks.slot_count() {
        interner.frame(slot, stacks.frame(slot));
        if interner.data.frames.len() >= per_packet {
            f(interner.packet())?;
        }
    }
    for i in 0..profile.stacks.len() as u32 {
        let mut c = Callstack::new();
        c.set_iid(u64::from(i) + 1);
        c.frame_ids = stacks.slots(i).rev().map(|s| s as u64 + 1).collect();
        interner.data.callstacks.push(c);
        if interner.data.callstacks.len() >= per_packet {
            f(interner.packet())?;
        }
    }
    let d = &interner.data;
    if !interner.written || !d.frames.is_empty() || !d.callstacks.is_empty() {
        f(interner.packet())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::stacks::{Frame, SampleType, Stack, StackSample};
    use crate::output::perfetto_proto::trace_packet::Data;

    fn frame(name: &str) -> Frame {
        Frame {
            kind: FrameKind::User,
            function: Some(name.into()),
            module: Some("/usr/bin/two".into()),
            offset: 0x1000,
            build_id: Some("abcd".into()),
            file: None,
            line: None,
        }
    }

    /// Two stacks of one process, `main;hot_three` and `main;hot_one`, 3:1.
    fn profile(three: u64, one: u64) -> StackProfile {
        let sample = |stack, v| StackSample {
            tgid: 42,
            comm: "two".into(),
            cgroup: None,
            stack,
            values: smallvec::smallvec![v],
        };
        StackProfile {
            sample_types: vec![SampleType {
                name: "page-faults".into(),
                unit: "count".into(),
            }],
            frames: vec![frame("main"), frame("hot_three"), frame("hot_one")],
            stacks: vec![Stack { frames: vec![1, 0] }, Stack { frames: vec![2, 0] }],
            samples: vec![sample(0, three), sample(1, one)],
            ..Default::default()
        }
    }

    /// Decodes the packets as a profiler would: each sample's leaf function through the
    /// interned callstack and frame, counted, and the samples' times.
    fn decode(packets: &[TracePacket]) -> (HashMap<String, u64>, Vec<u64>) {
        let mut names = HashMap::new();
        let mut frames = HashMap::new();
        let mut stacks = HashMap::new();
        let mut mappings = std::collections::HashSet::new();
        let (mut counts, mut times) = (HashMap::new(), Vec::new());
        for p in packets {
            if let Some(d) = p.interned_data.as_ref() {
                let first = mappings.is_empty() && frames.is_empty() && stacks.is_empty();
                assert_eq!(
                    p.sequence_flags(),
                    if first { 1 } else { 2 },
                    "the first interning packet clears the state, the others add to it"
                );
                for s in &d.function_names {
                    names.insert(s.iid(), String::from_utf8(s.str().to_vec()).unwrap());
                }
                mappings.extend(d.mappings.iter().map(|m| m.iid()));
                for f in &d.frames {
                    assert!(mappings.contains(&f.mapping_id()), "mapping interned first");
                    frames.insert(f.iid(), f.function_name_id());
                }
                for c in &d.callstacks {
                    stacks.insert(c.iid(), c.frame_ids.clone());
                }
            }
            if let Some(Data::PerfSample(s)) = &p.data {
                assert_eq!(p.trusted_packet_sequence_id(), SEQUENCE);
                assert_eq!((s.pid(), s.tid()), (42, 42));
                let ids = &stacks[&s.callstack_iid()];
                assert_eq!(names[&frames[&ids[0]]], "main", "root first");
                let leaf = names[&frames[ids.last().unwrap()]].clone();
                *counts.entry(leaf).or_insert(0) += 1;
                times.push(p.timestamp());
            }
        }
        (counts, times)
    }

    #[test]
    fn samples_decode_to_each_stack_s_traffic_over_the_quantum_at_its_drains() {
        let p = profile(300, 100);
        // hot_three's traffic in two drains (1/3, 2/3); hot_one's in the second alone.
        let placed = [
            TimedSample {
                t_ns: 10_000,
                sample: 0,
                share: 1.0 / 3.0,
            },
            TimedSample {
                t_ns: 20_000,
                sample: 0,
                share: 2.0 / 3.0,
            },
            TimedSample {
                t_ns: 20_000,
                sample: 1,
                share: 1.0,
            },
        ];
        let packets = callstack_packets(&p, &placed);
        let (counts, times) = decode(&packets);
        assert_eq!(counts["hot_three"], 300);
        assert_eq!(counts["hot_one"], 100);
        // The second drain's packets lie between the drains.
        assert_eq!(
            times.iter().filter(|&&t| t > 10_000 && t <= 20_000).count(),
            300
        );
        assert!(times.iter().all(|&t| t <= 20_000));
    }

    #[test]
    fn interning_a_part_a_packet_decodes_as_interning_it_whole() {
        let p = profile(300, 100);
        let placed = [0, 1].map(|sample| TimedSample {
            t_ns: 10_000,
            sample,
            share: 1.0,
        });
        let whole = callstack_packets(&p, &placed);
        let mut parts = Vec::new();
        for_each_interned(&p, 1, |x| {
            parts.push(x);
            Ok::<(), ()>(())
        })
        .unwrap();
        let interning = whole.iter().filter(|x| x.interned_data.is_some()).count();
        assert!(parts.len() > interning, "{} packets", parts.len());
        let mut trace = vec![whole[0].clone()];
        trace.extend(parts);
        trace.extend(whole.iter().filter(|x| x.has_perf_sample()).cloned());
        assert_eq!(decode(&trace), decode(&whole));
    }

    #[test]
    fn a_large_profile_is_bounded_and_keeps_its_shares() {
        let p = profile(3_000_000_000, 1_000_000_000);
        let placed = [
            TimedSample {
                t_ns: 5,
                sample: 0,
                share: 1.0,
            },
            TimedSample {
                t_ns: 5,
                sample: 1,
                share: 1.0,
            },
        ];
        let packets = callstack_packets(&p, &placed);
        let (counts, _) = decode(&packets);
        let n = counts.values().sum::<u64>();
        assert!((MAX_SAMPLES / 5..=MAX_SAMPLES).contains(&n), "{n}");
        assert_eq!(counts["hot_three"], 3 * counts["hot_one"]);
        let name = packets[0].track_descriptor().name();
        assert_eq!(name, "callstack samples: one per 50000 page-faults");
    }

    #[test]
    fn nothing_is_written_without_traffic_and_a_dangling_stack_is_skipped() {
        assert!(callstack_packets(&profile(0, 0), &[]).is_empty());
        let placed = [TimedSample {
            t_ns: 5,
            sample: 9,
            share: 1.0,
        }];
        let packets = callstack_packets(&profile(3, 1), &placed);
        assert_eq!(decode(&packets).1.len(), 0);
    }
}

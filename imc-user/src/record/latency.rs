//! The LATENCY chunk (FORMAT.md): each package's loaded latency and utilisation over an
//! interval, and its channels' latency, written right after the INTERVAL chunk it belongs to
//! and only when some package of that interval has one (a recording without them is what
//! earlier versions wrote, byte for byte). A value is a varint that says null exactly: 0 is
//! null, anything else is the value + 1, in picoseconds (latency) or parts per million
//! (utilisation). A channel is named by its label's id in the file's string table, defined
//! (in a STRINGS chunk) before the INTERVAL chunk, like the tasks' names.
use super::codec::{Cursor, Malformed, put_varint};
use crate::model::result::{ChannelLatency, IntervalResult, PackageRow};

/// Units per ns of a stored latency (picoseconds).
const PS_PER_NS: f64 = 1000.0;
/// Units of a stored utilisation (parts per million).
const PPM: f64 = 1e6;

/// Longest channel label stored, in bytes (labels are PMU names such as `uncore_imc_3` or
/// `amd_l3@cpu8`; a longer one is cut at a character boundary).
const MAX_LABEL: usize = 64;

/// Channels stored per package, at most: ten times the most a package has (Granite Rapids'
/// 12 channels of 2 sub-channels, an AMD socket's 16 CCX), so a hostile chunk cannot make a
/// reader allocate per byte it holds.
const MAX_CHANNELS: usize = 256;

/// One package's figures as the chunk holds them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PackageLatency {
    pub id: u32,
    pub read_ns: Option<f64>,
    pub write_ns: Option<f64>,
    pub utilisation: Option<f64>,
    pub channels: Vec<ChannelLatency>,
}

/// A figure in `scale` units + 1, or 0 for null (and for what is not a measure: a negative or
/// not finite value).
fn put_opt(out: &mut Vec<u8>, v: Option<f64>, scale: f64) {
    let units = v
        .filter(|x| x.is_finite() && *x >= 0.0)
        // `as` saturates: an absurd figure is stored as the largest one, never wrapped.
        .map_or(0, |x| ((x * scale).round() as u64).saturating_add(1));
    put_varint(out, units);
}

fn get_opt(c: &mut Cursor, scale: f64) -> Result<Option<f64>, Malformed> {
    Ok(match c.varint()? {
        0 => None,
        n => Some((n - 1) as f64 / scale),
    })
}

/// Whether the package has any figure to store.
fn has_any(p: &PackageRow) -> bool {
    p.read_latency_ns.is_some()
        || p.write_latency_ns.is_some()
        || p.utilisation.is_some()
        || p.latency_channels
            .iter()
            .any(|c| c.read_ns.is_some() || c.write_ns.is_some())
}

/// The label as stored: at most [`MAX_LABEL`] bytes, cut at a character boundary.
fn label(s: &str) -> &str {
    let mut end = s.len().min(MAX_LABEL);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The LATENCY payload of `iv` into `out` (cleared first), naming each channel by the id
/// `string_id` gives its label in the file's string table; false, and `out` left empty, when no
/// package of the interval has a latency or a utilisation.
pub fn encode(
    iv: &IntervalResult,
    out: &mut Vec<u8>,
    mut string_id: impl FnMut(&str) -> u64,
) -> bool {
    out.clear();
    if !iv.packages.iter().any(has_any) {
        return false;
    }
    put_varint(out, iv.packages.len() as u64);
    for p in &iv.packages {
        put_varint(out, u64::from(p.id));
        put_opt(out, p.read_latency_ns, PS_PER_NS);
        put_opt(out, p.write_latency_ns, PS_PER_NS);
        put_opt(out, p.utilisation, PPM);
        let channels = &p.latency_channels[..p.latency_channels.len().min(MAX_CHANNELS)];
        put_varint(out, channels.len() as u64);
        for ch in channels {
            put_varint(out, string_id(label(&ch.channel)));
            put_opt(out, ch.read_ns, PS_PER_NS);
            put_opt(out, ch.write_ns, PS_PER_NS);
        }
    }
    true
}

/// A LATENCY payload: at most `max_packages` packages (the header's), each channel's label a
/// string the file defined (`string` answers by id; None: not defined, damage), counts never
/// beyond what the payload holds.
pub fn decode(
    c: &mut Cursor,
    max_packages: usize,
    string: impl Fn(u64) -> Option<String>,
) -> Result<Vec<PackageLatency>, Malformed> {
    let n = c.count()?;
    if n > max_packages {
        return Err(Malformed);
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let id = c.varint_u32()?;
        let read_ns = get_opt(c, PS_PER_NS)?;
        let write_ns = get_opt(c, PS_PER_NS)?;
        let utilisation = get_opt(c, PPM)?;
        let nch = c.count()?;
        if nch > MAX_CHANNELS {
            return Err(Malformed);
        }
        let mut channels = Vec::new();
        for _ in 0..nch {
            let channel = string(c.varint()?).ok_or(Malformed)?;
            channels.push(ChannelLatency {
                channel,
                read_ns: get_opt(c, PS_PER_NS)?,
                write_ns: get_opt(c, PS_PER_NS)?,
            });
        }
        out.push(PackageLatency {
            id,
            read_ns,
            write_ns,
            utilisation,
            channels,
        });
    }
    Ok(out)
}

/// Fills the interval's packages from the chunk that follows it, by package id (an id the
/// interval has no row for is left out).
pub fn apply(iv: &mut IntervalResult, latency: Vec<PackageLatency>) {
    for l in latency {
        if let Some(p) = iv.packages.iter_mut().find(|p| p.id == l.id) {
            p.read_latency_ns = l.read_ns;
            p.write_latency_ns = l.write_ns;
            p.utilisation = l.utilisation;
            p.latency_channels = l.channels;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::result::TaskRow;
    use crate::model::{Direction, Package, SlotRole, SlotScope, SlotSpec, Topology};
    use crate::record::{
        CHUNK_INTERVAL, CHUNK_LATENCY, Item, ReadStatus, Reader, RecordHeader, Writer, rotated_path,
    };
    use std::path::Path;

    fn specs() -> Vec<SlotSpec> {
        vec![SlotSpec {
            event: "r".into(),
            scope: SlotScope::Package,
            role: SlotRole::Traffic(Direction::Read),
            bytes_per_count: Some(64.0),
            counter_bits: 48,
        }]
    }

    fn header(run_id: u64) -> RecordHeader {
        let topo = Topology {
            packages: (0..2).map(|id| Package { id, cpus: vec![id] }).collect(),
            ..Topology::default()
        };
        let mut h = RecordHeader::new(&specs(), &topo, 1000, "x", 100);
        h.run_id = run_id;
        h
    }

    /// Interval `i` of two packages: every third without latency; in the others package 0 has
    /// every figure and two channels (one with a null write), package 1 only a utilisation.
    /// Values are exact in picoseconds and parts per million, so they read back equal.
    fn interval(i: u64) -> IntervalResult {
        let task = TaskRow {
            pid: 100 + (i % 7) as u32,
            tgid: 100,
            comm: "w".into(),
            read_bytes: 6400,
            share: 0.5,
            values: [("r".to_string(), 100.0)].into(),
            ..TaskRow::default()
        };
        let mut packages: Vec<PackageRow> = (0..2)
            .map(|id| PackageRow {
                id,
                read_bytes: 6400,
                ..PackageRow::default()
            })
            .collect();
        if i % 3 != 2 {
            let f = i as f64;
            let p = &mut packages[0];
            p.read_latency_ns = Some(80.5 + f);
            p.write_latency_ns = Some(120.25 + f);
            p.utilisation = Some(0.4375);
            p.latency_channels = vec![
                ChannelLatency {
                    channel: "uncore_imc_0".into(),
                    read_ns: Some(79.125 + f),
                    write_ns: None,
                },
                ChannelLatency {
                    channel: "uncore_imc_3".into(),
                    read_ns: Some(81.875 + f),
                    write_ns: Some(119.0),
                },
            ];
            packages[1].utilisation = Some(0.0);
        }
        IntervalResult {
            t_start_ns: i * 100,
            t_end_ns: (i + 1) * 100,
            source: "x".into(),
            packages,
            tasks: vec![task],
            ..IntervalResult::default()
        }
    }

    fn write(path: &Path, ivs: &[IntervalResult], run_id: u64, max: Option<u64>) -> u64 {
        let mut w = Writer::create(path, header(run_id), max).unwrap();
        for iv in ivs {
            w.push_interval(iv).unwrap();
        }
        w.finish().unwrap().rotations
    }

    /// Every chunk of a file: (type, whole framed bytes).
    fn chunks(data: &[u8]) -> Vec<(u8, &[u8])> {
        let hlen = u32::from_le_bytes(data[10..14].try_into().unwrap()) as usize;
        let mut at = 18 + hlen;
        let mut out = Vec::new();
        while at < data.len() {
            let len = u32::from_le_bytes(data[at + 1..at + 5].try_into().unwrap()) as usize;
            out.push((data[at], &data[at..at + 9 + len]));
            at += 9 + len;
        }
        out
    }

    /// Intervals of a file, checking that `last_amount` is each one's own (the reader reads
    /// the chunk after an interval before handing it out).
    fn read(path: &Path) -> (Vec<IntervalResult>, ReadStatus) {
        let mut r = Reader::open(path).unwrap();
        let mut out = Vec::new();
        while let Some(item) = r.next_item() {
            if let Item::Interval(mut iv) = item {
                assert_eq!(r.last_amount(), iv.package_bytes() as f64);
                // The reader adds how the run divided traffic; the test's rows have none.
                iv.weighting = None;
                out.push(iv);
            }
        }
        (out, r.status().clone())
    }

    #[test]
    fn latency_round_trips_with_its_nulls_and_only_where_present() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.imc");
        let ivs: Vec<IntervalResult> = (0..9).map(interval).collect();
        write(&path, &ivs, 7, None);
        let (got, status) = read(&path);
        assert_eq!(status, ReadStatus::Complete);
        assert_eq!(got, ivs);
        // Package 1's utilisation of 0 is a measure, not a null.
        assert_eq!(got[0].packages[1].utilisation, Some(0.0));
        assert_eq!(got[0].packages[1].read_latency_ns, None);
        assert_eq!(got[2].packages[0].read_latency_ns, None);
        // One LATENCY chunk per interval with a figure, each right after its INTERVAL.
        let data = std::fs::read(&path).unwrap();
        let kinds: Vec<u8> = chunks(&data).iter().map(|c| c.0).collect();
        let n = kinds.iter().filter(|&&k| k == CHUNK_LATENCY).count();
        assert_eq!(n, 6, "{kinds:?}");
        for (i, k) in kinds.iter().enumerate() {
            if *k == CHUNK_LATENCY {
                assert_eq!(kinds[i - 1], CHUNK_INTERVAL, "{kinds:?}");
            }
        }
    }

    #[test]
    fn without_latency_the_file_is_the_one_written_before_latency_was_stored() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str| dir.path().join(name);
        let ivs: Vec<IntervalResult> = (0..9).map(interval).collect();
        write(&file("a.imc"), &ivs, 7, None);
        let strip = |keep_labels: bool| {
            let mut out = ivs.clone();
            for p in out.iter_mut().flat_map(|iv| iv.packages.iter_mut()) {
                (p.read_latency_ns, p.write_latency_ns, p.utilisation) = (None, None, None);
                for c in &mut p.latency_channels {
                    (c.read_ns, c.write_ns) = (None, None);
                }
                if !keep_labels {
                    p.latency_channels.clear();
                }
            }
            out
        };
        let stripped = strip(false);
        write(&file("b.imc"), &stripped, 7, None);
        // Channels named but with no figure: nothing written of them either, byte for byte.
        write(&file("c.imc"), &strip(true), 7, None);
        let a = std::fs::read(file("a.imc")).unwrap();
        let b = std::fs::read(file("b.imc")).unwrap();
        assert_eq!(std::fs::read(file("c.imc")).unwrap(), b);
        assert!(chunks(&b).iter().all(|c| c.0 != CHUNK_LATENCY));
        // The LATENCY chunks, and the channels' labels in the string table, are all the
        // difference: the task table and the intervals are the same bytes.
        let other = |data: &[u8]| -> Vec<Vec<u8>> {
            chunks(data)
                .into_iter()
                .filter(|c| c.0 != CHUNK_LATENCY && c.0 != super::super::CHUNK_STRINGS)
                .map(|c| c.1.to_vec())
                .collect()
        };
        assert_eq!(other(&a), other(&b));
        let (got, _) = read(&file("b.imc"));
        assert_eq!(got, stripped);
    }

    #[test]
    fn latency_stays_with_its_interval_across_rotations() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.imc");
        let ivs: Vec<IntervalResult> = (0..3000).map(interval).collect();
        let max = 48 << 10;
        let rotations = write(&path, &ivs, 9, Some(max));
        assert!(rotations >= 2, "{rotations}");
        let mut got = Vec::new();
        for p in [rotated_path(&path), path.clone()] {
            let data = std::fs::read(&p).unwrap();
            assert!(data.len() as u64 <= max / 2);
            let kinds: Vec<u8> = chunks(&data).iter().map(|c| c.0).collect();
            // Never split from its interval: each file's first data chunk is no LATENCY.
            for (i, k) in kinds.iter().enumerate() {
                if *k == CHUNK_LATENCY {
                    assert!(i > 0 && kinds[i - 1] == CHUNK_INTERVAL, "{kinds:?}");
                }
            }
            let (ivs, status) = read(&p);
            assert!(
                matches!(status, ReadStatus::Continued | ReadStatus::Complete),
                "{status:?}"
            );
            got.extend(ivs);
        }
        assert!(got.len() > 100, "{}", got.len());
        for g in &got {
            let want = &ivs[(g.t_start_ns / 100) as usize];
            assert_eq!(g.packages, want.packages);
        }
    }

    #[test]
    fn a_latency_chunk_claiming_more_packages_than_the_header_is_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.imc");
        write(&path, &[interval(0)], 7, None);
        let data = std::fs::read(&path).unwrap();
        let mut bad = bytes::BytesMut::from(&data[..]);
        // Three packages in a header of two: never more rows than the machine had.
        super::super::codec::put_chunk(&mut bad, CHUNK_LATENCY, &[3, 0, 0, 0, 0, 0]);
        // More channels than any package has: damage, never an allocation per byte.
        let mut many = bytes::BytesMut::from(&data[..]);
        let mut p = vec![1, 0, 0, 0, 0];
        super::super::codec::put_varint(&mut p, MAX_CHANNELS as u64 + 1);
        p.extend(std::iter::repeat_n(0, 3 * (MAX_CHANNELS + 1)));
        super::super::codec::put_chunk(&mut many, CHUNK_LATENCY, &p);
        // A channel named by a string the file never defined.
        let mut undefined = bytes::BytesMut::from(&data[..]);
        super::super::codec::put_chunk(
            &mut undefined,
            CHUNK_LATENCY,
            &[1, 0, 0, 0, 0, 1, 99, 0, 0],
        );
        let mut r = Reader::from_bytes(&path, bad.to_vec()).unwrap();
        let mut n = 0;
        while r.next_item().is_some() {
            n += 1;
        }
        assert_eq!(n, 1);
        assert!(
            matches!(r.status(), ReadStatus::Damaged { offset, .. } if *offset == data.len() as u64),
            "{:?}",
            r.status()
        );
        for bad in [undefined, many] {
            let mut r = Reader::from_bytes(&path, bad.to_vec()).unwrap();
            while r.next_item().is_some() {}
            assert!(matches!(r.status(), ReadStatus::Damaged { .. }));
        }
        // A LATENCY chunk with no interval before it fills nothing and is no damage.
        let hlen = 18 + u32::from_le_bytes(data[10..14].try_into().unwrap()) as usize;
        let mut stray = bytes::BytesMut::from(&data[..hlen]);
        super::super::codec::put_chunk(&mut stray, CHUNK_LATENCY, &[1, 0, 5, 0, 0, 0]);
        stray.extend_from_slice(&data[hlen..]);
        let mut r = Reader::from_bytes(&path, stray.to_vec()).unwrap();
        let Some(Item::Interval(iv)) = r.next_item() else {
            panic!("an interval")
        };
        assert_eq!(iv.packages, interval(0).packages);
        while r.next_item().is_some() {}
        assert_eq!(r.status(), &ReadStatus::Complete);
    }

    #[test]
    fn a_latency_chunk_after_a_strings_chunk_fills_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.imc");
        // Interval 2 has no latency of its own.
        write(&path, &[interval(2)], 7, None);
        let data = std::fs::read(&path).unwrap();
        let hlen = 18 + u32::from_le_bytes(data[10..14].try_into().unwrap()) as usize;
        let mut f = bytes::BytesMut::from(&data[..hlen]);
        for (kind, chunk) in chunks(&data) {
            f.extend_from_slice(chunk);
            if kind == CHUNK_INTERVAL {
                // INTERVAL, STRINGS, LATENCY: the LATENCY follows no INTERVAL.
                super::super::codec::put_chunk(&mut f, super::super::CHUNK_STRINGS, &[1, 1, b'x']);
                super::super::codec::put_chunk(&mut f, CHUNK_LATENCY, &[1, 0, 5, 0, 0, 0]);
            }
        }
        let mut r = Reader::from_bytes(&path, f.to_vec()).unwrap();
        let Some(Item::Interval(iv)) = r.next_item() else {
            panic!("an interval")
        };
        assert_eq!(iv.packages, interval(2).packages);
        assert_eq!(iv.packages[0].read_latency_ns, None);
        assert!(r.next_item().is_none());
        assert_eq!(r.status(), &ReadStatus::Complete);
    }

    #[test]
    fn labels_are_cut_at_a_character_boundary_and_absurd_figures_saturate() {
        let long = "é".repeat(40);
        assert_eq!(label(&long).len(), 64);
        assert_eq!(label("uncore_imc_3"), "uncore_imc_3");
        let mut out = Vec::new();
        put_opt(&mut out, Some(f64::INFINITY), PS_PER_NS);
        put_opt(&mut out, Some(-1.0), PS_PER_NS);
        put_opt(&mut out, Some(1e30), PS_PER_NS);
        let mut c = Cursor::new(&out);
        assert_eq!(get_opt(&mut c, PS_PER_NS), Ok(None));
        assert_eq!(get_opt(&mut c, PS_PER_NS), Ok(None));
        assert_eq!(
            get_opt(&mut c, PS_PER_NS),
            Ok(Some(u64::MAX as f64 / 1000.0 - 0.001))
        );
    }
}

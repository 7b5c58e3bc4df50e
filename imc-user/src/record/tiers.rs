//! The TIERS chunk (FORMAT.md): each package's bytes per memory tier over an interval, DRAM
//! and CXL, written right after the INTERVAL chunk it belongs to (after its LATENCY chunk,
//! where it has one) and only where some package of that interval has tiers, which the plan's
//! CXL counters give (a recording of DRAM alone is what earlier versions wrote, byte for byte).
use super::codec::{Cursor, Malformed, put_varint};
use crate::model::Tier;
use crate::model::result::{IntervalResult, TierBytes};

/// Tiers stored per package, at most: room for tiers to come, never a count a hostile chunk
/// could make a reader allocate for.
const MAX_TIERS: usize = 8;

/// A tier as the chunk codes it.
fn code(t: Tier) -> u64 {
    match t {
        Tier::Dram => 0,
        Tier::Cxl => 1,
    }
}

fn tier(code: u64) -> Result<Tier, Malformed> {
    match code {
        0 => Ok(Tier::Dram),
        1 => Ok(Tier::Cxl),
        _ => Err(Malformed),
    }
}

/// The TIERS payload of `iv` into `out` (cleared first); false, and `out` left empty, when no
/// package of the interval has tiers.
pub fn encode(iv: &IntervalResult, out: &mut Vec<u8>) -> bool {
    out.clear();
    if iv.packages.iter().all(|p| p.tiers.is_empty()) {
        return false;
    }
    put_varint(out, iv.packages.len() as u64);
    for p in &iv.packages {
        put_varint(out, u64::from(p.id));
        let tiers = &p.tiers[..p.tiers.len().min(MAX_TIERS)];
        put_varint(out, tiers.len() as u64);
        for t in tiers {
            put_varint(out, code(t.tier));
            put_varint(out, t.read_bytes);
            put_varint(out, t.write_bytes);
            put_varint(out, t.total_bytes);
        }
    }
    true
}

/// A TIERS payload: at most `max_packages` packages (the header's), each with at most
/// [`MAX_TIERS`] tiers of a known code.
pub fn decode(
    c: &mut Cursor,
    max_packages: usize,
) -> Result<Vec<(u32, Vec<TierBytes>)>, Malformed> {
    let n = c.count()?;
    if n > max_packages {
        return Err(Malformed);
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let id = c.varint_u32()?;
        let nt = c.count()?;
        if nt > MAX_TIERS {
            return Err(Malformed);
        }
        let mut tiers = Vec::with_capacity(nt);
        for _ in 0..nt {
            tiers.push(TierBytes {
                tier: tier(c.varint()?)?,
                read_bytes: c.varint()?,
                write_bytes: c.varint()?,
                total_bytes: c.varint()?,
            });
        }
        out.push((id, tiers));
    }
    Ok(out)
}

/// Fills the interval's packages from the chunk that follows it, by package id (an id the
/// interval has no row for is left out).
pub fn apply(iv: &mut IntervalResult, tiers: Vec<(u32, Vec<TierBytes>)>) {
    for (id, t) in tiers {
        if let Some(p) = iv.packages.iter_mut().find(|p| p.id == id) {
            p.tiers = t;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::result::PackageRow;
    use crate::model::{Direction, Package, SlotRole, SlotScope, SlotSpec, Topology};
    use crate::record::{
        CHUNK_INTERVAL, CHUNK_LATENCY, CHUNK_TIERS, Item, ReadStatus, Reader, RecordHeader, Writer,
    };
    use std::path::Path;

    fn header() -> RecordHeader {
        let spec = |event: &str| SlotSpec {
            event: event.into(),
            scope: SlotScope::Package,
            role: SlotRole::Traffic(Direction::Read),
            bytes_per_count: Some(64.0),
            counter_bits: 48,
        };
        let topo = Topology {
            packages: (0..2).map(|id| Package { id, cpus: vec![id] }).collect(),
            ..Topology::default()
        };
        RecordHeader::new(&[spec("read"), spec("cxl_read")], &topo, 1000, "x", 100)
    }

    fn tier(t: Tier, read_bytes: u64) -> TierBytes {
        TierBytes {
            tier: t,
            read_bytes,
            write_bytes: read_bytes / 2,
            total_bytes: 0,
        }
    }

    /// Interval `i`: package 0 with tiers in every interval but the fourth, package 1 with
    /// none; every other interval a latency as well.
    fn interval(i: u64) -> IntervalResult {
        let mut packages: Vec<PackageRow> = (0..2)
            .map(|id| PackageRow {
                id,
                read_bytes: 64 * (100 + i),
                ..PackageRow::default()
            })
            .collect();
        if i != 3 {
            packages[0].tiers = vec![tier(Tier::Dram, 64 * 60), tier(Tier::Cxl, 64 * (40 + i))];
        }
        if i.is_multiple_of(2) {
            packages[1].utilisation = Some(0.5);
        }
        IntervalResult {
            t_start_ns: i * 100,
            t_end_ns: (i + 1) * 100,
            source: "x".into(),
            packages,
            ..IntervalResult::default()
        }
    }

    fn read(path: &Path) -> Vec<IntervalResult> {
        let mut r = Reader::open(path).unwrap();
        let mut out = Vec::new();
        while let Some(item) = r.next_item() {
            if let Item::Interval(mut iv) = item {
                iv.weighting = None;
                out.push(iv);
            }
        }
        assert_eq!(r.status(), &ReadStatus::Complete);
        out
    }

    /// The chunk types of a file, in order.
    fn kinds(data: &[u8]) -> Vec<u8> {
        let hlen = u32::from_le_bytes(data[10..14].try_into().unwrap()) as usize;
        let mut at = 18 + hlen;
        let mut out = Vec::new();
        while at < data.len() {
            let len = u32::from_le_bytes(data[at + 1..at + 5].try_into().unwrap()) as usize;
            out.push(data[at]);
            at += 9 + len;
        }
        out
    }

    #[test]
    fn tiers_round_trip_after_their_interval_and_its_latency() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.imc");
        let ivs: Vec<IntervalResult> = (0..6).map(interval).collect();
        let mut w = Writer::create(&path, header(), None).unwrap();
        for iv in &ivs {
            w.push_interval(iv).unwrap();
        }
        w.finish().unwrap();
        let got = read(&path);
        assert_eq!(got, ivs);
        assert_eq!(got[5].packages[0].tiers[1].read_bytes, 64 * 45);
        assert!(got[3].packages[0].tiers.is_empty());
        // One TIERS chunk per interval with tiers, after its INTERVAL and its LATENCY.
        let k = kinds(&std::fs::read(&path).unwrap());
        assert_eq!(k.iter().filter(|&&c| c == CHUNK_TIERS).count(), 5, "{k:?}");
        for (i, c) in k.iter().enumerate() {
            if *c == CHUNK_TIERS {
                assert!([CHUNK_INTERVAL, CHUNK_LATENCY].contains(&k[i - 1]), "{k:?}");
            }
        }
    }

    /// FORMAT.md's figure: one package of DRAM and CXL at a few GB/s in a second is 27 bytes
    /// of payload (each byte count a 5-byte varint).
    #[test]
    fn a_second_of_dram_and_cxl_at_a_few_gb_per_s_is_27_bytes() {
        let mut iv = interval(0);
        iv.packages.truncate(1);
        iv.packages[0].tiers = vec![
            tier(Tier::Dram, 6_000_000_000),
            tier(Tier::Cxl, 2_000_000_000),
        ];
        let mut out = Vec::new();
        assert!(encode(&iv, &mut out));
        assert_eq!(out.len(), 27);
    }

    #[test]
    fn a_tier_the_reader_does_not_know_is_damage_and_none_is_no_chunk() {
        let mut out = Vec::new();
        assert!(!encode(&interval(3), &mut out));
        assert!(out.is_empty());
        // One package, one tier of code 7.
        let bad = [1u8, 0, 1, 7, 1, 1, 1];
        assert!(decode(&mut Cursor::new(&bad), 2).is_err());
        let good = [1u8, 0, 1, 1, 1, 1, 1];
        let t = decode(&mut Cursor::new(&good), 2).unwrap();
        assert_eq!(t[0].1[0].tier, Tier::Cxl);
        // More packages than the header has is damage too.
        assert!(decode(&mut Cursor::new(&[3u8]), 2).is_err());
    }
}

//! A recording file → `record::Reader`. Beyond "no panic": reading always ends with a status
//! (never `Reading`), a damage offset lies inside the input, no more items come out than the
//! input has room for chunks, and every interval ends no earlier than it starts.
//!
//! Random bytes rarely pass the header and chunk checksums, so when the first input byte is
//! odd the checksums are recomputed over the rest first: the fuzzer then reaches the decoders
//! of every chunk type with contents of its choosing.
#![no_main]
use imc::record::codec::crc32;
use imc::record::{Item, ReadStatus, Reader};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

/// Rewrites the header CRC and every chunk CRC it can find (stopping at the first chunk that
/// runs past the end).
fn fix_checksums(d: &mut [u8]) {
    let Some(h) = d.get(10..14) else { return };
    let hlen = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
    let Some(end) = 14usize.checked_add(hlen) else { return };
    if end + 4 > d.len() {
        return;
    }
    let c = crc32(&[&d[14..end]]).to_le_bytes();
    d[end..end + 4].copy_from_slice(&c);
    let mut at = end + 4;
    while at + 9 <= d.len() {
        let len = u32::from_le_bytes([d[at + 1], d[at + 2], d[at + 3], d[at + 4]]) as usize;
        let Some(stop) = (at + 5).checked_add(len) else { return };
        if stop + 4 > d.len() {
            return;
        }
        let c = crc32(&[&d[at..stop]]).to_le_bytes();
        d[stop..stop + 4].copy_from_slice(&c);
        at = stop + 4;
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut d = rest.to_vec();
    if mode & 1 == 1 {
        fix_checksums(&mut d);
    }
    let len = d.len() as u64;
    let Ok(mut r) = Reader::from_bytes(Path::new("fuzz.imc"), d) else {
        return;
    };
    let mut items = 0u64;
    while let Some(item) = r.next_item() {
        items += 1;
        if let Item::Interval(iv) = &item {
            assert!(iv.t_end_ns >= iv.t_start_ns, "{iv:?}");
        }
        assert!(r.offset() <= len, "read past the end");
    }
    assert!(items * 9 <= len, "{items} items from {len} bytes");
    match r.status() {
        ReadStatus::Reading => panic!("ended while still reading"),
        ReadStatus::Damaged { offset, .. } => assert!(*offset <= len, "damage at {offset}"),
        ReadStatus::Complete | ReadStatus::Unfinished | ReadStatus::Continued => {}
    }
});

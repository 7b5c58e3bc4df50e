//! The STACKS2 chunk (and STACKS, what older recordings hold; FORMAT.md): what a drain of the sampler charged to each process's call
//! stacks, with the stacks' frames, so `imc report` shows traffic by code without the
//! processes or their binaries. Every text of a frame (function, module, build id, file) is an
//! id in the file's string table, defined before the chunk like the tasks' names; the stacks
//! are defined in the chunk that uses them.
use super::codec::{Cursor, Malformed, put_varint};
use crate::model::stacks::{Frame, FrameKind, StackBatch, StackCharge};
use std::collections::HashMap;
use std::sync::Arc;

/// Frames a stored stack holds at most: a user and a kernel stack of the kernel's depth and
/// their markers, with room to spare; a hostile chunk cannot claim more.
const MAX_FRAMES: usize = 1024;
/// Slot values a charge holds at most (the record's slots).
const MAX_SLOTS: usize = imc_common::MAX_SLOTS;

fn kind_byte(k: FrameKind) -> u8 {
    match k {
        FrameKind::User => 0,
        FrameKind::Kernel => 1,
        FrameKind::Jit => 2,
        FrameKind::Marker => 3,
    }
}

fn kind_of(b: u8) -> Result<FrameKind, Malformed> {
    Ok(match b {
        0 => FrameKind::User,
        1 => FrameKind::Kernel,
        2 => FrameKind::Jit,
        3 => FrameKind::Marker,
        _ => return Err(Malformed),
    })
}

/// Which layout a chunk has: STACKS2 carries each charge's cgroup, STACKS (what recordings
/// made before it hold) does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Stacks,
    Stacks2,
}

/// Encodes `b` into `out` in `layout`, naming texts by `string` (their ids in the file's
/// table).
pub fn encode(
    b: &StackBatch,
    layout: Layout,
    out: &mut Vec<u8>,
    mut string: impl FnMut(&str) -> u64,
) {
    put_varint(out, b.t_ns);
    put_varint(out, b.dropped);
    let mut index: HashMap<*const Frame, u64> = HashMap::new();
    let mut order: Vec<&Arc<[Frame]>> = Vec::new();
    let ids: Vec<u64> = b
        .charges
        .iter()
        .map(|c| {
            let key = c.frames.as_ptr();
            *index.entry(key).or_insert_with(|| {
                order.push(&c.frames);
                order.len() as u64 - 1
            })
        })
        .collect();
    put_varint(out, order.len() as u64);
    for frames in order {
        let n = frames.len().min(MAX_FRAMES);
        put_varint(out, n as u64);
        for f in &frames[..n] {
            out.push(kind_byte(f.kind));
            let mut opt = |s: &Option<String>| s.as_deref().map_or(0, |t| string(t) + 1);
            let (func, module) = (opt(&f.function), opt(&f.module));
            let (build, file) = (opt(&f.build_id), opt(&f.file));
            for v in [func, module, f.offset, build, file] {
                put_varint(out, v);
            }
            put_varint(out, f.line.map_or(0, |l| u64::from(l) + 1));
        }
    }
    put_varint(out, b.charges.len() as u64);
    for (c, id) in b.charges.iter().zip(ids) {
        put_varint(out, u64::from(c.tgid));
        if layout == Layout::Stacks2 {
            // The id + 1; 0: not known.
            put_varint(out, c.cgroup.and_then(|g| g.checked_add(1)).unwrap_or(0));
        }
        put_varint(out, id);
        put_varint(out, c.on_ns);
        put_varint(out, c.slices);
        let n = c.slots.len().min(MAX_SLOTS);
        put_varint(out, n as u64);
        for &v in &c.slots[..n] {
            put_varint(out, v);
        }
    }
}

/// Decodes a payload of `layout`, naming texts by `string` (None: an id the file never
/// defined, which makes the chunk malformed).
pub fn decode(
    c: &mut Cursor,
    layout: Layout,
    string: impl Fn(u64) -> Option<String>,
) -> Result<StackBatch, Malformed> {
    let t_ns = c.varint()?;
    let dropped = c.varint()?;
    let nstacks = c.count()?;
    let mut stacks: Vec<Arc<[Frame]>> = Vec::with_capacity(nstacks.min(c.remaining()));
    for _ in 0..nstacks {
        let n = c.count()?;
        if n > MAX_FRAMES {
            return Err(Malformed);
        }
        let mut frames = Vec::with_capacity(n);
        for _ in 0..n {
            frames.push(decode_frame(c, &string)?);
        }
        stacks.push(frames.into());
    }
    let ncharges = c.count()?;
    let mut charges = Vec::with_capacity(ncharges.min(c.remaining()));
    for _ in 0..ncharges {
        let tgid = c.varint_u32()?;
        let cgroup = match layout {
            Layout::Stacks => None,
            Layout::Stacks2 => c.varint()?.checked_sub(1),
        };
        let index = usize::try_from(c.varint()?).map_err(|_| Malformed)?;
        let frames = stacks.get(index).ok_or(Malformed)?.clone();
        let (on_ns, slices) = (c.varint()?, c.varint()?);
        let n = c.count()?;
        if n > MAX_SLOTS {
            return Err(Malformed);
        }
        let slots = (0..n).map(|_| c.varint()).collect::<Result<Vec<_>, _>>()?;
        charges.push(StackCharge {
            tgid,
            cgroup,
            frames,
            on_ns,
            slices,
            slots,
        });
    }
    Ok(StackBatch {
        t_ns,
        charges,
        dropped,
    })
}

fn decode_frame(
    c: &mut Cursor,
    string: &impl Fn(u64) -> Option<String>,
) -> Result<Frame, Malformed> {
    let kind = kind_of(c.byte()?)?;
    let opt = |c: &mut Cursor| -> Result<Option<String>, Malformed> {
        match c.varint()? {
            0 => Ok(None),
            id => string(id - 1).map(Some).ok_or(Malformed),
        }
    };
    let function = opt(c)?;
    let module = opt(c)?;
    let offset = c.varint()?;
    let build_id = opt(c)?;
    let file = opt(c)?;
    let line = match c.varint()? {
        0 => None,
        l => Some(u32::try_from(l - 1).map_err(|_| Malformed)?),
    };
    Ok(Frame {
        kind,
        function,
        module,
        offset,
        build_id,
        file,
        line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_reads_back_as_written_and_a_hostile_one_is_malformed() {
        let f: Arc<[Frame]> = vec![
            Frame {
                kind: FrameKind::User,
                function: Some("hot".into()),
                module: Some("/bin/x".into()),
                offset: 0x1234,
                build_id: Some("beef".into()),
                file: Some("x.c".into()),
                line: Some(12),
            },
            Frame::marker(crate::model::stacks::TRUNCATED_FRAME),
        ]
        .into();
        let b = StackBatch {
            t_ns: 99,
            charges: vec![
                StackCharge {
                    tgid: 5,
                    cgroup: Some(4242),
                    frames: f.clone(),
                    on_ns: 1000,
                    slices: 3,
                    slots: vec![7, 0],
                },
                StackCharge {
                    tgid: 6,
                    cgroup: None,
                    frames: f,
                    on_ns: 1,
                    slices: 1,
                    slots: vec![1, 2],
                },
            ],
            dropped: 4,
        };
        let mut strings: Vec<String> = Vec::new();
        let mut encoded = |layout| {
            let mut out = Vec::new();
            encode(&b, layout, &mut out, |s| {
                match strings.iter().position(|x| x == s) {
                    Some(i) => i as u64,
                    None => {
                        strings.push(s.to_string());
                        strings.len() as u64 - 1
                    }
                }
            });
            out
        };
        let (out, old) = (encoded(Layout::Stacks2), encoded(Layout::Stacks));
        let string = |id: u64| strings.get(id as usize).cloned();
        let got = decode(&mut Cursor::new(&out), Layout::Stacks2, string).unwrap();
        assert_eq!(got, b);
        // The layout without cgroups reads back as written, with no cgroup known.
        let got = decode(&mut Cursor::new(&old), Layout::Stacks, string).unwrap();
        let mut without = b.clone();
        without.charges.iter_mut().for_each(|c| c.cgroup = None);
        assert_eq!(got, without);
        // Every cut of the payload is malformed or shorter, never a panic.
        for cut in 0..out.len() {
            let _ = decode(&mut Cursor::new(&out[..cut]), Layout::Stacks2, string);
        }
        // A string id the file never defined.
        assert!(decode(&mut Cursor::new(&out), Layout::Stacks2, |_| None).is_err());
    }
}

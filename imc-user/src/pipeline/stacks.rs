//! The stacks of a drain resolved into frames while their processes still run: each
//! (process, stack id) is turned into frames once and kept, so a short-lived process keeps its
//! frames after it is gone, and a recording needs neither the process nor its binaries.
use crate::model::stacks::{Frame, LOST_STACK_FRAME, StackBatch, StackCharge, TRUNCATED_FRAME};
use crate::sampler::RecordSource;
use crate::sampler::stacks::StackEntry;
use imc_common::{NO_STACK, STACK_DEPTH};
use std::collections::HashMap;
use std::sync::Arc;

/// Turns addresses into frames (the symbolizer; a plain one in tests).
pub trait FrameSource {
    /// One frame per user address of process `tgid` (leaf first).
    fn user_frames(&mut self, tgid: u32, addrs: &[u64]) -> Vec<Frame>;
    /// One frame per kernel address.
    fn kernel_frames(&mut self, addrs: &[u64]) -> Vec<Frame>;
}

/// Stacks kept resolved at once, at most: past it the cache starts afresh (a stack seen again
/// is resolved again).
const CACHE_MAX: usize = 200_000;

/// Resolves each drain's stack entries into a [`StackBatch`].
pub struct StackResolver {
    frames: Box<dyn FrameSource + Send>,
    /// (tgid, user stack id, kernel stack id) → frames.
    cache: HashMap<(u32, i32, i32), Arc<[Frame]>>,
    entries: Vec<StackEntry>,
    nr_slots: usize,
    dropped_before: u64,
}

impl StackResolver {
    pub fn new(frames: Box<dyn FrameSource + Send>, nr_slots: usize) -> StackResolver {
        StackResolver {
            frames,
            cache: HashMap::new(),
            entries: Vec::new(),
            nr_slots,
            dropped_before: 0,
        }
    }

    /// Everything charged to stacks since the last drain, resolved; None when nothing was.
    pub fn drain(&mut self, src: &mut impl RecordSource, t_ns: u64) -> Option<StackBatch> {
        let mut entries = std::mem::take(&mut self.entries);
        entries.clear();
        let n = src.drain_stacks(&mut entries);
        let dropped_total = src.stacks_dropped();
        let dropped = dropped_total.saturating_sub(self.dropped_before);
        self.dropped_before = dropped_total;
        let charges: Vec<StackCharge> = entries
            .iter()
            .map(|(k, c)| StackCharge {
                tgid: k.tgid,
                frames: self.frames_of(src, k.tgid, k.user_stack, k.kernel_stack),
                on_ns: c.on_ns,
                slices: c.slices,
                slots: c.slots[..self.nr_slots.min(c.slots.len())].to_vec(),
            })
            .collect();
        self.entries = entries;
        (n > 0 || dropped > 0).then_some(StackBatch {
            t_ns,
            charges,
            dropped,
        })
    }

    fn frames_of(
        &mut self,
        src: &impl RecordSource,
        tgid: u32,
        user: i32,
        kernel: i32,
    ) -> Arc<[Frame]> {
        if let Some(f) = self.cache.get(&(tgid, user, kernel)) {
            return f.clone();
        }
        let mut frames = Vec::new();
        let mut cut = false;
        if kernel != NO_STACK {
            match src.stack_addresses(kernel) {
                Some(a) => {
                    cut |= a.len() >= STACK_DEPTH;
                    frames.extend(self.frames.kernel_frames(&a));
                }
                None => frames.push(Frame::marker(LOST_STACK_FRAME)),
            }
        }
        match src.stack_addresses(user) {
            Some(a) if user != NO_STACK => {
                cut |= a.len() >= STACK_DEPTH;
                frames.extend(self.frames.user_frames(tgid, &a));
            }
            _ => frames.push(Frame::marker(LOST_STACK_FRAME)),
        }
        if cut {
            frames.push(Frame::marker(TRUNCATED_FRAME));
        }
        let frames: Arc<[Frame]> = frames.into();
        if self.cache.len() >= CACHE_MAX {
            self.cache.clear();
        }
        self.cache.insert((tgid, user, kernel), frames.clone());
        frames
    }
}

/// Frames that name only the address: where no symbolizer is at hand.
pub struct AddressFrames;

impl FrameSource for AddressFrames {
    fn user_frames(&mut self, _tgid: u32, addrs: &[u64]) -> Vec<Frame> {
        addrs.iter().map(|&a| address_frame(a, false)).collect()
    }
    fn kernel_frames(&mut self, addrs: &[u64]) -> Vec<Frame> {
        addrs.iter().map(|&a| address_frame(a, true)).collect()
    }
}

fn address_frame(a: u64, kernel: bool) -> Frame {
    Frame {
        kind: if kernel {
            crate::model::stacks::FrameKind::Kernel
        } else {
            crate::model::stacks::FrameKind::User
        },
        function: None,
        module: None,
        offset: a,
        build_id: None,
        file: None,
        line: None,
    }
}

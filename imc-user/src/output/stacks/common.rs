//! What every stack output shares: a sample's total, the unit its counts are named by, the
//! default title, and [`Stacks`], the one reading of a profile's stacks and frames (an index
//! past them reads as the [`UNRESOLVED_FRAME`] marker).
use crate::model::stacks::{Frame, SampleType, StackProfile, StackSample, UNRESOLVED_FRAME};

/// A sample's values together, saturating at `u64::MAX` (what [`StackSample::total`] is
/// wherever that sum fits).
pub fn sample_total(sample: &StackSample) -> u64 {
    sample
        .values
        .iter()
        .fold(0u64, |sum, &v| sum.saturating_add(v))
}

/// What a profile's counts are, for a flame graph's hover text or a table's header: `bytes`
/// where the sample types count bytes, else their names (`page-faults`, `read+write`), else
/// `samples`.
pub fn count_name(types: &[SampleType]) -> String {
    if types.is_empty() {
        return "samples".to_string();
    }
    if types.iter().all(|t| t.unit == "bytes") {
        return "bytes".to_string();
    }
    let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
    names.join("+")
}

/// A title that says what a profile's counts are: `DRAM bytes by call stack`, or the stand-in
/// event's counts (`page-faults by call stack`).
pub fn default_title(profile: &StackProfile) -> String {
    match count_name(&profile.sample_types).as_str() {
        "bytes" => "DRAM bytes by call stack".to_string(),
        name => format!("{name} by call stack"),
    }
}

/// A profile's frames addressed by slot: slot `i < frames.len()` is `frames[i]`; the slot
/// [`Stacks::unresolved_slot`] is the [`UNRESOLVED_FRAME`] marker that stands for every index
/// pointing past the profile.
pub struct Stacks<'a> {
    profile: &'a StackProfile,
    unresolved: Frame,
}

impl<'a> Stacks<'a> {
    pub fn new(profile: &'a StackProfile) -> Stacks<'a> {
        Stacks {
            profile,
            unresolved: Frame::marker(UNRESOLVED_FRAME),
        }
    }

    /// How many slots there are: one per frame, and the unresolved marker's.
    pub fn slot_count(&self) -> usize {
        self.profile.frames.len() + 1
    }

    /// The slot of the marker that stands for a dangling index.
    pub fn unresolved_slot(&self) -> usize {
        self.profile.frames.len()
    }

    /// The frame in a slot.
    pub fn frame(&self, slot: usize) -> &Frame {
        self.profile.frames.get(slot).unwrap_or(&self.unresolved)
    }

    /// The slots of a stack's frames, leaf first. A stack index past the profile's stacks is
    /// one unresolved frame.
    pub fn slots(&self, stack: u32) -> impl DoubleEndedIterator<Item = usize> + '_ {
        let dangling: &'static [u32] = &[u32::MAX];
        let ids = self
            .profile
            .stacks
            .get(stack as usize)
            .map_or(dangling, |s| s.frames.as_slice());
        let n = self.profile.frames.len();
        ids.iter()
            .map(move |&i| if (i as usize) < n { i as usize } else { n })
    }
}

//! Call stacks that memory traffic came from: the frames a stack is made of, and a profile of
//! the traffic charged to each (process, stack). The sampler fills it from the kernel's stack
//! map, the recording stores it, and every stack output (folded lines, flame graph, pprof, the
//! top functions of a report or of `top`) reads it. Nothing here knows where frames came from.
use serde::Serialize;

/// Where a frame's address lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FrameKind {
    /// An address in a process's own code (an ELF file mapped into it).
    User,
    /// An address in the kernel.
    Kernel,
    /// An address in code a JIT wrote (named by the process's `/tmp/perf-PID.map`).
    Jit,
    /// Not a code address: a marker the stack carries (a stack cut short, a stack that did not
    /// fit the kernel's map). Its `function` says which.
    Marker,
}

/// One frame of a stack: a function name where symbols exist, else the module and offset,
/// else the bare address.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Frame {
    pub kind: FrameKind,
    /// The function (demangled), where a symbol covers the address.
    pub function: Option<String>,
    /// The file the code was mapped from (`/usr/bin/python3.13`, `[kernel.kallsyms]`, the perf
    /// map's path for JIT code), where known.
    pub module: Option<String>,
    /// The address's offset in `module` (the ELF file offset); the raw address where no module
    /// is known.
    pub offset: u64,
    /// The module's GNU build ID (hex), where it has one: with it a profiler can find the same
    /// binary's symbols elsewhere.
    pub build_id: Option<String>,
    /// Source file and line, where debug information covers the address.
    pub file: Option<String>,
    pub line: Option<u32>,
}

impl Frame {
    /// A marker frame (see [`FrameKind::Marker`]).
    pub fn marker(what: &str) -> Frame {
        Frame {
            kind: FrameKind::Marker,
            function: Some(what.to_string()),
            module: None,
            offset: 0,
            build_id: None,
            file: None,
            line: None,
        }
    }

    /// What a profile shows for this frame: the function, else `module+0xOFFSET` (the module's
    /// file name alone), else the address in hex.
    pub fn label(&self) -> String {
        self.label_ref().into_owned()
    }

    /// [`Frame::label`], borrowed from the frame where it is the function's name.
    pub fn label_ref(&self) -> std::borrow::Cow<'_, str> {
        if let Some(f) = &self.function {
            return f.as_str().into();
        }
        match &self.module {
            Some(m) => {
                let name = m.rsplit('/').next().unwrap_or(m);
                format!("{name}+{:#x}", self.offset).into()
            }
            None => format!("{:#x}", self.offset).into(),
        }
    }
}

/// Frame marking a stack the kernel could not walk to its root (no frame pointers, a depth
/// limit): it stands where the root would be.
pub const TRUNCATED_FRAME: &str = "[truncated]";
/// Frame of traffic whose stack the kernel's stack map could not hold (full, or a collision):
/// the traffic stays charged to its process under this one frame.
pub const LOST_STACK_FRAME: &str = "[stack not recorded]";
/// Frame of a process that ended (or whose binary was gone) before its frames were resolved.
pub const UNRESOLVED_FRAME: &str = "[unresolved]";
/// Frame of imc's own traffic: imc does not resolve its own stacks. Reading a binary's symbols
/// and debug information is traffic of imc's own, in new places of imc's code each time, whose
/// stacks would be more to resolve (with page faults standing in for traffic, 2,700 faults a
/// second on an idle machine, and imc's CPU with stacks ten times its CPU without).
pub const OWN_STACK_FRAME: &str = "[imc itself]";

/// One measure a profile's samples carry (pprof's sample type): `read` / `bytes`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SampleType {
    pub name: String,
    pub unit: String,
}

/// One distinct stack: indices into [`StackProfile::frames`], leaf first (the order pprof
/// stores and `perf script` prints).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Stack {
    pub frames: Vec<u32>,
}

/// A sample's values, one per sample type.
pub type SampleValues = smallvec::SmallVec<[u64; 3]>;

/// The traffic charged to one process in one stack.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StackSample {
    pub tgid: u32,
    /// The process's name (its main thread's comm), shared by the process's samples.
    pub comm: std::sync::Arc<str>,
    /// The cgroup v2 path the stack's traffic ran in, where known (in a recording made before
    /// stacks carried their cgroup: the process's main thread's as last seen); shared as
    /// `comm` is.
    pub cgroup: Option<std::sync::Arc<str>>,
    /// Index into [`StackProfile::stacks`].
    pub stack: u32,
    /// One value per [`StackProfile::sample_types`], in that order (at most three: read,
    /// write and total bytes, held in the sample).
    pub values: SampleValues,
}

impl StackSample {
    /// The sample's values together (read and write bytes, or the stand-in's one count).
    pub fn total(&self) -> u64 {
        self.values.iter().sum()
    }
}

/// Traffic by call stack over a span of time.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StackProfile {
    /// What each sample value measures; every sample type of one profile has the same unit.
    pub sample_types: Vec<SampleType>,
    pub frames: Vec<Frame>,
    pub stacks: Vec<Stack>,
    pub samples: Vec<StackSample>,
    /// The span, CLOCK_REALTIME ns at its start and its length.
    pub start_realtime_ns: u64,
    pub duration_ns: u64,
    /// Slices whose stack the kernel could not record (they are in `samples` under
    /// [`LOST_STACK_FRAME`]) and stacks cut short (under [`TRUNCATED_FRAME`]).
    pub lost_stacks: u64,
    pub truncated_stacks: u64,
}

/// A function's share of a process's traffic: in its own frames (`self_value`, the leaf) and
/// in everything it called (`total_value`, anywhere in the stack, counted once per stack).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FunctionShare {
    pub function: String,
    pub self_value: u64,
    pub total_value: u64,
    /// `total_value` over the process's traffic in the profile.
    pub share: f64,
}

/// What one process's stack was charged over a drain: its frames (kernel frames first where
/// taken, then user frames, each leaf first) and the weight it carried.
#[derive(Clone, Debug, PartialEq)]
pub struct StackCharge {
    pub tgid: u32,
    /// The cgroup v2 id the process's thread ran in (as task rows carry it); None in a
    /// recording made before stacks carried their cgroup.
    pub cgroup: Option<u64>,
    pub frames: std::sync::Arc<[Frame]>,
    /// On-CPU ns of the slices charged here (0 for sampled overflows).
    pub on_ns: u64,
    /// Slices (or sampled overflows) charged here.
    pub slices: u64,
    /// Per record slot, its events charged here (0 for slots that are not weights).
    pub slots: Vec<u64>,
}

/// Every stack charged between two drains of the sampler, taken at `t_ns` (CLOCK_MONOTONIC).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StackBatch {
    pub t_ns: u64,
    pub charges: Vec<StackCharge>,
    /// Slices the kernel could not give a stack entry (its map full): in no charge.
    pub dropped: u64,
}

/// Part of a profile's sample placed in time: the share of `StackProfile::samples[sample]`
/// charged in the drain at `t_ns` (CLOCK_MONOTONIC). A sample's shares add up to 1 (in single
/// precision: a trace places whole samples, and a million placed take 16 MB).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimedSample {
    pub t_ns: u64,
    pub sample: u32,
    pub share: f32,
}

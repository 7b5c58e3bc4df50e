//! Plain data shared by discovery, event encoding, the backends and the sampler.
//!
//! These types are the seams between modules: discovery produces `Topology` and `Pmu`, the event
//! parser turns text plus a `Pmu` into `Encoded`, and the backends and sampler open what
//! `Encoded` describes. Additive changes only; keep them serialisable for `--json` output.
//!
//! `result` is the other end: what attribution makes of the counts (the interval object of `imc top
//! --json` and `imc report --json`), which the recording stores and every renderer reads.
//! Nothing here imports a module above it.
mod grouping;
mod hardware;
pub mod result;
mod slots;
pub mod stacks;

pub use grouping::{CommandTree, GroupBy, Identity, KeyParts, PidFilter};
pub use hardware::*;
pub use result::{
    CgroupNames, IntervalResult, PackageRow, ShareBasis, TaskRow, TierBytes, package_bytes,
};
pub use slots::{
    SlotRole, SlotScope, SlotSpec, StallPart, Unit, Victims, Weighting, measures_bytes,
};

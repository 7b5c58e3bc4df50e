//! The stack outputs: a [`StackProfile`] (traffic by call stack) as folded lines (`folded`, for
//! flamegraph.pl, inferno and speedscope), a flame graph SVG (`flamegraph`), a gzipped pprof
//! profile (`pprof`, for `go tool pprof`, Pyroscope and Parca), Perfetto callstack samples
//! (`perfetto`) and a process's top functions (`functions`). Every output reads a profile's stacks through [`common::Stacks`], so all of them
//! agree on what a sample's frames are.
//!
//! Rules every output keeps:
//! - a sample's value is the sum of its values ([`common::sample_total`]), saturating, never wrapping;
//! - an index that points past the profile's stacks or frames (a profile built wrong or cut
//!   short) reads as the `[unresolved]` marker: the traffic still shows, nothing panics;
//! - no recursion over a stack's frames: stacks of any depth are walked in loops.
mod common;
pub mod flamegraph;
pub mod folded;
pub mod functions;
pub mod perfetto;
pub mod pprof;

#[cfg(test)]
mod tests;

pub use common::{Stacks, count_name, default_title, sample_total};
pub use flamegraph::{FlamegraphError, write_flamegraph};
pub use folded::write_folded;
pub use functions::top_functions;
pub use pprof::write_pprof;

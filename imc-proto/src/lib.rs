//! The protobuf message types imc writes, generated from `proto/` by rust-protobuf's own
//! generator and kept in `src/generated/`:
//! - [`profile`]: pprof's `perftools.profiles` schema (`imc report --pprof`, and what
//!   `imc serve --stacks` answers at /debug/pprof/dram);
//! - [`perfetto_trace`]: the part of Perfetto's trace format `imc report --perfetto` writes.
//!
//! They are generated ahead of the build, not by a build script: the generator and its .proto
//! parser (a regex engine among their dependencies) would otherwise be compiled for every build
//! of imc, once for each target. `cargo xtask protos` writes them again after a .proto file
//! changes (`--check` compares); `tests/generated.rs` fails while they are older than their
//! sources.

mod generated;

pub use generated::{SOURCES, perfetto_trace, profile};

/// FNV-1a (64 bits) of `bytes`: how [`SOURCES`] names the version of each .proto file the
/// modules were generated from.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

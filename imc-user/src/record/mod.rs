//! The recording file of `imc record` / `imc report`: a versioned header, then self-delimiting,
//! checksummed chunks (per-interval per-task aggregates; raw ticks around bursts). The format
//! is specified in FORMAT.md beside this file.
//!
//! The writer keeps the file small (varints, a string table and a task table, raw ticks only
//! around bursts and within a budget) and bounded (`max_size`: FILE plus one rotated FILE.1).
//! The reader stops at the first damaged or truncated chunk and hands back everything before
//! it, saying where and why it stopped.
pub mod codec;
mod format;
mod latency;
mod reader;
pub mod stacks;
mod tiers;
mod writer;

pub use format::*;
pub use reader::{Item, ReadStatus, Reader};
pub use writer::{MemberFn, Writer, WriterOptions, WriterStats, smallest_max_size};

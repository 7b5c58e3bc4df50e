//! imc: memory-controller bandwidth, attributed to processes.
//!
//! Modules by responsibility (the data flow: discovery → plan → sampler → attribution →
//! record or output; commands compose them; README, "How it works"):
//! - [`discovery`]: topology and PMUs from sysfs under a root directory; which backends exist.
//! - [`events`]: event strings → `perf_event_attr` fields.
//! - [`sys`]: every syscall edge (perf_event_open, bpf, mmap of /dev/mem), replaceable in tests.
//! - [`counting`]: userspace counting (perf, MCHBAR) for `imc stat`.
//! - [`sampler`]: the eBPF tick sampler: load, attach, drain.
//! - [`symbols`]: sampled call stacks' addresses → frames (ELF, DWARF, perf maps, kallsyms).
//! - [`attribution`]: counter deltas → tasks; bursts.
//! - [`record`]: the recording file format.
//! - [`output`]: tables, JSON lines, CSV, the live view.
//! - [`commands`]: one module per subcommand, wiring the above together.
//! - [`text`]: outside text (process names, paths, file contents) made safe to print.
pub mod attribution;
pub mod cli;
pub mod commands;
pub mod counting;
pub mod discovery;
pub mod error;
pub mod events;
pub mod model;
pub mod output;
pub mod pipeline;
pub mod plan;
pub mod record;
pub mod sampler;
pub mod settings;
pub mod symbols;
pub mod sys;
pub mod text;
pub mod web;

pub use error::{CliError, CliResult};

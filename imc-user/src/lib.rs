//! imc: memory-controller bandwidth, attributed to processes.
//!
//! The map, lowest layer first (the data flow: discovery → plan → sampler → attribution →
//! record or output; commands compose them). A module imports only from layers below its own
//! (`tests/layers.rs` holds the table and checks every import), and Cargo keeps the simulator
//! (`imc-sim`) and the benchmarks and tools (`imc-tools`) out of this crate.
//! 0. [`model`], [`text`], [`settings`]: the shared types (slots, results, stacks, hardware),
//!    outside text made safe to print, every environment variable read once.
//! 1. [`sys`]: every syscall behind a trait that tests can replace.
//! 2. [`discovery`]: topology, PMUs, backends, cgroups and resctrl under a root directory.
//! 3. [`events`]: event strings → `perf_event_attr` fields.
//! 4. [`plan`]: which counters, slots, readers, weights and stacks a command uses, and why.
//! 5. [`counting`], [`sampler`], [`symbols`]: userspace counting for `imc stat`; the eBPF
//!    sampler (load, attach, drain), the userspace half of `imc-ebpf`; addresses → frames.
//! 6. [`attribution`]: counter deltas and records → tasks, packages, bursts, stacks.
//! 7. [`pipeline`]: the sampler drained into the attributor on the interval clock, to a sink.
//! 8. [`record`], [`output`], [`web`]: the recording format; tables, JSON, CSV, Prometheus,
//!    Perfetto, profiles and the live view; `imc serve`'s HTTP(S) server.
//! 9. [`cli`], [`error`]: the command line's arguments, and its errors' one exit-code mapping.
//! 10. [`commands`]: one module per subcommand, wiring the above together.
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

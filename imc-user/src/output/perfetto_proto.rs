//! Perfetto's trace types, generated from `proto/perfetto_trace.proto` (the part of Perfetto's
//! own protos that imc writes, with their upstream names and numbers): the trace of
//! `imc report --perfetto` and its callstack samples are built from these.

mod generated {
    include!(concat!(env!("OUT_DIR"), "/perfetto/mod.rs"));
}
pub use generated::perfetto_trace::*;

//! Perfetto's trace types, imc-proto's, generated from `imc-proto/proto/perfetto_trace.proto`
//! (the part of Perfetto's own protos that imc writes, with their upstream names and numbers):
//! the trace of `imc report --perfetto` and its callstack samples are built from these.

pub use imc_proto::perfetto_trace::*;

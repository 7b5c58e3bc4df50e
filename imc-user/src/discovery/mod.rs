//! Discovery: topology, PMUs and the backends they make possible, as pure functions of a root
//! directory (`--root DIR`: DIR/sys and DIR/proc, never the host's / directly).
pub mod cpulist;
pub mod format;

pub use cpulist::{CpuListError, parse_cpulist};
pub use format::{AttrWords, FormatError, encode_terms, parse_format, place_value};

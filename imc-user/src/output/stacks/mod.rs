//! Traffic by call stack in the formats profilers read: folded lines (flamegraph.pl, inferno),
//! a flame graph (SVG, drawn by inferno), and gzipped pprof (pprof, Pyroscope, Parca,
//! Perfetto), all from one [`crate::model::stacks::StackProfile`].
pub mod flamegraph;
pub mod folded;
pub mod functions;
pub mod pprof;
#[cfg(test)]
mod tests;

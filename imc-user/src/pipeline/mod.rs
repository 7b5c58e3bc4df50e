//! The sampling pipeline that `imc top`, `imc record` and `imc serve` share, below the commands
//! and above attribution: the sampler's records drained into the attributor ([`Drainer`]), the
//! interval clock ([`IntervalEnds`]) and where each interval goes ([`Sink`]). It takes no
//! command-line type: the commands build it from their arguments and run it.
mod drainer;
mod ends;
mod sink;

pub use drainer::Drainer;
pub use ends::IntervalEnds;
pub use sink::Sink;

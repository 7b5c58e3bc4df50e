//! The sampling pipeline that `imc top`, `imc record` and `imc serve` share, below the commands
//! and above attribution: the sampler's records drained into the attributor ([`Drainer`]), the
//! interval clock ([`IntervalEnds`]), where each interval goes ([`Sink`]) and the loop that runs
//! them ([`sample_loop`]). It takes no command-line type: the commands build it from their
//! arguments and run it.
mod drainer;
mod ends;
mod run;
mod sink;
pub mod stacks;

pub use drainer::Drainer;
pub use ends::IntervalEnds;
pub use run::{LoopOptions, PipelineError, sample_loop};
pub use sink::Sink;

//! The full-screen view of `imc top`, as pure functions of what was measured and how the user
//! wants it shown: a header, each package's bandwidth (and loaded latency) with its recent
//! history, and a sortable, scrollable task table. Nothing here touches the terminal;
//! `commands::top` owns that, so the whole picture can be rendered into a buffer and checked in
//! tests.
//!
//! - `state`: what the view shows, its history, the keys and the task order.
//! - `render`: the view drawn into a buffer.
mod render;
mod state;
pub use render::{render, render_buffer};
pub use state::*;

#[cfg(test)]
mod tests;

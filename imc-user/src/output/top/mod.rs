//! The full-screen view of `imc top`, as pure functions of what was measured and how the user
//! wants it shown: a header, each package's bandwidth (and loaded latency) with its recent
//! history, and a sortable, scrollable task table. `state` and `render` never touch the
//! terminal, so the whole picture can be rendered into a buffer and checked in tests;
//! `terminal` alone does.
//!
//! - `state`: what the view shows, its history, the keys and the task order.
//! - `render`: the view drawn into a buffer.
//! - `terminal`: raw mode, the screen frames are drawn on, and the key thread.
mod render;
mod state;
pub mod terminal;
pub use render::{render, render_buffer};
pub use state::*;

#[cfg(test)]
mod tests;

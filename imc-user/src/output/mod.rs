//! Rendering: human tables, CSV, JSON lines and the live view, one module per command family.
pub mod interval;
pub mod latency;
pub mod prometheus;
pub mod stat;
pub mod top;

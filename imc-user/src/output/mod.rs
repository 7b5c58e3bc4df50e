//! Rendering: human tables, CSV, JSON lines and the live view, one module per command family.
pub mod interval;
pub mod perfetto;
pub mod plot;
pub mod stat;
pub mod top;

//! End-to-end tests: report (being written).

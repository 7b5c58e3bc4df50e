//! End-to-end tests: list (being written).

//! End-to-end tests: attribution (being written).

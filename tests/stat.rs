//! End-to-end tests: stat (being written).

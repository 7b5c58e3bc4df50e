//! End-to-end tests: encode (being written).

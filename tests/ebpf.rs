//! End-to-end tests: ebpf (being written).

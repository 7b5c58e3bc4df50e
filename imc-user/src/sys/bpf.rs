//! bpf(2) calls that aya does not wrap.

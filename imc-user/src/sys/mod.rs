//! Every syscall imc makes, one small module per concern, each behind a trait that tests can
//! replace with a fake (as perf-event2 does with its hooks).
pub mod bpf;
pub mod cgroup;
pub mod devmem;
pub mod file;
pub mod malloc;
pub mod perf;
pub mod process;
pub mod procmap;
pub mod rlimit;
pub mod shm;
pub mod thread;
pub mod tty;

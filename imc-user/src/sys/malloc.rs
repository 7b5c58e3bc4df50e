//! The C allocator's policy for large buffers: each mapped on its own and handed back to the
//! kernel when freed.
//!
//! glibc serves an allocation of at least its mmap threshold (128 KiB at start) from a mapping
//! of its own, but raises the threshold to the size of each such block freed (up to 32 MiB), so
//! that later large buffers come from the heap, which is not given back while anything above
//! them lives. A report that builds a profile of a million stacks frees and makes buffers of
//! tens of MB in turn: with the moving threshold they stayed resident (a Perfetto trace of a
//! million stacks peaked at 323 MB with 259 MB in use; 292 MB with the threshold fixed).

/// The size from which a buffer gets a mapping of its own.
pub const MMAP_THRESHOLD: usize = 1 << 20;

/// Fixes the threshold at [`MMAP_THRESHOLD`] (which also stops glibc moving it). Elsewhere
/// than glibc, the allocator's own policy stands.
pub fn map_large_buffers_alone() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets the allocator's parameter; it is called before any thread.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int);
    }
}

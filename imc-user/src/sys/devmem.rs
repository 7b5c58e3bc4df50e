//! Read-only mapping of physical memory (/dev/mem) for the MCHBAR backend.

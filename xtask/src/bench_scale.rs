//! `cargo xtask bench-scale [--json] [--cpus N] [--seconds S] [--switches N] [--runs R]`: runs
//! imc-bench-scale (imc-tools/src/bin), the replay of a 192-CPU machine's record stream through
//! the sampler's drain and the attributor, with and without the kernel's per-task aggregation.
//! No eBPF program is loaded and no privilege is needed.
use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::Command;

/// `bench`: the imc-bench-scale binary (imc-tools, built in release).
pub fn run(bench: &Path, args: &[String]) -> Result<()> {
    let status = Command::new(bench)
        .args(args)
        .status()
        .with_context(|| format!("running {}", bench.display()))?;
    if !status.success() {
        bail!("{} failed: {status}", bench.display());
    }
    Ok(())
}

//! `cargo xtask bench-tick`: builds and runs imc-bench-tick (imc-tools/src/bin), which measures
//! ns per run of imc's tick against a bpftrace-like baseline in the same run.
use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::Command;

/// `bench`: the imc-bench-tick binary; `object`: the benchmark's eBPF object (imc's programs
/// plus the baseline and cost probes).
pub fn run(bench: &Path, object: &Path, args: &[String]) -> Result<()> {
    let status = Command::new(bench)
        .env("IMC_BPF_OBJECT", object)
        .args(args)
        .status()
        .with_context(|| format!("running {}", bench.display()))?;
    if !status.success() {
        bail!("{} failed: {status}", bench.display());
    }
    Ok(())
}

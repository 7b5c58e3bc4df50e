//! `cargo xtask bench-tick`: builds and runs imc-bench-tick (imc-user/src/bin), which measures
//! ns per run of imc's tick against a bpftrace-like baseline in the same run.
use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::Command;

/// `object`: the benchmark's eBPF object (imc's programs plus the baseline and cost probes).
pub fn run(imc: &Path, object: &Path, args: &[String]) -> Result<()> {
    let bench = imc.with_file_name("imc-bench-tick");
    let status = Command::new(&bench)
        .env("IMC_BPF_OBJECT", object)
        .args(args)
        .status()
        .with_context(|| format!("running {}", bench.display()))?;
    if !status.success() {
        bail!("{} failed: {status}", bench.display());
    }
    Ok(())
}

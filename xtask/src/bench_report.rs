//! `cargo xtask bench-report [--tasks N] [--runs R]`: runs imc-bench-report (imc-user/src/bin),
//! `imc report`'s peak memory on recordings of a million tasks in every output mode, against
//! the same modes on a recording of a thousand, in the same run.
use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::Command;

/// `bench`: the imc-bench-report binary; `imc`: the release imc it runs.
pub fn run(bench: &Path, imc: &Path, args: &[String]) -> Result<()> {
    let status = Command::new(bench)
        .arg(imc)
        .args(args)
        .status()
        .with_context(|| format!("running {}", bench.display()))?;
    if !status.success() {
        bail!("{} failed: {status}", bench.display());
    }
    Ok(())
}

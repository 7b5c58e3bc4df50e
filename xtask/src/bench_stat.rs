//! Owned by the imc stat work; placeholder until it lands.
pub fn run(_imc: &std::path::Path) -> anyhow::Result<()> {
    anyhow::bail!("bench-stat is not written yet")
}

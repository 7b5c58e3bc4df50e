pub fn run(_imc: &std::path::Path) -> anyhow::Result<()> {
    anyhow::bail!("bench-tick is not written yet")
}

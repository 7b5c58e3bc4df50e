//! Where the compiled eBPF program comes from: embedded at build time when `cargo xtask` built
//! it (the usual case, so the `imc` binary can be copied to a host on its own), else a file
//! named by IMC_BPF_OBJECT at run time.
use super::SamplerError;
use std::borrow::Cow;

#[cfg(imc_embedded_bpf)]
static EMBEDDED: &[u8] = aya::include_bytes_aligned!(env!("IMC_EBPF_OBJECT_PATH"));
#[cfg(not(imc_embedded_bpf))]
static EMBEDDED: &[u8] = &[];

pub use crate::settings::BPF_OBJECT_ENV as OBJECT_ENV;

/// The program's ELF bytes.
pub fn program_bytes() -> Result<Cow<'static, [u8]>, SamplerError> {
    if let Some(path) = &crate::settings::get().bpf_object {
        return std::fs::read(path)
            .map(Cow::Owned)
            .map_err(|source| SamplerError::ObjectRead {
                path: path.clone(),
                source,
            });
    }
    if EMBEDDED.is_empty() {
        return Err(SamplerError::NoObject);
    }
    Ok(Cow::Borrowed(EMBEDDED))
}

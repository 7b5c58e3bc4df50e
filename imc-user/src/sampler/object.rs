//! Where the compiled eBPF program comes from: embedded at build time when `cargo xtask` built
//! it (the usual case, so the `imc` binary can be copied to a host on its own), else a file
//! named by IMC_BPF_OBJECT at run time.
use super::error::SamplerError;
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

/// The record ABI version `bytes` (an eBPF object) was built with: the value of its
/// [`imc_common::ABI_VERSION_GLOBAL`] symbol; None when the object has no such symbol (built
/// before it existed) or is not an ELF object.
pub fn abi_version(bytes: &[u8]) -> Option<u32> {
    use object::{Object, ObjectSection, ObjectSymbol};
    let file = object::File::parse(bytes).ok()?;
    let sym = file
        .symbols()
        .find(|s| s.name() == Ok(imc_common::ABI_VERSION_GLOBAL))?;
    let section = file.section_by_index(sym.section_index()?).ok()?;
    let data = section.data().ok()?;
    let at = usize::try_from(sym.address().checked_sub(section.address())?).ok()?;
    let raw: [u8; 4] = data.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(if file.is_little_endian() {
        u32::from_le_bytes(raw)
    } else {
        u32::from_be_bytes(raw)
    })
}

/// Refuses an object built against another record layout than this imc's, before the kernel
/// sees it: its records would be misread, not rejected.
pub fn check_abi(bytes: &[u8]) -> Result<(), SamplerError> {
    match abi_version(bytes) {
        Some(v) if v == imc_common::RECORD_ABI_VERSION => Ok(()),
        found => Err(SamplerError::Abi {
            found,
            expected: imc_common::RECORD_ABI_VERSION,
        }),
    }
}

/// `bytes` with the value size of map `map` set to `value_size`: the map definitions of the
/// object's `maps` section (aya-ebpf's `bpf_map_def`: type, key size, value size, ...) fix it at
/// build time, and the rings' entries are sized at load by the configured slots. None when the
/// object has no such map definition.
pub fn with_value_size(bytes: &[u8], map: &str, value_size: u32) -> Option<Vec<u8>> {
    use object::{Object, ObjectSection, ObjectSymbol};
    /// Offset of `value_size` in a `bpf_map_def`.
    const VALUE_SIZE_AT: u64 = 8;
    let file = object::File::parse(bytes).ok()?;
    let sym = file.symbols().find(|s| s.name() == Ok(map))?;
    let section = file.section_by_index(sym.section_index()?).ok()?;
    if section.name().ok()? != "maps" || sym.size() < VALUE_SIZE_AT + 4 {
        return None;
    }
    let (file_offset, len) = section.file_range()?;
    let at = sym.address().checked_sub(section.address())? + VALUE_SIZE_AT;
    if at + 4 > len {
        return None;
    }
    let at = usize::try_from(file_offset + at).ok()?;
    let raw = if file.is_little_endian() {
        value_size.to_le_bytes()
    } else {
        value_size.to_be_bytes()
    };
    let mut out = bytes.to_vec();
    out.get_mut(at..at + 4)?.copy_from_slice(&raw);
    Some(out)
}

//! The running kernel's build configuration under `--root`: `proc/config.gz` (the kernel's own,
//! with CONFIG_IKCONFIG_PROC) or else `boot/config-RELEASE` (what distributions install).
use std::io::Read;
use std::path::Path;

/// Configs are a few hundred KiB of text; more is not a config.
const CAP: u64 = 4 << 20;

/// A kernel config's text and where it was read (relative to the root, for the plan).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelConfig {
    pub text: String,
    pub source: String,
}

/// The config of the kernel `release`: `proc/config.gz` first (it is the running kernel's by
/// construction), then `boot/config-RELEASE`. None when neither is a readable regular file.
pub fn read(root: &Path, release: Option<&str>) -> Option<KernelConfig> {
    if let Some(text) = regular(&root.join("proc/config.gz")).and_then(gunzip) {
        return Some(KernelConfig {
            text,
            source: "proc/config.gz".into(),
        });
    }
    let name = format!("boot/config-{}", release?);
    let mut text = String::new();
    regular(&root.join(&name))?
        .take(CAP)
        .read_to_string(&mut text)
        .ok()?;
    Some(KernelConfig { text, source: name })
}

/// CONFIG_HZ of a config's text, within the values a kernel can be built with.
pub fn hz(config: &str) -> Option<u32> {
    config
        .lines()
        .find_map(|l| l.strip_prefix("CONFIG_HZ="))
        .and_then(|v| v.trim().parse().ok())
        .filter(|&hz| (24..=10_000).contains(&hz))
}

/// The file when it is a regular one (never a FIFO to block on).
fn regular(path: &Path) -> Option<std::fs::File> {
    crate::sys::file::open_regular(path).ok()
}

fn gunzip(f: std::fs::File) -> Option<String> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(f.take(CAP))
        .take(CAP)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn proc_config_gz_comes_first_then_boot() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert_eq!(read(root, Some("6.1.0")), None);
        std::fs::create_dir_all(root.join("boot")).unwrap();
        std::fs::write(
            root.join("boot/config-6.1.0"),
            "CONFIG_HZ_1000=y\nCONFIG_HZ=1000\n",
        )
        .unwrap();
        let c = read(root, Some("6.1.0")).unwrap();
        assert_eq!(
            (hz(&c.text), c.source.as_str()),
            (Some(1000), "boot/config-6.1.0")
        );
        std::fs::create_dir_all(root.join("proc")).unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(b"# CONFIG_HZ_1000 is not set\nCONFIG_HZ=250\n")
            .unwrap();
        std::fs::write(root.join("proc/config.gz"), gz.finish().unwrap()).unwrap();
        let c = read(root, Some("6.1.0")).unwrap();
        assert_eq!(
            (hz(&c.text), c.source.as_str()),
            (Some(250), "proc/config.gz")
        );
        // Not gzip: the next source.
        std::fs::write(root.join("proc/config.gz"), "CONFIG_HZ=100\n").unwrap();
        assert_eq!(
            read(root, Some("6.1.0")).unwrap().source,
            "boot/config-6.1.0"
        );
        assert_eq!(hz("CONFIG_HZ=5\n"), None);
    }
}

//! The running kernel's facts that shape a plan, read under `--root`: its release (which CPUs may
//! read a package counter changed in 6.7) and its tick rate (CONFIG_HZ).
use serde::Serialize;
use std::path::Path;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Kernel {
    /// `proc/sys/kernel/osrelease`, e.g. `6.8.0-45-generic`.
    pub release: Option<String>,
    /// CONFIG_HZ from `proc/config.gz` or `boot/config-RELEASE`.
    pub hz: Option<u32>,
    /// Where `hz` was read, relative to the root (`proc/config.gz`); None when assumed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hz_source: Option<String>,
    /// `proc/sys/kernel/nmi_watchdog` is 1: the hard-lockup detector holds a core counter on
    /// every CPU (a cycles event on x86), one fewer for imc's weights.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub nmi_watchdog: bool,
}

/// HZ when the kernel's config is not to be found: the most common distribution setting.
pub const DEFAULT_HZ: u32 = 250;

impl Kernel {
    /// Reads the facts under `root`; a fact that is not there is None (a fixture tree without
    /// `proc/sys`, a container without `/boot`).
    pub fn read(root: &Path) -> Kernel {
        let release = read_capped(&root.join("proc/sys/kernel/osrelease"), 256)
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        let config = crate::discovery::kernel_config::read(root, release.as_deref());
        let (hz, hz_source) = config
            .and_then(|c| Some((crate::discovery::kernel_config::hz(&c.text)?, c.source)))
            .map_or((None, None), |(hz, src)| (Some(hz), Some(src)));
        let nmi_watchdog = read_capped(&root.join("proc/sys/kernel/nmi_watchdog"), 16)
            .is_some_and(|s| s.trim() == "1");
        Kernel {
            release,
            hz,
            hz_source,
            nmi_watchdog,
        }
    }

    /// Major and minor of the release.
    pub fn version(&self) -> Option<(u32, u32)> {
        let r = self.release.as_deref()?;
        let mut it = r.split(|c: char| !c.is_ascii_digit());
        let major = it.next()?.parse().ok()?;
        let minor = it.next()?.parse().ok()?;
        Some((major, minor))
    }

    /// The release is at least `major.minor`; an unknown release is not.
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        self.version().is_some_and(|v| v >= (major, minor))
    }

    pub fn hz_or_default(&self) -> u32 {
        self.hz.unwrap_or(DEFAULT_HZ)
    }
}

/// A regular file's first `cap` bytes as text; None for anything else (missing, a FIFO, a
/// directory, not UTF-8), which a plan treats as an unknown fact.
fn read_capped(path: &Path, cap: u64) -> Option<String> {
    let buf = crate::sys::file::read_capped(path, cap).ok()?;
    String::from_utf8(buf).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_and_hz_under_a_root() {
        let dir = tempfile::tempdir().unwrap();
        let k = Kernel::read(dir.path());
        assert_eq!(k, Kernel::default(), "nothing there: nothing known");
        assert!(!k.at_least(4, 0));
        assert_eq!(k.hz_or_default(), DEFAULT_HZ);

        std::fs::create_dir_all(dir.path().join("proc/sys/kernel")).unwrap();
        std::fs::create_dir_all(dir.path().join("boot")).unwrap();
        std::fs::write(dir.path().join("proc/sys/kernel/osrelease"), "6.6.87-lts\n").unwrap();
        std::fs::write(
            dir.path().join("boot/config-6.6.87-lts"),
            "# CONFIG_HZ_100 is not set\nCONFIG_HZ_1000=y\nCONFIG_HZ=1000\n",
        )
        .unwrap();
        let k = Kernel::read(dir.path());
        assert_eq!(k.version(), Some((6, 6)));
        assert!(!k.at_least(6, 7));
        assert!(k.at_least(6, 6));
        assert_eq!(k.hz, Some(1000));
        assert_eq!(k.hz_source.as_deref(), Some("boot/config-6.6.87-lts"));
    }
}

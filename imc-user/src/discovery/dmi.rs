//! The theoretical peak memory bandwidth, from the SMBIOS Memory Device (type 17) structures the
//! kernel exposes as `DIR/sys/firmware/dmi/entries/17-N/raw`.
//!
//! Each raw entry is the structure as the firmware wrote it: a 4-byte header (type, length of
//! the formatted area, handle), the formatted area, then the string set. The fields used here,
//! at their offsets in the formatted area (SMBIOS reference specification, DSP0134):
//!
//! | offset | field | since |
//! |---|---|---|
//! | 0x0A | data width, bits (FFFFh: unknown) | 2.1 |
//! | 0x0C | size (0: no device installed, FFFFh: unknown) | 2.1 |
//! | 0x15 | speed, MT/s (0: unknown, FFFFh: see 0x54) | 2.3 |
//! | 0x20 | configured memory speed, MT/s (0: unknown, FFFFh: see 0x58) | 2.7 |
//! | 0x54 | extended speed, MT/s (bits 30:0) | 3.3 |
//! | 0x58 | extended configured memory speed, MT/s (bits 30:0) | 3.3 |
//!
//! Firmware of an older revision writes a shorter formatted area: the fields past its length
//! are simply unknown. A file shorter than the length its header declares is truncated and
//! reported, never read past its end.
use std::path::{Path, PathBuf};

pub const MEMORY_DEVICE: u8 = 17;

/// One populated-or-not memory device slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryDevice {
    pub handle: u16,
    /// Data width in bits (without ECC bits).
    pub data_width_bits: Option<u16>,
    /// False when the slot is empty (size 0).
    pub installed: bool,
    /// The speed the device runs at (configured speed, else its rated speed), MT/s.
    pub speed_mts: Option<u32>,
}

impl MemoryDevice {
    /// Peak bytes/s of this device's data path: transfers per second × data bytes per transfer.
    pub fn peak_bytes_per_s(&self) -> Option<f64> {
        let w = self.data_width_bits.filter(|&w| w > 0)?;
        let s = self.speed_mts.filter(|&s| s > 0)?;
        Some(f64::from(s) * 1e6 * f64::from(w) / 8.0)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DmiError {
    #[error("{path}: SMBIOS entry truncated ({len} bytes, its header needs {need})")]
    Truncated {
        path: PathBuf,
        len: usize,
        need: usize,
    },
    #[error("{path}: not an SMBIOS memory device (type {kind}, expected 17)")]
    WrongType { path: PathBuf, kind: u8 },
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: String },
}

fn word(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn dword(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes([
        *b.get(at)?,
        *b.get(at + 1)?,
        *b.get(at + 2)?,
        *b.get(at + 3)?,
    ]))
}

/// A speed word: 0 unknown, FFFFh "see the extended dword" (bits 30:0, 0 unknown).
fn speed(area: &[u8], at: usize, extended_at: usize) -> Option<u32> {
    match word(area, at)? {
        0 => None,
        0xffff => dword(area, extended_at)
            .map(|d| d & 0x7fff_ffff)
            .filter(|&d| d > 0),
        s => Some(u32::from(s)),
    }
}

/// Parses one raw type-17 entry (`path` only names it in errors).
pub fn parse_memory_device(path: &Path, raw: &[u8]) -> Result<MemoryDevice, DmiError> {
    let truncated = |need: usize| DmiError::Truncated {
        path: path.to_path_buf(),
        len: raw.len(),
        need,
    };
    if raw.len() < 4 {
        return Err(truncated(4));
    }
    if raw[0] != MEMORY_DEVICE {
        return Err(DmiError::WrongType {
            path: path.to_path_buf(),
            kind: raw[0],
        });
    }
    let len = usize::from(raw[1]);
    if raw.len() < len || len < 4 {
        return Err(truncated(len.max(4)));
    }
    // Only the formatted area the firmware declared: bytes past it are the string set.
    let area = &raw[..len];
    let data_width_bits = word(area, 0x0a).filter(|&w| w != 0xffff);
    let installed = word(area, 0x0c).is_some_and(|s| s != 0);
    let speed_mts = speed(area, 0x20, 0x58).or_else(|| speed(area, 0x15, 0x54));
    Ok(MemoryDevice {
        handle: word(area, 2).unwrap_or(0),
        data_width_bits,
        installed,
        speed_mts,
    })
}

/// What the firmware says about memory: the devices read, and the entries that could not be.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemoryDevices {
    pub devices: Vec<MemoryDevice>,
    pub errors: Vec<String>,
}

impl MemoryDevices {
    /// The installed devices whose peak is known.
    pub fn populated(&self) -> impl Iterator<Item = &MemoryDevice> {
        self.devices
            .iter()
            .filter(|d| d.installed && d.peak_bytes_per_s().is_some())
    }

    /// Peak bytes/s of one memory channel: the slowest installed device's, since every
    /// channel runs at the speed the controller configured for all of them.
    pub fn channel_peak(&self) -> Option<f64> {
        self.populated()
            .filter_map(|d| d.peak_bytes_per_s())
            .min_by(f64::total_cmp)
    }

    /// Peak bytes/s of a package whose memory controller shows `channels` channels (one PMU
    /// per channel); where it shows no more than one, the installed devices are taken as one
    /// channel each, spread evenly over `packages` (a board with two devices per channel then
    /// gets twice its peak). None without a device of known speed and width.
    pub fn package_peak(&self, channels: usize, packages: usize) -> Option<f64> {
        let channel = self.channel_peak()?;
        let n = if channels > 1 {
            channels
        } else {
            self.populated().count().div_ceil(packages.max(1)).max(1)
        };
        Some(channel * n as f64)
    }
}

/// Every `17-N/raw` under `root/sys/firmware/dmi/entries` (none when the directory is absent:
/// VMs and containers often have no DMI tables).
pub fn read_memory_devices(root: &Path) -> MemoryDevices {
    let dir = root.join("sys/firmware/dmi/entries");
    let mut out = MemoryDevices::default();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return out;
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("17-"))
        .collect();
    names.sort_by_key(|n| n[3..].parse::<u32>().unwrap_or(u32::MAX));
    for n in names {
        let path = dir.join(&n).join("raw");
        match super::sysfs::read_small(&path) {
            Ok(raw) => match parse_memory_device(&path, &raw) {
                Ok(d) => out.devices.push(d),
                Err(e) => out.errors.push(e.to_string()),
            },
            Err(e) => out.errors.push(
                DmiError::Io {
                    path,
                    err: e.to_string(),
                }
                .to_string(),
            ),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A type-17 entry as SMBIOS 3.3 firmware writes it (formatted area 0x5C bytes), then two
    /// strings.
    fn entry(width: u16, size: u16, speed: u16, configured: u16, ext_cfg: u32) -> Vec<u8> {
        let mut b = vec![0u8; 0x5c];
        b[0] = 17;
        b[1] = 0x5c;
        b[2..4].copy_from_slice(&0x1100u16.to_le_bytes());
        b[0x08..0x0a].copy_from_slice(&72u16.to_le_bytes()); // total width with ECC
        b[0x0a..0x0c].copy_from_slice(&width.to_le_bytes());
        b[0x0c..0x0e].copy_from_slice(&size.to_le_bytes());
        b[0x10] = 1;
        b[0x11] = 2;
        b[0x12] = 0x1a; // DDR4
        b[0x15..0x17].copy_from_slice(&speed.to_le_bytes());
        b[0x20..0x22].copy_from_slice(&configured.to_le_bytes());
        b[0x58..0x5c].copy_from_slice(&ext_cfg.to_le_bytes());
        b.extend_from_slice(b"DIMM_A1\0BANK 0\0\0");
        b
    }

    fn p() -> &'static Path {
        Path::new("17-0/raw")
    }

    #[test]
    fn configured_speed_and_data_width_give_the_peak() {
        // DDR4-2933 run at 2666 MT/s, 64-bit data path (72 with ECC), 32 GiB (0x7FFF: extended).
        let d = parse_memory_device(p(), &entry(64, 0x7fff, 2933, 2666, 0)).unwrap();
        assert_eq!(d.handle, 0x1100);
        assert_eq!(d.data_width_bits, Some(64));
        assert!(d.installed);
        assert_eq!(d.speed_mts, Some(2666));
        assert_eq!(d.peak_bytes_per_s(), Some(2666e6 * 8.0));
    }

    #[test]
    fn empty_slots_unknown_values_and_extended_speeds() {
        let empty = parse_memory_device(p(), &entry(64, 0, 0, 0, 0)).unwrap();
        assert!(!empty.installed);
        // Configured speed unknown: the rated speed.
        let rated = parse_memory_device(p(), &entry(64, 8192, 3200, 0, 0)).unwrap();
        assert_eq!(rated.speed_mts, Some(3200));
        // Configured speed FFFFh: the extended dword (bit 31 reserved).
        let fast = parse_memory_device(p(), &entry(32, 8192, 0xffff, 0xffff, 0x8001_2000)).unwrap();
        assert_eq!(fast.speed_mts, Some(0x1_2000));
        // Width unknown: no peak.
        let w = parse_memory_device(p(), &entry(0xffff, 8192, 3200, 3200, 0)).unwrap();
        assert_eq!(w.peak_bytes_per_s(), None);
    }

    #[test]
    fn an_older_shorter_structure_has_only_its_fields() {
        // SMBIOS 2.3: formatted area 0x1B bytes, no configured speed; the string set follows,
        // and its bytes must not be read as fields.
        let mut b = entry(64, 4096, 1600, 0, 0)[..0x1b].to_vec();
        b[1] = 0x1b;
        b.extend_from_slice(&[0xff; 0x40]);
        let d = parse_memory_device(p(), &b).unwrap();
        assert_eq!(d.speed_mts, Some(1600));
        // SMBIOS 2.1: no speed at all.
        let mut b = entry(64, 4096, 1600, 1600, 0)[..0x15].to_vec();
        b[1] = 0x15;
        b.extend_from_slice(b"X\0\0");
        assert_eq!(parse_memory_device(p(), &b).unwrap().speed_mts, None);
    }

    #[test]
    fn truncated_and_foreign_entries_are_errors_not_panics() {
        let full = entry(64, 4096, 3200, 3200, 0);
        for cut in [0, 1, 3, 4, 0x0b, 0x20, 0x5b] {
            let e = parse_memory_device(p(), &full[..cut]).unwrap_err();
            assert!(matches!(e, DmiError::Truncated { .. }), "{cut}: {e}");
            assert!(e.to_string().contains("17-0/raw"), "{e}");
        }
        let mut other = full.clone();
        other[0] = 16;
        assert!(matches!(
            parse_memory_device(p(), &other),
            Err(DmiError::WrongType { kind: 16, .. })
        ));
        // A header that declares less than itself.
        let mut bad = full;
        bad[1] = 2;
        assert!(parse_memory_device(p(), &bad).is_err());
    }

    #[test]
    fn reads_entries_under_root_and_takes_the_slowest_channel() {
        let dir = std::env::temp_dir().join(format!("imc-dmi-{}", std::process::id()));
        let entries = dir.join("sys/firmware/dmi/entries");
        let put = |n: &str, raw: &[u8]| {
            std::fs::create_dir_all(entries.join(n)).unwrap();
            std::fs::write(entries.join(n).join("raw"), raw).unwrap();
        };
        put("17-0", &entry(64, 8192, 3200, 2933, 0));
        put("17-1", &entry(64, 8192, 3200, 2666, 0));
        put("17-2", &entry(64, 0, 0, 0, 0));
        put("17-3", &entry(64, 8192, 3200, 3200, 0)[..10]);
        put("16-0", &[16, 4, 0, 0]);
        let m = read_memory_devices(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(m.devices.len(), 3);
        assert_eq!(m.populated().count(), 2);
        assert_eq!(m.channel_peak(), Some(2666e6 * 8.0));
        assert_eq!(m.errors.len(), 1, "{:?}", m.errors);
        assert!(m.errors[0].contains("17-3"), "{:?}", m.errors);
        // No DMI tables at all (a VM): nothing known, nothing wrong.
        let none = read_memory_devices(Path::new("/nonexistent-imc-root"));
        assert_eq!(none, MemoryDevices::default());
    }
}

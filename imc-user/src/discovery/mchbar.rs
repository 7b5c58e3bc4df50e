//! Intel client memory-controller counters mapped from MCHBAR (the `intel-client-mchbar`
//! backend), located from PCI 0000:00:00.0's config space under the root.
//!
//! Facts, all from torvalds/linux arch/x86/events/intel/uncore_snb.c:
//! - MCHBAR is the 64-bit register at config offset 0x48 (SNB_UNCORE_PCI_IMC_BAR_OFFSET), bit 0
//!   the enable bit (uncore_get_box_mmio_addr: "BAR 0x%x is disabled"). Intel's 6th-gen uncore
//!   manual gives the address mask 0x0007fffff8000 (quoted in the icl-client fixture README).
//! - Sandy Bridge … Rocket Lake (snb_uncore_imc): 32-bit free-running counts of 64-byte lines at
//!   MCHBAR+0x5050 (DRAM_DATA_READS) and +0x5054 (DRAM_DATA_WRITES); one box.
//! - Tiger Lake (tgl_uncore_imc_freerunning): 64-bit counters at +0xd840 total, +0xd858 read,
//!   +0xd8a0 write, in each of two controllers spaced TGL_UNCORE_MMIO_IMC_MEM_OFFSET = 0x10000
//!   apart (address = bar + 0x10000 × pmu_idx + offset).
//! - Tiger Lake-L (model 140, tgl_l_uncore_mmio_init) uses tgl_l_uncore_imc_freerunning instead:
//!   +0x5040 total, +0x5058 read, +0x50a0 write, same 0x10000 step. The brief's "0xd858 for
//!   Tiger Lake" holds only for TGL-H; this is why the layout is chosen per device/model.
//! - Alder Lake and later (adl_uncore_imc_freerunning): base ADL_UNCORE_IMC_FREERUNNING_BASE
//!   0xd800 plus 0x40/0x58/0xa0 — the same addresses as Tiger Lake.
//! - Device ids: the *_IMC defines and the skl/icl/tgl pci id tables of uncore_snb.c.
use crate::model::Direction;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// snb_uncore_imc: 32-bit read/write at +0x5050/+0x5054, one box.
    Legacy32,
    /// tgl_l_uncore_imc_freerunning: 64-bit at +0x5058/+0x50a0 (+0x5040 total) per controller.
    TigerLakeL,
    /// tgl/adl free-running: 64-bit at +0xd858/+0xd8a0 (+0xd840 total) per controller.
    FreeRunning,
}

/// Device id of PCI 0:0.0 → (generation, layout).
pub fn generation_for_device(device: u16) -> Option<(&'static str, Layout)> {
    use Layout::*;
    let g = match device {
        0x0100 => ("Sandy Bridge", Legacy32),
        0x0154 | 0x0150 => ("Ivy Bridge", Legacy32),
        0x0c00 | 0x0a04 => ("Haswell", Legacy32),
        0x1604 => ("Broadwell", Legacy32),
        0x1904 | 0x190c | 0x1900 | 0x1910 | 0x190f | 0x191f | 0x1918 => ("Skylake", Legacy32),
        // 0x590c is both KBL_Y and AML_YD in the kernel; either way the same layout.
        0x5904 | 0x590c | 0x5914 | 0x590f | 0x591f | 0x5910 | 0x5918 | 0x590d => {
            ("Kaby Lake", Legacy32)
        }
        0x3ecc | 0x3ed0 | 0x3e10 | 0x3ec4 | 0x3e0f | 0x3e1f | 0x3ec2 | 0x3e30 | 0x3e18 | 0x3ec6
        | 0x3e31 | 0x3e33 | 0x3eca | 0x3e32 | 0x3e34 | 0x3e35 => ("Coffee Lake", Legacy32),
        0x9b44 | 0x9b54 | 0x9b64 | 0x9b51 | 0x9b61 | 0x9b71 | 0x9b33 | 0x9b43 | 0x9b53 | 0x9b63
        | 0x9b73 => ("Comet Lake", Legacy32),
        0x8a02 | 0x8a12 => ("Ice Lake", Legacy32),
        0x4c43 | 0x4c53 => ("Rocket Lake", Legacy32),
        0x9a02 | 0x9a04 | 0x9a12 | 0x9a14 => ("Tiger Lake-U", TigerLakeL),
        0x9a36 => ("Tiger Lake-H", FreeRunning),
        0x4660 | 0x4641 | 0x4601 | 0x4602 | 0x4609 | 0x460a | 0x4621 | 0x4623 | 0x4629 | 0x4637
        | 0x463b | 0x4648 | 0x4649 | 0x4650 | 0x4668 | 0x4670 | 0x4614 | 0x4617 | 0x4618
        | 0x461b | 0x461c => ("Alder Lake", FreeRunning),
        0xa700..=0xa70b | 0xa715..=0xa71c | 0xa728 | 0xa729 | 0xa72a => {
            ("Raptor Lake", FreeRunning)
        }
        0x7d00 | 0x7d01 | 0x7d02 | 0x7d05 | 0x7d10 | 0x7d14 | 0x7d15 | 0x7d16 | 0x7d21 | 0x7d22
        | 0x7d23 | 0x7d24 | 0x7d28 => ("Meteor Lake", FreeRunning),
        _ => return None,
    };
    Some(g)
}

/// Intel family-6 models whose host bridge id is not in the kernel's table but whose uncore
/// driver still maps the ADL free-running layout from 00:00.0 (tgl_uncore_get_mc_dev falls
/// back to 0:0.0): Arrow Lake. Less certain than the device-id table; see the README.
pub fn generation_for_model(model: u32) -> Option<(&'static str, Layout)> {
    match model {
        0xb5 | 0xc5 | 0xc6 => Some(("Arrow Lake", Layout::FreeRunning)),
        _ => None,
    }
}

/// The address mask of MCHBAR (bits 38:15), from Intel's uncore manual.
pub const MCHBAR_MASK: u64 = 0x7f_ffff_8000;
/// Config offset of MCHBAR.
pub const MCHBAR_OFFSET: usize = 0x48;

/// Why MCHBAR cannot be used, as a message for `imc list`.
pub fn mchbar_base(config: &[u8]) -> Result<u64, String> {
    if config.len() < MCHBAR_OFFSET + 8 {
        return Err(format!(
            "PCI 0000:00:00.0 config is {} bytes, too short to hold MCHBAR at 0x48 (non-root reads are cut to 64 bytes): run as root",
            config.len()
        ));
    }
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&config[MCHBAR_OFFSET..MCHBAR_OFFSET + 8]);
    let raw = u64::from_le_bytes(raw);
    if raw & 1 == 0 {
        return Err(format!(
            "MCHBAR ({raw:#x} at config 0x48) is disabled: bit 0 (enable) is clear"
        ));
    }
    let base = raw & MCHBAR_MASK;
    if base == 0 {
        return Err(format!("MCHBAR ({raw:#x} at config 0x48) holds no address"));
    }
    // Above bit 38 nothing is expected, and below 1 MiB is legacy memory, never MMIO of the
    // memory controller: either means the config bytes are not what we think they are.
    if raw >> 39 != 0 || base < 0x10_0000 {
        return Err(format!(
            "MCHBAR ({raw:#x} at config 0x48) is outside the expected range (1 MiB .. 512 GiB, mask {MCHBAR_MASK:#x})"
        ));
    }
    Ok(base)
}

/// One free-running counter register in MCHBAR: its box's label, direction, physical address
/// and width in bits (the plan makes a counter to read of each).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Register {
    pub pmu: String,
    pub direction: Direction,
    pub address: u64,
    pub width: u8,
}

/// Number of memory controllers with free-running counters (num_boxes = 2 in
/// tgl_uncore_imc_free_running and adl_uncore_imc_free_running).
pub const CONTROLLERS: u64 = 2;
/// TGL_UNCORE_MMIO_IMC_MEM_OFFSET.
pub const CONTROLLER_STEP: u64 = 0x10000;

pub fn registers(base: u64, layout: Layout) -> Vec<Register> {
    let mut out = Vec::new();
    match layout {
        Layout::Legacy32 => {
            for (d, off) in [(Direction::Read, 0x5050), (Direction::Write, 0x5054)] {
                out.push(Register {
                    pmu: "mchbar".into(),
                    direction: d,
                    address: base + off,
                    width: 32,
                });
            }
        }
        Layout::TigerLakeL | Layout::FreeRunning => {
            let (rd, wr, tot) = if layout == Layout::TigerLakeL {
                (0x5058, 0x50a0, 0x5040)
            } else {
                (0xd858, 0xd8a0, 0xd840)
            };
            for n in 0..CONTROLLERS {
                for (d, off) in [
                    (Direction::Read, rd),
                    (Direction::Write, wr),
                    (Direction::Total, tot),
                ] {
                    out.push(Register {
                        pmu: format!("mchbar_mc{n}"),
                        direction: d,
                        address: base + CONTROLLER_STEP * n + off,
                        width: 64,
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_with(bar: u64, len: usize) -> Vec<u8> {
        let mut c = vec![0u8; len];
        if len >= 0x50 {
            c[0x48..0x50].copy_from_slice(&bar.to_le_bytes());
        }
        c
    }

    #[test]
    fn mask_value() {
        assert_eq!(MCHBAR_MASK, 0x7f_ffff_8000);
    }

    #[test]
    fn icl_base() {
        assert_eq!(mchbar_base(&config_with(0xfed1_0001, 256)), Ok(0xfed1_0000));
    }

    #[test]
    fn bad_bars() {
        assert!(
            mchbar_base(&config_with(0xfed1_0000, 256))
                .unwrap_err()
                .contains("disabled")
        );
        assert!(
            mchbar_base(&config_with(1, 256))
                .unwrap_err()
                .contains("no address")
        );
        assert!(
            mchbar_base(&config_with(0x80_0000_0001 | 0xfed1_0000, 256))
                .unwrap_err()
                .contains("outside")
        );
        assert!(
            mchbar_base(&config_with(0x8001, 256))
                .unwrap_err()
                .contains("outside")
        );
        assert!(
            mchbar_base(&config_with(0xfed1_0001, 64))
                .unwrap_err()
                .contains("run as root")
        );
    }

    #[test]
    fn layouts() {
        let legacy = registers(0xfed1_0000, Layout::Legacy32);
        assert_eq!(legacy[0].address, 0xfed1_5050);
        assert_eq!(legacy[1].address, 0xfed1_5054);
        assert_eq!(legacy[0].width, 32);
        let tgl = registers(0xfedc_0000, Layout::FreeRunning);
        let rd1 = tgl
            .iter()
            .find(|c| c.pmu == "mchbar_mc1" && c.direction == Direction::Read)
            .unwrap();
        assert_eq!(rd1.address, 0xfedc_0000 + 0x10000 + 0xd858);
        let tgl_l = registers(0xfedc_0000, Layout::TigerLakeL);
        assert_eq!(tgl_l[1].address, 0xfedc_0000 + 0x50a0);
        assert_eq!(
            generation_for_device(0x9a36),
            Some(("Tiger Lake-H", Layout::FreeRunning))
        );
        assert_eq!(
            generation_for_device(0x8a12).map(|g| g.1),
            Some(Layout::Legacy32)
        );
        assert_eq!(generation_for_device(0x1234), None);
    }
}

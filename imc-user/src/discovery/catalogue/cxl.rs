//! CXL memory devices (`cxl_pmu_memX.Y`, the CXL PMU of memory device X): a second memory tier
//! beside the packages' DRAM, each device with the NUMA node the platform gives it.
use super::instances::{Event, Rule, instances};
use super::want::{Ctx, unavailable};
use crate::discovery::sysfs::read_optional;
use crate::model::{BackendKind, Direction, Pmu, Source};
use std::path::Path;

/// The memory device of a CXL PMU: `cxl_pmu_mem3.0` → `mem3`.
fn memdev(pmu: &str) -> Option<&str> {
    let rest = pmu.strip_prefix("cxl_pmu_")?;
    let (dev, index) = rest.split_once('.')?;
    let n = dev.strip_prefix("mem")?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(n) && digits(index)).then_some(dev)
}

/// The NUMA node of a memory device (`sys/bus/cxl/devices/memX/numa_node`, the node the platform
/// affinitizes the device to; -1 or absent: none), or why there is none.
fn device_node(root: &Path, pmu: &Pmu) -> Result<u32, String> {
    let Some(dev) = memdev(&pmu.name) else {
        return Err(format!(
            "{}: not a memory device's CXL PMU (cxl_pmu_memX.Y)",
            pmu.path.display()
        ));
    };
    let path = root.join("sys/bus/cxl/devices").join(dev).join("numa_node");
    let text = read_optional(&path).map_err(|e| crate::text::error_line(&e))?;
    match text.as_deref().map(str::trim) {
        Some(t) if t.parse::<u32>().is_ok() => Ok(t.parse().unwrap_or_default()),
        found => Err(format!(
            "{}: {}; a CXL device without a NUMA node cannot be shown as a tier (enable NUMA, \
             or check the platform's SRAT/CEDT entries)",
            path.display(),
            found.map_or("missing".to_string(), |t| format!("'{t}', not a node"))
        )),
    }
}

pub(super) fn cxl_pmu(ctx: &Ctx) -> Vec<Source> {
    let kind = BackendKind::CxlPmu;
    let mut pmus: Vec<&Pmu> = ctx
        .pmus
        .iter()
        .filter(|p| p.name.starts_with("cxl_pmu_mem"))
        .collect();
    pmus.sort_by(|a, b| (a.name.len(), a.name.as_str()).cmp(&(b.name.len(), b.name.as_str())));
    if pmus.is_empty() {
        return vec![unavailable(
            kind,
            "no cxl_pmu_memX.Y PMU (a CXL memory device with a CPMU; the cxl_pmu driver)",
        )];
    }
    // drivers/perf/cxl_pmu.c, events of the CXL vendor id 0x1e98: s2m_drs_memdata (group 0x25
    // bit 0, the device's data responses to host reads) and m2s_rwd_memwr (group 0x21 bit 1,
    // host writes with data), a 64-byte cache line each (CXL 3.0 §3.3, .mem flits carry lines).
    const SRC: &str = "cxl_pmu.c CXL_PMU_EVENT_CXL_ATTR; CXL 3.0 Table 3-46/3-35, 64 bytes a line";
    let events = [
        Event {
            direction: Direction::Read,
            alias: "s2m_drs_memdata",
            bytes_per_count: 64.0,
            source: SRC,
        },
        Event {
            direction: Direction::Write,
            alias: "m2s_rwd_memwr",
            bytes_per_count: 64.0,
            source: SRC,
        },
    ];
    let root = ctx.root;
    let check = |p: &Pmu| device_node(root, p).map(|_| ());
    let rule = Rule {
        kind,
        events: &events,
        extra_terms: "",
        needs_formats: &[
            ("mask", "cxl_pmu's event mask, config:0-31"),
            ("gid", "the event group, config:32-47"),
            ("vid", "the vendor id, config:48-63"),
        ],
        check: &check,
    };
    let mut out = instances(ctx, &rule, &pmus);
    if let Some(first) = out.first_mut().filter(|s| s.available) {
        let nodes: Vec<String> = first
            .pmus
            .iter()
            .filter_map(|sp| {
                let p = pmus.iter().find(|p| p.name == sp.name)?;
                let node = device_node(root, p).ok()?;
                Some(format!("{} on NUMA node {node}", sp.name))
            })
            .collect();
        first.reason = Some(format!("second memory tier: {}", nodes.join(", ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::memdev;

    #[test]
    fn memory_devices_are_named_by_the_pmu() {
        assert_eq!(memdev("cxl_pmu_mem0.0"), Some("mem0"));
        assert_eq!(memdev("cxl_pmu_mem12.3"), Some("mem12"));
        assert_eq!(memdev("cxl_pmu_mem.0"), None);
        assert_eq!(memdev("cxl_pmu_mem1"), None);
        assert_eq!(memdev("cxl_pmu_port0.0"), None);
    }
}

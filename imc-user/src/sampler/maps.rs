//! Handing the program its counters (the slot and package arrays, the readers) and mapping its
//! rings, and its interval clock.
use super::config::SamplerConfig;
use super::counters::{OpenCounter, OpenPackageCounter};
use super::error::SamplerError;
use super::rings::Rings;
use crate::sys::bpf::{BpfSys, MappedMap};
use aya::Ebpf;
use aya::maps::Array;
use imc_common::{
    CpuHead, HEADS_MAP_NAME, INTERVALS_MAP_NAME, IntervalClock, PKG_MAP_NAME, PKG_SLOT_MAP_NAME,
    READERS_MAP_NAME, ReaderCfg, SLOT_MAP_NAMES, TICKS_MAP_NAME,
};
use std::os::fd::{AsFd, BorrowedFd};

/// Takes the map `name` out of `ebpf` as its typed handle.
pub(super) fn take_map<T>(ebpf: &mut Ebpf, name: &str) -> Result<T, SamplerError>
where
    T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    ebpf.take_map(name)
        .ok_or_else(|| map_missing(name))?
        .try_into()
        .map_err(|e: aya::maps::MapError| SamplerError::map(name, "", e))
}

/// The map of `ebpf` named `name`, or why not.
pub(super) fn map_missing(name: &str) -> SamplerError {
    SamplerError::map_shape(
        name,
        "not in the eBPF object (object and imc built from different sources?)",
    )
}

pub(super) fn perf_array<'a>(ebpf: &'a Ebpf, name: &str) -> Result<BorrowedFd<'a>, SamplerError> {
    match ebpf.map(name) {
        Some(aya::maps::Map::PerfEventArray(data)) => Ok(data.fd().as_fd()),
        Some(_) => Err(SamplerError::map_shape(name, "is not a PERF_EVENT_ARRAY")),
        None => Err(map_missing(name)),
    }
}

/// Each CPU slot's counter fd into the entries of the CPUs that read it.
pub(super) fn fill_slot_arrays(
    ebpf: &Ebpf,
    cfg: &SamplerConfig,
    counters: &[OpenCounter],
    bpf_sys: &dyn BpfSys,
) -> Result<(), SamplerError> {
    for (slot, plan) in cfg.slots.iter().enumerate() {
        let name = SLOT_MAP_NAMES[slot];
        let map = perf_array(ebpf, name)?;
        for (open_cpu, readers) in &plan.instances {
            let c = counters
                .iter()
                .find(|c| c.slot == slot && c.cpu == *open_cpu)
                .expect("every instance was opened");
            for &reader in readers {
                bpf_sys
                    .perf_array_set(map, reader, c.fd.as_fd())
                    .map_err(|e| {
                        SamplerError::map(
                            name,
                            format!("storing the counter of CPU {open_cpu} at index {reader}"),
                            e,
                        )
                    })?;
            }
        }
    }
    Ok(())
}

/// The package counters into PKG, their slots into PKG_SLOT, and each reader CPU's range into
/// READERS.
pub(super) fn fill_package_maps(
    ebpf: &mut Ebpf,
    cfg: &SamplerConfig,
    counters: &[OpenPackageCounter],
    bpf_sys: &dyn BpfSys,
) -> Result<(), SamplerError> {
    if counters.is_empty() {
        return Ok(());
    }
    {
        let pkg = perf_array(ebpf, PKG_MAP_NAME)?;
        for (i, c) in counters.iter().enumerate() {
            bpf_sys
                .perf_array_set(pkg, i as u32, c.fd.as_fd())
                .map_err(|e| SamplerError::map(PKG_MAP_NAME, format!("entry {i}"), e))?;
        }
    }
    {
        let mut slots: Array<_, u32> = Array::try_from(
            ebpf.map_mut(PKG_SLOT_MAP_NAME)
                .ok_or_else(|| map_missing(PKG_SLOT_MAP_NAME))?,
        )
        .map_err(|e| SamplerError::map(PKG_SLOT_MAP_NAME, "", e))?;
        for (i, c) in counters.iter().enumerate() {
            slots
                .set(i as u32, c.slot as u32, 0)
                .map_err(|e| SamplerError::map(PKG_SLOT_MAP_NAME, "", e))?;
        }
    }
    let mut readers: Array<_, ReaderCfg> = Array::try_from(
        ebpf.map_mut(READERS_MAP_NAME)
            .ok_or_else(|| map_missing(READERS_MAP_NAME))?,
    )
    .map_err(|e| SamplerError::map(READERS_MAP_NAME, "", e))?;
    let mut first = 0u32;
    for (group, g) in cfg.groups.iter().enumerate() {
        let count = g.counters.len() as u32;
        for &cpu in &g.readers {
            let entry = ReaderCfg {
                first,
                count,
                group: group as u32,
                _pad: 0,
            };
            readers
                .set(cpu, entry, 0)
                .map_err(|e| SamplerError::map(READERS_MAP_NAME, "", e))?;
        }
        first += count;
    }
    Ok(())
}

/// The per-CPU rings (of `entry`-byte records) and heads, mapped read-only.
pub(super) fn map_rings(
    ebpf: &Ebpf,
    possible: u32,
    ring_len: u32,
    entry: usize,
) -> Result<Rings, SamplerError> {
    let map_bytes = |name: &str, bytes: usize| -> Result<MappedMap, SamplerError> {
        let Some(aya::maps::Map::Array(data)) = ebpf.map(name) else {
            return Err(SamplerError::map_shape(name, "missing or not an array"));
        };
        MappedMap::map(data.fd().as_fd(), bytes)
            .map_err(|e| SamplerError::map(name, format!("mmap of {bytes} bytes"), e))
    };
    Ok(Rings::new(
        map_bytes(TICKS_MAP_NAME, (possible * ring_len) as usize * entry)?,
        map_bytes(
            HEADS_MAP_NAME,
            possible as usize * std::mem::size_of::<CpuHead>(),
        )?,
        ring_len,
        entry,
        possible as usize,
    ))
}

/// Writes the interval clock (imc_common::INTERVALS_MAP_NAME). A CPU that reads it while it is
/// being written may see half of it; each CPU compares the clock with the one it last used at
/// every run, so its next run takes the whole one.
pub(super) fn write_interval_clock(
    ebpf: &mut Ebpf,
    origin_ns: u64,
    period_ns: u64,
) -> Result<(), SamplerError> {
    let mut clock: Array<_, IntervalClock> = Array::try_from(
        ebpf.map_mut(INTERVALS_MAP_NAME)
            .ok_or_else(|| map_missing(INTERVALS_MAP_NAME))?,
    )
    .map_err(|e| SamplerError::map(INTERVALS_MAP_NAME, "", e))?;
    let value = IntervalClock {
        origin: origin_ns,
        period: period_ns,
    };
    clock
        .set(0, value, 0)
        .map_err(|e| SamplerError::map(INTERVALS_MAP_NAME, "entry 0", e))
}

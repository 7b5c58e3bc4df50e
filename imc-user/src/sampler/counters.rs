//! Opening the slots' and the packages' counters, before anything is loaded (a counter the user
//! got wrong is reported first).
use super::config::SamplerConfig;
use super::error::SamplerError;
use crate::sys::perf::{self, PerfSys};
use std::io;
use std::os::fd::OwnedFd;

/// A counter fd the sampler opened, kept open for the program's lifetime.
pub(super) struct OpenCounter {
    pub(super) slot: usize,
    pub(super) cpu: u32,
    pub(super) fd: OwnedFd,
}

/// An opened package counter: index `i` of these is entry `i` of the PKG array.
pub(super) struct OpenPackageCounter {
    pub(super) slot: usize,
    pub(super) group: usize,
    pub(super) channel: String,
    pub(super) fd: OwnedFd,
}

pub(super) fn open_error(what: &str, cpu: u32, e: io::Error) -> SamplerError {
    SamplerError::OpenCounter {
        message: perf::open_words(&format!("opening '{what}' on CPU {cpu}"), &e),
        source: e,
    }
}

/// Every CPU slot's counter, on each CPU it is opened on.
pub(super) fn open_slot_counters(
    cfg: &SamplerConfig,
    perf_sys: &dyn PerfSys,
) -> Result<Vec<OpenCounter>, SamplerError> {
    let mut counters = Vec::new();
    for (slot, plan) in cfg.slots.iter().enumerate() {
        for (open_cpu, _) in &plan.instances {
            let fd = perf_sys
                .open(plan.attr_for(*open_cpu), -1, *open_cpu as i32, None)
                .map_err(|e| open_error(&plan.spec.event, *open_cpu, e))?;
            counters.push(OpenCounter {
                slot,
                cpu: *open_cpu,
                fd,
            });
        }
    }
    Ok(counters)
}

/// Every package counter, group after group (their PKG array order).
pub(super) fn open_package_counters(
    cfg: &SamplerConfig,
    perf_sys: &dyn PerfSys,
) -> Result<Vec<OpenPackageCounter>, SamplerError> {
    let mut out = Vec::new();
    for (group, g) in cfg.groups.iter().enumerate() {
        for c in &g.counters {
            let fd = perf_sys
                .open(&c.attr, -1, c.open_cpu as i32, None)
                .map_err(|e| open_error(&c.name, c.open_cpu, e))?;
            out.push(OpenPackageCounter {
                slot: c.slot,
                group,
                channel: c.channel.clone(),
                fd,
            });
        }
    }
    Ok(out)
}

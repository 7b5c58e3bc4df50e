//! The userspace half of `imc-ebpf/src/stacks.rs`: the stack maps sized and switched on before
//! load, the overflow counters of `--stack-period` opened and handed the sampling program, and
//! at each drain every (process, cgroup, stack) entry taken out of STACK_COUNTS with the addresses of
//! the stacks it names.
//!
//! Stacks are taken in generations: at each drain the generation moves on (the program then
//! stores new stacks in the other stack map), the entries are taken out, the stacks of the
//! generation just ended are read, and its map is emptied for its next turn. So the stack maps
//! hold only the stacks of about one drain, however long the run, and an id is read from the
//! map it was given in before that map is emptied. A generation that makes many entries wakes
//! the drain early (STACK_WAKE_AFTER), so its map stays sparse: a stack map refuses a stack
//! whose hash bucket another holds, and the fuller the map, the more often that happens. An
//! entry of an older generation (a program that was charging across the turn) names a map
//! emptied since: its stacks read as not recorded, never as another stack that took its
//! bucket.
use super::config::{SamplerConfig, StackConfig};
use super::error::SamplerError;
use crate::sys::perf::{PerfEventAttr, PerfIoctl, PerfSys};
use aya::Ebpf;
use aya::maps::{Array, MapData, StackTraceMap};
use aya::programs::PerfEvent;
use imc_common::{
    NO_STACK, STACK_COUNTS_MAP_NAME, STACK_GEN_ENTRIES, STACK_GEN_MAP_NAME, STACK_GEN_NOW,
    STACK_SAMPLE_PROGRAM, STACK_TRACES_MAP_NAME, STACK_TRACES_ODD_MAP_NAME, StackCounts, StackKey,
};
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// One drained entry: a process's stacks, what they were charged since the last drain, and
/// each stack's addresses, leaf first (None where the map held none or none was asked for).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackEntry {
    pub key: StackKey,
    pub counts: StackCounts,
    pub user: Option<Vec<u64>>,
    pub kernel: Option<Vec<u64>>,
}

/// The maps (and overflow counters) of a sampler that takes stacks.
pub struct StackMaps {
    counts: MapData,
    /// The stack maps of even and of odd generations.
    traces: [StackTraceMap<MapData>; 2],
    generation: Array<MapData, u32>,
    /// The generation stacks are taken in now.
    now: u32,
    /// The overflow counters of `--stack-period`, one per CPU (closed with the sampler).
    _overflow: Vec<OwnedFd>,
}

impl StackMaps {
    /// Takes the stack maps out of the loaded object and, with `--stack-period`, opens the
    /// overflow counters and hands each the sampling program.
    pub(super) fn start(
        ebpf: &mut Ebpf,
        cfg: &SamplerConfig,
        sc: &StackConfig,
        perf: &dyn PerfSys,
    ) -> Result<StackMaps, SamplerError> {
        let counts = match ebpf.take_map(STACK_COUNTS_MAP_NAME) {
            Some(aya::maps::Map::HashMap(d)) => d,
            Some(_) => {
                return Err(SamplerError::map_shape(
                    STACK_COUNTS_MAP_NAME,
                    "is not a hash map",
                ));
            }
            None => return Err(super::maps::map_missing(STACK_COUNTS_MAP_NAME)),
        };
        let even: StackTraceMap<MapData> = super::maps::take_map(ebpf, STACK_TRACES_MAP_NAME)?;
        let odd: StackTraceMap<MapData> = super::maps::take_map(ebpf, STACK_TRACES_ODD_MAP_NAME)?;
        let generation: Array<MapData, u32> = super::maps::take_map(ebpf, STACK_GEN_MAP_NAME)?;
        let overflow = match sc.overflow {
            Some((period, slot)) => open_overflow(ebpf, cfg, period, slot, perf)?,
            None => Vec::new(),
        };
        Ok(StackMaps {
            counts,
            traces: [even, odd],
            generation,
            now: 0,
            _overflow: overflow,
        })
    }

    /// Moves the generation on, takes every entry out of STACK_COUNTS (each at once: what the
    /// program adds meanwhile goes to a new entry, taken at the next drain) with its stacks'
    /// addresses, and empties the ended generation's stack map; appends to `out`, returns how
    /// many.
    pub fn drain(&mut self, out: &mut Vec<StackEntry>) -> usize {
        let ended = self.now;
        let next = ended.wrapping_add(1);
        // The count first: entries the program makes in between count towards the next.
        let _ = self.generation.set(STACK_GEN_ENTRIES, 0, 0);
        if self.generation.set(STACK_GEN_NOW, next, 0).is_ok() {
            self.now = next;
        }
        let first = out.len();
        let mut read: HashMap<(u32, i32), Option<Vec<u64>>> = HashMap::new();
        for (key, counts) in self.take_counts() {
            let mut addresses = |id: i32| {
                if id == NO_STACK || (key.generation != ended && key.generation != self.now) {
                    return None;
                }
                let traces = &self.traces[(key.generation & 1) as usize];
                read.entry((key.generation, id))
                    .or_insert_with(|| addresses(traces, id))
                    .clone()
            };
            let (user, kernel) = (addresses(key.user_stack), addresses(key.kernel_stack));
            out.push(StackEntry {
                key,
                counts,
                user,
                kernel,
            });
        }
        if self.now != ended {
            self.empty(ended);
        }
        out.len() - first
    }

    /// Every entry of STACK_COUNTS, each taken out at once.
    fn take_counts(&mut self) -> Vec<(StackKey, StackCounts)> {
        let fd = self.counts.fd().as_fd();
        let mut keys: Vec<StackKey> = Vec::new();
        let mut prev: Option<StackKey> = None;
        loop {
            let mut next = StackKey::default();
            let prev_bytes = prev.as_ref().map(pod_bytes);
            match crate::sys::bpf::map_next_key(fd, prev_bytes, pod_bytes_mut(&mut next)) {
                Ok(true) => {
                    keys.push(next);
                    prev = Some(next);
                }
                _ => break,
            }
        }
        let mut taken = Vec::with_capacity(keys.len());
        for k in keys {
            let mut v = StackCounts::default();
            if let Ok(true) = crate::sys::bpf::map_take(fd, pod_bytes(&k), pod_bytes_mut(&mut v)) {
                taken.push((k, v));
            }
        }
        taken
    }

    /// Deletes every stack of generation `generation`'s map (its ids listed first: a stack map's
    /// next key after a deleted one starts over from its first bucket).
    fn empty(&mut self, generation: u32) {
        let map = &mut self.traces[(generation & 1) as usize];
        let ids: Vec<u32> = map.stack_ids().filter_map(Result::ok).collect();
        for id in ids {
            let _ = map.remove(&id);
        }
    }
}

/// The addresses of stack `id` in `traces` (leaf first), None where the map holds none.
fn addresses(traces: &StackTraceMap<MapData>, id: i32) -> Option<Vec<u64>> {
    let id = u32::try_from(id).ok()?;
    let st = traces.get(&id, 0).ok()?;
    Some(st.frames().iter().map(|f| f.ip).collect())
}

/// The overflow counters of `--stack-period`: the weight slot's event on every CPU, sampling
/// every `period` events, each running STACK_SAMPLE_PROGRAM.
fn open_overflow(
    ebpf: &mut Ebpf,
    cfg: &SamplerConfig,
    period: u64,
    slot: usize,
    perf: &dyn PerfSys,
) -> Result<Vec<OwnedFd>, SamplerError> {
    let prog: &mut PerfEvent = super::attach::load_program(ebpf, STACK_SAMPLE_PROGRAM)?;
    prog.load().map_err(SamplerError::load)?;
    let prog_fd = prog.fd().map_err(SamplerError::load)?.as_fd().as_raw_fd();
    let Some(plan) = cfg.slots.get(slot) else {
        return Err(SamplerError::map_shape(
            STACK_SAMPLE_PROGRAM,
            format!("--stack-period names slot {slot}, which the plan does not have"),
        ));
    };
    let mut fds = Vec::new();
    for &cpu in &cfg.cpus {
        let attr = PerfEventAttr {
            sample_period: period,
            read_format: 0,
            ..*plan.attr_for(cpu)
        };
        let attach = |e: std::io::Error| SamplerError::Attach {
            what: format!("the --stack-period counter of CPU {cpu}"),
            message: String::new(),
            source: Some(e.into()),
        };
        let fd = perf.open(&attr, -1, cpu as i32, None).map_err(attach)?;
        perf.ioctl(fd.as_fd(), PerfIoctl::SetBpf(prog_fd))
            .map_err(attach)?;
        perf.ioctl(fd.as_fd(), PerfIoctl::Enable).map_err(attach)?;
        fds.push(fd);
    }
    Ok(fds)
}

fn pod_bytes<T: aya::Pod>(v: &T) -> &[u8] {
    // SAFETY: a Pod is plain bytes of its size.
    unsafe { std::slice::from_raw_parts((v as *const T).cast(), std::mem::size_of::<T>()) }
}

fn pod_bytes_mut<T: aya::Pod>(v: &mut T) -> &mut [u8] {
    // SAFETY: a Pod is plain bytes of its size, and any bytes are a valid Pod.
    unsafe { std::slice::from_raw_parts_mut((v as *mut T).cast(), std::mem::size_of::<T>()) }
}

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
//! whose hash bucket another holds, and the fuller the map, the more often that happens. The
//! program stores a refused stack in its generation's spare map instead (its id marked
//! SPARE_STACK), which holds only such stacks; it is read and emptied with the main map. An
//! entry of an older generation (a program that was charging across the turn) names a map
//! emptied since: its stacks read as not recorded, never as another stack that took its
//! bucket.
use super::config::{SamplerConfig, StackConfig};
use super::error::SamplerError;
use crate::sys::bpf::{map_delete, map_lookup, map_next_key, map_take, map_take_all, unsupported};
use crate::sys::perf::{PerfEventAttr, PerfIoctl, PerfSys};
use aya::Ebpf;
use aya::maps::{Array, MapData};
use aya::programs::PerfEvent;
use imc_common::{
    NO_STACK, SPARE_STACK, STACK_COUNTS_MAP_NAME, STACK_DEPTH, STACK_GEN_ENTRIES,
    STACK_GEN_MAP_NAME, STACK_GEN_NOW, STACK_SAMPLE_PROGRAM, STACK_SPARE_MAP_NAME,
    STACK_SPARE_ODD_MAP_NAME, STACK_TRACES_MAP_NAME, STACK_TRACES_ODD_MAP_NAME, StackCounts,
    StackKey,
};
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// STACK_COUNTS entries taken out per batch call at most.
const BATCH: u32 = 256;

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
    /// The stack maps of even and of odd generations, and their spare maps (the stacks they
    /// refused for a bucket another held; ids marked SPARE_STACK).
    traces: [MapData; 2],
    spares: [MapData; 2],
    generation: Array<MapData, u32>,
    /// The generation stacks are taken in now.
    now: u32,
    /// Whether the kernel takes STACK_COUNTS out in batches (else entry by entry).
    batch: bool,
    /// Whether the kernel takes a stack out of its map as it is read (else the ended
    /// generation's stacks are all removed after the reads).
    take_stacks: bool,
    /// The batches' keys and values, kept between drains.
    keys: Vec<u8>,
    values: Vec<u8>,
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
        let counts = raw_map(
            ebpf,
            STACK_COUNTS_MAP_NAME,
            |m| match m {
                aya::maps::Map::HashMap(d) => Some(d),
                _ => None,
            },
            "a hash map",
            (size_of::<StackKey>(), size_of::<StackCounts>()),
        )?;
        let mut stack_map = |name: &str| {
            raw_map(
                ebpf,
                name,
                |m| match m {
                    aya::maps::Map::StackTraceMap(d) => Some(d),
                    _ => None,
                },
                "a stack map",
                (size_of::<u32>(), STACK_DEPTH * size_of::<u64>()),
            )
        };
        let traces = [
            stack_map(STACK_TRACES_MAP_NAME)?,
            stack_map(STACK_TRACES_ODD_MAP_NAME)?,
        ];
        let spares = [
            stack_map(STACK_SPARE_MAP_NAME)?,
            stack_map(STACK_SPARE_ODD_MAP_NAME)?,
        ];
        let generation: Array<MapData, u32> = super::maps::take_map(ebpf, STACK_GEN_MAP_NAME)?;
        let overflow = match sc.overflow {
            Some((period, slot)) => open_overflow(ebpf, cfg, period, slot, perf)?,
            None => Vec::new(),
        };
        Ok(StackMaps {
            counts,
            traces,
            spares,
            generation,
            now: 0,
            batch: true,
            take_stacks: true,
            keys: Vec::new(),
            values: Vec::new(),
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
        let turned = self.now != ended;
        let first = out.len();
        let mut read: HashMap<(u32, i32), Option<Vec<u64>>> = HashMap::new();
        for (key, counts) in self.take_counts() {
            let mut stack = |maps: &mut StackMaps, id: i32| {
                let generation = key.generation;
                if id == NO_STACK || (generation != ended && generation != maps.now) {
                    return None;
                }
                // Only the ended generation's stacks leave their map: the program may name
                // the new generation's again before they are drained.
                let take = turned && generation == ended;
                read.entry((generation, id))
                    .or_insert_with(|| maps.read_stack(generation, id, take))
                    .clone()
            };
            let user = stack(self, key.user_stack);
            let kernel = stack(self, key.kernel_stack);
            out.push(StackEntry {
                key,
                counts,
                user,
                kernel,
            });
        }
        if turned {
            self.empty(ended);
        }
        out.len() - first
    }

    /// Every entry of STACK_COUNTS, each taken out at once: in batches where the kernel can,
    /// else entry by entry.
    fn take_counts(&mut self) -> Vec<(StackKey, StackCounts)> {
        if self.batch {
            match self.take_counts_batched() {
                Some(taken) => return taken,
                None => self.batch = false,
            }
        }
        let fd = self.counts.fd().as_fd();
        let keys: Vec<StackKey> = map_keys(&self.counts);
        let mut taken = Vec::with_capacity(keys.len());
        for k in keys {
            let mut v = StackCounts::default();
            if let Ok(true) = map_take(fd, pod_bytes(&k), pod_bytes_mut(&mut v)) {
                taken.push((k, v));
            }
        }
        taken
    }

    /// STACK_COUNTS taken out in batches; None where the kernel has no batch command for it.
    fn take_counts_batched(&mut self) -> Option<Vec<(StackKey, StackCounts)>> {
        let (ks, vs) = (size_of::<StackKey>(), size_of::<StackCounts>());
        self.keys.clear();
        self.values.clear();
        let fd = self.counts.fd().as_fd();
        // An error after entries were taken keeps them; one before takes nothing this drain.
        let n =
            map_take_all(fd, ks, vs, BATCH, &mut self.keys, &mut self.values).unwrap_or(Some(0))?;
        let taken = (0..n)
            .map(|i| {
                (
                    pod_read(&self.keys[i * ks..(i + 1) * ks]),
                    pod_read(&self.values[i * vs..(i + 1) * vs]),
                )
            })
            .collect();
        Some(taken)
    }

    /// The addresses of stack `id` of generation `generation` (leaf first), None where its map
    /// holds none; taken out of the map with the read where `take` and the kernel can.
    fn read_stack(&mut self, generation: u32, id: i32, take: bool) -> Option<Vec<u64>> {
        let (maps, id) = if id >= 0 && id & SPARE_STACK != 0 {
            (&self.spares, id & !SPARE_STACK)
        } else {
            (&self.traces, id)
        };
        let id = u32::try_from(id).ok()?;
        let fd = maps[(generation & 1) as usize].fd().as_fd();
        let mut ips = [0u64; STACK_DEPTH];
        let mut found = None;
        if take && self.take_stacks {
            match map_take(fd, pod_bytes(&id), pod_bytes_mut(&mut ips)) {
                Err(e) if unsupported(&e) => self.take_stacks = false,
                r => found = Some(r),
            }
        }
        let found =
            found.unwrap_or_else(|| map_lookup(fd, pod_bytes(&id), pod_bytes_mut(&mut ips)));
        match found {
            Ok(true) => Some(ips.iter().copied().take_while(|&ip| ip != 0).collect()),
            _ => None,
        }
    }

    pub(super) fn one_at_a_time(&mut self) {
        self.batch = false;
        self.take_stacks = false;
    }

    pub(super) fn left_in_ended_map(&self) -> usize {
        let ended = (self.now.wrapping_sub(1) & 1) as usize;
        map_keys::<u32>(&self.traces[ended]).len() + map_keys::<u32>(&self.spares[ended]).len()
    }

    /// Deletes every stack left in generation `generation`'s map and spare map. Where the
    /// reads took their stacks out, what is left is what no drained entry named.
    fn empty(&mut self, generation: u32) {
        let i = (generation & 1) as usize;
        for map in [&self.traces[i], &self.spares[i]] {
            for id in map_keys::<u32>(map) {
                let _ = map_delete(map.fd().as_fd(), pod_bytes(&id));
            }
        }
    }
}

/// Every key of `map` (listed before any is removed: a stack map's next key after a deleted
/// one starts over from its first bucket).
fn map_keys<K: aya::Pod + Default>(map: &MapData) -> Vec<K> {
    let fd = map.fd().as_fd();
    let mut keys: Vec<K> = Vec::new();
    loop {
        let mut next = K::default();
        let prev = keys.last().map(pod_bytes);
        match map_next_key(fd, prev, pod_bytes_mut(&mut next)) {
            Ok(true) => keys.push(next),
            _ => break,
        }
    }
    keys
}

/// The map `name` of `ebpf` as `pick` takes it (None: not `what`), with (key, value) sizes
/// `sizes`: imc reads and writes its entries as those sizes.
fn raw_map(
    ebpf: &mut Ebpf,
    name: &str,
    pick: fn(aya::maps::Map) -> Option<MapData>,
    what: &str,
    sizes: (usize, usize),
) -> Result<MapData, SamplerError> {
    let map = ebpf
        .take_map(name)
        .ok_or_else(|| super::maps::map_missing(name))?;
    let data = pick(map).ok_or_else(|| SamplerError::map_shape(name, format!("is not {what}")))?;
    let info = data.info().map_err(|e| SamplerError::map(name, "", e))?;
    let found = (info.key_size() as usize, info.value_size() as usize);
    if found != sizes {
        return Err(SamplerError::map_shape(
            name,
            format!(
                "has {}-byte keys and {}-byte values where imc reads {} and {} (object and \
                 imc built from different sources?)",
                found.0, found.1, sizes.0, sizes.1
            ),
        ));
    }
    Ok(data)
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

/// A Pod read from `bytes` (its size).
fn pod_read<T: aya::Pod>(bytes: &[u8]) -> T {
    debug_assert_eq!(bytes.len(), std::mem::size_of::<T>());
    // SAFETY: bytes holds size_of::<T>() bytes, and any bytes are a valid Pod.
    unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) }
}

fn pod_bytes_mut<T: aya::Pod>(v: &mut T) -> &mut [u8] {
    // SAFETY: a Pod is plain bytes of its size, and any bytes are a valid Pod.
    unsafe { std::slice::from_raw_parts_mut((v as *mut T).cast(), std::mem::size_of::<T>()) }
}

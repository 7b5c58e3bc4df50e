//! Loading the program: its globals and map sizes set for the configuration, and the rings
//! sized for the tick and drain rates.
use super::config::{SamplerConfig, SlotPlan};
use super::error::SamplerError;
use super::object;
use crate::model::SlotScope;
use aya::{Ebpf, EbpfLoader};
use imc_common::{
    AGGREGATE_GLOBAL, CPU_SLOTS_GLOBAL, GROUP_LAST_MAP_NAME, HEADS_MAP_NAME, LONG_SLICE_GLOBAL,
    MIN_FLUSH_GLOBAL, NR_SLOTS_GLOBAL, PKG_MAP_NAME, PKG_MIN_GAP_GLOBAL, PKG_SLOT_MAP_NAME,
    PKG_SLOTS_GLOBAL, READERS_MAP_NAME, RING_LEN_GLOBAL, Record, SLOT_MAP_NAMES,
    STACK_COUNTS_MAP_NAME, STACK_MODE_GLOBAL, STACK_PERIOD_GLOBAL, STACK_PERIOD_SLOT_GLOBAL,
    STACK_PROCS_ENTRIES, STACK_PROCS_MAP_NAME, STACK_SELF_GLOBAL, STACK_SLOTS_GLOBAL,
    STACK_SPARE_MAP_NAME, STACK_SPARE_ODD_MAP_NAME, STACK_TRACES_MAP_NAME,
    STACK_TRACES_ODD_MAP_NAME, STACK_WAKE_AFTER_GLOBAL, TICKS_MAP_NAME, TIMED_SLOTS_GLOBAL,
    WAKE_EVERY_GLOBAL, tick_rules,
};

/// All CPUs' rings together stay within this (a 192-CPU server would otherwise map 750 MB).
pub(super) const RINGS_MAX_BYTES: u64 = 128 << 20;

/// Records per CPU ring: eight drain periods' worth at the tick rate plus, where context switches
/// write records too (`--precise`), 20 000 switches a second (a busy server's rate; a burst
/// beyond it within one drain period is what may be lost), a power of two between 64 (2048 with
/// switches: a drain a loaded machine delays must not lose a switch burst) and 16384, and no
/// more than [`RINGS_MAX_BYTES`] over the `possible` CPUs allow (at least 256). Aggregating, the
/// rate is four tasks a tick and two drain periods' worth within a quarter of that budget: a
/// 192-CPU server maps 25 MB of rings rather than 100 MB. A ring half full wakes
/// userspace early (see [`wake_every`]), so a long drain period does not need a ring that long.
pub(super) fn ring_len(cfg: &SamplerConfig, possible: u32) -> u32 {
    if let Some(n) = cfg.ring_bytes {
        return n.clamp(2, 1 << 20).next_power_of_two();
    }
    // The kernel tick fires at up to 1000 Hz, plus other hrtimers on the local-timer tracepoint.
    let hz = u64::from(cfg.tick_hz(Some(1000)));
    let aggregating = cfg.aggregate && cfg.switches();
    let (per_second, least, periods, max_bytes) = if aggregating {
        // Aggregates: a record per task per tick, whatever the switch rate (a few tasks a tick;
        // more flush early, eight at a time). The ring wakes userspace when half full.
        (hz * 4, 256, 2, RINGS_MAX_BYTES / 4)
    } else if cfg.switches() {
        (hz + 20_000, 2048, 8, RINGS_MAX_BYTES)
    } else {
        (hz, 64, 8, RINGS_MAX_BYTES)
    };
    let per_period = per_second * u64::from(cfg.drain_period_ms.max(1)) / 1000 + 1;
    let wanted = (per_period * periods)
        .clamp(least, 16384)
        .next_power_of_two();
    let entry = Record::entry_size(cfg.slots.len()) as u64;
    let budget = max_bytes / (u64::from(possible.max(1)) * entry);
    // Largest power of two within the budget.
    let affordable = 1u64 << (63 - budget.max(256).leading_zeros());
    wanted.min(affordable) as u32
}

/// Records of one CPU between two wake-ups of userspace: half its ring, so a drain the kernel
/// asks for has the other half's time to come before anything is overwritten.
pub(super) fn wake_every(ring_len: u32) -> u32 {
    (ring_len / 2).max(1)
}

/// AYA_LOG_LEVEL with every level off.
pub(super) static LOG_OFF: u8 = 0;

/// Loads the object with its globals and map sizes set for this configuration.
pub(super) fn load(
    cfg: &SamplerConfig,
    bytes: &[u8],
    possible: u32,
    ring_len: u32,
    nr_package_counters: usize,
) -> Result<Ebpf, SamplerError> {
    object::check_abi(bytes)?;
    // Ring entries carry the configured slots only.
    let entry = Record::entry_size(cfg.slots.len()) as u32;
    let sized = object::with_value_size(bytes, TICKS_MAP_NAME, entry).ok_or_else(|| {
        SamplerError::map_shape(
            TICKS_MAP_NAME,
            "the object has no such map definition to size: rebuild it with `cargo xtask \
                 build`",
        )
    })?;
    let globals = Globals::new(cfg, ring_len);
    let mut loader = EbpfLoader::new();
    globals.set(&mut loader);
    // The program's rare-path lines (aya-log) are written only when -vv reads them.
    if !cfg.bpf_log {
        loader.override_global(aya_log::LEVEL, &LOG_OFF, true);
    }
    for name in SLOT_MAP_NAMES {
        loader.map_max_entries(name, possible);
    }
    loader.map_max_entries(TICKS_MAP_NAME, possible * ring_len);
    loader.map_max_entries(HEADS_MAP_NAME, possible);
    let n = (nr_package_counters as u32).max(1);
    loader.map_max_entries(PKG_MAP_NAME, n);
    let pinned = pin_package_array(&mut loader, n, possible)?;
    loader.map_max_entries(PKG_SLOT_MAP_NAME, n);
    loader.map_max_entries(READERS_MAP_NAME, possible);
    loader.map_max_entries(GROUP_LAST_MAP_NAME, (cfg.groups.len() as u32).max(1));
    // Without stacks the maps stay at one entry: nothing of their size is allocated.
    let (counts, traces, spare, procs) = cfg.stacks.as_ref().map_or((1, 1, 1, 1), |s| {
        (
            s.map_entries,
            s.stack_entries,
            s.spare_entries.max(1),
            STACK_PROCS_ENTRIES,
        )
    });
    loader.map_max_entries(STACK_COUNTS_MAP_NAME, counts);
    loader.map_max_entries(STACK_TRACES_MAP_NAME, traces);
    loader.map_max_entries(STACK_TRACES_ODD_MAP_NAME, traces);
    loader.map_max_entries(STACK_SPARE_MAP_NAME, spare);
    loader.map_max_entries(STACK_SPARE_ODD_MAP_NAME, spare);
    loader.map_max_entries(STACK_PROCS_MAP_NAME, procs);
    let loaded = loader.load(&sized).map_err(SamplerError::load);
    drop(pinned);
    loaded
}

/// The program's globals for a configuration (the loader borrows them until it loads).
struct Globals {
    nr_slots: u32,
    cpu_slots: u32,
    timed: u32,
    pkg_slots: u32,
    min_gap: u64,
    ring_len: u32,
    aggregate: u32,
    long_slice: u64,
    min_flush: u64,
    wake: u32,
    stack_mode: u32,
    stack_slots: u32,
    stack_period: u64,
    stack_period_slot: u32,
    stack_wake_after: u32,
    stack_self: u32,
}

impl Globals {
    fn new(cfg: &SamplerConfig, ring_len: u32) -> Self {
        let hz = cfg.tick_hz(None);
        Globals {
            nr_slots: cfg.slots.len() as u32,
            cpu_slots: slot_mask(cfg, |p| p.spec.scope != SlotScope::Package),
            // Core PMU events (type 0, 3, 4 and the "cpu" PMU) share counters and can be
            // multiplexed; uncore, msr and software counters cannot.
            timed: slot_mask(cfg, |p| p.may_multiplex),
            pkg_slots: slot_mask(cfg, |p| p.spec.scope == SlotScope::Package),
            min_gap: tick_rules::pkg_min_gap_ns(hz),
            ring_len,
            aggregate: u32::from(cfg.aggregate && cfg.switches()),
            long_slice: tick_rules::long_slice_ns(hz),
            min_flush: tick_rules::min_flush_ns(hz),
            wake: wake_every(ring_len),
            stack_mode: cfg.stacks.as_ref().map_or(0, |s| s.mode()),
            stack_slots: cfg.stacks.as_ref().map_or(0, |s| s.slots_mask),
            stack_period: cfg
                .stacks
                .as_ref()
                .and_then(|s| s.overflow)
                .map_or(0, |o| o.0),
            stack_period_slot: cfg
                .stacks
                .as_ref()
                .and_then(|s| s.overflow)
                .map_or(0, |o| o.1 as u32),
            stack_wake_after: cfg.stacks.as_ref().map_or(0, |s| s.wake_after),
            // This process, whose stacks are not taken (imc_common::STACK_SELF_GLOBAL).
            stack_self: std::process::id(),
        }
    }

    fn set<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        loader.override_global(NR_SLOTS_GLOBAL, &self.nr_slots, true);
        loader.override_global(CPU_SLOTS_GLOBAL, &self.cpu_slots, true);
        loader.override_global(TIMED_SLOTS_GLOBAL, &self.timed, true);
        loader.override_global(PKG_SLOTS_GLOBAL, &self.pkg_slots, true);
        loader.override_global(PKG_MIN_GAP_GLOBAL, &self.min_gap, true);
        loader.override_global(RING_LEN_GLOBAL, &self.ring_len, true);
        loader.override_global(AGGREGATE_GLOBAL, &self.aggregate, true);
        loader.override_global(LONG_SLICE_GLOBAL, &self.long_slice, true);
        loader.override_global(MIN_FLUSH_GLOBAL, &self.min_flush, true);
        loader.override_global(WAKE_EVERY_GLOBAL, &self.wake, true);
        loader.override_global(STACK_MODE_GLOBAL, &self.stack_mode, true);
        loader.override_global(STACK_SLOTS_GLOBAL, &self.stack_slots, true);
        loader.override_global(STACK_PERIOD_GLOBAL, &self.stack_period, true);
        loader.override_global(STACK_PERIOD_SLOT_GLOBAL, &self.stack_period_slot, true);
        loader.override_global(STACK_WAKE_AFTER_GLOBAL, &self.stack_wake_after, true);
        loader.override_global(STACK_SELF_GLOBAL, &self.stack_self, true);
    }
}

/// Bit i set for every slot i of the configuration that `pick` chooses.
fn slot_mask(cfg: &SamplerConfig, pick: impl Fn(&SlotPlan) -> bool) -> u32 {
    cfg.slots
        .iter()
        .enumerate()
        .filter(|(_, p)| pick(p))
        .fold(0, |m, (i, _)| m | 1 << i)
}

/// aya makes a PERF_EVENT_ARRAY no longer than the CPU count; a longer PKG array (`n`
/// package counters on `possible` CPUs) is made here and handed to the loader by pin path (the
/// pin and its mount go once loaded).
fn pin_package_array(
    loader: &mut EbpfLoader<'_>,
    n: u32,
    possible: u32,
) -> Result<Option<crate::sys::bpf::PinnedPerfArray>, SamplerError> {
    if n <= possible {
        return Ok(None);
    }
    let p = crate::sys::bpf::PinnedPerfArray::create(&std::env::temp_dir(), PKG_MAP_NAME, n)
        .map_err(|e| {
            SamplerError::map_shape(
                PKG_MAP_NAME,
                format!(
                    "{n} package counters need an array longer than the {possible} CPUs, \
                     made on a private bpffs mount, which failed ({e}): run imc as root, or \
                     name fewer counters with -e"
                ),
            )
        })?;
    loader.map_pin_path(PKG_MAP_NAME, p.path().to_path_buf());
    Ok(Some(p))
}

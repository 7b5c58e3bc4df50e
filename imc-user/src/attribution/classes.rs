//! Weight classes: which CPU-scope weights weigh each package slot (by direction, local and
//! remote), the rate of a class over a segment, and where weights count bytes that can be set
//! against the controller's.

use super::spread::MAX_CLASSES;
use crate::model::{Direction, SlotRole, SlotScope, SlotSpec};
use imc_common::MAX_SLOTS;

/// One weight class: the Weight slots whose deltas weigh a package's own CPUs' segments, and
/// the RemoteWeight slots whose deltas weigh the other packages' CPUs' segments (0: none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct WeightClass {
    pub(super) local: u8,
    pub(super) remote: u8,
}

/// The rate of a class's slots over a segment of `dt` ns, when every one of them was measured
/// over exactly that segment.
pub(super) fn class_rate(
    mask: u8,
    wdelta: &[f64; MAX_SLOTS],
    w_ok: u8,
    dt: f64,
    scale: &[f64; MAX_SLOTS],
) -> Option<f64> {
    if mask == 0 || w_ok & mask != mask {
        return None;
    }
    let mut w = 0.0;
    let mut b = mask;
    while b != 0 {
        let s = b.trailing_zeros() as usize;
        w += wdelta[s] * scale[s];
        b &= b - 1;
    }
    Some(w / dt)
}

/// Weight slots of one locality, by direction.
#[derive(Default)]
pub(super) struct ByDirection {
    pub(super) read: u8,
    pub(super) write: u8,
    pub(super) undirected: u8,
    pub(super) all: u8,
}

impl ByDirection {
    fn add(&mut self, s: usize, dir: Option<Direction>) {
        self.all |= 1 << s;
        match dir {
            Some(Direction::Read) => self.read |= 1 << s,
            Some(Direction::Write) => self.write |= 1 << s,
            None | Some(Direction::Total) => self.undirected |= 1 << s,
        }
    }

    /// The slots of exactly this direction.
    fn of(&self, dir: Direction) -> u8 {
        match dir {
            Direction::Read => self.read,
            Direction::Write => self.write,
            Direction::Total => self.undirected,
        }
    }

    /// The slots that weigh traffic of `dir`: those of its direction when there are any, else
    /// the undirected ones, else all.
    fn weighing(&self, dir: Direction) -> u8 {
        let fallback = if self.undirected != 0 {
            self.undirected
        } else {
            self.all
        };
        match dir {
            Direction::Read if self.read != 0 => self.read,
            Direction::Write if self.write != 0 => self.write,
            _ => fallback,
        }
    }
}

/// The weight classes of a slot list (at most [`MAX_CLASSES`] distinct ones) and, per slot, the
/// class a package slot is weighed by: for its own CPUs the Weight slots of its direction when
/// there are any, else the undirected ones, else all; for other packages' CPUs the RemoteWeight
/// slots chosen the same way.
#[allow(clippy::type_complexity)]
pub(super) fn weight_classes(
    specs: &[SlotSpec],
) -> (
    [WeightClass; MAX_CLASSES],
    [u8; MAX_SLOTS],
    [Option<(u8, u8)>; MAX_CLASSES],
) {
    let (mut local, mut remote) = (ByDirection::default(), ByDirection::default());
    for (s, spec) in specs.iter().enumerate().take(MAX_SLOTS) {
        if spec.scope != SlotScope::Cpu {
            continue;
        }
        match spec.role {
            SlotRole::Weight(dir) => local.add(s, dir),
            SlotRole::RemoteWeight(dir) => remote.add(s, dir),
            _ => {}
        }
    }
    let mut classes = [WeightClass::default(); MAX_CLASSES];
    let mut slot_class = [0u8; MAX_SLOTS];
    let mut blind = [None; MAX_CLASSES];
    let mut n = 0;
    for (s, spec) in specs.iter().enumerate().take(MAX_SLOTS) {
        if spec.scope != SlotScope::Package {
            continue;
        }
        let dir = match spec.role {
            SlotRole::Traffic(d) => d,
            _ => Direction::Total,
        };
        let mut want = WeightClass {
            local: local.weighing(dir),
            remote: remote.weighing(dir),
        };
        // A weight of this direction with no remote one beside it, where the other direction
        // has both (Skylake-SP's L2 writebacks beside local and remote DRAM reads), counts the
        // CPU's traffic to every package's memory: it is split by the locality the task's
        // other-direction weights show, not stood in for by other-direction remote counts.
        let other = match dir {
            Direction::Read => Some(Direction::Write),
            Direction::Write => Some(Direction::Read),
            Direction::Total => None,
        };
        let mut blind_of = None;
        if let Some(o) = other
            && local.of(dir) != 0
            && remote.of(dir) == 0
            && local.of(o) != 0
            && remote.of(o) != 0
        {
            want.remote = 0;
            blind_of = Some((local.of(o), remote.of(o)));
        }
        // Three classes at most exist (read, write, the fallback), so a free one is found.
        let c = match classes[..n].iter().position(|&m| m == want) {
            Some(c) => c,
            None if n < MAX_CLASSES => {
                classes[n] = want;
                n += 1;
                n - 1
            }
            None => MAX_CLASSES - 1,
        };
        slot_class[s] = c as u8;
        if blind_of.is_some() {
            blind[c] = blind_of;
        }
    }
    (classes, slot_class, blind)
}

/// Per package slot: the price of one byte of weight in the slot's counts (1 / its bytes per
/// count) where every weight of its class counts bytes of the slot's direction (a total slot:
/// of any direction), so what they account for can be set against what the controller
/// counted; None elsewhere.
pub(super) fn accounting(
    specs: &[SlotSpec],
    classes: &[WeightClass; MAX_CLASSES],
    slot_class: &[u8; MAX_SLOTS],
) -> [Option<f64>; MAX_SLOTS] {
    let mut out = [None; MAX_SLOTS];
    for (s, spec) in specs.iter().enumerate().take(MAX_SLOTS) {
        let (SlotScope::Package, SlotRole::Traffic(dir), Some(bpc)) =
            (spec.scope, spec.role, spec.bytes_per_count)
        else {
            continue;
        };
        let class = classes[usize::from(slot_class[s]).min(MAX_CLASSES - 1)];
        if class.local == 0 || bpc <= 0.0 {
            continue;
        }
        let mut bits = class.local | class.remote;
        let mut sized = true;
        while bits != 0 {
            let w = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let wd = match specs.get(w).map(|x| x.role) {
                Some(SlotRole::Weight(d) | SlotRole::RemoteWeight(d)) => d,
                _ => None,
            };
            let same = dir == Direction::Total || wd == Some(dir);
            sized &= same && specs.get(w).and_then(|x| x.bytes_per_count).is_some();
        }
        if sized {
            out[s] = Some(1.0 / bpc);
        }
    }
    out
}

/// Per weight slot: the bytes one count stands for (1 where unknown), before any fidelity.
pub(super) fn weight_byte_scales(specs: &[SlotSpec]) -> [f64; MAX_SLOTS] {
    let mut wscale = [1.0; MAX_SLOTS];
    for (s, spec) in specs.iter().enumerate() {
        if let (SlotScope::Cpu, Some(b)) = (spec.scope, spec.bytes_per_count)
            && matches!(spec.role, SlotRole::Weight(_) | SlotRole::RemoteWeight(_))
            && b > 0.0
        {
            wscale[s] = b;
        }
    }
    wscale
}

//! What every backend of the catalogue is built from: the machine as discovery found it
//! ([`Ctx`]), the events a backend wants ([`Want`]: a sysfs alias, or alias text with its public
//! source), how one is encoded through the PMU's own format files, and how a backend's wanted
//! events become its [`Source`] or the reason it is unavailable. Below the vendor files, which
//! build their backends from it.
use crate::discovery::format::encode_terms;
use crate::discovery::machine::Machine;
use crate::discovery::sysfs::{DiscoveryError, bytes_per_count};
use crate::discovery::topology::designated_cpus;
use crate::model::{BackendKind, Direction, Pmu, Source, SourceEvent, SourcePmu, Topology};
use std::path::Path;

pub(crate) struct Ctx<'a> {
    pub root: &'a Path,
    pub topo: &'a Topology,
    pub machine: &'a Machine,
    pub pmus: &'a [Pmu],
}

impl Ctx<'_> {
    pub(super) fn pmu(&self, name: &str) -> Option<&Pmu> {
        self.pmus.iter().find(|p| p.name == name)
    }

    /// PMUs named `<prefix><N>`, sorted by N (numbering may have gaps: never assume 0..n).
    pub(super) fn numbered(&self, prefix: &str) -> Vec<&Pmu> {
        let mut v: Vec<(u32, &Pmu)> = self
            .pmus
            .iter()
            .filter_map(|p| {
                let n = p.name.strip_prefix(prefix)?;
                (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| n.parse().ok().map(|n| (n, p)))
                    .flatten()
            })
            .collect();
        v.sort_by_key(|(n, _)| *n);
        v.into_iter().map(|(_, p)| p).collect()
    }

    pub(super) fn source_pmu(&self, pmu: &Pmu) -> SourcePmu {
        let cpus = match &pmu.cpumask {
            Some(mask) => designated_cpus(self.topo, mask),
            // No cpumask: a CPU-scope PMU, opened on every online CPU.
            None => self.topo.online.clone(),
        };
        SourcePmu {
            name: pmu.name.clone(),
            pmu_type: pmu.pmu_type,
            cpus,
        }
    }
}

/// Every online CPU of `cpumask` (a PMU with one CPU per L3, not per package).
pub(super) fn designated_cpus_all(topo: &Topology, cpumask: &[u32]) -> Vec<u32> {
    cpumask
        .iter()
        .copied()
        .filter(|c| topo.online.contains(c))
        .collect()
}

pub(super) fn unavailable(backend: BackendKind, reason: impl Into<String>) -> Source {
    Source {
        backend,
        available: false,
        reason: Some(reason.into()),
        pmus: Vec::new(),
        events: Vec::new(),
    }
}

/// How an event is specified: a sysfs alias of the PMU, or alias text imc carries.
pub(super) enum Spec<'a> {
    Alias(&'a str),
    Terms {
        terms: &'a str,
        bytes_per_count: f64,
        source: &'a str,
    },
}

pub(super) struct Want<'a> {
    pub(super) name: &'a str,
    pub(super) direction: Option<Direction>,
    pub(super) spec: Spec<'a>,
}

impl<'a> Want<'a> {
    /// The PMU's sysfs alias `alias`, counting `direction` (and named after it).
    pub(super) fn alias(direction: Direction, alias: &'a str) -> Self {
        Want {
            name: direction.name(),
            direction: Some(direction),
            spec: Spec::Alias(alias),
        }
    }

    /// Alias text imc carries, `bytes_per_count` bytes a count, checked in `source`; counting
    /// `direction` (and named after it).
    pub(super) fn terms(
        direction: Direction,
        terms: &'a str,
        bytes_per_count: f64,
        source: &'a str,
    ) -> Self {
        Want {
            name: direction.name(),
            direction: Some(direction),
            spec: Spec::Terms {
                terms,
                bytes_per_count,
                source,
            },
        }
    }

    /// A read and a write event from carried alias text, of one public source.
    pub(super) fn read_write(
        read: &'a str,
        write: &'a str,
        bytes_per_count: f64,
        source: &'a str,
    ) -> [Self; 2] {
        [
            Want::terms(Direction::Read, read, bytes_per_count, source),
            Want::terms(Direction::Write, write, bytes_per_count, source),
        ]
    }
}

/// Encodes one event on one PMU. Errors (a missing alias, a term the PMU's formats do not
/// define) become a one-line reason naming the file.
pub(super) fn encode(pmu: &Pmu, want: &Want, counter_bits: u8) -> Result<SourceEvent, String> {
    let (terms, bpc, origin) = match &want.spec {
        Spec::Alias(alias) => {
            let Some(a) = pmu.events.get(*alias) else {
                return Err(DiscoveryError::NoEvents {
                    path: pmu.path.join("events").join(alias),
                    pmu: pmu.name.clone(),
                    alias: alias.to_string(),
                }
                .to_string());
            };
            (
                a.terms.clone(),
                bytes_per_count(a.scale, a.unit.as_deref()),
                format!("sysfs {}/events/{}", pmu.name, alias),
            )
        }
        Spec::Terms {
            terms,
            bytes_per_count,
            source,
        } => (
            terms.to_string(),
            Some(*bytes_per_count),
            format!("{terms} ({source})"),
        ),
    };
    let words = encode_terms(pmu, &terms).map_err(|e| {
        format!(
            "{}: {}",
            pmu.path
                .join(match &want.spec {
                    Spec::Alias(a) => format!("events/{a}"),
                    Spec::Terms { .. } => "format".to_string(),
                })
                .display(),
            crate::text::error_line(&e)
        )
    })?;
    Ok(SourceEvent {
        name: want.name.to_string(),
        pmu: pmu.name.clone(),
        config: Some(words.config),
        config1: Some(words.config1),
        config2: (words.config2 != 0).then_some(words.config2),
        bytes_per_count: bpc,
        address: None,
        width: None,
        direction: want.direction,
        sub_channel: None,
        counter_bits,
        origin,
    })
}

/// A source over `pmus`, each with every event of `wants`.
pub(super) fn build(
    ctx: &Ctx,
    backend: BackendKind,
    pmus: &[&Pmu],
    wants: &[Want],
    counter_bits: u8,
    reason: Option<String>,
) -> Source {
    let mut events = Vec::new();
    for pmu in pmus {
        for w in wants {
            match encode(pmu, w, counter_bits) {
                Ok(e) => events.push(e),
                Err(why) => return unavailable(backend, why),
            }
        }
    }
    Source {
        backend,
        available: true,
        reason,
        pmus: pmus.iter().map(|p| ctx.source_pmu(p)).collect(),
        events,
    }
}

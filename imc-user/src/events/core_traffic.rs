//! Placeholder of the per-model core traffic events (replaced by the full table).
use crate::model::{Direction, Machine};
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Locality {
    Local,
    Remote,
    Any,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Memory {
    Dram,
    Mcdram,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CoreTrafficEvent {
    pub name: &'static str,
    pub terms: &'static str,
    pub direction: Direction,
    pub locality: Locality,
    pub memory: Memory,
    pub bytes_per_count: f64,
    pub counter_mask: Option<u64>,
    pub offcore_register: bool,
    pub source: &'static str,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CoreTraffic {
    pub model: &'static str,
    pub events: Vec<CoreTrafficEvent>,
    pub notes: Vec<&'static str>,
}

pub fn core_traffic(
    m: &Machine,
    _pmu: &str,
    _caps_pmu_name: Option<&str>,
) -> Result<CoreTraffic, String> {
    match m.intel_model() {
        Some(0x55) => Ok(CoreTraffic {
            model: "Skylake-SP",
            events: vec![CoreTrafficEvent {
                name: "LONGEST_LAT_CACHE.MISS",
                terms: "event=0x2e,umask=0x41",
                direction: Direction::Read,
                locality: Locality::Any,
                memory: Memory::Dram,
                bytes_per_count: 64.0,
                counter_mask: None,
                offcore_register: false,
                source: "placeholder",
            }],
            notes: Vec::new(),
        }),
        _ => Err("no core traffic events known for this CPU".into()),
    }
}

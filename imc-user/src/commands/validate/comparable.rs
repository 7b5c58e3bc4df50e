//! What the plan lets `imc validate` compare: the controller's bytes or not, MBM or not, the
//! records it chose, and the bound each figure is held to.

use crate::discovery::resctrl::Resctrl;
use crate::plan::Plan;
use serde::Serialize;

/// A task's error bound for an event: a twentieth of a tick's time is the clock's own
/// resolution, so on-CPU time gets twice the counts' bound.
pub fn error_bound(event: &str) -> f64 {
    if is_clock(event) { 0.02 } else { 0.01 }
}

/// Whether the event counts on-CPU time (in ns).
pub fn is_clock(event: &str) -> bool {
    matches!(event, "cpu-clock" | "task-clock")
}

/// What a workload that never makes an event may be charged of it over a whole run.
pub const ZERO_CHARGE_BOUND: f64 = 10.0;

/// MBM against imc's bytes: the kernel's resctrl selftest accepts 8%
/// (tools/testing/selftests/resctrl/mbm_test.c, MAX_DIFF_PERCENT).
pub const MBM_BOUND: f64 = 0.08;

/// Whether the plan counts the controller's bytes, and why not.
pub(super) struct BytesPlan {
    pub(super) real: bool,
    pub(super) reason: String,
}

impl BytesPlan {
    pub(super) fn of(plan: &Plan) -> BytesPlan {
        let specs = crate::sampler::from_plan::slot_specs(plan);
        let real = crate::model::measures_bytes(&specs) && plan.source.stand_in().is_none();
        BytesPlan {
            real,
            reason: if real {
                format!("the memory controller is counted ({})", plan.source)
            } else {
                format!(
                    "no memory-controller bytes here (source {}): expected bytes and fidelity are not measured",
                    plan.source
                )
            },
        }
    }
}

/// One section that is measured only on some machines: whether, and why not.
#[derive(Clone, Debug, Serialize)]
pub(super) struct Availability {
    pub(super) available: bool,
    pub(super) reason: String,
}

/// Whether MBM can be compared for `groups` workloads: a monitor group each beside the default
/// group, which resctrl must have room for (MPAM often has a few: its PMG values).
pub(super) fn mbm_availability(rdt: &Resctrl, groups: usize) -> Availability {
    match rdt {
        Resctrl::Mbm {
            dir,
            features,
            monitors,
            backing,
        } => {
            let about = format!(
                "resctrl at {} ({}; {})",
                dir.display(),
                features.join(", "),
                backing.describe()
            );
            match monitors {
                Some(n) if (*n as usize) < groups + 1 => Availability {
                    available: false,
                    reason: format!(
                        "{about}: info/L3_MON/num_rmids is {n}, and validate needs a monitor \
                         group for each of its {groups} workloads beside the default group's \
                         (run it with fewer workloads, or on a machine with more monitors)"
                    ),
                },
                _ => Availability {
                    available: true,
                    reason: about,
                },
            }
        }
        Resctrl::Absent(why) => Availability {
            available: false,
            reason: why.clone(),
        },
    }
}

/// The records the plan chose (`aggregated`, or `per-switch` with `--precise`).
pub(super) fn records(plan: &Plan) -> &'static str {
    plan.records.map_or("none", crate::plan::Records::as_str)
}

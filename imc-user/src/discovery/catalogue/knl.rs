//! Intel Xeon Phi (Knights Landing and Mill): the EDC (MCDRAM) and IMC (DDR) uncore PMUs.
use super::intel::is_knl;
use super::want::{Ctx, Want, build, unavailable};
use crate::model::{BackendKind, Source};

pub(super) fn knl(ctx: &Ctx, kind: BackendKind) -> Source {
    if !is_knl(ctx) {
        return unavailable(
            kind,
            "not a Knights Landing/Mill (family 6 model 0x57/0x85) system",
        );
    }
    // intel/perfmon KNL uncore JSON (= libpfm4 knl_unc_imc/edc tables), 64 bytes per CAS/insert.
    let (prefix, rd, wr, src) = if kind == BackendKind::KnlImc {
        (
            "uncore_imc_",
            "event=0x03,umask=0x01",
            "event=0x03,umask=0x02",
            "intel/perfmon KnightsLanding_uncore.json UNC_M_CAS_COUNT.RD/WR",
        )
    } else {
        (
            "uncore_edc_eclk_",
            "event=0x01,umask=0x01",
            "event=0x02,umask=0x01",
            "intel/perfmon KnightsLanding_uncore.json UNC_E_RPQ_INSERTS/UNC_E_WPQ_INSERTS",
        )
    };
    let pmus = ctx.numbered(prefix);
    if pmus.is_empty() {
        return unavailable(kind, format!("Knights Landing without {prefix}N PMUs"));
    }
    let wants = Want::read_write(rd, wr, 64.0, src);
    build(ctx, kind, &pmus, &wants, 48, None)
}

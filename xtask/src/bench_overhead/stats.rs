//! Means with their standard errors, and the verdict of a figure against its target.

/// A mean and its standard error (sample standard deviation / √n).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct MeanSe {
    pub(super) mean: f64,
    pub(super) se: f64,
}

pub(super) fn mean_se(v: &[f64]) -> MeanSe {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let se = if v.len() < 2 {
        f64::NAN
    } else {
        (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0) / n).sqrt()
    };
    MeanSe { mean, se }
}

pub(super) fn pct(under: f64, alone: f64) -> f64 {
    (under / alone - 1.0) * 100.0
}

/// PASS or FAIL when the figure is more than 2 standard errors on one side of the target (at
/// most `target` passes), else UNRESOLVED.
pub(super) fn verdict(v: MeanSe, target: f64) -> &'static str {
    if !v.se.is_finite() || !v.mean.is_finite() {
        "UNRESOLVED"
    } else if v.mean + 2.0 * v.se <= target {
        "PASS"
    } else if v.mean - 2.0 * v.se > target {
        "FAIL"
    } else {
        "UNRESOLVED"
    }
}

/// One overhead target against what the run measured.
pub(super) struct Check {
    pub(super) what: String,
    pub(super) figure: MeanSe,
    pub(super) target: f64,
    pub(super) detail: String,
}

pub(super) fn check_line(c: &Check) -> String {
    let v = verdict(c.figure, c.target);
    let why = match v {
        "UNRESOLVED" => " — noise: within 2 standard errors of the target; more rounds, \
                         IMC_BENCH_RT=1 or a quieter machine"
            .to_string(),
        _ => String::new(),
    };
    format!(
        "{v:<10} {}: {:+.3} ± {:.3} against <= {} ({}){why}",
        c.what, c.figure.mean, c.figure.se, c.target, c.detail
    )
}

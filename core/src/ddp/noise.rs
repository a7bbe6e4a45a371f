//! How far a figure measured over repeated launches may move by their noise alone: Student's t
//! bounds, a ratio measured launch by launch, the sample deviation, and the one test of whether a
//! difference lies beyond the noise. Plain statistics of launch figures, beneath the results that
//! use them (`result`, `ratio`).

use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::num::ToF64;

/// How far, relative, a figure measured over repeated launches may move by their noise alone:
/// `t·σ`, σ its relative standard error and t Student's two-sided 95% quantile at `dof` degrees
/// of freedom, never below 2σ (the rule for many launches).
///
/// Why not 2σ: σ itself is estimated from the launches, and with two a side it rests on about
/// one degree of freedom, where t is 6–13; with eight a side t is about 2.1. On 2xH200 two
/// launches a side put a `nocomm` slowdown at 2.27x, 3.7σ, while eight earlier launches of
/// the same MLP had measured 1.09x (docs/results/2026-11-30-h200x2-gpt2-probes.md).
pub fn noise_bound(sigma: f64, dof: f64) -> f64 {
    let t = StudentsT::new(0.0, 1.0, dof).map_or(2.0, |d| d.inverse_cdf(0.975));
    t.max(2.0) * sigma
}

/// A bound on a ln ratio as a reader takes it: `±11% from 8 launches`.
pub fn describe_noise_bound(ln_bound: f64, launches: usize) -> String {
    format!(
        "±{:.0}% from {launches} launches",
        ln_bound.exp_m1() * 100.0
    )
}

/// Whether a relative difference from a measured figure (an error of a prediction, a ln ratio)
/// lies beyond the measurement's noise: its [`noise_bound`] with repeated launches, else 20%
/// (one launch of a short step moved 10–57% on 2×H200; docs/results/2026-11-30-h200x2-launch-spread.md).
pub fn beyond_noise(difference: f64, noise_bound: Option<f64>) -> bool {
    difference.abs() > noise_bound.unwrap_or(SINGLE_LAUNCH_NOISE)
}

/// How far one launch's figure may be off when nothing measured its noise.
const SINGLE_LAUNCH_NOISE: f64 = 0.20;

/// A ratio measured launch by launch: the median of the per-launch ln ratios, its relative
/// standard error √(π/2)·sd/√n, and its [`noise_bound`] at n − 1 degrees of freedom.
pub(super) struct PairedLogRatio {
    pub median: f64,
    pub sigma: f64,
    pub noise_bound: f64,
}

/// [`PairedLogRatio`] of per-launch ln ratios; `None` for fewer than two.
pub(super) fn paired_log_ratio(logs: &[f64]) -> Option<PairedLogRatio> {
    let (median, sd) = (crate::expect::median(logs)?, sample_sd(logs)?);
    let n = logs.len().to_f64();
    let sigma = (std::f64::consts::FRAC_PI_2 / n).sqrt() * sd;
    Some(PairedLogRatio {
        median,
        sigma,
        noise_bound: noise_bound(sigma, n - 1.0),
    })
}

/// How far the ln of a ratio taken within each of several rounds (the median of `[a, b]`
/// pairs' `a / b`, as `PlainReference::ddp_over_plain`) may move by the rounds' own spread:
/// [`noise_bound`] of their ln ratios; `None` with fewer than two rounds.
pub fn rounds_noise_bound(rounds: &[[f64; 2]]) -> Option<f64> {
    let logs: Vec<f64> = rounds.iter().map(|[a, b]| (a / b).ln()).collect();
    paired_log_ratio(&logs).map(|p| p.noise_bound)
}

/// The sample standard deviation (n − 1); `None` for fewer than two values.
pub(super) fn sample_sd(xs: &[f64]) -> Option<f64> {
    if xs.len() < 2 {
        return None;
    }
    let n = xs.len().to_f64();
    let mean = xs.iter().sum::<f64>() / n;
    Some((xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt())
}

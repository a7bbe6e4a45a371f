//! How far a figure measured over repeated launches may move by their noise alone: standard
//! errors of speedups and ratios, Student's t bounds, and the one test of whether a
//! difference lies beyond the noise.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

use super::DdpResult;
use crate::num::ToF64;

/// How uncertain a speedup measured from repeated launches is: its relative standard error,
/// `√(π/2)·√(σ₁²/n₁ + σ_N²/n_N)`, where σ is each side's [`DdpResult::launch_log_sd`] and n its
/// number of launches (a median's standard error is about √(π/2) times the mean's). `None`
/// unless both sides were launched at least twice.
///
/// Why it matters: on the shared 2xH200 VMs, launches of a 2 ms MLP step spread σ ≈ 0.1, so a
/// speedup from one launch each is uncertain by about ±14%, from five launches each by about ±8%
/// (docs/results/2026-11-30-h200x2-overlap-and-noise.md).
pub fn speedup_uncertainty(multi: &DdpResult, single: &DdpResult) -> Option<f64> {
    let ((a, _), (b, _)) = (launch_variance(multi)?, launch_variance(single)?);
    Some((std::f64::consts::FRAC_PI_2 * (a + b)).sqrt())
}

/// One side's share of a speedup's variance, σ²/n of ln(step) over its n launches, and its
/// degrees of freedom (n − 1). `None` for fewer than two launches.
fn launch_variance(r: &DdpResult) -> Option<(f64, f64)> {
    let sd = r.launch_log_sd()?;
    let n = r.launch_step_medians_s.len().to_f64();
    Some((sd * sd / n, n - 1.0))
}

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

/// [`noise_bound`] of a speedup (or any ratio of the two runs' step times): σ its
/// [`speedup_uncertainty`], the degrees of freedom the Welch–Satterthwaite ones of the two
/// launch sets. `None` unless both were launched at least twice.
pub fn speedup_noise_bound(multi: &DdpResult, single: &DdpResult) -> Option<f64> {
    let sigma = speedup_uncertainty(multi, single)?;
    let ((a, da), (b, db)) = (launch_variance(multi)?, launch_variance(single)?);
    let welch = (a + b).powi(2) / (a * a / da + b * b / db);
    // Identical launches on both sides leave 0/0: fall back to the pooled count.
    let dof = if welch.is_finite() { welch } else { da + db };
    Some(noise_bound(sigma, dof))
}

/// Whether a relative difference from a measured figure (an error of a prediction, a ln ratio)
/// lies beyond the measurement's noise: its [`noise_bound`] with repeated launches, else 20%
/// (one launch of a short step moved 10–57% on 2×H200; docs/results/2026-11-30-h200x2-launch-spread.md).
pub fn beyond_noise(difference: f64, noise_bound: Option<f64>) -> bool {
    difference.abs() > noise_bound.unwrap_or(SINGLE_LAUNCH_NOISE)
}

/// How far one launch's figure may be off when nothing measured its noise.
const SINGLE_LAUNCH_NOISE: f64 = 0.20;

/// One run's throughput over another's at the same GPU count, as measured.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThroughputRatio {
    pub ratio: f64,
    /// Relative standard error (of ln ratio); `None` for single launches.
    pub uncertainty: Option<f64>,
    /// How far the ratio may move by launch noise alone ([`noise_bound`], n − 1 degrees of
    /// freedom for n paired launches); `None` for single launches.
    pub noise_bound: Option<f64>,
}

/// How much faster run `a` trains than run `b` (samples per second; same GPU count): with
/// repeated launches, measured launch by launch. A `--repeats` sequence runs every configuration
/// once per round, so launch `i` of `a` and of `b` ran side by side in time; the round's common
/// speed (on 2xH200 about half of a short step's launch-to-launch variance) cancels from their
/// ratio, where a ratio of two medians would keep it. The ratio is the median over launches, its
/// uncertainty `√(π/2)·sd/√n` of the per-launch ln ratios. Launches are paired by position, so
/// both runs must have the same number of them (else the plain throughput ratio, without
/// uncertainty). `None` for different GPU counts or a run without throughput.
pub fn throughput_ratio(a: &DdpResult, b: &DdpResult) -> Option<ThroughputRatio> {
    if a.world_size != b.world_size || !(a.throughput > 0.0 && b.throughput > 0.0) {
        return None;
    }
    let plain = ThroughputRatio {
        ratio: a.throughput / b.throughput,
        uncertainty: None,
        noise_bound: None,
    };
    let (la, lb) = (&a.launch_step_medians_s, &b.launch_step_medians_s);
    let valid = |l: &[f64]| l.len() > 1 && l.iter().all(|x| x.is_finite() && *x > 0.0);
    if la.len() != lb.len() || !valid(la) || !valid(lb) {
        return Some(plain);
    }
    // Samples per rank per step: a step of `a` does this many times `b`'s work.
    let work =
        f64::from(a.micro_batch * a.accum.max(1)) / f64::from(b.micro_batch * b.accum.max(1));
    let logs: Vec<f64> = la
        .iter()
        .zip(lb)
        .map(|(ta, tb)| (work * tb / ta).ln())
        .collect();
    let Some(p) = paired_log_ratio(&logs) else {
        return Some(plain);
    };
    Some(ThroughputRatio {
        ratio: p.median.exp(),
        uncertainty: Some(p.sigma),
        noise_bound: Some(p.noise_bound),
    })
}

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

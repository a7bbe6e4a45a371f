//! One run's throughput over another's at the same GPU count, measured launch by launch so
//! that the rounds' common speed cancels.

use serde::{Deserialize, Serialize};

use super::noise::paired_log_ratio;
use super::DdpResult;

/// One run's throughput over another's at the same GPU count, as measured.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThroughputRatio {
    pub ratio: f64,
    /// Relative standard error (of ln ratio); `None` for single launches.
    pub uncertainty: Option<f64>,
    /// How far the ratio may move by launch noise alone ([`noise_bound`](super::noise_bound), n − 1 degrees of
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

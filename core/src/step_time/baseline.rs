//! The model calibrated on one measured baseline step at N GPUs (what a fresh node's
//! `recommend` measures itself): the effective bandwidth during training, read as a scale on
//! the all-reduce curve, and the realised overlap.

use super::{predict, LinkCurve, ModelError, StepInputs};

/// The fitted scale of the all-reduce times and the realised overlap.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BaselineFit {
    pub comm_scale: f64,
    pub realised_overlap: f64,
}

/// The range the scale may take: a baseline measures at most this far from the curve.
const SCALE_MIN: f64 = 0.5;
const SCALE_MAX: f64 = 4.0;

fn step_with(base: &StepInputs, curve: &LinkCurve, fit: BaselineFit) -> Result<f64, ModelError> {
    let mut inputs = base.clone();
    fit.apply(&mut inputs);
    Ok(predict(&inputs, curve)?.step_s)
}

impl BaselineFit {
    /// Fits the baseline's measured step (`measured_step_s`, plain DDP at `base.world` GPUs).
    /// The step grows with less overlap and then with slower all-reduces, so one number fixes
    /// one point on that path: first the realised overlap falls from 1 to 0 (the all-reduces
    /// take what the curve says but hide less), then the all-reduces themselves slow (up to
    /// [`SCALE_MAX`]); a step faster than the full overlap gives speeds the all-reduces up (down
    /// to [`SCALE_MIN`]).
    pub fn fit(
        base: &StepInputs,
        curve: &LinkCurve,
        measured_step_s: f64,
    ) -> Result<Self, ModelError> {
        if !(measured_step_s.is_finite() && measured_step_s > 0.0) {
            return Err(ModelError::Invalid(format!(
                "measured step {measured_step_s} s must be positive"
            )));
        }
        // One parameter t: t < 0 scales the curve down, 0..1 lowers the overlap, > 1 scales up.
        let at = |t: f64| -> BaselineFit {
            if t < 0.0 {
                BaselineFit {
                    comm_scale: 1.0 + t * (1.0 - SCALE_MIN),
                    realised_overlap: 1.0,
                }
            } else if t <= 1.0 {
                BaselineFit {
                    comm_scale: 1.0,
                    realised_overlap: 1.0 - t,
                }
            } else {
                BaselineFit {
                    comm_scale: 1.0 + (t - 1.0) * (SCALE_MAX - 1.0),
                    realised_overlap: 0.0,
                }
            }
        };
        let (mut lo, mut hi) = (-1.0, 2.0);
        if step_with(base, curve, at(lo))? >= measured_step_s {
            return Ok(at(lo));
        }
        if step_with(base, curve, at(hi))? <= measured_step_s {
            return Ok(at(hi));
        }
        for _ in 0..60 {
            let mid = 0.5 * (lo + hi);
            if step_with(base, curve, at(mid))? < measured_step_s {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(at(0.5 * (lo + hi)))
    }

    /// Puts the fit into another variant's inputs.
    pub fn apply(&self, inputs: &mut StepInputs) {
        inputs.comm_scale = self.comm_scale;
        inputs.realised_overlap = Some(self.realised_overlap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::Sweep;
    use crate::ddp::ModelSpec;

    /// bench/accuracy/fixtures/2026-11-30-h200x2-1949/model3-124/model3-gpt-hostnet.json,
    /// gpt2-124m over host sockets: the base run's own all-reduce probe (bytes per rank, µs),
    /// one GPU base 39.339 ms and accum4 150.430 ms, two GPUs base 165.669 ms and accum4
    /// 264.834 ms.
    const PROBE: [(u64, f64); 6] = [
        (65536, 116.0),
        (1048576, 398.1),
        (4194304, 1301.2),
        (16777216, 4797.0),
        (33554432, 8656.5),
        (67108864, 19738.3),
    ];

    fn gpt2() -> (StepInputs, LinkCurve) {
        let times: Vec<(u64, f64)> = PROBE.iter().map(|&(b, us)| (b, us * 1e-6)).collect();
        let curve =
            LinkCurve::from_sweep(&Sweep::all_reduce_from_times(2, &times).unwrap()).unwrap();
        let c = (150.430e-3 - 39.339e-3) / 3.0;
        let mut s = StepInputs::for_model(&ModelSpec::gpt2_124m(), 8, c, 2, 1);
        s.optimizer_s = 39.339e-3 - c;
        (s, curve)
    }

    #[test]
    fn over_host_sockets_the_baseline_shows_less_overlap_than_the_timeline_allows() {
        let (base, curve) = gpt2();
        let free = predict(&base, &curve).unwrap();
        // The timeline hides part of the 498 MB all-reduce behind the backward; the measured
        // step is longer than that.
        assert!(free.step_s < 165.669e-3, "{}", free.step_s);
        let fit = BaselineFit::fit(&base, &curve, 165.669e-3).unwrap();
        assert!(fit.realised_overlap < 1.0, "{fit:?}");
        let mut fitted = base.clone();
        fit.apply(&mut fitted);
        let step = predict(&fitted, &curve).unwrap().step_s;
        assert!((step / 165.669e-3 - 1.0).abs() < 1e-6, "{step}");
        // Not asserted: carried to accum4 (measured 264.834 ms, 114 ms over one GPU against
        // the baseline's 126 ms), the lost overlap over-predicts its step.
    }

    #[test]
    fn a_baseline_faster_than_full_overlap_scales_the_all_reduces_down_within_bounds() {
        let (base, curve) = gpt2();
        let fit = BaselineFit::fit(&base, &curve, 1e-3).unwrap();
        assert_eq!(fit.realised_overlap, 1.0);
        assert_eq!(fit.comm_scale, SCALE_MIN);
        assert!(BaselineFit::fit(&base, &curve, f64::NAN).is_err());
    }
}

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

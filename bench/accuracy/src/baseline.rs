//! The step-time model calibrated on a measured baseline step (plain DDP), as `recommend` is on
//! a fresh node and after `bench ddp`: protocols P1 and P2 predict through it.

use ddpcheck_core::ddp::DdpVariant;
use ddpcheck_core::step_time::{self, LinkCurve};

use crate::inputs::Reading;

/// The model calibrated on the measured baseline (see `step_time::BaselineFit`).
pub(crate) struct Fitted(Option<step_time::BaselineFit>);

pub(crate) fn fit_on_baseline(reading: &Reading, base_step_s: f64, curve: &LinkCurve) -> Fitted {
    let base = reading.inputs_on(&DdpVariant::default(), curve);
    Fitted(step_time::BaselineFit::fit(&base, curve, base_step_s).ok())
}

impl Fitted {
    pub(crate) fn predict(
        &self,
        reading: &Reading,
        v: &DdpVariant,
        curve: &LinkCurve,
    ) -> Option<f64> {
        let mut inputs = reading.inputs_on(v, curve);
        if let Some(fit) = &self.0 {
            fit.apply(&mut inputs);
        }
        step_time::predict(&inputs, curve).ok().map(|p| p.speedup)
    }
}

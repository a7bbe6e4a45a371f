//! P1, the fresh node: the inputs are ONE launch (the first) of the baseline at N GPUs, its own
//! all-reduce probe and the 1-GPU runs of that launch; every other variant is judged against the
//! median of the OTHER launches.
//!
//! The reports keep each launch's median step time, but a run's probe only as the median over
//! its launches: the probe the baseline's first launch timed is not on record, so the baseline
//! run's median probe stands in for it (the network, not a step time of any judged launch).

use ddpcheck_core::ddp::{DdpResult, DdpVariant};
use ddpcheck_core::expect::median;
use ddpcheck_core::model::{self, LinkCurve};

use crate::fixtures::Dataset;
use crate::inputs::{Knobs, Reading};
use crate::protocol::{judged_rows_of, models_of, partner_of, Case};

/// The launch whose measurements are the inputs.
pub const INPUT_LAUNCH: usize = 0;
/// Launches a dataset needs: one for the inputs, at least two to judge against.
pub const MIN_LAUNCHES: usize = 3;

/// A run as one launch measured it: that launch's median step, no repeats.
fn at_launch(r: &DdpResult, i: usize) -> Option<DdpResult> {
    let step = *r.launch_step_medians_s.get(i)?;
    let mut one = r.clone();
    one.throughput *= r.step_time_median_s / step;
    one.step_time_median_s = step;
    one.launch_step_medians_s = Vec::new();
    one.solo_step_time_median_s = r.launch_solo_step_medians_s.get(i).copied();
    one.launch_solo_step_medians_s = Vec::new();
    Some(one)
}

/// The median step of a run over every launch but the input one.
fn rest_median(r: &DdpResult) -> Option<f64> {
    let rest: Vec<f64> = r
        .launch_step_medians_s
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != INPUT_LAUNCH)
        .map(|(_, s)| *s)
        .collect();
    median(&rest)
}

/// P1's cases of one dataset (none when it does not qualify).
pub fn cases(ds: &Dataset, knobs: Knobs) -> Vec<Case> {
    models_of(ds)
        .into_iter()
        .flat_map(|m| model_cases(ds, &m, knobs))
        .collect()
}

fn model_cases(ds: &Dataset, model: &str, knobs: Knobs) -> Vec<Case> {
    let rows = judged_rows_of(ds, model);
    let Some(base) = rows.iter().find(|r| r.variant == "base") else {
        return Vec::new();
    };
    let launches = base.launch_step_medians_s.len();
    let Some(probe) = base.all_reduce_probe.as_ref() else {
        return Vec::new();
    };
    let Ok(curve) = LinkCurve::from_sweep(probe) else {
        return Vec::new();
    };
    if launches < MIN_LAUNCHES {
        return Vec::new();
    }
    let inputs: Vec<DdpResult> = ds
        .runs
        .iter()
        .filter(|r| r.model == model && r.world_size == 1)
        .filter_map(|r| at_launch(r, INPUT_LAUNCH))
        .collect();
    let Some(mut reading) = Reading::from_runs(&inputs, model, base.micro_batch, base.world_size)
    else {
        return Vec::new();
    };
    reading.knobs = knobs;
    let Some(base_step) = base.launch_step_medians_s.get(INPUT_LAUNCH).copied() else {
        return Vec::new();
    };
    let fitted = fit_on_baseline(&reading, base_step, &curve);
    let mut out = Vec::new();
    for r in rows {
        let (Some(one), Ok(v)) = (partner_of(ds, r), r.variant.parse::<DdpVariant>()) else {
            continue;
        };
        if one.launch_step_medians_s.len() != launches || r.launch_step_medians_s.len() != launches
        {
            continue;
        }
        let (Some(step1), Some(step_n)) = (rest_median(one), rest_median(r)) else {
            continue;
        };
        let Some(predicted) = fitted.predict(&reading, &v, &curve) else {
            continue;
        };
        out.push(Case {
            dataset: ds.label(),
            regime: ds.spec.regime,
            model: model.to_string(),
            variant: r.variant.clone(),
            predicted,
            naive: reading.naive(&v, &curve),
            input_launch: input_launch_speedup(one, r, f64::from(r.world_size)),
            measured: f64::from(r.world_size) * step1 / step_n,
            judged: r.variant != "base",
        });
    }
    out
}

/// The model calibrated on the measured baseline (see `model::BaselineFit`).
pub(crate) struct Fitted(Option<model::BaselineFit>);

pub(crate) fn fit_on_baseline(reading: &Reading, base_step_s: f64, curve: &LinkCurve) -> Fitted {
    let base = reading.inputs_on(&DdpVariant::default(), curve);
    Fitted(model::BaselineFit::fit(&base, curve, base_step_s).ok())
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
        model::predict(&inputs, curve).ok().map(|p| p.speedup)
    }
}

/// The speedup a variant measured in the input launch alone (its N-GPU step against its 1-GPU
/// partner's, both of launch [`INPUT_LAUNCH`]).
fn input_launch_speedup(one: &DdpResult, r: &DdpResult, world: f64) -> Option<f64> {
    let step1 = one.launch_step_medians_s.get(INPUT_LAUNCH)?;
    let step_n = r.launch_step_medians_s.get(INPUT_LAUNCH)?;
    Some(world * step1 / step_n)
}

//! P1, the fresh node: the inputs are ONE launch (the first) of the baseline at N GPUs, its own
//! all-reduce probe and the 1-GPU runs of that launch; every other variant is judged against the
//! median of the OTHER launches. [`LaunchSplit`] varies how many launches are inputs, to show
//! what more launches within a budget would buy.
//!
//! The reports keep each launch's median step time, but a run's probe only as the median over
//! its launches: the probe the baseline's first launch timed is not on record, so the baseline
//! run's median probe stands in for it (the network, not a step time of any judged launch).

use ddpcheck_core::ddp::{DdpResult, DdpVariant};
use ddpcheck_core::expect::median;
use ddpcheck_core::step_time::LinkCurve;

use crate::baseline::fit_on_baseline;
use crate::case::{judged_rows_of, models_of, partner_of, Case};
use crate::fixtures::Dataset;
use crate::inputs::{Knobs, Reading};

/// Which launches are inputs and which are judged: launches `0..inputs` give the inputs (their
/// median), launches `judged_from..` the measured speedups (their median).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchSplit {
    pub inputs: usize,
    pub judged_from: usize,
}

impl LaunchSplit {
    /// P1 as published: the first launch is the input, all the others are judged.
    pub const ONE_LAUNCH: LaunchSplit = LaunchSplit {
        inputs: 1,
        judged_from: 1,
    };

    /// Launches a dataset needs: the inputs and at least two to judge against.
    fn min_launches(self) -> usize {
        self.judged_from.max(self.inputs) + 2
    }

    fn input_median(self, launches: &[f64]) -> Option<f64> {
        median(launches.get(..self.inputs)?)
    }

    fn judged_median(self, launches: &[f64]) -> Option<f64> {
        median(launches.get(self.judged_from..)?)
    }
}

/// A run as the input launches measured it: their median step, no repeats.
fn at_launches(r: &DdpResult, split: LaunchSplit) -> Option<DdpResult> {
    let step = split.input_median(&r.launch_step_medians_s)?;
    let mut one = r.clone();
    one.throughput *= r.step_time_median_s / step;
    one.step_time_median_s = step;
    one.launch_step_medians_s = Vec::new();
    one.solo_step_time_median_s = split.input_median(&r.launch_solo_step_medians_s);
    one.launch_solo_step_medians_s = Vec::new();
    Some(one)
}

/// P1's cases of one dataset (none when it does not qualify).
pub fn cases(ds: &Dataset, knobs: Knobs) -> Vec<Case> {
    cases_split(ds, knobs, LaunchSplit::ONE_LAUNCH)
}

/// P1's cases with another split of the launches.
pub fn cases_split(ds: &Dataset, knobs: Knobs, split: LaunchSplit) -> Vec<Case> {
    models_of(ds)
        .into_iter()
        .flat_map(|m| model_cases(ds, &m, knobs, split))
        .collect()
}

fn model_cases(ds: &Dataset, model: &str, knobs: Knobs, split: LaunchSplit) -> Vec<Case> {
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
    if launches < split.min_launches() {
        return Vec::new();
    }
    let inputs: Vec<DdpResult> = ds
        .runs
        .iter()
        .filter(|r| r.model == model && r.world_size == 1)
        .filter_map(|r| at_launches(r, split))
        .collect();
    let Some(mut reading) = Reading::from_runs(&inputs, model, base.micro_batch, base.world_size)
    else {
        return Vec::new();
    };
    reading.knobs = knobs;
    let Some(base_step) = split.input_median(&base.launch_step_medians_s) else {
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
        let (Some(step1), Some(step_n)) = (
            split.judged_median(&one.launch_step_medians_s),
            split.judged_median(&r.launch_step_medians_s),
        ) else {
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
            world: r.world_size,
            predicted,
            naive: reading.naive(&v, &curve),
            input_launch: input_launch_speedup(one, r, f64::from(r.world_size), split),
            measured: f64::from(r.world_size) * step1 / step_n,
            judged: r.variant != "base",
        });
    }
    out
}

/// The speedup a variant measured in the input launches alone (its N-GPU step against its 1-GPU
/// partner's, both the median over the input launches).
fn input_launch_speedup(
    one: &DdpResult,
    r: &DdpResult,
    world: f64,
    split: LaunchSplit,
) -> Option<f64> {
    let step1 = split.input_median(&one.launch_step_medians_s)?;
    let step_n = split.input_median(&r.launch_step_medians_s)?;
    Some(world * step1 / step_n)
}

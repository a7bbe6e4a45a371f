//! One predicted speedup against its measurement ([`Case`]), and the runs of a dataset that
//! cases are judged on: every protocol reads these.

use ddpcheck_core::ddp::{one_gpu_reference, DdpResult, DdpVariant};
use ddpcheck_core::recommend::variant_name;

use crate::fixtures::{Dataset, Regime};

/// Models below this many parameters are left out (the judged range is 0.8–76M, and GPT-2).
pub const MIN_PARAMS: u64 = 800_000;

/// One predicted speedup against its measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub dataset: String,
    pub regime: Regime,
    pub model: String,
    pub variant: String,
    /// GPUs of the multi-GPU run (its efficiency is the speedup over this).
    pub world: u32,
    pub predicted: f64,
    /// The naive formula's speedup from the same inputs.
    pub naive: f64,
    /// P1: the speedup the input launch itself measured for this variant. Scored as a
    /// predictor it is the launch-noise floor of one-launch inputs: no model that reads one
    /// launch can expect to do better than that launch reproduced exactly.
    pub input_launch: Option<f64>,
    pub measured: f64,
    /// False for the input a protocol calibrated on (P1's baseline): shown for the choice of
    /// variant, never counted in the errors.
    pub judged: bool,
}

impl Case {
    /// Signed relative error of the model.
    pub fn error(&self) -> f64 {
        (self.predicted - self.measured) / self.measured
    }
}

/// The multi-GPU runs of recommend's variants (plain DDP: base, a hook, accumulation) that have
/// a 1-GPU partner, of models in the judged range.
pub(crate) fn judged_rows(ds: &Dataset) -> Vec<&DdpResult> {
    ds.runs
        .iter()
        .filter(|r| r.world_size > 1 && r.speedup.is_some() && r.params >= MIN_PARAMS)
        .filter(|r| {
            r.variant
                .parse::<DdpVariant>()
                .is_ok_and(|v| variant_name(v.hook, v.accum) == Some(r.variant.as_str()))
        })
        .collect()
}

/// The 1-GPU run a run's speedup is taken against (the same recipe without its hook).
pub(crate) fn partner<'a>(ds: &'a Dataset, r: &DdpResult) -> Option<&'a DdpResult> {
    let reference = one_gpu_reference(&r.variant);
    ds.runs
        .iter()
        .find(|s| s.world_size == 1 && s.model == r.model && s.variant == reference)
}

pub(crate) fn models(rows: &[&DdpResult]) -> Vec<String> {
    let mut m: Vec<String> = rows.iter().map(|r| r.model.clone()).collect();
    m.sort();
    m.dedup();
    m
}

pub(crate) fn judged_rows_of<'a>(ds: &'a Dataset, model: &str) -> Vec<&'a DdpResult> {
    judged_rows(ds)
        .into_iter()
        .filter(|r| r.model == model)
        .collect()
}

pub(crate) fn partner_of<'a>(ds: &'a Dataset, r: &DdpResult) -> Option<&'a DdpResult> {
    partner(ds, r)
}

pub(crate) fn models_of(ds: &Dataset) -> Vec<String> {
    models(&judged_rows(ds))
}

//! Predictions against torch's own peaks (`torch.cuda.max_memory_allocated` of a launch): each
//! run's prediction from the estimate, and from the activations one run measured (its peak less
//! its predicted state), so that the other wrappers' predictions are checked on a figure they
//! did not see.

use serde::{Deserialize, Serialize};

use super::{activations_from_peak, predict, ActivationSource, MemoryModel};
use crate::ddp::Wrapper;
use crate::num::ToF64;

/// Within this share of torch's peak a prediction holds.
pub const PEAK_TOLERANCE: f64 = 0.10;

/// One launch's run: its wrapper, GPUs and torch's peak.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeasuredPeak {
    pub variant: String,
    pub wrapper: Wrapper,
    pub gpus: u32,
    pub peak_bytes: u64,
}

/// A run's peak beside its predictions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeakCheck {
    pub variant: String,
    pub wrapper: Wrapper,
    pub gpus: u32,
    pub peak_bytes: u64,
    /// From the model's own activations (estimated, or unknown: left out).
    pub predicted_bytes: u64,
    /// predicted / peak - 1.
    pub error: f64,
    /// From the activations the reference run measured; `None` for the reference itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_measured_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_measured_error: Option<f64>,
}

/// Activations as the reference run measured them (the DDP run, else the first): its peak less
/// its predicted state; with the run's name.
pub fn measured_activations(m: &MemoryModel, runs: &[MeasuredPeak]) -> Option<(u64, String)> {
    let reference = runs
        .iter()
        .find(|r| r.wrapper == Wrapper::Ddp)
        .or(runs.first())?;
    let bytes = activations_from_peak(m, reference.wrapper, reference.gpus, reference.peak_bytes)?;
    Some((bytes, reference.variant.clone()))
}

fn ratio(predicted: u64, peak: u64) -> f64 {
    predicted.to_f64() / peak.to_f64().max(1.0) - 1.0
}

/// Every run's peak beside its predictions.
pub fn check_peaks(m: &MemoryModel, runs: &[MeasuredPeak]) -> Vec<PeakCheck> {
    let measured = measured_activations(m, runs);
    runs.iter()
        .map(|r| {
            let predicted = predict(m, r.wrapper, r.gpus).total_bytes;
            let from_measured = measured
                .as_ref()
                .filter(|(_, name)| *name != r.variant)
                .map(|(bytes, name)| {
                    let with = MemoryModel {
                        activations: ActivationSource::Measured {
                            bytes: *bytes,
                            what: name.clone(),
                        },
                        ..m.clone()
                    };
                    predict(&with, r.wrapper, r.gpus).total_bytes
                });
            PeakCheck {
                variant: r.variant.clone(),
                wrapper: r.wrapper,
                gpus: r.gpus,
                peak_bytes: r.peak_bytes,
                predicted_bytes: predicted,
                error: ratio(predicted, r.peak_bytes),
                from_measured_bytes: from_measured,
                from_measured_error: from_measured.map(|p| ratio(p, r.peak_bytes)),
            }
        })
        .collect()
}

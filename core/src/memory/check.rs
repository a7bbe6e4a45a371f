//! Predictions against torch's own peaks (`torch.cuda.max_memory_allocated` of a launch): each
//! run's prediction before any launch, and, where another launch of the same wrapper measured
//! its activations (a slice of the model's layers), the prediction from those, so that each
//! check rests on a figure the checked run did not give.

use serde::{Deserialize, Serialize};

pub use super::predict::PEAK_TOLERANCE;
use super::{predict, ActivationSource, MemoryModel, Moment};
use crate::ddp::Wrapper;
use crate::num::ToF64;

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
    /// Before any launch: the model's own activations (estimated, or unknown: left out).
    pub predicted_bytes: u64,
    /// predicted / peak - 1.
    pub error: f64,
    /// The moment the prediction puts the peak at.
    #[serde(default)]
    pub peak_at: Moment,
    /// From the activations another launch of this wrapper measured; `None` where none did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_measured_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_measured_error: Option<f64>,
}

fn ratio(predicted: u64, peak: u64) -> f64 {
    predicted.to_f64() / peak.to_f64().max(1.0) - 1.0
}

/// Every run's peak beside its predictions: from `m` (before any launch) and from `measured`
/// (the same model with the activations other launches measured), where that model's
/// activations for the run's wrapper are measured.
pub fn check_peaks(
    m: &MemoryModel,
    measured: Option<&MemoryModel>,
    runs: &[MeasuredPeak],
) -> Vec<PeakCheck> {
    runs.iter()
        .map(|r| {
            let row = predict(m, r.wrapper, r.gpus);
            let from_measured = measured
                .filter(|mm| {
                    matches!(
                        mm.activations_for(r.wrapper),
                        ActivationSource::Measured { .. }
                    )
                })
                .map(|mm| predict(mm, r.wrapper, r.gpus).total_bytes);
            PeakCheck {
                variant: r.variant.clone(),
                wrapper: r.wrapper,
                gpus: r.gpus,
                peak_bytes: r.peak_bytes,
                predicted_bytes: row.total_bytes,
                error: ratio(row.total_bytes, r.peak_bytes),
                peak_at: row.peak_at,
                from_measured_bytes: from_measured,
                from_measured_error: from_measured.map(|p| ratio(p, r.peak_bytes)),
            }
        })
        .collect()
}

/// Whether every check holds within [`PEAK_TOLERANCE`], before launch and from measured.
pub fn all_hold(checks: &[PeakCheck]) -> bool {
    checks.iter().all(|c| {
        c.error.abs() <= PEAK_TOLERANCE
            && c.from_measured_error
                .is_none_or(|e| e.abs() <= PEAK_TOLERANCE)
    })
}

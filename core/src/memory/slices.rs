//! Activations of a model too big to launch, from slices of it that fit: the same decoder with
//! fewer layers, each launched at one GPU. Each slice's activations are its torch peak less its
//! predicted state; a line through them (a fixed part: embeddings and logits; a part per layer)
//! gives the whole model's, said as extrapolated.

use serde::{Deserialize, Serialize};

use super::{activations_from_peak, MemoryModel};
use crate::ddp::{Amp, Decoder, ModelSpec, Wrapper};
use crate::num::{floor_u64, ToF64};

/// One slice as launched: its parameters (which say its layers) and torch's peak under DDP.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlicePeak {
    pub params: u64,
    pub peak_bytes: u64,
}

/// What the slices measured and what it extrapolates to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SliceFit {
    /// Each slice: (layers, activations bytes).
    pub points: Vec<(u32, u64)>,
    pub per_layer_bytes: f64,
    pub fixed_bytes: f64,
    /// The whole model's activations, extrapolated to its layers.
    pub extrapolated_bytes: u64,
    pub layers: u32,
}

/// `d` with `layers` layers.
fn with_layers(d: &Decoder, layers: u32) -> ModelSpec {
    ModelSpec::Decoder(Decoder {
        layers,
        ..d.clone()
    })
}

/// The layers a slice of `d` with `params` parameters has, where they count exactly.
fn layers_of(d: &Decoder, params: u64) -> Option<u32> {
    (1..=d.layers).find(|&l| with_layers(d, l).params() == params)
}

/// The line through the slices' activations, extrapolated to `d`'s layers; `None` without two
/// slices of different depth of this decoder.
pub fn fit_slices(
    d: &Decoder,
    micro_batch: u32,
    amp: Amp,
    slices: &[SlicePeak],
) -> Option<SliceFit> {
    let mut points: Vec<(u32, u64)> = slices
        .iter()
        .filter_map(|s| {
            let l = layers_of(d, s.params)?;
            let m = MemoryModel::of_spec(&with_layers(d, l), micro_batch, amp);
            Some((l, activations_from_peak(&m, Wrapper::Ddp, 1, s.peak_bytes)?))
        })
        .collect();
    points.sort_unstable();
    points.dedup_by_key(|p| p.0);
    if points.len() < 2 {
        return None;
    }
    let n = points.len().to_f64();
    let (sx, sy) = points.iter().fold((0.0, 0.0), |(x, y), (l, a)| {
        (x + f64::from(*l), y + a.to_f64())
    });
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = points
        .iter()
        .map(|(l, _)| (f64::from(*l) - mx).powi(2))
        .sum();
    let sxy: f64 = points
        .iter()
        .map(|(l, a)| (f64::from(*l) - mx) * (a.to_f64() - my))
        .sum();
    let per_layer = sxy / sxx;
    let fixed = my - per_layer * mx;
    let extrapolated = floor_u64((fixed + per_layer * f64::from(d.layers)).max(0.0));
    Some(SliceFit {
        points,
        per_layer_bytes: per_layer,
        fixed_bytes: fixed,
        extrapolated_bytes: extrapolated,
        layers: d.layers,
    })
}

//! Activations of a model too big to launch, from slices of it that fit: the same decoder with
//! fewer layers, each launched at one GPU under a wrapper. Each slice's activations are its
//! torch peak less the wrapper's predicted state when backward starts; a line through two or
//! more (a fixed part: the final norm and the loss; a part per layer) gives the whole model's,
//! and one slice alone is scaled by the count of what lies outside the blocks and in them. Said
//! as extrapolated.

use serde::{Deserialize, Serialize};

use super::activations::{block_bytes_per_token, outside_bytes_per_token, Dtypes};
use super::{activations_from_peak, MemoryModel};
use crate::ddp::{Amp, Decoder, ModelSpec, Wrapper};
use crate::num::{floor_u64, ToF64};

/// One slice as launched: its parameters (which say its layers), its wrapper and torch's peak.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlicePeak {
    pub params: u64,
    pub wrapper: Wrapper,
    pub peak_bytes: u64,
}

/// What one wrapper's slices measured and what it extrapolates to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SliceFit {
    pub wrapper: Wrapper,
    /// Each slice: (layers, activations bytes).
    pub points: Vec<(u32, u64)>,
    pub per_layer_bytes: f64,
    pub fixed_bytes: f64,
    /// The whole model's activations, extrapolated to its layers.
    pub extrapolated_bytes: u64,
    pub layers: u32,
}

impl SliceFit {
    /// How the figure was had, in a few words.
    pub fn what(&self) -> String {
        let layers: Vec<String> = self.points.iter().map(|(l, _)| l.to_string()).collect();
        format!(
            "EXTRAPOLATED to {} layers from {} slices of {} layers",
            self.layers,
            self.wrapper,
            layers.join(" and ")
        )
    }
}

/// `d` with `layers` layers.
fn with_layers(d: &Decoder, layers: u32) -> ModelSpec {
    ModelSpec::Decoder(Decoder {
        layers,
        ..d.clone()
    })
}

/// The most layers a slice may have (a slice deeper than the model checks a shallower one).
const MAX_SLICE_LAYERS: u32 = 512;

/// The layers a slice of `d` with `params` parameters has, where they count exactly.
fn layers_of(d: &Decoder, params: u64) -> Option<u32> {
    (1..=d.layers.max(MAX_SLICE_LAYERS)).find(|&l| with_layers(d, l).params() == params)
}

/// The line through `wrapper`'s slices' activations, extrapolated to `d`'s layers; `None`
/// without a slice of this decoder whose peak says what its activations are.
pub fn fit_slices(
    d: &Decoder,
    micro_batch: u32,
    amp: Amp,
    wrapper: Wrapper,
    slices: &[SlicePeak],
) -> Option<SliceFit> {
    let mut points: Vec<(u32, u64)> = slices
        .iter()
        .filter(|s| s.wrapper == wrapper)
        .filter_map(|s| {
            let l = layers_of(d, s.params)?;
            let m = MemoryModel::of_spec(&with_layers(d, l), micro_batch, amp);
            Some((l, activations_from_peak(&m, wrapper, 1, s.peak_bytes)?))
        })
        .collect();
    points.sort_unstable();
    points.dedup_by_key(|p| p.0);
    let (per_layer, fixed) = match points.as_slice() {
        [] => return None,
        [(l, a)] => one_slice(d, micro_batch, Dtypes::of(wrapper, amp), *l, *a),
        _ => line(&points),
    };
    let extrapolated = floor_u64((fixed + per_layer * f64::from(d.layers)).max(0.0));
    Some(SliceFit {
        wrapper,
        points,
        per_layer_bytes: per_layer,
        fixed_bytes: fixed,
        extrapolated_bytes: extrapolated,
        layers: d.layers,
    })
}

/// One slice of `layers` that measured `bytes`: the count's split between a block and what lies
/// outside the blocks, scaled to the measurement: (per layer, fixed).
fn one_slice(d: &Decoder, micro_batch: u32, t: Dtypes, layers: u32, bytes: u64) -> (f64, f64) {
    let tokens = f64::from(d.seq) * f64::from(micro_batch);
    let (block, outside) = (
        tokens * block_bytes_per_token(d, t),
        tokens * outside_bytes_per_token(d, t),
    );
    let counted = f64::from(layers) * block + outside;
    let k = bytes.to_f64() / counted.max(1.0);
    (k * block, k * outside)
}

/// The least-squares line through (layers, bytes): (per layer, fixed).
fn line(points: &[(u32, u64)]) -> (f64, f64) {
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
    (per_layer, my - per_layer * mx)
}

//! One wrapper's peak on each GPU: the larger of two moments of a training step after the first
//! (the optimizer's states exist from the first step on).
//!
//! - **Backward starts**: every activation is saved, the loss holds its three vocab-wide tensors,
//!   and the parameters computed on are there (autocast's 16-bit casts, saved for backward;
//!   FSDP2's unsharded parameters). FSDP2's gradients are not: `zero_grad(set_to_none=True)`
//!   freed them. DDP's gradients are its buckets, allocated once and kept.
//! - **Backward ends**: every gradient exists and no activation does. FSDP2 reduces the last
//!   block while the root unit is still gathered: that block's unsharded gradient and its fp32
//!   copy for the reduce-scatter, and the root's unsharded parameters and gradient in place of
//!   its sharded gradient.
//!
//! DDP's runs hold [`DDP_UNIDENTIFIED_BYTES_PER_PARAM`] more than this mechanism accounts for.

use serde::{Deserialize, Serialize};

use super::MemoryModel;
use crate::ddp::{Amp, Wrapper};
use crate::num::{floor_u64, ToF64};

/// What DDP's launches held beyond their parameters, buckets, optimizer states, autocast's
/// casts and activations, per trainable parameter: 4.0 B on the 8B decoder's layers (its 2- and
/// 4-layer slices differ by exactly 22 B per parameter plus their activations) and on
/// llama-12x1024, on one H100 (docs/results/2026-12-06-h100-fsdp2-variants.md). What holds it
/// is not identified (the size of an fp32 copy of the gradients); it is kept in every DDP
/// prediction so that no fit rests on leaving it out.
pub const DDP_UNIDENTIFIED_BYTES_PER_PARAM: f64 = 4.0;

/// Within this share of torch's peak a prediction holds.
pub const PEAK_TOLERANCE: f64 = 0.10;

/// Which moment of the step a row's total is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Moment {
    /// Every activation saved, the loss's tensors, FSDP2's gradients not yet there.
    #[default]
    BackwardStart,
    /// Every gradient, no activation.
    BackwardEnd,
}

/// One wrapper's bytes on each GPU at `gpus` GPUs: each part at its largest, and the total at
/// the step's peak moment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryRow {
    pub wrapper: Wrapper,
    pub gpus: u32,
    /// GPUs one copy of the sharded state spans.
    pub shard_group: u32,
    pub params_bytes: u64,
    pub grads_bytes: u64,
    pub optimizer_bytes: u64,
    /// Parameters as computed when backward starts: autocast's casts, FSDP2's gathered ones.
    pub compute_bytes: u64,
    pub activations_bytes: u64,
    /// DDP: [`DDP_UNIDENTIFIED_BYTES_PER_PARAM`]; FSDP2: what reducing the last block holds
    /// beyond its sharded state when backward ends.
    #[serde(default)]
    pub other_bytes: u64,
    /// The peak: the larger moment's sum.
    pub total_bytes: u64,
    #[serde(default)]
    pub peak_at: Moment,
    /// Whether `total_bytes` is within [`super::FIT_SHARE`] of the GPU's memory; `None` where
    /// the GPU's memory is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fits: Option<bool>,
}

/// The parameters as computed when backward starts: DDP's autocast casts (none in full
/// precision); every unsharded parameter where FSDP2 keeps them gathered (`replicate`,
/// `fsdp-noreshard`); where it reshards, the root (gathered again for the loss's backward) and
/// the last block (prefetched).
fn compute_bytes(m: &MemoryModel, wrapper: Wrapper) -> f64 {
    let cd = m.amp.compute_bytes();
    match wrapper {
        Wrapper::Ddp if m.amp == Amp::None => 0.0,
        Wrapper::Ddp => cd * m.params.to_f64(),
        Wrapper::Replicate | Wrapper::FsdpNoReshard => cd * m.params.to_f64(),
        Wrapper::Fsdp | Wrapper::Hsdp => cd * (m.root + m.largest_block).to_f64(),
    }
}

/// What FSDP2 holds beyond its sharded state when backward ends: the last block's unsharded
/// gradient and its fp32 reduce-scatter copy, and the root's unsharded parameters and gradient
/// in place of its sharded gradient (never below nothing).
fn end_of_backward_bytes(m: &MemoryModel, wrapper: Wrapper, shard: u32) -> f64 {
    if wrapper == Wrapper::Ddp {
        return 0.0;
    }
    let cd = m.amp.compute_bytes();
    let root = m.root.to_f64();
    let last_block = (cd + 4.0) * m.largest_block.to_f64();
    last_block + (2.0 * cd * root - 4.0 * root / f64::from(shard)).max(0.0)
}

/// The wrapper's bytes per GPU at `gpus` GPUs.
pub fn predict(m: &MemoryModel, wrapper: Wrapper, gpus: u32) -> MemoryRow {
    let shard = wrapper.shard_group(gpus.max(1));
    let per = |bytes_per_param: f64, n: u64| bytes_per_param * n.to_f64() / f64::from(shard);
    let params_bytes = floor_u64(per(4.0, m.params));
    let grads_bytes = floor_u64(per(4.0, m.trainable));
    let optimizer_bytes = floor_u64(per(8.0, m.trainable));
    let compute = floor_u64(compute_bytes(m, wrapper));
    let activations_bytes = m.activations_for(wrapper).bytes();
    let unidentified = if wrapper == Wrapper::Ddp {
        floor_u64(DDP_UNIDENTIFIED_BYTES_PER_PARAM * m.trainable.to_f64())
    } else {
        0
    };
    let end_extra = floor_u64(end_of_backward_bytes(m, wrapper, shard));
    let held_grads = if wrapper == Wrapper::Ddp {
        grads_bytes
    } else {
        0
    };
    let start =
        params_bytes + held_grads + optimizer_bytes + unidentified + compute + activations_bytes;
    let end = params_bytes + grads_bytes + optimizer_bytes + unidentified + end_extra;
    let (total_bytes, peak_at) = if end > start {
        (end, Moment::BackwardEnd)
    } else {
        (start, Moment::BackwardStart)
    };
    MemoryRow {
        wrapper,
        gpus,
        shard_group: shard,
        params_bytes,
        grads_bytes,
        optimizer_bytes,
        compute_bytes: compute,
        activations_bytes,
        other_bytes: unidentified + end_extra,
        total_bytes,
        peak_at,
        fits: None,
    }
}

/// Activations read from a launch: its peak less what the wrapper holds beside them when
/// backward starts. `None` where the peak is below that, or where the backward's end alone
/// comes within [`PEAK_TOLERANCE`] of it: a peak that needs no activations says
/// nothing of them.
pub fn activations_from_peak(
    m: &MemoryModel,
    wrapper: Wrapper,
    gpus: u32,
    peak: u64,
) -> Option<u64> {
    let without = m.with_activations(wrapper, super::ActivationSource::Unknown);
    let (start, end) = moments_without_activations(&predict(&without, wrapper, gpus));
    if end.to_f64() >= peak.to_f64() * (1.0 - PEAK_TOLERANCE) {
        return None;
    }
    peak.checked_sub(start)
}

/// A row's two moments less its activations: (backward starts, backward ends).
pub fn moments_without_activations(r: &MemoryRow) -> (u64, u64) {
    let end = r.params_bytes + r.grads_bytes + r.optimizer_bytes + r.other_bytes;
    let start = if r.wrapper == Wrapper::Ddp {
        end + r.compute_bytes
    } else {
        r.params_bytes + r.optimizer_bytes + r.compute_bytes
    };
    (start, end)
}

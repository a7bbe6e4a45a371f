//! What DDP does on a real node beyond the timeline of buckets: how much of the possible
//! overlap a link realises, and the side-by-side slowdown of the micro-batches under `no_sync`.
//! Each constant here was fitted on the 2×H200 calls of 2026-11-30 07:13–16:16 only
//! (`cargo run -p ddpcheck-accuracy --release -- --fit`), never on the calls the accuracy is
//! judged on (docs/results/2026-11-30-h200x2-model-accuracy.md).

use super::{LinkCurve, StepInputs, DEFAULT_BUCKET_CAP_MB, MIB};

/// Below this bus bandwidth at DDP's bucket size a link is a slow transport (host sockets:
/// 3–4 GB/s on 2×H200; shared memory 10–20, NVLink hundreds).
pub const SLOW_LINK_GBPS: f64 = 8.0;

/// The share of the timeline's overlap realised over a slow transport. Over host sockets NCCL
/// moves the bytes with proxy threads on the host's cores, the cores the ranks' Python launches
/// the backward's kernels from, so the all-reduces and the backward slow each other.
pub const SLOW_LINK_OVERLAP: f64 = 1.0;

/// How much slower the micro-batches under `no_sync` run with N processes side by side when no
/// `nocomm` run resolved a slowdown beyond its launches' noise. The synchronising micro-batch
/// after them was measured costing 3–6× what the same model's plain step exposed on small MLPs
/// (their gradients take 0.1 ms over NVLink): the processes share the host while they
/// accumulate.
pub const NO_SYNC_SLOWDOWN: f64 = 1.08;

/// The share of the overlap a link realises: full on fast links, [`SLOW_LINK_OVERLAP`] on slow
/// ones ([`SLOW_LINK_GBPS`] at DDP's bucket size).
pub fn realised_overlap(curve: &LinkCurve, world: u32) -> f64 {
    if world <= 1 {
        return 1.0;
    }
    if curve.busbw_at((DEFAULT_BUCKET_CAP_MB * MIB) as u64) < SLOW_LINK_GBPS {
        SLOW_LINK_OVERLAP
    } else {
        1.0
    }
}

/// What the `k − 1` micro-batches under `no_sync` add at N GPUs beyond the measured side-by-side
/// slowdown: the default [`NO_SYNC_SLOWDOWN`] where it is the larger.
pub fn no_sync_extra(inputs: &StepInputs) -> f64 {
    if inputs.world <= 1 || inputs.accum <= 1 {
        return 0.0;
    }
    let prior = inputs.no_sync_slowdown.unwrap_or(NO_SYNC_SLOWDOWN);
    let gap = (prior - inputs.side_by_side_slowdown).max(0.0);
    gap * f64::from(inputs.accum - 1) * inputs.compute_s
}

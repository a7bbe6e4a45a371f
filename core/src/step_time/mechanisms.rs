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

/// Host time each micro-batch under `no_sync` loses at N GPUs (seconds) when no `nocomm` run
/// resolved a side-by-side slowdown beyond its launches' noise: the N processes share the
/// host's cores while they accumulate, and the synchronising micro-batch after them was
/// measured costing 3–6× what the same model's plain step exposed on small MLPs (whose
/// gradients take 0.1 ms over NVLink). A time, not a ratio: GPT-2's 37 ms micro-batches lost a
/// few percent where the MLPs' 1.5 ms ones lost 5–25%.
pub const NO_SYNC_HOST_S: f64 = 0.15e-3;

/// The share of the overlap a link realises: full on fast links, [`SLOW_LINK_OVERLAP`] on slow
/// ones ([`SLOW_LINK_GBPS`] at DDP's bucket size).
pub fn realised_overlap(curve: &LinkCurve, world: u32) -> f64 {
    if world <= 1 {
        return 1.0;
    }
    if curve.busbw_at(crate::num::floor_u64(DEFAULT_BUCKET_CAP_MB * MIB)) < SLOW_LINK_GBPS {
        SLOW_LINK_OVERLAP
    } else {
        1.0
    }
}

/// What the `k − 1` micro-batches under `no_sync` add at N GPUs where no side-by-side slowdown
/// was counted: [`NO_SYNC_HOST_S`] each (a counted slowdown already stretches them).
pub fn no_sync_extra(inputs: &StepInputs) -> f64 {
    no_sync_extra_of(
        inputs.world,
        inputs.accum,
        inputs.side_by_side_slowdown,
        inputs.no_sync_host_s,
    )
}

/// [`no_sync_extra`] from its parts (the calibration's cases hold no `StepInputs`).
pub fn no_sync_extra_of(world: u32, accum: u32, side_by_side: f64, host_s: Option<f64>) -> f64 {
    if world <= 1 || accum <= 1 || side_by_side > 1.0 {
        return 0.0;
    }
    host_s.unwrap_or(NO_SYNC_HOST_S).max(0.0) * f64::from(accum - 1)
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::NO_SYNC_HOST_S;
    use crate::collective::Sweep;
    use crate::ddp::{CommHook, ModelSpec};

    /// A curve from (bytes per rank, µs) points of a committed sweep.
    fn curve(points: &[(u64, f64)]) -> LinkCurve {
        let times: Vec<(u64, f64)> = points.iter().map(|&(b, us)| (b, us * 1e-6)).collect();
        LinkCurve::from_sweep(&Sweep::all_reduce_from_times(2, &times).unwrap()).unwrap()
    }

    fn mlp(width: u32, compute_ms: f64, optimizer_ms: f64) -> StepInputs {
        let spec = ModelSpec::square_mlp(width, 4);
        let mut s = StepInputs::for_model(&spec, 256, compute_ms * 1e-3, 2, 1);
        s.optimizer_s = optimizer_ms * 1e-3;
        s
    }

    /// bench/accuracy/fixtures/2026-11-30-h200x2-1031/model/model-curve-shm.json, µs.
    const SHM_1031: [(u64, f64); 6] = [
        (65536, 16.0),
        (262144, 35.5),
        (1048576, 64.3),
        (4194304, 174.9),
        (16777216, 639.0),
        (67108864, 2472.3),
    ];

    #[test]
    fn the_synchronising_micro_batch_after_no_sync_pays_the_side_by_side_slowdown() {
        // bench/accuracy/fixtures/2026-11-30-h200x2-1031/model/model-mlp-shm.json, mlp:1024x4
        // (a fit call): one GPU base 2.166 ms, accum8 13.112 ms (so 1.564 ms a micro-batch and
        // 0.602 ms of optimizer); two GPUs base 2.898 ms (0.73 ms more than one GPU), accum8
        // 16.841 ms (3.73 ms more: five times what the plain step exposed, for one
        // all-reduce of the same 16.8 MB).
        let c = (13.112 - 2.166) / 7.0;
        let inputs = mlp(1024, c, 2.166 - c).with_accum(8);
        let link = curve(&SHM_1031);
        let with = predict(&inputs, &link).unwrap();
        let mut off = inputs.clone();
        off.no_sync_host_s = Some(0.0);
        let without = predict(&off, &link).unwrap();
        let measured = 16.841e-3;
        // The mechanism adds 7 micro-batches × 0.15 ms and moves the prediction towards the
        // measurement; what is left (about 2 ms) is beyond this mechanism.
        let added = with.step_s - without.step_s;
        assert!((added - 7.0 * NO_SYNC_HOST_S).abs() < 1e-12, "{added}");
        assert!((with.step_s - measured).abs() < (without.step_s - measured).abs());
        // The base step, whose micro-batch synchronises, is not touched.
        let base = mlp(1024, c, 2.166 - c);
        let mut base_off = base.clone();
        base_off.no_sync_host_s = Some(0.0);
        assert_eq!(
            predict(&base, &link).unwrap().step_s,
            predict(&base_off, &link).unwrap().step_s
        );
    }

    #[test]
    fn a_hooks_one_gpu_cost_makes_fp16_slower_than_base_on_a_small_mlp_over_shm() {
        // bench/accuracy/fixtures/2026-11-30-h200x2-1616/mlprep8/mlprep8-mlp-shm.json,
        // mlp:448x4 (a fit call): one GPU base 2.250 ms, fp16 2.554 ms (the hook's casts and
        // host work: 0.304 ms); two GPUs base 2.699 ms, fp16 3.341 ms: fp16 was slower while
        // halving the bytes. Its sweep (mlprep8-curve-shm.json) is within 1% of 10:31's.
        let c = 14.4e-3 / 8.0;
        let base = mlp(448, c * 1e3, 2.25 - c * 1e3);
        let mut fp16 = base.clone().with_hook(CommHook::Fp16);
        let link = curve(&SHM_1031);
        let step = |s: &StepInputs| predict(s, &link).unwrap().step_s;
        let unpaid = step(&fp16);
        // With the measured cost (paid per bucket as DDP hands them over) fp16 is the slower
        // one, as measured, and the cost shows in full: one bucket, no earlier all-reduce to
        // hide behind.
        fp16.hook_compute_s = 0.304e-3;
        assert!(step(&fp16) > step(&base), "{} {}", step(&fp16), step(&base));
        assert!(
            step(&fp16) - unpaid > 0.9 * 0.304e-3,
            "{} {unpaid}",
            step(&fp16)
        );
        assert!(
            predict(&fp16, &link).unwrap().wire_bytes < predict(&base, &link).unwrap().wire_bytes
        );
    }
}

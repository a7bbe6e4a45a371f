//! PowerSGD in the step-time model: the bytes its hook sends from a layout's shapes (hand-counted
//! here), and its all-reduces per bucket in series.

use super::powersgd::{self, Split};
use super::*;
use crate::ddp::{ParamLayout, ParamTensor};

/// A small model whose PowerSGD split at rank 4 is counted by hand below; 152,080 fp32
/// parameters, 608 kB of gradients: one bucket (DDP's first holds 1 MiB).
fn small_layout() -> GradLayout {
    let t = ParamTensor::new;
    GradLayout::from_params(&ParamLayout {
        tensors: vec![
            t("conv.weight", &[64, 32, 3, 3]),
            t("small.weight", &[8, 8]),
            t("thin.weight", &[1000, 2]),
            t("fc1.weight", &[512, 256]),
            t("fc1.bias", &[512]),
        ],
    })
}

#[test]
fn the_hook_views_a_tensor_as_its_first_dimension_by_the_rest() {
    let l = small_layout();
    let matrices: Vec<_> = l.tensors.iter().map(|t| t.matrix).collect();
    // Backward order: the reverse of registration.
    assert_eq!(
        matrices,
        vec![
            Some([512, 1]),
            Some([512, 256]),
            Some([1000, 2]),
            Some([8, 8]),
            Some([64, 288])
        ]
    );
}

#[test]
fn rank_4_sends_p_and_q_of_the_matrices_worth_compressing_and_the_rest_whole() {
    // fc1.weight 512×256: (512+256)·4 = 3072, ×2 < 131072: P 2048, Q 1024.
    // conv.weight 64×288: (64+288)·4 = 1408, ×2 < 18432: P 256, Q 1152.
    // small.weight 8×8: (8+8)·4 = 64, ×2 = 128 ≥ 64: whole.
    // thin.weight 1000×2: rank min(1000, 2, 4) = 2, (1002)·2 = 2004, ×2 ≥ 2000: whole.
    // fc1.bias 512 (512×1): never worth it: whole.
    let s = powersgd::split(&small_layout().tensors, 4);
    assert_eq!(
        s,
        Split {
            uncompressed: 512 + 64 + 2000,
            p: 2048 + 256,
            q: 1024 + 1152,
            original: 152_080,
        }
    );
    let link = LinkCurve::flat(2, 100.0, 0.0).unwrap();
    let p = predict(
        &StepInputs::new(small_layout(), 0.010, 2, 1).with_powersgd(4),
        &link,
    )
    .unwrap();
    assert_eq!(p.buckets, 1);
    assert!(
        (p.wire_bytes - 4.0 * 7056.0).abs() < 1e-9,
        "{}",
        p.wire_bytes
    );
    // Rank 1: fc1 P 512 Q 256, conv P 64 Q 288; small 8×8 now compresses (16·2 < 64): P 8 Q 8;
    // thin 1000×2 at rank 1: 1002·2 ≥ 2000, whole.
    let r1 = powersgd::split(&small_layout().tensors, 1);
    assert_eq!(
        (r1.uncompressed, r1.p, r1.q),
        (512 + 2000, 512 + 64 + 8, 256 + 288 + 8)
    );
}

#[test]
fn a_shape_the_model_does_not_know_is_sent_whole() {
    let s = powersgd::split(&GradLayout::uniform(1_000_000).tensors, 4);
    assert_eq!((s.uncompressed, s.p, s.q), (1_000_000, 0, 0));
}

/// A link where every all-reduce costs its latency, 1 ms, and next to nothing per byte.
fn latency_only() -> LinkCurve {
    LinkCurve::flat(2, 1e9, 1e-3).unwrap()
}

fn comm_per_step(layout: GradLayout, hook: Option<u32>) -> f64 {
    let mut i = StepInputs::new(layout, 0.010, 2, 1);
    i.overheads = Overheads {
        ddp_fixed_s: 0.0,
        per_bucket_s: 0.0,
        hook_per_bucket_s: 0.0,
    };
    if let Some(rank) = hook {
        i = i.with_powersgd(rank);
    }
    predict(&i, &latency_only()).unwrap().comm_s
}

#[test]
fn powersgd_runs_p_then_q_in_series_and_the_uncompressed_all_reduce_besides() {
    let t = ParamTensor::new;
    let matrices_only = GradLayout::from_params(&ParamLayout {
        tensors: vec![t("a.weight", &[512, 256]), t("b.weight", &[256, 512])],
    });
    // One bucket: plain DDP pays one latency, PowerSGD two (P, then Q).
    assert!((comm_per_step(matrices_only.clone(), None) - 1e-3).abs() < 1e-6);
    assert!((comm_per_step(matrices_only, Some(4)) - 2e-3).abs() < 1e-6);
    // With a vector in the bucket, the uncompressed all-reduce runs too: three.
    assert!((comm_per_step(small_layout(), Some(4)) - 3e-3).abs() < 1e-6);
}

#[test]
fn each_of_powersgds_all_reduces_pays_a_calls_own_cost() {
    let mut i = StepInputs::new(small_layout(), 0.010, 2, 1).with_powersgd(4);
    i.overheads = Overheads {
        ddp_fixed_s: 0.0,
        per_bucket_s: 1e-3,
        hook_per_bucket_s: 0.0,
    };
    let link = LinkCurve::flat(2, 1e9, 0.0).unwrap();
    let p = predict(&i, &link).unwrap();
    assert!((p.comm_s - 3e-3).abs() < 1e-6, "{}", p.comm_s);
}

#[test]
fn a_powersgd_variant_carries_its_rank_into_the_model() {
    let v: DdpVariant = "powersgd8+accum2".parse().unwrap();
    let i = StepInputs::new(small_layout(), 0.010, 2, 1).with_variant(&v);
    assert_eq!(
        (i.hook, i.powersgd_rank, i.accum),
        (CommHook::PowerSgd, 8, 2)
    );
    let plain: DdpVariant = "powersgd".parse().unwrap();
    assert_eq!(plain.powersgd_rank(), crate::ddp::POWERSGD_DEFAULT_RANK);
    assert!("powersgd0".parse::<DdpVariant>().is_err());
    assert!("powersgdx".parse::<DdpVariant>().is_err());
}

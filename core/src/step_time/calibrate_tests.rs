//! Tests of the calibration on a node's own DDP runs: overheads recovered from runs the model
//! made itself, the cross-check on unseen models, and the side-by-side slowdown kept out of the fit.

use super::tests::{a6000, close, result, synthetic_sweep};
use super::*;

/// The three models the calibration tests run.
fn calibration_models() -> [(ModelSpec, f64); 3] {
    [
        (ModelSpec::gpt2_124m(), 0.030),
        (ModelSpec::square_mlp(512, 4), 0.001),
        (ModelSpec::square_mlp(2048, 4), 0.004),
    ]
}

/// "Measured" runs of `spec` (one micro-batch `compute` s) made by the model itself with the
/// given overheads and backward fraction, at 1 and 2 GPUs, four variants. The hook costs 0.4 ms a
/// step: its 1-GPU run measures the reference plus that, and the calibration takes it back out as
/// `predict` pays it, bucket by bucket.
fn model_made_runs(
    spec: &ModelSpec,
    compute: f64,
    truth: Overheads,
    truth_bf: f64,
    curve: &LinkCurve,
) -> Vec<DdpResult> {
    let hook_s = 0.4e-3;
    let mut runs = Vec::new();
    for variant in ["base", "bf16", "accum4", "bf16+accum4"] {
        let v: DdpVariant = variant.parse().unwrap();
        let mut i = StepInputs::for_model(spec, 8, compute, 2, 1).with_variant(&v);
        i.overheads = truth;
        i.backward_fraction = truth_bf;
        let hook = if v.hook == CommHook::None {
            0.0
        } else {
            hook_s
        };
        i.hook_compute_s = hook;
        let p = predict(&i, curve).unwrap();
        runs.push(result(spec, variant, 1, p.single_gpu_step_s + hook));
        runs.push(result(spec, variant, 2, p.step_s));
    }
    runs
}

fn calibration_curve() -> LinkCurve {
    LinkCurve::from_sweep(&synthetic_sweep(2, 30e-6, 27.0)).unwrap()
}

#[test]
fn calibration_recovers_known_overheads() {
    // "Measured" runs made by the model itself with known overheads on a measured-like curve.
    let curve = calibration_curve();
    let truth = Overheads {
        ddp_fixed_s: 2e-3,
        per_bucket_s: 150e-6,
        hook_per_bucket_s: Overheads::default().hook_per_bucket_s,
    };
    let runs: Vec<DdpResult> = calibration_models()
        .iter()
        .flat_map(|(spec, compute)| model_made_runs(spec, *compute, truth, 0.6, &curve))
        .collect();
    let cal = calibrate(&runs, &curve).unwrap();
    assert_eq!(cal.runs_used, 12);
    assert!(cal.rms_log_error_after < 0.01, "{cal:?}");
    assert!(cal.rms_log_error_after < cal.rms_log_error_before);
    assert!(close(cal.overheads.ddp_fixed_s, 2e-3, 0.3e-3), "{cal:?}");
    assert!(close(cal.overheads.per_bucket_s, 150e-6, 50e-6), "{cal:?}");
    assert!(close(cal.backward_fraction, 0.6, 0.1), "{cal:?}");
    let mut i = StepInputs::for_model(&ModelSpec::gpt2_124m(), 8, 0.03, 2, 1);
    cal.apply(&mut i);
    assert_eq!(i.overheads, cal.overheads);
    // Nothing usable: an error, not a panic.
    let only_single: Vec<DdpResult> = runs.iter().filter(|r| r.world_size == 1).cloned().collect();
    assert!(matches!(
        calibrate(&only_single, &curve),
        Err(ModelError::NoData(_))
    ));
    // Where every model shares the overheads, a fit on two of them predicts the third better
    // than the defaults: the cross-check keeps the calibration.
    let x = cross_check(&runs, &curve).unwrap();
    assert_eq!((x.models, x.runs), (3, 12));
    assert!(x.helps(), "{x:?}");
    assert!(x.rms_log_error_calibrated < 0.01, "{x:?}");
    // One model: nothing to hold out.
    let one: Vec<DdpResult> = runs
        .iter()
        .filter(|r| r.model == "gpt2-124m")
        .cloned()
        .collect();
    assert_eq!(cross_check(&one, &curve), None);
    assert!(cross_check(&only_single, &curve).is_none());
}

#[test]
fn the_cross_check_rejects_a_fit_that_does_not_carry_to_other_models() {
    // Two models behave as the defaults say; the third pays 5 ms more a step. Fitted on it and
    // one other, the overheads predict the held-out default model worse than the defaults do,
    // while no fit predicts the odd one from the others: calibrating does not pay here.
    let curve = calibration_curve();
    let defaults = Overheads::default();
    let odd = Overheads {
        ddp_fixed_s: defaults.ddp_fixed_s + 5e-3,
        ..defaults
    };
    let [a, b, c] = calibration_models();
    let mut runs = model_made_runs(&a.0, a.1, odd, DEFAULT_BACKWARD_FRACTION, &curve);
    runs.extend(model_made_runs(
        &b.0,
        b.1,
        defaults,
        DEFAULT_BACKWARD_FRACTION,
        &curve,
    ));
    runs.extend(model_made_runs(
        &c.0,
        c.1,
        defaults,
        DEFAULT_BACKWARD_FRACTION,
        &curve,
    ));
    // In sample the fit still looks better than the defaults.
    let cal = calibrate(&runs, &curve).unwrap();
    assert!(
        cal.rms_log_error_after < cal.rms_log_error_before,
        "{cal:?}"
    );
    let x = cross_check(&runs, &curve).unwrap();
    assert!(!x.helps(), "{x:?}");
}

#[test]
fn calibration_on_the_seed_baseline() {
    // The seed's measured 4-GPU steps (124M: 255 ms at 4.3 GB/s) against its 1-GPU step: the fit
    // moves the prediction towards the measurement and stays within its bounds.
    let curve = a6000(4.3);
    let spec = ModelSpec::gpt2_124m();
    let runs = vec![
        result(&spec, "base", 1, 0.130),
        result(&spec, "base", 4, 0.255),
    ];
    let cal = calibrate(&runs, &curve).unwrap();
    assert!(cal.rms_log_error_after <= cal.rms_log_error_before);
    assert!(cal.rms_log_error_after < 0.02, "{cal:?}");
    assert!((0.0..=0.25).contains(&cal.overheads.ddp_fixed_s));
}

#[test]
fn calibration_counts_the_side_by_side_slowdown_and_skips_nocomm_runs() {
    // Runs made by the model with a known slowdown of 1.2 and known overheads; the nocomm runs
    // measure the slowdown. Calibration must recover the overheads, not absorb the slowdown.
    let curve = LinkCurve::from_sweep(&synthetic_sweep(2, 30e-6, 27.0)).unwrap();
    let truth = Overheads {
        ddp_fixed_s: 1e-3,
        per_bucket_s: 100e-6,
        hook_per_bucket_s: Overheads::default().hook_per_bucket_s,
    };
    let models = [
        (ModelSpec::square_mlp(1024, 4), 0.002),
        (ModelSpec::square_mlp(2048, 4), 0.004),
    ];
    let mut runs = Vec::new();
    for (spec, compute) in &models {
        for variant in ["base", "bf16", "accum4", "bf16+accum4"] {
            let v: DdpVariant = variant.parse().unwrap();
            let mut i = StepInputs::for_model(spec, 8, *compute, 2, 1).with_variant(&v);
            i.overheads = truth;
            i.side_by_side_slowdown = 1.2;
            let p = predict(&i, &curve).unwrap();
            runs.push(result(spec, variant, 1, p.single_gpu_step_s));
            runs.push(result(spec, variant, 2, p.step_s));
        }
        // Three launches each, every 2-GPU launch slower than every 1-GPU one: counted.
        let mut one = result(spec, "nocomm", 1, *compute);
        one.launch_step_medians_s = vec![0.98 * compute, *compute, 1.02 * compute];
        let mut two = result(spec, "nocomm", 2, 1.2 * compute);
        two.launch_step_medians_s = vec![1.18 * compute, 1.2 * compute, 1.22 * compute];
        runs.push(one);
        runs.push(two);
    }
    let cal = calibrate(&runs, &curve).unwrap();
    assert_eq!(cal.runs_used, 8, "{cal:?}");
    assert!(cal.rms_log_error_after < 0.01, "{cal:?}");
    assert!(close(cal.overheads.ddp_fixed_s, 1e-3, 0.3e-3), "{cal:?}");
    // Without the nocomm runs the fit must put the slowdown somewhere: a worse fit or a larger
    // fixed cost.
    let blind: Vec<DdpResult> = runs
        .iter()
        .filter(|r| !r.variant.contains("nocomm"))
        .cloned()
        .collect();
    let b = calibrate(&blind, &curve).unwrap();
    assert!(
        b.rms_log_error_after > 2.0 * cal.rms_log_error_after.max(1e-4)
            || b.overheads.ddp_fixed_s > 1.5e-3,
        "{b:?}"
    );
}

//! Tests of the recommendation beside measurements: measured speedups checked against the model,
//! calibrations, side-by-side slowdowns, and measured rows that overrule a model that misses them.

use super::tests::{a6000_input, codes, predicted, warning, with_measured};
use super::*;
use crate::step_time::{Calibration, CrossCheck};

#[test]
fn measured_speedups_stand_beside_the_predictions_and_are_checked_against_them() {
    let plain = recommend(&a6000_input()).unwrap();
    let chosen = plain.chosen.clone();
    let predicted = |name: &str| {
        plain
            .rows
            .iter()
            .find(|r| r.variant == name)
            .unwrap()
            .prediction
            .speedup
    };
    // Many launches: the noise bound is twice the standard error.
    let measured = |variant: &str, speedup: f64, uncertainty: Option<f64>| MeasuredSpeedup {
        variant: variant.into(),
        speedup,
        uncertainty,
        noise_bound: uncertainty.map(|u| 2.0 * u),
        rests_on: format!("bench ddp of {variant}"),
    };
    // Within the noise: shown, cited, no warning; the choice stays the model's.
    let mut input = a6000_input();
    input.measured = vec![
        measured("base", predicted("base") * 0.97, Some(0.05)),
        measured(&chosen, predicted(&chosen) * 0.95, Some(0.04)),
    ];
    let r = recommend(&input).unwrap();
    assert_eq!(r.chosen, chosen);
    let base = r.rows.iter().find(|x| x.variant == "base").unwrap();
    assert_eq!(base.measured.as_ref().unwrap().uncertainty, Some(0.05));
    assert!(
        r.rows.iter().filter(|x| x.measured.is_some()).count() == 2 - usize::from(chosen == "base")
    );
    let cited = r
        .reasons
        .iter()
        .find(|x| x.text.starts_with("Measured on this node"))
        .unwrap();
    assert!(
        cited.text.contains("within the noise") && !cited.text.contains("beyond"),
        "{cited:?}"
    );
    assert!(cited.rests_on.contains("bench ddp of base"), "{cited:?}");
    assert!(!codes(&r).contains(&"measured_below_prediction"));
    // The chosen variant measured 30% below its prediction, ±5%: beyond the noise, warned.
    input.measured = vec![measured(&chosen, predicted(&chosen) / 1.3, Some(0.05))];
    let r = recommend(&input).unwrap();
    assert!(
        codes(&r).contains(&"measured_below_prediction"),
        "{:?}",
        r.warnings
    );
    // The same gap and standard error from two launches a side (Student's t of about 12 for
    // one degree of freedom): within the noise, no warning.
    input.measured = vec![MeasuredSpeedup {
        noise_bound: Some(crate::ddp::noise_bound(0.05, 1.0)),
        ..measured(&chosen, predicted(&chosen) / 1.3, Some(0.05))
    }];
    assert!(!codes(&recommend(&input).unwrap()).contains(&"measured_below_prediction"));
    // The same gap from one launch (noise unknown, taken as 20%) is also beyond it; 15% is not.
    input.measured = vec![measured(&chosen, predicted(&chosen) / 1.3, None)];
    assert!(codes(&recommend(&input).unwrap()).contains(&"measured_below_prediction"));
    input.measured = vec![measured(&chosen, predicted(&chosen) / 1.15, None)];
    assert!(!codes(&recommend(&input).unwrap()).contains(&"measured_below_prediction"));
    // Faster than predicted is no warning.
    input.measured = vec![measured(&chosen, predicted(&chosen) * 1.3, Some(0.01))];
    assert!(!codes(&recommend(&input).unwrap()).contains(&"measured_below_prediction"));
    // A variant recommend has no row for is ignored; a broken measurement is invalid input.
    input.measured = vec![measured("fp16+accum8", 1.0, None)];
    assert!(recommend(&input)
        .unwrap()
        .rows
        .iter()
        .all(|x| x.measured.is_none()));
    for bad in [
        measured("base", f64::NAN, None),
        measured("base", 0.0, None),
        measured("base", 1.5, Some(-0.1)),
    ] {
        input.measured = vec![bad];
        assert!(recommend(&input).is_err());
    }
    assert_eq!(variant_name(CommHook::Bf16, 4), Some("bf16+accum4"));
    assert_eq!(variant_name(CommHook::Fp16, 4), None);
}

#[test]
fn a_calibration_is_used_only_where_it_predicted_held_out_models_better() {
    let fitted = Calibration {
        overheads: Overheads {
            ddp_fixed_s: 4e-3,
            ..Overheads::default()
        },
        backward_fraction: 0.5,
        runs_used: 12,
        rms_log_error_before: 0.07,
        rms_log_error_after: 0.04,
    };
    let check = |default: f64, calibrated: f64| CrossCheck {
        models: 4,
        runs: 12,
        rms_log_error_default: default,
        rms_log_error_calibrated: calibrated,
    };
    let with = |cross_check: Option<CrossCheck>| {
        let mut input = a6000_input();
        input.calibration = Some(CalibrationInput {
            calibration: fitted.clone(),
            source: "12 DDP run(s) on node-a".into(),
            cross_check,
        });
        recommend(&input).unwrap()
    };
    // Better on the models it did not see: used, and both errors cited.
    let kept = with(Some(check(0.065, 0.044)));
    assert_eq!(kept.overheads, fitted.overheads);
    assert!(
        kept.overheads_source
            .contains("calibrated from 12 DDP run(s) on node-a")
            && kept.overheads_source.contains("6.5% → 4.4%"),
        "{}",
        kept.overheads_source
    );
    // Worse: the defaults, and why.
    let rejected = with(Some(check(0.057, 0.067)));
    assert_eq!(rejected.overheads, Overheads::default());
    assert!(
        rejected.overheads_source.contains("not used")
            && rejected
                .overheads_source
                .contains("6.7% rms step-time error against 5.7%"),
        "{}",
        rejected.overheads_source
    );
    assert_ne!(
        kept.rows[0].prediction.speedup,
        rejected.rows[0].prediction.speedup
    );
    // One model, nothing held out: used as fitted.
    let unchecked = with(None);
    assert_eq!(unchecked.overheads, fitted.overheads);
    assert!(!unchecked.overheads_source.contains("others' runs"));
}

#[test]
fn a_measured_side_by_side_slowdown_lowers_the_accumulated_variants_and_is_cited() {
    let plain = recommend(&a6000_input()).unwrap();
    let mut input = a6000_input();
    input.side_by_side = Some(SideBySideInput {
        measured_ratio: 1.2,
        launches: 8,
        within_launch: false,
        distinct: true,
        noise_bound: Some(0.1),
        rests_on: "nocomm at 4 GPUs: 156 ms".into(),
    });
    let crowded = recommend(&input).unwrap();
    // The no_sync micro-batches stretch in full; a synchronising one only beyond the
    // all-reduce waits that cover it, so no variant gets faster and every accumulated one slower.
    for (a, b) in plain.rows.iter().zip(&crowded.rows) {
        assert!(
            b.prediction.speedup <= a.prediction.speedup,
            "{}",
            a.variant
        );
        if a.prediction.accum > 1 {
            assert!(b.prediction.speedup < a.prediction.speedup, "{}", a.variant);
            assert!(b.prediction.side_by_side_s > 0.0, "{}", a.variant);
        }
    }
    assert!(crowded
        .reasons
        .iter()
        .any(|r| r.text.contains("20% slower") && r.rests_on.contains("nocomm at 4 GPUs")));
    assert!(crowded.reasons.iter().any(|r| r
        .text
        .contains("beyond the noise of their launches (±11% from 8 launches; their")));
    // Within the launches' noise, or one launch each: said, not counted.
    for (launches, says) in [
        (8, "(±11% from 8 launches: Student's t"),
        (8, "at least twice it): not counted"),
        (2, "two launches a side tell little"),
        (1, "one launch each"),
    ] {
        let sbs = input.side_by_side.as_mut().unwrap();
        sbs.distinct = false;
        sbs.launches = launches;
        let r = recommend(&input).unwrap();
        assert_eq!(
            r.rows[0].prediction.speedup,
            plain.rows[0].prediction.speedup
        );
        assert!(r.reasons.iter().any(|x| x.text.contains(says)), "{says}");
    }
    // Timed against one GPU alone inside the nocomm run's own launches: said so.
    let sbs = input.side_by_side.as_mut().unwrap();
    (sbs.distinct, sbs.launches, sbs.within_launch) = (true, 8, true);
    let paired = recommend(&input).unwrap();
    assert!(paired.reasons.iter().any(|r| r
        .text
        .contains("20% slower than one GPU alone in the same launches")));
    assert_eq!(paired.rows, crowded.rows);
    // Below 1 is noise: never a speed-up.
    let sbs = input.side_by_side.as_mut().unwrap();
    sbs.measured_ratio = 0.9;
    sbs.distinct = true;
    let noisy = recommend(&input).unwrap();
    assert_eq!(
        noisy.rows[0].prediction.speedup,
        plain.rows[0].prediction.speedup
    );
    input.side_by_side.as_mut().unwrap().measured_ratio = f64::NAN;
    assert!(recommend(&input).is_err());
    // Unmeasured: warned only for short steps whose compute was measured (a DDP runner was
    // at hand); long steps are not slowed enough to matter.
    assert!(!codes(&plain).contains(&"side_by_side_unmeasured"));
    let mut measured = a6000_input();
    measured.compute = ComputeSource::Measured {
        seconds: 0.130,
        detail: "1-GPU run".into(),
    };
    assert!(!codes(&recommend(&measured).unwrap()).contains(&"side_by_side_unmeasured"));
    measured.compute = ComputeSource::Measured {
        seconds: 0.005,
        detail: "1-GPU run".into(),
    };
    assert!(codes(&recommend(&measured).unwrap()).contains(&"side_by_side_unmeasured"));
}

#[test]
fn a_measured_baseline_calibrates_every_variant() {
    // The seed-000 box measured 2x on four GPUs with plain DDP: a 130 ms micro-batch and a
    // 4 x 130 ms / 2 = 260 ms step. The model alone predicts a faster step (it hides part of the
    // all-reduce behind the backward pass); calibrated on the measured step it gives that
    // step back for plain DDP, and the other variants move the same way.
    let plain = recommend(&a6000_input()).unwrap();
    let row = |r: &Recommendation, v: &str| {
        r.rows
            .iter()
            .find(|x| x.variant == v)
            .unwrap()
            .prediction
            .clone()
    };
    let measured_step = 4.0 * 0.130 / 2.0;
    assert!(
        row(&plain, "base").step_s < measured_step * 0.97,
        "{}",
        row(&plain, "base").step_s
    );
    let mut input = a6000_input();
    input.baseline = Some(MeasuredBaseline {
        step_s: measured_step,
        rests_on: "seed 000".into(),
    });
    let fitted = recommend(&input).unwrap();
    let base = row(&fitted, "base");
    assert!(
        (base.step_s / measured_step - 1.0).abs() < 1e-3,
        "{}",
        base.step_s
    );
    assert!(
        fitted
            .overheads_source
            .contains("calibrated on plain DDP's measured step"),
        "{}",
        fitted.overheads_source
    );
    for v in ["bf16", "accum2", "bf16+accum2"] {
        assert!(row(&fitted, v).step_s > row(&plain, v).step_s, "{v}");
    }
}

#[test]
fn a_model_that_reproduces_the_measured_rows_keeps_its_choice() {
    let plain = recommend(&a6000_input()).unwrap();
    assert!(
        plain.model_check.is_none(),
        "nothing measured, nothing checked"
    );
    // Each measured row within 10% of its prediction, one either way.
    let (b, h) = (predicted(&plain, "base"), predicted(&plain, "bf16"));
    let r = recommend(&with_measured(&[("base", b * 0.95), ("bf16", h * 1.08)])).unwrap();
    let check = r.model_check.as_ref().unwrap();
    assert!(check.reliable, "{check:?}");
    assert_eq!(check.rows.len(), 2);
    assert!(check.unmeasured_pick.is_none());
    assert_eq!(r.chosen, plain.chosen, "the model's choice stands");
    assert!(!codes(&r).contains(&"model_unreliable"));
}

#[test]
fn a_measured_row_the_model_missed_reaches_the_target_by_its_measurement() {
    let plain = recommend(&a6000_input()).unwrap();
    let pick = plain.chosen.clone();
    let row = |r: &Recommendation| r.rows.iter().find(|x| x.variant == pick).cloned().unwrap();
    assert!(
        row(&plain).reaches_target,
        "the model's pick reaches the target"
    );
    // Measured at 60% of its prediction, below the target: the column follows the measurement.
    let r = recommend(&with_measured(&[(&pick, predicted(&plain, &pick) * 0.6)])).unwrap();
    assert!(!r.model_check.as_ref().unwrap().reliable);
    let x = row(&r);
    assert!(x.prediction.efficiency >= r.target_efficiency);
    assert!(!x.reaches_target, "{x:?}");
}

#[test]
fn a_model_that_misses_a_measured_row_is_overruled_by_the_measurements() {
    let plain = recommend(&a6000_input()).unwrap();
    // The model predicts a predicted row (bf16 with accumulation); the node measured three
    // rows far below their predictions (as CPU ranks did against their calibrated model).
    assert!(plain.chosen.contains("accum"), "{}", plain.chosen);
    let (b, h, a) = (
        predicted(&plain, "base"),
        predicted(&plain, "bf16"),
        predicted(&plain, "accum4"),
    );
    let r = recommend(&with_measured(&[
        ("base", b * 0.7),
        ("bf16", h * 0.5),
        ("accum4", a * 0.6),
    ]))
    .unwrap();
    let check = r.model_check.as_ref().unwrap();
    assert!(!check.reliable);
    let missed: Vec<&str> = check.misses().map(|m| m.variant.as_str()).collect();
    assert_eq!(missed, ["base", "bf16", "accum4"]);
    // No predicted row over a measured one: the best measured row, by its measurement.
    let measured = |v: &str| {
        r.rows
            .iter()
            .find(|x| x.variant == v)
            .and_then(|x| x.measured.as_ref())
            .map(|m| m.speedup)
    };
    let chosen = measured(&r.chosen).expect("the chosen row is a measured one");
    // Each measured row's target column is its measurement's, not the missed prediction's.
    for x in r.rows.iter().filter(|x| x.measured.is_some()) {
        let e = x.measured.as_ref().unwrap().speedup / f64::from(r.gpus);
        assert_eq!(x.reaches_target, e >= r.target_efficiency, "{}", x.variant);
    }
    for v in ["base", "bf16", "accum4"] {
        assert!(chosen >= measured(v).unwrap(), "{v}");
    }
    // The text says which rows it missed and by how much, and the run that settles the
    // model's own pick, which nobody measured.
    assert_eq!(
        check.unmeasured_pick.as_deref(),
        Some(plain.chosen.as_str())
    );
    let w = warning(&r, "model_unreliable");
    let base_error = (b - b * 0.7) / (b * 0.7) * 100.0;
    assert!(
        w.text.contains(&format!("base by {base_error:+.0}%")),
        "{}",
        w.text
    );
    assert!(
        w.text.contains(&plain.chosen) && w.text.contains("--verify"),
        "{}",
        w.text
    );
    assert!(w.rests_on.contains("launch of bf16"), "{}", w.rests_on);
    assert!(
        r.summary.contains("Chosen from the measured rows only"),
        "{}",
        r.summary
    );
    // The answer speaks of the measured figure.
    let answer = r.answer.as_ref().unwrap();
    assert!(answer.measured && (answer.times_sooner - chosen).abs() < 1e-12);

    // Every measured row slower than one GPU: one GPU, whatever the model predicted.
    let r = recommend(&with_measured(&[
        ("base", 0.6),
        ("bf16", 0.4),
        ("accum4", 0.7),
    ]))
    .unwrap();
    assert!(r.use_one_gpu, "{}", r.summary);
    assert!(r.summary.starts_with("Train on one GPU"), "{}", r.summary);
}

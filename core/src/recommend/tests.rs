//! Tests of the recommendation: the choice, its reasons and warnings, on the seed machines.

use std::collections::BTreeMap;

use super::choice::CHANGE_ORDER;
use super::*;
use crate::backend::BackendKind;
use crate::ddp::ModelSpec;
use crate::step_time::{Calibration, CrossCheck, LinkCurve};
use crate::topology::LinkClass;
use crate::units::fmt_s;

/// The seed-000 machine: 4× A6000, PHB, flat 4.3 GB/s, $2.64/h, 130 ms per micro-batch.
pub(super) fn a6000_input() -> RecommendInput {
    RecommendInput {
        model: ModelInput::Spec {
            spec: ModelSpec::gpt2_124m(),
        },
        micro_batch: 8,
        seq: 1024,
        tokens_per_sample: None,
        gpus: 4,
        node_gpus: 4,
        price_per_hour: Some(2.64),
        target_efficiency: 0.85,
        curve: LinkCurve::flat(4, 4.3, 0.0).unwrap(),
        curve_provenance: CurveProvenance {
            host: "runcrate-a6000x4".into(),
            time: "2026-10-26T09:00:00Z".into(),
            backend: None,
            label: "seed 000".into(),
            method: String::new(),
        },
        worst_link: Some(LinkClass::Phb),
        nccl_env: BTreeMap::new(),
        env_ab: Vec::new(),
        p2p: None,
        compute: ComputeSource::Given {
            seconds: 0.130,
            detail: "seed 000".into(),
        },
        calibration: None,
        bucket_cap_mb: None,
        gpu_memory_bytes: Some(48 << 30),
        memory_peak: None,
        optimizer_s: None,
        hook_compute_s: None,
        hook_rests_on: None,
        powersgd_compute: Vec::new(),
        side_by_side: None,
        measured: Vec::new(),
        other_curve: None,
        baseline: None,
        param_layout: None,
        recipe: Default::default(),
        ddp_own_work: None,
        reference: crate::ddp::Reference::Plain,
        host: None,
        other_recipe: None,
        device: Default::default(),
    }
}

#[test]
fn a_hook_is_judged_against_one_gpu_without_it() {
    // The seed box recommends bf16 with accumulation: the hook halves 475 MiB on the wire.
    let plain = recommend(&a6000_input()).unwrap();
    assert_eq!(plain.chosen, "bf16+accum2");
    // Casts that cost more than the wire saves: against one GPU without the hook (the
    // reference of every variant of the same accumulation), each hooked variant is less
    // efficient than the same accumulation without it, and none is chosen.
    let mut input = a6000_input();
    input.hook_compute_s = Some(1.0);
    let r = recommend(&input).unwrap();
    let row = |v: &str| r.rows.iter().find(|x| x.variant == v).unwrap();
    for (hooked, unhooked) in [
        ("bf16", "base"),
        ("bf16+accum2", "accum2"),
        ("bf16+accum8", "accum8"),
    ] {
        let (h, u) = (&row(hooked).prediction, &row(unhooked).prediction);
        assert!(
            (h.single_gpu_step_s - u.single_gpu_step_s).abs() < 1e-12,
            "{hooked}"
        );
        assert!(
            h.efficiency < u.efficiency && h.throughput < u.throughput,
            "{hooked}"
        );
    }
    assert_eq!(row(&r.chosen).hook, CommHook::None, "{}", r.chosen);
}

#[test]
fn a_chosen_hooks_own_cost_is_cited_with_what_it_adds_to_the_step() {
    let plain = recommend(&a6000_input()).unwrap();
    let mut input = a6000_input();
    input.hook_compute_s = Some(0.005);
    input.hook_rests_on = Some("1-GPU bf16 run over base (test)".into());
    let r = recommend(&input).unwrap();
    assert_eq!(r.chosen, "bf16+accum2");
    let reason = r
        .reasons
        .iter()
        .find(|x| x.text.starts_with("The hook itself costs"))
        .expect("a reason for the hook's own cost");
    assert_eq!(reason.rests_on, "1-GPU bf16 run over base (test)");
    // What it adds is the chosen step with the cost against the same step without it: less
    // than the cost, as the seed's slow link still has earlier buckets queued when later
    // shares are paid.
    let step = |r: &Recommendation| {
        r.rows
            .iter()
            .find(|x| x.variant == "bf16+accum2")
            .unwrap()
            .prediction
            .step_s
    };
    let added = step(&r) - step(&plain);
    assert!(added > 0.0 && added < 0.005 - 1e-4, "{added}");
    assert!(reason.text.contains(&fmt_s(added)), "{}", reason.text);
    // Without a measured cost there is nothing to cite.
    assert!(!plain
        .reasons
        .iter()
        .any(|x| x.text.starts_with("The hook itself costs")));
}

pub(super) fn codes(r: &Recommendation) -> Vec<&str> {
    r.warnings.iter().map(|w| w.code.as_str()).collect()
}

/// The recommendation's warning of this code (the test fails without one).
pub(super) fn warning<'a>(r: &'a Recommendation, code: &str) -> &'a Warning {
    r.warnings
        .iter()
        .find(|w| w.code == code)
        .unwrap_or_else(|| panic!("no {code} warning in {:?}", codes(r)))
}

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
fn a6000_picks_a_cheap_fix_and_explains_it() {
    let mut input = a6000_input();
    input.nccl_env.insert("NCCL_P2P_LEVEL".into(), "SYS".into());
    input.env_ab.push(EnvAb {
        label: "NCCL_P2P_LEVEL=SYS".into(),
        busbw_ratio: 2.3 / 4.3,
    });
    let r = recommend(&input).unwrap();
    assert_eq!(r.rows.len(), 9);
    let names: Vec<&str> = r.rows.iter().map(|x| x.variant.as_str()).collect();
    assert_eq!(names[..3], ["base", "fp16", "bf16"]);
    // The chosen variant reaches the target, and every cheaper change does not.
    assert!(r.reaches_target && !r.use_one_gpu);
    let pos = CHANGE_ORDER.iter().position(|v| *v == r.chosen).unwrap();
    for cheaper in &CHANGE_ORDER[..pos] {
        let row = r.rows.iter().find(|x| x.variant == *cheaper).unwrap();
        assert!(!row.reaches_target, "{cheaper} already reaches the target");
    }
    let chosen = r.rows.iter().find(|x| x.variant == r.chosen).unwrap();
    assert!(chosen.prediction.efficiency >= 0.85);
    // Reasons cite measurements; the curve's reason cites its provenance.
    assert!(r.reasons.iter().all(|x| !x.rests_on.is_empty()));
    assert!(r
        .reasons
        .iter()
        .any(|x| x.rests_on.contains("4.30 GB/s") && x.rests_on.contains("runcrate-a6000x4")));
    // One GPU is cheaper per token, and the output says so.
    assert!(r
        .reasons
        .iter()
        .any(|x| x.text.contains("one GPU is cheaper")));
    // Warnings: forced P2P on PHB (with the A/B ratio), bucket_cap_mb, FSDP, accumulation.
    let c = codes(&r);
    for want in ["p2p_forced_across_host_bridge", "bucket_cap_mb", "fsdp"] {
        assert!(c.contains(&want), "{want} missing from {c:?}");
    }
    assert_eq!(
        c.contains(&"accumulation_changes_batch"),
        r.chosen_accum > 1
    );
    let p2p = warning(&r, "p2p_forced_across_host_bridge");
    assert!(p2p.rests_on.contains("×0.53"), "{}", p2p.rests_on);
    assert!(r.env.iter().any(|l| l.starts_with("unset NCCL_P2P_LEVEL")));
    // Python for the chosen variant.
    if r.chosen_hook == CommHook::Bf16 {
        assert!(r.python.contains("default_hooks.bf16_compress_hook"));
    }
    if r.chosen_accum > 1 {
        assert!(r.python.contains("ddp.no_sync()"));
        assert!(r.python.contains(&format!("ACCUM = {}", r.chosen_accum)));
    }
    // JSON: read back, the same choice.
    let json = serde_json::to_string(&r).unwrap();
    let back: Recommendation = serde_json::from_str(&json).unwrap();
    assert_eq!(
        (back.chosen, back.rows.len()),
        (r.chosen.clone(), r.rows.len())
    );
}

#[test]
fn a_hook_alone_is_preferred_to_accumulation() {
    // Target between baseline and bf16's efficiency: the hook is enough, no accumulation.
    let mut input = a6000_input();
    let base = recommend(&input).unwrap();
    let eff = |r: &Recommendation, v: &str| {
        r.rows
            .iter()
            .find(|x| x.variant == v)
            .unwrap()
            .prediction
            .efficiency
    };
    let (b, h) = (eff(&base, "base"), eff(&base, "bf16"));
    assert!(b < h);
    input.target_efficiency = 0.5 * (b + h);
    let r = recommend(&input).unwrap();
    assert_eq!((r.chosen.as_str(), r.chosen_accum), ("bf16", 1));
    assert!(!codes(&r).contains(&"accumulation_changes_batch"));
    assert!(!r.python.contains("no_sync"));
    // A target the baseline meets: DDP as it is.
    input.target_efficiency = 0.5 * b;
    let r = recommend(&input).unwrap();
    assert_eq!(r.chosen, "base");
    assert!(r.summary.contains("DDP as it is"));
}

#[test]
fn unreachable_target_names_the_best() {
    let mut input = a6000_input();
    input.target_efficiency = 0.999;
    let r = recommend(&input).unwrap();
    assert!(!r.reaches_target);
    assert_eq!(r.chosen, "bf16+accum8");
    assert!(r.summary.starts_with("No variant reaches"));
}

#[test]
fn one_gpu_when_every_variant_loses() {
    // A slow link, a large model, a tiny step.
    let mut input = a6000_input();
    input.gpus = 2;
    input.curve = LinkCurve::flat(2, 0.5, 100e-6).unwrap();
    input.compute = ComputeSource::Given {
        seconds: 0.005,
        detail: "test".into(),
    };
    let r = recommend(&input).unwrap();
    assert!(r.use_one_gpu);
    assert_eq!(r.chosen, "1 GPU");
    assert!(codes(&r).contains(&"one_gpu_faster"));
    assert!(r.summary.starts_with("Train on one GPU"));
}

#[test]
fn a_second_measurement_of_the_link_that_parts_from_the_curve_is_warned() {
    let mut input = a6000_input();
    let other = |busbw: f64| OtherCurve {
        curve: LinkCurve::flat(4, busbw, 30e-6).unwrap(),
        provenance: CurveProvenance {
            host: "node".into(),
            time: "2026-11-30T18:00:00Z".into(),
            backend: Some(BackendKind::Real),
            label: String::new(),
            method: String::new(),
        },
    };
    let at_bucket = recommend(&input).unwrap().curve.busbw_at_bucket_gbps;
    // 10% apart: within what two measurements of a steady link give.
    input.other_curve = Some(other(at_bucket / 1.10));
    assert!(!codes(&recommend(&input).unwrap()).contains(&"network_moved"));
    // 25% apart either way: warned, citing both.
    for factor in [1.25, 1.0 / 1.25] {
        input.other_curve = Some(other(at_bucket / factor));
        let r = recommend(&input).unwrap();
        let w = warning(&r, "network_moved");
        assert!(w.text.contains(&format!("{factor:.2}×")), "{}", w.text);
        assert!(
            w.rests_on
                .contains("the other: measured node 2026-11-30T18:00:00Z"),
            "{}",
            w.rests_on
        );
    }
    // Another rank count is another link: not compared.
    input.other_curve = Some(OtherCurve {
        curve: LinkCurve::flat(2, at_bucket / 1.5, 30e-6).unwrap(),
        ..other(1.0)
    });
    assert!(!codes(&recommend(&input).unwrap()).contains(&"network_moved"));
}

#[test]
fn nvlink_with_transports_disabled_is_warned() {
    let mut input = a6000_input();
    input.gpus = 2;
    input.node_gpus = 2;
    input.worst_link = Some(LinkClass::Nv(18));
    input.curve = LinkCurve::flat(2, 3.9, 30e-6).unwrap();
    input.nccl_env.insert("NCCL_P2P_DISABLE".into(), "1".into());
    input.nccl_env.insert("NCCL_SHM_DISABLE".into(), "1".into());
    input.curve_provenance.backend = Some(BackendKind::Real);
    let r = recommend(&input).unwrap();
    let w = warning(&r, "nvlink_transport_disabled");
    assert!(w.text.contains("NCCL_P2P_DISABLE and NCCL_SHM_DISABLE"));
    assert!(r
        .env
        .iter()
        .any(|l| l.contains("unset NCCL_P2P_DISABLE NCCL_SHM_DISABLE")));
    assert!(!codes(&r).contains(&"p2p_forced_across_host_bridge"));
    assert!(r.curve.provenance.starts_with("measured"));
}

#[test]
fn estimated_compute_and_simulated_curve_are_flagged() {
    let mut input = a6000_input();
    let flops = estimate_flops(&input.model, 8, 1024);
    input.compute = ComputeSource::Estimated {
        flops,
        tflops: 60.0,
    };
    input.curve_provenance.backend = Some(BackendKind::Sim);
    input.env_ab.push(EnvAb {
        label: "NCCL_ALGO=Ring,NCCL_PROTO=Simple".into(),
        busbw_ratio: 1.2,
    });
    let r = recommend(&input).unwrap();
    let c = codes(&r);
    assert!(c.contains(&"compute_estimated") && c.contains(&"curve_simulated"));
    assert!(r.compute.describe().starts_with("ESTIMATE"));
    assert!(r.curve.provenance.starts_with("SIMULATED"));
    assert!(r.env.iter().any(|l| l.starts_with("export NCCL_ALGO=Ring")));
    assert!(r
        .env
        .iter()
        .any(|l| l.starts_with("export NCCL_PROTO=Simple")));
    // No P2P warning: nothing forced, no A/B against it.
    assert!(!c.contains(&"p2p_forced_across_host_bridge"));
}

#[test]
fn mlp_counts_samples_and_params_only_works() {
    let mut input = a6000_input();
    input.model = ModelInput::Spec {
        spec: ModelSpec::square_mlp(1024, 4),
    };
    input.micro_batch = 256;
    let r = recommend(&input).unwrap();
    assert_eq!(r.throughput_unit, "samples/s");
    assert_eq!(r.units_per_micro_batch, 256.0);
    input.model = ModelInput::Params {
        params: 124_000_000,
    };
    input.micro_batch = 8;
    let r = recommend(&input).unwrap();
    assert_eq!(r.throughput_unit, "tokens/s");
    assert_eq!(r.params, 124_000_000);
}

#[test]
fn single_gpu_and_invalid_input() {
    let mut input = a6000_input();
    input.gpus = 1;
    let r = recommend(&input).unwrap();
    assert_eq!(r.chosen, "base");
    assert!(r.rows.iter().all(|x| x.prediction.speedup == 1.0));
    let mut bad = a6000_input();
    bad.target_efficiency = 0.0;
    assert!(recommend(&bad).is_err());
    let mut bad = a6000_input();
    bad.gpus = 0;
    assert!(recommend(&bad).is_err());
    let mut bad = a6000_input();
    bad.compute = ComputeSource::Given {
        seconds: -1.0,
        detail: String::new(),
    };
    assert!(recommend(&bad).is_err());
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
fn pick_takes_the_simplest_change_that_reaches_the_target_else_the_most_efficient() {
    let rows = [
        ("base", 0.80),
        ("accum8", 0.95),
        ("bf16", 0.88),
        ("accum4", 0.90),
    ];
    // bf16 is a simpler change than accumulation and reaches 0.85.
    let p = super::pick(&rows, 0.85).unwrap();
    assert_eq!(
        (rows[p.chosen].0, rows[p.best].0, p.reaches_target),
        ("bf16", "accum8", true)
    );
    // Plain DDP reaches a lower target and stays.
    let p = super::pick(&rows, 0.75).unwrap();
    assert_eq!(rows[p.chosen].0, "base");
    // Nothing reaches 0.99: the most efficient is named.
    let p = super::pick(&rows, 0.99).unwrap();
    assert_eq!((rows[p.chosen].0, p.reaches_target), ("accum8", false));
    assert_eq!(super::pick(&[], 0.85), None);
}

/// DDP's own work of the test: 150.8 ms in DDP against 130 ms without (+16%).
fn own_work_16() -> DdpOwnWork {
    DdpOwnWork {
        ddp_step_s: 0.1508,
        plain_step_s: 0.130,
        ratio: 1.16,
        noise_bound: None,
        rests_on: "1-GPU base run of the test".into(),
    }
}

#[test]
fn with_the_ddp_reference_the_own_work_warning_turns_the_speedup_into_one_without_ddp() {
    let without = recommend(&a6000_input()).unwrap();
    assert!(!codes(&without).contains(&"ddp_own_work"));
    let mut input = a6000_input();
    input.ddp_own_work = Some(own_work_16());
    input.reference = crate::ddp::Reference::Ddp;
    let r = recommend(&input).unwrap();
    assert_eq!(r.reference, crate::ddp::Reference::Ddp);
    let w = warning(&r, "ddp_own_work");
    let row = r.rows.iter().find(|x| x.variant == r.chosen).unwrap();
    let against_plain = format!(
        "x{:.2}, not x{:.2}",
        row.prediction.speedup / 1.16,
        row.prediction.speedup
    );
    assert!(
        w.text.contains("+16.0% of a step")
            && w.text.contains("divide them by 1.160")
            && w.text.contains(&against_plain),
        "{}",
        w.text
    );
    assert_eq!(w.rests_on, "1-GPU base run of the test");
    // Nothing else moves: the prediction is against one GPU in DDP, as measured.
    assert_eq!(r.chosen, without.chosen);
}

#[test]
fn against_one_gpu_without_ddp_the_own_work_is_part_of_every_step() {
    let without = recommend(&a6000_input()).unwrap();
    assert_eq!(
        without.reference,
        crate::ddp::Reference::Ddp,
        "no plain step measured"
    );
    let mut input = a6000_input();
    input.ddp_own_work = Some(own_work_16());
    let r = recommend(&input).unwrap();
    assert_eq!(r.reference, crate::ddp::Reference::Plain);
    assert_eq!(r.ddp_over_plain, Some(1.16));
    // 150.8 ms less 150.8 / 1.16 ms: 20.8 ms added to every step, none to the reference.
    let own = 0.1508 * (1.0 - 1.0 / 1.16);
    for (a, b) in r.rows.iter().zip(&without.rows) {
        assert_eq!(a.variant, b.variant);
        let (pa, pb) = (&a.prediction, &b.prediction);
        assert!((pa.step_s - pb.step_s - own).abs() < 1e-12, "{}", a.variant);
        assert_eq!(pa.single_gpu_step_s, pb.single_gpu_step_s);
        assert!(pa.speedup < pb.speedup, "{}", a.variant);
    }
    let w = warning(&r, "ddp_own_work");
    assert!(
        w.text.contains("+16.0% of a step") && w.text.contains("without DDP, and every step"),
        "{}",
        w.text
    );
}

#[test]
fn a_node_measured_against_one_gpu_without_ddp_is_reproduced_with_its_own_work() {
    // The node as the model with DDP's own work describes it: its plain DDP step at 4 GPUs
    // and the speedups of three rows, each against one GPU without DDP.
    let mut truth = a6000_input();
    truth.ddp_own_work = Some(own_work_16());
    let t = recommend(&truth).unwrap();
    let row = |v: &str| t.rows.iter().find(|x| x.variant == v).unwrap();
    let measured: Vec<(&str, f64)> = ["base", "accum8", "bf16+accum2"]
        .iter()
        .map(|&v| (v, row(v).prediction.speedup))
        .collect();
    let mut input = with_measured(&measured);
    input.ddp_own_work = Some(own_work_16());
    input.baseline = Some(MeasuredBaseline {
        step_s: row("base").prediction.step_s,
        rests_on: "base at 4 GPUs".into(),
    });
    let r = recommend(&input).unwrap();
    let check = r.model_check.as_ref().unwrap();
    assert!(check.reliable, "{check:?}");
    assert!(check.rows.iter().all(|c| c.error.abs() < 0.02), "{check:?}");
}

/// The a6000 input with these speedups measured at its 4 GPUs, one launch each.
fn with_measured(speedups: &[(&str, f64)]) -> RecommendInput {
    let mut input = a6000_input();
    input.measured = speedups
        .iter()
        .map(|&(variant, speedup)| MeasuredSpeedup {
            variant: variant.into(),
            speedup,
            uncertainty: None,
            noise_bound: None,
            rests_on: format!("launch of {variant}"),
        })
        .collect();
    input
}

fn predicted(r: &Recommendation, name: &str) -> f64 {
    r.rows
        .iter()
        .find(|x| x.variant == name)
        .unwrap()
        .prediction
        .speedup
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

#[test]
fn the_first_line_says_how_much_sooner_and_at_what_gpu_time_and_cost() {
    let r = recommend(&a6000_input()).unwrap();
    let a = r.answer.as_ref().unwrap();
    let row = r.rows.iter().find(|x| x.variant == r.chosen).unwrap();
    assert!(!a.measured);
    assert_eq!(a.times_sooner, row.prediction.speedup);
    // N GPUs spend N / speedup times one GPU's device time on the same tokens.
    assert!((a.gpu_time_ratio() - 4.0 / a.times_sooner).abs() < 1e-9);
    // The node's $2.64/h is split over its 4 GPUs; money follows GPU time.
    assert_eq!(a.price_per_gpu_hour, Some(0.66));
    let cost = a.cost_per_million.unwrap();
    assert!((cost - 0.66 * a.gpu_seconds_per_million / 3600.0).abs() < 1e-12);
    assert!((cost - row.cost_per_million.unwrap()).abs() / cost < 1e-9);
    // Below 100% efficiency one GPU is cheaper per token: said, with when N GPUs pay.
    assert!(a.one_gpu_cheaper());
    let pct = (a.gpu_time_ratio() - 1.0) * 100.0;
    for want in [
        format!(
            "4 GPUs finish the same work {:.2}× sooner than one GPU (predicted)",
            a.times_sooner
        ),
        format!("{pct:.0}% more GPU time per million tokens"),
        "at $0.6600 a GPU-hour".to_string(),
        "use 4 GPUs when wall-clock time matters, not to save money".to_string(),
    ] {
        assert!(r.summary.contains(&want), "{want}: {}", r.summary);
    }
    // Without a price, GPU time alone; the JSON keeps the answer.
    let mut input = a6000_input();
    input.price_per_hour = None;
    let r = recommend(&input).unwrap();
    assert!(!r.summary.contains('$'), "{}", r.summary);
    let back: Recommendation = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    assert_eq!(back.answer.unwrap().gpus, 4);
    // A price that is no positive number is refused.
    for bad in [0.0, -1.0, f64::INFINITY, f64::NAN] {
        input.price_per_hour = Some(bad);
        assert!(recommend(&input).is_err(), "{bad}");
    }
}

#[test]
fn cpu_ranks_speak_of_cpu_ranks_and_gloo_never_of_gpus() {
    let mut input = a6000_input();
    input.device = crate::ddp::RunDevice::Cpu;
    input.worst_link = None;
    let r = recommend(&input).unwrap();
    let names: Vec<&str> = r.rows.iter().map(|x| x.variant.as_str()).collect();
    assert!(names.iter().all(|n| !n.contains("bf16")), "{names:?}");
    assert!(names.contains(&"fp16+accum4"), "{names:?}");
    assert_ne!(r.chosen_hook, CommHook::Bf16);
    let mut text = vec![r.summary.clone(), r.python.clone()];
    text.extend(r.reasons.iter().map(|x| x.text.clone()));
    text.extend(r.warnings.iter().map(|x| x.text.clone()));
    text.extend(r.env.iter().cloned());
    for t in &text {
        assert!(
            !t.contains("GPU") && !t.to_lowercase().contains("cuda"),
            "{t}"
        );
    }
    assert!(r.summary.contains("4 CPU ranks"), "{}", r.summary);
    assert!(r.python.contains("backend=\"gloo\""), "{}", r.python);
    // A measured fp16 + accumulation row of CPU ranks has its row there.
    assert_eq!(
        variant_name_on(crate::ddp::RunDevice::Cpu, CommHook::Fp16, 4),
        Some("fp16+accum4")
    );
}

/// Under --compile the bucket advice names the graph breaks DDPOptimizer makes (one compiled
/// piece per bucket, pytorch issue 108966); eager advice does not speak of them.
#[test]
fn bucket_advice_under_compile_names_the_graph_pieces() {
    let eager = recommend(&a6000_input()).unwrap();
    assert!(!warning(&eager, "bucket_cap_mb").text.contains("graph"));
    let mut input = a6000_input();
    input.recipe.compile = Some(crate::ddp::CompileMode::Default);
    let r = recommend(&input).unwrap();
    let text = &warning(&r, "bucket_cap_mb").text;
    assert!(
        text.contains("bucket_cap_mb also sets how many graph pieces torch.compile makes"),
        "{text}"
    );
    assert!(text.contains("issue 108966"), "{text}");
    // The pieces at the size in use are the buckets the model packs there.
    let base = &super::basis::Basis::new(&input).unwrap().base;
    let n = base.buckets().len();
    assert!(
        text.contains(&format!("{n} at 25 MB ({} graph breaks)", n - 1)),
        "{n}: {text}"
    );
}

/// PowerSGD's compression compute at `rank` as a 1-GPU launch would report it (test input).
fn powersgd_measured(rank: u32, compute_s: f64) -> PowerSgdMeasured {
    PowerSgdMeasured {
        rank,
        compute_s,
        rests_on: format!("1-GPU powersgd{rank} run over base (test)"),
    }
}

#[test]
fn powersgd_is_offered_on_a_slow_link_with_its_compute_measured() {
    let mut input = a6000_input();
    input.curve = LinkCurve::flat(4, 1.0, 50e-6).unwrap();
    input.powersgd_compute = vec![powersgd_measured(4, 0.015)];
    let r = recommend(&input).unwrap();
    let o = r.powersgd.expect("an assessment on 4 GPUs");
    assert_eq!(o.rank, Some(4), "{o:?}");
    assert_eq!(o.against, CommHook::Bf16);
    assert!(o.why_not.is_none());
    let row = o.rows.iter().find(|x| x.rank == 4).unwrap();
    assert!(row.step_s.unwrap() < o.against_step_s);
    assert_eq!(row.compute_s, Some(0.015));
    // The ranks nobody measured stay unpriced.
    assert!(o
        .rows
        .iter()
        .filter(|x| x.rank != 4)
        .all(|x| x.step_s.is_none()));
    assert!(o.snippet.unwrap().contains("matrix_approximation_rank=4,"));
    assert!(o.numerics.contains("72.5%") && o.numerics.contains("epfml/powersgd"));
    assert_eq!(o.start_iter, 1_000);
    assert!(o.error_feedback_bytes > 0.0);
    assert!(o.rests_on.unwrap().contains("powersgd4"));
}

#[test]
fn powersgd_is_withheld_where_the_model_missed_the_measured_rows() {
    let mut input = a6000_input();
    input.curve = LinkCurve::flat(4, 1.0, 50e-6).unwrap();
    input.powersgd_compute = vec![powersgd_measured(4, 0.015)];
    let offered = recommend(&input).unwrap();
    assert_eq!(offered.powersgd.as_ref().unwrap().rank, Some(4));
    // The node measured plain DDP far below the model's prediction: PowerSGD's rank is a
    // prediction too, so it is not offered over what was measured; --verify measures it.
    let b = predicted(&offered, "base");
    input.measured = vec![MeasuredSpeedup {
        variant: "base".into(),
        speedup: b * 0.6,
        uncertainty: None,
        noise_bound: None,
        rests_on: "launch of base".into(),
    }];
    let r = recommend(&input).unwrap();
    assert!(!r.model_check.as_ref().unwrap().reliable);
    let o = r.powersgd.unwrap();
    assert_eq!(o.rank, None, "{o:?}");
    assert_eq!(o.withheld_rank, Some(4));
    assert!(o.snippet.is_none());
    let why = o.why_not.unwrap();
    assert!(
        why.contains("model_unreliable") && why.contains("--verify measures powersgd4"),
        "{why}"
    );
    assert!(why.contains("base by +67%"), "{why}");
}

#[test]
fn powersgd_is_not_offered_where_bf16_is_faster() {
    let mut input = a6000_input();
    input.curve = LinkCurve::flat(4, 400.0, 20e-6).unwrap();
    input.powersgd_compute = [1, 2, 4, 8]
        .into_iter()
        .map(|r| powersgd_measured(r, 0.015))
        .collect();
    let o = recommend(&input).unwrap().powersgd.unwrap();
    assert_eq!(o.rank, None, "{o:?}");
    assert!(o.snippet.is_none());
    assert_eq!(o.why_not.as_deref(), Some("bf16 beats every rank"));
}

#[test]
fn a_losing_rank_names_only_the_lower_ranks_left_to_measure() {
    let mut input = a6000_input();
    input.curve = LinkCurve::flat(4, 400.0, 20e-6).unwrap();
    input.powersgd_compute = vec![powersgd_measured(4, 0.015)];
    let o = recommend(&input).unwrap().powersgd.unwrap();
    assert_eq!(
        o.why_not.as_deref(),
        Some("bf16 beats every measured rank (4); ranks 1, 2 send less but their compression compute is unmeasured: run bench ddp --gpus 1 --variants base,powersgd1,powersgd2")
    );
    input.powersgd_compute = vec![powersgd_measured(1, 0.015)];
    let o = recommend(&input).unwrap().powersgd.unwrap();
    assert_eq!(
        o.why_not.as_deref(),
        Some("bf16 beats every measured rank (1); a higher rank sends and computes more")
    );
}

#[test]
fn powersgd_with_its_compute_unmeasured_is_not_offered_and_says_what_to_run() {
    let mut input = a6000_input();
    input.curve = LinkCurve::flat(4, 1.0, 50e-6).unwrap();
    let o = recommend(&input).unwrap().powersgd.unwrap();
    assert_eq!(o.rank, None, "{o:?}");
    assert_eq!(
        o.why_not.as_deref(),
        Some("compression compute unmeasured: run bench ddp --gpus 1 --variants base,powersgd4")
    );
    // One GPU has nothing to compress: no assessment.
    input.gpus = 1;
    assert!(recommend(&input).unwrap().powersgd.is_none());
}

#[test]
fn powersgd_on_cpu_ranks_is_judged_against_fp16() {
    let mut input = a6000_input();
    input.device = RunDevice::Cpu;
    input.curve = LinkCurve::flat(4, 1.0, 50e-6).unwrap();
    input.powersgd_compute = vec![powersgd_measured(1, 0.015)];
    let o = recommend(&input).unwrap().powersgd.unwrap();
    assert_eq!(o.against, CommHook::Fp16);
    assert_eq!(o.rank, Some(1), "{o:?}");
    // Unmeasured there, the launch named runs on CPU ranks.
    input.powersgd_compute.clear();
    let o = recommend(&input).unwrap().powersgd.unwrap();
    assert!(o
        .why_not
        .unwrap()
        .ends_with("--variants base,powersgd4 --device cpu"),);
}

//! Tests of the recommendation: the choice, its reasons and warnings, on the seed machines; and
//! the builders the recommendation's other test files share.

use super::choice::CHANGE_ORDER;
use super::*;
use crate::backend::BackendKind;
use crate::ddp::ModelSpec;
use crate::step_time::LinkCurve;
use crate::topology::LinkClass;
use crate::units::fmt_s;

pub(super) use crate::testkit::a6000_input;

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
fn a6000_picks_a_cheap_fix_and_explains_it() {
    let input = crate::testkit::a6000_p2p_level_sys();
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
pub(super) fn own_work_16() -> DdpOwnWork {
    DdpOwnWork {
        ddp_step_s: 0.1508,
        plain_step_s: 0.130,
        ratio: 1.16,
        noise_bound: None,
        rests_on: "1-GPU base run of the test".into(),
    }
}

/// The a6000 input with these speedups measured at its 4 GPUs, one launch each.
pub(super) fn with_measured(speedups: &[(&str, f64)]) -> RecommendInput {
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

pub(super) fn predicted(r: &Recommendation, name: &str) -> f64 {
    r.rows
        .iter()
        .find(|x| x.variant == name)
        .unwrap()
        .prediction
        .speedup
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

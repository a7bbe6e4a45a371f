//! Tests of the DDP vocabulary, repeated launches and scaling.

use super::*;
use crate::collective::Sweep;
use crate::num::ToF64;
use crate::testkit::ddp_request;

/// An `mlp:1024x4` run at micro-batch 256 (its p90 = its median, nothing filled in).
fn mlp_run(variant: &str, world: u32, accum: u32, step: f64) -> DdpResult {
    DdpResult {
        model: "mlp:1024x4".into(),
        params: 4_198_400,
        variant: variant.into(),
        world_size: world,
        micro_batch: 256,
        accum,
        step_time_median_s: step,
        step_time_p90_s: step,
        throughput: f64::from(world * accum) * 256.0 / step,
        throughput_unit: "samples/s".into(),
        ..DdpResult::default()
    }
}

#[test]
fn gpt2_presets_have_published_sizes() {
    let p124 = ModelSpec::gpt2_124m().params();
    assert!((123_000_000..126_000_000).contains(&p124), "{p124}");
    let p355 = ModelSpec::gpt2_355m().params();
    assert!((350_000_000..360_000_000).contains(&p355), "{p355}");
}

#[test]
fn parses_variants_and_rejects_nonsense() {
    let v: DdpVariant = "bf16+accum4".parse().unwrap();
    assert_eq!((v.hook, v.accum), (CommHook::Bf16, 4));
    assert_eq!(
        "bucket25".parse::<DdpVariant>().unwrap().bucket_cap_mb,
        Some(25.0)
    );
    assert!("accumX".parse::<DdpVariant>().is_err());
    assert!("fsdp+bf16".parse::<DdpVariant>().is_err());
    let v: DdpVariant = "nocomm+accum8".parse().unwrap();
    assert!(v.nocomm && v.accum == 8);
    assert!("nocomm+bf16".parse::<DdpVariant>().is_err());
    assert!("nocomm+fsdp".parse::<DdpVariant>().is_err());
    // What the step-time model models: DDP with default buckets, with the given hook.
    let plain = |s: &str, h| s.parse::<DdpVariant>().unwrap().plain_ddp_with(h);
    assert!(plain("base", CommHook::None) && plain("accum4", CommHook::None));
    assert!(plain("bf16+accum4", CommHook::Bf16) && !plain("bf16", CommHook::None));
    assert!(!plain("nocomm", CommHook::None) && !plain("fsdp", CommHook::None));
    assert!(!plain("bucket50", CommHook::None));
    assert!("turbo"
        .parse::<DdpVariant>()
        .unwrap_err()
        .to_string()
        .contains("unknown variant part"));
}

/// A variant's name is spelled from its parts in one order, however it was typed, so that the
/// text form and the API's fields name it alike.
#[test]
fn variant_names_are_spelled_from_their_parts() {
    let name = |s: &str| s.parse::<DdpVariant>().unwrap().name;
    assert_eq!(name("baseline"), "base");
    assert_eq!(name(" accum4 + BF16 "), "bf16+accum4");
    assert_eq!(name("nobucketview+bucket50.0+ddp"), "bucket50+nobucketview");
    assert_eq!(name("accum2+fsdp_noreshard"), "fsdp-noreshard+accum2");
    assert_eq!(name("accum8+nocomm"), "nocomm+accum8");
    assert_eq!(name("powersgd4"), "powersgd4");
    let mut hooked: DdpVariant = "powersgd4+accum2+bucket10".parse().unwrap();
    hooked.env = vec![("NCCL_ALGO".into(), "Ring".into())];
    let bare = hooked.without_hook();
    assert_eq!(bare.name, one_gpu_reference(&hooked.name));
    assert_eq!(
        bare,
        "accum2+bucket10"
            .parse::<DdpVariant>()
            .map(|v| DdpVariant {
                env: hooked.env.clone(),
                ..v
            })
            .unwrap()
    );
}

#[test]
fn model_args_read_back_to_the_same_spec() {
    for arg in [
        "gpt2-124m",
        "gpt2-355m",
        "decoder:4,256,8,512,1000",
        "mlp:2048,3",
    ] {
        let spec: ModelSpec = arg.parse().unwrap();
        assert_eq!(spec.to_arg().parse::<ModelSpec>().unwrap(), spec, "{arg}");
    }
}

#[test]
fn parses_models() {
    assert_eq!(
        "mlp:1024".parse::<ModelSpec>().unwrap(),
        ModelSpec::square_mlp(1024, 4)
    );
    assert!("decoder:2,100,3".parse::<ModelSpec>().is_err());
    assert!("resnet".parse::<ModelSpec>().is_err());
}

#[test]
fn scaling_from_seed_numbers() {
    // Seed 000: 4xA6000, 124M, bf16+accum4; 1 GPU 66,189 tok/s; 88% efficiency at 4.
    let mk = |n: u32, tput: f64, step: f64| DdpResult {
        model: "gpt2-124m".into(),
        params: 124_000_000,
        variant: "bf16+accum4".into(),
        world_size: n,
        micro_batch: 8,
        accum: 4,
        step_time_median_s: step,
        step_time_p90_s: step,
        throughput: tput,
        throughput_unit: "tokens/s".into(),
        ..DdpResult::default()
    };
    let mut rows = vec![mk(1, 66_189.0, 0.495), mk(4, 0.88 * 4.0 * 66_189.0, 0.5625)];
    fill_scaling(&mut rows, Some(2.64 / 4.0));
    let eff = rows[1].efficiency.unwrap();
    assert!((eff - 0.88).abs() < 1e-9);
    assert!((rows[1].speedup.unwrap() - 3.52).abs() < 1e-9);
    assert!(rows[1].exposed_comm_fraction.unwrap() > 0.1);
    // "a token cost about 10% more on four GPUs than on one" at 88% efficiency.
    let ratio = rows[1].cost_per_million.unwrap() / rows[0].cost_per_million.unwrap();
    assert!((ratio - 1.0 / 0.88).abs() < 1e-9, "{ratio}");
}

#[test]
fn a_nocomm_run_against_one_gpu_alone_in_its_own_launches() {
    // Launches whose own speed moves ±20% but whose two sides move together: 1.10x each time.
    let launch = |solo: Option<f64>, step: f64| DdpResult {
        solo_step_time_median_s: solo,
        ..mlp_run("nocomm", 2, 1, step)
    };
    let speeds = [1.0, 1.2, 0.8, 1.1, 0.9, 1.15, 0.85, 1.05];
    let runs: Vec<DdpResult> = speeds
        .iter()
        .enumerate()
        .map(|(i, v)| {
            // A little of each launch's own noise on top, alternating in sign.
            let own = if i % 2 == 0 { 1.01 } else { 0.99 };
            launch(Some(0.010 * v), 0.011 * v * own)
        })
        .collect();
    let merged = merge_repeats(runs.clone());
    assert_eq!(merged.len(), 1);
    let r = &merged[0];
    assert_eq!(r.launch_solo_step_medians_s.len(), 8);
    let s = r.solo_slowdown().unwrap();
    assert!((s.ratio - 1.10).abs() < 0.015, "{s:?}");
    let bound = s.noise_bound.unwrap();
    assert!(s.ratio.ln() > bound, "{s:?}");
    // The same steps compared as two separately launched runs sit inside their noise.
    let alone = DdpResult {
        launch_step_medians_s: r.launch_solo_step_medians_s.clone(),
        ..mlp_run("nocomm", 1, 1, r.solo_step_time_median_s.unwrap())
    };
    assert!(
        s.ratio.ln() < speedup_noise_bound(r, &alone).unwrap(),
        "{s:?}"
    );
    // One launch without its solo step: the launches are not paired at all.
    let mut partial = runs.clone();
    partial[3].solo_step_time_median_s = None;
    let merged = merge_repeats(partial);
    assert!(merged[0].launch_solo_step_medians_s.is_empty());
    assert!(merged[0].solo_slowdown().is_none());
    // A single launch: the ratio, with no noise bound.
    let one = runs[1].solo_slowdown().unwrap();
    assert!((one.ratio - 1.1 * 0.99).abs() < 1e-9, "{one:?}");
    assert_eq!(one.noise_bound, None);
    // Nothing to compare: no solo step, or a non-finite one.
    assert!(launch(None, 0.011).solo_slowdown().is_none());
    assert!(launch(Some(f64::NAN), 0.011).solo_slowdown().is_none());
}

#[test]
fn repeated_launches_merge_to_their_median() {
    let mk = |variant: &str, n: u32, step: f64| DdpResult {
        step_time_p90_s: step * 1.1,
        ..mlp_run(variant, n, 1, step)
    };
    // Launch order: base/1, base/2, fp16/2, then again, then base/1 once more.
    let rows = merge_repeats(vec![
        mk("base", 1, 0.0020),
        mk("base", 2, 0.0030),
        mk("fp16", 2, 0.0050),
        mk("base", 1, 0.0024),
        mk("base", 2, 0.0032),
        mk("base", 1, 0.0019),
    ]);
    assert_eq!(rows.len(), 3, "one row per configuration, first-seen order");
    assert_eq!((rows[0].variant.as_str(), rows[0].world_size), ("base", 1));
    assert_eq!((rows[2].variant.as_str(), rows[2].world_size), ("fp16", 2));
    // Odd count: the middle launch; its throughput follows the median step.
    assert_eq!(rows[0].launch_step_medians_s, vec![0.0020, 0.0024, 0.0019]);
    assert!((rows[0].step_time_median_s - 0.0020).abs() < 1e-15);
    assert!((rows[0].throughput - 256.0 / 0.0020).abs() < 1e-6);
    assert!((rows[0].step_time_p90_s - 0.0022).abs() < 1e-12);
    assert!((rows[0].launch_spread().unwrap() - 0.0005 / 0.0020).abs() < 1e-12);
    // Even count: the mean of the middle two.
    assert!((rows[1].step_time_median_s - 0.0031).abs() < 1e-15);
    assert!((rows[1].throughput - 2.0 * 256.0 / 0.0031).abs() < 1e-6);
    // No launch carried an all-reduce probe: none after the fold either.
    assert!(rows.iter().all(|r| r.all_reduce_probe.is_none()));
    // A single launch stays as it was, with no spread.
    assert!(rows[2].launch_step_medians_s.is_empty());
    assert_eq!(rows[2].launch_spread(), None);
    assert!((rows[2].step_time_median_s - 0.0050).abs() < 1e-15);

    // The speedup's uncertainty comes from both sides' launches, once fill_scaling pairs
    // them; the 1-GPU row is its own reference and fp16 has no repeated partner.
    let mut rows = rows;
    fill_scaling(&mut rows, None);
    let sd = |l: &[f64]| {
        let m = l.iter().map(|x| x.ln()).sum::<f64>() / l.len().to_f64();
        (l.iter().map(|x| (x.ln() - m).powi(2)).sum::<f64>() / (l.len() - 1).to_f64()).sqrt()
    };
    let (s1, s2) = (sd(&[0.0020, 0.0024, 0.0019]), sd(&[0.0030, 0.0032]));
    assert!((rows[0].launch_log_sd().unwrap() - s1).abs() < 1e-12);
    let want = (std::f64::consts::FRAC_PI_2 * (s1 * s1 / 3.0 + s2 * s2 / 2.0)).sqrt();
    let got = rows[1].speedup_uncertainty.unwrap();
    assert!((got - want).abs() < 1e-12, "{got} {want}");
    assert!(got > 0.05 && got < 0.15, "{got}");
    assert_eq!(rows[0].speedup_uncertainty, None);
    assert_eq!(rows[2].speedup_uncertainty, None);
    // Its noise bound: Student's t at the Welch–Satterthwaite degrees of freedom of three and
    // two launches times σ, far wider than 2σ for so few launches.
    let (a, b) = (s1 * s1 / 3.0, s2 * s2 / 2.0);
    let dof = (a + b).powi(2) / (a * a / 2.0 + b * b / 1.0);
    let bound = rows[1].speedup_noise_bound.unwrap();
    assert!((bound - noise_bound(got, dof)).abs() < 1e-12, "{bound}");
    assert!(bound > 2.5 * got, "{bound} {got}");
    assert_eq!(rows[0].speedup_noise_bound, None);
    assert_eq!(rows[2].speedup_noise_bound, None);
    // Student's t: 12.71 at one degree of freedom, 2.09 at 19, never below 2 however many.
    assert!((noise_bound(1.0, 1.0) - 12.706).abs() < 1e-3);
    assert!((noise_bound(1.0, 19.0) - 2.093).abs() < 1e-3);
    assert_eq!(noise_bound(0.1, 1e6), 0.2);
    // One launch on either side: no estimate.
    let mut single = rows[1].clone();
    single.launch_step_medians_s.clear();
    assert_eq!(speedup_uncertainty(&single, &rows[0]), None);
    assert_eq!(speedup_uncertainty(&rows[1], &single), None);
    // A broken launch time is no estimate either.
    single.launch_step_medians_s = vec![0.003, f64::NAN];
    assert_eq!(single.launch_log_sd(), None);
}

#[test]
fn repeated_launches_fold_their_all_reduce_probes() {
    let probed = |step: f64, t64: f64| DdpResult {
        all_reduce_probe: Sweep::all_reduce_from_times(2, &[(64 << 20, t64)]),
        ..mlp_run("base", 2, 1, step)
    };
    let rows = merge_repeats(vec![
        probed(0.0030, 0.017),
        probed(0.0032, 0.023),
        probed(0.0031, 0.019),
    ]);
    let p = rows[0].all_reduce_probe.as_ref().unwrap();
    assert!((p.samples[0].out_of_place.time_us - 19_000.0).abs() < 1e-9);
    // The curve the 2-GPU runs timed: this one run's; at 4 GPUs nothing was probed.
    let (curve, runs) = probe_curve(&rows, 2).unwrap();
    assert_eq!((&curve, runs), (p, 1));
    assert!(probe_curve(&rows, 4).is_none());
}

#[test]
fn a_hooked_variants_speedup_is_against_one_gpu_without_the_hook() {
    assert_eq!(one_gpu_reference("bf16+accum4"), "accum4");
    assert_eq!(one_gpu_reference("fp16"), "base");
    assert_eq!(one_gpu_reference("accum8"), "accum8");
    assert_eq!(one_gpu_reference("nocomm"), "nocomm");
    assert_eq!(one_gpu_reference("powersgd+accum2"), "accum2");
    let mk = |variant: &str, n: u32, step: f64| mlp_run(variant, n, 1, step);
    // fp16's casts cost 1 ms on one GPU; on two it runs as fast as base: no gain.
    let mut rows = vec![
        mk("base", 1, 0.002),
        mk("fp16", 1, 0.003),
        mk("base", 2, 0.0025),
        mk("fp16", 2, 0.0025),
    ];
    fill_scaling(&mut rows, None);
    assert_eq!(
        rows[2].speedup, rows[3].speedup,
        "against the same plain run"
    );
    assert!((rows[3].speedup.unwrap() - 1.6).abs() < 1e-12);
    assert!(
        (rows[1].speedup.unwrap() - 2.0 / 3.0).abs() < 1e-12,
        "one GPU pays the casts"
    );
    // A report without the plain 1-GPU run falls back to the variant's own.
    let mut rows = vec![mk("fp16", 1, 0.003), mk("fp16", 2, 0.0025)];
    fill_scaling(&mut rows, None);
    assert!((rows[1].speedup.unwrap() - 2.4).abs() < 1e-12);
}

#[test]
fn a_request_gets_the_one_gpu_references_its_hooked_variants_need() {
    let mut req = ddp_request(&["gpt2-124m"], &["bf16+accum4", "fp16", "accum8"], &[1, 2]);
    req.variants[1].env = vec![("NCCL_P2P_DISABLE".into(), "1".into())];
    let got = req.clone().with_one_gpu_references();
    let names: Vec<&str> = got.variants.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["bf16+accum4", "fp16", "accum8", "accum4", "base"]);
    assert_eq!(
        got.variants[4].env, req.variants[1].env,
        "under the hooked one's environment"
    );
    // Present already, or no 1-GPU run asked for: nothing added.
    assert_eq!(got.clone().with_one_gpu_references(), got);
    req.world_sizes = vec![2];
    assert_eq!(req.clone().with_one_gpu_references(), req);
}

#[test]
fn throughput_ratio_cancels_the_launches_common_speed() {
    let mk = |variant: &str, accum: u32, steps: &[f64]| DdpResult {
        launch_step_medians_s: steps.to_vec(),
        ..mlp_run(variant, 2, accum, steps[steps.len() / 2])
    };
    // Launches 30% apart, every one of them with accum8 doing 8 micro-batches in 6.4 times
    // base's step: 1.25x the samples per second, in every launch.
    let speed = [1.0, 1.3, 0.9, 1.1, 1.2];
    let base_steps: Vec<f64> = speed.iter().map(|s| 0.002 * s).collect();
    let acc_steps: Vec<f64> = speed.iter().map(|s| 0.0128 * s).collect();
    let (base, acc) = (mk("base", 1, &base_steps), mk("accum8", 8, &acc_steps));
    let r = throughput_ratio(&acc, &base).unwrap();
    assert!((r.ratio - 1.25).abs() < 1e-9, "{r:?}");
    assert!(
        r.uncertainty.unwrap() < 1e-9,
        "the common speed cancels: {r:?}"
    );
    // Launches that did not run side by side (here the rounds shifted by one): the speeds
    // no longer cancel, and the uncertainty says so.
    let mut shifted = acc_steps.clone();
    shifted.rotate_left(1);
    let r = throughput_ratio(&mk("accum8", 8, &shifted), &base).unwrap();
    assert!(r.uncertainty.unwrap() > 0.05, "unpaired rounds: {r:?}");
    // Five paired launches: t at four degrees of freedom (2.78).
    let n = base.launch_step_medians_s.len().to_f64();
    assert_eq!(
        r.noise_bound,
        Some(noise_bound(r.uncertainty.unwrap(), n - 1.0))
    );
    // Different launch counts: the plain ratio, with no uncertainty; other GPU counts: none.
    let r = throughput_ratio(&mk("accum8", 8, &acc_steps[..4]), &base).unwrap();
    assert_eq!(r.uncertainty, None);
    let mut one = base.clone();
    one.world_size = 1;
    assert_eq!(throughput_ratio(&acc, &one), None);
}

#[test]
fn a_minimum_timed_stretch_outside_zero_to_sixty_seconds_is_refused() {
    let mut req = DdpRequest {
        variants: vec![DdpVariant::default()],
        min_timed_s: 2.0,
        ..ddp_request(&["gpt2-124m"], &[], &[1])
    };
    assert!(req.validate(1).is_ok());
    for bad in [-1.0, 61.0, f64::NAN] {
        req.min_timed_s = bad;
        let e = req.validate(1).unwrap_err().to_string();
        assert!(e.contains("minimum timed seconds"), "{bad}: {e}");
    }
}

#[test]
fn timed_steps_stretch_short_steps_to_the_minimum_and_leave_long_ones() {
    use super::timed_steps;
    // As the embedded script's steps_for (gpu's tests run that one on the same figures).
    assert_eq!(timed_steps(2.0, 15, 0.002), 1000);
    assert_eq!(timed_steps(2.0, 15, 0.2), 15);
    assert_eq!(timed_steps(2.0, 15, 1e-7), super::MAX_STEPS);
    assert_eq!(timed_steps(0.0, 15, 0.002), 15);
    assert_eq!(timed_steps(2.0, 15, 0.0), 15);
}

/// A 1-GPU base run of 12 ms in DDP whose launch also timed the model without DDP: rounds of
/// 12 ms against 10 ms (DDP's own work +20%), and a 2-GPU base run of 15 ms.
fn with_plain_one_gpu() -> Vec<DdpResult> {
    let mut one = mlp_run("base", 1, 1, 0.012);
    one.plain_reference = PlainReference::from_launch(
        Some(0.0101),
        Some(vec![[0.012, 0.010], [0.0121, 0.0101], [0.0119, 0.0099]]),
    );
    vec![one, mlp_run("base", 2, 1, 0.015)]
}

#[test]
fn speedups_rest_on_the_one_gpu_step_without_ddp_where_the_launch_timed_it() {
    let mut rows = with_plain_one_gpu();
    fill_scaling(&mut rows, Some(1.0));
    let ratio = rows[0]
        .plain_reference
        .as_ref()
        .unwrap()
        .ddp_over_plain()
        .unwrap();
    assert!((ratio - 1.2).abs() < 1e-12, "{ratio}");
    // The plain step is the DDP step over the rounds' median ratio: 10 ms.
    let plain = 0.012 / ratio;
    assert!((rows[1].speedup.unwrap() - 2.0 * plain / 0.015).abs() < 1e-12);
    assert!((rows[1].efficiency.unwrap() - plain / 0.015).abs() < 1e-12);
    let exposed = rows[1].exposed_comm_fraction.unwrap();
    assert!(
        (exposed - (0.015 - plain) / 0.015).abs() < 1e-12,
        "{exposed}"
    );
    // The 1-GPU DDP row against its own plain step: below 1 by DDP's own work.
    assert!((rows[0].speedup.unwrap() - 1.0 / ratio).abs() < 1e-12);
    assert_eq!(rows[0].ddp_over_plain, Some(ratio));
    assert!(
        rows.iter().all(|r| r.reference == Reference::Plain),
        "{rows:?}"
    );
    assert_eq!(rows[1].ddp_over_plain, None, "only the 1-GPU run's figure");
}

#[test]
fn the_ddp_reference_is_the_one_gpu_step_in_ddp_and_says_so() {
    let mut rows = with_plain_one_gpu();
    fill_scaling_against(&mut rows, None, Reference::Ddp);
    assert!((rows[1].speedup.unwrap() - 2.0 * 0.012 / 0.015).abs() < 1e-12);
    assert_eq!(rows[0].speedup, Some(1.0));
    assert!(rows.iter().all(|r| r.reference == Reference::Ddp));
    // DDP's own work stays a reported figure under either reference.
    assert!(rows[0].ddp_over_plain.is_some());
    // Without a plain step, the plain reference falls back to the DDP step, and says so.
    let mut rows = vec![mlp_run("base", 1, 1, 0.012), mlp_run("base", 2, 1, 0.015)];
    fill_scaling(&mut rows, None);
    assert!((rows[1].speedup.unwrap() - 2.0 * 0.012 / 0.015).abs() < 1e-12);
    assert!(rows.iter().all(|r| r.reference == Reference::Ddp));
}

#[test]
fn rows_of_reports_before_the_reference_field_rest_on_the_ddp_step() {
    let mut rows = vec![mlp_run("base", 1, 1, 0.012), mlp_run("base", 2, 1, 0.015)];
    fill_scaling(&mut rows, None);
    let mut v = serde_json::to_value(&rows[1]).unwrap();
    assert_eq!(v["reference"], "ddp");
    v.as_object_mut().unwrap().remove("reference");
    let old: DdpResult = serde_json::from_value(v).unwrap();
    assert_eq!(old.reference, Reference::Ddp);
    assert_eq!("plain".parse::<Reference>(), Ok(Reference::Plain));
    assert!("both"
        .parse::<Reference>()
        .unwrap_err()
        .to_string()
        .contains("plain or ddp"));
}

#[test]
fn tokens_per_sample_is_read_back_from_a_run_in_tokens() {
    // 2 GPUs × 8 samples × accumulation 4 of 512 tokens in 0.5 s.
    let r = DdpResult {
        world_size: 2,
        micro_batch: 8,
        accum: 4,
        step_time_median_s: 0.5,
        throughput: 2.0 * 8.0 * 4.0 * 512.0 / 0.5,
        throughput_unit: "tokens/s".into(),
        ..DdpResult::default()
    };
    assert_eq!(r.tokens_per_sample(), Some(512));
    let samples = DdpResult {
        throughput: 2.0 * 8.0 * 4.0 / 0.5,
        throughput_unit: "samples/s".into(),
        ..r.clone()
    };
    assert_eq!(samples.tokens_per_sample(), None);
    let broken = DdpResult {
        step_time_median_s: 0.0,
        ..r
    };
    assert_eq!(broken.tokens_per_sample(), None);
}

#[test]
fn a_rounds_ratios_noise_bound_is_their_spread() {
    // Rounds that read +2% to +18%: their median +9.4% lies within how far they spread.
    let rounds = [1.18, 1.02, 1.094, 1.03, 1.16].map(|r| [0.1 * r, 0.1]);
    let bound = rounds_noise_bound(&rounds).unwrap();
    assert!(bound > 1.094f64.ln(), "{bound}");
    // Rounds that agree within 1%: a bound of a few percent.
    let rounds = [1.09, 1.10, 1.094, 1.098, 1.091].map(|r| [0.1 * r, 0.1]);
    assert!(rounds_noise_bound(&rounds).unwrap() < 0.02);
    // One round: nothing measured its spread.
    assert_eq!(rounds_noise_bound(&[[0.11, 0.1]]), None);
}

#[test]
fn wrappers_parse_as_users_name_them_and_refuse_what_cannot_run() {
    use super::Wrapper;
    for (name, w) in [
        ("replicate", Wrapper::Replicate),
        ("fsdp", Wrapper::Fsdp),
        ("fsdp-noreshard", Wrapper::FsdpNoReshard),
        ("hsdp+accum2", Wrapper::Hsdp),
        ("base", Wrapper::Ddp),
    ] {
        let v: DdpVariant = name.parse().unwrap();
        assert_eq!((v.wrapper(), v.fsdp), (w, w != Wrapper::Ddp), "{name}");
    }
    assert!("replicate+fsdp".parse::<DdpVariant>().is_err());
    assert!("replicate+bf16".parse::<DdpVariant>().is_err());
    // A variant stored before wrappers were named: fsdp set, no wrapper.
    let old: DdpVariant = serde_json::from_str(
        r#"{"name":"fsdp","hook":"none","accum":1,"bucket_cap_mb":null,"gradient_as_bucket_view":true,"fsdp":true}"#,
    )
    .unwrap();
    assert_eq!(old.wrapper(), Wrapper::Fsdp);
    let mut req = ddp_request(&["gpt2-124m"], &["hsdp"], &[2]);
    let e = req.validate(8).unwrap_err().to_string();
    assert!(
        e.contains("hsdp needs an even GPU count of at least 4"),
        "{e}"
    );
    req.world_sizes = vec![4];
    assert!(req.validate(8).is_ok());
    req.recipe.amp = super::Amp::Fp16;
    let e = req.validate(8).unwrap_err().to_string();
    assert!(e.contains("MixedPrecisionPolicy bf16"), "{e}");
}

#[test]
fn the_backend_is_part_of_the_recipe_and_left_out_when_nccl() {
    use super::{Backend, Recipe};
    assert_eq!("NCCL2".parse::<Backend>(), Ok(Backend::Nccl2));
    assert!("mpi"
        .parse::<Backend>()
        .unwrap_err()
        .to_string()
        .contains("expected nccl, gloo or nccl2"));
    let gloo = Recipe {
        backend: Backend::Gloo,
        ..Recipe::default()
    };
    let v = serde_json::to_value(&gloo).unwrap();
    assert_eq!(v["backend"], "gloo");
    assert!(gloo.describe().contains("backend gloo"));
    let nccl = serde_json::to_value(Recipe::default()).unwrap();
    assert!(
        nccl.get("backend").is_none(),
        "older readers see the same recipe"
    );
}

//! Tests of N processes side by side: the slowdown's share of a step, and how it is read from
//! a node's `nocomm` runs.

use super::tests::{a6000, close, gpt2_124m, result};
use super::*;

#[test]
fn side_by_side_slowdown_stretches_what_no_communication_waits_cover() {
    // Communication far below the backward: the slowdown alone sets the speedup, N / s.
    let fast = LinkCurve::flat(2, 1e6, 0.0).unwrap();
    let mut i = StepInputs::for_model(&ModelSpec::gpt2_124m(), 8, 0.040, 2, 8);
    i.overheads = Overheads {
        ddp_fixed_s: 0.0,
        per_bucket_s: 0.0,
        hook_per_bucket_s: 0.0,
    };
    i.optimizer_s = 0.005;
    i.side_by_side_slowdown = 1.25;
    let p = predict(&i, &fast).unwrap();
    let single = 8.0 * 0.040 + 0.005;
    assert!(close(p.single_gpu_step_s, single, 1e-12), "{p:?}");
    // The no_sync micro-batches and the optimizer in full; the synchronising micro-batch less
    // the sliver of exposed communication it waits anyway (the tied embedding's gradient is
    // ready only when the backward ends).
    let waits = p.exposed_comm_s;
    assert!(waits < 1e-4, "{p:?}");
    assert!(
        close(p.side_by_side_s, 0.25 * single - waits, 1e-12),
        "{p:?}"
    );
    assert!(close(p.speedup, 2.0 / 1.25, 1e-3), "{p:?}");
    // It is part of the communication share, as measured runs define it.
    assert!(close(p.comm_share, 0.25 / 1.25, 1e-3), "{p:?}");
    // One GPU is its own reference: nothing side by side.
    let one = predict(&i.clone().with_world(1), &fast).unwrap();
    assert!(close(one.step_s, single, 1e-12) && one.side_by_side_s == 0.0);
    // Without accumulation on a slow link the rank waits longer for its all-reduces than the
    // stretch lasts: the step does not grow (measured on 2xH200: the MLPs' unaccumulated runs
    // showed no slowdown where their accumulated and nocomm runs did).
    let slow = a6000(4.3);
    let mut plain = gpt2_124m(1, CommHook::None);
    plain.overheads = i.overheads;
    // Against no side-by-side cost at all (not the default host time of
    // `mechanisms::NO_SYNC_HOST_S`, which a counted slowdown replaces).
    plain.no_sync_host_s = Some(0.0);
    let mut crowded = plain.clone();
    crowded.side_by_side_slowdown = 1.1;
    let (a, b) = (
        predict(&plain, &slow).unwrap(),
        predict(&crowded, &slow).unwrap(),
    );
    assert!(a.exposed_comm_s > 0.1 * plain.compute_s, "{a:?}");
    assert!(
        close(b.step_s, a.step_s, 1e-12) && b.side_by_side_s == 0.0,
        "{b:?}"
    );
    // Accumulated on the same link: the seven no_sync micro-batches stretch in full.
    let (a4, b4) = (
        predict(&plain.clone().with_accum(8), &slow).unwrap(),
        predict(&crowded.clone().with_accum(8), &slow).unwrap(),
    );
    assert!(
        close(b4.step_s - a4.step_s, 0.1 * 7.0 * plain.compute_s, 1e-12),
        "{a4:?} {b4:?}"
    );
    // Out of range: invalid input.
    let mut bad = i.clone();
    bad.side_by_side_slowdown = f64::NAN;
    assert!(predict(&bad, &fast).is_err());
    bad.side_by_side_slowdown = 0.0;
    assert!(predict(&bad, &fast).is_err());
}

#[test]
fn side_by_side_reads_the_nocomm_runs() {
    let mlp = ModelSpec::square_mlp(1024, 4);
    let base1 = result(&mlp, "base", 1, 0.010);
    let nocomm1 = result(&mlp, "nocomm", 1, 0.011);
    let nocomm2 = result(&mlp, "nocomm", 2, 0.0132);
    let acc_n2 = result(&mlp, "nocomm+accum8", 2, 0.100);
    let acc_1 = result(&mlp, "accum8", 1, 0.080);
    let other = result(&ModelSpec::gpt2_124m(), "nocomm", 2, 0.050);
    // Against the 1-GPU nocomm run when there is one.
    let rows = [&base1, &nocomm1, &nocomm2, &other];
    let s = side_by_side(&rows, &mlp.name(), 8, 2).unwrap();
    assert!(close(s.slowdown, 1.2, 1e-12), "{s:?}");
    assert_eq!(s.one_gpu.unwrap().variant, "nocomm");
    // Else against the plain run.
    let rows = [&base1, &nocomm2];
    let s = side_by_side(&rows, &mlp.name(), 8, 2).unwrap();
    assert!(close(s.slowdown, 1.32, 1e-12), "{s:?}");
    assert_eq!(s.one_gpu.unwrap().variant, "base");
    // Accumulation 1 first; an accumulated pair is used when it is all there is.
    let rows = [&acc_n2, &acc_1, &base1, &nocomm2];
    assert_eq!(
        side_by_side(&rows, &mlp.name(), 8, 2).unwrap().nocomm.accum,
        1
    );
    let rows = [&acc_n2, &acc_1, &base1];
    let s = side_by_side(&rows, &mlp.name(), 8, 2).unwrap();
    assert!(close(s.slowdown, 1.25, 1e-12), "{s:?}");
    // Single launches: measured, not counted (a launch of a short step moves more than this).
    assert!(!s.distinct() && !s.repeated() && s.counted() == 1.0);
    assert_eq!(s.fewest_launches(), 1);
    assert_eq!(s.noise_bound, None);
    // Repeated launches: counted only where the slowdown (here 1.2, ln 0.18) lies beyond twice
    // its standard error over the launches.
    let launched = |r: &DdpResult, l: &[f64]| DdpResult {
        launch_step_medians_s: l.to_vec(),
        speedup_uncertainty: None,
        all_reduce_probe: None,
        ..r.clone()
    };
    let one = launched(&nocomm1, &[0.0105, 0.011, 0.0115]);
    let steady = launched(&nocomm2, &[0.0125, 0.0132, 0.014]);
    let s = side_by_side(&[&one, &steady], &mlp.name(), 8, 2).unwrap();
    assert!(
        s.distinct() && s.repeated() && close(s.counted(), 1.2, 1e-12),
        "{s:?}"
    );
    // The same medians with launches spread wide (standard error ~0.15): not counted.
    let spread = launched(&nocomm2, &[0.008, 0.0132, 0.020]);
    let s = side_by_side(&[&one, &spread], &mlp.name(), 8, 2).unwrap();
    assert!(!s.distinct() && s.repeated() && s.counted() == 1.0, "{s:?}");
    // The bound it was held to travels with it (recommend prints it).
    let bound = s.noise_bound.unwrap();
    assert_eq!(Some(bound), crate::ddp::speedup_noise_bound(&spread, &one));
    assert!(bound > s.slowdown.ln(), "{s:?}");
    // Ten launches a side whose ranges overlap (one slow 1-GPU launch, one fast N-GPU one)
    // but whose medians stand well apart: counted; a test of disjoint ranges would not count it.
    let mut ten_one = vec![0.011; 9];
    ten_one.push(0.0135);
    let mut ten_n = vec![0.0132; 9];
    ten_n.push(0.0105);
    let (ten_one, ten_n) = (launched(&nocomm1, &ten_one), launched(&nocomm2, &ten_n));
    let s = side_by_side(&[&ten_one, &ten_n], &mlp.name(), 8, 2).unwrap();
    assert!(s.distinct() && close(s.counted(), 1.2, 1e-12), "{s:?}");
    // Two launches a side (the quick runs of mlp:2048x4 at 2026-11-30 19:49: 2.86 and 3.98 ms at 2 GPUs,
    // 1.41 and 1.60 ms at 1): 2.27x is 3.7 standard errors, but those errors rest on about one
    // degree of freedom, where Student's t is about 8. Not counted; the same spread over eight
    // launches a side is.
    let quick = |r: &DdpResult, l: &[f64]| DdpResult {
        step_time_median_s: (l[0] + l[1]) / 2.0,
        ..launched(r, l)
    };
    let two_n = quick(&nocomm2, &[0.00286, 0.00398]);
    let two_one = quick(&nocomm1, &[0.00141, 0.00160]);
    let s = side_by_side(&[&two_one, &two_n], &mlp.name(), 8, 2).unwrap();
    assert!(close(s.slowdown, 0.00342 / 0.001505, 1e-9), "{s:?}");
    let u = crate::ddp::speedup_uncertainty(&two_n, &two_one).unwrap();
    assert!(s.slowdown.ln() > 3.5 * u, "{u}");
    assert!(!s.distinct() && s.repeated() && s.counted() == 1.0, "{s:?}");
    assert_eq!(s.fewest_launches(), 2);
    let eight = |r: &DdpResult, pair: [f64; 2]| DdpResult {
        launch_step_medians_s: pair.repeat(4),
        ..quick(r, &pair)
    };
    let (eight_one, eight_n) = (
        eight(&nocomm1, [0.00141, 0.00160]),
        eight(&nocomm2, [0.00286, 0.00398]),
    );
    let s = side_by_side(&[&eight_one, &eight_n], &mlp.name(), 8, 2).unwrap();
    assert!(s.distinct() && s.counted() > 2.0, "{s:?}");
    // Another world size, micro-batch or model, or no 1-GPU partner: nothing.
    let rows = [&base1, &nocomm2];
    assert!(side_by_side(&rows, &mlp.name(), 8, 4).is_none());
    assert!(side_by_side(&rows, &mlp.name(), 16, 2).is_none());
    assert!(side_by_side(&rows, "gpt2-124m", 8, 2).is_none());
    assert!(side_by_side(&[&nocomm2], &mlp.name(), 8, 2).is_none());
    // A nocomm run that timed one GPU alone in each of its launches is compared with that, not
    // with the separately launched 1-GPU run beside it: launches spreading ±20% (a separate
    // comparison cannot see 1.1x through that) whose two sides move together.
    let speeds = [1.0, 1.2, 0.8, 1.1, 0.9, 1.15, 0.85, 1.05];
    let paired = DdpResult {
        launch_step_medians_s: speeds.iter().map(|v| 0.011 * v).collect(),
        launch_solo_step_medians_s: speeds.iter().map(|v| 0.010 * v).collect(),
        solo_step_time_median_s: Some(0.010),
        ..launched(&nocomm2, &[])
    };
    let s = side_by_side(&[&one, &paired], &mlp.name(), 8, 2).unwrap();
    assert!(s.within_launch() && s.one_gpu.is_none(), "{s:?}");
    assert!(s.distinct() && close(s.counted(), 1.1, 1e-9), "{s:?}");
    assert_eq!(s.noise_bound, paired.solo_slowdown().unwrap().noise_bound);
    assert!(s.noise_bound.unwrap() < 1.1f64.ln(), "{s:?}");
    assert_eq!(s.fewest_launches(), 8);
    // The same with one launch: measured, not counted.
    let single = DdpResult {
        solo_step_time_median_s: Some(0.010),
        ..nocomm2.clone()
    };
    let s = side_by_side(&[&single], &mlp.name(), 8, 2).unwrap();
    assert!(
        s.within_launch() && !s.distinct() && s.counted() == 1.0,
        "{s:?}"
    );
    assert_eq!(s.fewest_launches(), 1);
}

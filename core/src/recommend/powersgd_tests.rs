//! Tests of the recommendation's PowerSGD offer: offered on a slow link with its compute measured,
//! withheld, or naming what to run.

use super::tests::{a6000_input, predicted};
use super::*;
use crate::step_time::LinkCurve;

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

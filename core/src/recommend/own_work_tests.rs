//! Tests of the recommendation with DDP's own work: against one GPU without DDP, and under
//! `--reference ddp`.

use super::tests::{a6000_input, codes, own_work_16, warning, with_measured};
use super::*;

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

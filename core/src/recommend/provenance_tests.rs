//! What the recommendation's figures rest on, said where they are shown: the units a factory's
//! launch declared, each cost's source, and predictions marked where the model missed.

use super::tests::a6000_input;
use super::*;
use crate::ddp::{ModelSource, ModelSpec, ParamLayout, ParamTensor};

/// A factory (`py:model.py:build`) whose launch reported 4M parameters in two tensors.
fn factory_input() -> RecommendInput {
    let mut input = a6000_input();
    input.model = ModelInput::Spec {
        spec: ModelSpec::External {
            source: ModelSource::Python {
                target: "model.py".into(),
                function: "build".into(),
            },
        },
    };
    input.param_layout = Some(ParamLayout {
        tensors: vec![
            ParamTensor::new("w1", &[1024, 2048]),
            ParamTensor::new("w2", &[2048, 1024]),
        ],
    });
    input
}

#[test]
fn a_factorys_declared_tokens_per_sample_make_its_rates_tokens() {
    let r = recommend(&factory_input()).unwrap();
    assert_eq!(r.throughput_unit, "samples/s", "nothing declared: samples");
    let mut input = factory_input();
    input.tokens_per_sample = Some(512);
    let r = recommend(&input).unwrap();
    assert_eq!(r.throughput_unit, "tokens/s");
    assert_eq!(r.units_per_micro_batch, 8.0 * 512.0);
    let answer = r.answer.unwrap();
    assert_eq!(answer.unit, "tokens");
    assert!(r.summary.contains("per million tokens"), "{}", r.summary);
}

use crate::testkit::a6000_fast_base_measured as measured_base;

#[test]
fn a_measured_rows_cost_is_the_answers_and_says_it_is_measured() {
    let r = recommend(&measured_base()).unwrap();
    assert_eq!(r.chosen, "base");
    let answer = r.answer.as_ref().unwrap();
    assert!(answer.measured);
    let row = r.rows.iter().find(|x| x.variant == "base").unwrap();
    let (table, said) = (
        row.cost_per_million.unwrap(),
        answer.cost_per_million.unwrap(),
    );
    assert!(
        (table / said - 1.0).abs() < 1e-9,
        "table {table} against {said}"
    );
    assert!(row.cost_measured);
    // A row nobody measured keeps its predicted cost, said as such.
    let bf16 = r.rows.iter().find(|x| x.variant == "bf16").unwrap();
    assert!(!bf16.cost_measured && bf16.cost_per_million.is_some());
}

use crate::testkit::a6000_unreliable as unreliable;

#[test]
fn under_an_unreliable_model_powersgd_not_offered_is_said_to_be_a_prediction() {
    // Every rank measured, each compressing for 10 s: the model predicts bf16 beats them all.
    let mut input = unreliable();
    input.powersgd_compute = [1, 2, 4, 8]
        .map(|rank| PowerSgdMeasured {
            rank,
            compute_s: 10.0,
            rests_on: format!("1-GPU powersgd{rank} run (test)"),
        })
        .to_vec();
    let r = recommend(&input).unwrap();
    assert!(!r.model_check.as_ref().unwrap().reliable);
    let o = r.powersgd.unwrap();
    assert_eq!(o.rank, None);
    let why = o.why_not.unwrap();
    assert!(why.starts_with("bf16 beats every rank"), "{why}");
    assert!(
        why.contains("predicted by the step-time model, which missed the measured base by +100%"),
        "{why}"
    );
    assert!(why.contains("model_unreliable"), "{why}");
    // Unmeasured compression compute is no prediction: said as before.
    let r = recommend(&unreliable()).unwrap();
    let why = r.powersgd.unwrap().why_not.unwrap();
    assert!(!why.contains("model_unreliable"), "{why}");
}

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

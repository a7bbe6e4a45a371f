//! The sharded answer's step: the wrapper memory chose, predicted by FSDP2's step-time model
//! ([`crate::step_time::fsdp`]) on the node's all-gather and reduce-scatter curves, and said as
//! the other answers are (times sooner than one GPU, device time and money per million units).
//! A step the node measured for the wrapper at that GPU count overrules the prediction.

use serde::{Deserialize, Serialize};

use crate::ddp::Wrapper;
use crate::step_time::fsdp::{
    predict_fsdp2, Fsdp2Curves, Fsdp2Inputs, Fsdp2Prediction, Fsdp2Units, Overlap,
};
use crate::step_time::fsdp_own::OneGpuOwn;
use crate::step_time::ModelError;

use super::answer::Answer;
use super::{Reason, Recommendation};

/// What the prediction reads besides the curves.
#[derive(Clone, Debug)]
pub struct WrapperStepInput {
    pub units: Fsdp2Units,
    /// One micro-batch's plain step on one GPU, seconds, and where it comes from.
    pub plain_step_s: f64,
    pub plain_how: String,
    /// One GPU's plain step the answer is measured against (without checkpointing), seconds.
    pub reference_step_s: f64,
    /// Units of work (tokens or samples) in one micro-batch, and their word.
    pub units_per_micro_batch: f64,
    pub unit_word: String,
    pub own: Option<OneGpuOwn>,
    /// The wrapper's step the node measured at the answer's GPU count, seconds.
    pub measured_step_s: Option<f64>,
    pub price_per_gpu_hour: Option<f64>,
    /// Where the curves come from, in words.
    pub curves_how: String,
    /// N ranks side by side over one alone, counted where it lies beyond its launches' noise
    /// (as DDP's model counts it); 1 where nothing measured it.
    pub side_by_side: f64,
    /// Bytes of a parameter as gathered: 2 under bf16's `MixedPrecisionPolicy`, 4 without.
    pub param_bytes: f64,
}

/// The sharded answer's step, predicted and where measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WrapperStep {
    pub wrapper: Wrapper,
    pub gpus: u32,
    pub accum: u32,
    /// One micro-batch's step.
    pub prediction: Fsdp2Prediction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_step_s: Option<f64>,
    pub own_how: String,
    pub plain_how: String,
    pub curves_how: String,
}

/// Predicts the chosen wrapper's step on `rec`'s GPUs and sets the answer, the summary's step
/// and a reason; the error says why it could not (a missing curve, a mesh that cannot run).
pub fn predict_wrapper_step(
    rec: &mut Recommendation,
    wrapper: Wrapper,
    input: WrapperStepInput,
    curves: &Fsdp2Curves,
) -> Result<(), ModelError> {
    let mut i = Fsdp2Inputs::new(wrapper, rec.gpus, input.units, input.plain_step_s);
    i.own_one_gpu_s = input.own.as_ref().map_or(0.0, |o| o.seconds);
    i.overlap = Overlap::on(rec.device);
    i.side_by_side = input.side_by_side;
    i.param_bytes = input.param_bytes;
    let p = predict_fsdp2(&i, curves)?;
    let own_how = input.own.map_or_else(
        || "not measured (left out): measure it with `bench ddp --gpus 1`".to_string(),
        |o| o.how,
    );
    let accum = rec.chosen_accum.max(1);
    let measured = input.measured_step_s.filter(|s| s.is_finite() && *s > 0.0);
    let step = measured.unwrap_or(p.step_s);
    let times_sooner = f64::from(rec.gpus) * input.reference_step_s / step;
    let per_step = input.units_per_micro_batch * f64::from(accum);
    if per_step > 0.0 {
        let one_gpu_s = 1e6 * input.reference_step_s / input.units_per_micro_batch;
        let gpu_s = one_gpu_s * f64::from(rec.gpus) / times_sooner;
        let money = |s: f64| input.price_per_gpu_hour.map(|p| p * s / 3600.0);
        rec.answer = Some(Answer {
            variant: wrapper.to_string(),
            gpus: rec.gpus,
            times_sooner,
            measured: measured.is_some(),
            unit: input.unit_word.clone(),
            gpu_seconds_per_million: gpu_s,
            one_gpu_seconds_per_million: one_gpu_s,
            price_per_gpu_hour: input.price_per_gpu_hour,
            cost_per_million: money(gpu_s),
            one_gpu_cost_per_million: money(one_gpu_s),
        });
    }
    let said = match measured {
        Some(m) => format!(
            "{wrapper} measured {:.1} ms a micro-batch at {} GPUs (the model predicted {:.1} ms, \
             {:+.0}%)",
            m * 1e3,
            rec.gpus,
            p.step_s * 1e3,
            (p.step_s / m - 1.0) * 100.0
        ),
        None => format!(
            "{wrapper}'s step predicted at {:.1} ms a micro-batch at {} GPUs",
            p.step_s * 1e3,
            rec.gpus
        ),
    };
    let pace = if times_sooner >= 1.0 {
        format!("{times_sooner:.2} times sooner than one GPU's plain step would")
    } else {
        format!(
            "{:.2} times slower than one GPU's plain step would (were it to fit)",
            1.0 / times_sooner
        )
    };
    rec.summary = rec.summary.replace(
        "Its step time is not predicted: measure it with",
        &format!(
            "{said}: {rec_gpus} GPUs finish {pace}. Measure it with",
            rec_gpus = rec.gpus
        ),
    );
    rec.reasons.push(Reason {
        text: format!(
            "{said}: the plain step {:.1} ms, the wrapper's own work at one GPU {:.2} ms, \
             all-gathers {:.2} ms and reductions {:.2} ms between GPUs, {:.2} ms of them not \
             hidden by the compute.",
            input.plain_step_s * 1e3,
            p.own_one_gpu_s * 1e3,
            p.gather_s * 1e3,
            p.reduce_s * 1e3,
            p.exposed_s * 1e3
        ),
        rests_on: format!(
            "FSDP2's step-time model: the plain step {}; own work {own_how}; curves {}",
            input.plain_how, input.curves_how
        ),
    });
    rec.wrapper_step = Some(WrapperStep {
        wrapper,
        gpus: rec.gpus,
        accum,
        prediction: p,
        measured_step_s: measured,
        own_how,
        plain_how: input.plain_how,
        curves_how: input.curves_how,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::Collective;
    use crate::num::ToF64;
    use crate::recommend::{recommend, tests::a6000_input, ModelInput, RecommendInput};
    use crate::step_time::op_curve::{OpCurve, OpPoint};

    fn sharded() -> Recommendation {
        let input = RecommendInput {
            model: ModelInput::Spec {
                spec: "decoder:32,4096,32,2048,32000,llama".parse().unwrap(),
            },
            ..a6000_input()
        };
        recommend(&input).unwrap()
    }

    fn curve(op: Collective) -> OpCurve {
        let at = |bytes: u64| OpPoint {
            bytes,
            out_of_place_s: bytes.to_f64() / 10e9,
            in_place_s: None,
        };
        OpCurve {
            op,
            ranks: 4,
            points: vec![at(1 << 20), at(1 << 30)],
        }
    }

    fn input(measured: Option<f64>) -> WrapperStepInput {
        let rec = sharded();
        let m = &rec.memory.as_ref().unwrap().model;
        WrapperStepInput {
            units: Fsdp2Units::uniform(m.params, 32, m.largest_block),
            plain_step_s: 2.0,
            plain_how: "given".into(),
            reference_step_s: 2.0,
            units_per_micro_batch: 4.0 * 2048.0,
            unit_word: "tokens".into(),
            own: None,
            measured_step_s: measured,
            price_per_gpu_hour: Some(1.0),
            curves_how: "invented".into(),
            side_by_side: 1.0,
            param_bytes: 2.0,
        }
    }

    fn curves() -> Fsdp2Curves {
        Fsdp2Curves {
            all_gather: Some(curve(Collective::AllGather)),
            reduce_scatter: Some(curve(Collective::ReduceScatter)),
            all_reduce: None,
        }
    }

    #[test]
    fn the_prediction_answers_and_a_measured_step_overrules_it() {
        let mut rec = sharded();
        predict_wrapper_step(&mut rec, Wrapper::Fsdp, input(None), &curves()).unwrap();
        let predicted = rec.wrapper_step.as_ref().unwrap().prediction.step_s;
        let a = rec.answer.as_ref().unwrap();
        assert!(!a.measured && (a.times_sooner - 4.0 * 2.0 / predicted).abs() < 1e-12);
        assert!(
            rec.summary.contains("fsdp's step predicted"),
            "{}",
            rec.summary
        );

        let mut rec = sharded();
        let measured = predicted * 1.5;
        predict_wrapper_step(&mut rec, Wrapper::Fsdp, input(Some(measured)), &curves()).unwrap();
        let a = rec.answer.as_ref().unwrap();
        assert!(a.measured && (a.times_sooner - 4.0 * 2.0 / measured).abs() < 1e-12);
        assert!(rec.summary.contains("fsdp measured"), "{}", rec.summary);
        assert!(
            rec.summary.contains("predicted") && rec.summary.contains("-33%"),
            "{}",
            rec.summary
        );
    }

    #[test]
    fn hsdp_without_an_all_reduce_curve_is_not_predicted() {
        let mut rec = sharded();
        let err = predict_wrapper_step(&mut rec, Wrapper::Hsdp, input(None), &curves());
        assert!(err.unwrap_err().to_string().contains("all_reduce"));
        assert!(rec.wrapper_step.is_none() && rec.answer.is_none());
    }
}

//! Whether PowerSGD is worth offering for this model on this node, and at which rank: the
//! smallest of [`RANKS`] whose predicted step beats the casting hook (bf16, or fp16 on CPU
//! ranks), each rank priced with its compression compute as the 1-GPU launch measured it
//! (the hook runs at world size one, with no bytes to save). A rank whose compute nobody
//! measured is not offered: it is named as unmeasured, with the launch that would measure it.
//! What it costs besides time is said with it: error-feedback memory (one gradient-sized
//! buffer in the gradients' dtype, `PowerSGDState`'s `error_dict`), torch's warm-up of plain
//! all-reduce (`start_powerSGD_iter`) and the published accuracy losses (docs/recommend.md).

use serde::{Deserialize, Serialize};

use super::basis::Basis;
use super::choice::{hook_name, ModelCheck};
use super::snippet::powersgd_registration;
use super::RecommendInput;
use crate::ddp::{CommHook, RunDevice};
use crate::num::ToF64;
use crate::step_time::powersgd::{RANKS, TORCH_DEFAULT_START_ITER};
use crate::step_time::{assign_buckets, predict, LinkCurve, ModelError, StepInputs, MIB};

/// The published accuracy cost the offer states with its source (docs/recommend.md, "PowerSGD").
pub const NUMERICS: &str = "PowerSGD is a biased compressor: ResNet-50 on ImageNet at rank 4 fell from 76% to 72.5% top-1 in a published run (github.com/epfml/powersgd issue 1); raise the rank until the accuracy holds";

/// The import the registration lines need.
const POWERSGD_IMPORT: &str =
    "from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD\n";

/// The 1-GPU launch that measures the compression compute where none was measured.
pub const MEASURE_HINT: &str = "bench ddp --gpus 1 --variants base,powersgd4";

/// One rank as the model predicts it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PowerSgdRow {
    pub rank: u32,
    /// Bytes each rank all-reduces per step at this rank.
    pub wire_bytes: f64,
    /// Predicted step, seconds; `None` where its compression compute was not measured.
    pub step_s: Option<f64>,
    /// The compression compute the prediction used (1-GPU PowerSGD step minus plain DDP's).
    pub compute_s: Option<f64>,
}

/// PowerSGD against the casting hook on this model and node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PowerSgdOffer {
    /// The smallest rank whose predicted step beats the casting hook's; `None`: none does (or
    /// none was measured).
    pub rank: Option<u32>,
    /// The casting hook it is compared with (bf16, or fp16 on CPU ranks).
    pub against: CommHook,
    /// The casting hook's predicted step, seconds.
    pub against_step_s: f64,
    pub rows: Vec<PowerSgdRow>,
    /// Error feedback's buffer: the gradients' bytes, held for the whole training.
    pub error_feedback_bytes: f64,
    /// Steps of plain all-reduce before compression starts (torch's default).
    pub start_iter: u32,
    /// The registration lines at the offered rank.
    pub snippet: Option<String>,
    /// The published accuracy cost, with its source.
    #[serde(default)]
    pub numerics: String,
    /// Where no rank is offered: why (the casting hook beats every rank, or the compression
    /// compute is unmeasured and which launch measures it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why_not: Option<String>,
    /// The runs the compression compute comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rests_on: Option<String>,
    /// The rank the model would offer where it missed this node's measured rows (warning
    /// `model_unreliable`): not offered, since no prediction outranks a measurement; `--verify`
    /// measures it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withheld_rank: Option<u32>,
}

impl PowerSgdOffer {
    /// The offer under the model check: where the model missed a row this node measured, its
    /// predicted rank is withheld and named with the `--verify` run that would measure it, and
    /// a refusal that rests on the predictions says it is one.
    pub(super) fn checked(mut self, check: Option<&ModelCheck>) -> Self {
        let Some(miss) = check
            .filter(|c| !c.reliable)
            .and_then(|c| c.misses().next())
        else {
            return self;
        };
        let Some(rank) = self.rank.take() else {
            // Only ranks with a predicted step were weighed: an unmeasured compute is no
            // prediction.
            let predicted = self.rows.iter().any(|r| r.step_s.is_some());
            if let Some(why) = self.why_not.as_mut().filter(|_| predicted) {
                why.push_str(&format!(
                    " (predicted by the step-time model, which missed the measured {} by {:+.0}% on this node: warning model_unreliable)",
                    miss.variant,
                    miss.error * 100.0
                ));
            }
            return self;
        };
        self.snippet = None;
        self.withheld_rank = Some(rank);
        self.why_not = Some(format!(
            "the step-time model missed the measured {} by {:+.0}% on this node (warning model_unreliable), so its prediction for rank {rank} is not offered; --verify measures powersgd{rank}",
            miss.variant,
            miss.error * 100.0
        ));
        self
    }
}

/// PowerSGD on this request: ranks priced with the compression compute the 1-GPU launches
/// measured, against bf16 (fp16 on CPU ranks, where gloo has no bf16 hook). `None` on one GPU.
pub(super) fn offer(
    input: &RecommendInput,
    basis: &Basis,
) -> Result<Option<PowerSgdOffer>, ModelError> {
    if input.gpus < 2 {
        return Ok(None);
    }
    let against = match input.device {
        RunDevice::Cpu => CommHook::Fp16,
        RunDevice::Cuda => CommHook::Bf16,
    };
    let measured: Vec<(u32, f64)> = input
        .powersgd_compute
        .iter()
        .map(|m| (m.rank, m.compute_s))
        .collect();
    let cast_compute_s = input.hook_compute_s.unwrap_or(0.0);
    let mut o = assess(
        &basis.base,
        &input.curve,
        against,
        cast_compute_s,
        &measured,
    )?;
    o.why_not = why_not(&o, input.device);
    let cites: Vec<&str> = input
        .powersgd_compute
        .iter()
        .map(|m| m.rests_on.as_str())
        .collect();
    o.rests_on = (!cites.is_empty()).then(|| cites.join("; "));
    Ok(Some(o))
}

/// Why no rank is offered, in one line; `None` where one is.
fn why_not(o: &PowerSgdOffer, device: RunDevice) -> Option<String> {
    if o.rank.is_some() {
        return None;
    }
    let cast = hook_name(o.against);
    let on_cpu = if device == RunDevice::Cpu {
        " --device cpu"
    } else {
        ""
    };
    let priced: Vec<u32> = o
        .rows
        .iter()
        .filter(|r| r.step_s.is_some())
        .map(|r| r.rank)
        .collect();
    let Some(&highest) = priced.iter().max() else {
        return Some(format!(
            "compression compute unmeasured: run {MEASURE_HINT}{on_cpu}"
        ));
    };
    // A rank above a losing one sends more and computes more, so only lower ranks can win.
    let lower: Vec<u32> = o
        .rows
        .iter()
        .filter(|r| r.step_s.is_none() && r.rank < highest)
        .map(|r| r.rank)
        .collect();
    let list = |ranks: &[u32]| {
        ranks
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    Some(if priced.len() == o.rows.len() {
        format!("{cast} beats every rank")
    } else if lower.is_empty() {
        format!(
            "{cast} beats every measured rank ({}); a higher rank sends and computes more",
            list(&priced)
        )
    } else {
        let variants: Vec<String> = lower.iter().map(|r| format!("powersgd{r}")).collect();
        let (ranks, send) = if lower.len() == 1 {
            ("rank", "sends less but its")
        } else {
            ("ranks", "send less but their")
        };
        format!(
            "{cast} beats every measured rank ({}); {ranks} {} {send} compression compute is unmeasured: run bench ddp --gpus 1 --variants base,{}{on_cpu}",
            list(&priced),
            list(&lower),
            variants.join(",")
        )
    })
}

/// Predicts each rank of [`RANKS`] against `against` (the casting hook) from `base` (the model's
/// calibrated inputs at N GPUs, no hook). `measured` gives the compression compute per rank, as
/// measured at one GPU; ranks without one are listed unpriced and never offered.
pub fn assess(
    base: &StepInputs,
    curve: &LinkCurve,
    against: CommHook,
    cast_compute_s: f64,
    measured: &[(u32, f64)],
) -> Result<PowerSgdOffer, ModelError> {
    let mut cast = base.clone().with_hook(against);
    cast.hook_compute_s = cast_compute_s;
    let against_step_s = predict(&cast, curve)?.step_s;
    let mut rows = Vec::new();
    for rank in RANKS {
        let compute_s = measured.iter().find(|(r, _)| *r == rank).map(|m| m.1);
        let mut inputs = base.clone().with_powersgd(rank);
        inputs.hook_compute_s = compute_s.unwrap_or(0.0);
        let p = predict(&inputs, curve)?;
        rows.push(PowerSgdRow {
            rank,
            wire_bytes: p.wire_bytes,
            step_s: compute_s.map(|_| p.step_s),
            compute_s,
        });
    }
    let rank = rows
        .iter()
        .find(|r| r.step_s.is_some_and(|s| s < against_step_s))
        .map(|r| r.rank);
    Ok(PowerSgdOffer {
        rank,
        against,
        against_step_s,
        rows,
        error_feedback_bytes: gradient_bytes(base),
        start_iter: TORCH_DEFAULT_START_ITER,
        snippet: rank.map(|r| format!("{POWERSGD_IMPORT}{}", powersgd_registration(r))),
        numerics: NUMERICS.to_string(),
        why_not: None,
        rests_on: None,
        withheld_rank: None,
    })
}

/// The gradients' bytes in their buckets' dtypes: the size of PowerSGD's error-feedback buffer.
fn gradient_bytes(base: &StepInputs) -> f64 {
    assign_buckets(
        &base.layout,
        base.grad_bytes_per_param,
        base.bucket_cap_mb * MIB,
        base.first_bucket_mb * MIB,
    )
    .iter()
    .map(|b| b.params.to_f64() * b.bytes_per_param)
    .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddp::ModelSpec;

    /// GPT-2 124M on 2 GPUs, 130 ms a micro-batch (the seeds' A6000 figure), fp32 gradients.
    fn gpt2() -> StepInputs {
        StepInputs::for_model(&ModelSpec::gpt2_124m(), 8, 0.130, 2, 1)
    }

    fn slow_link() -> LinkCurve {
        LinkCurve::flat(2, 1.0, 50e-6).unwrap()
    }

    fn fast_link() -> LinkCurve {
        LinkCurve::flat(2, 400.0, 20e-6).unwrap()
    }

    /// Compression compute per rank as a 1-GPU launch would report it (inputs of the test).
    const MEASURED: [(u32, f64); 4] = [(1, 0.010), (2, 0.012), (4, 0.015), (8, 0.020)];

    #[test]
    fn offered_at_the_smallest_rank_on_a_slow_link() {
        let o = assess(&gpt2(), &slow_link(), CommHook::Bf16, 0.001, &MEASURED).unwrap();
        assert_eq!(o.rank, Some(1), "{o:?}");
        let r1 = &o.rows[0];
        assert!(r1.step_s.unwrap() < o.against_step_s);
        // Far fewer bytes than bf16's 2 per parameter.
        assert!(r1.wire_bytes * 20.0 < 2.0 * gpt2().params().to_f64());
        // Its cost besides time: fp32 error feedback the size of the gradients, torch's warm-up.
        assert!((o.error_feedback_bytes - 4.0 * gpt2().params().to_f64()).abs() < 1.0);
        assert_eq!(o.start_iter, 1_000);
        let snippet = o.snippet.unwrap();
        assert!(
            snippet.contains("matrix_approximation_rank=1,"),
            "{snippet}"
        );
        assert!(snippet.contains("start_powerSGD_iter=1000"), "{snippet}");
    }

    #[test]
    fn not_offered_where_bf16_is_faster_on_a_fast_link() {
        let o = assess(&gpt2(), &fast_link(), CommHook::Bf16, 0.001, &MEASURED).unwrap();
        assert_eq!(o.rank, None, "{o:?}");
        assert!(o.snippet.is_none());
        assert!(o.rows.iter().all(|r| r.step_s.unwrap() > o.against_step_s));
    }

    #[test]
    fn a_rank_whose_compute_nobody_measured_is_never_offered() {
        let o = assess(&gpt2(), &slow_link(), CommHook::Bf16, 0.001, &[]).unwrap();
        assert_eq!(o.rank, None);
        assert!(o
            .rows
            .iter()
            .all(|r| r.step_s.is_none() && r.compute_s.is_none()));
        // Only rank 4 measured: rank 4 is the one named, its snippet says so.
        let o = assess(&gpt2(), &slow_link(), CommHook::Bf16, 0.001, &[(4, 0.015)]).unwrap();
        assert_eq!(o.rank, Some(4));
        assert!(o.snippet.unwrap().contains("matrix_approximation_rank=4,"));
    }

    #[test]
    fn higher_ranks_send_more() {
        let o = assess(&gpt2(), &slow_link(), CommHook::Bf16, 0.001, &MEASURED).unwrap();
        let bytes: Vec<f64> = o.rows.iter().map(|r| r.wire_bytes).collect();
        assert!(bytes.windows(2).all(|w| w[0] < w[1]), "{bytes:?}");
    }
}

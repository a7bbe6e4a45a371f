//! `ddpcheck recommend`: predicts every common DDP variant with the step-time model
//! ([`crate::step_time`]) on the node's measured all-reduce curve, picks the cheapest change that
//! reaches a target efficiency, and explains why, each reason citing the measurement it rests on.
//!
//! The choice: variants are tried from the cheapest change to the most invasive — as is, a
//! bf16 (then fp16) comm hook, then accumulation 2, bf16 + accumulation 2, 4, bf16 + 4, 8,
//! bf16 + 8 (a hook is one line and keeps the optimisation problem; accumulation multiplies the
//! effective batch). The first that reaches the target wins. If none does, the most efficient one
//! is named and the output says the target is out of reach; if even that is slower than one GPU,
//! the recommendation is one GPU.
//!
//! Measurements overrule the model: where the calibrated model misses a speedup the node
//! measured at the job's GPU count by more than 10%, its predictions for the node are marked
//! unreliable (`model_check`), the choice is made among the measured rows only, and the
//! `model_unreliable` warning says which row it missed and by how much.
//!
//! Parts: [`input`] (what it reads), `measured` (the measured facts it carries: host-side
//! facts, PowerSGD's compression compute, P2P's risk), `basis` (the step inputs and citations everything rests
//! on), `choice` (the variants' predictions, the model's check against the measured rows and
//! the choice), `answer` (the choice in the user's terms: how much sooner, at what device time
//! and money per million units), `reasons`, `warnings`, `snippet` (Python and environment
//! lines) and `words` (GPUs or CPU ranks). Text layout is the CLI's.

mod answer;
mod basis;
mod choice;
mod fit;
mod input;
mod levers;
mod measured;
mod p2p;
mod powersgd_offer;
mod reasons;
mod snippet;
mod warnings;
mod words;
mod wrapper_snippet;
mod wrapper_step;
mod wrappers;

use serde::{Deserialize, Serialize};

use crate::ddp::LayoutSummary;
use crate::ddp::{CommHook, RunDevice};
use crate::step_time::{ModelError, Overheads, Prediction};

pub use answer::Answer;
pub use choice::{
    pick, variant_name, variant_name_on, CheckedRow, ModelCheck, Pick, CHANGE_ORDER,
    MODEL_TOLERANCE,
};
pub use fit::{
    describe as describe_wrapper, keep_batch, memory_model, memory_rests_on, sharded_answer,
};
pub use input::{
    estimate_flops, CalibrationInput, ComputeSource, CurveProvenance, DdpOwnWork, EnvAb,
    MeasuredBaseline, MeasuredSpeedup, ModelInput, OtherCurve, RecommendInput, SideBySideInput,
};
pub use levers::{BROADCAST_SHARE, STATIC_GRAPH_SHARE};
pub use measured::{HostMeasured, P2pRisk, PowerSgdMeasured};
pub use powersgd_offer::{
    assess as assess_powersgd, PowerSgdOffer, PowerSgdRow, MEASURE_HINT,
    NUMERICS as POWERSGD_NUMERICS,
};
pub use snippet::{powersgd_registration, python_snippet};
pub use wrapper_snippet::fsdp2_snippet;
pub use wrapper_step::{predict_wrapper_step, WrapperStep, WrapperStepInput};
pub use wrappers::{weigh_wrappers, WrapperRow};

/// The efficiency (speedup over N GPUs) recommend aims at unless told otherwise: the simplest
/// change that reaches it is chosen.
pub const DEFAULT_TARGET_EFFICIENCY: f64 = 0.85;

/// A reason, and the measurement (or assumption) it rests on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reason {
    pub text: String,
    pub rests_on: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Warning {
    /// Stable identifier: `p2p_forced_across_host_bridge`, `nvlink_transport_disabled`,
    /// `one_gpu_faster`, `accumulation_changes_batch`, `bucket_cap_mb`, `fsdp`,
    /// `compute_estimated`, `curve_simulated`, `curve_other_world_size`,
    /// `side_by_side_unmeasured`, `measured_below_prediction`, `network_moved`, `ddp_own_work`,
    /// `other_recipe`, `model_unreliable`; the host-side levers `unused_parameters`,
    /// `find_unused_parameters_unneeded`, `broadcast_buffers`, `static_graph`.
    pub code: String,
    pub text: String,
    pub rests_on: String,
}

/// One variant's prediction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VariantRow {
    pub variant: String,
    pub hook: CommHook,
    pub accum: u32,
    pub prediction: Prediction,
    /// Money per million units at this row's speedup: the node's measured one where it measured
    /// the row (`cost_measured`), as the answer says it, else the prediction's.
    pub cost_per_million: Option<f64>,
    /// `cost_per_million` rests on the row's measured speedup, not the prediction.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cost_measured: bool,
    pub reaches_target: bool,
    /// What the node measured for this variant, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<MeasuredSpeedup>,
}

/// The same recipe on one GPU (accumulation 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SingleGpu {
    pub step_s: f64,
    pub throughput: f64,
    pub cost_per_million: Option<f64>,
}

/// The curve as the recommendation used it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CurveSummary {
    pub ranks: u32,
    pub alpha_us: f64,
    pub busbw_gbps: f64,
    /// busbw the curve gives at DDP's bucket size.
    pub busbw_at_bucket_gbps: f64,
    pub bucket_bytes: u64,
    /// The largest measured size and its busbw (absent for given numbers).
    pub largest_bytes: Option<u64>,
    pub busbw_at_largest_gbps: Option<f64>,
    pub provenance: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    pub model: String,
    pub params: u64,
    /// The parameters DDP all-reduces, where frozen ones leave fewer than `params`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trainable_params: Option<u64>,
    /// Tensors DDP packs into buckets, and the buckets at the default cap, from the model's
    /// own parameter list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<LayoutSummary>,
    pub gpus: u32,
    pub micro_batch: u32,
    /// Tokens (or samples) one GPU processes per micro-batch.
    pub units_per_micro_batch: f64,
    /// `tokens/s` or `samples/s`.
    pub throughput_unit: String,
    pub target_efficiency: f64,
    pub compute: ComputeSource,
    pub compute_s: f64,
    pub curve: CurveSummary,
    pub overheads: Overheads,
    pub backward_fraction: f64,
    pub overheads_source: String,
    pub single_gpu: SingleGpu,
    pub rows: Vec<VariantRow>,
    /// The chosen variant (`base`, `bf16`, `bf16+accum4`, …), or `1 GPU`.
    pub chosen: String,
    pub chosen_hook: CommHook,
    pub chosen_accum: u32,
    pub reaches_target: bool,
    pub use_one_gpu: bool,
    /// The choice in the user's terms: how many times sooner N GPUs finish than one, and the
    /// device time (and money) per million units against one GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Answer>,
    /// PowerSGD against bf16 (fp16 on CPU ranks): the rank offered, or why none is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub powersgd: Option<PowerSgdOffer>,
    /// The rows the node measured at the job's GPU count against the calibrated model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_check: Option<ModelCheck>,
    /// GPUs, or CPU ranks over gloo.
    #[serde(default, skip_serializing_if = "RunDevice::is_cuda")]
    pub device: RunDevice,
    /// What every speedup, efficiency and cost ratio here rests on: one GPU without DDP
    /// (`plain`, where a 1-GPU launch timed it) or the 1-GPU step in DDP (`ddp`).
    #[serde(default = "crate::ddp::Reference::before_the_field")]
    pub reference: crate::ddp::Reference,
    /// DDP's own work at one GPU: the 1-GPU step in DDP over the same model without DDP, the
    /// median of the launch's interleaved rounds; where a launch timed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ddp_over_plain: Option<f64>,
    pub summary: String,
    pub reasons: Vec<Reason>,
    pub warnings: Vec<Warning>,
    /// Copy-paste Python for the chosen variant.
    pub python: String,
    /// Shell lines for the NCCL environment.
    pub env: Vec<String>,
    /// Memory first: each wrapper's bytes per GPU against the GPU's memory, and where DDP does
    /// not fit, the least sharding that does (then `chosen` names that wrapper and `rows` is
    /// empty: no DDP variant is offered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<crate::memory::MemoryPlan>,
    /// The sharded answer's FSDP2 step, predicted on the node's all-gather and reduce-scatter
    /// curves (and measured where the node ran it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrapper_step: Option<WrapperStep>,
    /// Where DDP fits: each FSDP2 wrapper that fits, predicted (or measured) at the job's GPUs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wrapper_rows: Vec<WrapperRow>,
}

/// Predicts the variants and chooses one. See the module docs for the rule. Memory first: where
/// DDP does not fit one GPU ([`crate::memory`]), the answer is the least sharding that fits and
/// no DDP variant is offered.
pub fn recommend(input: &RecommendInput) -> Result<Recommendation, ModelError> {
    input::validate(input)?;
    let memory = fit::memory_plan(input);
    if let Some(plan) = memory.clone().filter(|p| p.ddp_fits == Some(false)) {
        return Ok(fit::sharded_answer(
            &input.model,
            plan,
            &input.recipe,
            input.device,
        ));
    }
    let basis = basis::Basis::new(input)?;
    let choice = choice::choose(input, &basis)?;
    let reasons = reasons::reasons(input, &basis, &choice)?;
    let summary = choice::summary(input, &basis, &choice);
    let warnings = warnings::warnings(input, &basis, &choice)?;
    let powersgd =
        powersgd_offer::offer(input, &basis)?.map(|o| o.checked(choice.model_check.as_ref()));
    let row = choice.chosen();
    let (chosen, chosen_hook, chosen_accum) = if choice.use_one_gpu {
        ("1 GPU".to_string(), CommHook::None, 1)
    } else {
        (row.variant.clone(), row.hook, row.accum)
    };
    Ok(Recommendation {
        model: input.model.name(),
        params: input.model_params(),
        trainable_params: Some(input.trainable_params()).filter(|t| *t != input.model_params()),
        layout: basis.layout_summary.clone(),
        gpus: input.gpus,
        micro_batch: input.micro_batch,
        units_per_micro_batch: basis.units,
        throughput_unit: basis.unit.to_string(),
        target_efficiency: input.target_efficiency,
        compute: input.compute.clone(),
        compute_s: basis.compute_s,
        curve: basis.curve,
        overheads: basis.base.overheads,
        backward_fraction: basis.base.backward_fraction,
        overheads_source: basis.overheads_source,
        python: snippet::python_for(
            choice.use_one_gpu,
            chosen_hook,
            chosen_accum,
            &input.recipe,
            input.device,
        ),
        env: snippet::env_lines(input),
        chosen,
        chosen_hook,
        chosen_accum,
        reaches_target: choice.reaches_target,
        use_one_gpu: choice.use_one_gpu,
        answer: choice.answer,
        powersgd,
        model_check: choice.model_check,
        device: input.device,
        reference: input.rests_on_reference(),
        ddp_over_plain: input.ddp_own_work.as_ref().map(|o| o.ratio),
        single_gpu: choice.single,
        rows: choice.rows,
        summary,
        reasons,
        warnings,
        memory,
        wrapper_step: None,
        wrapper_rows: Vec::new(),
    })
}

impl Recommendation {
    /// Copy-paste Python for the chosen variant.
    pub fn python_snippet(&self) -> &str {
        &self.python
    }

    /// Shell lines for the NCCL environment.
    pub fn env_lines(&self) -> &[String] {
        &self.env
    }
}

#[cfg(test)]
mod fit_tests;
#[cfg(test)]
mod levers_tests;
#[cfg(test)]
mod measured_tests;
#[cfg(test)]
mod own_work_tests;
#[cfg(test)]
mod powersgd_tests;
#[cfg(test)]
mod provenance_tests;
#[cfg(test)]
mod tests;

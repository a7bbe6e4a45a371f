//! What `recommend` reads: the model, the node's measured all-reduce curve and compute time,
//! and the measurements that refine them (calibration, side-by-side slowdown, measured
//! speedups, environment A/B results), with their provenance; and the check of that input.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::backend::BackendKind;
use crate::ddp::{beyond_noise, ModelSpec, ParamLayout, Recipe, RunDevice};
use crate::num::ToF64;
use crate::step_time::{Calibration, CrossCheck, LinkCurve, ModelError};
use crate::topology::LinkClass;
use crate::units::{fmt_count, fmt_s};

/// The model to recommend for: a preset/spec, or only a parameter count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelInput {
    Spec { spec: ModelSpec },
    Params { params: u64 },
}

impl ModelInput {
    pub fn name(&self) -> String {
        match self {
            ModelInput::Spec { spec } => spec.name(),
            ModelInput::Params { params } => {
                format!("{} parameters", fmt_count((*params).to_f64()))
            }
        }
    }

    pub fn params(&self) -> u64 {
        match self {
            ModelInput::Spec { spec } => spec.params(),
            ModelInput::Params { params } => *params,
        }
    }
}

/// Training FLOPs of one micro-batch (for [`ComputeSource::Estimated`]): the spec's own count
/// for presets; `6·params·tokens` for a bare parameter count.
pub fn estimate_flops(model: &ModelInput, micro_batch: u32, seq: u32) -> f64 {
    match model {
        ModelInput::Spec { spec } => spec.train_flops_per_sample() * f64::from(micro_batch),
        ModelInput::Params { params } => {
            6.0 * (*params).to_f64() * f64::from(micro_batch) * f64::from(seq.max(1))
        }
    }
}

/// Where the compute time of one micro-batch on one GPU comes from. The output says which.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ComputeSource {
    /// A one-GPU run of the DDP runner on this node (step time / accumulation).
    Measured { seconds: f64, detail: String },
    /// Given by the user or a profile.
    Given { seconds: f64, detail: String },
    /// FLOPs at an assumed rate: an estimate, flagged as such.
    Estimated { flops: f64, tflops: f64 },
}

impl ComputeSource {
    pub fn seconds(&self) -> f64 {
        match self {
            ComputeSource::Measured { seconds, .. } | ComputeSource::Given { seconds, .. } => {
                *seconds
            }
            ComputeSource::Estimated { flops, tflops } => flops / (tflops * 1e12),
        }
    }

    /// One line: what the number is and where it comes from.
    pub fn describe(&self) -> String {
        match self {
            ComputeSource::Measured { seconds, detail } => {
                format!("measured: {} per micro-batch, {detail}", fmt_s(*seconds))
            }
            ComputeSource::Given { seconds, detail } => {
                format!("given: {} per micro-batch, {detail}", fmt_s(*seconds))
            }
            ComputeSource::Estimated { flops, tflops } => format!(
                "ESTIMATE, not measured: {:.2} TFLOP per micro-batch at an assumed {tflops:.1} TFLOP/s = {}",
                flops / 1e12,
                fmt_s(self.seconds())
            ),
        }
    }
}

/// Where the all-reduce curve comes from (invariant 5).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CurveProvenance {
    pub host: String,
    /// RFC 3339.
    pub time: String,
    pub backend: Option<BackendKind>,
    /// `sim:PROFILE`, `real`, or where given numbers were published.
    #[serde(default)]
    pub label: String,
    /// How it was measured when not by a `bench collectives` sweep, e.g. inside DDP runs.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub method: String,
}

impl CurveProvenance {
    pub fn describe(&self) -> String {
        let at = match (self.host.is_empty(), self.time.is_empty()) {
            (false, false) => format!("{} {}", self.host, self.time),
            (false, true) => self.host.clone(),
            (true, false) => self.time.clone(),
            (true, true) => String::new(),
        };
        let label = if self.label.is_empty() {
            String::new()
        } else {
            format!(" [{}]", self.label)
        };
        let at = if self.method.is_empty() {
            at
        } else {
            format!("{}, {at}", self.method)
        };
        match self.backend {
            Some(BackendKind::Real) => format!("measured {at}{label}").trim_end().to_string(),
            Some(BackendKind::Sim) => format!("SIMULATED {at}{label}").trim_end().to_string(),
            None => format!("given {at}{label}").trim_end().to_string(),
        }
    }
}

/// One environment A/B result: the candidate's label (`NAME=VALUE[,…]`) and its all-reduce busbw
/// relative to the current environment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EnvAb {
    pub label: String,
    pub busbw_ratio: f64,
}

/// Overheads fitted on this node, with where they come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CalibrationInput {
    pub calibration: Calibration,
    /// e.g. `6 DDP runs on gpu-node-3 2026-11-30T10:00Z (real)`.
    pub source: String,
    /// The fit checked on models it did not see ([`crate::step_time::cross_check`]): where it
    /// predicted them worse than the defaults did, the defaults are used. `None` with runs of
    /// one model (nothing to hold out): the fit is used.
    pub cross_check: Option<CrossCheck>,
}

/// N processes side by side, as the node measured it (see `StepInputs::side_by_side_slowdown`
/// and `step_time::SideBySide`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SideBySideInput {
    /// The N-GPU `nocomm` step over the 1-GPU step, as measured.
    pub measured_ratio: f64,
    /// Launches of the less-launched side (1: a single launch each; the noise test needs two).
    pub launches: usize,
    /// One GPU alone was timed inside the `nocomm` run's own launches (the launch's speed
    /// cancels), not in launches of its own.
    #[serde(default)]
    pub within_launch: bool,
    /// The slowdown lies beyond its launches' noise: Student's t times its standard error, at
    /// least twice it ([`crate::step_time::SideBySide::distinct`]). Only then is it counted:
    /// anything less is within the launch-to-launch noise.
    pub distinct: bool,
    /// How far ln(measured_ratio) may move by its launches' noise alone, the bound `distinct`
    /// tests (about a relative bound: 0.09 is ±9%); `None` with a single launch.
    #[serde(default)]
    pub noise_bound: Option<f64>,
    /// The runs it comes from.
    pub rests_on: String,
}

impl SideBySideInput {
    /// The slowdown a model takes: the measured one where it lies beyond its launches' noise
    /// (never below 1: less is noise, not a speed-up), else 1.
    pub fn counted(&self) -> f64 {
        if self.distinct && self.measured_ratio.is_finite() {
            self.measured_ratio.max(1.0)
        } else {
            1.0
        }
    }
}

/// A speedup the node measured for one of the variants at the recommendation's GPU count: shown
/// beside the prediction, and checked against it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeasuredSpeedup {
    /// The variant's row name (`base`, `bf16`, `accum4`, `bf16+accum4`, …).
    pub variant: String,
    pub speedup: f64,
    /// Relative standard error from repeated launches (`DdpResult::speedup_uncertainty`);
    /// `None` for a single launch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncertainty: Option<f64>,
    /// How far it may move by launch noise alone (`DdpResult::speedup_noise_bound`); `None` for
    /// a single launch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise_bound: Option<f64>,
    /// The runs it comes from.
    pub rests_on: String,
}

impl MeasuredSpeedup {
    /// Whether a prediction differs from this measurement by more than the measurement's noise
    /// ([`beyond_noise`]).
    pub fn contradicted_by(&self, predicted: f64) -> bool {
        beyond_noise((predicted - self.speedup) / self.speedup, self.noise_bound)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecommendInput {
    pub model: ModelInput,
    pub micro_batch: u32,
    /// Tokens per sample for decoders and bare parameter counts (ignored for MLPs).
    pub seq: u32,
    /// Tokens in one sample of a model built by code, as its launches declared it (a factory's
    /// `tokens_per_sample`, reported as throughput in tokens/s): its rates are then in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_sample: Option<u32>,
    /// GPUs the job would use.
    pub gpus: u32,
    /// GPUs of the node the price is for.
    pub node_gpus: u32,
    /// Price of the whole node per hour.
    pub price_per_hour: Option<f64>,
    /// 0..=1.
    pub target_efficiency: f64,
    pub curve: LinkCurve,
    pub curve_provenance: CurveProvenance,
    /// The worst GPU pair link of the node, if the topology is known.
    pub worst_link: Option<LinkClass>,
    /// NCCL_* variables in force.
    #[serde(default)]
    pub nccl_env: BTreeMap<String, String>,
    #[serde(default)]
    pub env_ab: Vec<EnvAb>,
    /// P2P over PCIe on consumer cards (NVML's refusal, a transport that hangs there), for the
    /// snippet's environment section.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p2p: Option<super::measured::P2pRisk>,
    pub compute: ComputeSource,
    /// Fitted DDP overheads; the model's defaults when absent.
    #[serde(default)]
    pub calibration: Option<CalibrationInput>,
    /// The user's bucket_cap_mb, if not DDP's default.
    #[serde(default)]
    pub bucket_cap_mb: Option<f64>,
    /// Memory of one GPU: the memory plan's and the FSDP warning's.
    #[serde(default)]
    pub gpu_memory_bytes: Option<u64>,
    /// torch's peak of the node's 1-GPU run of this model at this micro-batch (its unhooked
    /// DDP run where there is one): the memory plan reads the activations from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_peak: Option<crate::memory::check::MeasuredPeak>,
    /// The node's 1-GPU runs of this model read at their phases (any micro-batch): each
    /// wrapper's own measured activations, which overrule its estimate and `memory_peak`'s.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory_phases: Vec<crate::memory::PhaseRun>,
    /// Per-step work that does not repeat with accumulation (see `StepInputs::optimizer_s`),
    /// when 1-GPU runs at two accumulations measured it.
    #[serde(default)]
    pub optimizer_s: Option<f64>,
    /// Per-step cost of a compressing comm hook (see `StepInputs::hook_compute_s`), measured.
    #[serde(default)]
    pub hook_compute_s: Option<f64>,
    /// The runs `hook_compute_s` comes from, for the reason that cites it.
    #[serde(default)]
    pub hook_rests_on: Option<String>,
    /// PowerSGD's compression compute per rank, where 1-GPU launches measured it; the ranks
    /// without one are never offered.
    #[serde(default)]
    pub powersgd_compute: Vec<super::measured::PowerSgdMeasured>,
    /// How much N GPUs side by side slow each other's compute, when measured at `gpus`.
    #[serde(default)]
    pub side_by_side: Option<SideBySideInput>,
    /// Speedups the node measured for these variants at `gpus` (the newest last).
    #[serde(default)]
    pub measured: Vec<MeasuredSpeedup>,
    /// Another measurement of the same link the model did not read (a `bench collectives`
    /// sweep, when `curve` came from DDP's own runs), for the warning when the two part.
    #[serde(default)]
    pub other_curve: Option<OtherCurve>,
    /// Plain DDP's step measured at `gpus` on this node: the model is calibrated on it (the
    /// overlap DDP realised and the bandwidth it saw while training) before it predicts the
    /// other variants.
    #[serde(default)]
    pub baseline: Option<MeasuredBaseline>,
    /// The model's parameters as a launch's torch registered them: the gradient layout the
    /// model packs into buckets (a preset's own tensors where no launch reported them; a model
    /// built by code needs it).
    #[serde(default)]
    pub param_layout: Option<ParamLayout>,
    /// DDP's own work at one GPU, where a 1-GPU run also timed the model without DDP.
    #[serde(default)]
    pub ddp_own_work: Option<DdpOwnWork>,
    /// The reference asked for: with `plain` and `ddp_own_work`, `compute` and `optimizer_s`
    /// are the step without DDP and DDP's own work is a term of every step
    /// ([`RecommendInput::ddp_own_s`]); otherwise the speedups rest on the 1-GPU step in DDP.
    #[serde(default = "crate::ddp::Reference::before_the_field")]
    pub reference: crate::ddp::Reference,
    /// The parameters without a gradient and the buffer broadcast a launch measured, for the
    /// host-side levers.
    #[serde(default)]
    pub host: Option<super::measured::HostMeasured>,
    /// The recipe the user's training runs (autocast, DDP options), for the snippet.
    #[serde(default)]
    pub recipe: Recipe,
    /// Saved runs of this model that ran another recipe and were set aside, said in one line.
    #[serde(default)]
    pub other_recipe: Option<String>,
    /// What the ranks run on: GPUs, or CPU ranks over gloo (`--device cpu`), whose variants
    /// use the fp16 hook where GPUs would use bf16 and whose text never speaks of GPUs.
    #[serde(default)]
    pub device: RunDevice,
}

/// A 1-GPU run's step in DDP against the same model without DDP in the same launch
/// (`core::ddp::PlainReference`): training on one GPU is the latter, the speedups' reference;
/// the difference is DDP's own work, part of every step in DDP.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DdpOwnWork {
    pub ddp_step_s: f64,
    pub plain_step_s: f64,
    /// The DDP step over the plain one, the median of the launch's interleaved rounds.
    pub ratio: f64,
    /// How far ln(ratio) may move by the rounds' own spread
    /// (`crate::ddp::rounds_noise_bound` of its rounds); `None` from a single round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise_bound: Option<f64>,
    /// The run it comes from, for the citation.
    pub rests_on: String,
}

impl RecommendInput {
    /// The reference the recommendation rests on: one GPU without DDP where it was asked for
    /// and a 1-GPU launch timed it, else the 1-GPU step in DDP.
    pub fn rests_on_reference(&self) -> crate::ddp::Reference {
        match (&self.ddp_own_work, self.reference) {
            (Some(_), crate::ddp::Reference::Plain) => crate::ddp::Reference::Plain,
            _ => crate::ddp::Reference::Ddp,
        }
    }

    /// DDP's own work per step the model adds to every step in DDP, seconds: the 1-GPU step in
    /// DDP less the step without DDP, where the recommendation rests on the latter. A launch
    /// whose plain step came out slower (noise) adds nothing.
    pub fn ddp_own_s(&self) -> f64 {
        match (&self.ddp_own_work, self.rests_on_reference()) {
            (Some(o), crate::ddp::Reference::Plain) if o.ratio.is_finite() && o.ratio > 1.0 => {
                o.ddp_step_s * (1.0 - 1.0 / o.ratio)
            }
            _ => 0.0,
        }
    }

    /// Every parameter of the model: the launch's count where it reported one.
    pub fn model_params(&self) -> u64 {
        self.param_layout
            .as_ref()
            .map_or_else(|| self.model.params(), ParamLayout::total_params)
    }

    /// The parameters whose gradients DDP all-reduces (frozen ones send none).
    pub fn trainable_params(&self) -> u64 {
        self.param_layout
            .as_ref()
            .map_or_else(|| self.model.params(), ParamLayout::trainable_params)
    }
}

/// Plain DDP's measured step at the recommendation's GPU count, and where it comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeasuredBaseline {
    pub step_s: f64,
    /// The run it comes from, for the citations.
    pub rests_on: String,
}

/// A second all-reduce curve of the node, and where it comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OtherCurve {
    pub curve: LinkCurve,
    pub provenance: CurveProvenance,
}

/// Rejects input no prediction can rest on: out-of-range counts, targets, prices, and
/// measurements that are not positive.
pub(super) fn validate(input: &RecommendInput) -> Result<(), ModelError> {
    let bad = |m: String| Err(ModelError::Invalid(m));
    if !(1..=1_000_000).contains(&input.micro_batch) {
        return bad(format!(
            "micro-batch {} must be 1..=1000000",
            input.micro_batch
        ));
    }
    if !(1..=4096).contains(&input.gpus) || !(1..=4096).contains(&input.node_gpus) {
        return bad(format!(
            "GPUs {} and node GPUs {} must be 1..=4096",
            input.gpus, input.node_gpus
        ));
    }
    if !(input.target_efficiency > 0.0 && input.target_efficiency <= 1.0) {
        return bad(format!(
            "target efficiency {} must be within (0, 1]",
            input.target_efficiency
        ));
    }
    if let Some(p) = input.price_per_hour {
        if !(p.is_finite() && p > 0.0) {
            return bad(format!("price per hour {p} must be a positive number"));
        }
    }
    if let ComputeSource::Estimated { flops, tflops } = &input.compute {
        if !(flops.is_finite() && *flops > 0.0 && tflops.is_finite() && *tflops > 0.0) {
            return bad("an estimated compute time needs positive FLOPs and TFLOP/s".into());
        }
    }
    if input.model_params() == 0 {
        return match &input.model {
            ModelInput::Spec { spec } if spec.source().is_some() => bad(format!(
                "{}: no launch reported its parameters; measure it (bench ddp, or recommend \
                 without --step-time-ms/--estimate-tflops) or give --from a bench ddp report of it",
                spec.name()
            )),
            _ => bad("the model has no parameters".into()),
        };
    }
    if let ModelInput::Spec { spec } = &input.model {
        spec.validate()
            .map_err(|e| ModelError::Invalid(e.to_string()))?;
    }
    for m in &input.measured {
        let ok = |x: Option<f64>| x.is_none_or(|u| u.is_finite() && u >= 0.0);
        if !(m.speedup.is_finite() && m.speedup > 0.0 && ok(m.uncertainty) && ok(m.noise_bound)) {
            return bad(format!(
                "measured speedup {} (±{:?}) of {} must be positive",
                m.speedup, m.uncertainty, m.variant
            ));
        }
    }
    Ok(())
}

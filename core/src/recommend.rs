//! `ddpcheck recommend`: predicts every common DDP variant with the step-time model
//! ([`crate::model`]) on the node's measured all-reduce curve, picks the cheapest change that
//! reaches a target efficiency, and explains why, each reason citing the measurement it rests on.
//!
//! The choice: variants are tried from the cheapest change to the most invasive — as is, a
//! bf16 (then fp16) comm hook, then accumulation 2, bf16 + accumulation 2, 4, bf16 + 4, 8,
//! bf16 + 8 (a hook is one line and keeps the optimisation problem; accumulation multiplies the
//! effective batch). The first that reaches the target wins. If none does, the most efficient one
//! is named and the output says the target is out of reach; if even that is slower than one GPU,
//! the recommendation is one GPU.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::backend::BackendKind;
use crate::ddp::{beyond_noise, CommHook, ModelSpec};
use crate::model::{
    cost_per_million, predict, Calibration, CrossCheck, GradLayout, LinkCurve, ModelError,
    Overheads, Prediction, StepInputs, MIB,
};
use crate::topology::LinkClass;

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
            ModelInput::Params { params } => format!("{} parameters", fmt_count(*params as f64)),
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
            6.0 * *params as f64 * f64::from(micro_batch) * f64::from(seq.max(1))
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
    /// The fit checked on models it did not see ([`crate::model::cross_check`]): where it
    /// predicted them worse than the defaults did, the defaults are used. `None` with runs of
    /// one model (nothing to hold out): the fit is used.
    pub cross_check: Option<CrossCheck>,
}

/// N processes side by side, as the node measured it (see `StepInputs::side_by_side_slowdown`
/// and `model::SideBySide`).
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
    /// least twice it ([`crate::model::SideBySide::distinct`]). Only then is it counted:
    /// anything less is within the launch-to-launch noise.
    pub distinct: bool,
    /// How far ln(measured_ratio) may move by its launches' noise alone, the bound `distinct`
    /// tests (about a relative bound: 0.09 is ±9%); `None` with a single launch.
    #[serde(default)]
    pub noise_bound: Option<f64>,
    /// The runs it comes from.
    pub rests_on: String,
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

/// The row name of plain DDP with this hook and accumulation, if recommend has such a row.
pub fn variant_name(hook: CommHook, accum: u32) -> Option<&'static str> {
    VARIANTS
        .iter()
        .find(|(_, h, k)| *h == hook && *k == accum)
        .map(|(name, _, _)| *name)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecommendInput {
    pub model: ModelInput,
    pub micro_batch: u32,
    /// Tokens per sample for decoders and bare parameter counts (ignored for MLPs).
    pub seq: u32,
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
    pub compute: ComputeSource,
    /// Fitted DDP overheads; the model's defaults when absent.
    #[serde(default)]
    pub calibration: Option<CalibrationInput>,
    /// The user's bucket_cap_mb, if not DDP's default.
    #[serde(default)]
    pub bucket_cap_mb: Option<f64>,
    /// Memory of one GPU, for the FSDP warning.
    #[serde(default)]
    pub gpu_memory_bytes: Option<u64>,
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
}

/// A second all-reduce curve of the node, and where it comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OtherCurve {
    pub curve: LinkCurve,
    pub provenance: CurveProvenance,
}

/// How far (as a factor either way) two measurements of one link may part at the bucket size
/// before `network_moved` is warned: beyond the 1–3% by which DDP's probes and the sweeps agreed
/// over NVLink and shm, and enough to move a communication-bound prediction by more than 10%
/// (over the host network they parted by 2–26% minutes apart; docs/results/h200x2-session8.md).
const NETWORK_MOVED_FACTOR: f64 = 1.15;

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
    /// `side_by_side_unmeasured`, `measured_below_prediction`, `network_moved`.
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
    pub cost_per_million: Option<f64>,
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
    pub summary: String,
    pub reasons: Vec<Reason>,
    pub warnings: Vec<Warning>,
    /// Copy-paste Python for the chosen variant.
    pub python: String,
    /// Shell lines for the NCCL environment.
    pub env: Vec<String>,
}

/// Rows in display order: (name, hook, accumulation).
const VARIANTS: [(&str, CommHook, u32); 9] = [
    ("base", CommHook::None, 1),
    ("fp16", CommHook::Fp16, 1),
    ("bf16", CommHook::Bf16, 1),
    ("accum2", CommHook::None, 2),
    ("accum4", CommHook::None, 4),
    ("accum8", CommHook::None, 8),
    ("bf16+accum2", CommHook::Bf16, 2),
    ("bf16+accum4", CommHook::Bf16, 4),
    ("bf16+accum8", CommHook::Bf16, 8),
];

/// The same variants from the cheapest change to the most invasive.
const CHANGE_ORDER: [&str; 9] = [
    "base",
    "bf16",
    "fp16",
    "accum2",
    "bf16+accum2",
    "accum4",
    "bf16+accum4",
    "accum8",
    "bf16+accum8",
];

fn validate(input: &RecommendInput) -> Result<(), ModelError> {
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
        if !(p.is_finite() && p >= 0.0) {
            return bad(format!("price per hour {p} must be zero or positive"));
        }
    }
    if let ComputeSource::Estimated { flops, tflops } = &input.compute {
        if !(flops.is_finite() && *flops > 0.0 && tflops.is_finite() && *tflops > 0.0) {
            return bad("an estimated compute time needs positive FLOPs and TFLOP/s".into());
        }
    }
    if input.model.params() == 0 {
        return bad("the model has no parameters".into());
    }
    if let ModelInput::Spec { spec } = &input.model {
        spec.validate().map_err(ModelError::Invalid)?;
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

/// Predicts the variants and chooses one. See the module docs for the rule.
pub fn recommend(input: &RecommendInput) -> Result<Recommendation, ModelError> {
    validate(input)?;
    let n = input.gpus;
    let compute_s = input.compute.seconds();
    let (layout, units, unit) = match &input.model {
        ModelInput::Spec {
            spec: spec @ ModelSpec::Mlp { .. },
        } => (
            GradLayout::for_model(spec),
            f64::from(input.micro_batch),
            "samples/s",
        ),
        ModelInput::Spec { spec } => (
            GradLayout::for_model(spec),
            f64::from(input.micro_batch) * f64::from(input.seq.max(1)),
            "tokens/s",
        ),
        ModelInput::Params { params } => (
            GradLayout::uniform(*params),
            f64::from(input.micro_batch) * f64::from(input.seq.max(1)),
            "tokens/s",
        ),
    };
    let (unit_word, unit_one) = if unit == "samples/s" {
        ("samples", "sample")
    } else {
        ("tokens", "token")
    };
    let mut base = StepInputs::new(layout, compute_s, n, 1);
    base.units_per_micro_batch = units;
    base.optimizer_s = input.optimizer_s.unwrap_or(0.0);
    base.hook_compute_s = input.hook_compute_s.unwrap_or(0.0);
    if let Some(mb) = input.bucket_cap_mb {
        base.bucket_cap_mb = mb;
    }
    if let Some(sbs) = &input.side_by_side {
        if !(sbs.measured_ratio.is_finite() && sbs.measured_ratio > 0.0) {
            return Err(ModelError::Invalid(format!(
                "side-by-side ratio {} must be positive",
                sbs.measured_ratio
            )));
        }
        if sbs.distinct {
            base.side_by_side_slowdown = sbs.measured_ratio.max(1.0);
        }
    }
    let percent = |x: f64| x * 100.0;
    let overheads_source = match &input.calibration {
        Some(CalibrationInput {
            source,
            cross_check: Some(x),
            ..
        }) if !x.helps() => format!(
            "the model's defaults: fitted on {source}, the overheads predicted each model from the others' runs worse than the defaults ({:.1}% rms step-time error against {:.1}% over {} runs of {} models), so they are not used",
            percent(x.rms_log_error_calibrated),
            percent(x.rms_log_error_default),
            x.runs,
            x.models
        ),
        Some(c) => {
            c.calibration.apply(&mut base);
            let checked = c.cross_check.map_or(String::new(), |x| {
                format!(
                    "; each of its {} models predicted from the others' runs: {:.1}% → {:.1}%",
                    x.models,
                    percent(x.rms_log_error_default),
                    percent(x.rms_log_error_calibrated)
                )
            });
            format!(
                "calibrated from {} ({} runs, step-time error {:.0}% → {:.0}% rms{checked})",
                c.source,
                c.calibration.runs_used,
                percent(c.calibration.rms_log_error_before),
                percent(c.calibration.rms_log_error_after)
            )
        }
        None => {
            "the model's defaults, not measured on this node (calibrate with `ddpcheck bench ddp`)"
                .to_string()
        }
    };
    base.validate()?;
    let curve = &input.curve;
    let price_per_gpu = input.price_per_hour.map(|p| p / f64::from(input.node_gpus));
    let cost = |tput: f64, gpus: u32| price_per_gpu.and_then(|p| cost_per_million(tput, p, gpus));

    let single_step = compute_s + base.optimizer_s;
    let single_tput = units / single_step;
    let single = SingleGpu {
        step_s: single_step,
        throughput: single_tput,
        cost_per_million: cost(single_tput, 1),
    };

    let mut rows = Vec::new();
    for (name, hook, k) in VARIANTS {
        let p = predict(&base.clone().with_hook(hook).with_accum(k), curve)?;
        rows.push(VariantRow {
            variant: name.to_string(),
            hook,
            accum: k,
            cost_per_million: cost(p.throughput, n),
            reaches_target: p.efficiency >= input.target_efficiency,
            prediction: p,
            measured: input
                .measured
                .iter()
                .rev()
                .find(|m| m.variant == name)
                .cloned(),
        });
    }
    let row = |name: &str| rows.iter().find(|r| r.variant == name);
    let first_ok = CHANGE_ORDER
        .iter()
        .filter_map(|v| row(v))
        .find(|r| r.reaches_target);
    let best = rows
        .iter()
        .max_by(|a, b| a.prediction.efficiency.total_cmp(&b.prediction.efficiency));
    let (Some(baseline), Some(best)) = (row("base"), best) else {
        return Err(ModelError::Invalid("no variant could be predicted".into()));
    };
    let chosen_row = first_ok.unwrap_or(best);
    let reaches_target = first_ok.is_some();
    let use_one_gpu = n > 1 && best.prediction.speedup < 1.0;

    // ---- curve summary ----
    let bucket_bytes = (base.bucket_cap_mb * MIB) as u64;
    let largest = curve.points.last().map(|p| p.bytes);
    let provenance = input.curve_provenance.describe();
    let curve_summary = CurveSummary {
        ranks: curve.ranks,
        alpha_us: curve.alpha_s * 1e6,
        busbw_gbps: curve.busbw_gbps,
        busbw_at_bucket_gbps: curve.busbw_at(bucket_bytes),
        bucket_bytes,
        largest_bytes: largest,
        busbw_at_largest_gbps: largest.map(|b| curve.busbw_at(b)),
        provenance: provenance.clone(),
    };
    let curve_cite = {
        let mut s = format!(
            "all-reduce busbw {:.2} GB/s at {}",
            curve_summary.busbw_at_bucket_gbps,
            fmt_bytes(bucket_bytes as f64)
        );
        if let (Some(b), Some(bw)) = (largest, curve_summary.busbw_at_largest_gbps) {
            if b != bucket_bytes {
                let _ = write!(s, " and {bw:.2} GB/s at {}", fmt_bytes(b as f64));
            }
        }
        let _ = write!(
            s,
            " (α {:.1} µs, {} ranks), {provenance}",
            curve.alpha_s * 1e6,
            curve.ranks
        );
        s
    };
    let compute_cite = input.compute.describe();
    let model_cite = format!(
        "step-time model on the {}; compute {}",
        if curve.points.is_empty() {
            "given busbw"
        } else {
            "measured curve"
        },
        compute_cite
    );

    // ---- reasons ----
    let mut reasons = Vec::new();
    let bp = &baseline.prediction;
    reasons.push(Reason {
        text: format!(
            "One micro-batch of {} takes {} on one GPU ({} {}).",
            input.model.name(),
            fmt_s(compute_s),
            fmt_count(units),
            unit_word
        ),
        rests_on: compute_cite.clone(),
    });
    if n > 1 {
        reasons.push(Reason {
            text: format!(
                "Plain DDP all-reduces {} of fp32 gradients per step in {} buckets: {} of communication on this link, {} of it after the backward pass ends; {:.2}× on {n} GPUs ({:.0}% efficiency).",
                fmt_bytes(bp.wire_bytes),
                bp.buckets,
                fmt_s(bp.comm_s),
                fmt_s(bp.exposed_comm_s),
                bp.speedup,
                bp.efficiency * 100.0
            ),
            rests_on: curve_cite.clone(),
        });
        if let Some(sbs) = &input.side_by_side {
            let pct = (sbs.measured_ratio - 1.0) * 100.0;
            let alone = if sbs.within_launch {
                "one GPU alone in the same launches"
            } else {
                "one GPU alone"
            };
            let measured = if pct.abs() < 0.5 {
                format!(
                    "{n} GPUs side by side, with no communication, ran a step as fast as {alone}"
                )
            } else {
                format!(
                    "{n} GPUs side by side, with no communication, ran a step {:.0}% {} than {alone}",
                    pct.abs(),
                    if pct > 0.0 { "slower" } else { "faster" }
                )
            };
            // The bound in the units of the measurement, so a reader sees how firm the count
            // is, or how many more launches it would take.
            let bound = |then: &str| {
                sbs.noise_bound.map_or(String::new(), |b| {
                    format!(
                        "{}{then}",
                        crate::ddp::describe_noise_bound(b, sbs.launches)
                    )
                })
            };
            let text = if sbs.distinct && pct >= 0.5 {
                let bound = bound("; ");
                format!(
                    "{measured}, beyond the noise of their launches ({bound}their processes share the host): the micro-batches under no_sync pay it in full, a synchronising one only where it outlasts the wait for its all-reduces, and no setting of DDP recovers it."
                )
            } else if pct.abs() < 0.5 {
                format!("{measured}: no slowdown to count.")
            } else if sbs.launches > 1 {
                let few = match (sbs.launches, sbs.within_launch) {
                    (2, false) => "; two launches a side tell little",
                    (2, true) => "; two launches tell little",
                    _ => "",
                };
                let bound = bound(": ");
                format!(
                    "{measured}, within the noise of their launches ({bound}Student's t times its standard error, at least twice it{few}): not counted."
                )
            } else {
                // Five: scripts/paired-noise.py puts the bound of five launches of three solo
                // rounds near ±9% on session 5's paired launches (docs/results/h200x2-session10.md).
                format!(
                    "{measured}, one launch each: not counted, as one launch of a short step can move more than that (with --repeats N the slowdown gets a noise bound; a 10% one needs about five launches to stand out)."
                )
            };
            reasons.push(Reason {
                text,
                rests_on: sbs.rests_on.clone(),
            });
        }
        reasons.push(Reason {
            text: format!(
                "DDP's own cost: {} per step and {} per bucket ({} more with a comm hook); backward is {:.0}% of a micro-batch.",
                fmt_s(base.overheads.ddp_fixed_s),
                fmt_s(base.overheads.per_bucket_s),
                fmt_s(base.overheads.hook_per_bucket_s),
                base.backward_fraction * 100.0
            ),
            rests_on: overheads_source.clone(),
        });
        let cp = &chosen_row.prediction;
        if chosen_row.hook != CommHook::None {
            reasons.push(Reason {
                text: format!(
                    "A {} comm hook sends 2 bytes per gradient instead of 4 (fp16 and bf16 are the same on the wire; bf16 needs no loss scaling of its range): {} on the wire, {} of communication, {} exposed.",
                    hook_name(chosen_row.hook),
                    fmt_bytes(cp.wire_bytes),
                    fmt_s(cp.comm_s),
                    fmt_s(cp.exposed_comm_s)
                ),
                rests_on: curve_cite.clone(),
            });
            if let Some(h) = input.hook_compute_s.filter(|h| *h > 0.0) {
                // What the hook's own cost adds to the N-GPU step: the same prediction without it.
                let mut free = base
                    .clone()
                    .with_hook(chosen_row.hook)
                    .with_accum(chosen_row.accum);
                free.hook_compute_s = 0.0;
                let added = cp.step_s - predict(&free, curve)?.step_s;
                let hidden = if added < 0.95 * h {
                    "part of it hides behind earlier buckets' all-reduces"
                } else {
                    "with no earlier all-reduce still running to hide it behind, nearly all of it shows"
                };
                reasons.push(Reason {
                    text: format!(
                        "The hook itself costs {} a step on one GPU (its host work and casts). DDP pays it bucket by bucket as the backward hands them over, so {hidden}: it adds {} to the {n}-GPU step.",
                        fmt_s(h),
                        fmt_s(added)
                    ),
                    rests_on: input
                        .hook_rests_on
                        .clone()
                        .unwrap_or_else(|| "measured on one GPU".into()),
                });
            }
        }
        if chosen_row.accum > 1 {
            reasons.push(Reason {
                text: format!(
                    "Accumulating {} micro-batches all-reduces once per {} of compute: the communication share of a step falls from {:.0}% to {:.0}%.",
                    chosen_row.accum,
                    fmt_s(cp.compute_s),
                    bp.comm_share * 100.0,
                    cp.comm_share * 100.0
                ),
                rests_on: model_cite.clone(),
            });
        }
        if let (Some(c1), Some(cn)) = (single.cost_per_million, chosen_row.cost_per_million) {
            let text = if c1 < cn {
                format!(
                    "Per {unit_one}, one GPU is cheaper: {} against {} per million on {n} GPUs ({:+.0}%). {n} GPUs buy wall-clock time ({:.2}× faster), not savings.",
                    fmt_money(c1),
                    fmt_money(cn),
                    (cn / c1 - 1.0) * 100.0,
                    cp.speedup
                )
            } else {
                format!(
                    "Per {unit_one}, {n} GPUs cost no more than one: {} against {} per million.",
                    fmt_money(cn),
                    fmt_money(c1)
                )
            };
            reasons.push(Reason {
                text,
                rests_on: format!(
                    "price ${:.2}/h for {} GPUs; {model_cite}",
                    input.price_per_hour.unwrap_or(0.0),
                    input.node_gpus
                ),
            });
        }
        let measured: Vec<(&VariantRow, &MeasuredSpeedup)> = rows
            .iter()
            .filter_map(|r| Some((r, r.measured.as_ref()?)))
            .collect();
        if !measured.is_empty() {
            let parts: Vec<String> = measured
                .iter()
                .map(|(r, m)| {
                    let error = (r.prediction.speedup - m.speedup) / m.speedup * 100.0;
                    let noise = match m.uncertainty {
                        Some(u) => format!(", measured ±{:.1}%", u * 100.0),
                        None => ", its noise unmeasured".into(),
                    };
                    let verdict = if m.contradicted_by(r.prediction.speedup) {
                        "beyond the noise"
                    } else {
                        "within the noise"
                    };
                    format!(
                        "{} {:.2}× (predicted {:.2}×, {error:+.1}%{noise}: {verdict})",
                        r.variant, m.speedup, r.prediction.speedup
                    )
                })
                .collect();
            let mut cites: Vec<&str> = measured.iter().map(|(_, m)| m.rests_on.as_str()).collect();
            cites.dedup();
            reasons.push(Reason {
                text: format!("Measured on this node at {n} GPUs: {}.", parts.join("; ")),
                rests_on: cites.join("; "),
            });
        }
        for ab in &input.env_ab {
            if ab.busbw_ratio >= 1.05 || ab.busbw_ratio <= 0.95 {
                reasons.push(Reason {
                    text: format!(
                        "{} changed all-reduce busbw ×{:.2} against the current environment: {}.",
                        ab.label,
                        ab.busbw_ratio,
                        if ab.busbw_ratio > 1.0 {
                            "worth setting"
                        } else {
                            "do not set it"
                        }
                    ),
                    rests_on: format!("environment A/B all-reduce test, {provenance}"),
                });
            }
        }
    } else {
        reasons.push(Reason {
            text: "One GPU: there are no gradients to communicate.".into(),
            rests_on: "--gpus 1".into(),
        });
    }

    // ---- summary ----
    let tpu = |p: &Prediction| format!("{} {unit}", fmt_count(p.throughput));
    let cp = &chosen_row.prediction;
    let summary = if n == 1 {
        format!(
            "One GPU: {} per step, {}.",
            fmt_s(single_step),
            tpu(&chosen_row.prediction)
        )
    } else if use_one_gpu {
        format!(
            "Train on one GPU: every variant is slower on {n} GPUs than on one (best: {} at {:.2}×).",
            chosen_row.variant, cp.speedup
        )
    } else if reaches_target {
        let what = if chosen_row.variant == "base" {
            "DDP as it is".to_string()
        } else {
            describe_variant(chosen_row.hook, chosen_row.accum)
        };
        format!(
            "Use {what}: {:.2}× on {n} GPUs, {:.0}% efficiency (target {:.0}%), {} per step, {}.",
            cp.speedup,
            cp.efficiency * 100.0,
            input.target_efficiency * 100.0,
            fmt_s(cp.step_s),
            tpu(cp)
        )
    } else {
        format!(
            "No variant reaches {:.0}% efficiency on {n} GPUs; the best is {} at {:.2}× ({:.0}%).",
            input.target_efficiency * 100.0,
            describe_variant(chosen_row.hook, chosen_row.accum),
            cp.speedup,
            cp.efficiency * 100.0
        )
    };

    // ---- warnings and environment ----
    let mut warnings = Vec::new();
    let mut env = Vec::new();
    let ab_for = |name: &str| {
        input
            .env_ab
            .iter()
            .filter(|a| a.label.to_ascii_uppercase().contains(name))
            .min_by(|a, b| a.busbw_ratio.total_cmp(&b.busbw_ratio))
    };
    if let Some(link) = input.worst_link {
        let p2p_level = input
            .nccl_env
            .get("NCCL_P2P_LEVEL")
            .map(|v| v.trim().to_ascii_uppercase());
        let forced = p2p_level
            .as_deref()
            .is_some_and(|lvl| p2p_level_reaches(lvl, link));
        let ab = ab_for("NCCL_P2P_LEVEL").filter(|a| a.busbw_ratio < 0.95);
        if !link.is_nvlink() && link.crosses_host_bridge() && (forced || ab.is_some()) {
            let mut rests = format!("worst GPU pair link {link} (no NVLink)");
            if let Some(l) = &p2p_level {
                let _ = write!(rests, "; NCCL_P2P_LEVEL={l} in force");
            }
            if let Some(a) = ab {
                let _ = write!(
                    rests,
                    "; env A/B: {} gave ×{:.2} busbw, {provenance}",
                    a.label, a.busbw_ratio
                );
            }
            warnings.push(Warning {
                code: "p2p_forced_across_host_bridge".into(),
                text: format!(
                    "Forcing peer-to-peer (NCCL_P2P_LEVEL=SYS or similar) across a {link} path without NVLink usually lowers all-reduce bandwidth (the seed machine halved it, 4.3 → 2.3 GB/s); leave NCCL's own choice."
                ),
                rests_on: rests,
            });
            if forced {
                env.push(
                    "unset NCCL_P2P_LEVEL   # NCCL's own choice is faster across the host bridge"
                        .to_string(),
                );
            }
        }
        if link.is_nvlink() {
            let disabled: Vec<String> = ["NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"]
                .iter()
                .filter(|k| input.nccl_env.get(**k).is_some_and(|v| is_truthy(v)))
                .map(|k| k.to_string())
                .collect();
            if !disabled.is_empty() {
                warnings.push(Warning {
                    code: "nvlink_transport_disabled".into(),
                    text: format!(
                        "{} set on an NVLink machine: NCCL falls back to slower paths (on 2×H200, 327 GB/s over NVLink against ≈27 GB/s through shared memory and ≈3.9 GB/s over the host network). Unset it unless you are testing exactly that.",
                        disabled.join(" and ")
                    ),
                    rests_on: format!(
                        "worst GPU pair link {link}; {} in force; the curve used: {curve_cite}",
                        disabled
                            .iter()
                            .map(|k| format!("{k}={}", input.nccl_env.get(k).map(String::as_str).unwrap_or("")))
                            .collect::<Vec<_>>()
                            .join(" ")
                    ),
                });
                env.push(format!("unset {}   # keep NVLink", disabled.join(" ")));
            }
        }
    }
    for ab in &input.env_ab {
        if ab.busbw_ratio >= 1.05 {
            for kv in ab.label.split(',') {
                if let Some((k, v)) = kv.split_once('=') {
                    if k.trim().starts_with("NCCL_") {
                        env.push(format!(
                            "export {}={}   # all-reduce busbw ×{:.2} in the env A/B",
                            k.trim(),
                            v.trim(),
                            ab.busbw_ratio
                        ));
                    }
                }
            }
        }
    }
    if env.is_empty() {
        env.push("# no NCCL environment change: keep the environment that was measured".into());
    }
    if n > 1 {
        let slower: Vec<&VariantRow> = rows.iter().filter(|r| r.prediction.speedup < 1.0).collect();
        if !slower.is_empty() {
            warnings.push(Warning {
                code: "one_gpu_faster".into(),
                text: format!(
                    "One GPU is faster than {n} with {}.",
                    slower
                        .iter()
                        .map(|r| format!("{} ({:.2}×)", r.variant, r.prediction.speedup))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                rests_on: format!("{model_cite}; {curve_cite}"),
            });
        }
        if chosen_row.accum > 1 {
            warnings.push(Warning {
                code: "accumulation_changes_batch".into(),
                text: format!(
                    "Accumulation {} makes the effective batch {} per GPU ({} over {n} GPUs): retune the learning rate (and warm-up) before comparing runs.",
                    chosen_row.accum,
                    u64::from(input.micro_batch) * u64::from(chosen_row.accum),
                    u64::from(input.micro_batch) * u64::from(chosen_row.accum) * u64::from(n)
                ),
                rests_on: format!(
                    "micro-batch {} × accumulation {}",
                    input.micro_batch, chosen_row.accum
                ),
            });
        }
        // bucket_cap_mb: what the best size in 5–200 MB would gain over the one in use.
        let mut steps = Vec::new();
        for mb in [5.0, 10.0, 25.0, 50.0, 100.0, 200.0, base.bucket_cap_mb] {
            let mut i = base
                .clone()
                .with_hook(chosen_row.hook)
                .with_accum(chosen_row.accum);
            i.bucket_cap_mb = mb;
            steps.push((mb, predict(&i, curve)?.step_s));
        }
        let current = steps.last().map(|s| s.1).unwrap_or(0.0);
        let (best_mb, best_step) = steps
            .iter()
            .copied()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((base.bucket_cap_mb, current));
        let gain = if best_step > 0.0 {
            current / best_step - 1.0
        } else {
            0.0
        };
        warnings.push(Warning {
            code: "bucket_cap_mb".into(),
            text: format!(
                "bucket_cap_mb is not worth tuning unless measured: the model's best size in 5–200 MB ({best_mb:.0} MB) would gain {:.1}% over {:.0} MB (the 2×T4 seed measured 0.3% across a hundredfold sweep); check with `ddpcheck bench ddp --variants base,bucket10,bucket100` before changing it.",
                gain * 100.0,
                base.bucket_cap_mb
            ),
            rests_on: model_cite.clone(),
        });
        // FSDP: params + grads + Adam moments in fp32 = 16 B/param.
        let state = input.model.params() as f64 * 16.0;
        let (text, rests) = match input.gpu_memory_bytes {
            Some(mem) if state < 0.8 * mem as f64 => (
                format!(
                    "FSDP costs more than DDP here: the model's training state ({}) fits on one GPU ({}), and FSDP all-gathers parameters on top of reduce-scattering gradients (≈1.5× DDP's bytes; all-gather often runs slower than all-reduce: 1.73 against 4.05 GB/s on the 2×T4 seed, where FSDP was 33–35% slower).",
                    fmt_bytes(state),
                    fmt_bytes(mem as f64)
                ),
                format!("{} parameters × 16 B (fp32 weights, gradients, Adam moments); GPU memory {}", fmt_count(input.model.params() as f64), fmt_bytes(mem as f64)),
            ),
            Some(mem) => (
                format!(
                    "The training state ({}) does not fit comfortably on one GPU ({}): DDP keeps a full copy per GPU; FSDP (or ZeRO) is needed despite its extra all-gathers.",
                    fmt_bytes(state),
                    fmt_bytes(mem as f64)
                ),
                format!("{} parameters × 16 B; GPU memory {}", fmt_count(input.model.params() as f64), fmt_bytes(mem as f64)),
            ),
            None => (
                format!(
                    "If the model's training state (≈{}) fits on one GPU, FSDP costs more than DDP: it all-gathers parameters on top of reduce-scattering gradients (≈1.5× DDP's bytes; on the 2×T4 seed FSDP was 33–35% slower).",
                    fmt_bytes(state)
                ),
                format!("{} parameters × 16 B (fp32 weights, gradients, Adam moments); GPU memory unknown", fmt_count(input.model.params() as f64)),
            ),
        };
        warnings.push(Warning {
            code: "fsdp".into(),
            text,
            rests_on: rests,
        });
        if curve.ranks != n {
            warnings.push(Warning {
                code: "curve_other_world_size".into(),
                text: format!(
                    "The all-reduce curve was measured on {} ranks; for {n} GPUs its bandwidth part was rescaled by the ring factor. Measure on {n} GPUs for a firmer number.",
                    curve.ranks
                ),
                rests_on: curve_cite.clone(),
            });
        }
    }
    // Only short, host-bound steps are slowed by N processes enough to matter (measured 1.00 for
    // gpt2-355m and 1.05 for gpt2-124m against up to 1.21 for small MLPs on 2xH200).
    let short = compute_s < crate::caveats::HOST_BOUND_STEP_S;
    if n > 1 && short && input.side_by_side.is_none() {
        if let ComputeSource::Measured { .. } = input.compute {
            warnings.push(Warning {
                code: "side_by_side_unmeasured".into(),
                text: format!(
                    "Not measured: how much {n} processes side by side slow each other's compute; the model assumes not at all, which over-predicts short, host-bound steps where they do. `--repeats N` measures it (`nocomm` runs at 1 and {n} GPUs, the {n}-GPU ones timing one GPU alone in the same launches too); a slowdown of 10% needs about five launches to stand out of launch noise."
                ),
                rests_on: compute_cite.clone(),
            });
        }
    }
    if let Some(o) = input
        .other_curve
        .as_ref()
        .filter(|o| o.curve.ranks == curve.ranks)
    {
        let other = o.curve.busbw_at(bucket_bytes);
        let factor = curve_summary.busbw_at_bucket_gbps / other;
        if other > 0.0 && (factor.ln().abs() > NETWORK_MOVED_FACTOR.ln()) {
            warnings.push(Warning {
                code: "network_moved".into(),
                text: format!(
                    "The all-reduce the predictions read runs at {:.2}× the bus bandwidth of the node's other measurement ({:.2} against {other:.2} GB/s at {}): this node's network moves between measurements (over a host network 0.84–1.37× within minutes on 2×H200). Every communication-bound figure above moves with it: re-measure with `bench ddp --repeats 3` just before a long run.",
                    factor,
                    curve_summary.busbw_at_bucket_gbps,
                    fmt_bytes(bucket_bytes as f64)
                ),
                rests_on: format!("{}; the other: {}", curve_cite, o.provenance.describe()),
            });
        }
    }
    if let Some(m) = &chosen_row.measured {
        let p = chosen_row.prediction.speedup;
        if n > 1 && p > m.speedup && m.contradicted_by(p) {
            warnings.push(Warning {
                code: "measured_below_prediction".into(),
                text: format!(
                    "{} measured {:.2}× on this node against the {p:.2}× predicted, further apart than the measurement's noise: expect the measured figure, and re-measure with `--verify --repeats 5` before a long run.",
                    chosen_row.variant, m.speedup
                ),
                rests_on: m.rests_on.clone(),
            });
        }
    }
    if let ComputeSource::Estimated { .. } = input.compute {
        warnings.push(Warning {
            code: "compute_estimated".into(),
            text: "The compute time is an estimate from FLOPs, not a measurement: every number above scales with it. Measure it with a one-GPU `ddpcheck bench ddp` run.".into(),
            rests_on: compute_cite.clone(),
        });
    }
    if input.curve_provenance.backend == Some(BackendKind::Sim) {
        warnings.push(Warning {
            code: "curve_simulated".into(),
            text: "The all-reduce curve comes from a simulated node: these are not this machine's numbers.".into(),
            rests_on: provenance.clone(),
        });
    }

    let (chosen, chosen_hook, chosen_accum) = if use_one_gpu {
        ("1 GPU".to_string(), CommHook::None, 1)
    } else {
        (
            chosen_row.variant.clone(),
            chosen_row.hook,
            chosen_row.accum,
        )
    };
    Ok(Recommendation {
        model: input.model.name(),
        params: input.model.params(),
        gpus: n,
        micro_batch: input.micro_batch,
        units_per_micro_batch: units,
        throughput_unit: unit.to_string(),
        target_efficiency: input.target_efficiency,
        compute: input.compute.clone(),
        compute_s,
        curve: curve_summary,
        overheads: base.overheads,
        backward_fraction: base.backward_fraction,
        overheads_source,
        single_gpu: single,
        rows,
        python: if use_one_gpu {
            "# one GPU: no DDP needed\n".to_string()
        } else {
            python_snippet(chosen_hook, chosen_accum)
        },
        chosen,
        chosen_hook,
        chosen_accum,
        reaches_target,
        use_one_gpu,
        summary,
        reasons,
        warnings,
        env,
    })
}

/// Whether an `NCCL_P2P_LEVEL` value allows P2P over a path of this class (NCCL's levels:
/// LOC < NVL < PIX < PXB < PHB < SYS; legacy integers 0..=5).
fn p2p_level_reaches(level: &str, link: LinkClass) -> bool {
    let rank = match level {
        "LOC" | "0" => 0,
        "NVL" => 1,
        "PIX" | "1" => 2,
        "PXB" | "2" => 3,
        "PHB" | "3" => 4,
        "NODE" => 5,
        "SYS" | "4" | "5" => 6,
        _ => return false,
    };
    rank >= link.rank()
}

fn is_truthy(v: &str) -> bool {
    !matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "" | "0" | "false" | "no" | "off"
    )
}

fn hook_name(h: CommHook) -> &'static str {
    match h {
        CommHook::None => "no",
        CommHook::Fp16 => "fp16",
        CommHook::Bf16 => "bf16",
        CommHook::PowerSgd => "PowerSGD",
    }
}

fn describe_variant(hook: CommHook, accum: u32) -> String {
    match (hook, accum) {
        (CommHook::None, 1) => "plain DDP".into(),
        (h, 1) => format!("{} gradient compression", hook_name(h)),
        (CommHook::None, k) => format!("gradient accumulation {k}"),
        (h, k) => format!(
            "{} gradient compression with accumulation {k}",
            hook_name(h)
        ),
    }
}

/// Copy-paste Python: DDP with the comm hook and the `no_sync` accumulation loop.
pub fn python_snippet(hook: CommHook, accum: u32) -> String {
    let k = accum.max(1);
    let mut s = String::new();
    s.push_str("import contextlib\n");
    if matches!(hook, CommHook::Fp16 | CommHook::Bf16) {
        s.push_str("from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n");
    }
    if hook == CommHook::PowerSgd {
        s.push_str(
            "from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD\n",
        );
    }
    s.push_str("from torch.nn.parallel import DistributedDataParallel as DDP\n\n");
    s.push_str("ddp = DDP(model, device_ids=[local_rank], gradient_as_bucket_view=True)\n");
    match hook {
        CommHook::Bf16 => s.push_str(
            "ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)  # gradients travel as bf16\n",
        ),
        CommHook::Fp16 => s.push_str(
            "ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)  # gradients travel as fp16\n",
        ),
        CommHook::PowerSgd => s.push_str(
            "state = powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank=1)\nddp.register_comm_hook(state, powerSGD.powerSGD_hook)\n",
        ),
        CommHook::None => {}
    }
    if k > 1 {
        let _ = write!(
            s,
            "\nACCUM = {k}  # effective batch = micro-batch x {k} x world size: retune the learning rate\n"
        );
        s.push_str("for step in range(num_steps):\n");
        s.push_str("    for k in range(ACCUM):\n");
        s.push_str("        # all-reduce only on the last micro-batch\n");
        s.push_str("        ctx = ddp.no_sync() if k < ACCUM - 1 else contextlib.nullcontext()\n");
        s.push_str("        with ctx:\n");
        s.push_str("            loss = loss_fn(ddp, next_batch()) / ACCUM\n");
        s.push_str("            loss.backward()\n");
    } else {
        s.push_str("\nfor step in range(num_steps):\n");
        s.push_str("    loss = loss_fn(ddp, next_batch())\n");
        s.push_str("    loss.backward()\n");
    }
    s.push_str("    opt.step()\n");
    s.push_str("    opt.zero_grad(set_to_none=True)\n");
    s
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

    /// Plain-text report: the table, the recommendation, reasons, warnings, Python, environment.
    pub fn render_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "ddpcheck recommend: {} ({} parameters), micro-batch {}, {} GPU{}",
            self.model,
            fmt_count(self.params as f64),
            self.micro_batch,
            self.gpus,
            if self.gpus == 1 { "" } else { "s" }
        );
        let _ = writeln!(s, "compute:   {}", self.compute.describe());
        let _ = writeln!(
            s,
            "all-reduce: busbw {:.2} GB/s at {}, α {:.1} µs, {} ranks, {}",
            self.curve.busbw_at_bucket_gbps,
            fmt_bytes(self.curve.bucket_bytes as f64),
            self.curve.alpha_us,
            self.curve.ranks,
            self.curve.provenance
        );
        let _ = writeln!(s, "overheads: {}", self.overheads_source);
        s.push('\n');
        let cost_col = self.rows.iter().any(|r| r.cost_per_million.is_some());
        let unit_word = self.throughput_unit.trim_end_matches("/s");
        let mut header = vec![
            "variant".to_string(),
            "step".into(),
            self.throughput_unit.clone(),
            "speedup".into(),
            "efficiency".into(),
            "comm share".into(),
        ];
        if cost_col {
            header.push(format!("$/M {unit_word}"));
        }
        header.push("target".into());
        // What the node measured, beside what the model predicts, where it measured.
        let measured_col = self.rows.iter().any(|r| r.measured.is_some());
        if measured_col {
            header.push("measured".into());
        }
        let mut table: Vec<Vec<String>> = vec![header];
        let mut one = vec![
            "1 GPU".to_string(),
            fmt_s(self.single_gpu.step_s),
            fmt_count(self.single_gpu.throughput),
            "1.00×".into(),
            "100%".into(),
            "0%".into(),
        ];
        if cost_col {
            one.push(
                self.single_gpu
                    .cost_per_million
                    .map(fmt_money)
                    .unwrap_or_default(),
            );
        }
        one.push(String::new());
        if measured_col {
            one.push(String::new());
        }
        table.push(one);
        for r in &self.rows {
            let p = &r.prediction;
            let mut line = vec![
                r.variant.clone(),
                fmt_s(p.step_s),
                fmt_count(p.throughput),
                format!("{:.2}×", p.speedup),
                format!("{:.0}%", p.efficiency * 100.0),
                format!("{:.0}%", p.comm_share * 100.0),
            ];
            if cost_col {
                line.push(r.cost_per_million.map(fmt_money).unwrap_or_default());
            }
            let mark = if r.variant == self.chosen { " <" } else { "" };
            line.push(format!(
                "{}{mark}",
                if r.reaches_target { "yes" } else { "no" }
            ));
            if measured_col {
                line.push(match &r.measured {
                    Some(m) => match m.uncertainty {
                        Some(u) => format!("{:.2}× ±{:.1}%", m.speedup, u * 100.0),
                        None => format!("{:.2}×", m.speedup),
                    },
                    None => String::new(),
                });
            }
            table.push(line);
        }
        let widths: Vec<usize> = (0..table[0].len())
            .map(|c| {
                table
                    .iter()
                    .map(|r| r.get(c).map(|x| x.chars().count()).unwrap_or(0))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for (i, r) in table.iter().enumerate() {
            let mut line = String::new();
            for (c, cell) in r.iter().enumerate() {
                let pad = widths[c].saturating_sub(cell.chars().count());
                if c == 0 {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad));
                } else {
                    line.push_str("  ");
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                }
            }
            let _ = writeln!(s, "{}", line.trim_end());
            if i == 0 {
                let total: usize = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
                let _ = writeln!(s, "{}", "-".repeat(total));
            }
        }
        let _ = writeln!(s, "\nRecommendation: {}", self.summary);
        if !self.reasons.is_empty() {
            s.push_str("\nWhy:\n");
            for r in &self.reasons {
                let _ = writeln!(s, "  - {}\n      rests on: {}", r.text, r.rests_on);
            }
        }
        if !self.warnings.is_empty() {
            s.push_str("\nWarnings:\n");
            for w in &self.warnings {
                let _ = writeln!(
                    s,
                    "  ! [{}] {}\n      rests on: {}",
                    w.code, w.text, w.rests_on
                );
            }
        }
        s.push_str("\nPython:\n");
        for l in self.python.lines() {
            let _ = writeln!(s, "    {l}");
        }
        s.push_str("\nEnvironment:\n");
        for l in &self.env {
            let _ = writeln!(s, "    {l}");
        }
        s
    }
}

fn fmt_money(c: f64) -> String {
    if c >= 1.0 {
        format!("${c:.2}")
    } else if c >= 0.01 {
        format!("${c:.4}")
    } else {
        format!("${c:.6}")
    }
}

fn fmt_s(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{:.0} µs", s * 1e6)
    }
}

/// A byte count as people read it (KiB, MiB, GiB).
pub fn fmt_bytes(b: f64) -> String {
    if b >= 1024.0 * MIB {
        format!("{:.2} GiB", b / (1024.0 * MIB))
    } else if b >= MIB {
        format!("{:.1} MiB", b / MIB)
    } else {
        format!("{:.0} KiB", b / 1024.0)
    }
}

fn fmt_count(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed-000 machine: 4× A6000, PHB, flat 4.3 GB/s, $2.64/h, 130 ms per micro-batch.
    fn a6000_input() -> RecommendInput {
        RecommendInput {
            model: ModelInput::Spec {
                spec: ModelSpec::gpt2_124m(),
            },
            micro_batch: 8,
            seq: 1024,
            gpus: 4,
            node_gpus: 4,
            price_per_hour: Some(2.64),
            target_efficiency: 0.85,
            curve: LinkCurve::flat(4, 4.3, 0.0).unwrap(),
            curve_provenance: CurveProvenance {
                host: "runcrate-a6000x4".into(),
                time: "2026-10-26T09:00:00Z".into(),
                backend: None,
                label: "seed 000".into(),
                method: String::new(),
            },
            worst_link: Some(LinkClass::Phb),
            nccl_env: BTreeMap::new(),
            env_ab: Vec::new(),
            compute: ComputeSource::Given {
                seconds: 0.130,
                detail: "seed 000".into(),
            },
            calibration: None,
            bucket_cap_mb: None,
            gpu_memory_bytes: Some(48 << 30),
            optimizer_s: None,
            hook_compute_s: None,
            hook_rests_on: None,
            side_by_side: None,
            measured: Vec::new(),
            other_curve: None,
        }
    }

    #[test]
    fn a_hook_is_judged_against_one_gpu_without_it() {
        // The seed box recommends bf16 with accumulation: the hook halves 475 MiB on the wire.
        let plain = recommend(&a6000_input()).unwrap();
        assert_eq!(plain.chosen, "bf16+accum2");
        // Casts that cost more than the wire saves: against one GPU without the hook (the
        // reference of every variant of the same accumulation), each hooked variant is less
        // efficient than the same accumulation without it, and none is chosen.
        let mut input = a6000_input();
        input.hook_compute_s = Some(1.0);
        let r = recommend(&input).unwrap();
        let row = |v: &str| r.rows.iter().find(|x| x.variant == v).unwrap();
        for (hooked, unhooked) in [
            ("bf16", "base"),
            ("bf16+accum2", "accum2"),
            ("bf16+accum8", "accum8"),
        ] {
            let (h, u) = (&row(hooked).prediction, &row(unhooked).prediction);
            assert!(
                (h.single_gpu_step_s - u.single_gpu_step_s).abs() < 1e-12,
                "{hooked}"
            );
            assert!(
                h.efficiency < u.efficiency && h.throughput < u.throughput,
                "{hooked}"
            );
        }
        assert_eq!(row(&r.chosen).hook, CommHook::None, "{}", r.chosen);
    }

    #[test]
    fn a_chosen_hooks_own_cost_is_cited_with_what_it_adds_to_the_step() {
        let plain = recommend(&a6000_input()).unwrap();
        let mut input = a6000_input();
        input.hook_compute_s = Some(0.005);
        input.hook_rests_on = Some("1-GPU bf16 run over base (test)".into());
        let r = recommend(&input).unwrap();
        assert_eq!(r.chosen, "bf16+accum2");
        let reason = r
            .reasons
            .iter()
            .find(|x| x.text.starts_with("The hook itself costs"))
            .expect("a reason for the hook's own cost");
        assert_eq!(reason.rests_on, "1-GPU bf16 run over base (test)");
        // What it adds is the chosen step with the cost against the same step without it: less
        // than the cost, as the seed's slow link still has earlier buckets queued when later
        // shares are paid.
        let step = |r: &Recommendation| {
            r.rows
                .iter()
                .find(|x| x.variant == "bf16+accum2")
                .unwrap()
                .prediction
                .step_s
        };
        let added = step(&r) - step(&plain);
        assert!(added > 0.0 && added < 0.005 - 1e-4, "{added}");
        assert!(reason.text.contains(&fmt_s(added)), "{}", reason.text);
        // Without a measured cost there is nothing to cite.
        assert!(!plain
            .reasons
            .iter()
            .any(|x| x.text.starts_with("The hook itself costs")));
    }

    fn codes(r: &Recommendation) -> Vec<&str> {
        r.warnings.iter().map(|w| w.code.as_str()).collect()
    }

    /// The recommendation's warning of this code (the test fails without one).
    fn warning<'a>(r: &'a Recommendation, code: &str) -> &'a Warning {
        r.warnings
            .iter()
            .find(|w| w.code == code)
            .unwrap_or_else(|| panic!("no {code} warning in {:?}", codes(r)))
    }

    #[test]
    fn measured_speedups_stand_beside_the_predictions_and_are_checked_against_them() {
        let plain = recommend(&a6000_input()).unwrap();
        let chosen = plain.chosen.clone();
        let predicted = |name: &str| {
            plain
                .rows
                .iter()
                .find(|r| r.variant == name)
                .unwrap()
                .prediction
                .speedup
        };
        // Many launches: the noise bound is twice the standard error.
        let measured = |variant: &str, speedup: f64, uncertainty: Option<f64>| MeasuredSpeedup {
            variant: variant.into(),
            speedup,
            uncertainty,
            noise_bound: uncertainty.map(|u| 2.0 * u),
            rests_on: format!("bench ddp of {variant}"),
        };
        // Within the noise: shown, cited, no warning; the choice stays the model's.
        let mut input = a6000_input();
        input.measured = vec![
            measured("base", predicted("base") * 0.97, Some(0.05)),
            measured(&chosen, predicted(&chosen) * 0.95, Some(0.04)),
        ];
        let r = recommend(&input).unwrap();
        assert_eq!(r.chosen, chosen);
        let base = r.rows.iter().find(|x| x.variant == "base").unwrap();
        assert_eq!(base.measured.as_ref().unwrap().uncertainty, Some(0.05));
        assert!(
            r.rows.iter().filter(|x| x.measured.is_some()).count()
                == 2 - usize::from(chosen == "base")
        );
        let cited = r
            .reasons
            .iter()
            .find(|x| x.text.starts_with("Measured on this node"))
            .unwrap();
        assert!(
            cited.text.contains("within the noise") && !cited.text.contains("beyond"),
            "{cited:?}"
        );
        assert!(cited.rests_on.contains("bench ddp of base"), "{cited:?}");
        assert!(!codes(&r).contains(&"measured_below_prediction"));
        assert!(r.render_text().contains("measured"));
        // The chosen variant measured 30% below its prediction, ±5%: beyond the noise, warned.
        input.measured = vec![measured(&chosen, predicted(&chosen) / 1.3, Some(0.05))];
        let r = recommend(&input).unwrap();
        assert!(
            codes(&r).contains(&"measured_below_prediction"),
            "{:?}",
            r.warnings
        );
        // The same gap and standard error from two launches a side (Student's t of about 12 for
        // one degree of freedom): within the noise, no warning.
        input.measured = vec![MeasuredSpeedup {
            noise_bound: Some(crate::ddp::noise_bound(0.05, 1.0)),
            ..measured(&chosen, predicted(&chosen) / 1.3, Some(0.05))
        }];
        assert!(!codes(&recommend(&input).unwrap()).contains(&"measured_below_prediction"));
        // The same gap from one launch (noise unknown, taken as 20%) is also beyond it; 15% is not.
        input.measured = vec![measured(&chosen, predicted(&chosen) / 1.3, None)];
        assert!(codes(&recommend(&input).unwrap()).contains(&"measured_below_prediction"));
        input.measured = vec![measured(&chosen, predicted(&chosen) / 1.15, None)];
        assert!(!codes(&recommend(&input).unwrap()).contains(&"measured_below_prediction"));
        // Faster than predicted is no warning.
        input.measured = vec![measured(&chosen, predicted(&chosen) * 1.3, Some(0.01))];
        assert!(!codes(&recommend(&input).unwrap()).contains(&"measured_below_prediction"));
        // A variant recommend has no row for is ignored; a broken measurement is invalid input.
        input.measured = vec![measured("fp16+accum8", 1.0, None)];
        assert!(recommend(&input)
            .unwrap()
            .rows
            .iter()
            .all(|x| x.measured.is_none()));
        for bad in [
            measured("base", f64::NAN, None),
            measured("base", 0.0, None),
            measured("base", 1.5, Some(-0.1)),
        ] {
            input.measured = vec![bad];
            assert!(recommend(&input).is_err());
        }
        assert_eq!(variant_name(CommHook::Bf16, 4), Some("bf16+accum4"));
        assert_eq!(variant_name(CommHook::Fp16, 4), None);
    }

    #[test]
    fn a_calibration_is_used_only_where_it_predicted_held_out_models_better() {
        let fitted = Calibration {
            overheads: Overheads {
                ddp_fixed_s: 4e-3,
                ..Overheads::default()
            },
            backward_fraction: 0.5,
            runs_used: 12,
            rms_log_error_before: 0.07,
            rms_log_error_after: 0.04,
        };
        let check = |default: f64, calibrated: f64| CrossCheck {
            models: 4,
            runs: 12,
            rms_log_error_default: default,
            rms_log_error_calibrated: calibrated,
        };
        let with = |cross_check: Option<CrossCheck>| {
            let mut input = a6000_input();
            input.calibration = Some(CalibrationInput {
                calibration: fitted.clone(),
                source: "12 DDP run(s) on node-a".into(),
                cross_check,
            });
            recommend(&input).unwrap()
        };
        // Better on the models it did not see: used, and both errors cited.
        let kept = with(Some(check(0.065, 0.044)));
        assert_eq!(kept.overheads, fitted.overheads);
        assert!(
            kept.overheads_source
                .contains("calibrated from 12 DDP run(s) on node-a")
                && kept.overheads_source.contains("6.5% → 4.4%"),
            "{}",
            kept.overheads_source
        );
        // Worse: the defaults, and why.
        let rejected = with(Some(check(0.057, 0.067)));
        assert_eq!(rejected.overheads, Overheads::default());
        assert!(
            rejected.overheads_source.contains("not used")
                && rejected
                    .overheads_source
                    .contains("6.7% rms step-time error against 5.7%"),
            "{}",
            rejected.overheads_source
        );
        assert_ne!(
            kept.rows[0].prediction.speedup,
            rejected.rows[0].prediction.speedup
        );
        // One model, nothing held out: used as fitted.
        let unchecked = with(None);
        assert_eq!(unchecked.overheads, fitted.overheads);
        assert!(!unchecked.overheads_source.contains("others' runs"));
    }

    #[test]
    fn a_measured_side_by_side_slowdown_lowers_the_accumulated_variants_and_is_cited() {
        let plain = recommend(&a6000_input()).unwrap();
        let mut input = a6000_input();
        input.side_by_side = Some(SideBySideInput {
            measured_ratio: 1.2,
            launches: 8,
            within_launch: false,
            distinct: true,
            noise_bound: Some(0.1),
            rests_on: "nocomm at 4 GPUs: 156 ms".into(),
        });
        let crowded = recommend(&input).unwrap();
        // The no_sync micro-batches stretch in full; a synchronising one only beyond the
        // all-reduce waits that cover it, so no variant gets faster and every accumulated one slower.
        for (a, b) in plain.rows.iter().zip(&crowded.rows) {
            assert!(
                b.prediction.speedup <= a.prediction.speedup,
                "{}",
                a.variant
            );
            if a.prediction.accum > 1 {
                assert!(b.prediction.speedup < a.prediction.speedup, "{}", a.variant);
                assert!(b.prediction.side_by_side_s > 0.0, "{}", a.variant);
            }
        }
        assert!(crowded
            .reasons
            .iter()
            .any(|r| r.text.contains("20% slower") && r.rests_on.contains("nocomm at 4 GPUs")));
        assert!(crowded.reasons.iter().any(|r| r
            .text
            .contains("beyond the noise of their launches (±11% from 8 launches; their")));
        // Within the launches' noise, or one launch each: said, not counted.
        for (launches, says) in [
            (8, "(±11% from 8 launches: Student's t"),
            (8, "at least twice it): not counted"),
            (2, "two launches a side tell little"),
            (1, "one launch each"),
        ] {
            let sbs = input.side_by_side.as_mut().unwrap();
            sbs.distinct = false;
            sbs.launches = launches;
            let r = recommend(&input).unwrap();
            assert_eq!(
                r.rows[0].prediction.speedup,
                plain.rows[0].prediction.speedup
            );
            assert!(r.reasons.iter().any(|x| x.text.contains(says)), "{says}");
        }
        // Timed against one GPU alone inside the nocomm run's own launches: said so.
        let sbs = input.side_by_side.as_mut().unwrap();
        (sbs.distinct, sbs.launches, sbs.within_launch) = (true, 8, true);
        let paired = recommend(&input).unwrap();
        assert!(paired.reasons.iter().any(|r| r
            .text
            .contains("20% slower than one GPU alone in the same launches")));
        assert_eq!(paired.rows, crowded.rows);
        // Below 1 is noise: never a speed-up.
        let sbs = input.side_by_side.as_mut().unwrap();
        sbs.measured_ratio = 0.9;
        sbs.distinct = true;
        let noisy = recommend(&input).unwrap();
        assert_eq!(
            noisy.rows[0].prediction.speedup,
            plain.rows[0].prediction.speedup
        );
        input.side_by_side.as_mut().unwrap().measured_ratio = f64::NAN;
        assert!(recommend(&input).is_err());
        // Unmeasured: warned only for short steps whose compute was measured (a DDP runner was
        // at hand); long steps are not slowed enough to matter.
        assert!(!codes(&plain).contains(&"side_by_side_unmeasured"));
        let mut measured = a6000_input();
        measured.compute = ComputeSource::Measured {
            seconds: 0.130,
            detail: "1-GPU run".into(),
        };
        assert!(!codes(&recommend(&measured).unwrap()).contains(&"side_by_side_unmeasured"));
        measured.compute = ComputeSource::Measured {
            seconds: 0.005,
            detail: "1-GPU run".into(),
        };
        assert!(codes(&recommend(&measured).unwrap()).contains(&"side_by_side_unmeasured"));
    }

    #[test]
    fn a6000_picks_a_cheap_fix_and_explains_it() {
        let mut input = a6000_input();
        input.nccl_env.insert("NCCL_P2P_LEVEL".into(), "SYS".into());
        input.env_ab.push(EnvAb {
            label: "NCCL_P2P_LEVEL=SYS".into(),
            busbw_ratio: 2.3 / 4.3,
        });
        let r = recommend(&input).unwrap();
        assert_eq!(r.rows.len(), 9);
        let names: Vec<&str> = r.rows.iter().map(|x| x.variant.as_str()).collect();
        assert_eq!(names[..3], ["base", "fp16", "bf16"]);
        // The chosen variant reaches the target, and every cheaper change does not.
        assert!(r.reaches_target && !r.use_one_gpu);
        let pos = CHANGE_ORDER.iter().position(|v| *v == r.chosen).unwrap();
        for cheaper in &CHANGE_ORDER[..pos] {
            let row = r.rows.iter().find(|x| x.variant == *cheaper).unwrap();
            assert!(!row.reaches_target, "{cheaper} already reaches the target");
        }
        let chosen = r.rows.iter().find(|x| x.variant == r.chosen).unwrap();
        assert!(chosen.prediction.efficiency >= 0.85);
        // Reasons cite measurements; the curve's reason cites its provenance.
        assert!(r.reasons.iter().all(|x| !x.rests_on.is_empty()));
        assert!(r
            .reasons
            .iter()
            .any(|x| x.rests_on.contains("4.30 GB/s") && x.rests_on.contains("runcrate-a6000x4")));
        // One GPU is cheaper per token, and the output says so.
        assert!(r
            .reasons
            .iter()
            .any(|x| x.text.contains("one GPU is cheaper")));
        // Warnings: forced P2P on PHB (with the A/B ratio), bucket_cap_mb, FSDP, accumulation.
        let c = codes(&r);
        for want in ["p2p_forced_across_host_bridge", "bucket_cap_mb", "fsdp"] {
            assert!(c.contains(&want), "{want} missing from {c:?}");
        }
        assert_eq!(
            c.contains(&"accumulation_changes_batch"),
            r.chosen_accum > 1
        );
        let p2p = warning(&r, "p2p_forced_across_host_bridge");
        assert!(p2p.rests_on.contains("×0.53"), "{}", p2p.rests_on);
        assert!(r.env.iter().any(|l| l.starts_with("unset NCCL_P2P_LEVEL")));
        // Python for the chosen variant.
        if r.chosen_hook == CommHook::Bf16 {
            assert!(r.python.contains("default_hooks.bf16_compress_hook"));
        }
        if r.chosen_accum > 1 {
            assert!(r.python.contains("ddp.no_sync()"));
            assert!(r.python.contains(&format!("ACCUM = {}", r.chosen_accum)));
        }
        // Text and JSON.
        let text = r.render_text();
        for want in [
            "bf16+accum8",
            "1 GPU",
            "Recommendation:",
            "rests on:",
            "$/M tokens",
            "$0.00",
        ] {
            assert!(text.contains(want), "{want} missing:\n{text}");
        }
        let json = serde_json::to_string(&r).unwrap();
        let back: Recommendation = serde_json::from_str(&json).unwrap();
        // serde_json may change the last bit of a float: compare the text and the choice.
        assert_eq!(back.render_text(), text);
        assert_eq!(
            (back.chosen, back.rows.len()),
            (r.chosen.clone(), r.rows.len())
        );
    }

    #[test]
    fn a_hook_alone_is_preferred_to_accumulation() {
        // Target between baseline and bf16's efficiency: the hook is enough, no accumulation.
        let mut input = a6000_input();
        let base = recommend(&input).unwrap();
        let eff = |r: &Recommendation, v: &str| {
            r.rows
                .iter()
                .find(|x| x.variant == v)
                .unwrap()
                .prediction
                .efficiency
        };
        let (b, h) = (eff(&base, "base"), eff(&base, "bf16"));
        assert!(b < h);
        input.target_efficiency = 0.5 * (b + h);
        let r = recommend(&input).unwrap();
        assert_eq!((r.chosen.as_str(), r.chosen_accum), ("bf16", 1));
        assert!(!codes(&r).contains(&"accumulation_changes_batch"));
        assert!(!r.python.contains("no_sync"));
        // A target the baseline meets: DDP as it is.
        input.target_efficiency = 0.5 * b;
        let r = recommend(&input).unwrap();
        assert_eq!(r.chosen, "base");
        assert!(r.summary.contains("DDP as it is"));
    }

    #[test]
    fn unreachable_target_names_the_best() {
        let mut input = a6000_input();
        input.target_efficiency = 0.999;
        let r = recommend(&input).unwrap();
        assert!(!r.reaches_target);
        assert_eq!(r.chosen, "bf16+accum8");
        assert!(r.summary.starts_with("No variant reaches"));
    }

    #[test]
    fn one_gpu_when_every_variant_loses() {
        // A slow link, a large model, a tiny step.
        let mut input = a6000_input();
        input.gpus = 2;
        input.curve = LinkCurve::flat(2, 0.5, 100e-6).unwrap();
        input.compute = ComputeSource::Given {
            seconds: 0.005,
            detail: "test".into(),
        };
        let r = recommend(&input).unwrap();
        assert!(r.use_one_gpu);
        assert_eq!(r.chosen, "1 GPU");
        assert!(codes(&r).contains(&"one_gpu_faster"));
        assert!(r.summary.starts_with("Train on one GPU"));
    }

    #[test]
    fn a_second_measurement_of_the_link_that_parts_from_the_curve_is_warned() {
        let mut input = a6000_input();
        let other = |busbw: f64| OtherCurve {
            curve: LinkCurve::flat(4, busbw, 30e-6).unwrap(),
            provenance: CurveProvenance {
                host: "node".into(),
                time: "2026-11-30T18:00:00Z".into(),
                backend: Some(BackendKind::Real),
                label: String::new(),
                method: String::new(),
            },
        };
        let at_bucket = recommend(&input).unwrap().curve.busbw_at_bucket_gbps;
        // 10% apart: within what two measurements of a steady link give.
        input.other_curve = Some(other(at_bucket / 1.10));
        assert!(!codes(&recommend(&input).unwrap()).contains(&"network_moved"));
        // 25% apart either way: warned, citing both.
        for factor in [1.25, 1.0 / 1.25] {
            input.other_curve = Some(other(at_bucket / factor));
            let r = recommend(&input).unwrap();
            let w = warning(&r, "network_moved");
            assert!(w.text.contains(&format!("{factor:.2}×")), "{}", w.text);
            assert!(
                w.rests_on
                    .contains("the other: measured node 2026-11-30T18:00:00Z"),
                "{}",
                w.rests_on
            );
        }
        // Another rank count is another link: not compared.
        input.other_curve = Some(OtherCurve {
            curve: LinkCurve::flat(2, at_bucket / 1.5, 30e-6).unwrap(),
            ..other(1.0)
        });
        assert!(!codes(&recommend(&input).unwrap()).contains(&"network_moved"));
    }

    #[test]
    fn nvlink_with_transports_disabled_is_warned() {
        let mut input = a6000_input();
        input.gpus = 2;
        input.node_gpus = 2;
        input.worst_link = Some(LinkClass::Nv(18));
        input.curve = LinkCurve::flat(2, 3.9, 30e-6).unwrap();
        input.nccl_env.insert("NCCL_P2P_DISABLE".into(), "1".into());
        input.nccl_env.insert("NCCL_SHM_DISABLE".into(), "1".into());
        input.curve_provenance.backend = Some(BackendKind::Real);
        let r = recommend(&input).unwrap();
        let w = warning(&r, "nvlink_transport_disabled");
        assert!(w.text.contains("NCCL_P2P_DISABLE and NCCL_SHM_DISABLE"));
        assert!(r
            .env
            .iter()
            .any(|l| l.contains("unset NCCL_P2P_DISABLE NCCL_SHM_DISABLE")));
        assert!(!codes(&r).contains(&"p2p_forced_across_host_bridge"));
        assert!(r.curve.provenance.starts_with("measured"));
    }

    #[test]
    fn estimated_compute_and_simulated_curve_are_flagged() {
        let mut input = a6000_input();
        let flops = estimate_flops(&input.model, 8, 1024);
        input.compute = ComputeSource::Estimated {
            flops,
            tflops: 60.0,
        };
        input.curve_provenance.backend = Some(BackendKind::Sim);
        input.env_ab.push(EnvAb {
            label: "NCCL_ALGO=Ring,NCCL_PROTO=Simple".into(),
            busbw_ratio: 1.2,
        });
        let r = recommend(&input).unwrap();
        let c = codes(&r);
        assert!(c.contains(&"compute_estimated") && c.contains(&"curve_simulated"));
        assert!(r.compute.describe().starts_with("ESTIMATE"));
        assert!(r.curve.provenance.starts_with("SIMULATED"));
        assert!(r.env.iter().any(|l| l.starts_with("export NCCL_ALGO=Ring")));
        assert!(r
            .env
            .iter()
            .any(|l| l.starts_with("export NCCL_PROTO=Simple")));
        // No P2P warning: nothing forced, no A/B against it.
        assert!(!c.contains(&"p2p_forced_across_host_bridge"));
    }

    #[test]
    fn mlp_counts_samples_and_params_only_works() {
        let mut input = a6000_input();
        input.model = ModelInput::Spec {
            spec: ModelSpec::Mlp {
                width: 1024,
                depth: 4,
            },
        };
        input.micro_batch = 256;
        let r = recommend(&input).unwrap();
        assert_eq!(r.throughput_unit, "samples/s");
        assert_eq!(r.units_per_micro_batch, 256.0);
        input.model = ModelInput::Params {
            params: 124_000_000,
        };
        input.micro_batch = 8;
        let r = recommend(&input).unwrap();
        assert_eq!(r.throughput_unit, "tokens/s");
        assert_eq!(r.params, 124_000_000);
    }

    #[test]
    fn single_gpu_and_invalid_input() {
        let mut input = a6000_input();
        input.gpus = 1;
        let r = recommend(&input).unwrap();
        assert_eq!(r.chosen, "base");
        assert!(r.rows.iter().all(|x| x.prediction.speedup == 1.0));
        let mut bad = a6000_input();
        bad.target_efficiency = 0.0;
        assert!(recommend(&bad).is_err());
        let mut bad = a6000_input();
        bad.gpus = 0;
        assert!(recommend(&bad).is_err());
        let mut bad = a6000_input();
        bad.compute = ComputeSource::Given {
            seconds: -1.0,
            detail: String::new(),
        };
        assert!(recommend(&bad).is_err());
    }

    #[test]
    fn p2p_levels() {
        assert!(p2p_level_reaches("SYS", LinkClass::Phb));
        assert!(p2p_level_reaches("PHB", LinkClass::Phb));
        assert!(!p2p_level_reaches("PXB", LinkClass::Phb));
        assert!(!p2p_level_reaches("PHB", LinkClass::Sys));
        assert!(p2p_level_reaches("5", LinkClass::Sys));
        assert!(!p2p_level_reaches("bogus", LinkClass::Sys));
    }
}

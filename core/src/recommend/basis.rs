//! What every prediction, reason and warning rests on: the step inputs built from the request
//! (gradient layout, units of work, calibration, the side-by-side slowdown) and the citations
//! of the measurements behind them (the all-reduce curve, the compute time, the model).

use std::fmt::Write as _;

use super::words::Words;
use super::{CalibrationInput, CurveSummary, MeasuredBaseline, ModelInput, RecommendInput};
use crate::ddp::{LayoutSummary, ModelSpec};
use crate::num::{floor_u64, ToF64};
use crate::step_time::{
    predict, BaselineFit, GradLayout, LinkCurve, ModelError, StepInputs, DEFAULT_BUCKET_CAP_MB,
    DEFAULT_FIRST_BUCKET_MB, MIB,
};
use crate::units::{fmt_bytes, fmt_s};

/// The step inputs of plain DDP at the job's GPU count, and what they rest on.
pub(super) struct Basis {
    /// Plain DDP (no hook, accumulation 1) at the job's GPU count.
    pub base: StepInputs,
    pub compute_s: f64,
    /// Tokens (or samples) one GPU processes per micro-batch.
    pub units: f64,
    /// `tokens/s` or `samples/s`.
    pub unit: &'static str,
    /// `tokens` or `samples`, and one of them.
    pub unit_word: &'static str,
    pub unit_one: &'static str,
    pub overheads_source: String,
    pub curve: CurveSummary,
    /// Where the curve comes from, in words.
    pub provenance: String,
    /// The curve's figures and provenance, for the reasons and warnings that rest on it.
    pub curve_cite: String,
    pub compute_cite: String,
    pub model_cite: String,
    /// The model's tensors and buckets, where its parameter list is known.
    pub layout_summary: Option<LayoutSummary>,
    /// GPUs or CPU ranks, as the text names them.
    pub words: Words,
}

impl Basis {
    pub fn new(input: &RecommendInput) -> Result<Self, ModelError> {
        let compute_s = input.compute.seconds();
        let (layout, units, unit) = layout_and_units(input)?;
        let layout_summary = layout_summary(input);
        let mut base = StepInputs::new(layout, compute_s, input.gpus, 1);
        base.units_per_micro_batch = units;
        base.optimizer_s = input.optimizer_s.unwrap_or(0.0);
        base.hook_compute_s = input.hook_compute_s.unwrap_or(0.0);
        base.ddp_own_s = input.ddp_own_s();
        base.bucket_order = input.recipe.bucket_order();
        if let Some(mb) = input.bucket_cap_mb {
            base.bucket_cap_mb = mb;
        }
        apply_side_by_side(input, &mut base)?;
        let overheads_source = match &input.baseline {
            Some(measured) => apply_baseline(measured, &input.curve, &mut base)?,
            None => apply_calibration(input.calibration.as_ref(), &mut base),
        };
        base.validate()?;
        let provenance = input.curve_provenance.describe();
        let curve = summarise_curve(&input.curve, &base, &provenance);
        let curve_cite = cite_curve(&input.curve, &curve);
        let compute_cite = input.compute.describe();
        let model_cite = format!(
            "step-time model on the {}; compute {}",
            if input.curve.points.is_empty() {
                "given busbw"
            } else {
                "measured curve"
            },
            compute_cite
        );
        let (unit_word, unit_one) = if unit == "samples/s" {
            ("samples", "sample")
        } else {
            ("tokens", "token")
        };
        Ok(Basis {
            base,
            compute_s,
            units,
            unit,
            unit_word,
            unit_one,
            overheads_source,
            curve,
            provenance,
            curve_cite,
            compute_cite,
            model_cite,
            layout_summary,
            words: Words::new(input.device),
        })
    }
}

/// The layout's tensors and DDP's buckets at the recommendation's cap: the launch's
/// parameters, else the preset's.
fn layout_summary(input: &RecommendInput) -> Option<LayoutSummary> {
    let own = match &input.model {
        ModelInput::Spec { spec } => spec.param_layout(),
        ModelInput::Params { .. } => None,
    };
    let layout = input.param_layout.clone().or(own)?;
    let cap = input.bucket_cap_mb.unwrap_or(DEFAULT_BUCKET_CAP_MB) * MIB;
    Some(layout.summary(
        input.recipe.bucket_order(),
        floor_u64(cap),
        floor_u64(DEFAULT_FIRST_BUCKET_MB * MIB),
    ))
}

/// The gradients' layout, the units of work in one micro-batch and their rate's name: samples
/// for MLPs and models built by code (tokens for their language models and for factories whose
/// launches declared `tokens_per_sample`), tokens for decoders and bare parameter counts. The layout is the launch's own parameter list where one reported
/// it, else the preset's tensors; a model built by code has no other.
fn layout_and_units(input: &RecommendInput) -> Result<(GradLayout, f64, &'static str), ModelError> {
    let tokens = f64::from(input.micro_batch) * f64::from(input.seq.max(1));
    let from_launch = input.param_layout.as_ref().map(GradLayout::from_params);
    match &input.model {
        ModelInput::Spec { spec } => {
            let layout = match from_launch {
                Some(l) => l,
                None if spec.source().is_some() => {
                    return Err(ModelError::Invalid(format!(
                        "{}: no launch reported its parameters; measure it (bench ddp, or \
                         recommend without --step-time-ms/--estimate-tflops) or give --from a \
                         bench ddp report of it",
                        spec.name()
                    )))
                }
                None => GradLayout::for_model(spec),
            };
            let samples = f64::from(input.micro_batch);
            Ok(match spec {
                ModelSpec::Mlp { .. } => (layout, samples, "samples/s"),
                ModelSpec::Decoder { .. } => (layout, tokens, "tokens/s"),
                ModelSpec::External { source } => {
                    // A factory's own count, as its launches declared it, else the source's.
                    let tokens = input
                        .tokens_per_sample
                        .filter(|t| *t > 0)
                        .unwrap_or_else(|| source.tokens_per_sample());
                    if tokens > 1 {
                        (layout, samples * f64::from(tokens), "tokens/s")
                    } else {
                        (layout, samples, "samples/s")
                    }
                }
            })
        }
        ModelInput::Params { params } => Ok((
            from_launch.unwrap_or_else(|| GradLayout::uniform(*params)),
            tokens,
            "tokens/s",
        )),
    }
}

/// Counts the measured side-by-side slowdown only where it lies beyond its launches' noise;
/// a slowdown below 1 is noise, never a speed-up.
fn apply_side_by_side(input: &RecommendInput, base: &mut StepInputs) -> Result<(), ModelError> {
    if let Some(sbs) = &input.side_by_side {
        if !(sbs.measured_ratio.is_finite() && sbs.measured_ratio > 0.0) {
            return Err(ModelError::Invalid(format!(
                "side-by-side ratio {} must be positive",
                sbs.measured_ratio
            )));
        }
        if sbs.distinct {
            base.side_by_side_slowdown = sbs.counted();
        }
    }
    Ok(())
}

/// Applies the node's fitted overheads where they predicted unseen models better than the
/// defaults, and says which overheads are used and why.
fn apply_calibration(calibration: Option<&CalibrationInput>, base: &mut StepInputs) -> String {
    let percent = |x: f64| x * 100.0;
    match calibration {
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
            c.calibration.apply(base);
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
    }
}

/// Calibrates the model on plain DDP's measured step at the job's GPU count: how much of the
/// all-reduce DDP hid behind the backward pass there, and how fast the all-reduces ran while
/// training ([`BaselineFit`]). It replaces the overheads' calibration: one measured step of this
/// model at this size says more about its other variants than other models' runs do.
fn apply_baseline(
    measured: &MeasuredBaseline,
    curve: &LinkCurve,
    base: &mut StepInputs,
) -> Result<String, ModelError> {
    let fit = BaselineFit::fit(base, curve, measured.step_s)?;
    fit.apply(base);
    let fitted_step_s = predict(base, curve)?.step_s;
    // The fit moves overlap and bandwidth only: a step shorter than the model's compute and
    // fixed costs (or longer than four times its all-reduce) stays out of reach, and is said.
    let reach = if (fitted_step_s / measured.step_s - 1.0).abs() > 0.02 {
        format!(
            "; the model gets no closer than {} (its compute and DDP's fixed costs bound it)",
            fmt_s(fitted_step_s)
        )
    } else {
        String::new()
    };
    Ok(format!(
        "calibrated on plain DDP's measured step ({}, {}): {:.0}% of the all-reduce hidden behind the backward pass where the model allows it, all-reduces at {:.2}× the curve's time{reach}",
        fmt_s(measured.step_s),
        measured.rests_on,
        fit.realised_overlap * 100.0,
        fit.comm_scale
    ))
}

/// The curve at DDP's bucket size and at its largest measured size.
fn summarise_curve(curve: &LinkCurve, base: &StepInputs, provenance: &str) -> CurveSummary {
    let bucket_bytes = floor_u64(base.bucket_cap_mb * MIB);
    let largest = curve.points.last().map(|p| p.bytes);
    CurveSummary {
        ranks: curve.ranks,
        alpha_us: curve.alpha_s * 1e6,
        busbw_gbps: curve.busbw_gbps,
        busbw_at_bucket_gbps: curve.busbw_at(bucket_bytes),
        bucket_bytes,
        largest_bytes: largest,
        busbw_at_largest_gbps: largest.map(|b| curve.busbw_at(b)),
        provenance: provenance.to_string(),
    }
}

/// The curve's figures as a citation: busbw at the bucket size (and at the largest size), its
/// latency, ranks and provenance.
fn cite_curve(curve: &LinkCurve, summary: &CurveSummary) -> String {
    let mut s = format!(
        "all-reduce busbw {:.2} GB/s at {}",
        summary.busbw_at_bucket_gbps,
        fmt_bytes(summary.bucket_bytes.to_f64())
    );
    if let (Some(b), Some(bw)) = (summary.largest_bytes, summary.busbw_at_largest_gbps) {
        if b != summary.bucket_bytes {
            let _ = write!(s, " and {bw:.2} GB/s at {}", fmt_bytes(b.to_f64()));
        }
    }
    let _ = write!(
        s,
        " (α {:.1} µs, {} ranks), {}",
        curve.alpha_s * 1e6,
        curve.ranks,
        summary.provenance
    );
    s
}

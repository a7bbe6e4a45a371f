//! Calibration of the step-time model on a node's own DDP runs: the fit of DDP's overheads and
//! backward fraction, and its check on models the fit did not see.

use serde::{Deserialize, Serialize};

use super::*;
use crate::num::{len_u32, ToF64};

/// Overheads and backward fraction fitted to a node's measured DDP runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub overheads: Overheads,
    pub backward_fraction: f64,
    /// Multi-GPU runs that had a one-GPU partner and the curve's world size.
    pub runs_used: u32,
    /// Root-mean-square of ln(predicted/measured step) with the defaults and after the fit.
    pub rms_log_error_before: f64,
    pub rms_log_error_after: f64,
}

impl Calibration {
    /// Puts the fitted numbers into a configuration.
    pub fn apply(&self, inputs: &mut StepInputs) {
        inputs.overheads = self.overheads;
        inputs.backward_fraction = self.backward_fraction;
    }
}

/// Bounds of the fit (the defaults sit inside them).
const FIXED_MAX_S: f64 = 0.25;
const PER_BUCKET_MAX_S: f64 = 0.01;
const BACKWARD_MIN: f64 = 0.4;
const BACKWARD_MAX: f64 = 0.9;

/// A model's layout from the name a [`DdpResult`] carries (`gpt2-124m`, `mlp:WxD`,
/// `decoder-LxW`), checked against its parameter count; uniform when it does not match.
fn layout_for_result(r: &DdpResult) -> GradLayout {
    let name = r.model.trim().to_ascii_lowercase();
    let spec = name.parse::<ModelSpec>().ok().or_else(|| {
        let (layers, width) = name.strip_prefix("decoder-")?.split_once('x')?;
        let (layers, width) = (layers.trim().parse().ok()?, width.trim().parse().ok()?);
        let vocab = crate::ddp::GPT2_VOCAB;
        Some(ModelSpec::gpt2_style(&name, layers, width, 1, 1024, vocab))
    });
    match spec.map(|s| GradLayout::for_model(&s)) {
        Some(l) if (l.params().to_f64() - r.params.to_f64()).abs() <= 0.01 * r.params.to_f64() => l,
        _ => GradLayout::uniform(r.params),
    }
}

/// One multi-GPU run as the fit reads it.
struct CalCase {
    /// The run's model: the cross-check holds out one model's runs at a time.
    model: String,
    compute_s: f64,
    /// A comm hook's own cost per step (0 without one), paid per bucket as [`predict`] pays it.
    hook_s: f64,
    /// The side-by-side slowdown counted for the case's model (1 when none).
    slowdown: f64,
    accum: f64,
    hooked: bool,
    buckets: Vec<Bucket>,
    allreduce: Vec<f64>,
    measured_step_s: f64,
}

fn case_log_error(c: &CalCase, o: &Overheads, bf: f64) -> f64 {
    let pb = o.per_bucket_s + if c.hooked { o.hook_per_bucket_s } else { 0.0 };
    let (_, exposed) = timeline(c.compute_s, bf, &c.buckets, &c.allreduce, pb, c.hook_s);
    let single = c.accum * c.compute_s + c.hook_s;
    let waits = exposed + o.ddp_fixed_s;
    let step = single
        + side_by_side_extra(single, c.compute_s, c.slowdown, waits)
        + waits
        + super::mechanisms::no_sync_extra_of(
            2,
            crate::num::len_u32(
                crate::num::floor_u64(c.accum)
                    .try_into()
                    .unwrap_or(usize::MAX),
            ),
            c.slowdown,
            None,
        );
    (step / c.measured_step_s).ln()
}

fn rms(cases: &[&CalCase], o: &Overheads, bf: f64) -> f64 {
    let s: f64 = cases.iter().map(|c| case_log_error(c, o, bf).powi(2)).sum();
    (s / cases.len().max(1).to_f64()).sqrt()
}

/// Fits `ddp_fixed_s`, `per_bucket_s` and `backward_fraction` to measured DDP runs.
///
/// Uses every run with `world_size == curve.ranks` that has a one-GPU run of the same model.
/// Compute per micro-batch is the 1-GPU step over its accumulation, read as [`predict`] reads
/// it: from the run the speedup is taken against ([`crate::ddp::one_gpu_partner`]), with a
/// hooked run's own cost (its 1-GPU run over that one) paid per bucket; without a partner, from
/// any 1-GPU run of the model. The model's
/// [`side_by_side`] slowdown is counted as [`predict`] counts it where `nocomm` runs measured one
/// beyond their launches' spread; `nocomm` runs themselves are not cases (they communicate
/// nothing). Minimises the mean squared ln(predicted/measured step time) plus a light pull (1e-6
/// per scale unit: 1 ms, 100 µs, 0.1) towards the defaults, so that parameters the runs cannot
/// separate stay at their defaults. Bounded: fixed 0..0.25 s, per bucket 0..10 ms, backward
/// fraction 0.4..0.9. Search: a coarse 9×9×7 grid, then Nelder–Mead from its six best points
/// (the loss is only piecewise smooth because of the max() in the overlap, so no gradients).
/// `hook_per_bucket_s` keeps its default.
pub fn calibrate(measured: &[DdpResult], curve: &LinkCurve) -> Result<Calibration, ModelError> {
    let cases = cases(measured, curve);
    if cases.is_empty() {
        return Err(ModelError::NoData(format!(
            "no {}-GPU run with a 1-GPU run of the same model",
            curve.ranks
        )));
    }
    Ok(fit(&cases.iter().collect::<Vec<_>>()))
}

/// How a calibration fares on models it has not seen: each model's runs predicted from a fit on
/// the other models' runs (leave one model out), against the defaults on the same runs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CrossCheck {
    pub models: u32,
    pub runs: u32,
    /// Root-mean-square of ln(predicted/measured step) over every held-out run.
    pub rms_log_error_default: f64,
    pub rms_log_error_calibrated: f64,
}

impl CrossCheck {
    /// The fits predicted the models they had not seen better than the defaults did.
    pub fn helps(&self) -> bool {
        self.rms_log_error_calibrated < self.rms_log_error_default
    }
}

/// [`calibrate`]'s fit checked on models it did not see (see [`CrossCheck`]); `None` with runs of
/// fewer than two models, where nothing can be held out.
///
/// Why: a fit on a node's runs always matches those runs at least as well as the defaults, but
/// on the MLPs of 2026-11-30 18:17, predicting each model from a fit on the others erred more than the
/// defaults did (largest 14.3% against 11.8%, docs/results/2026-11-30-h200x2-ddp-own-all-reduce.md §5).
pub fn cross_check(measured: &[DdpResult], curve: &LinkCurve) -> Option<CrossCheck> {
    let cases = cases(measured, curve);
    let mut models: Vec<&str> = Vec::new();
    for c in &cases {
        if !models.contains(&c.model.as_str()) {
            models.push(&c.model);
        }
    }
    if models.len() < 2 {
        return None;
    }
    let defaults = Overheads::default();
    let (mut default_sq, mut calibrated_sq) = (0.0, 0.0);
    for m in &models {
        let (held, seen): (Vec<&CalCase>, Vec<&CalCase>) =
            cases.iter().partition(|c| c.model == *m);
        let fitted = fit(&seen);
        for c in held {
            default_sq += case_log_error(c, &defaults, DEFAULT_BACKWARD_FRACTION).powi(2);
            calibrated_sq += case_log_error(c, &fitted.overheads, fitted.backward_fraction).powi(2);
        }
    }
    let n = cases.len().to_f64();
    Some(CrossCheck {
        models: len_u32(models.len()),
        runs: len_u32(cases.len()),
        rms_log_error_default: (default_sq / n).sqrt(),
        rms_log_error_calibrated: (calibrated_sq / n).sqrt(),
    })
}

/// The runs [`calibrate`] fits: those at the curve's world size with a 1-GPU partner, read as
/// [`predict`] reads them.
fn cases(measured: &[DdpResult], curve: &LinkCurve) -> Vec<CalCase> {
    let refs: Vec<&DdpResult> = measured.iter().collect();
    let mut cases = Vec::new();
    for r in measured
        .iter()
        .filter(|r| r.world_size > 1 && r.world_size == curve.ranks)
    {
        if !(r.step_time_median_s.is_finite() && r.step_time_median_s > 0.0) {
            continue;
        }
        // As `predict` takes them: compute from the run the speedup is taken against
        // (`ddp::one_gpu_partner`: the hook-free reference, else the run's own 1-GPU run), and a
        // hooked run's own cost as its 1-GPU run over that one. Without a partner, any 1-GPU run
        // of the model, with the hook's cost inside its compute.
        let usable = |s: &&DdpResult| s.step_time_median_s > 0.0;
        let own = measured
            .iter()
            .filter(usable)
            .find(|s| s.world_size == 1 && s.model == r.model && s.variant == r.variant);
        let partner = crate::ddp::one_gpu_partner(measured, r).filter(usable);
        let (single, hook_s) = match partner {
            Some(p) => (
                p,
                own.map_or(0.0, |o| {
                    (o.step_time_median_s - p.step_time_median_s).max(0.0)
                }),
            ),
            None => {
                let any = measured
                    .iter()
                    .filter(usable)
                    .filter(|s| s.world_size == 1 && s.model == r.model)
                    .min_by_key(|s| u8::from(s.variant != r.variant));
                let Some(any) = any else { continue };
                (any, 0.0)
            }
        };
        let variant: DdpVariant = r.variant.parse().unwrap_or_default();
        if variant.fsdp || variant.nocomm {
            continue;
        }
        let slowdown =
            side_by_side(&refs, &r.model, r.micro_batch, r.world_size).map_or(1.0, |s| s.counted());
        let compute_s = single.step_time_median_s / f64::from(single.accum.max(1));
        let mut inputs = StepInputs::new(layout_for_result(r), compute_s, r.world_size, 1)
            .with_variant(&variant);
        inputs.accum = r.accum.max(1);
        inputs.bucket_order = r
            .recipe
            .as_ref()
            .map(|x| x.bucket_order())
            .unwrap_or_default();
        if inputs.validate().is_err() {
            continue;
        }
        let buckets = inputs.buckets();
        let allreduce = bucket_costs(&inputs, &buckets, curve);
        cases.push(CalCase {
            model: r.model.clone(),
            compute_s,
            hook_s,
            slowdown,
            accum: f64::from(inputs.accum),
            hooked: inputs.hook != CommHook::None,
            buckets,
            allreduce,
            measured_step_s: r.step_time_median_s,
        });
    }
    cases
}

/// The fit itself (see [`calibrate`]).
fn fit(cases: &[&CalCase]) -> Calibration {
    let defaults = Overheads::default();
    // θ = (fixed, per_bucket, backward_fraction); scales for the pull towards the defaults.
    let d = [
        defaults.ddp_fixed_s,
        defaults.per_bucket_s,
        DEFAULT_BACKWARD_FRACTION,
    ];
    let bounds = [
        (0.0, FIXED_MAX_S),
        (0.0, PER_BUCKET_MAX_S),
        (BACKWARD_MIN, BACKWARD_MAX),
    ];
    let scales = [1e-3, 1e-4, 0.1];
    let loss = |th: &[f64; 3]| -> f64 {
        let o = Overheads {
            ddp_fixed_s: th[0],
            per_bucket_s: th[1],
            hook_per_bucket_s: defaults.hook_per_bucket_s,
        };
        let misfit = rms(cases, &o, th[2]).powi(2);
        let pull: f64 = (0..3).map(|i| ((th[i] - d[i]) / scales[i]).powi(2)).sum();
        misfit + 1e-6 * pull / 3.0
    };
    // Search in u ∈ [0,1]³: the overheads cubed (they span decades), the fraction linear.
    let from_u = |u: &[f64; 3]| -> [f64; 3] {
        let mut th = [0.0; 3];
        for i in 0..3 {
            let (lo, hi) = bounds[i];
            let v = u[i].clamp(0.0, 1.0);
            th[i] = lo + (hi - lo) * if i < 2 { v.powi(3) } else { v };
        }
        th
    };
    let to_u = |th: &[f64; 3]| -> [f64; 3] {
        let mut u = [0.0; 3];
        for i in 0..3 {
            let (lo, hi) = bounds[i];
            let v = ((th[i] - lo) / (hi - lo)).clamp(0.0, 1.0);
            u[i] = if i < 2 { v.cbrt() } else { v };
        }
        u
    };
    // Outside the box: the clamped loss plus a penalty, so the simplex is pushed back in.
    let f = |u: &[f64; 3]| {
        let out: f64 = u.iter().map(|v| (v - v.clamp(0.0, 1.0)).powi(2)).sum();
        loss(&from_u(u)) + out
    };
    // Coarse grid, then Nelder–Mead from its six best points (the loss has several valleys).
    let mut grid: Vec<([f64; 3], f64)> = vec![(to_u(&d), f(&to_u(&d)))];
    for i in 0..=8 {
        for j in 0..=8 {
            for k in 0..=6 {
                let u = [f64::from(i) / 8.0, f64::from(j) / 8.0, f64::from(k) / 6.0];
                grid.push((u, f(&u)));
            }
        }
    }
    grid.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut best = grid[0];
    for &(start, _) in grid.iter().take(6) {
        let mut x = start;
        for step in [0.1, 0.02] {
            x = nelder_mead(&f, x, step, 300);
        }
        let fx = f(&x);
        if fx < best.1 {
            best = (x, fx);
        }
    }
    let best = best.0;
    let th = from_u(&best);
    let fitted = Overheads {
        ddp_fixed_s: th[0],
        per_bucket_s: th[1],
        hook_per_bucket_s: defaults.hook_per_bucket_s,
    };
    Calibration {
        overheads: fitted,
        backward_fraction: th[2],
        runs_used: len_u32(cases.len()),
        rms_log_error_before: rms(cases, &defaults, DEFAULT_BACKWARD_FRACTION),
        rms_log_error_after: rms(cases, &fitted, th[2]),
    }
}

/// Nelder–Mead minimisation of `f` from `x0` with an initial simplex of `step` per axis.
fn nelder_mead(f: &impl Fn(&[f64; 3]) -> f64, x0: [f64; 3], step: f64, iters: u32) -> [f64; 3] {
    let mut pts: Vec<([f64; 3], f64)> = (0..4)
        .map(|i| {
            let mut x = x0;
            if i > 0 {
                x[i - 1] += if x[i - 1] + step <= 1.0 { step } else { -step };
            }
            (x, f(&x))
        })
        .collect();
    let comb = |a: &[f64; 3], b: &[f64; 3], t: f64| -> [f64; 3] {
        [
            a[0] + t * (b[0] - a[0]),
            a[1] + t * (b[1] - a[1]),
            a[2] + t * (b[2] - a[2]),
        ]
    };
    for _ in 0..iters {
        pts.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut c = [0.0; 3];
        for (x, _) in &pts[..3] {
            for i in 0..3 {
                c[i] += x[i] / 3.0;
            }
        }
        let worst = pts[3];
        let r = comb(&c, &worst.0, -1.0);
        let fr = f(&r);
        if fr < pts[0].1 {
            let e = comb(&c, &worst.0, -2.0);
            let fe = f(&e);
            pts[3] = if fe < fr { (e, fe) } else { (r, fr) };
        } else if fr < pts[2].1 {
            pts[3] = (r, fr);
        } else {
            let k = comb(&c, &worst.0, 0.5);
            let fk = f(&k);
            if fk < worst.1 {
                pts[3] = (k, fk);
            } else {
                let b = pts[0].0;
                for p in pts.iter_mut().skip(1) {
                    p.0 = comb(&b, &p.0, 0.5);
                    p.1 = f(&p.0);
                }
            }
        }
    }
    pts.sort_by(|a, b| a.1.total_cmp(&b.1));
    pts[0].0
}

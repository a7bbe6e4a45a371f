//! `ddpcheck memory`: memory first, before any launch. Each wrapper's bytes per GPU for a model
//! (parameters, gradients, optimizer states, parameters as computed, activations) against the
//! GPU's memory, and where DDP does not fit the least sharding that does; with `--from` a
//! `bench ddp` report, each run's torch peak beside its prediction.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use ddpcheck_core::bounded::FileKind;
use ddpcheck_core::ddp::{Amp, ModelSpec, RunDevice, RunPhases, Wrapper};
use ddpcheck_core::memory::check::{check_peaks, MeasuredPeak, PeakCheck};
use ddpcheck_core::memory::slices::{fit_slices, SliceFit, SlicePeak};
use ddpcheck_core::memory::{
    self, ActivationSource, MemoryModel, MemoryPlan, Moment, PhaseRun, FIT_SHARE,
};
use ddpcheck_core::num::{floor_u64, ToF64};
use ddpcheck_core::recommend::{memory_model, ModelInput};
use ddpcheck_core::report::DdpReport;
use ddpcheck_engine::{read_file, RunError};
use serde::Serialize;

use crate::global_args::{make_target, GlobalArgs};
use crate::model_args;
use crate::print_json;
use crate::read_at_edge::typed;

#[derive(Args, Debug)]
pub struct MemoryArgs {
    /// Model: a preset or spec (decoder:..., mlp:...), or one built by code (its parameters then
    /// come from the --from report).
    #[arg(long, value_parser = model_args::model())]
    pub model: ModelSpec,
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub micro_batch: u32,
    /// GPUs the job will use.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub gpus: u32,
    /// Each GPU's memory, GiB (default: this node's first GPU, where there is one).
    #[arg(long, value_name = "GIB")]
    pub gpu_memory_gib: Option<f64>,
    /// Autocast, as the training runs: bf16 (MixedPrecisionPolicy bf16 for FSDP2) or none.
    #[arg(long, default_value = "bf16", value_name = "bf16|none", value_parser = typed::<Amp>())]
    pub amp: Amp,
    /// `bench ddp` reports of this model at one GPU: each run's torch peak beside its
    /// prediction. Reports of the same decoder with other depths are its slices: each wrapper's
    /// activations measured on them, extrapolated to the model's layers, replace that wrapper's
    /// estimate.
    #[arg(long, value_name = "REPORT")]
    pub from: Vec<PathBuf>,
}

#[derive(Serialize)]
struct MemoryReport {
    plan: MemoryPlan,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    checks: Vec<PeakCheck>,
    /// Each wrapper's activations from slices of the model (the same decoder at other depths),
    /// extrapolated.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    slices: Vec<SliceFit>,
}

/// A 1-GPU run of a report: its parameters, its peak with its wrapper, and one step read at its
/// phases where the launch read them.
struct Run {
    params: u64,
    micro_batch: u32,
    peak: MeasuredPeak,
    phases: Option<RunPhases>,
}

pub fn run(cli: &GlobalArgs, a: &MemoryArgs) -> Result<i32, RunError> {
    let amp = a.amp;
    let all = peaks(a)?;
    let mut model = ModelInput::Spec {
        spec: a.model.clone(),
    };
    if a.model.params() == 0 {
        let params = reported_params(a)?.ok_or_else(|| {
            RunError::Usage(format!(
                "{}: ddpcheck cannot count a model built by code; give --from a bench ddp report \
                 of it",
                a.model.name()
            ))
        })?;
        model = ModelInput::Params { params };
    }
    let estimate = memory_model(&model, model.params(), a.micro_batch, amp);
    // The model's own runs are checked; other depths of its decoder are its slices.
    let runs: Vec<&Run> = all
        .iter()
        .filter(|r| a.model.params() == 0 || r.params == estimate.params)
        .collect();
    let slices = slice_fits(a, amp, &all, estimate.params);
    let mut m = estimate.clone();
    for f in &slices {
        m = m.with_activations(
            f.wrapper,
            ActivationSource::Measured {
                bytes: f.extrapolated_bytes,
                what: f.what(),
            },
        );
    }
    // Each wrapper's own 1-GPU step read at its phases overrules its estimate and its slices.
    let m = memory::with_phases(
        &m,
        &phase_runs(&all, a.model.params() == 0, estimate.params),
    );
    let plan = memory::plan(&m, a.gpus, gpu_bytes(cli, a)?);
    let measured = !slices.is_empty() || !m.measured.is_empty();
    let checks = checks_at_their_batches(&estimate, measured.then_some(&m), &runs);
    if cli.json {
        print_json(&MemoryReport {
            plan,
            checks,
            slices,
        })?;
        return Ok(0);
    }
    let mut s = crate::render::memory_plan(&plan, cli.width());
    s.push_str(&rests_on(&m));
    for f in &slices {
        s.push_str(&slice_lines(f));
    }
    if !checks.is_empty() {
        s.push_str(&peak_table(&checks));
    }
    s.push_str(&phase_table(&all, estimate.params));
    out!("{s}");
    Ok(0)
}

fn gpu_bytes(cli: &GlobalArgs, a: &MemoryArgs) -> Result<Option<u64>, RunError> {
    if let Some(g) = a.gpu_memory_gib {
        if !(g.is_finite() && g > 0.0 && g < 1e6) {
            return Err(RunError::Usage(format!(
                "--gpu-memory-gib {g} is not a positive size"
            )));
        }
        return Ok(Some(floor_u64(g * f64::from(1u32 << 30))));
    }
    let Ok(target) = make_target(cli) else {
        return Ok(None);
    };
    Ok(target
        .topo("")
        .ok()
        .and_then(|t| t.gpus.first().map(|g| g.memory_total_bytes))
        .filter(|b| *b > 0))
}

fn reports(a: &MemoryArgs) -> Result<Vec<DdpReport>, RunError> {
    a.from
        .iter()
        .map(|f| {
            let text = read_file(f, FileKind::Report)
                .map_err(|e| RunError::Usage(format!("--from {}: {e}", f.display())))?;
            crate::ddp_cmd::saved_ddp_report(&text, f)
        })
        .collect()
}

/// Each wrapper's fit of the slices of the model in the reports: the runs of the same decoder
/// at other depths.
fn slice_fits(
    a: &MemoryArgs,
    amp: ddpcheck_core::ddp::Amp,
    all: &[Run],
    params: u64,
) -> Vec<SliceFit> {
    let Some(d) = a.model.decoder() else {
        return Vec::new();
    };
    let s: Vec<SlicePeak> = all
        .iter()
        .filter(|r| r.params != params)
        .map(|r| SlicePeak {
            params: r.params,
            wrapper: r.peak.wrapper,
            peak_bytes: r.peak.peak_bytes,
        })
        .collect();
    let mut wrappers: Vec<Wrapper> = s.iter().map(|x| x.wrapper).collect();
    wrappers.dedup();
    let mut fits: Vec<SliceFit> = Vec::new();
    for w in wrappers {
        // FSDP2's wrappers save the same activations: the first that measured them speaks.
        let fsdp2_had = fits.iter().any(|f| f.wrapper != Wrapper::Ddp);
        if (w != Wrapper::Ddp && fsdp2_had) || fits.iter().any(|f| f.wrapper == w) {
            continue;
        }
        fits.extend(fit_slices(d, a.micro_batch, amp, w, &s));
    }
    fits
}

/// Each slice's measured activations and the line through them.
fn slice_lines(f: &SliceFit) -> String {
    let mut s = format!(
        "\nActivations of {} from slices (torch's peak less the predicted state when backward \
         starts):\n",
        f.wrapper
    );
    for (l, b) in &f.points {
        let _ = writeln!(s, "  {l:>3} layers: {} GiB", gib(*b));
    }
    let _ = writeln!(
        s,
        "  {} GiB + {} GiB per layer, EXTRAPOLATED to {} layers: {} GiB",
        gib(floor_u64(f.fixed_bytes.max(0.0))),
        gib(floor_u64(f.per_layer_bytes.max(0.0))),
        f.layers,
        gib(f.extrapolated_bytes)
    );
    s
}

/// The 1-GPU runs of the reports with a peak, each with its wrapper.
fn peaks(a: &MemoryArgs) -> Result<Vec<Run>, RunError> {
    let mut out = Vec::new();
    for r in reports(a)? {
        for row in r.results.iter().filter(|x| x.device == RunDevice::Cuda) {
            let Some(peak) = row.measured_peak() else {
                continue;
            };
            out.push(Run {
                phases: row.memory_phases.clone(),
                params: row.params,
                micro_batch: row.micro_batch,
                peak,
            });
        }
    }
    Ok(out)
}

/// Each run's peak beside the predictions at the micro-batch it ran.
fn checks_at_their_batches(
    estimate: &MemoryModel,
    measured: Option<&MemoryModel>,
    runs: &[&Run],
) -> Vec<PeakCheck> {
    runs.iter()
        .flat_map(|r| {
            let at = |m: &MemoryModel| m.at_micro_batch(r.micro_batch);
            check_peaks(
                &at(estimate),
                measured.map(at).as_ref(),
                std::slice::from_ref(&r.peak),
            )
        })
        .collect()
}

/// The model's own 1-GPU runs read at their phases, in the reports' order.
fn phase_runs(all: &[Run], any_params: bool, params: u64) -> Vec<PhaseRun> {
    all.iter()
        .filter(|r| (any_params || r.params == params) && r.peak.gpus == 1)
        .filter_map(|r| {
            Some(PhaseRun {
                variant: r.peak.variant.clone(),
                wrapper: r.peak.wrapper,
                micro_batch: r.micro_batch,
                phases: r.phases.as_ref()?.wrapped.clone(),
            })
        })
        .collect()
}

fn reported_params(a: &MemoryArgs) -> Result<Option<u64>, RunError> {
    Ok(reports(a)?
        .iter()
        .flat_map(|r| r.results.iter())
        .map(|x| x.params)
        .find(|p| *p > 0))
}

fn rests_on(m: &MemoryModel) -> String {
    format!(
        "\nrests on: {}\n",
        ddpcheck_core::recommend::memory_rests_on(m)
    )
}

fn gib(b: u64) -> String {
    format!("{:.2}", b.to_f64() / f64::from(1u32 << 30))
}

fn pct(x: f64) -> String {
    format!("{:+.1}%", x * 100.0)
}

/// The model's runs read at their phases (GiB): what the forward kept for backward, and where
/// each phase peaked; empty where no run was read.
fn phase_table(all: &[Run], params: u64) -> String {
    let rows: Vec<(String, &ddpcheck_core::memory::phases::MemoryPhases)> = all
        .iter()
        .filter(|r| r.params == params)
        .flat_map(|r| {
            let p = r.phases.as_ref();
            let wrapped = p.map(|p| (r.peak.variant.clone(), &p.wrapped));
            let plain = p
                .and_then(|p| p.plain.as_ref())
                .map(|x| (format!("{} plain", r.peak.variant), x));
            wrapped.into_iter().chain(plain)
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "\nOne step after the timed ones, read at its phases (allocated GiB; kept: what the \
         forward left for backward):\n",
    );
    let _ = writeln!(
        s,
        "  {:<22} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "run", "before", "at loss", "kept", "peak fw", "after bw", "peak bw", "after", "peak st"
    );
    for (name, p) in rows {
        let _ = writeln!(
            s,
            "  {:<22} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
            name,
            gib(p.before_forward),
            gib(p.after_forward),
            gib(p.forward_kept()),
            gib(p.peak_forward),
            gib(p.after_backward),
            gib(p.peak_backward),
            gib(p.after_step),
            gib(p.peak_step)
        );
    }
    s
}

/// Each run's peak beside its predictions, and whether each holds within 10%.
fn peak_table(checks: &[PeakCheck]) -> String {
    let mut s = String::from(
        "\nAgainst torch's peaks (max_memory_allocated, GiB): before launch, and from the \
         activations the run's wrapper measured (its own step read at its phases, or slices of \
         the model):\n",
    );
    let _ = writeln!(
        s,
        "  {:<16} {:>8} {:>10} {:>8} {:>6} {:>14} {:>8}",
        "run", "peak", "predicted", "error", "at", "from measured", "error"
    );
    for c in checks {
        let _ = writeln!(
            s,
            "  {:<16} {:>8} {:>10} {:>8} {:>6} {:>14} {:>8}",
            c.variant,
            gib(c.peak_bytes),
            gib(c.predicted_bytes),
            pct(c.error),
            match c.peak_at {
                Moment::BackwardStart => "start",
                Moment::BackwardEnd => "end",
            },
            c.from_measured_bytes.map_or("-".into(), gib),
            c.from_measured_error.map_or("-".into(), pct)
        );
    }
    let _ = writeln!(
        s,
        "  (at: the backward's start or end, the moment the prediction puts the peak at; a \
         prediction holds within {:.0}% of the peak; fits are judged at {:.0}% of the GPU)",
        memory::check::PEAK_TOLERANCE * 100.0,
        FIT_SHARE * 100.0
    );
    s
}

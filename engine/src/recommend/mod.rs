//! The gathering half of `recommend`: the measurements a recommendation rests on (saved
//! reports, the daemon's history, or quick runs on the node), the curve the model reads, and
//! core's model on them. Arguments and rendering are the CLI's.

mod budget;
mod curve;
mod gathering;
mod measured;
mod measurements;
mod report;
mod request;
mod verify;

use ddpcheck_core::num::len_u32;
use std::time::Instant;

use ddpcheck_core::backend::Progress;
use ddpcheck_core::ddp::{CompileOutcome, DdpResult, RunDevice};
use ddpcheck_core::recommend::{
    recommend, CalibrationInput, CurveProvenance, ModelInput, RecommendInput,
};
use ddpcheck_core::report::{Header, ReportKind};
use ddpcheck_core::step_time::{calibrate, cross_check, LinkCurve};

use crate::runner::{RunError, Runner};
use crate::runs::nccl_env_from_process;
use crate::saved_runs::SavedRuns;
use curve::{choose_curve, provenance_of};
use measured::{
    measured_baseline, measured_ddp_own_work, measured_hook_cost, measured_host, measured_layout,
    measured_powersgd_cost, measured_side_by_side, measured_speedups, measured_tokens_per_sample,
};
use measurements::Measurements;

pub use budget::{OwnLaunch, OwnMeasurements, OwnSweep, DEFAULT_BUDGET_S};
pub use report::{
    RecommendReport, VerifyCompute, VerifyGain, VerifyNetwork, VerifyPowerSgd, VerifyRow,
};
pub use request::RecommendRequest;
pub use verify::verify;

use gathering::Gathering;

/// The node's own DDP runs tune the model's overheads.
fn calibration(
    m: &Measurements,
    curve: &LinkCurve,
    curve_header: &Header,
) -> Option<CalibrationInput> {
    let measured: Vec<DdpResult> = m.ddp.iter().map(|(r, _)| r.clone()).collect();
    calibrate(&measured, curve)
        .ok()
        .filter(|c| c.runs_used > 0)
        .map(|c| CalibrationInput {
            source: format!(
                "{} DDP run(s) on {}",
                c.runs_used, curve_header.provenance.hostname
            ),
            cross_check: cross_check(&measured, curve),
            calibration: c,
        })
}

/// Gathers the measurements (reading, sweeping and running what is missing, each run kept in
/// `saved`) and makes the recommendation.
/// A launch that fails after saved runs of another recipe were set aside names them: whoever
/// gave `--from` expected none. The error keeps its kind and exit code.
fn after_set_aside(e: RunError, said: Option<&str>) -> RunError {
    use ddpcheck_core::ProbeError as P;
    let Some(said) = said else { return e };
    let why = |m: String| {
        format!(
            "{said}, not used (give the same flags to use them); measuring this recipe here: {m}"
        )
    };
    match e {
        RunError::Usage(m) => RunError::Usage(why(m)),
        RunError::Probe(P::Unavailable(m)) => RunError::Probe(P::Unavailable(why(m))),
        RunError::Probe(P::Invalid(m)) => RunError::Probe(P::Invalid(why(m))),
        other => other,
    }
}

pub fn build(
    a: &RecommendRequest,
    target: &dyn Runner,
    saved: &mut SavedRuns,
    progress: &mut dyn FnMut(Progress),
) -> Result<RecommendReport, RunError> {
    let started = Instant::now();
    if !(a.target_efficiency > 0.0 && a.target_efficiency <= 1.0) {
        return Err(RunError::Usage(format!(
            "--target-efficiency {} outside (0, 1]",
            a.target_efficiency
        )));
    }
    let model = a.model_input()?;
    if let Some(p) = a.price_per_hour.filter(|p| !(p.is_finite() && *p > 0.0)) {
        return Err(RunError::Usage(format!(
            "--price-per-hour {p} is not a positive price"
        )));
    }
    if !(a.budget_s.is_finite() && a.budget_s > 0.0) {
        return Err(RunError::Usage(format!(
            "--budget {} is not a positive number of seconds",
            a.budget_s
        )));
    }
    let mut g = Gathering {
        req: a,
        target,
        saved,
        progress,
        m: Measurements::default(),
        gpus_here: None,
        started,
        own: OwnMeasurements {
            budget_s: a.budget_s,
            ..OwnMeasurements::default()
        },
    };
    g.read_reports()?;
    let other_recipe = g.m.set_aside_other_recipes(&model, &a.recipe);
    g.measure_first(&model)
        .map_err(|e| after_set_aside(e, other_recipe.as_deref()))?;
    // The node's GPUs as its sweep or preflight saw them: the default GPU count, and the price's
    // split. DDP's probes may cover only some of them.
    let node_seen = [
        g.m.sweep.as_ref().map(|(s, _)| s.ranks),
        g.m.preflight.as_ref().map(|p| len_u32(p.gpus.len())),
    ]
    .into_iter()
    .flatten()
    .max();
    let wanted = a.gpus.or(node_seen);
    g.ensure_curve(wanted)?;
    // The GPUs the curve was measured on; the curve itself is chosen once the quick runs are
    // in (their N-GPU launch timed the network in DDP's own process group too).
    let measured_ranks = choose_curve(&g.m, wanted)?.curve.ranks;
    let gpus = a.gpus.unwrap_or(measured_ranks);
    let node_gpus = node_seen.unwrap_or(0).max(measured_ranks).max(gpus);
    let (compute, optimizer_s) = g
        .compute(&model, gpus)
        .map_err(|e| after_set_aside(e, other_recipe.as_deref()))?;
    let chosen = choose_curve(&g.m, Some(gpus))?;
    let env_ab = g.env_ab()?;
    let calibration = calibration(&g.m, &chosen.curve, &chosen.header);
    let (worst_link, gpu_memory_bytes) = g.links();
    let nccl_env = nccl_env_from_process();
    let p2p = g.p2p_risk(&nccl_env);
    let own = std::mem::take(&mut g.own);
    let m = &g.m;
    let cpu_ranks = m.ddp.iter().any(|(r, _)| r.device == RunDevice::Cpu);
    let (hook_compute_s, hook_rests_on) = measured_hook_cost(m, &model, a.micro_batch).unzip();
    let compile = a.recipe.compile.and_then(|_| measured_compile(m, &model));
    let input = RecommendInput {
        micro_batch: a.micro_batch,
        seq: a.seq,
        tokens_per_sample: measured_tokens_per_sample(m, &model),
        gpus,
        node_gpus,
        price_per_hour: a.price_per_hour,
        target_efficiency: a.target_efficiency,
        curve: chosen.curve,
        curve_provenance: CurveProvenance {
            method: chosen.method,
            ..provenance_of(&chosen.header)
        },
        worst_link,
        nccl_env,
        env_ab,
        p2p,
        compute,
        calibration,
        bucket_cap_mb: None,
        gpu_memory_bytes,
        optimizer_s,
        hook_compute_s,
        hook_rests_on,
        powersgd_compute: measured_powersgd_cost(m, &model, a.micro_batch),
        side_by_side: measured_side_by_side(m, &model, a.micro_batch, gpus),
        measured: measured_speedups(m, &model, a.micro_batch, gpus, a.reference),
        other_curve: chosen.other,
        baseline: measured_baseline(m, &model, a.micro_batch, gpus),
        param_layout: measured_layout(m, &model),
        ddp_own_work: measured_ddp_own_work(m, &model, a.micro_batch),
        reference: a.reference,
        host: measured_host(m, &model, a.micro_batch, gpus),
        recipe: a.recipe.clone(),
        other_recipe,
        device: if cpu_ranks { RunDevice::Cpu } else { a.device },
        model,
    };
    let rec = recommend(&input).map_err(|e| RunError::Usage(format!("recommend: {e}")))?;
    let h = &chosen.header;
    let header = Header::new(
        ReportKind::Recommend,
        h.backend,
        h.backend_label.clone(),
        h.provenance.clone(),
    );
    Ok(RecommendReport {
        header,
        recommendation: rec,
        verify: Vec::new(),
        verify_gain: None,
        verify_network: None,
        verify_compute: Vec::new(),
        verify_powersgd: None,
        own_measurements: (!own.is_empty()).then_some(own),
        seconds: started.elapsed().as_secs_f64(),
        cpu_ranks,
        compile,
    })
}

/// The longest compile among this model's compiled runs (the runs set aside for another recipe
/// are gone by now).
fn measured_compile(m: &Measurements, model: &ModelInput) -> Option<CompileOutcome> {
    let ModelInput::Spec { spec } = model else {
        return None;
    };
    let name = spec.name();
    m.ddp
        .iter()
        .filter(|(r, _)| r.model == name)
        .filter_map(|(r, _)| r.compile.clone())
        .filter(CompileOutcome::ran_compiled)
        .max_by(|a, b| {
            a.compile_s
                .unwrap_or(0.0)
                .total_cmp(&b.compile_s.unwrap_or(0.0))
        })
}

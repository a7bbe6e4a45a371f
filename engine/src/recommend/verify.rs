//! `recommend --verify`: runs the DDP benchmark for the baseline and the recommended variant
//! (and, where the model missed this node's measurements, the model's own unmeasured pick) and
//! sets what they measured beside what was predicted; where PowerSGD is offered, its rank and
//! the casting hook it was offered against run too.

use ddpcheck_core::backend::Progress;
use ddpcheck_core::ddp::CommHook;
use ddpcheck_core::ddp::{one_gpu_partner, probe_curve, throughput_ratio, DdpResult, Reference};
use ddpcheck_core::recommend::{ModelInput, PowerSgdOffer, Recommendation};
use ddpcheck_core::step_time::LinkCurve;

use super::report::{
    RecommendReport, VerifyCompute, VerifyGain, VerifyNetwork, VerifyPowerSgd, VerifyRow,
};
use super::RecommendRequest;
use crate::runner::{RunError, Runner};
use crate::saved_runs::SavedRuns;

/// Runs the baseline and the recommended variant on 1 and the recommendation's GPUs, and adds
/// predicted against measured to `report`.
pub fn verify(
    a: &RecommendRequest,
    target: &dyn Runner,
    report: &mut RecommendReport,
    saved: &mut SavedRuns,
    progress: &mut dyn FnMut(Progress),
) -> Result<(), RunError> {
    let rec = &report.recommendation;
    let spec = match a.model_input()? {
        ModelInput::Spec { spec } => spec,
        ModelInput::Params { .. } => {
            return Err(RunError::Usage(
                "--verify needs --model (something to run)".into(),
            ))
        }
    };
    let mut variants = vec!["base"];
    if rec.chosen != "base" && rec.chosen != "1 GPU" {
        variants.push(rec.chosen.as_str());
    }
    // Where the model missed this node's measurements, its own pick that nobody measured: the
    // run that settles whether it would have been the better choice.
    if let Some(pick) = rec
        .model_check
        .as_ref()
        .and_then(|c| c.unmeasured_pick.as_deref())
        .filter(|p| !variants.contains(p))
    {
        variants.push(pick);
    }
    // The offered PowerSGD rank, and the casting hook it beat in the model.
    // A rank withheld under an unreliable model is measured all the same: that settles it.
    let offer = rec
        .powersgd
        .as_ref()
        .and_then(|o| Some((o, o.rank.or(o.withheld_rank)?)));
    let powersgd_runs: Vec<String> = offer.map_or_else(Vec::new, |(o, rank)| {
        vec![
            format!("powersgd{rank}"),
            cast_variant(o.against).to_string(),
        ]
    });
    for v in &powersgd_runs {
        if !variants.contains(&v.as_str()) {
            variants.push(v.as_str());
        }
    }
    let req = a.ddp_request(vec![spec], &variants, vec![1, rec.gpus], 30)?;
    let r = target.bench_ddp(&req, progress)?;
    if let Some(stopped) = &r.stopped {
        return Err(stopped.error().into());
    }
    saved.save("verify", &r);
    for row in rec
        .rows
        .iter()
        .filter(|x| variants.contains(&x.variant.as_str()))
    {
        let multi_run = r
            .results
            .iter()
            .find(|x| x.variant == a.measured_as(&row.variant) && x.world_size == rec.gpus);
        if let Some((multi, meas)) = multi_run.and_then(|x| Some((x, x.speedup?))) {
            // The 1-GPU run the speedup was taken against (without the hook), not the
            // variant's own.
            let one_gpu = one_gpu_partner(&r.results, multi);
            let measured_spread = [
                multi.launch_spread(),
                one_gpu.and_then(DdpResult::launch_spread),
            ]
            .into_iter()
            .flatten()
            .reduce(f64::max);
            if let Some(one) = one_gpu {
                if !report
                    .verify_compute
                    .iter()
                    .any(|c| c.variant == one.variant)
                {
                    report.verify_compute.push(VerifyCompute {
                        variant: one.variant.clone(),
                        predicted_step_s: row.prediction.single_gpu_step_s,
                        // The step the predictions read: without DDP where they rest on it.
                        measured_step_s: match (&one.plain_reference, rec.reference) {
                            (Some(p), Reference::Plain) => p.step_against(one.step_time_median_s),
                            _ => one.step_time_median_s,
                        },
                    });
                }
            }
            report.verify.push(VerifyRow {
                variant: row.variant.clone(),
                world_size: rec.gpus,
                predicted_speedup: row.prediction.speedup,
                measured_speedup: meas,
                error: (row.prediction.speedup - meas) / meas,
                measured_spread,
                measured_uncertainty: multi.speedup_uncertainty,
                measured_noise_bound: multi.speedup_noise_bound,
            });
        }
    }
    report.verify_powersgd =
        offer.and_then(|(o, rank)| verify_powersgd(&r.results, o, rank, rec.gpus));
    report.verify_network = verify_network(&r.results, rec);
    let at_n = |name: &str| {
        let row = rec.rows.iter().find(|x| x.variant == name)?;
        let run = r
            .results
            .iter()
            .find(|x| x.variant == name && x.world_size == rec.gpus)?;
        Some((row, run))
    };
    if let (Some((chosen, chosen_run)), Some((base, base_run))) =
        (at_n(rec.chosen.as_str()), at_n("base"))
    {
        if chosen.variant != base.variant && base.prediction.throughput > 0.0 {
            if let Some(m) = throughput_ratio(chosen_run, base_run) {
                report.verify_gain = Some(VerifyGain {
                    variant: chosen.variant.clone(),
                    baseline: base.variant.clone(),
                    world_size: rec.gpus,
                    predicted_ratio: chosen.prediction.throughput / base.prediction.throughput,
                    measured_ratio: m.ratio,
                    measured_uncertainty: m.uncertainty,
                    measured_noise_bound: m.noise_bound,
                });
            }
        }
    }
    Ok(())
}

/// The bench variant of a casting hook.
fn cast_variant(h: CommHook) -> &'static str {
    match h {
        CommHook::Fp16 => "fp16",
        _ => "bf16",
    }
}

/// The offered PowerSGD rank's step at `gpus`, measured against predicted, beside the casting
/// hook's; `None` where its run did not come back.
fn verify_powersgd(
    runs: &[DdpResult],
    o: &PowerSgdOffer,
    rank: u32,
    gpus: u32,
) -> Option<VerifyPowerSgd> {
    let variant = format!("powersgd{rank}");
    let against = cast_variant(o.against).to_string();
    let step_at = |v: &str| {
        runs.iter()
            .find(|x| x.variant == v && x.world_size == gpus)
            .map(|x| x.step_time_median_s)
    };
    Some(VerifyPowerSgd {
        measured_step_s: step_at(&variant)?,
        predicted_step_s: o.rows.iter().find(|x| x.rank == rank)?.step_s?,
        against_measured_step_s: step_at(&against),
        against_predicted_step_s: o.against_step_s,
        variant,
        rank,
        world_size: gpus,
        against,
    })
}

/// The verify runs' all-reduce probes at the recommendation's GPU count, read as the model reads
/// a curve, at the bucket size the predictions were summarised at.
fn verify_network(runs: &[DdpResult], rec: &Recommendation) -> Option<VerifyNetwork> {
    let (probes, n) = probe_curve(runs, rec.gpus)?;
    let curve = LinkCurve::from_sweep(&probes).ok()?;
    Some(VerifyNetwork {
        world_size: rec.gpus,
        bytes: rec.curve.bucket_bytes,
        predicted_busbw_gbps: rec.curve.busbw_at_bucket_gbps,
        measured_busbw_gbps: curve.busbw_at(rec.curve.bucket_bytes),
        runs: n,
    })
}

//! What the gathered DDP runs say of this model: its compute per micro-batch, a hook's cost,
//! the speedups measured, and how much N GPUs side by side slow each other.

use ddpcheck_core::ddp::{
    fill_scaling_against, CommHook, CompileOutcome, DdpResult, DdpVariant, ParamLayout, Reference,
    RunDevice,
};
use ddpcheck_core::recommend::{
    variant_name_on, ComputeSource, DdpOwnWork, HostMeasured, MeasuredBaseline, MeasuredSpeedup,
    ModelInput, PowerSgdMeasured, SideBySideInput,
};
use ddpcheck_core::report::Header;
use ddpcheck_core::step_time::side_by_side;

use super::measurements::Measurements;

/// The one-GPU baseline row of this model: its step time / accumulation is one micro-batch.
/// Compute of one micro-batch, and (when measured) the once-per-step optimizer work.
pub(super) type MeasuredCompute = (ComputeSource, Option<f64>);

/// The model's parameters as the newest launch of it reported them (a run of any GPU count,
/// micro-batch or variant: the parameters do not change with them).
pub(super) fn measured_layout(m: &Measurements, model: &ModelInput) -> Option<ParamLayout> {
    newest_of(m, model, |r| r.param_layout.clone())
}

/// Tokens in one sample of a model built by code, as the newest launch of it that counted its
/// throughput in tokens declared them (a factory's `tokens_per_sample`).
pub(super) fn measured_tokens_per_sample(m: &Measurements, model: &ModelInput) -> Option<u32> {
    newest_of(m, model, DdpResult::tokens_per_sample)
}

/// What `read` finds in the newest launch of this model that has it (none for a model given by
/// its numbers, which no launch ran).
fn newest_of<T>(
    m: &Measurements,
    model: &ModelInput,
    read: impl Fn(&DdpResult) -> Option<T>,
) -> Option<T> {
    let ModelInput::Spec { spec } = model else {
        return None;
    };
    let name = spec.name();
    m.ddp
        .iter()
        .rev()
        .filter(|(r, _)| r.model == name)
        .find_map(|(r, _)| read(r))
}

/// Per-step cost of a compressing hook on one GPU: a 1-GPU bf16 (else fp16) run minus the plain
/// one, both at accumulation 1; and the runs it rests on.
pub(super) fn measured_hook_cost(
    m: &Measurements,
    model: &ModelInput,
    micro_batch: u32,
) -> Option<(f64, String)> {
    let ModelInput::Spec { spec } = model else {
        return None;
    };
    let name = spec.name();
    let one_gpu = |hook: CommHook| {
        m.ddp.iter().rev().find(|(r, _)| {
            r.model == name
                && r.world_size == 1
                && r.micro_batch == micro_batch
                && r.accum == 1
                && r.variant
                    .parse::<DdpVariant>()
                    .map(|v| v.plain_ddp_with(hook))
                    .unwrap_or(false)
        })
    };
    let plain = one_gpu(CommHook::None)?;
    let hooked = one_gpu(CommHook::Bf16).or_else(|| one_gpu(CommHook::Fp16))?;
    let cost = (hooked.0.step_time_median_s - plain.0.step_time_median_s).max(0.0);
    let detail = format!(
        "{} {} run of {name} over its {} run ({})",
        one_on(&hooked.0),
        hooked.0.variant,
        plain.0.variant,
        measured_at(&hooked.1)
    );
    Some((cost, detail))
}

/// PowerSGD's compression compute per rank: each rank's newest 1-GPU PowerSGD run minus the
/// newest plain 1-GPU run, both at accumulation 1 (the hook runs at world size one, where it
/// compresses and all-reduces with nothing to save, so the difference is its compute).
pub(super) fn measured_powersgd_cost(
    m: &Measurements,
    model: &ModelInput,
    micro_batch: u32,
) -> Vec<PowerSgdMeasured> {
    let ModelInput::Spec { spec } = model else {
        return Vec::new();
    };
    let name = spec.name();
    let one_gpu = |r: &DdpResult| {
        r.model == name && r.world_size == 1 && r.micro_batch == micro_batch && r.accum == 1
    };
    let with_hook = |r: &DdpResult, hook: CommHook| {
        r.variant
            .parse::<DdpVariant>()
            .ok()
            .filter(|v| v.plain_ddp_with(hook))
    };
    let Some((plain, _)) = m
        .ddp
        .iter()
        .rev()
        .find(|(r, _)| one_gpu(r) && with_hook(r, CommHook::None).is_some())
    else {
        return Vec::new();
    };
    let mut out: Vec<PowerSgdMeasured> = Vec::new();
    for (r, h) in m.ddp.iter().rev().filter(|(r, _)| one_gpu(r)) {
        let Some(v) = with_hook(r, CommHook::PowerSgd) else {
            continue;
        };
        let rank = v.powersgd_rank();
        if out.iter().any(|o| o.rank == rank) {
            continue;
        }
        out.push(PowerSgdMeasured {
            rank,
            compute_s: (r.step_time_median_s - plain.step_time_median_s).max(0.0),
            rests_on: format!(
                "{} {} run of {name} over its {} run ({})",
                one_on(r),
                r.variant,
                plain.variant,
                measured_at(h)
            ),
        });
    }
    out.sort_by_key(|o| o.rank);
    out
}

/// A 1-GPU run of model `name` at `micro_batch` without a comm hook (any accumulation).
fn one_gpu_without_hook(r: &DdpResult, name: &str, micro_batch: u32) -> bool {
    r.model == name
        && r.world_size == 1
        && r.micro_batch == micro_batch
        && r.variant
            .parse::<DdpVariant>()
            .is_ok_and(|v| v.plain_ddp_with(CommHook::None))
}

/// A 1-GPU run's step as the reference sees it: without DDP where `reference` is plain and its
/// launch timed that (`PlainReference::step_against`), else its step in DDP.
fn reference_step(r: &DdpResult, reference: Reference) -> (f64, bool) {
    match (&r.plain_reference, reference) {
        (Some(p), Reference::Plain) => (p.step_against(r.step_time_median_s), true),
        _ => (r.step_time_median_s, false),
    }
}

/// Compute of one micro-batch and the once-per-step optimizer work, from the 1-GPU runs without
/// a hook: the step without DDP where `reference` is plain and the launch timed it (DDP's own
/// work is then the model's own term, `RecommendInput::ddp_own_s`), else the step in DDP.
pub(super) fn measured_compute(
    m: &Measurements,
    model: &ModelInput,
    micro_batch: u32,
    reference: Reference,
) -> Option<MeasuredCompute> {
    let ModelInput::Spec { spec } = model else {
        return None;
    };
    let name = spec.name();
    // 1-GPU runs without a hook, newest last, by accumulation.
    let plain: Vec<&(DdpResult, Header)> = m
        .ddp
        .iter()
        .filter(|(r, _)| one_gpu_without_hook(r, &name, micro_batch))
        .collect();
    let (one, h) = plain
        .iter()
        .rev()
        .find(|(r, _)| r.accum == 1)
        .or_else(|| plain.last())?;
    let at = measured_at(h);
    let (one_step, without_ddp) = reference_step(one, reference);
    let which = if without_ddp {
        " (its step without DDP, timed in the same launch)"
    } else {
        ""
    };
    // Two accumulations separate the per-micro-batch work from the once-per-step optimizer:
    // step(k) = k·c + o. DDP's own work per step is in both DDP steps and cancels in c.
    if one.accum == 1 {
        if let Some((many, _)) = plain.iter().rev().find(|(r, _)| r.accum > 1) {
            let k = f64::from(many.accum);
            let c = (many.step_time_median_s - one.step_time_median_s) / (k - 1.0);
            let o = one_step - c;
            if c > 0.0 && o >= 0.0 {
                return Some((
                    ComputeSource::Measured {
                        seconds: c,
                        detail: format!(
                            "{} runs of {name} at accumulation 1 and {} ({at}){which}; optimizer step {:.1} ms",
                            one_on(one),
                            many.accum,
                            o * 1e3
                        ),
                    },
                    Some(o),
                ));
            }
        }
    }
    Some((
        ComputeSource::Measured {
            seconds: one_step / f64::from(one.accum.max(1)),
            detail: format!(
                "{} {} run of {name} ({at}){which}",
                one_on(one),
                one.variant
            ),
        },
        None,
    ))
}

/// DDP's own work at one GPU: the newest 1-GPU run of the model at this micro-batch, without a
/// hook, that also timed the model without DDP in its launch.
pub(super) fn measured_ddp_own_work(
    m: &Measurements,
    model: &ModelInput,
    micro_batch: u32,
) -> Option<DdpOwnWork> {
    let ModelInput::Spec { spec } = model else {
        return None;
    };
    let name = spec.name();
    let own = |(r, h): &(DdpResult, Header)| {
        if !one_gpu_without_hook(r, &name, micro_batch) {
            return None;
        }
        let p = r.plain_reference.as_ref()?;
        Some(DdpOwnWork {
            ddp_step_s: r.step_time_median_s,
            plain_step_s: p.step_time_median_s,
            ratio: p.ddp_over_plain()?,
            noise_bound: ddpcheck_core::ddp::rounds_noise_bound(&p.rounds),
            rests_on: format!(
                "{} {} run of {name} and the same model without DDP, {} interleaved rounds in one launch ({})",
                one_on(r),
                r.variant,
                p.rounds.len(),
                measured_at(h)
            ),
        })
    };
    // The newest at accumulation 1 (the step the table's speedups are against), else any.
    let newest = |accum_one: bool| {
        m.ddp
            .iter()
            .rev()
            .filter(|(r, _)| !accum_one || r.accum == 1)
            .find_map(own)
    };
    newest(true).or_else(|| newest(false))
}

/// `2 GPUs` or `2 CPU ranks`: what a run's ranks ran on.
fn ranks_on(r: &DdpResult, n: u32) -> String {
    let one = if r.device == RunDevice::Cpu {
        "CPU rank"
    } else {
        "GPU"
    };
    format!("{n} {one}{}", if n == 1 { "" } else { "s" })
}

/// `1-GPU` or `1-rank`: a run of one rank.
fn one_on(r: &DdpResult) -> &'static str {
    if r.device == RunDevice::Cpu {
        "1-rank"
    } else {
        "1-GPU"
    }
}

/// Where and when a run was measured, and whether on real GPUs: `real, HOST TIME`.
pub(super) fn measured_at(h: &Header) -> String {
    let kind = if h.backend == ddpcheck_core::BackendKind::Sim {
        "SIMULATED"
    } else {
        "real"
    };
    format!("{kind}, {} {}", h.provenance.hostname, h.provenance.time)
}

/// The speedups measured for recommend's variants at `gpus` (plain DDP in the measured
/// environment, the same model and micro-batch), oldest first.
/// The run with its speedup: its own report's, else against the 1-GPU runs of the same model
/// in the other reports (recommend's quick runs are two launches: one GPU, then N).
fn with_speedup(m: &Measurements, r: &DdpResult, reference: Reference) -> Option<DdpResult> {
    // A report's own speedups stand where they rest on the reference asked for.
    if r.speedup.is_some() && r.reference == reference {
        return Some(r.clone());
    }
    let mut runs: Vec<DdpResult> = m
        .ddp
        .iter()
        .map(|(x, _)| x)
        .filter(|x| x.world_size == 1 && x.model == r.model && x.micro_batch == r.micro_batch)
        .cloned()
        .collect();
    runs.push(r.clone());
    fill_scaling_against(&mut runs, None, reference);
    runs.pop()
}

pub(super) fn measured_speedups(
    m: &Measurements,
    model: &ModelInput,
    micro_batch: u32,
    gpus: u32,
    reference: Reference,
) -> Vec<MeasuredSpeedup> {
    let ModelInput::Spec { spec } = model else {
        return Vec::new();
    };
    let name = spec.name();
    m.ddp
        .iter()
        .filter(|(r, _)| r.model == name && r.micro_batch == micro_batch && r.world_size == gpus)
        .filter_map(|(r, h)| {
            let v: DdpVariant = r.variant.parse().ok()?;
            if !(v.plain_ddp_with(v.hook) && v.env.is_empty() && v.accum == r.accum) {
                return None;
            }
            let launches = r.launch_step_medians_s.len().max(1);
            let scaled = with_speedup(m, r, reference)?;
            Some(MeasuredSpeedup {
                variant: variant_name_on(r.device, v.hook, v.accum)?.to_string(),
                speedup: scaled.speedup.filter(|s| s.is_finite() && *s > 0.0)?,
                uncertainty: scaled.speedup_uncertainty,
                noise_bound: scaled.speedup_noise_bound,
                rests_on: format!(
                    "bench ddp at {}, {launches} launch{} ({})",
                    ranks_on(r, gpus),
                    if launches == 1 { "" } else { "es" },
                    measured_at(h)
                ),
            })
        })
        .collect()
}

/// N GPUs side by side against one, from the runs gathered (a `nocomm` run at `gpus`).
pub(super) fn measured_side_by_side(
    m: &Measurements,
    model: &ModelInput,
    micro_batch: u32,
    gpus: u32,
) -> Option<SideBySideInput> {
    let ModelInput::Spec { spec } = model else {
        return None;
    };
    let rows: Vec<&DdpResult> = m.ddp.iter().map(|(r, _)| r).collect();
    let sbs = side_by_side(&rows, &spec.name(), micro_batch, gpus)?;
    let at = |r: &DdpResult| {
        m.ddp
            .iter()
            .find(|(x, _)| std::ptr::eq(x, r))
            .map(|(_, h)| measured_at(h))
            .unwrap_or_default()
    };
    let launches = |r: &DdpResult| match r.launch_range() {
        Some((fastest, slowest)) => format!(
            "{} launches {:.2}-{:.2} ms",
            r.launch_step_medians_s.len(),
            fastest * 1e3,
            slowest * 1e3
        ),
        None => "1 launch".to_string(),
    };
    let nocomm = format!(
        "{} at {}: {:.2} ms per step, {} ({})",
        sbs.nocomm.variant,
        ranks_on(sbs.nocomm, gpus),
        sbs.nocomm.step_time_median_s * 1e3,
        launches(sbs.nocomm),
        at(sbs.nocomm)
    );
    let rests_on = match sbs.one_gpu {
        Some(one) => format!(
            "{nocomm}; {} {}: {:.2} ms, {} ({})",
            one_on(one),
            one.variant,
            one.step_time_median_s * 1e3,
            launches(one),
            at(one)
        ),
        None => format!(
            "{nocomm}; one {} alone in the same launches: {:.2} ms",
            if sbs.nocomm.device == RunDevice::Cpu {
                "CPU rank"
            } else {
                "GPU"
            },
            sbs.nocomm.solo_step_time_median_s.unwrap_or(f64::NAN) * 1e3
        ),
    };
    Some(SideBySideInput {
        measured_ratio: sbs.slowdown,
        launches: sbs.fewest_launches(),
        within_launch: sbs.within_launch(),
        distinct: sbs.distinct(),
        noise_bound: sbs.noise_bound,
        rests_on,
    })
}

/// Plain DDP's step at `gpus` measured for this model, the newest run: what the model is
/// calibrated on before it predicts the other variants.
pub(super) fn measured_baseline(
    m: &Measurements,
    model: &ModelInput,
    micro_batch: u32,
    gpus: u32,
) -> Option<MeasuredBaseline> {
    let ModelInput::Spec { spec } = model else {
        return None;
    };
    let name = spec.name();
    let (r, h) = m.ddp.iter().rev().find(|(r, _)| {
        r.model == name
            && r.world_size == gpus
            && r.micro_batch == micro_batch
            && r.variant == "base"
            && r.step_time_median_s > 0.0
    })?;
    Some(MeasuredBaseline {
        step_s: r.step_time_median_s,
        rests_on: format!(
            "base at {}, {} launch{} ({})",
            ranks_on(r, gpus),
            r.launch_step_medians_s.len().max(1),
            if r.launch_step_medians_s.len() > 1 {
                "es"
            } else {
                ""
            },
            measured_at(h)
        ),
    })
}

/// The host-side facts for the levers: the newest run of the model at this micro-batch, without
/// a hook, at `gpus` (where the buffer broadcast costs what the job would pay), else at one GPU.
pub(super) fn measured_host(
    m: &Measurements,
    model: &ModelInput,
    micro_batch: u32,
    gpus: u32,
) -> Option<HostMeasured> {
    let ModelInput::Spec { spec } = model else {
        return None;
    };
    let name = spec.name();
    // A run at accumulation 1 first: the broadcast comes once per forward, so it is read
    // against one micro-batch's step, not against an accumulated step of several forwards.
    let at = |world: u32, accum_one: bool| {
        m.ddp.iter().rev().find_map(|(r, h)| {
            let plain = r
                .variant
                .parse::<DdpVariant>()
                .is_ok_and(|v| v.plain_ddp_with(CommHook::None));
            let fits = r.model == name
                && r.micro_batch == micro_batch
                && r.world_size == world
                && (!accum_one || r.accum <= 1);
            let facts = r.host.clone().filter(|_| plain && fits)?;
            Some(HostMeasured {
                facts,
                step_s: r.step_time_median_s,
                world,
                rests_on: format!(
                    "the {} run of {name} on {}: its gradient check before DDP and its buffer broadcast timed alone ({})",
                    r.variant,
                    ranks_on(r, world),
                    measured_at(h)
                ),
            })
        })
    };
    [(gpus, true), (gpus, false), (1, true), (1, false)]
        .into_iter()
        .find_map(|(world, accum_one)| at(world, accum_one))
}

/// The longest compile among this model's compiled runs (the runs set aside for another recipe
/// are gone by now).
pub(super) fn measured_compile(m: &Measurements, model: &ModelInput) -> Option<CompileOutcome> {
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

//! Simulated DDP benchmarks: step times from a profile's compute times and its own all-reduce
//! curve, with bucketed all-reduces overlapping the backward pass.
//!
//! The physics, stated once (sim assumptions unless marked):
//! - A micro-batch takes `c` on one GPU (the profile's measured or derived time; otherwise FLOPs
//!   over the profile's achieved rate plus a fixed launch overhead). The backward pass is the
//!   last 2/3 of it (backward ≈ 2× forward FLOPs). An optimizer step costs `o` once per step.
//! - DDP buckets fp32 gradients: a first bucket of 1 MiB, then `bucket_cap_mb` (25 MiB by
//!   default), in the order gradients become ready. Transformer layer gradients appear evenly
//!   over the backward pass after the LM head's share of it; the tied token embedding (and the
//!   position embedding) are ready only when the backward pass ends. MLP layers appear evenly.
//! - Each bucket is one all-reduce of its wire bytes (4 per parameter, 2 with an fp16/bf16
//!   hook), timed by the profile's own curve for this regime. With PowerSGD a bucket is three
//!   all-reduces one after another (uncompressed, `P`, `Q`), each its share of the bucket's
//!   parameters in the shares core's `step_time::powersgd` counts for the whole model from its
//!   parameter shapes at the variant's rank (the sim's buckets carry no shapes). Buckets run
//!   one after another; while the backward pass runs they progress at the regime's
//!   `overlap_rate` (compute and communication share the GPU and its PCIe/host path), after it
//!   at full speed. What finishes after the backward pass is exposed.
//! - PowerSGD's compression is compute the step pays at every world size, one GPU included
//!   (torch runs the hook at world size one too; its 1-GPU step minus plain DDP's is what
//!   `recommend` reads as the compression compute): [`SIM_POWERSGD_PASSES`] passes over the
//!   compressed gradients' fp32 bytes at [`SIM_POWERSGD_GBPS`] (the thin products `M·Q`,
//!   `Mᵀ·P` and the error feedback are memory-bound), plus [`SIM_POWERSGD_COLUMN_S`] per
//!   compressed matrix and rank (orthogonalising `P` column by column). It is paid after the
//!   backward, none of it hidden. Sim assumptions, not measurements.
//! - With accumulation k only the last micro-batch synchronises (`no_sync`):
//!   step = k·c + exposed + o (+ PowerSGD's compression). One GPU has nothing to synchronise,
//!   nor has `nocomm`. Simulated
//!   GPUs do not slow each other: N processes side by side compute as fast as one.
//! - FSDP (estimate): per layer unit, an all-gather in the forward and one in the backward (none
//!   in the backward for `fsdp-noreshard`, whose parameters stay gathered), and a reduce-scatter
//!   of the gradients on the synchronising micro-batch, each overlapping its pass at the same
//!   rate; HSDP as `fsdp`. FSDP2's `replicate()` all-reduces its gradients as DDP does.
//! - p90 is the median plus 2%: the sim has no noise of its own.
//! - A multi-GPU run (`nocomm` too) reports the profile's own curve as the all-reduce it timed
//!   before its steps (`all_reduce_probe`): the simulated network does not drift. A `nocomm`
//!   run on N GPUs also reports one GPU alone in the same launch (`solo_step_time_median_s`).

use ddpcheck_core::backend::Progress;
use ddpcheck_core::collective::{Collective, Sweep};
use ddpcheck_core::ddp::{
    fill_scaling, merge_repeats, timed_steps, CommHook, DdpRequest, DdpResult, DdpVariant,
    ModelSpec, PlainReference, RunPhases, Wrapper, ALL_REDUCE_PROBE_BYTES,
};
use ddpcheck_core::memory;
use ddpcheck_core::num::{floor_u64, len_u32, ToF64};
use ddpcheck_core::step_time::{powersgd, GradLayout};
use ddpcheck_core::ProbeError;

use crate::fault::Fault;
use crate::profile::{Catalog, Profile};
use crate::timing::{jitter, Fabric};

/// Share of a micro-batch's compute that is the backward pass.
pub const BWD_FRACTION: f64 = 2.0 / 3.0;
/// PyTorch DDP's first bucket (`dist._DEFAULT_FIRST_BUCKET_BYTES`) and default cap.
pub const FIRST_BUCKET_BYTES: f64 = 1024.0 * 1024.0;
pub const DEFAULT_BUCKET_CAP_MB: f64 = 25.0;
/// Gradients are held in the parameters' dtype (fp32) inside DDP buckets.
const GRAD_BYTES: f64 = 4.0;
/// Passes over the compressed gradients' bytes PowerSGD's compression makes on a simulated node
/// (`M·Q`, `Mᵀ·P`, the error feedback's read, add and write).
pub const SIM_POWERSGD_PASSES: f64 = 5.0;
/// The memory bandwidth those passes run at on a simulated node, GB/s.
pub const SIM_POWERSGD_GBPS: f64 = 1000.0;
/// Orthogonalising one column of one compressed matrix's `P` on a simulated node, seconds.
pub const SIM_POWERSGD_COLUMN_S: f64 = 10e-6;
/// p90 over median for simulated step times.
pub const P90_SPREAD: f64 = 0.02;
/// DDP's own work at one GPU: how much longer a 1-GPU step in DDP runs than the same model
/// without DDP (buffer broadcast, the reducer's hooks, host work). Within the +1% to +19% that
/// users' models measured on one H200 (docs/results/2026-12-02-h200-ddp-own-work.md).
pub const DDP_OWN_WORK: f64 = 0.05;

/// Compute of one configuration on one GPU, seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Work {
    pub micro_s: f64,
    pub overhead_s: f64,
}

/// The profile's compute time for a model at a micro-batch: its table row (scaled linearly in
/// the micro-batch) or an estimate from FLOPs.
pub fn compute_time(profile: &Profile, spec: &ModelSpec, micro_batch: u32) -> Work {
    let cp = &profile.compute;
    let row = cp
        .models
        .iter()
        .find(|m| m.model.parse::<ModelSpec>().ok().as_ref() == Some(spec));
    if let Some(m) = row {
        return Work {
            micro_s: m.micro_ms * 1e-3 * f64::from(micro_batch) / f64::from(m.micro_batch),
            overhead_s: m.step_overhead_ms * 1e-3,
        };
    }
    let tflops = match spec {
        ModelSpec::Mlp { .. } => cp.mlp_tflops,
        // A model built by code never reaches here (`run` refuses it); a decoder's rate.
        ModelSpec::Decoder { .. } | ModelSpec::External { .. } => cp.decoder_tflops,
    };
    Work {
        micro_s: spec.train_flops_per_sample() * f64::from(micro_batch) / (tflops * 1e12)
            + cp.fixed_ms_per_micro * 1e-3,
        overhead_s: spec.params().to_f64() * cp.optimizer_ns_per_param * 1e-9,
    }
}

/// A gradient bucket: when it is ready (seconds into the backward pass) and its parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bucket {
    pub ready_s: f64,
    pub params: f64,
}

/// How a model's gradients become ready: (params that appear evenly, share of the backward
/// pass before the first of them, params ready only at the end).
fn gradient_shape(spec: &ModelSpec) -> (f64, f64, f64) {
    let Some(t) = spec.decoder_tensors() else {
        return (spec.params().to_f64(), 0.0, 0.0);
    };
    let embed = (t.token_embedding + t.positions).to_f64();
    let layers = spec.params().to_f64() - embed;
    // The LM head's matmul runs first in the backward pass; the token embedding's gradient is
    // only complete after the input embedding's backward, at the end.
    let head = 6.0 * t.token_embedding.to_f64() * f64::from(spec.tokens_per_sample());
    let head_share = (head / spec.train_flops_per_sample()).clamp(0.0, 0.9);
    (layers, head_share, embed)
}

/// DDP's buckets in the order they are all-reduced.
pub fn buckets(spec: &ModelSpec, bucket_cap_mb: f64, bwd_s: f64) -> Vec<Bucket> {
    let (layers, head_share, embed) = gradient_shape(spec);
    let cap = (bucket_cap_mb * 1024.0 * 1024.0 / GRAD_BYTES).max(1.0);
    let mut out = Vec::new();
    let mut q = 0.0;
    let mut size = (FIRST_BUCKET_BYTES / GRAD_BYTES).min(cap);
    while q < layers {
        let n = size.min(layers - q);
        q += n;
        out.push(Bucket {
            ready_s: bwd_s * (head_share + (1.0 - head_share) * q / layers),
            params: n,
        });
        size = cap;
    }
    if embed > 0.0 {
        // One parameter larger than the cap gets a bucket of its own; DDP never splits one.
        out.push(Bucket {
            ready_s: bwd_s,
            params: embed,
        });
    }
    out
}

/// Time past the end of the window at which serial transfers finish, given each transfer's
/// ready time and its standalone duration; during the window they progress at `rate`.
pub fn exposed_after(window_s: f64, rate: f64, transfers: &[(f64, f64)]) -> f64 {
    let mut t: f64 = 0.0;
    for &(ready, work) in transfers {
        let start = t.max(ready);
        t = if start >= window_s {
            start + work
        } else if rate > 0.0 && start + work / rate <= window_s {
            start + work / rate
        } else {
            window_s + (work - (window_s - start) * rate)
        };
    }
    (t - window_s).max(0.0)
}

/// One configuration's step time, seconds.
pub fn step_time(
    fabric: &Fabric<'_>,
    spec: &ModelSpec,
    variant: &DdpVariant,
    work: Work,
    world: u32,
) -> f64 {
    let k = f64::from(variant.accum.max(1));
    let compute = k * work.micro_s + work.overhead_s + powersgd_compute_s(spec, variant);
    if world < 2 || variant.nocomm {
        return compute;
    }
    let rate = fabric.regime.overlap_rate;
    let bwd = work.micro_s * BWD_FRACTION;
    let fwd = work.micro_s - bwd;
    // FSDP2's replicate() all-reduces whole gradients as DDP does; the sharding wrappers
    // gather and reduce-scatter.
    if variant.fsdp && variant.wrapper() != Wrapper::Replicate {
        // Without resharding the parameters stay gathered from forward to backward.
        let regather = if variant.wrapper() == Wrapper::FsdpNoReshard {
            0.0
        } else {
            1.0
        };
        let units = fsdp_units(spec);
        let gather: f64 = units
            .iter()
            .map(|p| fabric.time_us(Collective::AllGather, floor_u64(p * GRAD_BYTES)) * 1e-6)
            .sum();
        let scatter: f64 = units
            .iter()
            .map(|p| fabric.time_us(Collective::ReduceScatter, floor_u64(p * GRAD_BYTES)) * 1e-6)
            .sum();
        let hide = |comm: f64, window: f64| (comm - rate * window).max(0.0);
        let exposed = k * hide(gather, fwd)
            + (k - 1.0) * hide(regather * gather, bwd)
            + hide(regather * gather + scatter, bwd);
        return compute + exposed;
    }
    let shares = wire_shares(spec, variant);
    let cap = variant.bucket_cap_mb.unwrap_or(DEFAULT_BUCKET_CAP_MB);
    let transfers: Vec<(f64, f64)> = buckets(spec, cap, bwd)
        .iter()
        .map(|b| {
            let time: f64 = shares
                .iter()
                .map(|share| {
                    let bytes = floor_u64((b.params * share).round().max(1.0));
                    fabric.time_us(Collective::AllReduce, bytes) * 1e-6
                })
                .sum();
            (b.ready_s, time)
        })
        .collect();
    compute + exposed_after(bwd, rate, &transfers)
}

/// Bytes per parameter of each all-reduce a bucket runs, in order: one (4, or 2 with a casting
/// hook), or PowerSGD's non-empty three.
fn wire_shares(spec: &ModelSpec, variant: &DdpVariant) -> Vec<f64> {
    if variant.hook != CommHook::PowerSgd {
        return vec![variant.hook.cast_bytes_per_param().unwrap_or(GRAD_BYTES)];
    }
    let layout = GradLayout::for_model(spec);
    let split = powersgd::split(&layout.tensors, variant.powersgd_rank());
    let total = split.original.max(1).to_f64();
    split
        .all_reduces()
        .iter()
        .filter(|&&e| e > 0)
        .map(|&e| GRAD_BYTES * e.to_f64() / total)
        .collect()
}

/// PowerSGD's compression compute a step on a simulated node (see the module's physics); zero
/// for every other hook.
pub fn powersgd_compute_s(spec: &ModelSpec, variant: &DdpVariant) -> f64 {
    if variant.hook != CommHook::PowerSgd || variant.nocomm || variant.fsdp {
        return 0.0;
    }
    let rank = variant.powersgd_rank();
    let layout = GradLayout::for_model(spec);
    let (elements, columns) = layout
        .tensors
        .iter()
        .map(|t| (t, powersgd::tensor_split(t, rank)))
        .filter(|(_, s)| s.p > 0)
        .fold((0u64, 0u64), |(e, c), (t, s)| {
            let n = t.matrix.map_or(1, |[n, _]| n).max(1);
            (e + s.original, c + s.p / n)
        });
    SIM_POWERSGD_PASSES * GRAD_BYTES * elements.to_f64() / (SIM_POWERSGD_GBPS * 1e9)
        + columns.to_f64() * SIM_POWERSGD_COLUMN_S
}

/// FSDP's flat-parameter units: one per layer, plus the embeddings for a decoder.
fn fsdp_units(spec: &ModelSpec) -> Vec<f64> {
    match spec {
        ModelSpec::Decoder(d) => {
            let (layer_params, _, embed) = gradient_shape(spec);
            let l = f64::from(d.layers.max(1));
            let mut u = vec![layer_params / l; d.layers as usize];
            u.push(embed);
            u
        }
        ModelSpec::Mlp { .. } | ModelSpec::External { .. } => spec
            .mlp_layers()
            .iter()
            .map(|(i, o)| (i * o + o).to_f64())
            .collect(),
    }
}

/// How much shorter a compiled step's compute is on a simulated node: on one H200 torch.compile
/// took resnet50's plain step from 29.1–29.8 to 17.0 ms and a LLaMA-style 200M model's from 45.1
/// to 29.2 ms, 1.5–1.7× (issue 38's independent timing, torch 2.11, bf16, fused AdamW).
pub const SIM_COMPILE_SPEEDUP: f64 = 1.6;

/// What compiling takes on a simulated node, seconds: the first compiled step of those two
/// models took 39 s and 31 s on one H200 (the same timing).
pub const SIM_COMPILE_S: f64 = 35.0;

/// The compute of a compiled recipe ([`SIM_COMPILE_SPEEDUP`] shorter); eager's as it is.
fn compiled(work: Work, recipe: &ddpcheck_core::ddp::Recipe) -> Work {
    if recipe.compile.is_none() {
        return work;
    }
    Work {
        micro_s: work.micro_s / SIM_COMPILE_SPEEDUP,
        ..work
    }
}

/// A simulated compiled run's compile time, outside its steps as on a real node.
fn compile_outcome(
    recipe: &ddpcheck_core::ddp::Recipe,
    with_plain: bool,
) -> Option<ddpcheck_core::ddp::CompileOutcome> {
    let mode = recipe.compile?;
    Some(ddpcheck_core::ddp::CompileOutcome {
        mode,
        compile_s: Some(SIM_COMPILE_S),
        plain_compile_s: with_plain.then_some(SIM_COMPILE_S),
        warmup_steps: 10,
        steady: true,
        ddp_optimizer: Some(true),
        error: None,
    })
}

/// Runs the simulated benchmark: every model × variant × world size, then core's scaling fill.
pub fn run(
    catalog: &Catalog,
    profile: &Profile,
    faults: &[Fault],
    req: &DdpRequest,
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<DdpResult>, ProbeError> {
    if let Some(m) = req.models.iter().find(|m| m.source().is_some()) {
        return Err(ProbeError::Invalid(format!(
            "{}: a simulated node has no PyTorch to build a model from code; it runs presets \
             and specs (gpt2-124m, decoder:..., mlp:...). Measure it on a real node, or with \
             `--device cpu` where PyTorch is installed",
            m.name()
        )));
    }
    out_of_memory(catalog, profile, req)?;
    let repeats = req.repeats.max(1);
    let total = len_u32(req.models.len() * req.variants.len() * req.world_sizes.len()) * repeats;
    let mut rows = Vec::new();
    for launch in 0..repeats {
        for spec in &req.models {
            let work = compiled(compute_time(profile, spec, req.micro_batch), &req.recipe);
            let tokens = f64::from(spec.tokens_per_sample());
            for variant in &req.variants {
                let requested: Vec<(String, String)> =
                    req.env.iter().chain(variant.env.iter()).cloned().collect();
                let env = crate::worker_env::effective_env(&requested);
                for &world in &req.world_sizes {
                    let gpus: Vec<usize> = (0..world as usize).collect();
                    let fabric = Fabric::new(catalog, profile, faults, &env, &gpus);
                    // A repeated launch lands a little apart from the last, as on real nodes
                    // (sim: a deterministic ±0.4% per launch, so the same request gives the same answer).
                    let step = step_time(
                        &fabric,
                        spec,
                        variant,
                        straggled(work, faults, variant, world),
                        world,
                    ) * if repeats > 1 {
                        1.0 + jitter(&format!(
                            "launch{launch}/{}/{}/{world}",
                            spec.name(),
                            variant.name
                        ))
                    } else {
                        1.0
                    };
                    // nocomm on N GPUs also times rank 0 alone inside the launch, as the runner
                    // does: the same compute (simulated GPUs do not slow each other), its own jitter.
                    let solo = (variant.nocomm && world > 1).then(|| {
                        step_time(&fabric, spec, variant, work, 1)
                            * if repeats > 1 {
                                1.0 + jitter(&format!(
                                    "launch{launch}/{}/{}/solo",
                                    spec.name(),
                                    variant.name
                                ))
                            } else {
                                1.0
                            }
                    });
                    // The plain reference, in the 1-GPU launch and for runs without a hook
                    // (as the benchmark script; an FSDP2 wrapper's on a copy of the model): the
                    // model without its wrapper, its compute alone without the wrapper's own
                    // work at one GPU.
                    let plain = (req.plain_blocks_at(world)
                        && !variant.nocomm
                        && variant.hook == CommHook::None)
                        .then(|| {
                            let alone = (step_time(&fabric, spec, variant, work, 1)
                                - powersgd_compute_s(spec, variant))
                                / (1.0 + DDP_OWN_WORK);
                            PlainReference {
                                step_time_median_s: alone,
                                rounds: vec![[step, alone]],
                            }
                        });
                    let accum = variant.accum.max(1);
                    let items = f64::from(world) * f64::from(accum) * f64::from(req.micro_batch);
                    progress(Progress {
                        stage: "ddp".into(),
                        done: len_u32(rows.len()) + 1,
                        total,
                        message: format!(
                            "{} {} on {world} GPU(s): {:.1} ms per step (sim, regime {})",
                            spec.name(),
                            variant.name,
                            step * 1e3,
                            fabric.regime.name
                        ),
                    });
                    rows.push(DdpResult {
                        model: spec.name(),
                        params: spec.params(),
                        variant: variant.name.clone(),
                        world_size: world,
                        micro_batch: req.micro_batch,
                        accum,
                        step_time_median_s: step,
                        step_time_p90_s: step * (1.0 + P90_SPREAD),
                        timed_steps: Some(timed_steps(req.min_timed_s, req.steps, step)),
                        throughput: items * tokens / step,
                        throughput_unit: match spec {
                            ModelSpec::Mlp { .. } => "samples/s".into(),
                            ModelSpec::Decoder { .. } | ModelSpec::External { .. } => {
                                "tokens/s".into()
                            }
                        },
                        param_layout: spec.param_layout(),
                        all_reduce_probe: all_reduce_probe(&fabric, world),
                        solo_step_time_median_s: solo,
                        compile: compile_outcome(&req.recipe, plain.is_some()),
                        plain_reference: plain,
                        recipe: Some(req.recipe.clone()),
                        max_memory_bytes: Some(predicted_peak(spec, req, variant, world)),
                        memory_phases: (world == 1 && accum == 1)
                            .then(|| predicted_phases(spec, req, variant)),
                        // Speedups and launches: filled in below.
                        ..DdpResult::default()
                    });
                }
            }
        }
    }
    let mut rows = merge_repeats(rows);
    fill_scaling(&mut rows, req.price_per_gpu_hour);
    Ok(rows)
}

/// sim: the peak ddpcheck's memory model predicts.
fn predicted_peak(spec: &ModelSpec, req: &DdpRequest, variant: &DdpVariant, world: u32) -> u64 {
    let m = memory::MemoryModel::of_spec(spec, req.micro_batch, req.recipe.amp);
    memory::predict(&m, variant.wrapper(), world).total_bytes
}

/// sim: one step of a 1-GPU run read at its phases as ddpcheck's memory model predicts them
/// ([`memory::phases::predicted_phases`]), so that reading them back gives the model's own
/// activations.
fn predicted_phases(spec: &ModelSpec, req: &DdpRequest, variant: &DdpVariant) -> RunPhases {
    let m = memory::MemoryModel::of_spec(spec, req.micro_batch, req.recipe.amp);
    RunPhases {
        wrapped: memory::phases::predicted_phases(&m, variant.wrapper()),
        plain: None,
    }
}

/// A simulated GPU runs out of memory where ddpcheck's memory model says a real one would
/// ([`ddpcheck_core::memory`]: the training state as the wrapper shards it, the parameters it
/// computes on and one micro-batch's activations, past [`memory::FIT_SHARE`] of the GPU), and
/// ends the launch with the line the benchmark script gives there.
fn out_of_memory(catalog: &Catalog, profile: &Profile, req: &DdpRequest) -> Result<(), ProbeError> {
    let Some(gpu) = catalog.gpu_model(&profile.gpu_model) else {
        return Ok(());
    };
    let usable = memory::usable_bytes(gpu.memory_total_bytes);
    for spec in &req.models {
        let m = memory::MemoryModel::of_spec(spec, req.micro_batch, req.recipe.amp);
        for variant in &req.variants {
            for &world in &req.world_sizes {
                let row = memory::predict(&m, variant.wrapper(), world);
                if row.total_bytes > usable {
                    return Err(ProbeError::Invalid(format!(
                        "micro-batch {} does not fit on GPU0 ({}, {:.1} GiB): {} {} on {world} \
                         GPU(s) needs {:.1} GiB (sim: ddpcheck's memory model)",
                        req.micro_batch,
                        gpu.name,
                        gib(gpu.memory_total_bytes),
                        spec.name(),
                        variant.name,
                        gib(row.total_bytes)
                    )));
                }
            }
        }
    }
    Ok(())
}

fn gib(bytes: u64) -> f64 {
    bytes.to_f64() / f64::from(1u32 << 30)
}

/// `slow-gpu`: a run of two or more GPUs that synchronises waits for GPU 1, so its every
/// micro-batch takes GPU 1's time. One GPU alone runs on GPU 0, and `nocomm` reports rank 0's
/// step, which never waits for another rank.
fn straggled(work: Work, faults: &[Fault], variant: &DdpVariant, world: u32) -> Work {
    // GPU 1 takes part in every run of two GPUs or more.
    let waits = faults.contains(&Fault::SlowGpu) && !variant.nocomm && world >= 2;
    if waits {
        Work {
            micro_s: work.micro_s / crate::fault::SLOW_GPU_SPEED,
            ..work
        }
    } else {
        work
    }
}

/// What the runner's all-reduce probe would time before the steps: the profile's own curve
/// (the same one the steps use) at [`ALL_REDUCE_PROBE_BYTES`]; none on one GPU.
fn all_reduce_probe(fabric: &Fabric<'_>, world: u32) -> Option<Sweep> {
    if world < 2 {
        return None;
    }
    let times: Vec<(u64, f64)> = ALL_REDUCE_PROBE_BYTES
        .iter()
        .map(|&b| (b, fabric.time_us(Collective::AllReduce, b) * 1e-6))
        .collect();
    Sweep::all_reduce_from_times(world, &times)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposure_arithmetic() {
        // Perfect overlap hides what fits in the window; none exposes everything.
        assert_eq!(exposed_after(1.0, 1.0, &[(0.0, 0.5)]), 0.0);
        assert!((exposed_after(1.0, 0.0, &[(0.0, 0.5)]) - 0.5).abs() < 1e-12);
        // Half rate: 0.8 s of work from t=0 does 0.5 s in the window, 0.3 s after it.
        assert!((exposed_after(1.0, 0.5, &[(0.0, 0.8)]) - 0.3).abs() < 1e-12);
        // A transfer ready only at the end of the window is fully exposed.
        assert!((exposed_after(1.0, 1.0, &[(1.0, 0.2)]) - 0.2).abs() < 1e-12);
    }

    #[test]
    fn buckets_cover_every_parameter() {
        let spec = ModelSpec::gpt2_124m();
        let b = buckets(&spec, 25.0, 1.0);
        let total: f64 = b.iter().map(|b| b.params).sum();
        assert!((total - spec.params().to_f64()).abs() < 1.0);
        assert!(
            (b[0].params - 262_144.0).abs() < 1e-9,
            "first bucket is 1 MiB"
        );
        assert!(b.windows(2).all(|w| w[0].ready_s <= w[1].ready_s));
        assert_eq!(b.last().unwrap().ready_s, 1.0);
        // The LM head's share of the backward pass passes before any layer gradient is ready.
        assert!(b[0].ready_s > 0.2, "{}", b[0].ready_s);
    }

    #[test]
    fn powersgds_compression_is_paid_on_one_gpu_and_grows_with_the_rank() {
        let spec = ModelSpec::gpt2_124m();
        let v = |name: &str| name.parse::<DdpVariant>().unwrap();
        assert_eq!(powersgd_compute_s(&spec, &v("base")), 0.0);
        assert_eq!(powersgd_compute_s(&spec, &v("bf16")), 0.0);
        let r1 = powersgd_compute_s(&spec, &v("powersgd1"));
        let r4 = powersgd_compute_s(&spec, &v("powersgd4"));
        assert!(r1 > 0.0 && r4 > r1, "{r1} {r4}");
        // Rank 4 adds three more columns per compressed matrix than rank 1, nothing else.
        let layout = GradLayout::for_model(&spec);
        let matrices = layout
            .tensors
            .iter()
            .filter(|t| powersgd::tensor_split(t, 4).p > 0)
            .count();
        assert!(((r4 - r1) - 3.0 * matrices.to_f64() * SIM_POWERSGD_COLUMN_S).abs() < 1e-12);
    }
}

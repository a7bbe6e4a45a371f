//! Memory first: the plan recommend attaches to every answer ([`crate::memory`]), and the
//! answer where DDP does not fit one GPU: the least sharding that fits, at the micro-batch (and
//! with the checkpointing) it needs, with its snippet. Nothing that does not fit is offered.

use crate::ddp::{Amp, CommHook, Recipe, RunDevice, Wrapper};
use crate::memory::{self, ActivationSource, Fit, MemoryModel, MemoryPlan, FIT_SHARE};
use crate::num::ToF64;
use crate::step_time::Overheads;
use crate::units::fmt_bytes;

use super::input::{ComputeSource, ModelInput, RecommendInput};
use super::{CurveSummary, Reason, Recommendation, SingleGpu};

/// The memory model of the request's model: its shape where ddpcheck knows it, else its
/// parameter count alone (no blocks, no activations).
pub fn memory_model(model: &ModelInput, trainable: u64, micro_batch: u32, amp: Amp) -> MemoryModel {
    let mut m = match model {
        ModelInput::Spec { spec } => MemoryModel::of_spec(spec, micro_batch, amp),
        ModelInput::Params { params } => MemoryModel::of_params(*params, micro_batch, amp),
    };
    // A model built by code counts 0 before a launch reports its parameters: all train.
    m.trainable = if trainable == 0 {
        m.params
    } else {
        trainable.min(m.params)
    };
    m
}

/// The plan for a recommendation's input: its GPUs, their memory, its recipe's autocast; on
/// CPU ranks none (no GPU memory to fit).
pub fn memory_plan(input: &RecommendInput) -> Option<MemoryPlan> {
    if input.device == RunDevice::Cpu {
        return None;
    }
    let mut m = memory_model(
        &input.model,
        input.trainable_params(),
        input.micro_batch,
        input.recipe.amp,
    );
    if let Some(run) = &input.memory_peak {
        if let Some(bytes) =
            memory::activations_from_peak(&m, run.wrapper, run.gpus, run.peak_bytes)
        {
            m = m.with_activations(
                run.wrapper,
                ActivationSource::Measured {
                    bytes,
                    what: format!(
                        "the 1-GPU run of {}: torch's peak {} less its predicted state",
                        run.variant,
                        gib(run.peak_bytes)
                    ),
                },
            );
        }
    }
    // Each wrapper's own step read at its phases overrules what the peak said.
    let m = memory::with_phases(&m, &input.memory_phases);
    Some(memory::plan(&m, input.gpus, input.gpu_memory_bytes))
}

/// The micro-batch and accumulation that keep the requested batch where the fit needs a smaller
/// micro-batch: as few accumulation steps as reach it, each micro-batch as even as they allow.
pub fn keep_batch(requested: u32, fits_up_to: u32) -> (u32, u32) {
    let fits = fits_up_to.clamp(1, requested.max(1));
    let accum = requested.max(1).div_ceil(fits);
    (requested.max(1).div_ceil(accum), accum)
}

fn gib(bytes: u64) -> String {
    fmt_bytes(bytes.to_f64())
}

/// What a wrapper is, in a few words.
pub fn describe(w: Wrapper) -> &'static str {
    match w {
        Wrapper::Ddp => "DDP",
        Wrapper::Replicate => "replicate() (FSDP2, every GPU a whole copy)",
        Wrapper::FsdpNoReshard => {
            "fully_shard without resharding (ZeRO-2-like: gradients and optimizer states sharded)"
        }
        Wrapper::Hsdp => "HSDP (2 replicas, each sharded over half the GPUs)",
        Wrapper::Fsdp => "fully_shard (ZeRO-3: parameters, gradients and optimizer states sharded)",
    }
}

/// The recommendation where DDP does not fit one GPU: the plan's fit (or the GPUs `fsdp` needs),
/// its snippet, and why, each reason with the arithmetic it rests on.
pub fn sharded_answer(
    model: &ModelInput,
    plan: MemoryPlan,
    recipe: &Recipe,
    device: RunDevice,
) -> Recommendation {
    let m = &plan.model;
    let gpu = plan.gpu_bytes.unwrap_or(0);
    let ddp = plan.row(Wrapper::Ddp).map_or(0, |r| r.total_bytes);
    let requested = m.micro_batch;
    let (fit, gpus) = match (&plan.fit, &plan.fsdp_fits_at) {
        (Some(f), _) => (Some(at_kept_batch(m, f)), plan.gpus),
        (None, Some(f)) => (Some(at_kept_batch(m, f)), f.row.gpus),
        (None, None) => (None, plan.gpus),
    };
    let ddp_line = format!(
        "DDP does not fit: {} needs {} per GPU with DDP ({} of training state and parameter \
         copies, {} of activations at micro-batch {requested}); each GPU has {} ({:.0}% usable).",
        model.name(),
        gib(ddp),
        gib(ddp.saturating_sub(m.activations.bytes())),
        gib(m.activations.bytes()),
        gib(gpu),
        FIT_SHARE * 100.0
    );
    let (chosen, summary, python, accum, mb) = match &fit {
        Some(f) => {
            let (mb, accum) = (f.micro_batch, requested.div_ceil(f.micro_batch).max(1));
            let at = if gpus == plan.gpus {
                format!("at {gpus} GPUs")
            } else {
                format!("from {gpus} GPUs (not at {})", plan.gpus)
            };
            let summary = format!(
                "{ddp_line} Use {} {at}: {} per GPU{}{}. Its step time is not predicted: measure \
                 it with `ddpcheck bench ddp --variants {} --gpus {gpus} --micro-batch {mb}`.",
                describe(f.row.wrapper),
                gib(f.row.total_bytes),
                batch_words(requested, mb, accum),
                if f.checkpointing {
                    ", with every block checkpointed"
                } else {
                    ""
                },
                f.row.wrapper
            );
            let py = super::wrapper_snippet::fsdp2_snippet(
                f.row.wrapper,
                recipe.amp,
                accum,
                f.checkpointing,
                device,
            );
            (f.row.wrapper.to_string(), summary, py, accum, mb)
        }
        None => (
            "none fits".to_string(),
            format!(
                "{ddp_line} No wrapper fits up to {} GPUs of this memory, even at micro-batch 1 \
                 with every block checkpointed.",
                memory::MAX_FIT_GPUS
            ),
            "# nothing fits: see the memory table\n".to_string(),
            1,
            requested,
        ),
    };
    let mut reasons = vec![Reason {
        text: ddp_line,
        rests_on: memory_rests_on(m),
    }];
    if let Some(f) = &fit {
        reasons.push(fit_reason(f, mb));
    }
    Recommendation {
        model: model.name(),
        params: m.params,
        trainable_params: Some(m.trainable).filter(|t| *t != m.params),
        layout: None,
        gpus,
        micro_batch: mb,
        units_per_micro_batch: 0.0,
        throughput_unit: String::new(),
        target_efficiency: 0.0,
        compute: ComputeSource::Given {
            seconds: 0.0,
            detail: "not measured: DDP does not fit one GPU".into(),
        },
        compute_s: 0.0,
        curve: CurveSummary {
            ranks: gpus,
            alpha_us: 0.0,
            busbw_gbps: 0.0,
            busbw_at_bucket_gbps: 0.0,
            bucket_bytes: 0,
            largest_bytes: None,
            busbw_at_largest_gbps: None,
            provenance: "not measured: the answer rests on memory alone".into(),
        },
        overheads: Overheads::default(),
        backward_fraction: 0.0,
        overheads_source: String::new(),
        single_gpu: SingleGpu {
            step_s: 0.0,
            throughput: 0.0,
            cost_per_million: None,
        },
        rows: Vec::new(),
        chosen,
        chosen_hook: CommHook::None,
        chosen_accum: accum,
        reaches_target: false,
        use_one_gpu: false,
        answer: None,
        powersgd: None,
        model_check: None,
        device,
        reference: crate::ddp::Reference::Plain,
        ddp_over_plain: None,
        summary,
        reasons,
        warnings: Vec::new(),
        python,
        env: Vec::new(),
        memory: Some(plan),
        wrapper_step: None,
        wrapper_rows: Vec::new(),
    }
}

/// The fit at the micro-batch that keeps the requested batch ([`keep_batch`]), its row
/// predicted there.
fn at_kept_batch(m: &MemoryModel, f: &Fit) -> Fit {
    let (mb, _) = keep_batch(m.micro_batch, f.micro_batch);
    let at = m.at_micro_batch(mb);
    let model = if f.checkpointing {
        at.checkpointed().unwrap_or(at)
    } else {
        at
    };
    let mut row = memory::predict(&model, f.row.wrapper, f.row.gpus);
    row.fits = Some(true);
    Fit {
        row,
        micro_batch: mb,
        checkpointing: f.checkpointing,
    }
}

fn batch_words(requested: u32, mb: u32, accum: u32) -> String {
    let batch = mb * accum;
    if accum > 1 && batch == requested {
        format!(" at micro-batch {mb} with {accum} accumulation steps (the batch of {requested} per GPU kept)")
    } else if accum > 1 {
        format!(
            " at micro-batch {mb} with {accum} accumulation steps (a batch of {batch} per GPU \
             for the {requested} asked: retune the learning rate)"
        )
    } else {
        format!(" at micro-batch {mb}")
    }
}

/// What the prediction rests on: the bytes per parameter, and where the activations come from.
pub fn memory_rests_on(m: &MemoryModel) -> String {
    let words = |a: &ActivationSource| match a {
        ActivationSource::Measured { what, .. } => format!("measured: {what}"),
        ActivationSource::Estimated { how, .. } => format!("ESTIMATED: {how}"),
        ActivationSource::Unknown => "unknown, left out".into(),
    };
    let act = match &m.fsdp2_activations {
        Some(f) => format!(
            "DDP's activations {}; FSDP2's {}",
            words(&m.activations),
            words(f)
        ),
        None => format!("activations {}", words(&m.activations)),
    };
    let own: String = m
        .measured
        .iter()
        .map(|x| {
            format!(
                "; {}'s own activations {}",
                x.wrapper,
                words(&x.activations)
            )
        })
        .collect();
    let act = if m.measured.is_empty() {
        act
    } else {
        format!("{act} (where no wrapper measured its own){own}")
    };
    format!(
        "ddpcheck's memory model: fp32 parameters 4 B, fp32 gradients 4 B and AdamW's two fp32 \
         moments 8 B per parameter, divided by the shard group; the bf16 copies computed on; \
         {act}; the peak the larger of the backward's start (FSDP2's gradients freed) and its \
         end (every gradient, no activation); DDP {:.0} B per parameter more, as its launches \
         held (not identified); {:.0}% of the GPU usable (CUDA context, NCCL buffers, \
         fragmentation)",
        memory::DDP_UNIDENTIFIED_BYTES_PER_PARAM,
        FIT_SHARE * 100.0
    )
}

fn fit_reason(f: &Fit, mb: u32) -> Reason {
    let r = &f.row;
    Reason {
        text: format!(
            "{} at {} GPUs keeps {} per GPU: parameters {}, gradients {}, optimizer states {}, \
             parameters as computed {}, activations {} (micro-batch {mb}{}).",
            r.wrapper,
            r.gpus,
            gib(r.total_bytes),
            gib(r.params_bytes),
            gib(r.grads_bytes),
            gib(r.optimizer_bytes),
            gib(r.compute_bytes),
            gib(r.activations_bytes),
            if f.checkpointing {
                ", every block checkpointed"
            } else {
                ""
            }
        ),
        rests_on: format!(
            "the least sharding that fits, tried in the order {}",
            memory::FIT_ORDER.map(|w| w.as_str()).join(", ")
        ),
    }
}

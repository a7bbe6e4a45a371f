//! Memory first: what each data-parallel wrapper keeps on one GPU (parameters, gradients and
//! optimizer states, sharded as the wrapper shards them; the parameters it gathers to compute;
//! one micro-batch's activations), whether that fits the GPU, and the smallest sharding that
//! does where DDP does not. Pure arithmetic, before any launch.
//!
//! The bytes, per trainable parameter unless said (AdamW, as the benchmark trains):
//! - master parameters in fp32, 4; gradients in fp32, 4 (FSDP2's `reduce_dtype=float32`; DDP's
//!   buckets are views of them); AdamW's two moments in fp32, 8. DDP and `replicate()` keep all
//!   of them on every GPU; `fully_shard` (with or without resharding) divides them by its shard
//!   group, the world size; HSDP by its shard group, half the world ([`Wrapper::shard_group`]).
//! - the parameters as computed: under bf16 a 2-byte copy (autocast's casts for DDP, saved for
//!   backward; MixedPrecisionPolicy's unsharded parameters for FSDP2), in full precision none
//!   for DDP and a 4-byte gathered copy for FSDP2. DDP, `replicate()` and `fsdp-noreshard` hold
//!   every parameter's copy when backward starts; `fsdp` and `hsdp` the parameters outside the
//!   blocks (the root unit: embeddings, final norm) and the last block (prefetched).
//! - activations: [`activations`], in the dtypes each wrapper computes in (DDP under autocast
//!   keeps an fp32 residual stream and an fp32 loss; FSDP2's bf16 parameters keep neither).
//! - the peak: the larger of two moments of a step, the backward's start and its end
//!   ([`predict`]).
//!
//! Frozen parameters keep their fp32 weights only, unsharded by DDP and sharded by FSDP2.

pub mod activations;
pub mod check;
#[cfg(test)]
mod fixture_tests;
#[cfg(test)]
mod phase_fixture_tests;
pub mod phases;
mod predict;
pub mod slices;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

use crate::ddp::{Amp, ModelSpec, Wrapper};
use crate::num::{floor_u64, ToF64};
pub use activations::{decoder_activation_bytes, ActivationSource, Dtypes};
pub use phases::{with_phases, PhaseRun, WrapperActivations};
pub use predict::{
    activations_from_peak, predict, MemoryRow, Moment, DDP_UNIDENTIFIED_BYTES_PER_PARAM,
};

/// The share of a GPU's memory a prediction may fill: the rest is the CUDA context, NCCL's
/// buffers and the caching allocator's fragmentation, none of which `max_memory_allocated`
/// counts (an assumption, stated wherever a fit rests on it).
pub const FIT_SHARE: f64 = 0.9;

/// The most GPUs recommend looks for a fit at.
pub const MAX_FIT_GPUS: u32 = 1024;

/// The model as memory sees it, at one micro-batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryModel {
    pub params: u64,
    /// Parameters with a gradient and optimizer states; the rest are frozen.
    pub trainable: u64,
    /// The largest block a user wraps on its own (a decoder layer).
    pub largest_block: u64,
    /// The parameters outside the blocks (the root unit).
    pub root: u64,
    pub amp: Amp,
    pub micro_batch: u32,
    /// One micro-batch's activations under DDP (autocast, where the recipe has it).
    pub activations: ActivationSource,
    /// The same with every block checkpointed, where ddpcheck can say (decoders).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpointed_bytes: Option<u64>,
    /// One micro-batch's activations under FSDP2's wrappers (MixedPrecisionPolicy, no
    /// autocast), where they differ from DDP's; `None`: DDP's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fsdp2_activations: Option<ActivationSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fsdp2_checkpointed_bytes: Option<u64>,
    /// Activations a launch measured for one wrapper (its own step read at its phases,
    /// [`phases`]), each wrapper its own: they overrule the estimate for that wrapper alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measured: Vec<phases::WrapperActivations>,
    /// What backward allocates as it starts beyond what the forward kept, per sample: the
    /// loss's gradients ([`activations::backward_start_bytes_per_sample`]); 0 where unknown.
    #[serde(default)]
    pub backward_start_per_sample: u64,
}

impl MemoryModel {
    /// A model ddpcheck knows the shape of, its activations estimated for `micro_batch`; an
    /// `hf:llama,...` source counted as the decoder it builds ([`hf_shape`]).
    pub fn of_spec(spec: &ModelSpec, micro_batch: u32, amp: Amp) -> Self {
        let (ddp, fsdp2) = (
            Dtypes::of(Wrapper::Ddp, amp),
            Dtypes::of(Wrapper::Fsdp, amp),
        );
        let shaped = hf_shape(spec);
        let spec = shaped.as_ref().unwrap_or(spec);
        let params = spec.params();
        let (largest_block, root) = match spec.decoder_tensors() {
            Some(t) => {
                let block: u64 = t.block.iter().sum();
                (block, params.saturating_sub(t.layers * block))
            }
            None => {
                let largest = spec.mlp_layers().iter().map(|(i, o)| i * o + o).max();
                (largest.unwrap_or(params), 0)
            }
        };
        MemoryModel {
            params,
            trainable: params,
            largest_block,
            root,
            amp,
            micro_batch,
            activations: activations::estimate(spec, micro_batch, ddp),
            checkpointed_bytes: spec
                .decoder()
                .map(|d| activations::decoder_checkpointed_bytes(d, micro_batch, ddp)),
            fsdp2_activations: spec
                .decoder()
                .map(|_| activations::estimate(spec, micro_batch, fsdp2)),
            fsdp2_checkpointed_bytes: spec
                .decoder()
                .map(|d| activations::decoder_checkpointed_bytes(d, micro_batch, fsdp2)),
            measured: Vec::new(),
            backward_start_per_sample: activations::backward_start_bytes_per_sample(spec, amp),
        }
    }

    /// A model of `params` parameters whose shape ddpcheck does not know (one built by code):
    /// no blocks, activations unknown until a launch measures them.
    pub fn of_params(params: u64, micro_batch: u32, amp: Amp) -> Self {
        MemoryModel {
            params,
            trainable: params,
            largest_block: 0,
            root: 0,
            amp,
            micro_batch,
            activations: ActivationSource::Unknown,
            checkpointed_bytes: None,
            fsdp2_activations: None,
            fsdp2_checkpointed_bytes: None,
            measured: Vec::new(),
            backward_start_per_sample: 0,
        }
    }

    /// The activations `wrapper` keeps.
    pub fn activations_for(&self, wrapper: Wrapper) -> &ActivationSource {
        if let Some(m) = self.measured.iter().find(|m| m.wrapper == wrapper) {
            return &m.activations;
        }
        match (wrapper, &self.fsdp2_activations) {
            (Wrapper::Ddp, _) | (_, None) => &self.activations,
            (_, Some(a)) => a,
        }
    }

    /// The model with `wrapper`'s activations set to `a` (FSDP2's wrappers share theirs, where
    /// none measured its own).
    pub fn with_activations(&self, wrapper: Wrapper, a: ActivationSource) -> Self {
        let mut m = self.clone();
        m.measured.retain(|x| x.wrapper != wrapper);
        if wrapper == Wrapper::Ddp {
            m.activations = a;
        } else {
            m.fsdp2_activations = Some(a);
        }
        m
    }

    /// The model at another micro-batch: activations scale with it (every term of the estimate
    /// is linear in the batch; a measured figure is taken as such).
    pub fn at_micro_batch(&self, micro_batch: u32) -> Self {
        let ratio = f64::from(micro_batch) / f64::from(self.micro_batch.max(1));
        let scale = |b: u64| floor_u64(b.to_f64() * ratio);
        MemoryModel {
            micro_batch,
            activations: self.activations.scaled(ratio),
            checkpointed_bytes: self.checkpointed_bytes.map(scale),
            fsdp2_activations: self.fsdp2_activations.as_ref().map(|a| a.scaled(ratio)),
            fsdp2_checkpointed_bytes: self.fsdp2_checkpointed_bytes.map(scale),
            measured: self
                .measured
                .iter()
                .map(|x| x.at_micro_batch(micro_batch))
                .collect(),
            ..self.clone()
        }
    }

    /// The model with every block checkpointed; `None` where ddpcheck cannot say.
    pub fn checkpointed(&self) -> Option<Self> {
        let how = |bytes| ActivationSource::Estimated {
            bytes,
            how: "every block checkpointed: each keeps its input, one block at a time its \
                  activations"
                .into(),
        };
        Some(MemoryModel {
            activations: how(self.checkpointed_bytes?),
            checkpointed_bytes: None,
            fsdp2_activations: self.fsdp2_checkpointed_bytes.map(how),
            fsdp2_checkpointed_bytes: None,
            measured: Vec::new(),
            ..self.clone()
        })
    }
}

/// The decoder an `hf:llama,...` source builds, so that its memory is known before anything is
/// built (a 6.7B LLaMA took longer than a launch's import limit to build on a CPU); `None` for
/// every other spec.
pub fn hf_shape(spec: &ModelSpec) -> Option<ModelSpec> {
    let Some(crate::ddp::ModelSource::HuggingFace {
        model_type: Some(t),
        overrides,
        seq,
        ..
    }) = spec.source()
    else {
        return None;
    };
    crate::ddp::hf_llama_decoder(t, overrides, *seq).map(ModelSpec::Decoder)
}

/// The wrappers in the order recommend weighs them when memory decides: least sharding (and
/// least communication on one node) first. `fsdp-noreshard` moves what DDP moves (one
/// all-gather and one reduce-scatter of the parameters' bytes); HSDP and `fsdp` gather twice.
pub const FIT_ORDER: [Wrapper; 5] = [
    Wrapper::Ddp,
    Wrapper::Replicate,
    Wrapper::FsdpNoReshard,
    Wrapper::Hsdp,
    Wrapper::Fsdp,
];

/// The bytes a prediction may fill on a GPU of `gpu_bytes`.
pub fn usable_bytes(gpu_bytes: u64) -> u64 {
    floor_u64(gpu_bytes.to_f64() * FIT_SHARE)
}

/// What fits where DDP does not: the wrapper, at which micro-batch, and whether every block
/// must be checkpointed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    pub row: MemoryRow,
    pub micro_batch: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub checkpointing: bool,
}

/// Every wrapper at the job's GPU count against the GPU, and where DDP does not fit, the
/// least sharding that does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryPlan {
    /// Each GPU's memory, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_bytes: Option<u64>,
    pub gpus: u32,
    pub model: MemoryModel,
    /// Each wrapper that can run at `gpus` (HSDP from 4) at the requested micro-batch, in
    /// [`FIT_ORDER`].
    pub rows: Vec<MemoryRow>,
    /// Whether DDP (and so any replicating wrapper) fits one GPU; `None` without its memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ddp_fits: Option<bool>,
    /// Where DDP does not fit: the least sharding that fits at `gpus` GPUs, at the requested
    /// micro-batch where one does, else at the largest smaller one, else with every block
    /// checkpointed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit: Option<Fit>,
    /// Where nothing fits at `gpus`: `fsdp` on the fewest GPUs it fits at micro-batch 1 (every
    /// block checkpointed where it must be).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fsdp_fits_at: Option<Fit>,
}

/// The rows of `m` at `gpus`, judged against `usable` bytes.
fn rows_at(m: &MemoryModel, gpus: u32, usable: Option<u64>) -> Vec<MemoryRow> {
    FIT_ORDER
        .iter()
        .filter(|w| w.refuses(gpus).is_none())
        .map(|&w| {
            let mut row = predict(m, w, gpus);
            row.fits = usable.map(|u| row.total_bytes <= u);
            row
        })
        .collect()
}

/// The least sharding other than DDP that fits `m` at `gpus`.
fn first_sharded_fit(m: &MemoryModel, gpus: u32, usable: u64) -> Option<MemoryRow> {
    rows_at(m, gpus, Some(usable))
        .into_iter()
        .skip(1)
        .find(|r| r.fits == Some(true))
}

/// The least sharding that fits at the largest micro-batch up to the model's, plain or
/// checkpointed.
fn search_fit(m: &MemoryModel, gpus: u32, usable: u64) -> Option<Fit> {
    let variants = [Some(m.clone()), m.checkpointed()];
    for (checkpointing, model) in variants.iter().enumerate() {
        let Some(model) = model else { continue };
        for mb in (1..=m.micro_batch).rev() {
            if let Some(row) = first_sharded_fit(&model.at_micro_batch(mb), gpus, usable) {
                return Some(Fit {
                    row,
                    micro_batch: mb,
                    checkpointing: checkpointing == 1,
                });
            }
        }
    }
    None
}

/// `fsdp` at micro-batch 1 on the fewest GPUs from `gpus` on that it fits, plain or
/// checkpointed.
fn fewest_gpus(m: &MemoryModel, gpus: u32, usable: u64) -> Option<Fit> {
    let one = m.at_micro_batch(1);
    let variants = [Some(one.clone()), one.checkpointed()];
    variants
        .iter()
        .enumerate()
        .find_map(|(checkpointing, model)| {
            let model = model.as_ref()?;
            (gpus.max(1)..=MAX_FIT_GPUS).find_map(|n| {
                let row = predict(model, Wrapper::Fsdp, n);
                (row.total_bytes <= usable).then_some(Fit {
                    row: MemoryRow {
                        fits: Some(true),
                        ..row
                    },
                    micro_batch: 1,
                    checkpointing: checkpointing == 1,
                })
            })
        })
}

/// The plan for `m` at `gpus` GPUs of `gpu_bytes` each.
pub fn plan(m: &MemoryModel, gpus: u32, gpu_bytes: Option<u64>) -> MemoryPlan {
    let usable = gpu_bytes.map(usable_bytes);
    let rows = rows_at(m, gpus, usable);
    let ddp_fits = rows.first().and_then(|r| r.fits);
    let fit = match (ddp_fits, usable) {
        (Some(false), Some(u)) => search_fit(m, gpus, u),
        _ => None,
    };
    let fsdp_fits_at = match (ddp_fits, &fit, usable) {
        (Some(false), None, Some(u)) => fewest_gpus(m, gpus, u),
        _ => None,
    };
    MemoryPlan {
        gpu_bytes,
        gpus,
        model: m.clone(),
        rows,
        ddp_fits,
        fit,
        fsdp_fits_at,
    }
}

impl MemoryPlan {
    /// The row of `wrapper`, where it can run at the plan's GPU count.
    pub fn row(&self, wrapper: Wrapper) -> Option<&MemoryRow> {
        self.rows.iter().find(|r| r.wrapper == wrapper)
    }
}

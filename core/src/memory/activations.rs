//! Activation memory of one micro-batch: measured where a launch gave it, else counted tensor by
//! tensor for decoders: what a block of ddpcheck's decoder presets saves for backward, in the
//! dtypes its wrapper computes in ([`Dtypes`]), plus what the loss holds when backward starts.

use serde::{Deserialize, Serialize};

use crate::ddp::{Amp, Decoder, DecoderArch, ModelSpec, Wrapper};
use crate::num::{floor_u64, ToF64};

/// Where a prediction's activation bytes come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ActivationSource {
    /// A launch's peak less its predicted training state (`peak_bytes` on `what`).
    Measured { bytes: u64, what: String },
    /// Counted from the model's shape ([`decoder_activation_bytes`]).
    Estimated { bytes: u64, how: String },
    /// Neither: activations left out of the prediction (a model of unknown shape, not measured).
    Unknown,
}

impl ActivationSource {
    pub fn bytes(&self) -> u64 {
        match self {
            ActivationSource::Measured { bytes, .. }
            | ActivationSource::Estimated { bytes, .. } => *bytes,
            ActivationSource::Unknown => 0,
        }
    }

    /// The same source with its bytes scaled by `ratio` (another micro-batch, another depth).
    pub fn scaled(&self, ratio: f64) -> Self {
        let scale = |b: u64| floor_u64(b.to_f64() * ratio);
        match self {
            ActivationSource::Measured { bytes, what } => ActivationSource::Measured {
                bytes: scale(*bytes),
                what: what.clone(),
            },
            ActivationSource::Estimated { bytes, how } => ActivationSource::Estimated {
                bytes: scale(*bytes),
                how: how.clone(),
            },
            ActivationSource::Unknown => ActivationSource::Unknown,
        }
    }
}

/// Bytes per element of what a wrapper saves: the residual stream (embedding output and each
/// block's sums, which the norms save), what the matmuls take and give, and the loss.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dtypes {
    pub residual: f64,
    pub compute: f64,
    pub loss: f64,
}

impl Dtypes {
    /// DDP under 16-bit autocast keeps its fp32 weights: the embedding's output and every
    /// residual sum stay fp32, the matmuls' inputs and outputs are 16-bit casts, and
    /// `cross_entropy` (on autocast's fp32 list) runs in fp32. FSDP2's wrappers compute on
    /// MixedPrecisionPolicy's 16-bit parameters without autocast: everything is 16-bit, the loss
    /// too. In full precision everything is 4 bytes.
    pub fn of(wrapper: Wrapper, amp: Amp) -> Dtypes {
        let (residual, compute, loss) = match (wrapper, amp) {
            (_, Amp::None) => (4.0, 4.0, 4.0),
            (Wrapper::Ddp, _) => (4.0, 2.0, 4.0),
            _ => (2.0, 2.0, 2.0),
        };
        Dtypes {
            residual,
            compute,
            loss,
        }
    }

    fn words(self) -> String {
        let name = |b: f64| if b > 2.0 { "fp32" } else { "16-bit" };
        format!(
            "residual stream {}, matmuls {}, loss {}",
            name(self.residual),
            name(self.compute),
            name(self.loss)
        )
    }
}

/// Bytes one block saves for backward, per token. Both norms save their input (the residual
/// stream); the attention's linear saves its input; `scaled_dot_product_attention` (flash on
/// CUDA) saves q, k, v and its output, and the projection the output's contiguous copy; the MLP
/// saves its input and its hidden activations. For LLaMA with as many key/value heads as query
/// heads, `v` is a view of the qkv output, so that whole output stays, beside the rotated q and k;
/// with fewer, the repeated k and v are saved instead. The gated MLP keeps the gate-and-up output
/// (`2·ffn`), the SiLU output and the product; GPT-2's keeps the fc output and the GELU output.
/// The log-sum-exp of the attention is 4 bytes per head.
pub fn block_bytes_per_token(d: &Decoder, t: Dtypes) -> f64 {
    let h = f64::from(d.width);
    let heads = f64::from(d.heads.max(1));
    let kv = h / heads * f64::from(d.kv_heads.unwrap_or(d.heads));
    let f = f64::from(d.ffn.unwrap_or(4 * d.width));
    let (qkv, mlp) = match d.arch {
        DecoderArch::Llama if kv < h => (3.0 * h, 4.0 * f),
        DecoderArch::Llama => ((h + 2.0 * kv) + h + kv, 4.0 * f),
        DecoderArch::Gpt2 => (h + 2.0 * kv, 2.0 * f),
    };
    // ln1's output, the attention's output and its contiguous copy, ln2's output.
    let compute = h + qkv + 2.0 * h + h + mlp;
    2.0 * t.residual * h + t.compute * compute + 4.0 * heads
}

/// Bytes outside the blocks per token when backward starts: the final norm's input and output,
/// and the loss: its log-softmax output, the gradient the loss hands back and the gradient
/// log-softmax passes on, three `vocab`-wide tensors in the loss's dtype.
pub fn outside_bytes_per_token(d: &Decoder, t: Dtypes) -> f64 {
    let h = f64::from(d.width);
    (t.residual + t.compute) * h + 3.0 * t.loss * f64::from(d.vocab)
}

/// A decoder's activations for one micro-batch of `batch` sequences under `t`, bytes, and how
/// they were counted.
pub fn decoder_activation_bytes(d: &Decoder, batch: u32, t: Dtypes) -> (u64, String) {
    let tokens = f64::from(d.seq) * f64::from(batch);
    let body = f64::from(d.layers) * block_bytes_per_token(d, t);
    let bytes = floor_u64(tokens * (body + outside_bytes_per_token(d, t)));
    let how = format!(
        "{} layers × the tensors each block saves for backward ({:.0} bytes per token; {}), \
         plus the final norm and the loss when backward starts (3 × vocab per token)",
        d.layers,
        block_bytes_per_token(d, t),
        t.words()
    );
    (bytes, how)
}

/// A decoder's activations with every block checkpointed (`torch.utils.checkpoint` around each
/// block): each block keeps only its input, one block at a time holds its own in backward, on
/// top of what lies outside the blocks, bytes.
pub fn decoder_checkpointed_bytes(d: &Decoder, batch: u32, t: Dtypes) -> u64 {
    let tokens = f64::from(d.seq) * f64::from(batch);
    let kept = f64::from(d.layers) * t.residual * f64::from(d.width);
    floor_u64(tokens * (kept + block_bytes_per_token(d, t) + outside_bytes_per_token(d, t)))
}

/// The estimate for a model ddpcheck knows the shape of: decoders only (an MLP's activations
/// are small beside its state, a model built by code has no shape here).
pub fn estimate(spec: &ModelSpec, batch: u32, t: Dtypes) -> ActivationSource {
    match spec.decoder() {
        Some(d) => {
            let (bytes, how) = decoder_activation_bytes(d, batch, t);
            ActivationSource::Estimated { bytes, how }
        }
        None => ActivationSource::Unknown,
    }
}

/// What backward allocates as it starts beyond what the forward kept, per sample: the loss's
/// gradient, two vocab-wide tensors in the logits' dtype (16-bit under autocast and under
/// MixedPrecisionPolicy, 4 bytes in full precision). On one H100 every decoder run's peak in
/// backward was its allocation at the loss plus 4 bytes per token and vocabulary entry, under
/// DDP's autocast and FSDP2's bf16 alike (docs/results/2026-12-06-h100-fsdp2-memory-phases.md).
/// 0 for models without a vocabulary here (a classifier's gradient of its logits is small).
pub fn backward_start_bytes_per_sample(spec: &ModelSpec, amp: Amp) -> u64 {
    let logits = if amp == Amp::None { 4 } else { 2 };
    spec.decoder()
        .map_or(0, |d| 2 * logits * u64::from(d.seq) * u64::from(d.vocab))
}

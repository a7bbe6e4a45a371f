//! Activation memory of one micro-batch: measured where a launch gave it, else a stated estimate
//! for decoders after Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
//! Transformer Models" (arXiv:2205.05198), §4.1: per layer `s·b·h·(34 + 5·a·s/h)` bytes with
//! 16-bit activations and no recomputation.

use serde::{Deserialize, Serialize};

use crate::ddp::{Amp, Decoder, DecoderArch, ModelSpec};
use crate::num::ToF64;

/// Where a prediction's activation bytes come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ActivationSource {
    /// A launch's peak less its predicted training state (`peak_bytes` on `what`).
    Measured { bytes: u64, what: String },
    /// The formula below, for a decoder.
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
}

/// Bytes per activation element: 2 under bf16 or fp16 autocast, 4 in full precision.
fn element_bytes(amp: Amp) -> f64 {
    match amp {
        Amp::Bf16 | Amp::Fp16 => 2.0,
        Amp::None => 4.0,
    }
}

/// One layer's activations per Korthikanti et al. 2022 (§4.1, eq. 1), bytes:
/// `s·b·h·(34 + 5·a·s/h)` at 16 bits. `fused_attention` leaves out the `5·a·s²·b` term (attention
/// scores, softmax and its dropout mask), which a fused attention kernel (torch's
/// scaled_dot_product_attention, as the presets run it on torch >= 2.0) never stores.
pub fn korthikanti_layer_bytes(
    seq: u64,
    batch: u64,
    hidden: u64,
    heads: u64,
    fused_attention: bool,
) -> f64 {
    let (s, b, h, a) = (
        seq.to_f64(),
        batch.to_f64(),
        hidden.to_f64(),
        heads.to_f64(),
    );
    let scores = if fused_attention {
        0.0
    } else {
        5.0 * a * s / h
    };
    s * b * h * (34.0 + scores)
}

/// A decoder's activations for one micro-batch of `batch` sequences, bytes, and how they were
/// counted. Per layer [`korthikanti_layer_bytes`] (fused attention); a LLaMA block's gated MLP
/// keeps its input, the gate-and-up output, the SiLU output and the product, `2·h + 8·f` bytes
/// per token at 16 bits, where the formula counts GPT's 4h GELU MLP as `19·h`. On top: the
/// token embedding's output (`2·s·b·h`) and the logits through the loss (bf16 logits, their fp32
/// copy and fp32 log-softmax: `10·s·b·V`). Full precision doubles every 16-bit term.
pub fn decoder_activation_bytes(d: &Decoder, batch: u32, amp: Amp) -> (u64, String) {
    let (s, b, h) = (u64::from(d.seq), u64::from(batch), u64::from(d.width));
    let f = d.ffn.map_or(4 * h, u64::from).to_f64();
    let tokens = (s * b).to_f64();
    let mut layer = korthikanti_layer_bytes(s, b, h, u64::from(d.heads), true);
    if d.arch == DecoderArch::Llama {
        layer += tokens * (2.0 * h.to_f64() + 8.0 * f) - tokens * 19.0 * h.to_f64();
    }
    let scale = element_bytes(amp) / 2.0;
    let body = f64::from(d.layers) * layer + 2.0 * tokens * h.to_f64();
    let logits = 10.0 * tokens * f64::from(d.vocab);
    let bytes = crate::num::floor_u64(body * scale + logits);
    let how = format!(
        "{} layers × s·b·h·34 bytes (Korthikanti et al. 2022, no recomputation; attention fused, \
         so no 5·a·s²·b term{}), plus the embedding's output and the logits through the loss \
         (10·s·b·V){}",
        d.layers,
        if d.arch == DecoderArch::Llama {
            "; the gated MLP as 2·h + 8·ffn per token"
        } else {
            ""
        },
        if amp == Amp::None {
            "; full precision: twice the 16-bit terms"
        } else {
            ""
        }
    );
    (bytes, how)
}

/// A decoder's activations with every block checkpointed (`torch.utils.checkpoint` around each
/// block): each block keeps only its input (`2·s·b·h` at 16 bits) and one block at a time holds
/// its own in backward, on top of the embedding's output and the logits, bytes.
pub fn decoder_checkpointed_bytes(d: &Decoder, batch: u32, amp: Amp) -> u64 {
    let (full, _) = decoder_activation_bytes(d, batch, amp);
    let (s, b, h) = (u64::from(d.seq), u64::from(batch), u64::from(d.width));
    let tokens = (s * b).to_f64();
    let scale = element_bytes(amp) / 2.0;
    let logits = 10.0 * tokens * f64::from(d.vocab);
    let body = full.to_f64() - logits;
    let one_layer = (body / scale - 2.0 * tokens * h.to_f64()) / f64::from(d.layers.max(1));
    let kept = (f64::from(d.layers) + 1.0) * 2.0 * tokens * h.to_f64();
    crate::num::floor_u64((kept + one_layer) * scale + logits)
}

/// The estimate for a model ddpcheck knows the shape of: decoders only (an MLP's activations
/// are small beside its state, a model built by code has no shape here).
pub fn estimate(spec: &ModelSpec, batch: u32, amp: Amp) -> ActivationSource {
    match spec.decoder() {
        Some(d) => {
            let (bytes, how) = decoder_activation_bytes(d, batch, amp);
            ActivationSource::Estimated { bytes, how }
        }
        None => ActivationSource::Unknown,
    }
}

//! What a DDP benchmark runs: the models (presets and specs), the comm hooks, the variants
//! (hook, accumulation, buckets, FSDP) and which 1-GPU run each variant is judged against.

use std::fmt;
use std::str::FromStr;

use crate::num::ToF64;
use serde::{Deserialize, Serialize};

/// GPT-2's BPE vocabulary, used by the decoder presets.
pub const GPT2_VOCAB: u32 = 50257;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelSpec {
    /// A GPT-2-style decoder (tied embeddings, 4x MLP).
    Decoder {
        name: String,
        layers: u32,
        width: u32,
        heads: u32,
        seq: u32,
        vocab: u32,
    },
    /// A stack of square linear layers (the crossover experiment's model).
    Mlp { width: u32, depth: u32 },
}

impl ModelSpec {
    pub fn gpt2_124m() -> Self {
        ModelSpec::Decoder {
            name: "gpt2-124m".into(),
            layers: 12,
            width: 768,
            heads: 12,
            seq: 1024,
            vocab: GPT2_VOCAB,
        }
    }
    pub fn gpt2_355m() -> Self {
        ModelSpec::Decoder {
            name: "gpt2-355m".into(),
            layers: 24,
            width: 1024,
            heads: 16,
            seq: 1024,
            vocab: GPT2_VOCAB,
        }
    }

    pub fn name(&self) -> String {
        match self {
            ModelSpec::Decoder { name, .. } => name.clone(),
            ModelSpec::Mlp { width, depth } => format!("mlp:{width}x{depth}"),
        }
    }

    /// The spec as `FromStr` reads it back (`gpt2-124m`, `decoder:L,W,H,S,V`, `mlp:W,D`): how a
    /// model travels in the API and on command lines.
    pub fn to_arg(&self) -> String {
        match self {
            ModelSpec::Decoder { name, .. } if name == "gpt2-124m" || name == "gpt2-355m" => {
                name.clone()
            }
            ModelSpec::Decoder {
                layers,
                width,
                heads,
                seq,
                vocab,
                ..
            } => format!("decoder:{layers},{width},{heads},{seq},{vocab}"),
            ModelSpec::Mlp { width, depth } => format!("mlp:{width},{depth}"),
        }
    }

    /// Trainable parameters. Decoder: 12·L·W² (+ biases and norms) + vocab·W + seq·W.
    pub fn params(&self) -> u64 {
        match self {
            ModelSpec::Decoder {
                layers,
                width,
                seq,
                vocab,
                ..
            } => {
                let (l, w) = (u64::from(*layers), u64::from(*width));
                let per_layer = 12 * w * w + 13 * w; // qkv, proj, fc, fc-proj weights + biases + 2 norms
                l * per_layer + u64::from(*vocab) * w + u64::from(*seq) * w + 2 * w
            }
            ModelSpec::Mlp { width, depth } => {
                let w = u64::from(*width);
                u64::from(*depth) * (w * w + w)
            }
        }
    }

    /// Forward+backward FLOPs per sample (6·params per token for decoders, plus attention).
    pub fn train_flops_per_sample(&self) -> f64 {
        match self {
            ModelSpec::Decoder {
                layers, width, seq, ..
            } => {
                let tokens = f64::from(*seq);
                let attn = 12.0 * f64::from(*layers) * f64::from(*width) * tokens;
                (6.0 * self.params().to_f64() + attn) * tokens
            }
            ModelSpec::Mlp { .. } => 6.0 * self.params().to_f64(),
        }
    }

    /// Tokens per sample: the sequence for decoders; 1 for the MLP (throughput in samples/s).
    pub fn tokens_per_sample(&self) -> u32 {
        match self {
            ModelSpec::Decoder { seq, .. } => *seq,
            ModelSpec::Mlp { .. } => 1,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        match self {
            ModelSpec::Decoder {
                layers,
                width,
                heads,
                seq,
                vocab,
                ..
            } => {
                if !(1..=256).contains(layers) {
                    return Err(format!("layers {layers} outside 1..=256"));
                }
                if !(8..=32768).contains(width) || !(1..=256).contains(heads) || width % heads != 0
                {
                    return Err(format!("width {width} with {heads} heads: width must be 8..=32768 and divisible by heads (1..=256)"));
                }
                if !(8..=131072).contains(seq) || !(2..=1_000_000).contains(vocab) {
                    return Err(format!("sequence {seq} (8..=131072) or vocabulary {vocab} (2..=1000000) out of range"));
                }
            }
            ModelSpec::Mlp { width, depth } => {
                if !(8..=65536).contains(width) || !(1..=64).contains(depth) {
                    return Err(format!(
                        "MLP width {width} (8..=65536) or depth {depth} (1..=64) out of range"
                    ));
                }
            }
        }
        Ok(())
    }
}

impl FromStr for ModelSpec {
    type Err = String;
    /// `gpt2-124m`, `gpt2-355m`, `decoder:LAYERS,WIDTH,HEADS[,SEQ[,VOCAB]]`, `mlp:WIDTH[,DEPTH]`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let nums = |rest: &str| -> Result<Vec<u32>, String> {
            rest.split(',')
                .map(|p| {
                    p.trim()
                        .parse::<u32>()
                        .map_err(|_| format!("{p:?} is not a number in model {s:?}"))
                })
                .collect()
        };
        let spec = match s.to_ascii_lowercase().as_str() {
            "gpt2-124m" | "gpt2" => ModelSpec::gpt2_124m(),
            "gpt2-355m" | "gpt2-medium" => ModelSpec::gpt2_355m(),
            other => {
                if let Some(rest) = other.strip_prefix("mlp:") {
                    let v = nums(rest)?;
                    ModelSpec::Mlp {
                        width: *v.first().ok_or("mlp needs a width")?,
                        depth: v.get(1).copied().unwrap_or(4),
                    }
                } else if let Some(rest) = other.strip_prefix("decoder:") {
                    let v = nums(rest)?;
                    if v.len() < 3 {
                        return Err(
                            "decoder:LAYERS,WIDTH,HEADS[,SEQ[,VOCAB]] needs at least three numbers"
                                .into(),
                        );
                    }
                    ModelSpec::Decoder {
                        name: format!("decoder-{}x{}", v[0], v[1]),
                        layers: v[0],
                        width: v[1],
                        heads: v[2],
                        seq: v.get(3).copied().unwrap_or(1024),
                        vocab: v.get(4).copied().unwrap_or(GPT2_VOCAB),
                    }
                } else {
                    return Err(format!(
                        "unknown model {s:?}: expected gpt2-124m, gpt2-355m, decoder:LAYERS,WIDTH,HEADS[,SEQ[,VOCAB]] or mlp:WIDTH[,DEPTH]"
                    ));
                }
            }
        };
        spec.validate()?;
        Ok(spec)
    }
}

/// DDP communication hook for gradients.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommHook {
    #[default]
    None,
    Fp16,
    Bf16,
    PowerSgd,
}

impl CommHook {
    /// Bytes per gradient element on the wire.
    pub fn wire_bytes_per_param(self) -> f64 {
        match self {
            CommHook::None => 4.0,
            CommHook::Fp16 | CommHook::Bf16 => 2.0,
            // Rank-1 PowerSGD sends far less; treat as an estimate, it is never measured by the model.
            CommHook::PowerSgd => 0.5,
        }
    }
}

/// One way of running DDP: `base`, `bf16`, `fp16`, `powersgd`, `accum4`, `bucket50`, `fsdp`,
/// combined with `+` (`bf16+accum4`), and `nocomm`: DDP with every micro-batch under `no_sync`,
/// so N GPUs compute side by side with no gradient communication (the ceiling communication
/// cannot beat; the step-time model reads from it how much N processes slow each other).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DdpVariant {
    pub name: String,
    pub hook: CommHook,
    pub accum: u32,
    pub bucket_cap_mb: Option<f64>,
    pub gradient_as_bucket_view: bool,
    pub fsdp: bool,
    /// No gradient communication at all (`nocomm`).
    #[serde(default)]
    pub nocomm: bool,
    #[serde(default)]
    pub env: Vec<(String, String)>,
}

impl Default for DdpVariant {
    fn default() -> Self {
        DdpVariant {
            name: "base".into(),
            hook: CommHook::None,
            accum: 1,
            bucket_cap_mb: None,
            gradient_as_bucket_view: true,
            fsdp: false,
            nocomm: false,
            env: Vec::new(),
        }
    }
}

impl FromStr for DdpVariant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut v = DdpVariant {
            name: s.trim().to_string(),
            ..DdpVariant::default()
        };
        for part in s.trim().split('+') {
            let p = part.trim().to_ascii_lowercase();
            match p.as_str() {
                "base" | "baseline" | "none" => {}
                "bf16" => v.hook = CommHook::Bf16,
                "fp16" => v.hook = CommHook::Fp16,
                "powersgd" => v.hook = CommHook::PowerSgd,
                "fsdp" => v.fsdp = true,
                "nocomm" => v.nocomm = true,
                "nobucketview" => v.gradient_as_bucket_view = false,
                _ => {
                    if let Some(k) = p.strip_prefix("accum") {
                        let k: u32 = k.parse().map_err(|_| {
                            format!("{part:?}: accumulation needs a number, e.g. accum4")
                        })?;
                        if !(1..=1024).contains(&k) {
                            return Err(format!("{part:?}: accumulation must be 1..=1024"));
                        }
                        v.accum = k;
                    } else if let Some(mb) = p.strip_prefix("bucket") {
                        let mb: f64 = mb.parse().map_err(|_| {
                            format!("{part:?}: bucket size needs MB, e.g. bucket50")
                        })?;
                        if !(0.1..=4096.0).contains(&mb) {
                            return Err(format!("{part:?}: bucket_cap_mb must be 0.1..=4096"));
                        }
                        v.bucket_cap_mb = Some(mb);
                    } else {
                        return Err(format!(
                            "unknown variant part {part:?}: expected base, bf16, fp16, powersgd, accumN, bucketMB, fsdp, nocomm, nobucketview, joined with +"
                        ));
                    }
                }
            }
        }
        if v.fsdp && v.hook != CommHook::None {
            return Err(format!("{s:?}: FSDP takes no DDP comm hook"));
        }
        if v.nocomm && (v.fsdp || v.hook != CommHook::None) {
            return Err(format!(
                "{s:?}: nocomm sends no gradients, so it takes no comm hook and no FSDP"
            ));
        }
        Ok(v)
    }
}

impl DdpVariant {
    /// DDP as the step-time model models it, with this comm hook: gradients all-reduced in
    /// DDP's default buckets (not FSDP, not `nocomm`).
    pub fn plain_ddp_with(&self, hook: CommHook) -> bool {
        self.hook == hook && !self.fsdp && !self.nocomm && self.bucket_cap_mb.is_none()
    }
}

/// The variant whose 1-GPU run a variant's speedup is taken against: the same recipe without a
/// comm hook (`bf16+accum4` → `accum4`, `fp16` → `base`), and the variant itself otherwise. A
/// hook only changes what DDP sends between GPUs, and nobody trains on one GPU with it, yet DDP
/// runs its casts on one GPU too: against a 1-GPU run paying them, a hook whose casts cost what
/// it saves on the wire looked faster than it trains (on 2xH200, a small MLP's casts cost about
/// 1 ms a step). The seeds' reference is this one too: the same recipe on one GPU.
pub fn one_gpu_reference(variant: &str) -> String {
    // A part names a hook when the variant parser reads a hook from it: one vocabulary.
    let names_hook = |part: &str| {
        part.parse::<DdpVariant>()
            .is_ok_and(|v| v.hook != CommHook::None)
    };
    let hook_free: Vec<&str> = variant
        .split('+')
        .map(str::trim)
        .filter(|p| !names_hook(p))
        .collect();
    if hook_free.is_empty() {
        "base".into()
    } else {
        hook_free.join("+")
    }
}

impl fmt::Display for DdpVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

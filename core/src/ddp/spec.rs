//! What a DDP benchmark runs: the models (presets and specs), the comm hooks, the variants
//! (hook, accumulation, buckets, FSDP) and which 1-GPU run each variant is judged against.
//! A decoder's shape is `decoder`'s; a model's tensors are counted in `architecture`.

use std::fmt;
use std::str::FromStr;

use super::decoder::Decoder;
use super::model_error::ShapeError;
use super::source::ModelSource;
use super::wrapper::Wrapper;
use crate::num::ToF64;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelSpec {
    /// A decoder-only transformer (its fields flattened beside `kind`, as before it was a struct).
    Decoder(Decoder),
    /// `depth` square linear layers of `width` (the crossover experiment's model), with an
    /// input layer `input -> width` before them and an output layer `width -> output` after
    /// them when both are given.
    Mlp {
        width: u32,
        depth: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<u32>,
    },
    /// A model built by code on the node: the user's factory or a library's constructor. Its
    /// parameters are known once a launch reports them (`DdpResult::param_layout`).
    External { source: ModelSource },
}

impl ModelSpec {
    pub fn gpt2_124m() -> Self {
        ModelSpec::Decoder(Decoder::gpt2_124m())
    }
    pub fn gpt2_355m() -> Self {
        ModelSpec::Decoder(Decoder::gpt2_355m())
    }

    /// A GPT-2-style decoder (tied embeddings, 4x MLP, one key/value head per head).
    pub fn gpt2_style(
        name: &str,
        layers: u32,
        width: u32,
        heads: u32,
        seq: u32,
        vocab: u32,
    ) -> Self {
        ModelSpec::Decoder(Decoder::gpt2_style(name, layers, width, heads, seq, vocab))
    }

    /// How results name the model: the preset's or decoder's name, `mlp:WxD` or `mlp:IN->WxD->OUT`,
    /// a source's text form.
    pub fn name(&self) -> String {
        match self {
            ModelSpec::Decoder(d) => d.name.clone(),
            ModelSpec::Mlp {
                width,
                depth,
                input: Some(i),
                output: Some(o),
            } => format!("mlp:{i}->{width}x{depth}->{o}"),
            ModelSpec::Mlp { width, depth, .. } => format!("mlp:{width}x{depth}"),
            ModelSpec::External { source } => source.to_string(),
        }
    }

    /// The decoder, when the model is one.
    pub fn decoder(&self) -> Option<&Decoder> {
        match self {
            ModelSpec::Decoder(d) => Some(d),
            _ => None,
        }
    }

    /// `depth` square linear layers of `width`.
    pub fn square_mlp(width: u32, depth: u32) -> Self {
        ModelSpec::Mlp {
            width,
            depth,
            input: None,
            output: None,
        }
    }

    /// Forward+backward FLOPs per sample (6·params per token for decoders, plus attention; an
    /// untied input embedding is a lookup, not a matmul).
    pub fn train_flops_per_sample(&self) -> f64 {
        match self {
            ModelSpec::Decoder(d) => {
                let tokens = f64::from(d.seq);
                let attn = 12.0 * f64::from(d.layers) * f64::from(d.width) * tokens;
                let lookup = if d.untied {
                    f64::from(d.vocab) * f64::from(d.width)
                } else {
                    0.0
                };
                (6.0 * (self.params().to_f64() - lookup) + attn) * tokens
            }
            ModelSpec::Mlp { .. } => 6.0 * self.params().to_f64(),
            // Unknown until measured: its compute time comes from a launch, never from FLOPs.
            ModelSpec::External { .. } => 0.0,
        }
    }

    /// A model built by code: its source.
    pub fn source(&self) -> Option<&ModelSource> {
        match self {
            ModelSpec::External { source } => Some(source),
            _ => None,
        }
    }

    /// Tokens per sample: the sequence for decoders; 1 for the MLP (throughput in samples/s).
    pub fn tokens_per_sample(&self) -> u32 {
        match self {
            ModelSpec::Decoder(d) => d.seq,
            ModelSpec::Mlp { .. } => 1,
            ModelSpec::External { source } => source.tokens_per_sample(),
        }
    }

    pub fn validate(&self) -> Result<(), ShapeError> {
        match self {
            ModelSpec::Decoder(d) => d.validate(),
            ModelSpec::External { source } => Ok(source.validate()?),
            ModelSpec::Mlp {
                width,
                depth,
                input,
                output,
            } => {
                if !(8..=65536).contains(width) || !(1..=64).contains(depth) {
                    return Err(ShapeError::MlpSize {
                        width: *width,
                        depth: *depth,
                    });
                }
                match (input, output) {
                    (None, None) => Ok(()),
                    (Some(i), Some(o))
                        if (1..=1_048_576).contains(i) && (1..=1_048_576).contains(o) =>
                    {
                        Ok(())
                    }
                    (Some(i), Some(o)) => Err(ShapeError::MlpInOut {
                        input: *i,
                        output: *o,
                    }),
                    _ => Err(ShapeError::MlpInOutPair),
                }
            }
        }
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
    /// Bytes per gradient element a casting hook sends (fp16 and bf16: 2); `None` for no hook
    /// (the gradients' own dtype) and for PowerSGD, whose bytes follow from the gradients'
    /// shapes and its rank (`crate::step_time::powersgd`).
    pub fn cast_bytes_per_param(self) -> Option<f64> {
        match self {
            CommHook::Fp16 | CommHook::Bf16 => Some(2.0),
            CommHook::None | CommHook::PowerSgd => None,
        }
    }
}

/// PowerSGD's rank when a variant names none (`powersgd`): `PowerSGDState`'s default
/// `matrix_approximation_rank`.
pub const POWERSGD_DEFAULT_RANK: u32 = 1;
/// The largest PowerSGD rank a variant may name (`powersgdN`).
pub const POWERSGD_MAX_RANK: u32 = 256;

/// One way of running DDP: `base`, `bf16`, `fp16`, `powersgd` (PowerSGD at rank
/// [`POWERSGD_DEFAULT_RANK`]; `powersgd4` at rank 4), `accum4`, `bucket50`, a wrapper other than
/// DDP (`replicate`, `fsdp`, `fsdp-noreshard`, `hsdp`: [`Wrapper`]), combined with `+`
/// (`bf16+accum4`), and `nocomm`: DDP with every micro-batch under `no_sync`,
/// so N GPUs compute side by side with no gradient communication (the ceiling communication
/// cannot beat; the step-time model reads from it how much N processes slow each other).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DdpVariant {
    pub name: String,
    pub hook: CommHook,
    pub accum: u32,
    pub bucket_cap_mb: Option<f64>,
    pub gradient_as_bucket_view: bool,
    /// Trained under an FSDP2-based wrapper (any but DDP: see `wrapper`).
    pub fsdp: bool,
    /// The wrapper: DDP, or `replicate`, `fsdp`, `fsdp-noreshard`, `hsdp` (FSDP2).
    #[serde(default, skip_serializing_if = "is_ddp")]
    pub wrapper: Wrapper,
    /// No gradient communication at all (`nocomm`).
    #[serde(default)]
    pub nocomm: bool,
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// PowerSGD's `matrix_approximation_rank` where the name gives one (`powersgd4`);
    /// see [`DdpVariant::powersgd_rank`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub powersgd_rank: Option<u32>,
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
            wrapper: Wrapper::Ddp,
            nocomm: false,
            env: Vec::new(),
            powersgd_rank: None,
        }
    }
}

fn is_ddp(w: &Wrapper) -> bool {
    *w == Wrapper::Ddp
}

/// Why a variant (its text, or the API's fields) names nothing the benchmark runs: a part
/// unknown or out of its bounds, or parts that cannot run together. Each names the part or the
/// variant refused, as its text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VariantError {
    #[error("{0:?}: one wrapper per variant")]
    TwoWrappers(String),
    #[error("{0:?}: accumulation needs a number, e.g. accum4")]
    AccumNumber(String),
    #[error("{0:?}: accumulation must be 1..=1024")]
    AccumRange(String),
    #[error("{0:?}: PowerSGD's rank needs a number, e.g. powersgd4")]
    RankNumber(String),
    #[error("{0:?}: PowerSGD's rank must be 1..={POWERSGD_MAX_RANK}")]
    RankRange(String),
    #[error("{0:?}: bucket size needs MB, e.g. bucket50")]
    BucketNumber(String),
    #[error("{0:?}: bucket_cap_mb must be 0.1..=4096")]
    BucketRange(String),
    #[error("unknown variant part {0:?}: expected base, bf16, fp16, powersgd, powersgdN, accumN, bucketMB, replicate, fsdp, fsdp-noreshard, hsdp, nocomm, nobucketview, joined with +")]
    UnknownPart(String),
    #[error("{0:?}: a PowerSGD rank without the PowerSGD hook")]
    RankWithoutHook(String),
    #[error("{name:?}: {wrapper} is FSDP2's and takes no DDP comm hook")]
    HookOnFsdp { name: String, wrapper: Wrapper },
    #[error("{0:?}: nocomm sends no gradients, so it takes no comm hook and no FSDP")]
    NocommWith(String),
}

/// Gradient accumulation's bounds, 1..=1024; `what` is the part or variant refused.
fn accum_in_bounds(what: &str, k: u32) -> Result<(), VariantError> {
    if (1..=1024).contains(&k) {
        Ok(())
    } else {
        Err(VariantError::AccumRange(what.to_string()))
    }
}

/// PowerSGD's rank bounds, 1..=[`POWERSGD_MAX_RANK`].
fn rank_in_bounds(what: &str, r: u32) -> Result<(), VariantError> {
    if (1..=POWERSGD_MAX_RANK).contains(&r) {
        Ok(())
    } else {
        Err(VariantError::RankRange(what.to_string()))
    }
}

/// DDP's `bucket_cap_mb` bounds, 0.1..=4096 MB.
fn bucket_in_bounds(what: &str, mb: f64) -> Result<(), VariantError> {
    if mb.is_finite() && (0.1..=4096.0).contains(&mb) {
        Ok(())
    } else {
        Err(VariantError::BucketRange(what.to_string()))
    }
}

impl FromStr for DdpVariant {
    type Err = VariantError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut v = DdpVariant::default();
        let mut wrapper_named = false;
        for part in s.trim().split('+') {
            let p = part.trim().to_ascii_lowercase();
            match p.as_str() {
                "base" | "baseline" | "none" => {}
                "bf16" => v.hook = CommHook::Bf16,
                "fp16" => v.hook = CommHook::Fp16,
                "powersgd" => v.hook = CommHook::PowerSgd,
                "ddp" => {}
                "nocomm" => v.nocomm = true,
                "nobucketview" => v.gradient_as_bucket_view = false,
                _ => {
                    if let Some(w) = Wrapper::from_part(&p) {
                        if wrapper_named && v.wrapper != w {
                            return Err(VariantError::TwoWrappers(s.to_string()));
                        }
                        v.wrapper = w;
                        wrapper_named = true;
                    } else if let Some(k) = p.strip_prefix("accum") {
                        v.accum = k
                            .parse()
                            .map_err(|_| VariantError::AccumNumber(part.to_string()))?;
                        accum_in_bounds(part, v.accum)?;
                    } else if let Some(r) = p.strip_prefix("powersgd") {
                        let r: u32 = r
                            .parse()
                            .map_err(|_| VariantError::RankNumber(part.to_string()))?;
                        rank_in_bounds(part, r)?;
                        v.hook = CommHook::PowerSgd;
                        v.powersgd_rank = Some(r);
                    } else if let Some(mb) = p.strip_prefix("bucket") {
                        let mb: f64 = mb
                            .parse()
                            .map_err(|_| VariantError::BucketNumber(part.to_string()))?;
                        bucket_in_bounds(part, mb)?;
                        v.bucket_cap_mb = Some(mb);
                    } else {
                        return Err(VariantError::UnknownPart(part.to_string()));
                    }
                }
            }
        }
        v.checked()
    }
}

impl DdpVariant {
    /// The variant with its derived fields set from its parts (`fsdp` from the wrapper, `name`
    /// spelled from the parts, [`DdpVariant::spelled`]), or why its parts cannot run together
    /// or lie out of bounds. The text form and the API's fields both end here: one set of rules.
    pub fn checked(mut self) -> Result<Self, VariantError> {
        self.wrapper = self.wrapper();
        self.fsdp = self.wrapper.is_fsdp2();
        self.name = self.spelled();
        let name = &self.name;
        accum_in_bounds(name, self.accum)?;
        if let Some(r) = self.powersgd_rank {
            if self.hook != CommHook::PowerSgd {
                return Err(VariantError::RankWithoutHook(name.clone()));
            }
            rank_in_bounds(name, r)?;
        }
        if let Some(mb) = self.bucket_cap_mb {
            bucket_in_bounds(name, mb)?;
        }
        if self.fsdp && self.hook != CommHook::None {
            return Err(VariantError::HookOnFsdp {
                name: name.clone(),
                wrapper: self.wrapper,
            });
        }
        if self.nocomm && (self.fsdp || self.hook != CommHook::None) {
            return Err(VariantError::NocommWith(name.clone()));
        }
        Ok(self)
    }

    /// The variant's text form from its parts, in one order: the wrapper, `nocomm`, the hook,
    /// `accumN`, `bucketMB`, `nobucketview`, joined with `+`; `base` where there are none.
    pub fn spelled(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if self.wrapper().is_fsdp2() {
            parts.push(self.wrapper().as_str().into());
        }
        if self.nocomm {
            parts.push("nocomm".into());
        }
        match (self.hook, self.powersgd_rank) {
            (CommHook::None, _) => {}
            (CommHook::Bf16, _) => parts.push("bf16".into()),
            (CommHook::Fp16, _) => parts.push("fp16".into()),
            (CommHook::PowerSgd, None) => parts.push("powersgd".into()),
            (CommHook::PowerSgd, Some(r)) => parts.push(format!("powersgd{r}")),
        }
        if self.accum != 1 {
            parts.push(format!("accum{}", self.accum));
        }
        if let Some(mb) = self.bucket_cap_mb {
            parts.push(format!("bucket{mb}"));
        }
        if !self.gradient_as_bucket_view {
            parts.push("nobucketview".into());
        }
        if parts.is_empty() {
            "base".into()
        } else {
            parts.join("+")
        }
    }

    /// The same recipe without its comm hook, under the same environment: the run its 1-GPU
    /// speedup is taken against ([`one_gpu_reference`]).
    pub fn without_hook(&self) -> DdpVariant {
        let bare = DdpVariant {
            hook: CommHook::None,
            powersgd_rank: None,
            ..self.clone()
        };
        DdpVariant {
            name: bare.spelled(),
            ..bare
        }
    }

    /// The wrapper the variant trains under; a variant stored before wrappers were named
    /// (`fsdp` set, no `wrapper`) is `fully_shard`.
    pub fn wrapper(&self) -> Wrapper {
        match self.wrapper {
            Wrapper::Ddp if self.fsdp => Wrapper::Fsdp,
            w => w,
        }
    }

    /// PowerSGD's rank: the one the name gives, else [`POWERSGD_DEFAULT_RANK`].
    pub fn powersgd_rank(&self) -> u32 {
        self.powersgd_rank.unwrap_or(POWERSGD_DEFAULT_RANK)
    }

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

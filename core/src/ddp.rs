//! DDP benchmark vocabulary: models, variants (hook, accumulation, buckets, FSDP), results and
//! the scaling arithmetic (speedup, efficiency, exposed communication, cost) shared by all backends.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::collective::Sweep;

/// GPT-2's BPE vocabulary, used by the decoder presets.
pub const GPT2_VOCAB: u64 = 50257;

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
            vocab: GPT2_VOCAB as u32,
        }
    }
    pub fn gpt2_355m() -> Self {
        ModelSpec::Decoder {
            name: "gpt2-355m".into(),
            layers: 24,
            width: 1024,
            heads: 16,
            seq: 1024,
            vocab: GPT2_VOCAB as u32,
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
                (6.0 * self.params() as f64 + attn) * tokens
            }
            ModelSpec::Mlp { .. } => 6.0 * self.params() as f64,
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
                        vocab: v.get(4).copied().unwrap_or(GPT2_VOCAB as u32),
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

/// A DDP benchmark to run: every variant at every world size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DdpRequest {
    pub models: Vec<ModelSpec>,
    pub variants: Vec<DdpVariant>,
    pub world_sizes: Vec<u32>,
    pub micro_batch: u32,
    pub warmup_steps: u32,
    pub steps: u32,
    /// Price of one GPU-hour, for cost per million tokens.
    pub price_per_gpu_hour: Option<f64>,
    /// Extra NCCL_* variables for every run (the regime).
    #[serde(default)]
    pub env: Vec<(String, String)>,
    pub deadline_s: f64,
    /// Launches of each configuration; the result is their median (one launch of the same
    /// command can land several percent away from the next, see [`merge_repeats`]).
    #[serde(default = "one_launch")]
    pub repeats: u32,
}

fn one_launch() -> u32 {
    1
}

/// Most launches of one configuration a request may ask for.
pub const MAX_REPEATS: u32 = 20;

/// Variants one request may hold.
const MAX_VARIANTS: usize = 32;

impl DdpRequest {
    /// The request with, for every hooked variant measured on one GPU, its
    /// [`one_gpu_reference`] added where missing (under the hooked variant's environment), so
    /// its speedup has its reference. The added variant runs at every GPU count, in the same
    /// launches. Never beyond the variants a request may hold (`MAX_VARIANTS`).
    pub fn with_one_gpu_references(mut self) -> Self {
        if !self.world_sizes.contains(&1) {
            return self;
        }
        let mut added = Vec::new();
        for v in &self.variants {
            let name = one_gpu_reference(&v.name);
            let present = |list: &[DdpVariant]| list.iter().any(|x| x.name == name);
            if name == v.name || present(&self.variants) || present(&added) {
                continue;
            }
            if let Ok(mut reference) = name.parse::<DdpVariant>() {
                reference.env = v.env.clone();
                added.push(reference);
            }
        }
        let room = MAX_VARIANTS.saturating_sub(self.variants.len());
        self.variants.extend(added.into_iter().take(room));
        self
    }

    /// Bounds every field before any work (a request may come from the outside world); every
    /// backend and the engine use this one check.
    pub fn validate(&self, gpus_on_node: usize) -> Result<(), crate::ProbeError> {
        let bad = |m: String| Err(crate::ProbeError::Invalid(m));
        if self.models.is_empty() || self.variants.is_empty() || self.world_sizes.is_empty() {
            return bad("a DDP benchmark needs at least one model, variant and GPU count".into());
        }
        if self.models.len() > 16
            || self.variants.len() > MAX_VARIANTS
            || self.world_sizes.len() > 16
        {
            return bad("too many models (16), variants (32) or GPU counts (16)".into());
        }
        for m in &self.models {
            m.validate().map_err(crate::ProbeError::Invalid)?;
        }
        for v in &self.variants {
            if !(1..=1024).contains(&v.accum) {
                return bad(format!("variant {}: accumulation must be 1..=1024", v.name));
            }
            if let Some(mb) = v.bucket_cap_mb {
                if !(mb.is_finite() && (0.1..=4096.0).contains(&mb)) {
                    return bad(format!(
                        "variant {}: bucket_cap_mb must be 0.1..=4096",
                        v.name
                    ));
                }
            }
            if v.fsdp && v.hook != CommHook::None {
                return bad(format!("variant {}: FSDP takes no DDP comm hook", v.name));
            }
        }
        for &n in &self.world_sizes {
            if n == 0 || n as usize > gpus_on_node {
                let plural = if gpus_on_node == 1 { "" } else { "s" };
                return bad(format!(
                    "GPU count {n} outside 1..={gpus_on_node} (this node has {gpus_on_node} \
                     GPU{plural})"
                ));
            }
        }
        if !(1..=4096).contains(&self.micro_batch) {
            return bad(format!("micro-batch {} outside 1..=4096", self.micro_batch));
        }
        if !(1..=10_000).contains(&self.steps) || self.warmup_steps > 10_000 {
            return bad(format!(
                "steps {} (warm-up {}) outside 1..=10000",
                self.steps, self.warmup_steps
            ));
        }
        if !(1..=MAX_REPEATS).contains(&self.repeats) {
            return bad(format!(
                "repeats {} outside 1..={MAX_REPEATS}",
                self.repeats
            ));
        }
        if !(self.deadline_s.is_finite() && self.deadline_s > 0.0 && self.deadline_s <= 86_400.0) {
            return bad(format!("deadline {} s outside (0, 86400]", self.deadline_s));
        }
        if let Some(p) = self.price_per_gpu_hour {
            if !(0.0..10_000.0).contains(&p) {
                return bad(format!("price {p} per GPU-hour is not a sensible number"));
            }
        }
        let env = self
            .env
            .iter()
            .chain(self.variants.iter().flat_map(|v| v.env.iter()));
        for (k, _) in env {
            if !(k.starts_with("NCCL_") || k.starts_with("CUDA_")) {
                return bad(format!(
                    "environment override {k:?} is not an NCCL_* or CUDA_* variable"
                ));
            }
        }
        Ok(())
    }
}

/// One measured (or simulated) configuration. `Default` leaves what is derived from several runs
/// (speedup, efficiency, launches, uncertainty) empty, for [`merge_repeats`] and [`fill_scaling`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DdpResult {
    pub model: String,
    pub params: u64,
    pub variant: String,
    pub world_size: u32,
    pub micro_batch: u32,
    pub accum: u32,
    /// Median and 90th-percentile optimizer-step time, seconds.
    pub step_time_median_s: f64,
    pub step_time_p90_s: f64,
    /// Tokens/s (decoders) or samples/s (MLP) over all GPUs.
    pub throughput: f64,
    pub throughput_unit: String,
    /// Against one GPU of the same model and variant without its comm hook
    /// ([`one_gpu_reference`]); filled by [`fill_scaling`].
    pub speedup: Option<f64>,
    pub efficiency: Option<f64>,
    /// (step_N − step_1) / step_N for the same recipe: the part of a step that is communication
    /// and synchronisation not hidden behind compute (weak scaling keeps per-GPU work fixed).
    pub exposed_comm_fraction: Option<f64>,
    pub cost_per_million: Option<f64>,
    /// With repeated launches: each launch's median step time, in launch order (the result's
    /// step time is their median). Empty for a single launch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub launch_step_medians_s: Vec<f64>,
    /// With repeated launches at 1 and N GPUs: the relative standard error of `speedup`, from
    /// how far the launches of both sides spread ([`speedup_uncertainty`]). Filled by
    /// [`fill_scaling`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup_uncertainty: Option<f64>,
    /// With repeated launches at 1 and N GPUs: how far, relative, the speedup may move by launch
    /// noise alone ([`speedup_noise_bound`]: Student's t for the launches' degrees of freedom
    /// times `speedup_uncertainty`, at least twice it). Filled by [`fill_scaling`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup_noise_bound: Option<f64>,
    /// On more than one GPU: all-reduces of [`ALL_REDUCE_PROBE_BYTES`] timed alone in the run's
    /// own process group seconds before its steps (the median over launches when repeated).
    /// The network as this run's NCCL saw it; over the host network it moved −16% to +37%
    /// against a `bench collectives` sweep run minutes before (docs/results/h200x2-session7.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_reduce_probe: Option<Sweep>,
    /// A `nocomm` run on more than one GPU: the median step of one GPU alone inside the same
    /// launch (rank 0 stepping while the other ranks wait idle, in rounds alternating with all
    /// ranks together), the reference N side by side is measured against where the launch's own
    /// speed cancels ([`DdpResult::solo_slowdown`]). The median over launches when repeated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solo_step_time_median_s: Option<f64>,
    /// With repeated launches: each launch's `solo_step_time_median_s`, in the order of
    /// `launch_step_medians_s`. Empty unless every launch had one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub launch_solo_step_medians_s: Vec<f64>,
}

/// N processes side by side against one alone, measured inside the same launches
/// ([`DdpResult::solo_slowdown`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SoloSlowdown {
    /// The N-GPU step over the one-GPU-alone step: the median over launches of each launch's
    /// ratio.
    pub ratio: f64,
    /// How far ln(ratio) may move by launch noise alone ([`noise_bound`] of its relative
    /// standard error, n − 1 degrees of freedom); `None` for a single launch.
    pub noise_bound: Option<f64>,
}

/// The sizes (bytes per rank) a multi-GPU DDP run all-reduces alone before its steps: 4 KiB for
/// the per-call latency up to 64 MiB, past DDP's 25 MiB buckets, doubling from 1 MiB where a
/// bucket's time is mostly bandwidth. Larger sizes read the last point's bandwidth.
pub const ALL_REDUCE_PROBE_BYTES: [u64; 11] = [
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    2 << 20,
    4 << 20,
    8 << 20,
    16 << 20,
    32 << 20,
    64 << 20,
];

/// The all-reduce curve the runs at `world` GPUs timed in their own process group before their
/// steps: the median of their probes at each size, and how many runs had one.
pub fn probe_curve(results: &[DdpResult], world: u32) -> Option<(Sweep, usize)> {
    let probes: Vec<&Sweep> = results
        .iter()
        .filter(|r| r.world_size == world)
        .filter_map(|r| r.all_reduce_probe.as_ref())
        .collect();
    Some((Sweep::median_of(&probes)?, probes.len()))
}

impl DdpResult {
    /// (slowest − fastest) / median of the launches' step times; `None` for a single launch.
    pub fn launch_spread(&self) -> Option<f64> {
        if self.step_time_median_s <= 0.0 {
            return None;
        }
        let (lo, hi) = self.launch_range()?;
        Some((hi - lo) / self.step_time_median_s)
    }

    /// The sample standard deviation of ln(step time) over the launches: how far one launch
    /// lands from the next, as a fraction. `None` for fewer than two launches.
    pub fn launch_log_sd(&self) -> Option<f64> {
        let logs: Vec<f64> = self
            .launch_step_medians_s
            .iter()
            .filter(|x| x.is_finite() && **x > 0.0)
            .map(|x| x.ln())
            .collect();
        if logs.len() != self.launch_step_medians_s.len() {
            return None;
        }
        sample_sd(&logs)
    }

    /// A `nocomm` run's slowdown against one GPU alone in the same launches, from
    /// `solo_step_time_median_s` (and each launch's, when repeated); `None` without it. Paired
    /// within each launch, the launch's own speed cancels: on 2×H200 launches of the same MLP
    /// step spread 10–15%, more than the slowdown of two processes side by side (7–15%,
    /// docs/results/h200x2-session10.md), which comparing separate launches could not show.
    pub fn solo_slowdown(&self) -> Option<SoloSlowdown> {
        let positive = |x: f64| x.is_finite() && x > 0.0;
        let (l, s) = (
            &self.launch_step_medians_s,
            &self.launch_solo_step_medians_s,
        );
        if l.len() > 1 && l.len() == s.len() {
            let logs: Option<Vec<f64>> = l
                .iter()
                .zip(s)
                .map(|(&n, &one)| (positive(n) && positive(one)).then(|| (n / one).ln()))
                .collect();
            let p = paired_log_ratio(&logs?)?;
            return Some(SoloSlowdown {
                ratio: p.median.exp(),
                noise_bound: Some(p.noise_bound),
            });
        }
        let one = self.solo_step_time_median_s.filter(|x| positive(*x))?;
        positive(self.step_time_median_s).then(|| SoloSlowdown {
            ratio: self.step_time_median_s / one,
            noise_bound: None,
        })
    }

    /// The fastest and the slowest launch's step time; `None` for a single launch.
    pub fn launch_range(&self) -> Option<(f64, f64)> {
        let l = &self.launch_step_medians_s;
        (l.len() > 1).then(|| {
            l.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &x| {
                (lo.min(x), hi.max(x))
            })
        })
    }
}

/// Folds repeated launches of one configuration (model, variant, GPU count, micro-batch,
/// accumulation) into one result: the median of the launches' median step times (throughput
/// scaled to it), the median of their p90s, and every launch's median kept in
/// `launch_step_medians_s`. A launch of a command moves as a whole (on 2xH200 the same gpt2-124m
/// launch ran at ~40.2 or ~42.5 ms a step for its whole length, docs/results), so repeating the
/// launch, not the steps, is what steadies the figure. Order: first appearance.
pub fn merge_repeats(results: Vec<DdpResult>) -> Vec<DdpResult> {
    fn key(r: &DdpResult) -> (&str, &str, u32, u32, u32) {
        (&r.model, &r.variant, r.world_size, r.micro_batch, r.accum)
    }
    let mut groups: Vec<Vec<DdpResult>> = Vec::new();
    for r in results {
        match groups.iter_mut().find(|g| key(&g[0]) == key(&r)) {
            Some(g) => g.push(r),
            None => groups.push(vec![r]),
        }
    }
    groups
        .into_iter()
        .map(|mut g| {
            if g.len() == 1 {
                return g.remove(0);
            }
            let steps: Vec<f64> = g.iter().map(|r| r.step_time_median_s).collect();
            let p90s: Vec<f64> = g.iter().map(|r| r.step_time_p90_s).collect();
            // One GPU alone in each launch (nocomm on N GPUs): kept only if every launch had it.
            let solos: Vec<f64> = g.iter().map_while(|r| r.solo_step_time_median_s).collect();
            let solos = if solos.len() == g.len() {
                solos
            } else {
                Vec::new()
            };
            // One configuration, so one GPU count: its launches' probes, folded.
            let probe = probe_curve(&g, g[0].world_size).map(|(sweep, _)| sweep);
            let first = g.remove(0);
            // Runners report finite steps; a launch without one does not move the figure.
            let step = crate::expect::median(&steps).unwrap_or(first.step_time_median_s);
            let p90 = crate::expect::median(&p90s).unwrap_or(first.step_time_p90_s);
            // Throughput is work per step over the step time; the work is the same each launch.
            let throughput = if step > 0.0 {
                first.throughput * first.step_time_median_s / step
            } else {
                first.throughput
            };
            DdpResult {
                step_time_median_s: step,
                step_time_p90_s: p90,
                throughput,
                launch_step_medians_s: steps,
                speedup_uncertainty: None,
                all_reduce_probe: probe,
                solo_step_time_median_s: crate::expect::median(&solos),
                launch_solo_step_medians_s: solos,
                ..first
            }
        })
        .collect()
}

/// How uncertain a speedup measured from repeated launches is: its relative standard error,
/// `√(π/2)·√(σ₁²/n₁ + σ_N²/n_N)`, where σ is each side's [`DdpResult::launch_log_sd`] and n its
/// number of launches (a median's standard error is about √(π/2) times the mean's). `None`
/// unless both sides were launched at least twice.
///
/// Why it matters: on the shared 2xH200 VMs, launches of a 2 ms MLP step spread σ ≈ 0.1, so a
/// speedup from one launch each is uncertain by about ±14%, from five launches each by about ±8%
/// (docs/results/h200x2-session5.md).
pub fn speedup_uncertainty(multi: &DdpResult, single: &DdpResult) -> Option<f64> {
    let ((a, _), (b, _)) = (launch_variance(multi)?, launch_variance(single)?);
    Some((std::f64::consts::FRAC_PI_2 * (a + b)).sqrt())
}

/// One side's share of a speedup's variance, σ²/n of ln(step) over its n launches, and its
/// degrees of freedom (n − 1). `None` for fewer than two launches.
fn launch_variance(r: &DdpResult) -> Option<(f64, f64)> {
    let sd = r.launch_log_sd()?;
    let n = r.launch_step_medians_s.len() as f64;
    Some((sd * sd / n, n - 1.0))
}

/// How far, relative, a figure measured over repeated launches may move by their noise alone:
/// `t·σ`, σ its relative standard error and t Student's two-sided 95% quantile at `dof` degrees
/// of freedom, never below 2σ (the rule for many launches).
///
/// Why not 2σ: σ itself is estimated from the launches, and with two a side it rests on about
/// one degree of freedom, where t is 6–13; with eight a side t is about 2.1. On 2xH200 two
/// launches a side put a `nocomm` slowdown at 2.27x, 3.7σ, while session 7's eight launches of
/// the same MLP had measured 1.09x (docs/results/h200x2-session9.md).
pub fn noise_bound(sigma: f64, dof: f64) -> f64 {
    let t = StudentsT::new(0.0, 1.0, dof).map_or(2.0, |d| d.inverse_cdf(0.975));
    t.max(2.0) * sigma
}

/// A bound on a ln ratio as a reader takes it: `±11% from 8 launches`.
pub fn describe_noise_bound(ln_bound: f64, launches: usize) -> String {
    format!(
        "±{:.0}% from {launches} launches",
        ln_bound.exp_m1() * 100.0
    )
}

/// [`noise_bound`] of a speedup (or any ratio of the two runs' step times): σ its
/// [`speedup_uncertainty`], the degrees of freedom the Welch–Satterthwaite ones of the two
/// launch sets. `None` unless both were launched at least twice.
pub fn speedup_noise_bound(multi: &DdpResult, single: &DdpResult) -> Option<f64> {
    let sigma = speedup_uncertainty(multi, single)?;
    let ((a, da), (b, db)) = (launch_variance(multi)?, launch_variance(single)?);
    let welch = (a + b).powi(2) / (a * a / da + b * b / db);
    // Identical launches on both sides leave 0/0: fall back to the pooled count.
    let dof = if welch.is_finite() { welch } else { da + db };
    Some(noise_bound(sigma, dof))
}

/// Whether a relative difference from a measured figure (an error of a prediction, a ln ratio)
/// lies beyond the measurement's noise: its [`noise_bound`] with repeated launches, else 20%
/// (one launch of a short step moved 10–57% on 2×H200; docs/results/h200x2-session3.md).
pub fn beyond_noise(difference: f64, noise_bound: Option<f64>) -> bool {
    difference.abs() > noise_bound.unwrap_or(SINGLE_LAUNCH_NOISE)
}

/// How far one launch's figure may be off when nothing measured its noise.
const SINGLE_LAUNCH_NOISE: f64 = 0.20;

/// One run's throughput over another's at the same GPU count, as measured.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThroughputRatio {
    pub ratio: f64,
    /// Relative standard error (of ln ratio); `None` for single launches.
    pub uncertainty: Option<f64>,
    /// How far the ratio may move by launch noise alone ([`noise_bound`], n − 1 degrees of
    /// freedom for n paired launches); `None` for single launches.
    pub noise_bound: Option<f64>,
}

/// How much faster run `a` trains than run `b` (samples per second; same GPU count): with
/// repeated launches, measured launch by launch. A `--repeats` sequence runs every configuration
/// once per round, so launch `i` of `a` and of `b` ran side by side in time; the round's common
/// speed (on 2xH200 about half of a short step's launch-to-launch variance) cancels from their
/// ratio, where a ratio of two medians would keep it. The ratio is the median over launches, its
/// uncertainty `√(π/2)·sd/√n` of the per-launch ln ratios. Launches are paired by position, so
/// both runs must have the same number of them (else the plain throughput ratio, without
/// uncertainty). `None` for different GPU counts or a run without throughput.
pub fn throughput_ratio(a: &DdpResult, b: &DdpResult) -> Option<ThroughputRatio> {
    if a.world_size != b.world_size || !(a.throughput > 0.0 && b.throughput > 0.0) {
        return None;
    }
    let plain = ThroughputRatio {
        ratio: a.throughput / b.throughput,
        uncertainty: None,
        noise_bound: None,
    };
    let (la, lb) = (&a.launch_step_medians_s, &b.launch_step_medians_s);
    let valid = |l: &[f64]| l.len() > 1 && l.iter().all(|x| x.is_finite() && *x > 0.0);
    if la.len() != lb.len() || !valid(la) || !valid(lb) {
        return Some(plain);
    }
    // Samples per rank per step: a step of `a` does this many times `b`'s work.
    let work =
        f64::from(a.micro_batch * a.accum.max(1)) / f64::from(b.micro_batch * b.accum.max(1));
    let logs: Vec<f64> = la
        .iter()
        .zip(lb)
        .map(|(ta, tb)| (work * tb / ta).ln())
        .collect();
    let Some(p) = paired_log_ratio(&logs) else {
        return Some(plain);
    };
    Some(ThroughputRatio {
        ratio: p.median.exp(),
        uncertainty: Some(p.sigma),
        noise_bound: Some(p.noise_bound),
    })
}

/// A ratio measured launch by launch: the median of the per-launch ln ratios, its relative
/// standard error √(π/2)·sd/√n, and its [`noise_bound`] at n − 1 degrees of freedom.
struct PairedLogRatio {
    median: f64,
    sigma: f64,
    noise_bound: f64,
}

/// [`PairedLogRatio`] of per-launch ln ratios; `None` for fewer than two.
fn paired_log_ratio(logs: &[f64]) -> Option<PairedLogRatio> {
    let (median, sd) = (crate::expect::median(logs)?, sample_sd(logs)?);
    let n = logs.len() as f64;
    let sigma = (std::f64::consts::FRAC_PI_2 / n).sqrt() * sd;
    Some(PairedLogRatio {
        median,
        sigma,
        noise_bound: noise_bound(sigma, n - 1.0),
    })
}

/// The sample standard deviation (n − 1); `None` for fewer than two values.
fn sample_sd(xs: &[f64]) -> Option<f64> {
    if xs.len() < 2 {
        return None;
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    Some((xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt())
}

/// The 1-GPU run among `runs` that `r`'s speedup is taken against: the same model's run of
/// `r`'s [`one_gpu_reference`] (without its comm hook), else, in reports that lack that run,
/// the variant's own 1-GPU run.
pub fn one_gpu_partner<'a>(runs: &'a [DdpResult], r: &DdpResult) -> Option<&'a DdpResult> {
    let find = |variant: &str| {
        runs.iter()
            .find(|one| one.world_size == 1 && one.model == r.model && one.variant == variant)
    };
    find(&one_gpu_reference(&r.variant)).or_else(|| find(&r.variant))
}

/// Fills speedup (and its uncertainty), efficiency, exposed communication and cost from the
/// 1-GPU rows of the same model ([`one_gpu_partner`]). Rows without a 1-GPU partner keep
/// `None`. Cost uses the price of one GPU-hour (a node's price divided by
/// its GPUs): a job pays for the GPUs it holds.
pub fn fill_scaling(results: &mut [DdpResult], price_per_gpu_hour: Option<f64>) {
    let singles: Vec<DdpResult> = results
        .iter()
        .filter(|r| r.world_size == 1)
        .cloned()
        .collect();
    for r in results.iter_mut() {
        if let Some(p) = price_per_gpu_hour {
            if r.throughput > 0.0 {
                let per_hour = p * f64::from(r.world_size);
                r.cost_per_million = Some(per_hour * 1e6 / (r.throughput * 3600.0));
            }
        }
        if let Some(one) = one_gpu_partner(&singles, r) {
            let (t1, s1) = (one.throughput, one.step_time_median_s);
            if t1 > 0.0 && r.step_time_median_s > 0.0 {
                let speedup = r.throughput / t1;
                r.speedup = Some(speedup);
                (r.speedup_uncertainty, r.speedup_noise_bound) = if r.world_size > 1 {
                    (speedup_uncertainty(r, one), speedup_noise_bound(r, one))
                } else {
                    (None, None)
                };
                r.efficiency = Some(speedup / f64::from(r.world_size));
                r.exposed_comm_fraction =
                    Some(((r.step_time_median_s - s1) / r.step_time_median_s).clamp(0.0, 1.0));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `mlp:1024x4` run at micro-batch 256 (its p90 = its median, nothing filled in).
    fn mlp_run(variant: &str, world: u32, accum: u32, step: f64) -> DdpResult {
        DdpResult {
            model: "mlp:1024x4".into(),
            params: 4_198_400,
            variant: variant.into(),
            world_size: world,
            micro_batch: 256,
            accum,
            step_time_median_s: step,
            step_time_p90_s: step,
            throughput: f64::from(world * accum) * 256.0 / step,
            throughput_unit: "samples/s".into(),
            ..DdpResult::default()
        }
    }

    #[test]
    fn gpt2_presets_have_published_sizes() {
        let p124 = ModelSpec::gpt2_124m().params();
        assert!((123_000_000..126_000_000).contains(&p124), "{p124}");
        let p355 = ModelSpec::gpt2_355m().params();
        assert!((350_000_000..360_000_000).contains(&p355), "{p355}");
    }

    #[test]
    fn parses_variants_and_rejects_nonsense() {
        let v: DdpVariant = "bf16+accum4".parse().unwrap();
        assert_eq!((v.hook, v.accum), (CommHook::Bf16, 4));
        assert_eq!(
            "bucket25".parse::<DdpVariant>().unwrap().bucket_cap_mb,
            Some(25.0)
        );
        assert!("accumX".parse::<DdpVariant>().is_err());
        assert!("fsdp+bf16".parse::<DdpVariant>().is_err());
        let v: DdpVariant = "nocomm+accum8".parse().unwrap();
        assert!(v.nocomm && v.accum == 8);
        assert!("nocomm+bf16".parse::<DdpVariant>().is_err());
        assert!("nocomm+fsdp".parse::<DdpVariant>().is_err());
        // What the step-time model models: DDP with default buckets, with the given hook.
        let plain = |s: &str, h| s.parse::<DdpVariant>().unwrap().plain_ddp_with(h);
        assert!(plain("base", CommHook::None) && plain("accum4", CommHook::None));
        assert!(plain("bf16+accum4", CommHook::Bf16) && !plain("bf16", CommHook::None));
        assert!(!plain("nocomm", CommHook::None) && !plain("fsdp", CommHook::None));
        assert!(!plain("bucket50", CommHook::None));
        assert!("turbo"
            .parse::<DdpVariant>()
            .unwrap_err()
            .contains("unknown variant part"));
    }

    #[test]
    fn model_args_read_back_to_the_same_spec() {
        for arg in [
            "gpt2-124m",
            "gpt2-355m",
            "decoder:4,256,8,512,1000",
            "mlp:2048,3",
        ] {
            let spec: ModelSpec = arg.parse().unwrap();
            assert_eq!(spec.to_arg().parse::<ModelSpec>().unwrap(), spec, "{arg}");
        }
    }

    #[test]
    fn parses_models() {
        assert_eq!(
            "mlp:1024".parse::<ModelSpec>().unwrap(),
            ModelSpec::Mlp {
                width: 1024,
                depth: 4
            }
        );
        assert!("decoder:2,100,3".parse::<ModelSpec>().is_err());
        assert!("resnet".parse::<ModelSpec>().is_err());
    }

    #[test]
    fn scaling_from_seed_numbers() {
        // Seed 000: 4xA6000, 124M, bf16+accum4; 1 GPU 66,189 tok/s; 88% efficiency at 4.
        let mk = |n: u32, tput: f64, step: f64| DdpResult {
            model: "gpt2-124m".into(),
            params: 124_000_000,
            variant: "bf16+accum4".into(),
            world_size: n,
            micro_batch: 8,
            accum: 4,
            step_time_median_s: step,
            step_time_p90_s: step,
            throughput: tput,
            throughput_unit: "tokens/s".into(),
            ..DdpResult::default()
        };
        let mut rows = vec![mk(1, 66_189.0, 0.495), mk(4, 0.88 * 4.0 * 66_189.0, 0.5625)];
        fill_scaling(&mut rows, Some(2.64 / 4.0));
        let eff = rows[1].efficiency.unwrap();
        assert!((eff - 0.88).abs() < 1e-9);
        assert!((rows[1].speedup.unwrap() - 3.52).abs() < 1e-9);
        assert!(rows[1].exposed_comm_fraction.unwrap() > 0.1);
        // "a token cost about 10% more on four GPUs than on one" at 88% efficiency.
        let ratio = rows[1].cost_per_million.unwrap() / rows[0].cost_per_million.unwrap();
        assert!((ratio - 1.0 / 0.88).abs() < 1e-9, "{ratio}");
    }

    #[test]
    fn a_nocomm_run_against_one_gpu_alone_in_its_own_launches() {
        // Launches whose own speed moves ±20% but whose two sides move together: 1.10x each time.
        let launch = |solo: Option<f64>, step: f64| DdpResult {
            solo_step_time_median_s: solo,
            ..mlp_run("nocomm", 2, 1, step)
        };
        let speeds = [1.0, 1.2, 0.8, 1.1, 0.9, 1.15, 0.85, 1.05];
        let runs: Vec<DdpResult> = speeds
            .iter()
            .enumerate()
            .map(|(i, v)| {
                // A little of each launch's own noise on top, alternating in sign.
                let own = if i % 2 == 0 { 1.01 } else { 0.99 };
                launch(Some(0.010 * v), 0.011 * v * own)
            })
            .collect();
        let merged = merge_repeats(runs.clone());
        assert_eq!(merged.len(), 1);
        let r = &merged[0];
        assert_eq!(r.launch_solo_step_medians_s.len(), 8);
        let s = r.solo_slowdown().unwrap();
        assert!((s.ratio - 1.10).abs() < 0.015, "{s:?}");
        let bound = s.noise_bound.unwrap();
        assert!(s.ratio.ln() > bound, "{s:?}");
        // The same steps compared as two separately launched runs sit inside their noise.
        let alone = DdpResult {
            launch_step_medians_s: r.launch_solo_step_medians_s.clone(),
            ..mlp_run("nocomm", 1, 1, r.solo_step_time_median_s.unwrap())
        };
        assert!(
            s.ratio.ln() < speedup_noise_bound(r, &alone).unwrap(),
            "{s:?}"
        );
        // One launch without its solo step: the launches are not paired at all.
        let mut partial = runs.clone();
        partial[3].solo_step_time_median_s = None;
        let merged = merge_repeats(partial);
        assert!(merged[0].launch_solo_step_medians_s.is_empty());
        assert!(merged[0].solo_slowdown().is_none());
        // A single launch: the ratio, with no noise bound.
        let one = runs[1].solo_slowdown().unwrap();
        assert!((one.ratio - 1.1 * 0.99).abs() < 1e-9, "{one:?}");
        assert_eq!(one.noise_bound, None);
        // Nothing to compare: no solo step, or a non-finite one.
        assert!(launch(None, 0.011).solo_slowdown().is_none());
        assert!(launch(Some(f64::NAN), 0.011).solo_slowdown().is_none());
    }

    #[test]
    fn repeated_launches_merge_to_their_median() {
        let mk = |variant: &str, n: u32, step: f64| DdpResult {
            step_time_p90_s: step * 1.1,
            ..mlp_run(variant, n, 1, step)
        };
        // Launch order: base/1, base/2, fp16/2, then again, then base/1 once more.
        let rows = merge_repeats(vec![
            mk("base", 1, 0.0020),
            mk("base", 2, 0.0030),
            mk("fp16", 2, 0.0050),
            mk("base", 1, 0.0024),
            mk("base", 2, 0.0032),
            mk("base", 1, 0.0019),
        ]);
        assert_eq!(rows.len(), 3, "one row per configuration, first-seen order");
        assert_eq!((rows[0].variant.as_str(), rows[0].world_size), ("base", 1));
        assert_eq!((rows[2].variant.as_str(), rows[2].world_size), ("fp16", 2));
        // Odd count: the middle launch; its throughput follows the median step.
        assert_eq!(rows[0].launch_step_medians_s, vec![0.0020, 0.0024, 0.0019]);
        assert!((rows[0].step_time_median_s - 0.0020).abs() < 1e-15);
        assert!((rows[0].throughput - 256.0 / 0.0020).abs() < 1e-6);
        assert!((rows[0].step_time_p90_s - 0.0022).abs() < 1e-12);
        assert!((rows[0].launch_spread().unwrap() - 0.0005 / 0.0020).abs() < 1e-12);
        // Even count: the mean of the middle two.
        assert!((rows[1].step_time_median_s - 0.0031).abs() < 1e-15);
        assert!((rows[1].throughput - 2.0 * 256.0 / 0.0031).abs() < 1e-6);
        // No launch carried an all-reduce probe: none after the fold either.
        assert!(rows.iter().all(|r| r.all_reduce_probe.is_none()));
        // A single launch stays as it was, with no spread.
        assert!(rows[2].launch_step_medians_s.is_empty());
        assert_eq!(rows[2].launch_spread(), None);
        assert!((rows[2].step_time_median_s - 0.0050).abs() < 1e-15);

        // The speedup's uncertainty comes from both sides' launches, once fill_scaling pairs
        // them; the 1-GPU row is its own reference and fp16 has no repeated partner.
        let mut rows = rows;
        fill_scaling(&mut rows, None);
        let sd = |l: &[f64]| {
            let m = l.iter().map(|x| x.ln()).sum::<f64>() / l.len() as f64;
            (l.iter().map(|x| (x.ln() - m).powi(2)).sum::<f64>() / (l.len() - 1) as f64).sqrt()
        };
        let (s1, s2) = (sd(&[0.0020, 0.0024, 0.0019]), sd(&[0.0030, 0.0032]));
        assert!((rows[0].launch_log_sd().unwrap() - s1).abs() < 1e-12);
        let want = (std::f64::consts::FRAC_PI_2 * (s1 * s1 / 3.0 + s2 * s2 / 2.0)).sqrt();
        let got = rows[1].speedup_uncertainty.unwrap();
        assert!((got - want).abs() < 1e-12, "{got} {want}");
        assert!(got > 0.05 && got < 0.15, "{got}");
        assert_eq!(rows[0].speedup_uncertainty, None);
        assert_eq!(rows[2].speedup_uncertainty, None);
        // Its noise bound: Student's t at the Welch–Satterthwaite degrees of freedom of three and
        // two launches times σ, far wider than 2σ for so few launches.
        let (a, b) = (s1 * s1 / 3.0, s2 * s2 / 2.0);
        let dof = (a + b).powi(2) / (a * a / 2.0 + b * b / 1.0);
        let bound = rows[1].speedup_noise_bound.unwrap();
        assert!((bound - noise_bound(got, dof)).abs() < 1e-12, "{bound}");
        assert!(bound > 2.5 * got, "{bound} {got}");
        assert_eq!(rows[0].speedup_noise_bound, None);
        assert_eq!(rows[2].speedup_noise_bound, None);
        // Student's t: 12.71 at one degree of freedom, 2.09 at 19, never below 2 however many.
        assert!((noise_bound(1.0, 1.0) - 12.706).abs() < 1e-3);
        assert!((noise_bound(1.0, 19.0) - 2.093).abs() < 1e-3);
        assert_eq!(noise_bound(0.1, 1e6), 0.2);
        // One launch on either side: no estimate.
        let mut single = rows[1].clone();
        single.launch_step_medians_s.clear();
        assert_eq!(speedup_uncertainty(&single, &rows[0]), None);
        assert_eq!(speedup_uncertainty(&rows[1], &single), None);
        // A broken launch time is no estimate either.
        single.launch_step_medians_s = vec![0.003, f64::NAN];
        assert_eq!(single.launch_log_sd(), None);
    }

    #[test]
    fn repeated_launches_fold_their_all_reduce_probes() {
        let probed = |step: f64, t64: f64| DdpResult {
            all_reduce_probe: Sweep::all_reduce_from_times(2, &[(64 << 20, t64)]),
            ..mlp_run("base", 2, 1, step)
        };
        let rows = merge_repeats(vec![
            probed(0.0030, 0.017),
            probed(0.0032, 0.023),
            probed(0.0031, 0.019),
        ]);
        let p = rows[0].all_reduce_probe.as_ref().unwrap();
        assert!((p.samples[0].out_of_place.time_us - 19_000.0).abs() < 1e-9);
        // The curve the 2-GPU runs timed: this one run's; at 4 GPUs nothing was probed.
        let (curve, runs) = probe_curve(&rows, 2).unwrap();
        assert_eq!((&curve, runs), (p, 1));
        assert!(probe_curve(&rows, 4).is_none());
    }

    #[test]
    fn a_hooked_variants_speedup_is_against_one_gpu_without_the_hook() {
        assert_eq!(one_gpu_reference("bf16+accum4"), "accum4");
        assert_eq!(one_gpu_reference("fp16"), "base");
        assert_eq!(one_gpu_reference("accum8"), "accum8");
        assert_eq!(one_gpu_reference("nocomm"), "nocomm");
        assert_eq!(one_gpu_reference("powersgd+accum2"), "accum2");
        let mk = |variant: &str, n: u32, step: f64| mlp_run(variant, n, 1, step);
        // fp16's casts cost 1 ms on one GPU; on two it runs as fast as base: no gain.
        let mut rows = vec![
            mk("base", 1, 0.002),
            mk("fp16", 1, 0.003),
            mk("base", 2, 0.0025),
            mk("fp16", 2, 0.0025),
        ];
        fill_scaling(&mut rows, None);
        assert_eq!(
            rows[2].speedup, rows[3].speedup,
            "against the same plain run"
        );
        assert!((rows[3].speedup.unwrap() - 1.6).abs() < 1e-12);
        assert!(
            (rows[1].speedup.unwrap() - 2.0 / 3.0).abs() < 1e-12,
            "one GPU pays the casts"
        );
        // A report without the plain 1-GPU run falls back to the variant's own.
        let mut rows = vec![mk("fp16", 1, 0.003), mk("fp16", 2, 0.0025)];
        fill_scaling(&mut rows, None);
        assert!((rows[1].speedup.unwrap() - 2.4).abs() < 1e-12);
    }

    #[test]
    fn a_request_gets_the_one_gpu_references_its_hooked_variants_need() {
        let variants = |names: &[&str]| -> Vec<DdpVariant> {
            names.iter().map(|n| n.parse().unwrap()).collect()
        };
        let mut req = DdpRequest {
            models: vec![ModelSpec::gpt2_124m()],
            variants: variants(&["bf16+accum4", "fp16", "accum8"]),
            world_sizes: vec![1, 2],
            micro_batch: 8,
            warmup_steps: 1,
            steps: 2,
            price_per_gpu_hour: None,
            env: Vec::new(),
            deadline_s: 60.0,
            repeats: 1,
        };
        req.variants[1].env = vec![("NCCL_P2P_DISABLE".into(), "1".into())];
        let got = req.clone().with_one_gpu_references();
        let names: Vec<&str> = got.variants.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["bf16+accum4", "fp16", "accum8", "accum4", "base"]);
        assert_eq!(
            got.variants[4].env, req.variants[1].env,
            "under the hooked one's environment"
        );
        // Present already, or no 1-GPU run asked for: nothing added.
        assert_eq!(got.clone().with_one_gpu_references(), got);
        req.world_sizes = vec![2];
        assert_eq!(req.clone().with_one_gpu_references(), req);
    }

    #[test]
    fn throughput_ratio_cancels_the_launches_common_speed() {
        let mk = |variant: &str, accum: u32, steps: &[f64]| DdpResult {
            launch_step_medians_s: steps.to_vec(),
            ..mlp_run(variant, 2, accum, steps[steps.len() / 2])
        };
        // Launches 30% apart, every one of them with accum8 doing 8 micro-batches in 6.4 times
        // base's step: 1.25x the samples per second, in every launch.
        let speed = [1.0, 1.3, 0.9, 1.1, 1.2];
        let base_steps: Vec<f64> = speed.iter().map(|s| 0.002 * s).collect();
        let acc_steps: Vec<f64> = speed.iter().map(|s| 0.0128 * s).collect();
        let (base, acc) = (mk("base", 1, &base_steps), mk("accum8", 8, &acc_steps));
        let r = throughput_ratio(&acc, &base).unwrap();
        assert!((r.ratio - 1.25).abs() < 1e-9, "{r:?}");
        assert!(
            r.uncertainty.unwrap() < 1e-9,
            "the common speed cancels: {r:?}"
        );
        // Launches that did not run side by side (here the rounds shifted by one): the speeds
        // no longer cancel, and the uncertainty says so.
        let mut shifted = acc_steps.clone();
        shifted.rotate_left(1);
        let r = throughput_ratio(&mk("accum8", 8, &shifted), &base).unwrap();
        assert!(r.uncertainty.unwrap() > 0.05, "unpaired rounds: {r:?}");
        // Five paired launches: t at four degrees of freedom (2.78).
        let n = base.launch_step_medians_s.len() as f64;
        assert_eq!(
            r.noise_bound,
            Some(noise_bound(r.uncertainty.unwrap(), n - 1.0))
        );
        // Different launch counts: the plain ratio, with no uncertainty; other GPU counts: none.
        let r = throughput_ratio(&mk("accum8", 8, &acc_steps[..4]), &base).unwrap();
        assert_eq!(r.uncertainty, None);
        let mut one = base.clone();
        one.world_size = 1;
        assert_eq!(throughput_ratio(&acc, &one), None);
    }
}

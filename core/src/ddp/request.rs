//! A DDP benchmark request: models, variants, GPU counts, repeats, and its check.

use serde::{Deserialize, Serialize};

use super::{CommHook, DdpVariant, ModelSpec, Reference};
use crate::unknown_name::UnknownName;

/// CPU ranks one request may start (`RunDevice::Cpu`): a test of the script, not a cluster.
pub const MAX_CPU_RANKS: u32 = 8;

/// A DDP benchmark to run: every variant at every world size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DdpRequest {
    pub models: Vec<ModelSpec>,
    pub variants: Vec<DdpVariant>,
    pub world_sizes: Vec<u32>,
    pub micro_batch: u32,
    pub warmup_steps: u32,
    pub steps: u32,
    /// Each run times at least this many seconds of steps: more than `steps` where steps are
    /// short (0: exactly `steps`). A launch of a short-step model lands at its own speed, but runs
    /// side by side in it compare to a few percent once each times seconds rather than tens of
    /// milliseconds (docs/results/2026-12-01-h200-one-gpu-launch-noise.md).
    #[serde(default)]
    pub min_timed_s: f64,
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
    /// The training recipe's knobs that change what DDP sends and when: autocast, the DDP
    /// constructor's options. Defaults: bf16 autocast, DDP's own defaults.
    #[serde(default)]
    pub recipe: Recipe,
    /// Where the ranks run: CUDA GPUs (torchrun, NCCL) or CPU processes (gloo), the latter for
    /// testing the script where there is no GPU; its figures are CPU figures, labelled so.
    #[serde(default, skip_serializing_if = "RunDevice::is_cuda")]
    pub device: RunDevice,
    /// What the speedups rest on. [`Reference::Plain`]: each 1-GPU launch also times the model
    /// without DDP, blocks interleaved with its DDP steps ([`super::PlainReference`]), the
    /// reference every speedup is taken against and DDP's own per-step work, read where the
    /// launch's speed cancels; it doubles the 1-GPU runs' timed steps. [`Reference::Ddp`]
    /// (`--reference ddp`): the speedups rest on the 1-GPU step in DDP.
    #[serde(default = "Reference::before_the_field")]
    pub reference: Reference,
}

impl DdpRequest {
    /// Whether the launch at `world` GPUs times the plain blocks: its 1-GPU launch only.
    pub fn plain_blocks_at(&self, world: u32) -> bool {
        self.reference == Reference::Plain && world == 1
    }
}

/// Autocast of the forward pass (`--amp`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Amp {
    #[default]
    Bf16,
    /// fp16 autocast with a gradient scaler.
    Fp16,
    /// Full precision.
    None,
}

impl std::str::FromStr for Amp {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "bf16" | "bfloat16" => Ok(Amp::Bf16),
            "fp16" | "float16" | "half" => Ok(Amp::Fp16),
            "none" | "fp32" | "off" => Ok(Amp::None),
            other => Err(UnknownName::new("--amp", other, "bf16, fp16 or none")),
        }
    }
}

impl Amp {
    /// Bytes of a parameter as it is computed on: 2 in the half-precision copies autocast and
    /// FSDP2's `MixedPrecisionPolicy(param_dtype)` make, 4 in full precision.
    pub fn compute_bytes(self) -> f64 {
        if self == Amp::None {
            4.0
        } else {
            2.0
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Amp::Bf16 => "bf16",
            Amp::Fp16 => "fp16",
            Amp::None => "none",
        }
    }
}

/// The recipe's knobs that change communication, as the user's training would set them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recipe {
    #[serde(default)]
    pub amp: Amp,
    /// DDP(find_unused_parameters=...): a graph walk each step, unused gradients marked ready.
    #[serde(default)]
    pub find_unused_parameters: bool,
    /// DDP(static_graph=...).
    #[serde(default)]
    pub static_graph: bool,
    /// DDP(gradient_as_bucket_view=...); a variant's `nobucketview` turns it off for that run.
    #[serde(default = "yes")]
    pub gradient_as_bucket_view: bool,
    /// DDP(broadcast_buffers=...): every forward sends rank 0's buffers (BatchNorm's running
    /// statistics) to the other ranks, torch's default.
    #[serde(default = "yes")]
    pub broadcast_buffers: bool,
    /// `torch.compile(ddp_model, mode=...)` after DDP, as PyTorch documents for DDP
    /// (DDPOptimizer splits the graph at the buckets); `None`: eager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile: Option<CompileMode>,
    /// The process group's backend on GPUs (`--backend`): NCCL by default; CPU ranks run gloo.
    #[serde(default, skip_serializing_if = "Backend::is_nccl")]
    pub backend: Backend,
}

/// `torch.distributed`'s process-group backend (`--backend`): `nccl`, `gloo`, or `nccl2` where
/// the torch has it (torch 2.11's backends are gloo, mpi, nccl, ucc, xccl and fake: no `nccl2`,
/// and the benchmark says so in one line).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    #[default]
    Nccl,
    Gloo,
    Nccl2,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Nccl => "nccl",
            Backend::Gloo => "gloo",
            Backend::Nccl2 => "nccl2",
        }
    }

    pub fn is_nccl(&self) -> bool {
        *self == Backend::Nccl
    }
}

impl std::str::FromStr for Backend {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "nccl" => Ok(Backend::Nccl),
            "gloo" => Ok(Backend::Gloo),
            "nccl2" => Ok(Backend::Nccl2),
            other => Err(UnknownName::new("--backend", other, "nccl, gloo or nccl2")),
        }
    }
}

/// torch.compile's `mode` (`--compile-mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CompileMode {
    #[default]
    Default,
    ReduceOverhead,
    MaxAutotune,
}

impl std::str::FromStr for CompileMode {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "default" => Ok(CompileMode::Default),
            "reduce-overhead" => Ok(CompileMode::ReduceOverhead),
            "max-autotune" => Ok(CompileMode::MaxAutotune),
            other => Err(UnknownName::new(
                "--compile-mode",
                other,
                "default, reduce-overhead or max-autotune",
            )),
        }
    }
}

impl CompileMode {
    pub fn as_str(self) -> &'static str {
        match self {
            CompileMode::Default => "default",
            CompileMode::ReduceOverhead => "reduce-overhead",
            CompileMode::MaxAutotune => "max-autotune",
        }
    }

    /// The call as Python: `torch.compile(NAME)` or with its mode.
    pub fn call(self, name: &str) -> String {
        match self {
            CompileMode::Default => format!("torch.compile({name})"),
            other => format!("torch.compile({name}, mode=\"{}\")", other.as_str()),
        }
    }
}

fn yes() -> bool {
    true
}

impl Default for Recipe {
    fn default() -> Self {
        Recipe {
            amp: Amp::Bf16,
            find_unused_parameters: false,
            static_graph: false,
            gradient_as_bucket_view: true,
            broadcast_buffers: true,
            compile: None,
            backend: Backend::Nccl,
        }
    }
}

impl Recipe {
    /// DDP's bucket assignment under this recipe: the constructor's where it never rebuilds
    /// (`find_unused_parameters` without `static_graph`), else the rebuilt one.
    pub fn bucket_order(&self) -> super::BucketOrder {
        if self.find_unused_parameters && !self.static_graph {
            super::BucketOrder::Constructor
        } else {
            super::BucketOrder::Rebuilt
        }
    }

    /// The recipe in one line: its autocast and the DDP options that differ from torch's.
    pub fn describe(&self) -> String {
        let mut parts = vec![format!("amp {}", self.amp.as_str())];
        if let Some(mode) = self.compile {
            parts.push(format!("torch.compile {}", mode.as_str()));
        }
        if !self.backend.is_nccl() {
            parts.push(format!("backend {}", self.backend.as_str()));
        }
        parts.extend(self.ddp_kwargs());
        parts.join(", ")
    }

    /// The DDP constructor's keyword arguments that differ from torch's defaults, as Python.
    pub fn ddp_kwargs(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.find_unused_parameters {
            out.push("find_unused_parameters=True".to_string());
        }
        if self.static_graph {
            out.push("static_graph=True".to_string());
        }
        if !self.gradient_as_bucket_view {
            out.push("gradient_as_bucket_view=False".to_string());
        }
        if !self.broadcast_buffers {
            out.push("broadcast_buffers=False".to_string());
        }
        out
    }
}

/// Where a DDP benchmark's ranks run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunDevice {
    #[default]
    Cuda,
    /// CPU processes over gloo: a test of the benchmark itself, never a GPU figure.
    Cpu,
}

impl RunDevice {
    pub fn is_cuda(&self) -> bool {
        *self == RunDevice::Cuda
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RunDevice::Cuda => "cuda",
            RunDevice::Cpu => "cpu",
        }
    }
}

impl std::str::FromStr for RunDevice {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cuda" | "gpu" => Ok(RunDevice::Cuda),
            "cpu" => Ok(RunDevice::Cpu),
            other => Err(UnknownName::new("--device", other, "cuda or cpu")),
        }
    }
}

fn one_launch() -> u32 {
    1
}

/// The longest stretch of steps a run may be asked to time, seconds.
pub const MAX_MIN_TIMED_S: f64 = 60.0;

/// The most timed steps a run may take (the benchmark's `MAX_STEPS`, and `steps`' own bound).
pub const MAX_STEPS: u32 = 10_000;

/// Steps the benchmark times after the warm-up to size a run to `min_timed_s`, before it warms
/// up again. Sent in its config (`sizing_steps`): the launch budget counts on the same number.
pub const SIZING_STEPS: u32 = 3;

/// Rounds of a `nocomm` run on N GPUs, each rank 0 alone for a block of the run's steps, then
/// every rank together for one; sent in the benchmark's config (`solo_rounds`). One pair of
/// 20-step blocks on 2xH200 put a launch's ln(together/alone) 0.089 from the next; three pairs,
/// about 0.058 (docs/results/2026-11-30-h200x2-accumulation-gap.md §3); alternating also cancels
/// a drift in the node's speed along the run.
pub const SOLO_ROUNDS: u32 = 3;

/// Rounds of the plain reference, each a block of DDP steps and one of the model without DDP in
/// A B B A order; sent in the benchmark's config (`plain_rounds`). Launches of one GPU spread
/// ±7-12% and two runs of one launch 3-8% (docs/results/2026-12-01-h200-one-gpu-launch-noise.md),
/// so only blocks interleaved in one launch compare to a few percent.
pub const PLAIN_ROUNDS: u32 = 8;

/// Timed steps of a run of `step_s`-second steps: `steps`, or more where that many would time
/// less than `min_timed_s`, never past [`MAX_STEPS`] (the embedded benchmark's `steps_for`).
pub fn timed_steps(min_timed_s: f64, steps: u32, step_s: f64) -> u32 {
    if !(min_timed_s > 0.0 && step_s > 0.0) {
        return steps;
    }
    let wanted = crate::num::floor_u64((min_timed_s / step_s).ceil());
    let wanted = u32::try_from(wanted).unwrap_or(MAX_STEPS).min(MAX_STEPS);
    steps.max(wanted)
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
        let mut added: Vec<DdpVariant> = Vec::new();
        for v in &self.variants {
            let reference = v.without_hook();
            let present = |list: &[DdpVariant]| list.iter().any(|x| x.name == reference.name);
            if reference.name == v.name || present(&self.variants) || present(&added) {
                continue;
            }
            added.push(reference);
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
            m.validate()?;
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
            if v.fsdp && self.recipe.amp == Amp::Fp16 {
                return bad(format!(
                    "variant {}: FSDP2 wrappers run MixedPrecisionPolicy bf16 (--amp bf16) or \
                     full precision (--amp none), not fp16",
                    v.name
                ));
            }
            let worlds = self.world_sizes.iter();
            if let Some(why) = worlds.filter_map(|&n| v.wrapper().refuses(n)).next() {
                return bad(format!("variant {}: {why}", v.name));
            }
            if v.fsdp && self.recipe.compile.is_some() {
                return bad(format!(
                    "variant {}: --compile is DDP's (DDPOptimizer); FSDP variants run without it",
                    v.name
                ));
            }
        }
        if self.device == RunDevice::Cpu && self.recipe.backend == Backend::Nccl2 {
            return bad(format!(
                "--backend {}: CPU ranks run gloo; the backend is for GPUs",
                self.recipe.backend.as_str()
            ));
        }
        if self.device == RunDevice::Cpu {
            if let Some(n) = self
                .world_sizes
                .iter()
                .find(|n| !(1..=MAX_CPU_RANKS).contains(*n))
            {
                return bad(format!("{n} CPU ranks outside 1..={MAX_CPU_RANKS}"));
            }
        }
        for &n in self.world_sizes.iter().filter(|_| self.device.is_cuda()) {
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
        if !(1..=MAX_STEPS).contains(&self.steps) || self.warmup_steps > 10_000 {
            return bad(format!(
                "steps {} (warm-up {}) outside 1..=10000",
                self.steps, self.warmup_steps
            ));
        }
        if !(self.min_timed_s.is_finite() && (0.0..=MAX_MIN_TIMED_S).contains(&self.min_timed_s)) {
            return bad(format!(
                "minimum timed seconds {} outside 0..={MAX_MIN_TIMED_S}",
                self.min_timed_s
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

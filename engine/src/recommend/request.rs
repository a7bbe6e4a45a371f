//! What a recommendation is asked for: the CLI's `recommend` flags as one request.

use std::path::PathBuf;

use ddpcheck_core::ddp::{DdpRequest, DdpVariant, ModelSpec, Recipe, Reference, RunDevice};
use ddpcheck_core::recommend::ModelInput;

use super::budget;
use crate::runner::RunError;

/// What a recommendation is asked for (the CLI's `recommend` flags).
#[derive(Clone, Debug)]
pub struct RecommendRequest {
    /// The model, as the CLI read it from `--model` or `--model-config`; or else only `params`.
    pub model: Option<ModelSpec>,
    pub params: Option<u64>,
    pub micro_batch: u32,
    pub seq: u32,
    /// GPUs the job will use (default: those of the measured all-reduce).
    pub gpus: Option<u32>,
    pub price_per_hour: Option<f64>,
    pub target_efficiency: f64,
    /// Saved reports to read instead of the daemon's history or new runs.
    pub from: Vec<PathBuf>,
    pub step_time_ms: Option<f64>,
    pub estimate_tflops: Option<f64>,
    /// Candidate NCCL settings to measure (`--env-ab`).
    pub env_ab: Option<String>,
    /// Launches of each DDP run.
    pub repeats: u32,
    /// Today's sweep-only path on a fresh node: an all-reduce sweep and 1-GPU runs, no N-GPU
    /// launch.
    pub quick: bool,
    /// Seconds recommend's own measurements (every launch and sweep before the recommendation)
    /// may take.
    pub budget_s: f64,
    /// The user's recipe (autocast, DDP options): every launch runs it, the snippet says it.
    pub recipe: Recipe,
    /// Where recommend's own launches run (CPU ranks: a test of the flow, CPU figures).
    pub device: RunDevice,
    /// What the speedups rest on: with `plain` its own 1-GPU launches also time the model
    /// without DDP (`DdpRequest::plain_reference`), the compute is that step and DDP's own work
    /// a term of every step; with `ddp` the 1-GPU step in DDP.
    pub reference: Reference,
}

impl RecommendRequest {
    pub(super) fn model_input(&self) -> Result<ModelInput, RunError> {
        match (&self.model, self.params) {
            (Some(spec), _) => Ok(ModelInput::Spec { spec: spec.clone() }),
            (None, Some(p)) => Ok(ModelInput::Params { params: p }),
            (None, None) => Err(RunError::Usage(
                "give --model NAME, --model-config FILE or --params COUNT".into(),
            )),
        }
    }
}

impl RecommendRequest {
    /// One of recommend's own launches: the request's recipe and device, `steps` timed steps
    /// (at least `budget::MIN_TIMED_S` of them), five warm-up steps.
    pub(super) fn ddp_request(
        &self,
        models: Vec<ModelSpec>,
        variants: &[&str],
        sizes: Vec<u32>,
        steps: u32,
    ) -> Result<DdpRequest, RunError> {
        // The runners time the plain blocks in the 1-GPU launch only
        // (`DdpRequest::plain_blocks_at`): that is where DDP's own work sets the reference.
        let plain_reference = self.reference == Reference::Plain;
        Ok(DdpRequest {
            models,
            variants: variants
                .iter()
                .map(|v| {
                    self.measured_as(v)
                        .parse::<DdpVariant>()
                        .map_err(RunError::Usage)
                })
                .collect::<Result<_, _>>()?,
            world_sizes: sizes,
            micro_batch: self.micro_batch,
            warmup_steps: 5,
            steps,
            min_timed_s: budget::MIN_TIMED_S,
            price_per_gpu_hour: None,
            env: Vec::new(),
            deadline_s: budget::LAUNCH_DEADLINE_S,
            repeats: self.repeats,
            recipe: self.recipe.clone(),
            device: self.device,
            plain_reference,
        })
    }

    /// The variant a launch runs for `variant`: itself, or on CPU ranks fp16 for bf16, whose
    /// all-reduce gloo cannot do (the same bytes on the wire).
    pub(super) fn measured_as(&self, variant: &str) -> String {
        match self.device {
            RunDevice::Cuda => variant.to_string(),
            RunDevice::Cpu => variant.replace("bf16", "fp16"),
        }
    }

    /// The 1-GPU launch's variants: plain DDP at two accumulations (compute and the optimizer
    /// step) and bf16 (the hook's cost), which gloo's CPU ranks cannot run.
    pub(super) fn one_gpu_variants(&self) -> &'static [&'static str] {
        match self.device {
            RunDevice::Cuda => &["base", "accum4", "bf16"],
            RunDevice::Cpu => &["base", "accum4"],
        }
    }
}

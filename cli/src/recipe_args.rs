//! The training recipe's flags shared by `bench ddp` and `recommend` (`--amp`, DDP's options,
//! `--device`, `--backend`).

use clap::Args;
use ddpcheck_core::ddp::{CompileMode, Recipe, RunDevice};
use ddpcheck_engine::RunError;

#[derive(Args, Debug, Clone)]
pub struct RecipeArgs {
    /// Autocast of the forward pass, as your training runs it: bf16, fp16 (with a gradient
    /// scaler) or none.
    #[arg(long, default_value = "bf16", value_name = "bf16|fp16|none")]
    pub amp: String,
    /// DDP(find_unused_parameters=True), as your training sets it.
    #[arg(long)]
    pub find_unused_parameters: bool,
    /// DDP(static_graph=True), as your training sets it.
    #[arg(long)]
    pub static_graph: bool,
    /// DDP(gradient_as_bucket_view=False) (ddpcheck's default is True).
    #[arg(long)]
    pub no_gradient_as_bucket_view: bool,
    /// DDP(broadcast_buffers=False): no copy of rank 0's buffers (BatchNorm's running
    /// statistics) to every rank in each forward, as your training sets it.
    #[arg(long)]
    pub no_broadcast_buffers: bool,
    /// Compile as your training does: DDP first, then torch.compile(ddp_model), so that
    /// DDPOptimizer splits the graph at DDP's buckets. Compile time is reported on its own,
    /// outside every timed step; the compile cache is kept across launches.
    #[arg(long)]
    pub compile: bool,
    /// torch.compile's mode (implies --compile).
    #[arg(long, value_name = "default|reduce-overhead|max-autotune")]
    pub compile_mode: Option<String>,
    /// Where the ranks run: cuda (GPUs, torchrun, NCCL), or cpu (processes over gloo: a test of
    /// the benchmark and your factory where there is no GPU; CPU figures, never GPU ones).
    #[arg(long, default_value = "cuda", value_name = "cuda|cpu")]
    pub device: String,
    /// The process group's backend on GPUs, as your training's init_process_group names it:
    /// nccl, gloo, or nccl2 where the torch has it (one line where it does not).
    #[arg(long, default_value = "nccl", value_name = "nccl|gloo|nccl2")]
    pub backend: String,
}

impl RecipeArgs {
    pub fn recipe(&self) -> Result<Recipe, RunError> {
        Ok(Recipe {
            amp: self.amp.parse().map_err(RunError::Usage)?,
            find_unused_parameters: self.find_unused_parameters,
            static_graph: self.static_graph,
            gradient_as_bucket_view: !self.no_gradient_as_bucket_view,
            broadcast_buffers: !self.no_broadcast_buffers,
            compile: self.compile_mode()?,
            backend: self.backend.parse().map_err(RunError::Usage)?,
        })
    }

    /// `--compile` and `--compile-mode`: torch.compile's mode, or `None` for eager.
    pub fn compile_mode(&self) -> Result<Option<CompileMode>, RunError> {
        match &self.compile_mode {
            Some(mode) => Ok(Some(mode.parse().map_err(RunError::Usage)?)),
            None => Ok(self.compile.then_some(CompileMode::Default)),
        }
    }

    pub fn device(&self) -> Result<RunDevice, RunError> {
        match self.device.trim().to_ascii_lowercase().as_str() {
            "cuda" | "gpu" => Ok(RunDevice::Cuda),
            "cpu" => Ok(RunDevice::Cpu),
            other => Err(RunError::Usage(format!(
                "--device {other:?}: expected cuda or cpu"
            ))),
        }
    }
}

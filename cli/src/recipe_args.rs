//! The training recipe's flags shared by `bench ddp` and `recommend` (`--amp`, DDP's options,
//! `--compile`, `--device`, `--backend`), read once, where clap reads the command line, into
//! core's typed values: the commands, the engine and the API carry those, never the text.

use clap::Args;
use ddpcheck_core::ddp::{Amp, Backend, CompileMode, DdpVariant, Recipe, RunDevice};

use crate::read_at_edge::{typed, NotUtf8, ReadAtEdge};

/// `--variants`: a comma-separated list, each read into its parts (empty items skipped).
#[derive(Clone, Debug, PartialEq)]
pub struct VariantList(pub Vec<DdpVariant>);

/// `--variants`' parser.
pub fn variants() -> ReadAtEdge<VariantList> {
    ReadAtEdge(|v| {
        let text = v
            .to_str()
            .ok_or_else(|| NotUtf8(format!("--variants {}", v.to_string_lossy())))?;
        let list = text
            .split(',')
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::parse::<DdpVariant>)
            .collect::<Result<_, _>>()?;
        Ok(VariantList(list))
    })
}

#[derive(Args, Debug, Clone)]
pub struct RecipeArgs {
    /// Autocast of the forward pass, as your training runs it: bf16, fp16 (with a gradient
    /// scaler) or none.
    #[arg(long, default_value = "bf16", value_name = "bf16|fp16|none", value_parser = typed::<Amp>())]
    pub amp: Amp,
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
    #[arg(long, value_name = "default|reduce-overhead|max-autotune", value_parser = typed::<CompileMode>())]
    pub compile_mode: Option<CompileMode>,
    /// Where the ranks run: cuda (GPUs, torchrun, NCCL), or cpu (processes over gloo: a test of
    /// the benchmark and your factory where there is no GPU; CPU figures, never GPU ones).
    #[arg(long, default_value = "cuda", value_name = "cuda|cpu", value_parser = typed::<RunDevice>())]
    pub device: RunDevice,
    /// The process group's backend on GPUs, as your training's init_process_group names it:
    /// nccl, gloo, or nccl2 where the torch has it (one line where it does not).
    #[arg(long, default_value = "nccl", value_name = "nccl|gloo|nccl2", value_parser = typed::<Backend>())]
    pub backend: Backend,
}

impl RecipeArgs {
    pub fn recipe(&self) -> Recipe {
        Recipe {
            amp: self.amp,
            find_unused_parameters: self.find_unused_parameters,
            static_graph: self.static_graph,
            gradient_as_bucket_view: !self.no_gradient_as_bucket_view,
            broadcast_buffers: !self.no_broadcast_buffers,
            compile: self.compile_mode(),
            backend: self.backend,
        }
    }

    /// `--compile` and `--compile-mode`: torch.compile's mode, or `None` for eager.
    pub fn compile_mode(&self) -> Option<CompileMode> {
        self.compile_mode
            .or(self.compile.then_some(CompileMode::Default))
    }
}

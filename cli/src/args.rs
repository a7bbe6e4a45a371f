//! The top-level command line (clap derive): the global options, the commands and the arguments
//! of the commands that run in main.rs. The other commands' arguments live in their own files.

use clap::{Args, Parser, Subcommand};

use crate::cluster_cmd::ClusterCommand;
use crate::config_cmd::ConfigCommand;
use crate::ddp_cmd::DdpArgs;
use crate::diff_cmd::DiffArgs;
use crate::explain_cmd::ExplainArgs;
use crate::flag_values::parse_message_size;
use crate::global_args::GlobalArgs;
use crate::history_cmd::HistoryArgs;
use crate::memory_cmd::MemoryArgs;
use crate::read_at_edge::typed;
use crate::recommend_cmd::RecommendArgs;
use ddpcheck_core::ddp::RunDevice;

/// ddpcheck — is this GPU node healthy, how fast is its interconnect really, and will PyTorch
/// DDP pay off on it (and with which settings)?
///
/// Runs locally on this node's GPUs, on a simulated node (--sim, for tests and demos), or
/// through the node's daemon (--daemon). Exit codes: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN,
/// 4 BUSY, 5 TIMEOUT, 64 usage error.
///
/// Start here: `ddpcheck demo` (a simulated 4xA6000 node, end to end), then on a GPU node
/// `ddpcheck topo`, `ddpcheck check`, `ddpcheck bench collectives`, `ddpcheck recommend --model gpt2-124m`.
#[derive(Parser, Debug)]
#[command(
    name = "ddpcheck",
    version,
    about,
    long_about,
    propagate_version = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the GPU pair topology matrix (nvidia-smi topo -m form) with GPU UUIDs.
    Topo(TopoArgs),
    /// Preflight check for schedulers: health, PCIe, topology, NCCL all-reduce; verdict as exit code.
    Check(CheckArgs),
    /// Benchmarks: NCCL collectives (nccl-tests style) or PyTorch DDP.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Why is this node slow: each cause of low GPU bandwidth with its evidence and fix, per pair.
    Explain(ExplainArgs),
    /// What changed between two runs (saved --json reports) and how much of the difference in
    /// bandwidth or step time each change explains: `ddpcheck diff before.json after.json`.
    Diff(DiffArgs),
    /// Predict DDP scaling from this node's measurements and recommend settings.
    Recommend(Box<RecommendArgs>),
    /// Memory first: each wrapper's bytes per GPU (DDP, replicate, fsdp, fsdp-noreshard, hsdp)
    /// against the GPU's memory; with --from, beside torch's peaks.
    Memory(MemoryArgs),
    /// The runs the node's daemon has stored, newest first: `ddpcheck --daemon SOCKET history`.
    History(HistoryArgs),
    /// Run the main flow on a simulated 4xA6000 PHB node through an in-process daemon.
    Demo,
    /// The daemon's configuration: `ddpcheck config check [--config FILE]`.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Several nodes through their daemons: `ddpcheck cluster check --nodes a,b,c`.
    #[command(subcommand)]
    Cluster(ClusterCommand),
}

#[derive(Args, Debug)]
pub struct TopoArgs {
    /// GPUs to show (indices, UUIDs or PCI bus ids, comma-separated). Default: all.
    #[arg(long, default_value = "")]
    pub gpus: String,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The job's GPUs (indices, UUIDs, PCI bus ids). Default: $SLURM_JOB_GPUS, $CUDA_VISIBLE_DEVICES, else all.
    #[arg(long)]
    pub gpus: Option<String>,
    /// Largest all-reduce message (e.g. 256M, 1G).
    #[arg(long, value_parser = parse_message_size, default_value = "256M")]
    pub max_bytes: u64,
    /// Smallest all-reduce message.
    #[arg(long, value_parser = parse_message_size, default_value = "8M")]
    pub min_bytes: u64,
    /// Hard deadline of the NCCL step, seconds.
    #[arg(long, default_value_t = 30.0)]
    pub deadline: f64,
    /// Slurm prolog mode: one line prefixed `ddpcheck:`, exit 0 to run the job, 1 to drain the node.
    #[arg(long)]
    pub prolog: bool,
    /// With --daemon: reuse the daemon's last preflight if it is at most this many seconds old
    /// (a local run keeps no verdicts: without --daemon this is a usage error).
    #[arg(long, value_name = "SECONDS")]
    pub max_age: Option<f64>,
    /// In prolog mode, drain on WARNING too.
    #[arg(long)]
    pub fail_on_warning: bool,
    /// Skip timing each GPU's host↔device copies over its own PCIe link.
    #[arg(long)]
    pub no_host_copies: bool,
    /// Test hook: make the NCCL worker hang, to prove the deadline (gives TIMEOUT).
    #[arg(long, hide = true)]
    pub inject_hang: bool,
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// NCCL collective sweeps with nccl-tests' columns and `# Avg bus bandwidth` (one GPU too);
    /// torch's gloo between CPU ranks with --device cpu.
    Collectives(CollectivesArgs),
    /// PyTorch DDP through torchrun: variants, GPU counts, sweeps, plots.
    Ddp(Box<DdpArgs>),
}

#[derive(Args, Debug)]
pub struct CollectivesArgs {
    /// Collectives: all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce (comma-separated) or `all`.
    #[arg(long, default_value = "all_reduce")]
    pub ops: String,
    /// GPUs to sweep across (`0,1`; one GPU sweeps alone, as nccl-tests' `-g 1`); default all.
    #[arg(long, default_value = "")]
    pub gpus: String,
    #[arg(long, short = 'b', value_parser = parse_message_size, default_value = "4K")]
    pub min_bytes: u64,
    #[arg(long, short = 'e', value_parser = parse_message_size, default_value = "1G")]
    pub max_bytes: u64,
    #[arg(long, short = 'f', default_value_t = 2)]
    pub step_factor: u64,
    #[arg(long, short = 'n', default_value_t = 20)]
    pub iters: u32,
    #[arg(long, short = 'w', default_value_t = 5)]
    pub warmup: u32,
    /// Skip the correctness check.
    #[arg(long)]
    pub no_check: bool,
    /// Skip the in-place runs.
    #[arg(long)]
    pub no_in_place: bool,
    /// Also measure under candidate NCCL settings: candidates separated by ',', variables of one
    /// candidate joined by '+' (NCCL_P2P_LEVEL=SYS,NCCL_P2P_DISABLE=1+NCCL_SHM_DISABLE=1).
    #[arg(long, value_name = "CANDIDATES")]
    pub env_ab: Option<String>,
    /// Hard deadline of each sweep, seconds.
    #[arg(long, default_value_t = 300.0)]
    pub deadline: f64,
    /// The collectives' backend: nccl on GPUs, which this command runs itself (as nccl-tests
    /// does); gloo with --device cpu. torch's gloo and nccl2 on GPUs: `bench ddp --backend`.
    #[arg(long, value_name = "nccl|gloo|nccl2")]
    pub backend: Option<String>,
    /// Where the ranks run: cuda (the node's GPUs, NCCL), or cpu (processes over torch's gloo,
    /// with DDPCHECK_PYTHON's torch: all_reduce, all_gather and reduce_scatter as DDP and FSDP2
    /// call them; CPU figures, never GPU ones). CPU ranks run here, not through the daemon.
    #[arg(long, default_value = "cuda", value_name = "cuda|cpu", value_parser = typed::<RunDevice>())]
    pub device: RunDevice,
    /// With --device cpu: how many CPU ranks (2..=8).
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub ranks: u32,
}

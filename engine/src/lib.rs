//! ddpcheck-engine: what the CLI's local mode and the daemon share. It runs checks and
//! benchmarks on a backend (`runs`), explains low bandwidth (`explain`), takes the node lock
//! (`lock`, in a folder `runtime_dir` checks), defines the runner a command goes through
//! (`runner`: local here, over gRPC in the CLI), gathers what `recommend` rests on (`recommend`,
//! `saved_runs`), reads `--model-config` files (`model_config`) and reads every file a caller
//! names within a size limit (`input`).

pub mod cluster;
pub mod cpu_collectives;
pub mod explain;
pub mod input;
pub mod lock;
pub mod model_config;
pub mod recommend;
pub mod runner;
pub mod runs;
pub mod runtime_dir;
pub mod saved_runs;

pub use ddpcheck_core::params::{or_default, CollectiveParams, ExplainParams, PreflightParams};
pub use input::{read_file, read_file_bytes, read_service_file, read_service_file_bytes};
pub use runner::{LocalRunner, RunError, Runner};
pub use runs::{
    env_label, job_gpus_from_env, local_hostname, make_backend, nccl_env_from_process, now_rfc3339,
    parse_env_ab, run_bench_collectives, run_bench_ddp, run_preflight, run_topo, unix_now,
    UsageError, TOOL_VERSION,
};

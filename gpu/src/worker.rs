//! The hidden `worker` subcommand: runs NCCL collectives in a child process. (Skeleton.)

/// Entry point of `ddpcheck worker` / `ddpcheckd worker`; returns the process exit code.
pub fn main_from_args(_args: &[String]) -> i32 {
    eprintln!("worker not implemented");
    3
}

//! `ddpcheck cluster`: the subcommand's arguments and dispatch, and what its two modes share
//! (a run's settings, expectation and per-node job). `check` runs one all-reduce across nodes
//! through their daemons and isolates slow or dead nodes; `srun` runs it without daemons, one
//! task per node under srun.

mod check;
mod srun;
mod srun_error;

use std::time::Duration;

use clap::{Args, Subcommand};
use ddpcheck_core::capacity::{Network, UnknownNetwork};
use ddpcheck_core::cluster::ClusterJob;

use crate::flag_values::parse_message_size;
use crate::global_args::GlobalArgs;
use ddpcheck_engine::RunError;

pub use check::ClusterCheckArgs;
pub use srun::ClusterSrunArgs;

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// All-reduce across nodes through their daemons; names slow or silent nodes (exit = verdict).
    Check(ClusterCheckArgs),
    /// One task per node under Slurm, no daemons: `srun --ntasks-per-node=1 ddpcheck cluster srun` (exit = verdict). With --json, give srun `--output=FILE-%t.json`: srun splits lines longer than 1 KiB.
    Srun(ClusterSrunArgs),
}

/// What one cluster run measures and against what: shared by `check` and `srun`.
#[derive(Args, Debug)]
pub struct ClusterRunArgs {
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u32,
    /// The network between nodes: ndr400, hdr200, roce100, tcp10 (sets the expectation).
    #[arg(long, default_value = "ndr400")]
    pub network: String,
    /// NICs (rails) per node: the expectation scales with them.
    #[arg(long, default_value_t = 1)]
    pub nics_per_node: u32,
    #[arg(long, value_parser = parse_message_size, default_value = "8M")]
    pub min_bytes: u64,
    #[arg(long, value_parser = parse_message_size, default_value = "256M")]
    pub max_bytes: u64,
    #[arg(long, default_value_t = 20)]
    pub iters: u32,
    /// Deadline of each stage on each node (connect, rendezvous, all-reduce), seconds. A node
    /// that does not answer within it is reported (and left out of `check`'s next runs).
    #[arg(long, default_value_t = 60.0)]
    pub stage_deadline: f64,
}

impl ClusterRunArgs {
    /// The network and the stage deadline, checked (usage errors before any work).
    fn settings(&self) -> Result<(Network, Duration), RunError> {
        let network: Network = self
            .network
            .parse()
            .map_err(|e: UnknownNetwork| RunError::Usage(e.to_string()))?;
        if !(self.stage_deadline.is_finite()
            && self.stage_deadline > 0.0
            && self.stage_deadline <= 3600.0)
        {
            return Err(RunError::Usage(format!(
                "--stage-deadline {} outside (0, 3600] seconds",
                self.stage_deadline
            )));
        }
        if self.nics_per_node == 0 || self.nics_per_node > 64 {
            return Err(RunError::Usage("--nics-per-node outside 1..=64".into()));
        }
        Ok((network, Duration::from_secs_f64(self.stage_deadline)))
    }

    /// Node `rank`'s part of a run of `world_nodes` nodes.
    fn job(&self, run_id: String, rank: u32, world_nodes: u32, stage: Duration) -> ClusterJob {
        ClusterJob {
            run_id,
            rank,
            world_nodes,
            gpus_per_node: self.gpus_per_node,
            min_bytes: self.min_bytes,
            max_bytes: self.max_bytes,
            iters: self.iters,
            deadline: stage,
        }
    }
}

/// Slack past a stage's deadline for the daemon's own answer before we stop waiting.
const GRACE: Duration = Duration::from_secs(3);

pub fn run(cli: &GlobalArgs, c: &ClusterCommand) -> Result<i32, RunError> {
    match c {
        ClusterCommand::Check(a) => check::run_check(cli, a),
        ClusterCommand::Srun(a) => srun::run_srun(cli, a),
    }
}

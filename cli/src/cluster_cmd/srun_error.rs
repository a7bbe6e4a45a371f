//! Why `cluster srun` cannot start: the Slurm step it reads from the environment, or the root's
//! host that `scontrol` could not name. Each is a usage error in one line.

/// How `cluster srun` is started, for the refusals that say so.
pub const SRUN_LINE: &str = "srun --ntasks-per-node=1 ddpcheck cluster srun ...";

/// The environment is not that of one task per node of an srun step of two nodes or more.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    #[error("cluster srun runs as the tasks of a Slurm step (SLURM_PROCID, SLURM_STEP_ID and SLURM_JOB_ID are not all set): start it as `{SRUN_LINE}`")]
    NotUnderSrun,
    #[error("{name}={value:?} is not a number Slurm would give")]
    NotANumber { name: &'static str, value: String },
    #[error("this is Slurm's special step {0} (a batch script or allocation shell), not a step of srun: start it as `{SRUN_LINE}`")]
    SpecialStep(u64),
    #[error("{0} is not set: start it as `{SRUN_LINE}`")]
    Unset(&'static str),
    #[error("{tasks} tasks on {nodes} node(s): cluster srun needs exactly one task per node (`{SRUN_LINE}`)")]
    TasksPerNode { tasks: u32, nodes: u32 },
    #[error("the step has {0} node(s): a cluster all-reduce needs at least 2 (srun -N2 or more, --ntasks-per-node=1)")]
    TooFewNodes(u32),
    #[error("SLURM_PROCID {rank} outside the step's {nodes} tasks")]
    Rank { rank: u32, nodes: u32 },
}

/// The step's first host could not be read from its node list.
#[derive(Debug, thiserror::Error)]
pub enum HostlistError {
    #[error("cannot expand the step's node list {list:?} with `{program} show hostnames`: {why}; give the root with --root HOST:PORT")]
    Expand {
        list: String,
        program: String,
        why: ScontrolError,
    },
    #[error(
        "`{program} show hostnames {list}` named no host; give the root with --root HOST:PORT"
    )]
    NoHost { list: String, program: String },
}

/// Why `scontrol` gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum ScontrolError {
    #[error("it is not installed here")]
    NotInstalled,
    #[error("{0}")]
    Spawn(std::io::Error),
    /// Stopped past its bound, in seconds.
    #[error("it did not answer within {0:.0} s")]
    Timeout(f64),
    /// `status` as the supervisor words it; `why`: the first line of its stderr.
    #[error("it failed ({status}): {why}")]
    Failed { status: String, why: String },
    #[error(transparent)]
    Supervise(Box<ddpcheck_gpu::supervise::SuperviseError>),
}

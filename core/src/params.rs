//! What a caller asks a preflight or a collective benchmark to do: the parameters the CLI
//! takes from its flags, the API carries (`ddpcheck_proto::convert`) and the engine runs with.
//! They live here, below proto and the engine, so that both can name them.

use std::time::Duration;

use crate::collective::Collective;

/// Zero (an unset protobuf field, a flag left out) means the default.
pub fn or_default<T: PartialEq + Default>(given: T, default: T) -> T {
    if given == T::default() {
        default
    } else {
        given
    }
}

/// Preflight parameters as a user or API caller gives them; zero means the default.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PreflightParams {
    pub gpus: String,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub iters: u32,
    pub warmup_iters: u32,
    pub deadline: Option<Duration>,
    pub inject_hang: bool,
    /// Skip the host↔device copies of each GPU (`--no-host-copies`).
    pub skip_host_copies: bool,
    /// Where another test holds the node: none answers BUSY at once; some waits up to this
    /// long (a daemon joins the same preflight in progress), then answers TIMEOUT (prologs).
    pub wait_if_busy: Option<Duration>,
}

/// A collective benchmark as the user asks for it.
#[derive(Clone, Debug, PartialEq)]
pub struct CollectiveParams {
    pub ops: Vec<Collective>,
    pub gpus: String,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub step_factor: u64,
    pub iters: u32,
    pub warmup_iters: u32,
    pub in_place: bool,
    pub check: bool,
    pub deadline: Duration,
    /// Candidate environments measured after the current one (`--env-ab`).
    pub env_ab: Vec<Vec<(String, String)>>,
}

impl Default for CollectiveParams {
    fn default() -> Self {
        CollectiveParams {
            ops: vec![Collective::AllReduce],
            gpus: String::new(),
            min_bytes: 4 << 10,
            max_bytes: 1 << 30,
            step_factor: 2,
            iters: 20,
            warmup_iters: 5,
            in_place: true,
            check: true,
            deadline: Duration::from_secs(300),
            env_ab: Vec::new(),
        }
    }
}

/// What a caller asks of `explain`: each GPU pair measured with a short all-reduce sweep and,
/// with `ab`, again under each fix that is an NCCL variable.
#[derive(Clone, Debug, PartialEq)]
pub struct ExplainParams {
    /// The GPUs (indices, UUIDs, bus ids); empty for all.
    pub gpus: String,
    /// Largest message of each pair's sweep; the sweep starts at a quarter of it.
    pub max_bytes: u64,
    /// Deadline of each pair's sweep.
    pub deadline: Duration,
    /// Measure each env fix again (A/B).
    pub ab: bool,
}

impl Default for ExplainParams {
    fn default() -> Self {
        ExplainParams {
            gpus: String::new(),
            max_bytes: 256 << 20,
            deadline: Duration::from_secs(60),
            ab: false,
        }
    }
}

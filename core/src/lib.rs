//! ddpcheck-core: the domain model and all judgement. No I/O, no async, no GPU libraries.
//!
//! Backends (real GPUs in `ddpcheck-gpu`, simulated nodes in `ddpcheck-sim`) measure and fill
//! these types; the functions here judge them into findings and a verdict.

pub mod backend;
pub mod bounded;
pub mod caller_env;
pub mod capacity;
pub mod caveats;
pub mod cluster;
pub mod collective;
pub mod ddp;
pub mod diff;
pub mod expect;
pub mod explain;
pub mod finding;
pub mod full_backend;
pub mod hostcopy;
pub mod memory;
pub mod node_gpus;
pub mod num;
pub mod params;
pub mod preflight;
pub mod probe_error;
pub mod recommend;
pub mod report;
pub mod saved;
pub mod step_time;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod topology;
pub mod units;
pub mod unknown_name;
pub mod verdict;

pub use backend::{BackendKind, NodeBackend};
pub use finding::{Evidence, Finding, Severity, Subject};
pub use full_backend::FullBackend;
pub use probe_error::ProbeError;
pub use verdict::Verdict;

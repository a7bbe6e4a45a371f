//! NCCL collectives: the parent side that starts and supervises the worker. (Skeleton.)

use ddpcheck_core::backend::{CollectiveRequest, CollectiveRun, Progress};
use ddpcheck_core::ProbeError;

use crate::RealConfig;

pub fn run_collectives(
    _cfg: &RealConfig,
    _req: &CollectiveRequest,
    _progress: &mut dyn FnMut(Progress),
) -> Result<CollectiveRun, ProbeError> {
    Err(ProbeError::Unavailable("NCCL worker not implemented".into()))
}

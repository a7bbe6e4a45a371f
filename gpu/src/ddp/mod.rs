//! DDP benchmarks through the node's own PyTorch (torchrun). (Skeleton.)

use ddpcheck_core::backend::Progress;
use ddpcheck_core::ddp::{DdpRequest, DdpResult};
use ddpcheck_core::ProbeError;

use crate::RealConfig;

pub fn run_ddp(
    _cfg: &RealConfig,
    _req: &DdpRequest,
    _progress: &mut dyn FnMut(Progress),
) -> Result<Vec<DdpResult>, ProbeError> {
    Err(ProbeError::Unavailable("DDP runner not implemented".into()))
}

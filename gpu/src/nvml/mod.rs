//! NVML probe: inventory, health, PCIe and pair topology on a dedicated thread with deadlines.
//! (Skeleton: to be implemented.)

use std::time::Duration;

use ddpcheck_core::gpu::{GpuInfo, NodeInventory};
use ddpcheck_core::topology::TopologyMatrix;
use ddpcheck_core::ProbeError;

pub struct NvmlProbe {
    deadline: Duration,
}

impl NvmlProbe {
    pub fn start(deadline: Duration) -> Self {
        NvmlProbe { deadline }
    }
    pub fn inventory(&self) -> Result<NodeInventory, ProbeError> {
        Err(ProbeError::Unavailable(format!("NVML probe not implemented (deadline {:?})", self.deadline)))
    }
    pub fn topology(&self, _gpus: &[GpuInfo]) -> Result<TopologyMatrix, ProbeError> {
        Err(ProbeError::Unavailable("NVML probe not implemented".into()))
    }
}

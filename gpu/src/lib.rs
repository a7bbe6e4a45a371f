//! ddpcheck-gpu: the real backends. NVML for inventory, health and topology (on a dedicated
//! thread with deadlines); NCCL collectives and PyTorch DDP in supervised child processes.
//!
//! Nothing here links a GPU library at build time: NVML, CUDA and NCCL are opened at run time,
//! so a node without a driver gets a verdict, never a crash (invariant 7).

pub mod children;
pub mod cluster;
pub mod ddp;
pub mod hostcopy;
pub mod int;
pub mod nccl;
pub mod nvml;
pub mod platform;
pub mod supervise;
pub mod worker;

use std::path::PathBuf;
use std::time::Duration;

use ddpcheck_core::backend::{CollectiveRequest, CollectiveRun, Progress};
use ddpcheck_core::cluster::{ClusterJob, ClusterMember, NodeResult};
use ddpcheck_core::ddp::{DdpRequest, DdpResult};
use ddpcheck_core::explain::platform::{
    GpuFabricState, LinkReading, PlatformFacts, PlatformReader,
};
use ddpcheck_core::hostcopy::{CopyRequest, HostCopier, HostCopyRun};
use ddpcheck_core::node_gpus::{GpuInfo, NodeInventory};
use ddpcheck_core::topology::TopologyMatrix;
use ddpcheck_core::{BackendKind, NodeBackend, ProbeError};

/// Settings of the real backend.
#[derive(Clone, Debug)]
pub struct RealConfig {
    /// Deadline of each NVML call (invariant 2).
    pub nvml_deadline: Duration,
    /// Our own executable, started as `EXE worker` for NCCL work (invariant 1).
    pub worker_exe: PathBuf,
    /// Explicit libnccl path (`DDPCHECK_NCCL_LIB`), else the search order of [`nccl::loader`].
    pub nccl_lib: Option<PathBuf>,
    /// Python launcher for DDP benchmarks (`python3` by default, run as `-m torch.distributed.run`).
    pub python: String,
    /// Address other nodes reach this one at in cluster runs (`DDPCHECK_CLUSTER_ADDRESS`);
    /// default: what the host name resolves to (see [`cluster::advertised_host`]).
    pub cluster_address: Option<String>,
}

impl Default for RealConfig {
    fn default() -> Self {
        RealConfig {
            nvml_deadline: Duration::from_secs(5),
            worker_exe: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("ddpcheck")),
            nccl_lib: std::env::var_os("DDPCHECK_NCCL_LIB").map(PathBuf::from),
            python: std::env::var("DDPCHECK_PYTHON").unwrap_or_else(|_| "python3".into()),
            cluster_address: std::env::var("DDPCHECK_CLUSTER_ADDRESS").ok(),
        }
    }
}

/// The node's real GPUs.
pub struct RealBackend {
    config: RealConfig,
    nvml: nvml::NvmlProbe,
}

impl RealBackend {
    pub fn new(config: RealConfig) -> Self {
        let nvml = nvml::NvmlProbe::start(config.nvml_deadline);
        RealBackend { config, nvml }
    }

    pub fn config(&self) -> &RealConfig {
        &self.config
    }
}

impl NodeBackend for RealBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Real
    }

    fn label(&self) -> String {
        "real".into()
    }

    fn inventory(&self) -> Result<NodeInventory, ProbeError> {
        self.nvml.inventory()
    }

    fn topology(&self, gpus: &[GpuInfo]) -> Result<TopologyMatrix, ProbeError> {
        self.nvml.topology(gpus)
    }

    fn collectives(
        &self,
        req: &CollectiveRequest,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<CollectiveRun, ProbeError> {
        nccl::run_collectives(&self.config, req, progress)
    }

    fn ddp(
        &self,
        req: &DdpRequest,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Vec<DdpResult>, ProbeError> {
        ddp::run_ddp(&self.config, req, progress)
    }

    fn ddp_outcome(
        &self,
        req: &DdpRequest,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<ddpcheck_core::backend::DdpOutcome, ProbeError> {
        ddp::run_ddp_outcome(&self.config, req, progress)
    }
}

impl HostCopier for RealBackend {
    fn host_copies(
        &self,
        req: &CopyRequest,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<HostCopyRun, ProbeError> {
        hostcopy::run_host_copies(&self.config, req, progress)
    }
}

impl PlatformReader for RealBackend {
    fn platform(&self, gpus: &[GpuInfo]) -> Result<PlatformFacts, ProbeError> {
        let root = platform_root();
        let ids: Vec<String> = gpus.iter().map(|g| g.pci_bus_id.clone()).collect();
        let mut facts = platform::read(&root, &ids);
        // The fabric registration is NVML's; without NVML it stays unread (`None`).
        match self.nvml.fabric(gpus) {
            Ok(states) => facts.fabric.gpu_state = GpuFabricState::of_node(states),
            Err(e) => tracing::debug!(error = %e, "no fabric state from NVML"),
        }
        Ok(facts)
    }

    fn link_state(&self, gpus: &[GpuInfo]) -> Result<Vec<LinkReading>, ProbeError> {
        let ids: Vec<String> = gpus.iter().map(|g| g.pci_bus_id.clone()).collect();
        Ok(platform::links(&platform_root(), &ids))
    }

    fn fabric_state(&self, gpus: &[GpuInfo]) -> Result<Option<GpuFabricState>, ProbeError> {
        Ok(GpuFabricState::of_node(self.nvml.fabric(gpus)?))
    }
}

impl ClusterMember for RealBackend {
    fn cluster_prepare(&self, job: &ClusterJob) -> Result<Vec<u8>, ProbeError> {
        cluster::prepare(&self.config, job)
    }

    fn cluster_join(
        &self,
        job: &ClusterJob,
        rendezvous: &[Vec<u8>],
    ) -> Result<NodeResult, ProbeError> {
        cluster::join(&self.config, job, rendezvous)
    }
}

/// `/`, or the tree DDPCHECK_PLATFORM_ROOT names (a fixture, a chroot) for the sysfs readers.
fn platform_root() -> PathBuf {
    std::env::var_os("DDPCHECK_PLATFORM_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"))
}

//! `SimBackend`: a simulated node from a profile and faults, behind core's `NodeBackend`.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ddpcheck_core::backend::{CollectiveRequest, CollectiveRun, Progress};
use ddpcheck_core::cluster::{ClusterJob, ClusterMember, NodeResult};
use ddpcheck_core::collective::{size_ladder, Collective, Sample, Sweep, Timing};
use ddpcheck_core::ddp::{DdpRequest, DdpResult};
use ddpcheck_core::explain::platform::{
    GpuFabricState, LinkReading, PlatformFacts, PlatformReader,
};
use ddpcheck_core::explain::Transport;
use ddpcheck_core::hostcopy::{CopyRequest, HostCopier, HostCopyRun};
use ddpcheck_core::node_gpus::{
    ComputeProcess, GpuHealth, GpuInfo, NodeInventory, PcieLink, ProbeState,
};
use ddpcheck_core::num::len_u32;
use ddpcheck_core::topology::{GpuRef, LinkClass, P2pCaps, P2pReason, P2pStatus, TopologyMatrix};
use ddpcheck_core::{BackendKind, NodeBackend, ProbeError};

use crate::catalog_error::CatalogError;
use crate::fault::{self, Fault, FAULTS};
use crate::profile::{catalog, Catalog, P2p, Profile};
use crate::timing::{degraded_gen, jitter, Fabric};

/// Why a `--sim` spec was refused. The CLI turns it into a usage error (exit 64).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error("empty sim spec: expected PROFILE[+FAULT...]; profiles: {}", .profiles.join(", "))]
    Empty { profiles: Vec<String> },
    #[error("unknown sim profile {name:?}; profiles: {}", .valid.join(", "))]
    UnknownProfile { name: String, valid: Vec<String> },
    #[error("unknown sim fault {name:?}; faults: {}", .valid.join(", "))]
    UnknownFault { name: String, valid: Vec<String> },
    /// The embedded profile data is broken (a build defect, never user input).
    #[error("sim profile data is unusable: {0}")]
    Data(#[from] CatalogError),
}

/// A simulated node. Cheap to build; holds only references into the static catalog.
#[derive(Clone)]
pub struct SimBackend {
    catalog: &'static Catalog,
    profile: &'static Profile,
    faults: Vec<Fault>,
    /// A collective or DDP run has started: the links have trained up under load. The sim
    /// does not model the idle timeout after which a real link drops again.
    loaded: Arc<AtomicBool>,
}

impl fmt::Debug for SimBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimBackend")
            .field("profile", &self.profile.name)
            .field("faults", &self.faults)
            .finish()
    }
}

impl SimBackend {
    /// Parses `PROFILE[+FAULT...]` (an optional `sim:` prefix is accepted, so a label parses
    /// back). Names are case-insensitive; a repeated fault counts once.
    pub fn parse(spec: &str) -> Result<SimBackend, SimError> {
        let cat = catalog()?;
        let spec = spec.trim();
        let spec = spec.strip_prefix("sim:").unwrap_or(spec);
        let mut parts = spec.split('+').map(str::trim);
        let name = parts.next().unwrap_or("");
        let valid_profiles =
            || -> Vec<String> { cat.profiles.iter().map(|p| p.name.clone()).collect() };
        if name.is_empty() {
            return Err(SimError::Empty {
                profiles: valid_profiles(),
            });
        }
        let profile = cat.profile(name).ok_or_else(|| SimError::UnknownProfile {
            name: name.to_string(),
            valid: valid_profiles(),
        })?;
        let mut faults = Vec::new();
        for part in parts {
            let f = part.parse::<Fault>().map_err(|_| SimError::UnknownFault {
                name: part.to_string(),
                valid: FAULTS.iter().map(|(_, n, _)| n.to_string()).collect(),
            })?;
            if !faults.contains(&f) {
                faults.push(f);
            }
        }
        Ok(SimBackend {
            catalog: cat,
            profile,
            faults,
            loaded: Arc::new(AtomicBool::new(false)),
        })
    }

    pub fn profile_name(&self) -> &str {
        &self.profile.name
    }

    pub fn faults(&self) -> &[Fault] {
        &self.faults
    }

    fn has(&self, f: Fault) -> bool {
        self.faults.contains(&f)
    }

    fn slot_of(&self, pci_bus_id: &str) -> Option<usize> {
        self.profile
            .gpus
            .iter()
            .position(|s| s.pci_bus_id == pci_bus_id)
    }

    fn gpu_state(&self, i: usize) -> ProbeState {
        if self.has(Fault::GpuLost) && i == fault::LOST_GPU {
            ProbeState::Lost
        } else if self.has(Fault::StuckNvml) && i == fault::STUCK_GPU {
            ProbeState::Stuck
        } else {
            ProbeState::Ok
        }
    }

    fn gpu_info(&self, i: usize) -> GpuInfo {
        let slot = &self.profile.gpus[i];
        let model = self.catalog.gpu_model(&self.profile.gpu_model);
        let name = model.map(|m| m.name.clone()).unwrap_or_default();
        let memory = model.map(|m| m.memory_total_bytes).unwrap_or(0);
        let state = self.gpu_state(i);
        let mut info = GpuInfo {
            index: len_u32(i),
            uuid: slot.uuid.clone(),
            pci_bus_id: slot.pci_bus_id.clone(),
            name,
            memory_total_bytes: memory,
            pcie: None,
            health: GpuHealth::default(),
            processes: Vec::new(),
            state,
        };
        // A stuck or lost GPU answers nothing beyond what enumeration already knew.
        let Some(m) = model.filter(|_| state == ProbeState::Ok) else {
            return info;
        };
        info.pcie = Some(self.pcie_link(i, m.pcie_gen, m.pcie_width));
        let ecc_fault = self.has(Fault::Ecc) && i == fault::ECC_GPU;
        let ecc_on = m.ecc_enabled || ecc_fault;
        info.health = GpuHealth {
            ecc_enabled: Some(ecc_on),
            ecc_uncorrected_volatile: ecc_on.then_some(if ecc_fault {
                fault::ECC_UNCORRECTED
            } else {
                0
            }),
            ecc_corrected_volatile: ecc_on.then_some(0),
            remapped_rows_pending: m.row_remapping.then_some(false),
            remapped_rows_failure: m.row_remapping.then_some(false),
            retired_pages_pending: (!m.row_remapping).then_some(false),
            xid_errors: Vec::new(),
            throttle_reasons: vec!["gpu_idle".into()],
            temperature_c: Some(m.idle_temperature_c),
            power_w: Some(m.idle_power_w),
            sm_clock_mhz: Some(m.idle_sm_clock_mhz),
            persistence_mode: Some(true),
            compute_mode: Some("default".into()),
            mig_enabled: if self.has(Fault::Mig) && i == fault::MIG_GPU {
                Some(true)
            } else {
                m.mig_capable.then_some(false)
            },
            nvlinks_active: Some(self.nvlinks(i)),
            // The profile's links are the links the GPU has, as NVML answers for them.
            nvlinks_present: (self.profile.nvlinks_active > 0)
                .then_some(self.profile.nvlinks_active),
        };
        if self.has(Fault::Busy) && i == fault::BUSY_GPU {
            info.processes.push(ComputeProcess {
                pid: fault::BUSY_PID,
                name: Some(fault::BUSY_NAME.into()),
                used_memory_bytes: Some(fault::BUSY_MEMORY_BYTES),
            });
        }
        info
    }

    /// NVLinks up on slot `i` (nvlink-down leaves GPU 1 fewer).
    /// Slot `i`'s link now. Current = max for a healthy link (as it trains under load), except
    /// that idle-downclock idles it at gen1 until a collective has run.
    fn pcie_link(&self, i: usize, gen_max: u32, width_max: u32) -> PcieLink {
        let (mut gen, mut width) = (gen_max, width_max);
        if self.has(Fault::DegradedPcie) && i == fault::DEGRADED_GPU {
            gen = degraded_gen(gen_max);
            width = fault::DEGRADED_WIDTH.min(width_max);
        }
        if self.has(Fault::IdleDownclock) && !self.loaded.load(Ordering::SeqCst) {
            gen = fault::IDLE_GEN;
        }
        PcieLink {
            gen_current: gen,
            gen_max,
            width_current: width,
            width_max,
        }
    }

    fn nvlinks(&self, i: usize) -> u32 {
        let all = self.profile.nvlinks_active;
        if self.has(Fault::NvlinkDown) && i == fault::NVLINK_DOWN_GPU {
            fault::nvlinks_left(all)
        } else {
            all
        }
    }

    /// The class of the pair of slots (i, j): the profile's, narrowed by nvlink-down and
    /// cross-numa.
    fn pair_link(&self, i: usize, j: usize) -> LinkClass {
        match self.profile.link_class() {
            LinkClass::Nv(_) => LinkClass::Nv(self.nvlinks(i).min(self.nvlinks(j))),
            pcie => {
                let (a, b) = (
                    crate::platform::numa_of(self.profile, &self.faults, i),
                    crate::platform::numa_of(self.profile, &self.faults, j),
                );
                if a != b {
                    LinkClass::Sys
                } else {
                    pcie
                }
            }
        }
    }

    /// NVML's status of each capability between two GPUs of the node: the profile's, or what a
    /// patched driver reports (p2p-patched: P2P OK over PCIe); `None` where the profile gives
    /// only the read status.
    fn p2p_caps(&self) -> Option<P2pCaps> {
        let mut caps = self.profile.p2p_status.as_ref().map(|s| s.caps())?;
        if self.has(Fault::P2pPatched) {
            (caps.read, caps.write, caps.atomics) = (P2pReason::Ok, P2pReason::Ok, P2pReason::Ok);
        }
        Some(caps)
    }

    /// NVML's P2P read status between two GPUs of the node.
    fn p2p_read(&self) -> P2pStatus {
        match self.p2p_caps() {
            Some(c) => c.read.summary(),
            None if self.has(Fault::P2pPatched) || self.profile.p2p == P2p::Ok => P2pStatus::Ok,
            None => P2pStatus::NotSupported,
        }
    }

    /// Whether any pair of `gpus` goes P2P over PCIe under `env`, as NCCL picks it.
    fn p2p_over_pcie(&self, gpus: &[usize], env: &[(String, String)]) -> bool {
        let env: std::collections::BTreeMap<String, String> = env.iter().cloned().collect();
        gpus.iter()
            .flat_map(|&i| gpus.iter().filter(move |&&j| j > i).map(move |&j| (i, j)))
            .map(|(i, j)| self.pair_link(i, j))
            .filter(|l| !l.is_nvlink())
            .any(|l| {
                ddpcheck_core::explain::transport::predicted(l, Some(self.p2p_read()), &env)
                    == Transport::P2p
            })
    }

    /// The transport a real worker would read from NCCL's log, from the environment and the
    /// pair class (NCCL's own choice, as core predicts it).
    fn transport(&self, gpus: &[usize], env: &[(String, String)]) -> Option<String> {
        let env: std::collections::BTreeMap<String, String> = env.iter().cloned().collect();
        let worst = gpus
            .iter()
            .flat_map(|&i| gpus.iter().filter(move |&&j| j > i).map(move |&j| (i, j)))
            .map(|(i, j)| {
                let p2p = (self.p2p_read() == P2pStatus::Ok).then_some(P2pStatus::Ok);
                ddpcheck_core::explain::transport::predicted(self.pair_link(i, j), p2p, &env)
            })
            .max()?;
        Some(
            match worst {
                Transport::P2p => "P2P/CUMEM",
                Transport::Shm => "SHM/direct",
                Transport::NetIb => "NET/IB",
                Transport::NetSocket => "NET/Socket",
            }
            .to_string(),
        )
    }

    /// Profile indices of the requested GPUs (all of them when none is named).
    fn resolve(&self, gpus: &[GpuRef]) -> Result<Vec<usize>, ProbeError> {
        if gpus.is_empty() {
            return Ok((0..self.profile.gpus.len()).collect());
        }
        let mut out = Vec::with_capacity(gpus.len());
        for g in gpus {
            let i = self
                .profile
                .gpus
                .iter()
                .position(|s| s.uuid == g.uuid)
                .ok_or_else(|| {
                    ProbeError::Invalid(format!(
                        "GPU {} is not on simulated node {}",
                        g.uuid, self.profile.name
                    ))
                })?;
            if out.contains(&i) {
                return Err(ProbeError::Invalid(format!("GPU {} named twice", g.uuid)));
            }
            out.push(i);
        }
        Ok(out)
    }

    /// The faults that stop GPU work before it starts, in the order a real run meets them.
    fn refuse(&self, gpus: &[usize]) -> Result<(), ProbeError> {
        if self.has(Fault::Busy) && gpus.contains(&fault::BUSY_GPU) {
            let uuid = &self.profile.gpus[fault::BUSY_GPU].uuid;
            return Err(ProbeError::Busy(format!(
                "GPU {uuid} runs a foreign compute process (pid {} {})",
                fault::BUSY_PID,
                fault::BUSY_NAME
            )));
        }
        for &i in gpus {
            let uuid = &self.profile.gpus[i].uuid;
            match self.gpu_state(i) {
                ProbeState::Lost => {
                    return Err(ProbeError::GpuFailed(format!(
                        "GPU {uuid} is lost: CUDA cannot open it"
                    )))
                }
                ProbeState::Stuck => {
                    return Err(ProbeError::GpuFailed(format!(
                        "GPU {uuid} does not answer (NVML stuck): CUDA initialisation failed"
                    )))
                }
                ProbeState::Ok => {}
            }
        }
        Ok(())
    }

    fn sweep(
        &self,
        fabric: &Fabric<'_>,
        op: Collective,
        req: &CollectiveRequest,
        corrupt: bool,
        progress: &mut dyn FnMut(Progress),
    ) -> Sweep {
        let sizes = size_ladder(req.min_bytes, req.max_bytes, req.step_factor);
        let ranks = fabric.ranks;
        let wrong_fault = (self.has(Fault::WrongResult) || corrupt) && op == Collective::AllReduce;
        let mut samples = Vec::with_capacity(sizes.len());
        for (n, &bytes) in sizes.iter().enumerate() {
            let count = bytes / 4;
            let wrong = req.check.then_some(if wrong_fault {
                (count / fault::WRONG_PER_ELEMENTS).max(1)
            } else {
                0
            });
            let base = fabric.time_us(op, bytes);
            let timing = |place: &str| {
                let key = format!("{}|{op}|{ranks}|{bytes}|{place}", self.profile.name);
                Timing::from_time(op, ranks, bytes, base * (1.0 + jitter(&key)), wrong)
            };
            samples.push(Sample {
                bytes,
                count,
                dtype: "float".into(),
                out_of_place: timing("out"),
                in_place: req.in_place.then(|| timing("in")),
            });
            progress(Progress {
                stage: op.name().into(),
                done: len_u32(n) + 1,
                total: len_u32(sizes.len()),
                message: format!("{bytes} bytes"),
            });
        }
        Sweep {
            op,
            ranks,
            redop: "sum".into(),
            root: if op.has_root() { 0 } else { -1 },
            samples,
        }
    }
}

impl FromStr for SimBackend {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SimBackend::parse(s)
    }
}

impl NodeBackend for SimBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Sim
    }

    fn label(&self) -> String {
        let mut s = format!("sim:{}", self.profile.name);
        for f in &self.faults {
            s.push('+');
            s.push_str(f.name());
        }
        s
    }

    fn inventory(&self) -> Result<NodeInventory, ProbeError> {
        Ok(NodeInventory {
            hostname: format!("sim-{}", self.profile.name),
            driver_version: Some(self.profile.driver_version.clone()),
            cuda_driver_version: Some(self.profile.cuda_driver_version.clone()),
            gpus: (0..self.profile.gpus.len())
                .map(|i| self.gpu_info(i))
                .collect(),
        })
    }

    fn topology(&self, gpus: &[GpuInfo]) -> Result<TopologyMatrix, ProbeError> {
        let refs: Vec<GpuRef> = gpus.iter().map(GpuInfo::gpu_ref).collect();
        let idx = self.resolve(&refs)?;
        let n = idx.len();
        let mut links: Vec<Vec<LinkClass>> = (0..n)
            .map(|i| (0..n).map(|j| self.pair_link(idx[i], idx[j])).collect())
            .collect();
        let caps = self.p2p_caps();
        let mut p2p = vec![vec![P2pStatus::Ok; n]; n];
        let mut p2p_status = vec![vec![P2pCaps::all(P2pReason::Ok); n]; n];
        for i in 0..n {
            links[i][i] = LinkClass::X;
            for j in 0..n {
                let lost = self.gpu_state(idx[i]) == ProbeState::Lost
                    || self.gpu_state(idx[j]) == ProbeState::Lost;
                p2p_status[i][j] = match caps {
                    _ if lost => P2pCaps::all(P2pReason::Unknown),
                    Some(c) if i != j => c,
                    _ => P2pCaps::all(P2pReason::Ok),
                };
                p2p[i][j] = if lost {
                    P2pStatus::Unknown
                } else if i == j {
                    P2pStatus::Ok
                } else {
                    self.p2p_read()
                };
            }
        }
        if caps.is_none() {
            p2p_status.clear();
        }
        Ok(TopologyMatrix {
            gpus: refs,
            links,
            p2p,
            p2p_status,
            cpu_affinity: idx
                .iter()
                .map(|&i| Some(self.profile.gpus[i].cpus.clone()))
                .collect(),
            numa_affinity: idx
                .iter()
                .map(|&i| Some(crate::platform::numa_of(self.profile, &self.faults, i)))
                .collect(),
        })
    }

    fn collectives(
        &self,
        req: &CollectiveRequest,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<CollectiveRun, ProbeError> {
        req.validate()?;
        let gpus = self.resolve(&req.gpus)?;
        self.refuse(&gpus)?;
        if self.has(Fault::Hang) || req.inject_hang {
            return Err(crate::stop::hang(
                req.deadline.min(Duration::from_secs(3600)).as_secs_f64(),
                "collective sweep",
            ));
        }
        if self.has(Fault::NoFabricManager) && self.profile.nvswitches > 0 {
            return Err(ProbeError::GpuFailed(
                "CUDA error 802 (system not yet initialized): the NVSwitch fabric is not ready; is nvidia-fabricmanager running?".into(),
            ));
        }
        let env = crate::worker_env::effective_env(&req.env);
        let over_p2p = self.p2p_over_pcie(&gpus, &env);
        if self.has(Fault::P2pHang) && over_p2p {
            return Err(crate::stop::hang(
                req.deadline.min(Duration::from_secs(3600)).as_secs_f64(),
                "collective sweep",
            ));
        }
        let corrupt = self.has(Fault::P2pPatched) && over_p2p;
        self.loaded.store(true, Ordering::SeqCst);
        let fabric = Fabric::new(self.catalog, self.profile, &self.faults, &env, &gpus);
        progress(Progress {
            stage: "nccl_init".into(),
            done: 0,
            total: len_u32(req.ops.len()),
            message: format!(
                "simulated NCCL {} over {} ranks, regime {}",
                self.profile.nccl_version, fabric.ranks, fabric.regime.name
            ),
        });
        let sweeps = req
            .ops
            .iter()
            .map(|&op| self.sweep(&fabric, op, req, corrupt, progress))
            .collect();
        Ok(CollectiveRun {
            sweeps,
            nccl_version: Some(self.profile.nccl_version.clone()),
            nccl_library: None,
            transport: req
                .record_transport
                .then(|| self.transport(&gpus, &env))
                .flatten(),
            cuda_runtime_version: Some(self.profile.cuda_runtime_version.clone()),
            // Reported, not slept: simulated time is not wall time.
            init_seconds: self.profile.nccl_init_seconds,
            env,
        })
    }

    fn ddp(
        &self,
        req: &DdpRequest,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Vec<DdpResult>, ProbeError> {
        req.validate(self.profile.gpus.len())?;
        let widest = req.world_sizes.iter().copied().max().unwrap_or(1) as usize;
        let gpus: Vec<usize> = (0..widest).collect();
        self.refuse(&gpus)?;
        if self.has(Fault::Hang) {
            return Err(crate::stop::hang(req.deadline_s, "ddp benchmark"));
        }
        self.loaded.store(true, Ordering::SeqCst);
        crate::ddp::run(self.catalog, self.profile, &self.faults, req, progress)
    }
}

impl HostCopier for SimBackend {
    /// Copies load the links (idle-downclock trains up); a degraded link carries its narrower rate.
    fn host_copies(
        &self,
        req: &CopyRequest,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<HostCopyRun, ProbeError> {
        req.validate()?;
        let gpus = self.resolve(&req.gpus)?;
        self.refuse(&gpus)?;
        if self.has(Fault::NoFabricManager) && self.profile.nvswitches > 0 {
            return Err(ProbeError::GpuFailed(
                "CUDA error 802 (system not yet initialized): the NVSwitch fabric is not ready; is nvidia-fabricmanager running?".into(),
            ));
        }
        self.loaded.store(true, Ordering::SeqCst);
        let mut out = Vec::with_capacity(gpus.len());
        for (n, &i) in gpus.iter().enumerate() {
            let info = self.gpu_info(i);
            let (gen, width) = info
                .pcie
                .map_or((0, 0), |p| (p.gen_current, p.width_current));
            let c =
                crate::hostcopy::gpu_copies(&self.profile.name, info.gpu_ref(), gen, width, req);
            progress(Progress {
                stage: "host_copies".into(),
                done: len_u32(n) + 1,
                total: len_u32(gpus.len()),
                message: format!("simulated GPU {}: {}", info.index, c.figures()),
            });
            out.push(c);
        }
        Ok(HostCopyRun {
            gpus: out,
            cuda_library: None,
        })
    }
}

impl PlatformReader for SimBackend {
    fn platform(&self, gpus: &[GpuInfo]) -> Result<PlatformFacts, ProbeError> {
        Ok(crate::platform::facts(self.profile, &self.faults, gpus))
    }

    fn fabric_state(&self, gpus: &[GpuInfo]) -> Result<Option<GpuFabricState>, ProbeError> {
        Ok(crate::platform::fabric_state(
            self.profile,
            &self.faults,
            gpus,
        ))
    }

    /// The links as they are now (under load once a collective has run), not as the caller's
    /// inventory read them.
    fn link_state(&self, gpus: &[GpuInfo]) -> Result<Vec<LinkReading>, ProbeError> {
        let now: Vec<GpuInfo> = gpus
            .iter()
            .map(|g| match self.slot_of(&g.pci_bus_id) {
                Some(i) => self.gpu_info(i),
                None => g.clone(),
            })
            .collect();
        Ok(crate::platform::facts(self.profile, &self.faults, &now).link_readings())
    }
}

impl ClusterMember for SimBackend {
    fn cluster_prepare(&self, job: &ClusterJob) -> Result<Vec<u8>, ProbeError> {
        crate::cluster::prepare(self, &self.faults, job)
    }

    fn cluster_join(
        &self,
        job: &ClusterJob,
        rendezvous: &[Vec<u8>],
    ) -> Result<NodeResult, ProbeError> {
        crate::cluster::join(self, &self.faults, self.profile, job, rendezvous)
    }
}

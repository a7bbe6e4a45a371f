//! What the platform under the GPUs is: PCI paths and ACS of their bridges, IOMMU, hypervisor,
//! NUMA, sysfs link state, NVSwitch and Fabric Manager. Data, and the trait its readers implement:
//! the readers live in `ddpcheck-gpu` (sysfs) and `ddpcheck-sim`; judgement lives in this module's
//! siblings.

use serde::{Deserialize, Serialize};

use crate::node_gpus::{GpuInfo, PcieLink};
use crate::probe_error::ProbeError;

/// ACS control of one PCIe bridge, read from its config space (ACS extended capability 0x000D,
/// control register at capability + 6).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum AcsState {
    /// The bridge has no ACS capability: nothing redirects P2P there.
    NotPresent,
    /// The control register as read.
    Read {
        /// Bit 0: source validation.
        source_validation: bool,
        /// Bit 2: P2P request redirect (peer requests go up to the root complex).
        p2p_request_redirect: bool,
        /// Bit 3: P2P completion redirect.
        p2p_completion_redirect: bool,
        /// Bit 4: upstream forwarding.
        upstream_forwarding: bool,
    },
    /// Only the first 64 bytes of config space are readable without root: never a false "off".
    NeedsRoot,
    /// The config file could not be read or parsed; the text says why.
    Unknown { why: String },
}

impl AcsState {
    /// True when a bit that sends peer traffic up to the root complex is set.
    pub fn redirects_p2p(&self) -> bool {
        matches!(
            self,
            AcsState::Read {
                source_validation,
                p2p_request_redirect,
                p2p_completion_redirect,
                ..
            } if *source_validation || *p2p_request_redirect || *p2p_completion_redirect
        )
    }

    /// The set bits, by name (`SrcValid ReqRedir`, as `lspci -vvv` prints `ACSCtl`).
    pub fn set_bits(&self) -> Vec<&'static str> {
        let AcsState::Read {
            source_validation,
            p2p_request_redirect,
            p2p_completion_redirect,
            upstream_forwarding,
        } = self
        else {
            return Vec::new();
        };
        [
            (*source_validation, "SrcValid"),
            (*p2p_request_redirect, "ReqRedir"),
            (*p2p_completion_redirect, "CmpltRedir"),
            (*upstream_forwarding, "UpstreamFwd"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
}

/// One PCIe bridge on the path from the host bridge down to a GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bridge {
    /// `0000:00:01.0`, sysfs form.
    pub bdf: String,
    pub acs: AcsState,
}

/// A PCIe link as sysfs states it (`current_link_speed` "32.0 GT/s PCIe", widths as numbers).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SysfsLink {
    pub current_gts: Option<f64>,
    pub max_gts: Option<f64>,
    pub current_width: Option<u32>,
    pub max_width: Option<u32>,
}

impl SysfsLink {
    /// PCIe generation of a transfer rate (2.5 GT/s gen1 … 64 GT/s gen6).
    pub fn generation(gts: f64) -> Option<u32> {
        [
            (2.5, 1),
            (5.0, 2),
            (8.0, 3),
            (16.0, 4),
            (32.0, 5),
            (64.0, 6),
        ]
        .into_iter()
        .find(|(rate, _)| (gts - rate).abs() < 0.1)
        .map(|(_, g)| g)
    }

    /// The faster of two readings (higher rate, then wider): a link that reached its maximum
    /// once under load can train to it.
    pub fn faster(self, other: SysfsLink) -> SysfsLink {
        let key = |l: &SysfsLink| (l.current_gts.unwrap_or(0.0), l.current_width.unwrap_or(0));
        if key(&other) > key(&self) {
            other
        } else {
            self
        }
    }

    /// Generation and width now and at most, where sysfs gave all four.
    pub fn as_pcie(&self) -> Option<PcieLink> {
        Some(PcieLink {
            gen_current: SysfsLink::generation(self.current_gts?)?,
            gen_max: SysfsLink::generation(self.max_gts?)?,
            width_current: self.current_width?,
            width_max: self.max_width?,
        })
    }
}

/// One GPU's link as read at one moment (`PlatformReader::link_state`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkReading {
    /// NVML's bus id, as `GpuPlatform::pci_bus_id`.
    pub pci_bus_id: String,
    pub link: SysfsLink,
}

/// The platform side of one GPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuPlatform {
    /// NVML's bus id (`00000000:18:00.0`), to match `GpuInfo::pci_bus_id`.
    pub pci_bus_id: String,
    /// sysfs `numa_node`: −1 where the platform does not say (typical of a VM).
    pub numa_node: Option<i32>,
    /// The GPU sits directly on a host bridge's bus with no bridge above it (a virtual PCI
    /// tree: a hypervisor's passthrough).
    pub on_root_bus: Option<bool>,
    /// Bridges from the host bridge down to the GPU, the host bridge's first. `None`: unread.
    pub bridges: Option<Vec<Bridge>>,
    /// The host bridge (`pci0000:00`) the path starts at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_bridge: Option<String>,
    /// The link read at rest, with the platform (before any measurement).
    #[serde(default)]
    pub link: SysfsLink,
    /// The link read while a pair's all-reduce ran on the GPU (the fastest reading seen); `None`
    /// where no pair ran on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_under_load: Option<SysfsLink>,
    /// The IOMMU group's `type` (`DMA`, `DMA-FQ`, `identity`, `blocked`) where the GPU has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iommu_group_type: Option<String>,
}

/// How DMA of the node's devices goes through the IOMMU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IommuMode {
    /// Groups of type DMA / DMA-FQ: every device address is translated.
    Translated,
    /// Groups of type identity (`iommu=pt`): DMA passes untranslated.
    Passthrough,
    /// No IOMMU groups: no IOMMU translates this kernel's DMA.
    Off,
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IommuFacts {
    pub mode: IommuMode,
    /// IOMMU groups seen (`/sys/kernel/iommu_groups`).
    pub groups: u32,
    /// IOMMU units seen (`/sys/class/iommu`).
    pub units: u32,
    /// IOMMU words of the kernel command line (`iommu=pt`, `intel_iommu=on`, ...).
    #[serde(default)]
    pub cmdline: Vec<String>,
}

/// NVSwitch and Fabric Manager: NVSwitch systems need Fabric Manager before CUDA can use them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FabricFacts {
    /// NVSwitch devices the driver shows.
    pub nvswitches: u32,
    /// A `nv-fabricmanager` process runs. `None`: not looked for.
    pub manager_running: Option<bool>,
    /// The GPUs' registration with the NVLink fabric (NVML's GPU fabric info; `nvidia-smi -q`'s
    /// `Fabric > State`): `None` where not read or not supported (`N/A`: no NVSwitch fabric, a
    /// PCIe card, a VM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_state: Option<GpuFabricState>,
}

/// Where the GPUs' fabric registration stands: Fabric Manager registers each GPU of an NVSwitch
/// system with the fabric (`Not Started` → `In Progress` → `Completed`, with a status).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuFabricState {
    /// The first GPU's state that is not a completed registration, else `Completed`.
    pub state: FabricState,
    /// The status beside it (`Success`, or an error), where given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// GPUs whose registration is not completed with success.
    pub gpus_not_registered: u32,
    /// What the fabric reports wrong of this GPU while registered (NVML's health mask: bandwidth
    /// degraded, a route unhealthy or being recovered, an incorrect configuration), in words;
    /// empty where healthy or not reported (`nvidia-smi -q` is not read for it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health: Vec<String>,
    /// Registered GPUs whose fabric reports a health issue.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpus_unhealthy: u32,
    /// Where it was read (`nvidia-smi -q`, `NVML`).
    pub source: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// NVML's GPU fabric states (`NVML_GPU_FABRIC_STATE_*`), less `NOT_SUPPORTED`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FabricState {
    NotStarted,
    InProgress,
    Completed,
}

impl FabricState {
    /// As `nvidia-smi -q` writes it.
    pub fn as_smi(self) -> &'static str {
        match self {
            FabricState::NotStarted => "Not Started",
            FabricState::InProgress => "In Progress",
            FabricState::Completed => "Completed",
        }
    }
}

impl GpuFabricState {
    /// One GPU's reading, before the node's counts are set.
    pub fn of_gpu(state: FabricState, status: Option<String>, source: &str) -> GpuFabricState {
        GpuFabricState {
            state,
            status,
            gpus_not_registered: 0,
            health: Vec::new(),
            gpus_unhealthy: 0,
            source: source.to_string(),
        }
    }

    /// The node's registration from each GPU's: the first GPU not registered, else the first whose
    /// fabric reports a health issue, else the first, with how many are not registered and how
    /// many unhealthy; `None` where no GPU gives a state (no fabric, or not read).
    pub fn of_node(gpus: Vec<GpuFabricState>) -> Option<GpuFabricState> {
        let not = crate::num::len_u32(gpus.iter().filter(|g| !g.registered()).count());
        let unhealthy = crate::num::len_u32(
            gpus.iter()
                .filter(|g| g.registered() && !g.health.is_empty())
                .count(),
        );
        let pick = gpus
            .iter()
            .position(|g| !g.registered())
            .or_else(|| gpus.iter().position(|g| !g.health.is_empty()))
            .unwrap_or(0);
        let mut first = gpus.into_iter().nth(pick)?;
        first.gpus_not_registered = not;
        first.gpus_unhealthy = unhealthy;
        Some(first)
    }

    /// Registered: completed, with success or no status given.
    pub fn registered(&self) -> bool {
        self.state == FabricState::Completed
            && self
                .status
                .as_deref()
                .is_none_or(|s| s.eq_ignore_ascii_case("success") || s.eq_ignore_ascii_case("N/A"))
    }
}

/// Everything read of the platform; `None` where it could not be read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlatformFacts {
    /// The `hypervisor` CPU flag (/proc/cpuinfo).
    pub hypervisor: Option<bool>,
    /// `/sys/class/dmi/id/sys_vendor` or `/sys/hypervisor/type`, where present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hypervisor_vendor: Option<String>,
    pub iommu: IommuFacts,
    pub fabric: FabricFacts,
    pub gpus: Vec<GpuPlatform>,
    /// Where the facts come from: `sysfs /` or `sim`.
    pub source: String,
    /// Where facts not read on the running node come from (`explain --from-artifacts`: the
    /// files), cited by their evidence in place of sysfs and /proc; `None` on a live node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_from: Option<String>,
}

impl PlatformFacts {
    /// Each GPU's PCIe link as these facts state it.
    pub fn link_readings(self) -> Vec<LinkReading> {
        self.gpus
            .into_iter()
            .map(|g| LinkReading {
                pci_bus_id: g.pci_bus_id,
                link: g.link,
            })
            .collect()
    }

    /// Facts of a platform nothing could be read of.
    pub fn unknown(source: &str) -> PlatformFacts {
        PlatformFacts {
            hypervisor: None,
            hypervisor_vendor: None,
            iommu: IommuFacts {
                mode: IommuMode::Unknown,
                groups: 0,
                units: 0,
                cmdline: Vec::new(),
            },
            fabric: FabricFacts {
                nvswitches: 0,
                manager_running: None,
                gpu_state: None,
            },
            gpus: Vec::new(),
            source: source.to_string(),
            evidence_from: None,
        }
    }

    /// The source a platform reading's evidence cites: `live` (the sysfs or /proc path) on the
    /// running node, the artifacts where the facts were read from them.
    pub fn cite(&self, live: &str) -> String {
        self.evidence_from
            .clone()
            .unwrap_or_else(|| live.to_string())
    }

    /// The platform side of a GPU, matched by PCI bus id (NVML's and sysfs' forms compare equal).
    pub fn gpu(&self, pci_bus_id: &str) -> Option<&GpuPlatform> {
        let want = normalise_bdf(pci_bus_id);
        self.gpus
            .iter()
            .find(|g| normalise_bdf(&g.pci_bus_id) == want)
    }
}

/// `00000000:1B:00.0` and `0000:1b:00.0` alike → `0000:1b:00.0`.
pub fn normalise_bdf(id: &str) -> String {
    let lower = id.trim().to_ascii_lowercase();
    match lower.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => {
            format!("{}:{rest}", &domain[domain.len() - 4..])
        }
        _ => lower,
    }
}

/// The bridges between two GPUs: those on either path below their deepest common bridge, and
/// that bridge itself (peer traffic turns there). Both paths must be known.
pub fn bridges_between<'a>(a: &'a GpuPlatform, b: &'a GpuPlatform) -> Option<Vec<&'a Bridge>> {
    let (pa, pb) = (a.bridges.as_ref()?, b.bridges.as_ref()?);
    let common = pa
        .iter()
        .zip(pb.iter())
        .take_while(|(x, y)| x.bdf == y.bdf)
        .count();
    let same_host = a.host_bridge == b.host_bridge;
    let mut out: Vec<&Bridge> = Vec::new();
    if common > 0 && same_host {
        out.push(&pa[common - 1]);
    }
    out.extend(pa.iter().skip(common));
    out.extend(pb.iter().skip(common));
    Some(out)
}

/// A backend that reads the platform under its GPUs (the capability beside
/// `crate::backend::NodeBackend`).
pub trait PlatformReader {
    /// The platform under these GPUs: PCI paths and ACS, IOMMU, hypervisor, NUMA, NVSwitches.
    /// Default: nothing read.
    fn platform(&self, gpus: &[GpuInfo]) -> Result<PlatformFacts, ProbeError> {
        let _ = gpus;
        Ok(PlatformFacts::unknown("not read by this backend"))
    }

    /// The GPUs' NVLink fabric registration (NVML), without the rest of the platform: `check`
    /// reads it before any CUDA work. `None` where there is no fabric or nothing reads it.
    fn fabric_state(&self, gpus: &[GpuInfo]) -> Result<Option<GpuFabricState>, ProbeError> {
        let _ = gpus;
        Ok(None)
    }

    /// The GPUs' PCIe links as sysfs states them now; read while (or right after) a pair
    /// measurement runs, so the link is seen under load. Default: the platform read again.
    fn link_state(&self, gpus: &[GpuInfo]) -> Result<Vec<LinkReading>, ProbeError> {
        Ok(self.platform(gpus)?.link_readings())
    }
}

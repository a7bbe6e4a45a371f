//! The platform a simulated node shows `ddpcheck explain`: PCI paths with ACS, IOMMU,
//! hypervisor, NUMA, NVSwitches and Fabric Manager, bent by the platform faults.

use ddpcheck_core::explain::platform::{
    normalise_bdf, AcsState, Bridge, FabricFacts, FabricState, GpuFabricState, GpuPlatform,
    IommuFacts, IommuMode, PlatformFacts, SysfsLink,
};
use ddpcheck_core::node_gpus::GpuInfo;
use ddpcheck_core::num::len_u32;
use ddpcheck_core::topology::LinkClass;

use crate::fault::Fault;
use crate::profile::Profile;

/// NUMA node of profile slot `i`: cross-numa moves the second half of the GPUs to node 1.
pub fn numa_of(profile: &Profile, faults: &[Fault], i: usize) -> u32 {
    if faults.contains(&Fault::CrossNuma) && i >= profile.gpus.len().div_ceil(2) {
        1
    } else {
        profile.gpus[i].numa
    }
}

fn acs(faults: &[Fault]) -> AcsState {
    let on = faults.contains(&Fault::Acs);
    AcsState::Read {
        source_validation: on,
        p2p_request_redirect: on,
        p2p_completion_redirect: on,
        upstream_forwarding: on,
    }
}

/// The node is a virtual machine: the profile's own (a cloud VM) or the `vm` fault's.
fn is_vm(profile: &Profile, faults: &[Fault]) -> bool {
    profile.vm || faults.contains(&Fault::Vm)
}

/// Bridges above slot `i`: a PCIe switch shared by all GPUs on PIX/PXB profiles, else a root
/// port of its own; none in a VM (the GPU sits on the root bus).
fn bridges(profile: &Profile, faults: &[Fault], i: usize) -> (String, Vec<Bridge>) {
    let numa = numa_of(profile, faults, i);
    let host = format!("pci0000:{:02x}", numa * 0x80);
    if is_vm(profile, faults) {
        return ("pci0000:00".into(), Vec::new());
    }
    let bridge = |bdf: String| Bridge {
        bdf,
        acs: acs(faults),
    };
    let bdfs: Vec<String> = match profile.link_class() {
        LinkClass::Pix | LinkClass::Pxb => vec![
            "0000:00:01.0".into(),
            "0000:01:00.0".into(),
            format!("0000:02:{:02x}.0", 8 * (i + 1)),
        ],
        _ => vec![format!("0000:{:02x}:{:02x}.0", numa * 0x80, i + 1)],
    };
    (host, bdfs.into_iter().map(bridge).collect())
}

/// The platform of the simulated node's `gpus` (as its inventory gave them).
pub fn facts(profile: &Profile, faults: &[Fault], gpus: &[GpuInfo]) -> PlatformFacts {
    let vm = is_vm(profile, faults);
    let translated = faults.contains(&Fault::IommuTranslated);
    let slots: Vec<GpuPlatform> = gpus
        .iter()
        .filter_map(|g| {
            let i = profile
                .gpus
                .iter()
                .position(|s| normalise_bdf(&s.pci_bus_id) == normalise_bdf(&g.pci_bus_id))?;
            let (host, bridges) = bridges(profile, faults, i);
            let link = g.pcie.map(|p| SysfsLink {
                current_gts: Some(gts(p.gen_current)),
                max_gts: Some(gts(p.gen_max)),
                current_width: Some(p.width_current),
                max_width: Some(p.width_max),
            });
            Some(GpuPlatform {
                pci_bus_id: g.pci_bus_id.clone(),
                numa_node: Some(if vm {
                    -1
                } else {
                    i32::try_from(numa_of(profile, faults, i)).unwrap_or(i32::MAX)
                }),
                on_root_bus: Some(bridges.is_empty()),
                bridges: Some(bridges),
                host_bridge: Some(host),
                link: link.unwrap_or_default(),
                link_under_load: None,
                iommu_group_type: translated.then(|| "DMA-FQ".to_string()),
            })
        })
        .collect();
    PlatformFacts {
        hypervisor: Some(vm),
        hypervisor_vendor: None,
        iommu: IommuFacts {
            mode: if translated {
                IommuMode::Translated
            } else {
                IommuMode::Off
            },
            groups: if translated { len_u32(slots.len()) } else { 0 },
            units: u32::from(translated),
            cmdline: if translated {
                vec!["intel_iommu=on".into()]
            } else {
                Vec::new()
            },
        },
        fabric: FabricFacts {
            nvswitches: profile.nvswitches,
            manager_running: (profile.nvswitches > 0)
                .then(|| !faults.contains(&Fault::NoFabricManager)),
            gpu_state: None,
        },
        gpus: slots,
        source: "sim".into(),
        evidence_from: None,
    }
}

/// The GPUs' fabric registration as NVML would give it: none without NVSwitches; each GPU
/// `Not Started` where Fabric Manager is down (`no-fabric-manager`), else `Completed`.
pub fn fabric_state(
    profile: &Profile,
    faults: &[Fault],
    gpus: &[GpuInfo],
) -> Option<GpuFabricState> {
    if profile.nvswitches == 0 {
        return None;
    }
    let (state, status) = if faults.contains(&Fault::NoFabricManager) {
        (FabricState::NotStarted, None)
    } else {
        (FabricState::Completed, Some("Success".to_string()))
    };
    let each = gpus
        .iter()
        .map(|_| GpuFabricState::of_gpu(state, status.clone(), "simulated NVML"))
        .collect();
    GpuFabricState::of_node(each)
}

/// PCIe transfer rate of a generation, GT/s.
fn gts(gen: u32) -> f64 {
    match gen {
        0 | 1 => 2.5,
        2 => 5.0,
        3 => 8.0,
        4 => 16.0,
        5 => 32.0,
        _ => 64.0,
    }
}

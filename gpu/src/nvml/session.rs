//! The real reader: the NVML session living on the NVML thread (inventory, health, XID events, topology).

use std::collections::BTreeMap;
use std::path::Path;

use ddpcheck_core::explain::platform::GpuFabricState;
use ddpcheck_core::node_gpus::{GpuHealth, GpuInfo, NodeInventory, PcieLink, ProbeState};
use ddpcheck_core::num::len_u32;
use ddpcheck_core::topology::{GpuRef, LinkClass, P2pCaps, P2pReason, P2pStatus, TopologyMatrix};
use ddpcheck_core::ProbeError;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, P2pCapabilitiesIndex, TemperatureSensor,
};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, EventSet, Nvml};

use super::convert::{self, parse_bus_id, BusKey};
use super::fabric;
use super::ffi::Extra;
use super::links::{self, FarEnd};
use super::snapshot::{placeholder, Involved};
use super::thread::{Reader, Serve, Tracker};
use super::{procs, sysfs, TopologyDetail};

/// nvml.h's NVML_NVLINK_MAX_LINKS (18 on Hopper and Blackwell); higher indices are invalid.
const MAX_NVLINKS: u32 = 18;
/// Words of 64 CPUs asked of `cpu_affinity` (4096 CPUs) and of NUMA nodes of `memory_affinity`.
const AFFINITY_WORDS: usize = 64;
/// nvml.h's NVML_AFFINITY_SCOPE_NODE.
const AFFINITY_SCOPE_NODE: u32 = 0;
/// nvml.h's NVML_DEVICE_MIG_ENABLE.
const MIG_ENABLE: u32 = 1;
/// XIDs kept per GPU (the newest); the reader polls them at every inventory.
const MAX_XIDS: usize = 64;
/// NVML reports 999 when it saw a critical XID but cannot say which; we keep it so the event
/// is not lost (core treats it as a warning, not a known fatal code).
const XID_UNKNOWN: u64 = 999;

/// NVML's masks come as C `unsigned long` words; as u64 words with the same bit numbering.
#[allow(clippy::unnecessary_cast)] // c_ulong is u32 on 32-bit targets
fn mask_words(w: &[std::ffi::c_ulong]) -> Vec<u64> {
    if std::mem::size_of::<std::ffi::c_ulong>() == 8 {
        w.iter().map(|x| *x as u64).collect()
    } else {
        w.chunks(2)
            .map(|c| (c[0] as u64) | ((c.get(1).copied().unwrap_or(0) as u64) << 32))
            .collect()
    }
}

/// The NVML thread's body: open NVML here, on this thread, then serve jobs.
pub(crate) fn run_thread(serve: Serve) {
    let nvml = match Nvml::init() {
        Ok(n) => n,
        Err(e) => return serve.unavailable(convert::unavailable_line(&e)),
    };
    let mut session = Session::new(&nvml, Extra::open());
    serve.serve(&mut session);
}

struct Session<'n> {
    nvml: &'n Nvml,
    extra: Extra,
    /// One XID event set per GPU, so that a GPU that refuses registration does not take the
    /// others' registrations with it (nvml-wrapper frees a set whose registration failed).
    xid_sets: Vec<(u32, EventSet<'n>)>,
    xids: BTreeMap<u32, Vec<u64>>,
    own_pid: u32,
}

/// Keeps a reading; NotSupported and other refusals give `None`, GpuLost also flags the GPU.
fn got<T>(r: Result<T, NvmlError>, lost: &mut bool, what: &str) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(NvmlError::NotSupported) => None,
        Err(NvmlError::GpuLost) => {
            *lost = true;
            None
        }
        Err(e) => {
            tracing::debug!(what, error = %e, "NVML reading unavailable");
            None
        }
    }
}

impl<'n> Session<'n> {
    fn new(nvml: &'n Nvml, extra: Extra) -> Session<'n> {
        let mut xid_sets = Vec::new();
        let count = nvml.device_count().unwrap_or(0);
        for i in 0..count {
            let registered = nvml.device_by_index(i).and_then(|d| {
                let set = nvml.create_event_set()?;
                d.register_events(EventTypes::CRITICAL_XID_ERROR, set)
                    .map_err(|e| e.error)
            });
            match registered {
                Ok(set) => xid_sets.push((i, set)),
                Err(e) => tracing::debug!(gpu = i, error = %e, "no XID events for this GPU"),
            }
        }
        Session {
            nvml,
            extra,
            xid_sets,
            xids: BTreeMap::new(),
            own_pid: std::process::id(),
        }
    }

    /// Drains the XID event sets without waiting (timeout 0).
    fn poll_xids(&mut self) {
        for (i, set) in &self.xid_sets {
            // Bounded: a storm of events must not keep the thread here.
            for _ in 0..256 {
                let Ok(ev) = set.wait(0) else { break };
                let Some(x) = ev.event_data else { continue };
                let code = match x {
                    XidError::Value(v) => v,
                    XidError::Unknown => XID_UNKNOWN,
                };
                let seen = self.xids.entry(*i).or_default();
                seen.push(code);
                if seen.len() > MAX_XIDS {
                    seen.remove(0);
                }
            }
        }
    }

    fn read_gpu(&self, index: u32) -> GpuInfo {
        let dev = match self.nvml.device_by_index(index) {
            Ok(d) => d,
            Err(e) => {
                let why = convert::one_line(&format!("NVML cannot open it: {e}"));
                return placeholder(index, ProbeState::Lost, &why);
            }
        };
        let mut lost = false;
        let uuid = got(dev.uuid(), &mut lost, "uuid").unwrap_or_default();
        let pci_bus_id = got(dev.pci_info(), &mut lost, "pci_info")
            .map(|p| p.bus_id)
            .unwrap_or_default();
        let name = got(dev.name(), &mut lost, "name").unwrap_or_else(|| "unknown".into());
        let memory_total_bytes = got(dev.memory_info(), &mut lost, "memory_info")
            .map(|m| m.total)
            .unwrap_or(0);
        let mut info = GpuInfo {
            index,
            uuid,
            pci_bus_id,
            name,
            memory_total_bytes,
            pcie: None,
            health: GpuHealth::default(),
            processes: vec![],
            state: ProbeState::Ok,
        };
        if lost {
            // Further calls on a GPU that fell off the bus only risk hanging the thread.
            info.state = ProbeState::Lost;
            return info;
        }
        info.pcie = self.pcie(&dev, &mut lost);
        info.health = self.health(&dev, index, &mut lost);
        info.processes = self.processes(&dev, &mut lost);
        if lost {
            info.state = ProbeState::Lost;
        }
        info
    }

    /// Current and maximum PCIe link. The maximum is `nvmlDeviceGetMaxPcieLinkGeneration/Width`,
    /// the most that the GPU *and the slot it sits in* support, not the GPU-only maximum
    /// (`nvmlDeviceGetGpuMaxPcieLinkGeneration`): a gen5 GPU in a gen4 slot running gen4 is not
    /// downtrained, and core's finding is about links below what both ends can do.
    fn pcie(&self, dev: &Device<'_>, lost: &mut bool) -> Option<PcieLink> {
        Some(PcieLink {
            gen_current: got(dev.current_pcie_link_gen(), lost, "pcie gen")?,
            gen_max: got(dev.max_pcie_link_gen(), lost, "pcie max gen")?,
            width_current: got(dev.current_pcie_link_width(), lost, "pcie width")?,
            width_max: got(dev.max_pcie_link_width(), lost, "pcie max width")?,
        })
    }

    fn health(&self, dev: &Device<'_>, index: u32, lost: &mut bool) -> GpuHealth {
        let remapped = got(self.extra.remapped_rows(dev), lost, "remapped rows");
        let mut active = 0u32;
        // Links NVML answers for are the links the GPU has, up or not.
        let mut present = 0u32;
        for l in 0..MAX_NVLINKS {
            match dev.link_wrapper_for(l).is_active() {
                Ok(a) => {
                    present += 1;
                    active += u32::from(a);
                }
                Err(NvmlError::GpuLost) => *lost = true,
                Err(_) => {}
            }
        }
        GpuHealth {
            ecc_enabled: got(dev.is_ecc_enabled(), lost, "ecc mode").map(|m| m.currently_enabled),
            ecc_uncorrected_volatile: got(
                dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
                lost,
                "ecc uncorrected",
            ),
            ecc_corrected_volatile: got(
                dev.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile),
                lost,
                "ecc corrected",
            ),
            remapped_rows_pending: remapped.map(|r| r.pending),
            remapped_rows_failure: remapped.map(|r| r.failure),
            retired_pages_pending: got(dev.are_pages_pending_retired(), lost, "retired pages"),
            xid_errors: self.xids.get(&index).cloned().unwrap_or_default(),
            throttle_reasons: got(dev.current_throttle_reasons(), lost, "throttle reasons")
                .map(|r| convert::throttle_reason_names(r.bits()))
                .unwrap_or_default(),
            temperature_c: got(dev.temperature(TemperatureSensor::Gpu), lost, "temperature"),
            power_w: got(dev.power_usage(), lost, "power").map(|mw| f64::from(mw) / 1000.0),
            sm_clock_mhz: got(dev.clock_info(Clock::SM), lost, "sm clock"),
            persistence_mode: got(dev.is_in_persistent_mode(), lost, "persistence"),
            compute_mode: got(dev.compute_mode(), lost, "compute mode")
                .map(|m| convert::compute_mode_name(m).to_string()),
            mig_enabled: got(dev.mig_mode(), lost, "mig mode").map(|m| m.current == MIG_ENABLE),
            nvlinks_active: (present > 0).then_some(active),
            nvlinks_present: (present > 0).then_some(present),
        }
    }

    fn processes(
        &self,
        dev: &Device<'_>,
        lost: &mut bool,
    ) -> Vec<ddpcheck_core::node_gpus::ComputeProcess> {
        // nvmlDeviceGetComputeRunningProcesses_v3 (drivers 510 and newer); nvml-wrapper keeps
        // the v2 fallback behind a feature we do not enable, so older drivers list nothing.
        let raw: Vec<(u32, Option<u64>)> =
            got(dev.running_compute_processes(), lost, "compute processes")
                .unwrap_or_default()
                .into_iter()
                .map(|p| {
                    let used = match p.used_gpu_memory {
                        UsedGpuMemory::Used(b) => Some(b),
                        UsedGpuMemory::Unavailable => None,
                    };
                    (p.pid, used)
                })
                .collect();
        procs::foreign_processes(&raw, self.own_pid, procs::proc_parent, procs::proc_name)
    }

    fn device_for(&self, g: &GpuInfo) -> Result<Device<'n>, ProbeError> {
        // By UUID (invariant 4), then by bus id; never by index alone.
        self.nvml
            .device_by_uuid(g.uuid.as_str())
            .or_else(|_| self.nvml.device_by_pci_bus_id(g.pci_bus_id.as_str()))
            .map_err(|e| {
                ProbeError::GpuFailed(convert::one_line(&format!(
                    "GPU {} ({}, {}): NVML cannot open it: {e}",
                    g.index, g.uuid, g.pci_bus_id
                )))
            })
    }

    fn far_ends(&self, dev: &Device<'_>, ours: &[BusKey]) -> Vec<FarEnd> {
        let mut out = Vec::new();
        for l in 0..MAX_NVLINKS {
            let link = dev.link_wrapper_for(l);
            if !matches!(link.is_active(), Ok(true)) {
                continue;
            }
            let kind = self.extra.nvlink_remote_type(dev, l).ok();
            let bus = link
                .remote_pci_info()
                .ok()
                .and_then(|p| parse_bus_id(&p.bus_id));
            out.push(links::classify_far_end(kind, bus, ours));
        }
        out
    }
}

impl Reader for Session<'_> {
    fn fabric(&mut self, t: &Tracker, gpus: &[GpuInfo]) -> Result<Vec<GpuFabricState>, ProbeError> {
        let mut out = Vec::new();
        for g in gpus {
            t.step(Involved::Gpus(vec![g.index]));
            out.extend(self.fabric_of(g)?);
        }
        Ok(out)
    }

    fn inventory(&mut self, t: &Tracker) -> Result<NodeInventory, ProbeError> {
        t.step(Involved::All);
        let driver = self.nvml.sys_driver_version().ok();
        let cuda = self
            .nvml
            .sys_cuda_driver_version()
            .ok()
            .map(convert::cuda_version_string);
        let count = self.nvml.device_count().map_err(|e| {
            ProbeError::Unavailable(convert::one_line(&format!(
                "NVML unavailable: cannot count GPUs: {e}"
            )))
        })?;
        t.begin_inventory(driver.clone(), cuda.clone(), count);
        self.poll_xids();
        let mut gpus = Vec::with_capacity(count as usize);
        for i in 0..count {
            t.step(Involved::Gpus(vec![i]));
            let g = self.read_gpu(i);
            t.gpu_read(&g);
            gpus.push(g);
        }
        Ok(NodeInventory {
            hostname: String::new(),
            driver_version: driver,
            cuda_driver_version: cuda,
            gpus,
        })
    }

    fn topology(&mut self, t: &Tracker, gpus: &[GpuInfo]) -> Result<TopologyDetail, ProbeError> {
        let n = gpus.len();
        let mut devices = Vec::with_capacity(n);
        for g in gpus {
            t.step(Involved::Gpus(vec![g.index]));
            devices.push(self.device_for(g)?);
        }
        // Our GPUs' addresses; one NVML cannot parse gets a key no link can match.
        let buses: Vec<BusKey> = gpus
            .iter()
            .enumerate()
            .map(|(k, g)| parse_bus_id(&g.pci_bus_id).unwrap_or((u32::MAX, len_u32(k), 0, 0)))
            .collect();
        let mut ends = Vec::with_capacity(n);
        for (g, d) in gpus.iter().zip(&devices) {
            t.step(Involved::Gpus(vec![g.index]));
            ends.push(self.far_ends(d, &buses));
        }
        let nv = links::nvlink_counts(&buses, &ends);

        let mut pcie = vec![vec![None; n]; n];
        let mut p2p_status = vec![vec![P2pCaps::all(P2pReason::Unknown); n]; n];
        let mut ancestor_error = None;
        for i in 0..n {
            // A GPU reads its own memory; `nvidia-smi topo -p2p r` shows X there.
            p2p_status[i][i] = P2pCaps::all(P2pReason::Ok);
            for j in (i + 1)..n {
                t.step(Involved::Gpus(vec![gpus[i].index, gpus[j].index]));
                match self.nvml.topology_common_ancestor(&devices[i], &devices[j]) {
                    Ok(level) => {
                        let c = convert::topology_level_class(level);
                        pcie[i][j] = Some(c);
                        pcie[j][i] = Some(c);
                    }
                    Err(e) => ancestor_error = Some(e.to_string()),
                }
                p2p_status[i][j] = p2p_caps(&devices[i], &devices[j]);
                p2p_status[j][i] = p2p_caps(&devices[j], &devices[i]);
            }
        }
        let p2p: Vec<Vec<P2pStatus>> = p2p_status
            .iter()
            .map(|row| row.iter().map(|c| c.read.summary()).collect())
            .collect();
        let links = links::assemble_matrix(&nv, &pcie).map_err(|(i, j)| {
            ProbeError::Unavailable(convert::one_line(&format!(
                "NVML cannot tell the PCIe path between GPU {} and GPU {}: {}",
                gpus[i].index,
                gpus[j].index,
                ancestor_error.as_deref().unwrap_or("no answer")
            )))
        })?;

        let root = Path::new(sysfs::PCI_DEVICES);
        let mut cpu_affinity = Vec::with_capacity(n);
        let mut numa_affinity = Vec::with_capacity(n);
        for (g, d) in gpus.iter().zip(&devices) {
            t.step(Involved::Gpus(vec![g.index]));
            let cpus = d
                .cpu_affinity(AFFINITY_WORDS)
                .ok()
                .and_then(|w| convert::cpu_mask_to_list(&mask_words(&w)))
                .or_else(|| sysfs::local_cpulist(root, &g.pci_bus_id));
            let numa = d
                .memory_affinity(AFFINITY_WORDS, AFFINITY_SCOPE_NODE)
                .ok()
                .and_then(|w| convert::single_bit(&mask_words(&w)))
                .or_else(|| sysfs::numa_node(root, &g.pci_bus_id));
            cpu_affinity.push(cpus);
            numa_affinity.push(numa);
        }

        let nvlinks_active = ends.iter().map(|e| len_u32(e.len())).collect();
        let nvlinks_to_switch = ends
            .iter()
            .map(|e| e.iter().filter(|f| **f == FarEnd::Switch).count())
            .map(len_u32)
            .collect();
        Ok(TopologyDetail {
            matrix: TopologyMatrix {
                gpus: gpus.iter().map(GpuInfo::gpu_ref).collect::<Vec<GpuRef>>(),
                links,
                p2p,
                p2p_status,
                cpu_affinity,
                numa_affinity,
            },
            pcie: pcie
                .into_iter()
                .enumerate()
                .map(|(i, row)| {
                    row.into_iter()
                        .enumerate()
                        .map(|(j, c)| if i == j { Some(LinkClass::X) } else { c })
                        .collect()
                })
                .collect(),
            nvlinks_active,
            nvlinks_to_switch,
        })
    }
}

impl Session<'_> {
    /// One GPU's fabric registration; `None` where it has none (NOT_SUPPORTED, no such call).
    fn fabric_of(&self, g: &GpuInfo) -> Result<Option<GpuFabricState>, ProbeError> {
        let dev = self.device_for(g)?;
        let mut lost = false;
        let reading = got(self.extra.gpu_fabric(&dev), &mut lost, "fabric info");
        if lost {
            return Err(ProbeError::GpuFailed(format!(
                "GPU {} ({}): lost while its fabric state was read",
                g.index, g.pci_bus_id
            )));
        }
        Ok(reading.as_ref().and_then(fabric::to_state))
    }
}

/// NVML's P2P status from `a` to `b` for read, write, atomics and NVLink; a capability NVML
/// cannot answer is unknown.
fn p2p_caps(a: &Device<'_>, b: &Device<'_>) -> P2pCaps {
    let cap = |index| {
        a.p2p_status(b, index)
            .map(convert::p2p_reason)
            .unwrap_or(P2pReason::Unknown)
    };
    P2pCaps {
        read: cap(P2pCapabilitiesIndex::Read),
        write: cap(P2pCapabilitiesIndex::Write),
        atomics: cap(P2pCapabilitiesIndex::Atomics),
        nvlink: cap(P2pCapabilitiesIndex::NvLink),
    }
}

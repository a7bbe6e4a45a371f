//! GPUs of a node: inventory, health readings and PCIe link state, as backends report them.

use serde::{Deserialize, Serialize};

use crate::topology::GpuRef;

/// PCIe link: what the GPU runs at now and the most both ends support.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcieLink {
    pub gen_current: u32,
    pub gen_max: u32,
    pub width_current: u32,
    pub width_max: u32,
}

/// Health readings; `None` where the GPU or driver does not report the value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuHealth {
    pub ecc_enabled: Option<bool>,
    pub ecc_uncorrected_volatile: Option<u64>,
    pub ecc_corrected_volatile: Option<u64>,
    pub remapped_rows_pending: Option<bool>,
    pub remapped_rows_failure: Option<bool>,
    pub retired_pages_pending: Option<bool>,
    /// XID error codes seen since the probe started listening (NVML event set).
    #[serde(default)]
    pub xid_errors: Vec<u64>,
    /// Active clock throttle reasons, NVML's names (`hw_slowdown`, `sw_thermal_slowdown`, ...).
    #[serde(default)]
    pub throttle_reasons: Vec<String>,
    pub temperature_c: Option<u32>,
    pub power_w: Option<f64>,
    pub sm_clock_mhz: Option<u32>,
    pub persistence_mode: Option<bool>,
    pub compute_mode: Option<String>,
    pub mig_enabled: Option<bool>,
    pub nvlinks_active: Option<u32>,
    /// NVLinks the GPU has (NVML answers for them, `nvidia-smi nvlink -s` lists them), up or
    /// not; `None` where unknown (then the SKU's count stands in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlinks_present: Option<u32>,
}

/// Whether the probe could read the GPU at all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeState {
    #[default]
    Ok,
    /// An NVML call ran past its deadline (invariant 2).
    Stuck,
    /// The GPU fell off the bus or NVML lost it.
    Lost,
}

/// A process with a compute context on a GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComputeProcess {
    pub pid: u32,
    pub name: Option<String>,
    pub used_memory_bytes: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    pub index: u32,
    pub uuid: String,
    pub pci_bus_id: String,
    pub name: String,
    pub memory_total_bytes: u64,
    pub pcie: Option<PcieLink>,
    pub health: GpuHealth,
    #[serde(default)]
    pub processes: Vec<ComputeProcess>,
    #[serde(default)]
    pub state: ProbeState,
}

impl GpuInfo {
    pub fn gpu_ref(&self) -> GpuRef {
        GpuRef {
            index: self.index,
            uuid: self.uuid.clone(),
            pci_bus_id: self.pci_bus_id.clone(),
        }
    }
}

/// Everything a backend knows of a node before any GPU work: the provenance of its numbers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeInventory {
    pub hostname: String,
    pub driver_version: Option<String>,
    pub cuda_driver_version: Option<String>,
    pub gpus: Vec<GpuInfo>,
}

/// The GPUs with foreign compute on them, each as `UUID (pid A,B)`: a test there would measure
/// another job's load too, so preflights answer BUSY and benchmarks do not start.
pub fn busy_gpus(gpus: &[GpuInfo]) -> Vec<String> {
    gpus.iter()
        .filter(|g| !g.processes.is_empty())
        .map(|g| {
            let pids: Vec<String> = g.processes.iter().map(|p| p.pid.to_string()).collect();
            format!("{} (pid {})", g.uuid, pids.join(","))
        })
        .collect()
}

/// What BUSY says of `busy_gpus`' lines, in a preflight's reason and a refused benchmark alike.
pub fn busy_reason(busy: &[String]) -> String {
    format!("GPUs in use by other processes: {}", busy.join("; "))
}

/// `busy_gpus` among the GPUs a job may use: those `job` names (as `select_gpus` reads it), or
/// every one where it is empty or names none of `gpus` (then the run itself says what is wrong).
pub fn busy_among(gpus: &[GpuInfo], job: &str) -> Vec<String> {
    busy_gpus(&select_gpus(gpus, job).unwrap_or_else(|_| gpus.to_vec()))
}

/// Why a job's GPU list selects nothing: an entry names no GPU of the node (a usage error).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GpuSelectError {
    /// `item` is none of the node's GPUs; `known` lists them as `index (uuid)`.
    #[error("GPU {item:?} is not on this node; it has {}", listed(known))]
    NotOnNode { item: String, known: Vec<String> },
}

fn listed(known: &[String]) -> String {
    if known.is_empty() {
        "no GPUs".into()
    } else {
        known.join(", ")
    }
}

impl From<GpuSelectError> for crate::ProbeError {
    fn from(e: GpuSelectError) -> Self {
        crate::ProbeError::Invalid(e.to_string())
    }
}

/// Selects the job's GPUs from `CUDA_VISIBLE_DEVICES` / `SLURM_JOB_GPUS` style lists: entries are
/// indices, full UUIDs (`GPU-…`) or UUID prefixes, or PCI bus ids. Unknown entries are an error.
pub fn select_gpus(gpus: &[GpuInfo], spec: &str) -> Result<Vec<GpuInfo>, GpuSelectError> {
    let spec = spec.trim();
    if spec.is_empty() || spec.eq_ignore_ascii_case("all") {
        return Ok(gpus.to_vec());
    }
    let mut out: Vec<GpuInfo> = Vec::new();
    for raw in spec.split(',') {
        let item = raw.trim();
        if item.is_empty() {
            continue;
        }
        let found = if let Ok(i) = item.parse::<u32>() {
            gpus.iter().find(|g| g.index == i)
        } else if item.to_ascii_uppercase().starts_with("GPU-") || item.starts_with("MIG-") {
            gpus.iter().find(|g| g.uuid.starts_with(item))
        } else {
            let want = item.to_ascii_lowercase();
            gpus.iter().find(|g| {
                let have = g.pci_bus_id.to_ascii_lowercase();
                have == want || have.ends_with(&want)
            })
        };
        match found {
            Some(g) if !out.iter().any(|o| o.uuid == g.uuid) => out.push(g.clone()),
            Some(_) => {}
            None => {
                return Err(GpuSelectError::NotOnNode {
                    item: item.to_string(),
                    known: gpus
                        .iter()
                        .map(|g| format!("{} ({})", g.index, g.uuid))
                        .collect(),
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(i: u32) -> GpuInfo {
        GpuInfo {
            index: i,
            uuid: format!("GPU-aaaa{i}-1111"),
            pci_bus_id: format!("00000000:1{i}:00.0"),
            name: "Sim".into(),
            memory_total_bytes: 1,
            pcie: None,
            health: GpuHealth::default(),
            processes: vec![],
            state: ProbeState::Ok,
        }
    }

    #[test]
    fn busy_counts_only_the_jobs_gpus() {
        let mut g = vec![gpu(0), gpu(1), gpu(2)];
        g[0].processes.push(ComputeProcess {
            pid: 42,
            name: None,
            used_memory_bytes: None,
        });
        assert_eq!(busy_among(&g, ""), vec!["GPU-aaaa0-1111 (pid 42)"]);
        assert_eq!(busy_among(&g, "0,2"), vec!["GPU-aaaa0-1111 (pid 42)"]);
        assert!(busy_among(&g, "1,2").is_empty());
        assert!(busy_among(&g, "GPU-aaaa2").is_empty());
        // A list naming no GPU here: every GPU counts.
        assert_eq!(busy_among(&g, "7"), vec!["GPU-aaaa0-1111 (pid 42)"]);
    }

    #[test]
    fn selects_by_index_uuid_and_bus_id() {
        let g = vec![gpu(0), gpu(1), gpu(2)];
        let pick = |s: &str| {
            select_gpus(&g, s)
                .unwrap()
                .iter()
                .map(|g| g.index)
                .collect::<Vec<_>>()
        };
        assert_eq!(pick("2,0"), vec![2, 0]);
        assert_eq!(pick("GPU-aaaa1"), vec![1]);
        assert_eq!(pick("00000000:12:00.0"), vec![2]);
        assert_eq!(pick(""), vec![0, 1, 2]);
        let err = select_gpus(&g, "7").unwrap_err().to_string();
        assert!(err.contains("\"7\" is not on this node"), "{err}");
    }
}

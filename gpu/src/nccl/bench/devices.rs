//! The request's GPUs mapped to CUDA devices, and this process's place in a communicator across
//! processes.

use ddpcheck_core::backend::CollectiveRequest;
use ddpcheck_core::num::len_u32;
use ddpcheck_core::topology::GpuRef;

use crate::nccl::ffi::{CUdevice, Cuda};
use crate::nccl::plan;
use crate::nccl::protocol::{FailKind, RankDevice};

use super::shared::Failure;

/// Maps the request's GPUs (by PCI bus id) to CUDA ordinals of this process; all visible
/// GPUs when the request names none.
pub(crate) fn resolve_devices(cuda: &Cuda, gpus: &[GpuRef]) -> Result<Vec<RankDevice>, Failure> {
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "(unset)".into());
    let count = cuda
        .device_count()
        .map_err(|e| Failure::cuda_setup(e, "counting CUDA devices"))?;
    if count <= 0 {
        return Err(Failure::new(
            FailKind::Unavailable,
            format!("CUDA sees no GPU (CUDA_VISIBLE_DEVICES={visible})"),
        ));
    }
    let mut out: Vec<RankDevice> = Vec::new();
    if gpus.is_empty() {
        for i in 0..count {
            let d = cuda
                .device(i)
                .map_err(|e| Failure::cuda_setup(e, "cuDeviceGet"))?;
            out.push(describe(cuda, len_u32(out.len()), String::new(), d));
        }
        return Ok(out);
    }
    for g in gpus {
        let asked = g.pci_bus_id.trim().to_string();
        if asked.is_empty() {
            return Err(Failure::new(
                FailKind::Invalid,
                format!(
                    "GPU {} ({}) has no PCI bus id; GPUs are matched by bus id",
                    g.index, g.uuid
                ),
            ));
        }
        let d = cuda.device_by_bus_id(&asked).or_else(|first| {
            let alt = plan::cuda_bus_id(&asked);
            if alt != asked {
                cuda.device_by_bus_id(&alt).map_err(|_| first)
            } else {
                Err(first)
            }
        });
        let d = d.map_err(|e| {
            let mut f = Failure::cuda_setup(
                e,
                &format!(
                    "GPU {asked} (index {}, {}) is not visible to CUDA (CUDA_VISIBLE_DEVICES={visible}, {count} visible)",
                    g.index, g.uuid
                ),
            );
            if f.kind == FailKind::Worker {
                f.kind = FailKind::Unavailable;
            }
            f
        })?;
        if let Some(prev) = out.iter().find(|x| x.cuda_ordinal == d) {
            return Err(Failure::new(
                FailKind::Invalid,
                format!(
                    "GPU {asked} is listed twice (same CUDA device as {})",
                    prev.requested_bus_id
                ),
            ));
        }
        out.push(describe(cuda, len_u32(out.len()), asked, d));
    }
    Ok(out)
}

/// In a communicator across processes, this process's GPUs take the global ranks from
/// `first_rank` on; with no GPUs named, the first `local_ranks` visible ones.
pub(super) fn place_in_group(
    mut devices: Vec<RankDevice>,
    req: &CollectiveRequest,
) -> Result<Vec<RankDevice>, Failure> {
    let Some(g) = &req.group else {
        return Ok(devices);
    };
    if devices.len() < g.local_ranks as usize {
        return Err(Failure::new(
            FailKind::Unavailable,
            format!(
                "{} GPU(s) visible to CUDA, {} needed for this node's ranks (CUDA_VISIBLE_DEVICES={})",
                devices.len(),
                g.local_ranks,
                std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "(unset)".into())
            ),
        ));
    }
    devices.truncate(g.local_ranks as usize);
    for (i, d) in devices.iter_mut().enumerate() {
        d.rank = g.first_rank + len_u32(i);
    }
    Ok(devices)
}

fn describe(cuda: &Cuda, rank: u32, requested: String, d: CUdevice) -> RankDevice {
    RankDevice {
        rank,
        requested_bus_id: requested,
        cuda_ordinal: d,
        cuda_bus_id: cuda.bus_id(d),
        name: cuda.name(d),
    }
}

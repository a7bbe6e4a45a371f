//! Simulated host↔device copies: each GPU's link as it stands under load (degraded-pcie's GPU at
//! its narrower, slower link), at a share of the link's capacity, with a fixed start-up cost.

use ddpcheck_core::capacity::pcie_bytes_per_s;
use ddpcheck_core::hostcopy::{CopyDirection, CopyRequest, CopySample, GpuCopies};
use ddpcheck_core::num::ToF64;
use ddpcheck_core::topology::GpuRef;

use crate::timing::jitter;

/// Share of the link's after-encoding rate a copy engine reaches (sim assumption: 0.87, about
/// 55 GB/s on gen5 x16, where Azure's H100/H200 floor is 48).
pub const COPY_EFFICIENCY: f64 = 0.87;
/// Fixed cost of one copy, µs (sim assumption: launch and DMA set-up).
pub const COPY_LATENCY_US: f64 = 8.0;

/// One GPU's samples on a link of `gen` × `width` (as it runs under load).
pub fn gpu_copies(
    profile: &str,
    gpu: GpuRef,
    gen: u32,
    width: u32,
    req: &CopyRequest,
) -> GpuCopies {
    let rate = pcie_bytes_per_s(gen, width).unwrap_or(0.0) * COPY_EFFICIENCY;
    let mut samples = Vec::new();
    for d in CopyDirection::BOTH {
        for &bytes in &req.sizes {
            let key = format!("{profile}|{}|{}|{bytes}", gpu.uuid, d.as_str());
            let time_us = if rate > 0.0 {
                (COPY_LATENCY_US + bytes.to_f64() / rate * 1e6) * (1.0 + jitter(&key))
            } else {
                f64::INFINITY
            };
            samples.push(CopySample {
                direction: d,
                bytes,
                iters: req.iters,
                time_us,
                gbps: bytes.to_f64() / time_us / 1e3,
            });
        }
    }
    GpuCopies { gpu, samples }
}

//! Injectable faults: their names, what each does to a simulated node, and its fixed parameters.

use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    DegradedPcie,
    SlowLink,
    Busy,
    Hang,
    StuckNvml,
    GpuLost,
    Ecc,
    WrongResult,
    SlowNic,
    Acs,
    IommuTranslated,
    Vm,
    CrossNuma,
    Mig,
    NvlinkDown,
    NoFabricManager,
    IdleDownclock,
    SlowGpu,
    P2pHang,
    P2pPatched,
}

/// The fault table: name and one line of help, in the order help texts list them.
pub const FAULTS: [(Fault, &str, &str); 20] = [
    (
        Fault::DegradedPcie,
        "degraded-pcie",
        "GPU 1's PCIe link trained down to x8 and one generation below its maximum; collectives over PCIe are capped by it, NVLink is unaffected",
    ),
    (
        Fault::SlowLink,
        "slow-link",
        "every collective's bandwidth at 30% of normal (a bad cable, a link in recovery)",
    ),
    (
        Fault::Busy,
        "busy",
        "a foreign compute process (pid 4242, python3) on GPU 0",
    ),
    (
        Fault::Hang,
        "hang",
        "collectives and DDP runs never finish: the call sleeps until its deadline, then reports a timeout",
    ),
    (
        Fault::StuckNvml,
        "stuck-nvml",
        "NVML calls on GPU 0 run past their deadline (the GPU is marked stuck)",
    ),
    (
        Fault::GpuLost,
        "gpu-lost",
        "GPU 1 fell off the bus (the GPU is marked lost)",
    ),
    (
        Fault::Ecc,
        "ecc",
        "GPU 0 reports 2 volatile uncorrected ECC errors",
    ),
    (
        Fault::WrongResult,
        "wrong-result",
        "all-reduce results contain wrong elements (data corruption on the path)",
    ),
    (
        Fault::SlowNic,
        "slow-nic",
        "the node's inter-node NIC runs at 25% of normal in cluster runs (a flapping port, a link trained down); intra-node collectives are unaffected",
    ),
    (
        Fault::Acs,
        "acs",
        "ACS on every bridge above the GPUs (SrcValid ReqRedir CmpltRedir UpstreamFwd): P2P below a PCIe switch goes up to the root complex, at 40% of its bandwidth",
    ),
    (
        Fault::IommuTranslated,
        "iommu-translated",
        "the IOMMU translates DMA (groups of type DMA-FQ): PCIe peer traffic at 80% of normal",
    ),
    (
        Fault::Vm,
        "vm",
        "a virtual machine: the hypervisor CPU flag, every GPU directly on the root bus, NUMA node -1",
    ),
    (
        Fault::CrossNuma,
        "cross-numa",
        "the second half of the GPUs on NUMA node 1: their PCIe pairs with the first half are SYS (NVLink pairs keep NVLink)",
    ),
    (
        Fault::Mig,
        "mig",
        "GPU 0 in MIG mode",
    ),
    (
        Fault::NvlinkDown,
        "nvlink-down",
        "GPU 1 keeps two thirds of its NVLinks (12 of 18, 8 of 12): its pairs narrow to them and their NVLink bandwidth with them",
    ),
    (
        Fault::NoFabricManager,
        "no-fabric-manager",
        "NVSwitch node without Fabric Manager: CUDA reports error 802 (system not ready) and no collective starts",
    ),
    (
        Fault::IdleDownclock,
        "idle-downclock",
        "every GPU's PCIe link idles at gen1 (power saving) and trains to its maximum once a collective runs; bandwidth is unaffected",
    ),
    (
        Fault::SlowGpu,
        "slow-gpu",
        "GPU 1 computes at 60% of its speed (a power or clock cap): every DDP step that synchronises waits for it; one GPU alone (GPU 0), nocomm and collectives do not show it, so no step-time model fed with them predicts it",
    ),
    (
        Fault::P2pHang,
        "p2p-hang",
        "P2P forced on a card that does not support it: a collective whose pairs go P2P over PCIe (NCCL_P2P_LEVEL reaching their path) never finishes; staged through host memory (NCCL_P2P_DISABLE=1, or NCCL's default across a host bridge) it runs",
    ),
    (
        Fault::P2pPatched,
        "p2p-patched",
        "a patched driver: NVML reports P2P OK for read, write and atomics on every pair, and all-reduces whose pairs go P2P over PCIe return wrong elements",
    ),
];

/// acs: share of PCIe P2P bandwidth left when peer traffic turns at the root complex (sim
/// assumption: about the host-bridge figure, 3.9 of 7.8 GB/s on a6000x2-pxb).
pub const ACS_FACTOR: f64 = 0.4;
/// iommu-translated: share of PCIe peer bandwidth left (sim assumption).
pub const IOMMU_FACTOR: f64 = 0.8;
/// mig: the GPU in MIG mode.
pub const MIG_GPU: usize = 0;
/// nvlink-down: the GPU that loses links.
pub const NVLINK_DOWN_GPU: usize = 1;
/// nvlink-down: the links the GPU keeps, two thirds of its own (12 of 18 on an NV18 node, 8 of
/// 12 on bridged H100 PCIe cards, 2 of 4 on a GA102 bridge).
pub fn nvlinks_left(all: u32) -> u32 {
    all * 2 / 3
}

/// slow-gpu: the share of GPU 1's compute speed left.
pub const SLOW_GPU_SPEED: f64 = 0.6;

/// slow-nic: fraction of the normal NIC bandwidth in cluster runs.
pub const SLOW_NIC_FACTOR: f64 = 0.25;

/// slow-link: fraction of normal bandwidth.
pub const SLOW_LINK_FACTOR: f64 = 0.30;
/// idle-downclock: the generation a link idles at (NVIDIA GPUs drop to gen1 when idle).
pub const IDLE_GEN: u32 = 1;
/// degraded-pcie: the GPU whose link is degraded and its width.
pub const DEGRADED_GPU: usize = 1;
pub const DEGRADED_WIDTH: u32 = 8;
/// Share of raw PCIe link bandwidth a collective can use (TLP/DLLP overhead and DMA
/// efficiency; sim assumption).
pub const PCIE_EFFICIENCY: f64 = 0.8;
/// busy: the foreign process.
pub const BUSY_GPU: usize = 0;
pub const BUSY_PID: u32 = 4242;
pub const BUSY_NAME: &str = "python3";
pub const BUSY_MEMORY_BYTES: u64 = 20 << 30;
/// stuck-nvml / gpu-lost / ecc: which GPU.
pub const STUCK_GPU: usize = 0;
pub const LOST_GPU: usize = 1;
pub const ECC_GPU: usize = 0;
pub const ECC_UNCORRECTED: u64 = 2;
/// wrong-result: one wrong element per this many, at least one per checked size.
pub const WRONG_PER_ELEMENTS: u64 = 1 << 16;

impl Fault {
    pub fn name(self) -> &'static str {
        FAULTS
            .iter()
            .find(|(f, _, _)| *f == self)
            .map(|(_, n, _)| *n)
            .unwrap_or("?")
    }

    pub fn help(self) -> &'static str {
        FAULTS
            .iter()
            .find(|(f, _, _)| *f == self)
            .map(|(_, _, h)| *h)
            .unwrap_or("")
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Fault {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        FAULTS
            .iter()
            .find(|(_, n, _)| n.eq_ignore_ascii_case(s))
            .map(|(f, _, _)| *f)
            .ok_or(())
    }
}

/// Usable bandwidth of a PCIe link, GB/s in one direction: per-lane rate after line coding
/// (gen1/2 8b/10b, gen3+ 128b/130b; gen6 FLIT counted at its raw rate) × width × efficiency.
pub fn pcie_usable_gbps(gen: u32, width: u32) -> f64 {
    let lane = match gen {
        0 | 1 => 0.25,
        2 => 0.5,
        3 => 0.985,
        4 => 1.969,
        5 => 3.938,
        _ => 7.877,
    };
    lane * f64::from(width) * PCIE_EFFICIENCY
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for (f, n, h) in FAULTS {
            assert_eq!(n.parse::<Fault>(), Ok(f));
            assert_eq!(f.name(), n);
            assert!(!h.is_empty());
        }
        assert!("meltdown".parse::<Fault>().is_err());
    }

    #[test]
    fn pcie_rates() {
        // gen3 x16 ≈ 15.8 GB/s raw, 12.6 usable; gen5 x16 ≈ 63 raw.
        assert!((pcie_usable_gbps(3, 16) - 12.61).abs() < 0.01);
        assert!((pcie_usable_gbps(5, 16) / pcie_usable_gbps(4, 8) - 4.0).abs() < 0.01);
    }
}

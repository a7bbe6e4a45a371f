//! Consumer cards' P2P status, forced P2P that hangs or a patched driver's wrong values, and the VM
//! fault's platform.

use super::*;

/// The consumer profiles carry NVML's status of every capability with its reason; a patched
/// driver (p2p-patched) reports P2P OK where the product policy has none.
#[test]
fn consumer_profiles_carry_nvml_p2p_status_per_capability() {
    use ddpcheck_core::topology::{P2pReason, P2pStatus};
    let caps = |spec: &str| {
        let b = sim(spec);
        let t = b.topology(&b.inventory().unwrap().gpus).unwrap();
        let pair = t.pairs()[0].clone();
        (pair.p2p, pair.p2p_status.unwrap(), t.p2p_status[0][0])
    };
    let (read, c, own) = caps("rtx4090x4-phb");
    assert_eq!(read, Some(P2pStatus::NotSupported));
    assert_eq!(c.read, P2pReason::GpuNotSupported);
    assert_eq!(c.atomics, P2pReason::GpuNotSupported);
    assert_eq!(c.nvlink, P2pReason::NotSupported);
    assert_eq!(own.read, P2pReason::Ok);
    let (read, c, _) = caps("rtx3090x2-nvlink");
    assert_eq!(read, Some(P2pStatus::Ok));
    assert_eq!(c.nvlink, P2pReason::Ok);
    assert_eq!(caps("rtx5090x2-pcie").1.write, P2pReason::GpuNotSupported);
    let (read, c, _) = caps("rtx5090x2-pcie+p2p-patched");
    assert_eq!(read, Some(P2pStatus::Ok));
    assert_eq!(c.read, P2pReason::Ok);
    // The older profiles give the read status alone, as before.
    let b = sim("a6000x4-phb");
    assert!(b
        .topology(&b.inventory().unwrap().gpus)
        .unwrap()
        .p2p_status
        .is_empty());
}

fn forced_p2p(deadline_ms: u64) -> PreflightOptions {
    PreflightOptions {
        deadline: Duration::from_millis(deadline_ms),
        nccl_env: [("NCCL_P2P_LEVEL".to_string(), "SYS".to_string())].into(),
        ..PreflightOptions::default()
    }
}

/// p2p-hang: P2P forced over PCIe on cards whose policy has none never finishes; the TIMEOUT's
/// one line names forced P2P as the likely cause and NCCL_P2P_DISABLE=1 as the thing to try.
/// NCCL's own choice (staging through host memory) runs.
#[test]
fn p2p_hang_times_out_naming_forced_p2p_and_the_fix() {
    let r = preflight_with("rtx4090x4-phb+p2p-hang", &forced_p2p(200));
    assert_eq!(r.verdict, Verdict::Timeout, "{}", r.reason);
    assert!(
        r.reason.contains("likely cause: peer-to-peer over PCIe"),
        "{}",
        r.reason
    );
    assert!(r.reason.contains("NCCL_P2P_LEVEL=SYS"), "{}", r.reason);
    assert!(r.reason.contains("GPU_NOT_SUPPORTED"), "{}", r.reason);
    assert!(r.reason.contains("try NCCL_P2P_DISABLE=1"), "{}", r.reason);
    assert_eq!(preflight("rtx4090x4-phb+p2p-hang").verdict, Verdict::Ok);
    // A hang with P2P out of the picture names no P2P cause.
    let r = preflight_with(
        "rtx4090x4-phb+hang",
        &PreflightOptions {
            deadline: Duration::from_millis(200),
            ..PreflightOptions::default()
        },
    );
    assert_eq!(r.verdict, Verdict::Timeout);
    assert!(!r.reason.contains("likely cause"), "{}", r.reason);
}

/// p2p-patched: a patched driver reports P2P OK and forced P2P returns wrong values: CRITICAL,
/// the one line naming P2P on a GeForce card as the likely cause.
#[test]
fn p2p_patched_returns_wrong_values_naming_the_patched_driver() {
    let r = preflight_with("rtx5090x2-pcie+p2p-patched", &forced_p2p(30_000));
    assert_eq!(r.verdict, Verdict::Critical, "{}", r.reason);
    assert!(r.reason.contains("wrong elements"), "{}", r.reason);
    assert!(r.reason.contains("a patched driver"), "{}", r.reason);
    assert!(r.reason.contains("try NCCL_P2P_DISABLE=1"), "{}", r.reason);
    // NCCL's default across the host bridge stages through host memory: correct results.
    assert_eq!(preflight("rtx5090x2-pcie+p2p-patched").verdict, Verdict::Ok);
}

/// A profile that is a VM (a cloud instance) shows what the `vm` fault shows on any profile:
/// the hypervisor flag, every GPU on the virtual root bus, no NUMA node; adding the fault changes
/// nothing, and a bare-metal profile is not a VM.
#[test]
fn a_vm_profile_shows_the_platform_of_the_vm_fault() {
    let facts = |spec: &str| {
        let b = sim(spec);
        let gpus = b.inventory().unwrap().gpus;
        b.platform(&gpus).unwrap()
    };
    for spec in [
        "a10gx8-vm",
        "hgx-h100-slice2",
        "a10gx8-vm+vm",
        "l40s-gen4+vm",
    ] {
        let p = facts(spec);
        assert_eq!(p.hypervisor, Some(true), "{spec}");
        assert!(!p.gpus.is_empty(), "{spec}");
        for g in &p.gpus {
            assert_eq!(g.on_root_bus, Some(true), "{spec}");
            assert_eq!(g.numa_node, Some(-1), "{spec}");
        }
    }
    let bare = facts("l40s-gen4");
    assert_eq!(bare.hypervisor, Some(false));
    assert!(bare.gpus.iter().all(|g| g.on_root_bus == Some(false)));
    // The HGX slice's guest sees no NVSwitch, so no Fabric Manager is asked for.
    assert_eq!(facts("hgx-h100-slice2").fabric.nvswitches, 0);
}

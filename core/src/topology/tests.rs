//! Tests of the topology: link classes, the matrix and its legend.

use super::*;
use crate::testkit::two_gpus as two;

#[test]
fn parses_and_prints_every_class() {
    for s in ["X", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS"] {
        assert_eq!(s.parse::<LinkClass>().unwrap().to_string(), s);
    }
    assert!("NV0".parse::<LinkClass>().is_err());
    assert!("QPI".parse::<LinkClass>().is_err());
}

#[test]
fn rejects_asymmetric_matrix() {
    let mut t = two(LinkClass::Phb);
    t.links[0][1] = LinkClass::Sys;
    assert_eq!(t.validate(), Err(TopologyError::Asymmetric(1, 0)));
}

#[test]
fn p2p_reasons_fold_to_the_read_status_and_name_the_refusal() {
    assert_eq!(P2pReason::Ok.summary(), P2pStatus::Ok);
    assert_eq!(P2pReason::Unknown.summary(), P2pStatus::Unknown);
    for r in &P2pReason::ALL[1..6] {
        assert_eq!(r.summary(), P2pStatus::NotSupported, "{r:?}");
    }
    let mut caps = P2pCaps::all(P2pReason::Ok);
    caps.nvlink = P2pReason::NotSupported;
    // No NVLink is no refusal of P2P over PCIe.
    assert_eq!(caps.pcie_refusal(), None);
    caps.write = P2pReason::GpuNotSupported;
    assert_eq!(
        caps.pcie_refusal(),
        Some(("write", P2pReason::GpuNotSupported))
    );
    let json = serde_json::to_string(&caps).unwrap();
    assert!(json.contains(r#""write":"gpu_not_supported""#), "{json}");
    assert_eq!(caps.words(), "read OK, write GNS, atomics OK, nvlink NS");
}

#[test]
fn worst_link_prefers_pcie_over_nvlink() {
    let mut t = two(LinkClass::Nv(18));
    assert_eq!(t.worst_link(), Some(LinkClass::Nv(18)));
    t.links[0][1] = LinkClass::Phb;
    t.links[1][0] = LinkClass::Phb;
    assert_eq!(t.worst_link(), Some(LinkClass::Phb));
}

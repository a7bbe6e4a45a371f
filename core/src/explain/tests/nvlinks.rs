//! NVLinks judged against the links the GPU has (NVML answers for them; `nvidia-smi nvlink -s`
//! lists them), the SKU's count only where that is unknown.

use super::*;

#[test]
fn links_by_design_fewer_than_the_sku_table_are_not_down() {
    // A GPU that lists 12 links, all up (a bridge of 12, a board that wires 12): the SKU
    // table's 18 for its name must not call 6 missing.
    let mut n = Node::new(2, "NVIDIA H100 80GB HBM3", LinkClass::Nv(12));
    for g in &mut n.gpus {
        g.health.nvlinks_active = Some(12);
        g.health.nvlinks_present = Some(12);
    }
    let e = n.explain();
    assert!(
        !kinds(&e).contains(&CauseKind::NvlinkDown),
        "{:?}",
        kinds(&e)
    );
}

#[test]
fn links_present_but_down_are_down_against_the_links_present() {
    // DCGM#198's shape: 18 links listed, none up.
    let mut n = Node::new(2, "NVIDIA H100 80GB HBM3", LinkClass::Nv(18));
    n.gpus[1].health.nvlinks_active = Some(0);
    n.gpus[1].health.nvlinks_present = Some(18);
    let e = n.explain();
    let c = find(&e, CauseKind::NvlinkDown);
    assert_eq!(c.evidence[0].expected.as_deref(), Some("18"));
    assert!(
        c.evidence[0]
            .source
            .as_deref()
            .unwrap_or("")
            .contains("present"),
        "{:?}",
        c.evidence
    );
    // A card whose SKU the table leaves out (PCIe with bridges) is judged on its own links.
    let mut p = Node::new(2, "NVIDIA H100 PCIe", LinkClass::Nv(12));
    p.gpus[0].health.nvlinks_active = Some(8);
    p.gpus[0].health.nvlinks_present = Some(12);
    let c = find(&p.explain(), CauseKind::NvlinkDown).clone();
    assert!(c.message.contains("8 of 12"), "{}", c.message);
}

/// A PCIe card's links with no bridge on them answer "inactive": none up on a card the SKU
/// table gives no count (no board wires them) is no bridge, not links down (leptonai/gpud
/// PR#1147: H100 PCIe called an unhealthy fabric); some up and some not is a bridge with links
/// down.
#[test]
fn a_pcie_card_without_a_bridge_has_no_links_down() {
    for (name, present) in [("NVIDIA RTX A6000", 4), ("NVIDIA H100 PCIe", 12)] {
        let mut n = Node::new(2, name, LinkClass::Phb);
        for g in &mut n.gpus {
            g.health.nvlinks_active = Some(0);
            g.health.nvlinks_present = Some(present);
        }
        let e = n.explain();
        assert!(
            !kinds(&e).contains(&CauseKind::NvlinkDown),
            "{name}: {:?}",
            kinds(&e)
        );
    }
    // An SXM board's links are wired: none up is all down.
    let mut s = Node::new(2, "NVIDIA H100 80GB HBM3", LinkClass::Phb);
    s.gpus[0].health.nvlinks_active = Some(0);
    s.gpus[0].health.nvlinks_present = Some(18);
    assert!(kinds(&s.explain()).contains(&CauseKind::NvlinkDown));
}

/// An H100 NVL lists 18 links and is built with 12 (three bridges of four): 6 inactive is its
/// design (Azure/azurehpc-health-checks#162), and none up of the 12 is links down
/// (NVIDIA/DCGM#198), not a card without a bridge.
#[test]
fn h100_nvl_is_judged_against_its_twelve_links() {
    let mut n = Node::new(2, "NVIDIA H100 NVL", LinkClass::Nv(12));
    for g in &mut n.gpus {
        g.health.nvlinks_active = Some(12);
        g.health.nvlinks_present = Some(18);
    }
    assert!(
        !kinds(&n.explain()).contains(&CauseKind::NvlinkDown),
        "{:?}",
        kinds(&n.explain())
    );
    let mut d = Node::new(2, "NVIDIA H100 NVL", LinkClass::Phb);
    for g in &mut d.gpus {
        g.health.nvlinks_active = Some(0);
        g.health.nvlinks_present = Some(18);
    }
    let e = d.explain();
    let c = find(&e, CauseKind::NvlinkDown);
    assert!(c.message.contains("0 of 12"), "{}", c.message);
    assert!(c.source.contains("H100 NVL"), "{}", c.source);
}

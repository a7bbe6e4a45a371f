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

//! Platform evidence cites where it was read: the running node's sysfs and /proc, or the
//! artifacts a user gave (`PlatformFacts::evidence_from`).

use super::*;

#[test]
fn evidence_read_from_artifacts_cites_them_not_sysfs() {
    let mut n = Node::new(2, "NVIDIA H100 PCIe", LinkClass::Phb);
    n.gpus[1].pcie = Some(PcieLink {
        gen_current: 5,
        gen_max: 5,
        width_current: 8,
        width_max: 16,
    });
    n.platform.hypervisor = Some(true);
    let live = n.explain();
    let link = find(&live, CauseKind::PcieDowntrained);
    assert!(link.evidence[0]
        .source
        .as_deref()
        .unwrap_or("")
        .contains("sysfs"));
    n.platform.evidence_from = Some("artifacts: lspci -vvv (dir/lspci.txt)".into());
    let e = n.explain();
    for k in [CauseKind::PcieDowntrained, CauseKind::VirtualMachine] {
        let c = find(&e, k);
        for ev in &c.evidence {
            let src = ev.source.as_deref().unwrap_or("");
            assert!(
                !src.contains("sysfs") && !src.contains("/proc"),
                "{k:?}: {ev:?}"
            );
        }
        assert!(
            c.evidence
                .iter()
                .any(|ev| ev.source.as_deref() == Some("artifacts: lspci -vvv (dir/lspci.txt)")),
            "{k:?}: {:?}",
            c.evidence
        );
    }
}

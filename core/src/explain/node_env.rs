//! NCCL variables judged on the whole node: those that need no pair to be judged
//! (`NCCL_P2P_LEVEL=LOC` where no topology matrix gives the pairs), and `NCCL_TOPO_FILE`, judged
//! against what the pairs and the node's all-reduce show.

use super::transport;
use super::{Action, Cause, CauseKind, ExplainInput, NodeChain, PairChain};
use crate::finding::{Evidence, Severity};

pub(super) fn causes(input: &ExplainInput<'_>) -> Vec<Cause> {
    p2p_level_loc(input).into_iter().collect()
}

/// `NCCL_P2P_LEVEL=LOC` (or `0`) turns P2P off between any two GPUs, whatever their path: on a
/// node of two or more GPUs it is too low on every pair. Judged here only where no topology
/// matrix gives the pairs (each pair's chain judges it where one does).
fn p2p_level_loc(input: &ExplainInput<'_>) -> Option<Cause> {
    let env = input.nccl_env;
    if input.topology.is_some()
        || input.gpus.len() < 2
        || transport::env_on(env, "NCCL_P2P_DISABLE")
        || transport::p2p_level(env) != Some(0)
    {
        return None;
    }
    let raw = env.get("NCCL_P2P_LEVEL").cloned().unwrap_or_default();
    let mut c = Cause::new(
        CauseKind::P2pLevelTooLow,
        Severity::Warning,
        Action::UnsetEnv,
        Vec::new(),
    );
    c.message = format!(
        "NCCL_P2P_LEVEL={raw} turns P2P off between every two GPUs (LOC: the same GPU only), so \
         NCCL stages through host memory where NVLink or PCIe P2P would be used"
    );
    c.short = format!("NCCL_P2P_LEVEL={raw}");
    c.fix = "unset NCCL_P2P_LEVEL".into();
    c.evidence = vec![
        Evidence::new("NCCL_P2P_LEVEL", raw).expected("unset"),
        Evidence::new("GPUs", input.gpus.len().to_string()),
    ];
    c.source =
        "NCCL documentation, Environment Variables (NCCL_P2P_LEVEL: LOC never uses P2P)".into();
    Some(c)
}

/// `NCCL_TOPO_FILE` set: NCCL takes the node's topology from the file, not from what it detects.
/// Info where nothing is wrong (many clouds set a correct one); a warning, naming the file as the
/// first suspect, where a figure is below expected or a transport worse than the topology allows.
pub(super) fn topo_file(
    input: &ExplainInput<'_>,
    pairs: &[PairChain],
    node: Option<&NodeChain>,
) -> Option<Cause> {
    let file = input
        .nccl_env
        .get("NCCL_TOPO_FILE")
        .map(|f| f.trim())
        .filter(|f| !f.is_empty())?;
    let slow = pairs
        .iter()
        .flat_map(|p| p.causes.iter())
        .chain(node.iter().flat_map(|n| n.causes.iter()))
        .filter(|c| c.severity >= Severity::Warning)
        .find(|c| {
            matches!(
                c.kind,
                CauseKind::BelowExpected | CauseKind::TransportDowngraded
            )
        });
    let (severity, action) = match slow {
        Some(_) => (Severity::Warning, Action::UnsetEnv),
        None => (Severity::Info, Action::None),
    };
    let mut c = Cause::new(CauseKind::NcclTopoFile, severity, action, Vec::new());
    c.short = format!("NCCL_TOPO_FILE={file}");
    c.evidence = vec![Evidence::new("NCCL_TOPO_FILE", file)];
    match slow {
        Some(s) => {
            c.message = format!(
                "NCCL_TOPO_FILE={file} replaces the topology NCCL detects, and {}: the file is \
                 the first suspect (one that does not describe this machine misroutes every \
                 channel)",
                s.short
            );
            c.fix = "rerun with NCCL_TOPO_FILE unset (or empty); keep the file only if it \
                     describes this machine"
                .into();
            c.evidence.push(Evidence::new("found", s.short.clone()));
        }
        None => {
            c.message = format!(
                "NCCL_TOPO_FILE={file}: NCCL reads the topology from this file instead of \
                 detecting it (clouds ship one per machine type); nothing measured here \
                 points at it"
            );
            c.fix = "none while the figures are as expected".into();
        }
    }
    c.source = "NCCL documentation, Environment Variables (NCCL_TOPO_FILE: an XML file \
                describing the topology, loaded before detection)"
        .into();
    Some(c)
}

//! NCCL variables judged on the whole node: those that need no pair to be judged
//! (`NCCL_P2P_LEVEL=LOC` where no topology matrix gives the pairs).

use super::transport;
use super::{Action, Cause, CauseKind, ExplainInput};
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

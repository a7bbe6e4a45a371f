//! Peer-to-peer over PCIe on consumer cards, for the snippet's environment section: never force
//! P2P where NVML's policy refuses it, and `NCCL_P2P_DISABLE=1` where P2P over PCIe is the
//! transport on cards where it hangs or returns wrong values (the seeds' lessons; sources in
//! docs/explain.md, "Consumer GPUs"), each resting on this node's env A/B or marked unmeasured.

use super::measured::P2pRisk;
use super::EnvAb;

/// What the env A/B measured for `NAME=VALUE`, in words for a comment; unmeasured otherwise.
fn basis(env_ab: &[EnvAb], name: &str, value: &str) -> String {
    let wanted = format!("{name}={value}");
    match env_ab
        .iter()
        .find(|ab| ab.label.split(',').any(|kv| kv.trim() == wanted))
    {
        Some(ab) => format!(
            "measured on this node: all-reduce busbw ×{:.2} in the env A/B",
            ab.busbw_ratio
        ),
        None => format!(
            "unmeasured on this node: `ddpcheck explain --ab` or `ddpcheck recommend --env-ab {wanted}` measures it"
        ),
    }
}

/// The comment of the line that unsets a forcing `NCCL_P2P_LEVEL`, where the risk explains it.
pub(super) fn unset_level_comment(risk: Option<&P2pRisk>) -> Option<String> {
    let risk = risk?;
    match (&risk.refused, &risk.suspect) {
        (Some(r), _) => Some(format!(
            "never force P2P where NVML's policy is off ({r}); forced P2P over PCIe hangs or returns wrong values on these cards"
        )),
        (None, Some(s)) => Some(format!(
            "forced P2P over PCIe hangs or returns wrong values on these cards ({s})"
        )),
        (None, None) => None,
    }
}

/// The P2P lines of the environment section: `NCCL_P2P_DISABLE=1` where P2P over PCIe is the
/// transport on these cards, a note where NVML's policy is off and nothing forces P2P.
pub(super) fn env_lines(
    risk: Option<&P2pRisk>,
    env_ab: &[EnvAb],
    forced: bool,
    disabled: bool,
) -> Vec<String> {
    let Some(risk) = risk else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(s) = risk.suspect.as_ref().filter(|_| !disabled) {
        out.push(format!(
            "export NCCL_P2P_DISABLE=1   # P2P over PCIe hangs or returns wrong values on these cards ({s}); {}",
            basis(env_ab, "NCCL_P2P_DISABLE", "1")
        ));
    }
    if let Some(r) = risk.refused.as_ref().filter(|_| !forced) {
        out.push(format!(
            "# leave NCCL_P2P_LEVEL unset: never force P2P where NVML's policy is off ({r})"
        ));
    }
    out
}

/// Whether an env A/B candidate forces P2P where NVML's policy is off: never exported.
pub(super) fn refused_candidate(risk: Option<&P2pRisk>, name: &str) -> bool {
    risk.is_some_and(|r| r.refused.is_some()) && name == "NCCL_P2P_LEVEL"
}

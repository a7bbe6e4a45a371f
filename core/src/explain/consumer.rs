//! Peer-to-peer on consumer cards: why NVML reports none between a pair (the GeForce product
//! policy, a registry key, the chipset or the host bridge topology) and what that leaves, and
//! the likely cause when an all-reduce over forced or patched P2P on PCIe hangs or returns wrong
//! values. Sources are in docs/explain.md, "Consumer GPUs".

use std::collections::BTreeMap;

use super::transport::{self, Transport};
use super::{CauseKind, PairChain};
use crate::finding::Evidence;
use crate::topology::{LinkClass, P2pCaps, P2pReason, P2pStatus, Pair};

/// NVIDIA's statement and NVML's own answer for GeForce cards.
pub const GEFORCE_POLICY_SOURCE: &str = "NVIDIA developer forum, \"Standard nVidia CUDA tests fail with dual RTX 4090 Linux box\" (https://forums.developer.nvidia.com/t/standard-nvidia-cuda-tests-fail-with-dual-rtx-4090-linux-box/233202): the RTX 4090 does not support P2P; `nvidia-smi topo -p2p rw` on two RTX 5090s shows GNS (https://github.com/noonghunna/club-3090/issues/1124)";
/// The hangs and wrong values of forced or patched P2P on GeForce cards.
pub const HANG_SOURCE: &str = "all-reduce hangs on RTX 4090s (https://github.com/NVIDIA/nccl-tests/issues/117), on eight RTX 4090s unless NCCL_P2P_DISABLE=1 (https://github.com/tinygrad/open-gpu-kernel-modules/issues/45); the P2P patch's README: early drivers reported P2P on the 4090 and its copies went to the wrong place (https://github.com/tinygrad/open-gpu-kernel-modules)";
/// The A/B's candidate where P2P over PCIe hangs or corrupts: staging through host memory.
pub const P2P_OFF: (&str, &str) = ("NCCL_P2P_DISABLE", "1");

/// True for NVIDIA's consumer cards (NVML's name `NVIDIA GeForce RTX 4090`).
pub fn is_geforce(name: &str) -> bool {
    name.to_ascii_uppercase().contains("GEFORCE")
}

/// What refuses P2P over PCIe between a pair, from NVML's reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `GPU_NOT_SUPPORTED`: the product has no P2P (GeForce).
    ProductPolicy,
    /// `DISABLED_BY_REGKEY`: a driver setting turns it off.
    RegistryKey,
    /// `CHIPSET_NOT_SUPPORTED` or `IOH_TOPOLOGY_NOT_SUPPORTED`: the root complex or the host
    /// bridges between the GPUs.
    Platform,
    /// `NOT_SUPPORTED` without a reason.
    Unexplained,
}

impl Refusal {
    pub fn of(r: P2pReason) -> Option<Refusal> {
        match r {
            P2pReason::GpuNotSupported => Some(Refusal::ProductPolicy),
            P2pReason::DisabledByRegkey => Some(Refusal::RegistryKey),
            P2pReason::ChipsetNotSupported | P2pReason::IohTopologyNotSupported => {
                Some(Refusal::Platform)
            }
            P2pReason::NotSupported => Some(Refusal::Unexplained),
            P2pReason::Ok | P2pReason::Unknown => None,
        }
    }

    /// What it means, in a clause.
    pub fn meaning(self, r: P2pReason) -> &'static str {
        match (self, r) {
            (Refusal::ProductPolicy, _) => {
                "the GPU's product policy: NVIDIA turns P2P off on GeForce cards"
            }
            (Refusal::RegistryKey, _) => "a driver registry key turns P2P off",
            (Refusal::Platform, P2pReason::ChipsetNotSupported) => {
                "the chipset (root complex) does not carry P2P between these GPUs"
            }
            (Refusal::Platform, _) => {
                "the host bridge topology between these GPUs does not carry P2P"
            }
            (Refusal::Unexplained, _) => "the driver gives no reason",
        }
    }

    /// Whether anything on this node changes it, and what.
    pub fn on_this_node(self) -> &'static str {
        match self {
            Refusal::ProductPolicy => "nothing supported on this node changes it (a patched open kernel module reports P2P on some GeForce cards, needs ReBAR on and the IOMMU off, and is where the hangs and wrong values come from)",
            Refusal::RegistryKey => "removing the driver setting that sets the key (the nvidia module's NVreg_RegistryDwords, or the Windows registry) restores it",
            Refusal::Platform => "nothing in software: the board's PCIe layout decides it",
            Refusal::Unexplained => "read `nvidia-smi topo -p2p rw` for the driver's own words",
        }
    }

    /// The kind of machine that would do better.
    pub fn better(self) -> &'static str {
        match self {
            Refusal::ProductPolicy => "cards whose product supports P2P (RTX professional or data-centre GPUs), or a pair with an NVLink bridge (RTX 3090), would do better",
            Refusal::RegistryKey => "this node without the key would do better",
            Refusal::Platform | Refusal::Unexplained => "a board whose GPUs share a PCIe switch, or GPUs joined by NVLink, would do better",
        }
    }
}

/// Where a pair's P2P status came from: every capability's answer where read, else the
/// read status alone.
pub fn status_words(p: &Pair<'_>) -> String {
    match (p.p2p_status, p.p2p) {
        (Some(c), _) => c.words(),
        (None, Some(s)) => format!("read {s:?}"),
        (None, None) => "not read".into(),
    }
}

/// Why the pair's transport is P2P over PCIe where that is known to hang or return wrong
/// values, in words; `None` where it is not (NVLink, SHM, or P2P a data-centre card supports).
pub fn p2p_over_pcie_suspect(
    p: &Pair<'_>,
    model: &str,
    env: &BTreeMap<String, String>,
) -> Option<String> {
    if p.link.is_nvlink() || p.link == LinkClass::X {
        return None;
    }
    if transport::predicted(p.link, p.p2p, env) != Transport::P2p {
        return None;
    }
    let mut why = Vec::new();
    let level = transport::p2p_level(env);
    if p.link.crosses_host_bridge() && level.is_some_and(|l| l >= transport::path_rank(p.link)) {
        let raw = env.get("NCCL_P2P_LEVEL").cloned().unwrap_or_default();
        why.push(format!(
            "NCCL_P2P_LEVEL={raw} forces P2P across the host bridge"
        ));
    }
    let refusal = p.p2p_status.and_then(|c| c.pcie_refusal());
    match (refusal, p.p2p) {
        (Some((cap, r)), _) => why.push(format!(
            "NVML reports P2P {cap} {} on {model}",
            r.nvml_name()
        )),
        (None, Some(P2pStatus::Ok)) if is_geforce(model) => why.push(format!(
            "NVML reports P2P OK on {model}, a GeForce card whose product has none: a patched driver"
        )),
        (None, _) if is_geforce(model) => why.push(format!(
            "{model} is a GeForce card, whose product has no P2P"
        )),
        _ => {}
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// The one line's clause naming the likely cause and the thing to try.
pub fn likely_cause_words(pair: &str, why: &str) -> String {
    format!(
        "likely cause: peer-to-peer over PCIe on {pair} ({why}), which hangs or returns wrong values on these cards; try NCCL_P2P_DISABLE=1 (`ddpcheck explain --ab` measures it)"
    )
}

/// `GPU0–GPU1 (PHB)`.
pub fn pair_name(p: &Pair<'_>) -> String {
    format!("GPU{}–GPU{} ({})", p.a.index, p.b.index, p.link)
}

/// The first pair (of `pairs`) whose P2P over PCIe is suspect, with its words.
pub fn first_suspect(
    pairs: &[Pair<'_>],
    model: &str,
    env: &BTreeMap<String, String>,
) -> Option<(String, String)> {
    pairs
        .iter()
        .find_map(|p| p2p_over_pcie_suspect(p, model, env).map(|w| (pair_name(p), w)))
}

/// A pair's PCIe refusal where NVML read every capability.
pub fn refusal_of(caps: Option<P2pCaps>) -> Option<(&'static str, P2pReason, Refusal)> {
    let (cap, r) = caps?.pcie_refusal()?;
    Refusal::of(r).map(|k| (cap, r, k))
}

/// After the A/B: the broken-P2P cause says what staging through host memory measured on the
/// pair whose own run hung or corrupted.
pub(super) fn after_ab(chain: &mut PairChain) {
    let Some(ab) = chain.ab.clone() else { return };
    for c in chain
        .causes
        .iter_mut()
        .filter(|c| c.kind == CauseKind::P2pBroken && c.env_fix == ab.overrides)
    {
        let result = match (ab.after_gbps, &ab.error) {
            (Some(after), _) => format!(
                "{after:.2} GB/s{}",
                ab.after_transport
                    .as_deref()
                    .map(|t| format!(" over {t}"))
                    .unwrap_or_default()
            ),
            (None, Some(e)) => format!("failed too: {e}"),
            (None, None) => "no figure".into(),
        };
        c.evidence
            .push(Evidence::new("NCCL_P2P_DISABLE=1", result.clone()).source("this run's A/B"));
        c.message.push_str(&format!(
            "; this machine's A/B: with NCCL_P2P_DISABLE=1 the pair's all-reduce {}",
            if ab.after_gbps.is_some() {
                format!("ran: {result}")
            } else {
                result
            }
        ));
    }
}

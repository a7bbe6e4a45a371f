//! Platform limits: where a gap against the path's capacity is the platform's nature, not a
//! fault (SHM staging through host memory, P2P through a host bridge, a VM without P2P, the
//! ring's slowest hop), each with its arithmetic, whether anything on this machine recovers it
//! (the A/B's figure where one ran), and what kind of machine would do better.

use super::consumer::{self, Refusal};
use super::node::is_vm;
use super::path_capacity::{best_ring_bottleneck, with_fractions, PathCapacity};
use super::transport::Transport;
use super::{AbFigure, Action, Cause, CauseKind, ExplainInput, NodeChain, PairChain};
use crate::expect::{self, NodeClass};
use crate::finding::{Evidence, Severity};
use crate::topology::{GpuRef, LinkClass, P2pReason, P2pStatus, Pair};

/// What the A/B tries where SHM is the platform's transport: P2P across the host bridge.
const FORCE_P2P: (&str, &str) = ("NCCL_P2P_LEVEL", "SYS");
/// What it tries where NCCL chose P2P across a host bridge: staging through host memory.
const FORCE_SHM: (&str, &str) = ("NCCL_P2P_DISABLE", "1");

const BETTER_PCIE: &str =
    "a node whose GPUs share a PCIe switch (P2P below the switch, PIX/PXB) or are joined by NVLink would do better";
const BETTER_VM: &str =
    "a bare-metal node, or a VM whose provider passes GPU peer-to-peer through, would do better";
const NO_P2P: &str = "the driver offers no P2P, so nothing on this machine changes the transport";
const SEED_000: &str =
    "on the 4xA6000 PHB machine of Runcrate's field report forcing P2P halved it (4.3 → 2.3 GB/s)";
/// An A/B that moves the figure by less than this is no recovery (the pair's own repeat spread
/// is a few percent; NCCL's default is then as good as the alternative).
pub const RECOVERY_RATIO: f64 = 1.10;

/// What a pair's platform limit needs from its chain.
pub(super) struct PairFacts<'a> {
    pub p: &'a Pair<'a>,
    pub gpus: &'a [GpuRef],
    pub chosen: Transport,
    pub allowed: Transport,
    pub busbw: Option<f64>,
    pub capacity: Option<&'a PathCapacity>,
    /// The environment forces or removes a transport on this pair (its own cause tells it).
    pub env_driven: bool,
}

fn pair_name(p: &Pair<'_>) -> String {
    format!("GPU{}–GPU{} ({})", p.a.index, p.b.index, p.link)
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// "3.9 GB/s is 25% of PCIe gen3 x16 (15.75 GB/s each way); healthy machines of the class
/// reach 25% of it": the figure against the capacity, or the capacity alone.
fn against_capacity(busbw: Option<f64>, c: Option<&PathCapacity>) -> String {
    match (busbw, c) {
        (Some(b), Some(c)) => {
            let mut s = format!(
                "{b:.2} GB/s is {} of {} ({:.2} GB/s each way)",
                pct(b / c.gbps),
                c.path,
                c.gbps
            );
            if let Some(r) = c.reference_fraction {
                s.push_str(&format!(
                    "; healthy machines of this class reach {} of it",
                    pct(r)
                ));
            }
            s
        }
        (None, Some(c)) => format!("its path is {} ({:.2} GB/s each way)", c.path, c.gbps),
        (Some(b), None) => format!("{b:.2} GB/s"),
        (None, None) => "the path's capacity is unknown".into(),
    }
}

/// The SHM arithmetic: each byte crosses PCIe twice (up the sender's link into a host buffer,
/// down the receiver's), and host memory carries every byte twice (written, then read).
fn shm_arithmetic(busbw: Option<f64>, ranks: usize) -> String {
    let mut s = String::from(
        "it stages every byte through host memory: the sender's GPU writes it across its PCIe link into a host buffer and the receiver's GPU reads it back across its \
         own, so each byte crosses PCIe twice, through the host bridge both times, and host memory \
         once each way",
    );
    if let Some(b) = busbw {
        let n = ranks.max(2);
        s.push_str(&format!(
            " (each GPU's link carries {b:.2} GB/s each way at once; host memory {:.1} GB/s = 2 × {n} GPUs × {b:.2})",
            2.0 * crate::num::ToF64::to_f64(n) * b
        ));
    }
    s.push_str(
        "; the GPUs' reads of host memory are round trips through the host bridge, so the staged \
         path runs well under the link's rate",
    );
    s
}

/// The platform limit of one pair, if its gap against capacity is the platform's nature.
pub(super) fn pair_limit(input: &ExplainInput<'_>, f: &PairFacts<'_>) -> Option<Cause> {
    if f.p.link.is_nvlink() || f.p.link == LinkClass::X || f.env_driven {
        return None;
    }
    let vm = is_vm(input);
    let no_p2p = f.p.p2p == Some(P2pStatus::NotSupported);
    let staged = shm_arithmetic(f.busbw, 2);
    if let Some(refused) = consumer::refusal_of(f.p.p2p_status)
        .filter(|_| !vm && f.chosen == Transport::Shm && f.allowed == Transport::Shm)
    {
        return Some(p2p_not_supported(f, refused, &staged));
    }
    let (kind, mechanism, short, alternative, better) = match f.chosen {
        Transport::Shm if f.allowed == Transport::Shm && vm => (
            CauseKind::VmNoP2p,
            format!(
                "a virtual machine without GPU peer-to-peer{}, so NCCL uses SHM: {staged}",
                if no_p2p {
                    " (the driver reports none)"
                } else {
                    " (its virtual PCI tree puts the GPUs on the host bridge)"
                },
            ),
            "a VM without P2P: staged through host memory",
            (!no_p2p).then_some(FORCE_P2P),
            BETTER_VM,
        ),
        Transport::Shm if f.allowed == Transport::Shm => (
            CauseKind::ShmStaging,
            format!(
                "SHM is NCCL's default {}: {staged}",
                if no_p2p {
                    "where the driver reports no P2P"
                } else {
                    "across a host bridge"
                }
            ),
            "SHM staging through host memory",
            (!no_p2p).then_some(FORCE_P2P),
            BETTER_PCIE,
        ),
        Transport::P2p if f.p.link.crosses_host_bridge() => (
            CauseKind::P2pHostBridge,
            "P2P across the host bridge: each GPU writes into its peer's memory and the root complex forwards the writes from one root port to the other, which many root complexes do far below their links' rate (why NCCL's default stages such pairs through host memory)".to_string(),
            "P2P through the host bridge",
            Some(FORCE_SHM),
            BETTER_PCIE,
        ),
        _ => return None,
    };
    let mut c = Cause::new(kind, Severity::Info, Action::PlatformLimit, f.gpus.to_vec());
    let recovery = match (kind, alternative) {
        (CauseKind::P2pHostBridge, _) => "whether staging through host memory does better is what `explain --ab` measures (NCCL_P2P_DISABLE=1)".to_string(),
        (_, Some(_)) => format!("whether P2P recovers it is what `explain --ab` measures (NCCL_P2P_LEVEL=SYS); {SEED_000}"),
        (_, None) => NO_P2P.to_string(),
    };
    c.message = format!(
        "{}: {}; {mechanism}; {better}; {recovery}",
        pair_name(f.p),
        against_capacity(f.busbw, f.capacity)
    );
    c.fix = format!("nothing on this machine: {better}");
    c.short = short.into();
    c.env_fix = alternative
        .map(|alt| alternative_env(input, alt))
        .unwrap_or_default();
    c.evidence = evidence(f.busbw, f.capacity, f.chosen);
    c.source = format!(
        "{}; NCCL documentation: transports P2P and SHM, NCCL_P2P_LEVEL",
        f.capacity.map_or("PCI-SIG", |c| c.source.as_str())
    );
    Some(c)
}

/// NVML refuses P2P over PCIe between the pair, for a reason it names: what that is, where the
/// traffic goes instead (with the staging arithmetic), whether anything on this node changes
/// it, and what kind of machine would do better.
fn p2p_not_supported(
    f: &PairFacts<'_>,
    (cap, reason, refusal): (&'static str, P2pReason, Refusal),
    staged: &str,
) -> Cause {
    let (severity, action) = match refusal {
        Refusal::RegistryKey => (Severity::Warning, Action::DriverSetting),
        _ => (Severity::Info, Action::PlatformLimit),
    };
    let mut c = Cause::new(
        CauseKind::P2pNotSupported,
        severity,
        action,
        f.gpus.to_vec(),
    );
    c.message = format!(
        "{}: {}; NVML reports P2P {cap} {} ({}), so NCCL uses SHM: {staged}; {}; {}",
        pair_name(f.p),
        against_capacity(f.busbw, f.capacity),
        reason.nvml_name(),
        refusal.meaning(reason),
        refusal.on_this_node(),
        refusal.better()
    );
    c.short = format!(
        "no P2P ({} {}): staged through host memory",
        reason.code(),
        match refusal {
            Refusal::ProductPolicy => "product policy",
            Refusal::RegistryKey => "registry key",
            Refusal::Platform => "chipset or host bridge topology",
            Refusal::Unexplained => "no reason given",
        }
    );
    c.fix = match refusal {
        Refusal::RegistryKey => {
            "remove the driver setting that turns P2P off (a registry key)".to_string()
        }
        _ => format!("nothing on this machine: {}", refusal.better()),
    };
    c.evidence = vec![
        Evidence::new("NVML P2P status", consumer::status_words(f.p))
            .expected("OK")
            .source("nvmlDeviceGetP2PStatus"),
    ];
    c.evidence.extend(evidence(f.busbw, f.capacity, f.chosen));
    let why = match refusal {
        Refusal::ProductPolicy => consumer::GEFORCE_POLICY_SOURCE,
        _ => "NVML API reference: nvmlDeviceGetP2PStatus, nvmlGpuP2PStatus_t",
    };
    c.source = format!(
        "{why}; {}; NCCL documentation: transports P2P and SHM",
        f.capacity.map_or("PCI-SIG", |c| c.source.as_str())
    );
    c
}

/// The alternative's overrides: forcing P2P also lifts an `NCCL_P2P_DISABLE=1` in force (it
/// would otherwise keep the pair on SHM and the A/B would measure nothing).
fn alternative_env(input: &ExplainInput<'_>, alt: (&str, &str)) -> Vec<(String, String)> {
    let mut env = Vec::new();
    if alt == FORCE_P2P && super::transport::env_on(input.nccl_env, "NCCL_P2P_DISABLE") {
        env.push(("NCCL_P2P_DISABLE".to_string(), "0".to_string()));
    }
    env.push((alt.0.to_string(), alt.1.to_string()));
    env
}

fn evidence(busbw: Option<f64>, c: Option<&PathCapacity>, t: Transport) -> Vec<Evidence> {
    let mut ev = vec![Evidence::new("transport", t.label())];
    if let Some(c) = c {
        ev.push(
            Evidence::new("path capacity", format!("{} = {:.2} GB/s", c.path, c.gbps))
                .source(c.arithmetic.clone()),
        );
        if let Some(b) = busbw {
            ev.push(Evidence::new(
                "share of capacity",
                format!("{} ({b:.2} GB/s)", pct(b / c.gbps)),
            ));
        }
    }
    ev
}

/// After the A/B: the platform limit's words say what the alternative measured, and whether
/// anything on this machine recovers the gap.
pub(super) fn after_ab(chain: &mut PairChain) {
    let Some(ab) = chain.ab.clone() else { return };
    for c in chain
        .causes
        .iter_mut()
        .filter(|c| c.action == Action::PlatformLimit || c.kind.is_platform_limit())
        .filter(|c| c.env_fix == ab.overrides)
    {
        let Some(after) = ab.after_gbps else {
            c.message.push_str(&format!(
                "; the A/B failed: {}",
                ab.error.as_deref().unwrap_or("no figure")
            ));
            continue;
        };
        let ratio = after / ab.before_gbps;
        let what = ab_words(&ab);
        c.evidence.push(
            Evidence::new(
                what.clone(),
                format!("{} → {after:.2} GB/s (×{ratio:.2})", fmt2(ab.before_gbps)),
            )
            .source("this run's A/B"),
        );
        if ratio < RECOVERY_RATIO {
            c.message = format!(
                "{}; this machine's A/B: {what} measured ×{ratio:.2} ({:.2} → {after:.2} GB/s), so NCCL's default is right here and nothing on it recovers the gap",
                strip_recovery(&c.message),
                ab.before_gbps
            );
        } else {
            c.message = format!(
                "{}; this machine's A/B: {what} measured ×{ratio:.2} ({:.2} → {after:.2} GB/s): here the alternative recovers part of the gap",
                strip_recovery(&c.message),
                ab.before_gbps
            );
            c.action = Action::SetEnv;
            c.fix = format!("set {}", super::action_env_words(&ab.overrides));
        }
    }
}

/// After the A/B: the node's staging cause says what forcing P2P measured on its pairs.
pub(super) fn node_after_ab(node: &mut NodeChain, pairs: &[PairChain]) {
    let ratios: Vec<f64> = pairs
        .iter()
        .filter_map(|p| p.ab.as_ref())
        .filter(|ab| {
            ab.overrides
                .iter()
                .any(|(k, v)| k == FORCE_P2P.0 && v == FORCE_P2P.1)
        })
        .filter_map(|ab| ab.after_gbps.map(|a| a / ab.before_gbps))
        .collect();
    let (Some(lo), Some(hi)) = (
        ratios.iter().copied().reduce(f64::min),
        ratios.iter().copied().reduce(f64::max),
    ) else {
        return;
    };
    let range = if hi - lo < 0.005 {
        format!("×{lo:.2}")
    } else {
        format!("×{lo:.2} to ×{hi:.2}")
    };
    for c in node
        .causes
        .iter_mut()
        .filter(|c| matches!(c.kind, CauseKind::ShmStaging | CauseKind::VmNoP2p))
    {
        let verdict = if hi < RECOVERY_RATIO {
            "so NCCL's default is right here and nothing on it recovers the gap"
        } else {
            "so forcing P2P recovers part of the gap on some pairs (see them)"
        };
        c.message = format!(
            "{}; this machine's A/B: forced P2P (NCCL_P2P_LEVEL=SYS) measured {range} on {} pair{}, {verdict}",
            strip_recovery(&c.message),
            ratios.len(),
            if ratios.len() == 1 { "" } else { "s" }
        );
    }
}

fn fmt2(v: f64) -> String {
    format!("{v:.2}")
}

fn ab_words(ab: &AbFigure) -> String {
    if ab
        .overrides
        .iter()
        .any(|(k, v)| k == FORCE_P2P.0 && v == FORCE_P2P.1)
    {
        "forced P2P (NCCL_P2P_LEVEL=SYS)".into()
    } else if ab
        .overrides
        .iter()
        .any(|(k, v)| k == FORCE_SHM.0 && v == FORCE_SHM.1)
    {
        "SHM (NCCL_P2P_DISABLE=1)".into()
    } else {
        super::action_env_words(&ab.overrides)
    }
}

/// The message without its "whether … `explain --ab` measures …" clause and the field report's
/// figure, which the A/B's own figure replaces.
fn strip_recovery(m: &str) -> String {
    const TOLD_BEFORE: [&str; 4] = [
        "whether ",
        "on the field report's",
        "`explain --ab` measures",
        "this machine's A/B",
    ];
    m.split("; ")
        .filter(|part| !TOLD_BEFORE.iter().any(|t| part.starts_with(t)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The node's all-reduce against its references: the class's, and the best ring's slowest hop.
pub(super) fn node_chain(input: &ExplainInput<'_>, pairs: &[PairChain]) -> Option<NodeChain> {
    let t = input.topology?;
    let n = t.gpus.len();
    if n < 3 {
        return None;
    }
    let m = input.node_measurement;
    let busbw = m
        .and_then(|m| m.busbw_gbps)
        .filter(|b| b.is_finite() && *b > 0.0);
    let pcie_gen = input
        .gpus
        .iter()
        .filter_map(|g| g.pcie.map(|l| l.gen_max))
        .min();
    let expected = t.worst_link().and_then(|worst_link| {
        expect::expected_allreduce(&NodeClass {
            worst_link,
            pcie_gen,
            gpus: crate::num::len_u32(n),
            model: input.gpus.first().map_or("", |g| g.name.as_str()),
        })
    });
    let ratio = busbw.zip(expected.as_ref()).map(|(b, e)| b / e.busbw_gbps);
    let hop = ring_hop(t, pairs);
    let capacity =
        hop.map(|(_, c)| with_fractions(c.clone(), busbw, expected.as_ref().map(|e| e.busbw_gbps)));
    let mut chain = NodeChain {
        gpus: t.gpus.clone(),
        busbw_gbps: busbw,
        measure_error: m.and_then(|m| m.error.clone()),
        transport_raw: m.and_then(|m| m.transport.clone()),
        expected,
        ratio,
        capacity,
        slowest_hop: hop.map(|(c, _)| (c.a.index, c.b.index)),
        causes: Vec::new(),
    };
    if let Some((slow, _)) = hop {
        chain.causes.extend(ring_slowest_hop(&chain, slow, pairs));
        chain.causes.extend(node_staging(&chain, slow));
    }
    Some(chain)
}

/// The slowest hop of the best ring through every GPU, with its capacity.
fn ring_hop<'p>(
    t: &crate::topology::TopologyMatrix,
    pairs: &'p [PairChain],
) -> Option<(&'p PairChain, &'p PathCapacity)> {
    let n = t.gpus.len();
    let pos = |r: &GpuRef| t.gpus.iter().position(|g| g.uuid == r.uuid);
    let mut hops = vec![vec![f64::INFINITY; n]; n];
    for c in pairs {
        let (i, j) = (pos(&c.a)?, pos(&c.b)?);
        let gbps = c.capacity.as_ref()?.gbps;
        hops[i][j] = gbps;
        hops[j][i] = gbps;
    }
    let (i, j) = best_ring_bottleneck(&hops)?;
    let (a, b) = (&t.gpus[i].uuid, &t.gpus[j].uuid);
    let chain = pairs
        .iter()
        .find(|c| (&c.a.uuid, &c.b.uuid) == (a, b) || (&c.a.uuid, &c.b.uuid) == (b, a))?;
    Some((chain, chain.capacity.as_ref()?))
}

/// Where the node's pairs are faster than its ring's slowest hop, the ring cannot use them.
fn ring_slowest_hop(node: &NodeChain, slow: &PairChain, pairs: &[PairChain]) -> Option<Cause> {
    let hop = node.capacity.as_ref()?;
    let fastest = pairs
        .iter()
        .filter_map(|c| c.capacity.as_ref().map(|k| (c, k)))
        .max_by(|x, y| x.1.gbps.total_cmp(&y.1.gbps))?;
    // Equal capacities (one link class) leave no gap between the pairs and the ring.
    if fastest.1.gbps <= hop.gbps * 1.000_001 {
        return None;
    }
    let mut c = Cause::new(
        CauseKind::RingSlowestHop,
        Severity::Info,
        Action::PlatformLimit,
        node.gpus.clone(),
    );
    let figure = match node.busbw_gbps {
        Some(b) => format!("{b:.2} GB/s is {} of it", pct(b / hop.gbps)),
        None => "the all-reduce was not measured".into(),
    };
    c.message = format!(
        "all {} GPUs: a ring all-reduce moves every byte through every hop, so the node is bounded by its best ring's slowest hop, GPU{}–GPU{} ({}, {}: {:.2} GB/s each way); {figure}; its fastest pair, GPU{}–GPU{} ({}, {:.2} GB/s), cannot carry the ring at its own rate; nothing on this machine changes the hops: a node whose GPUs are all joined by NVLink or NVSwitch would do better",
        node.gpus.len(),
        slow.a.index,
        slow.b.index,
        slow.link,
        hop.path,
        hop.gbps,
        fastest.0.a.index,
        fastest.0.b.index,
        fastest.1.path,
        fastest.1.gbps,
    );
    c.short = format!(
        "the ring's slowest hop (GPU{}–GPU{})",
        slow.a.index, slow.b.index
    );
    c.fix = "nothing on this machine: a node whose GPUs are all joined by NVLink or NVSwitch would do better".into();
    c.evidence = vec![
        Evidence::new(
            "slowest ring hop",
            format!("{} = {:.2} GB/s", hop.path, hop.gbps),
        )
        .source(hop.arithmetic.clone()),
        Evidence::new(
            "fastest pair",
            format!("{} = {:.2} GB/s", fastest.1.path, fastest.1.gbps),
        ),
    ];
    c.source = format!(
        "NCCL ring all-reduce (every byte crosses every hop); {}",
        hop.source
    );
    Some(c)
}

/// The node's all-reduce staged through host memory on its slowest hop: the same mechanism as
/// the pair's, with the node's arithmetic (every GPU's traffic through host memory at once).
fn node_staging(node: &NodeChain, slow: &PairChain) -> Option<Cause> {
    let pair = slow.causes.iter().find(|c| {
        matches!(
            c.kind,
            CauseKind::ShmStaging | CauseKind::VmNoP2p | CauseKind::P2pNotSupported
        )
    })?;
    let mut c = pair.clone();
    c.gpus = node.gpus.clone();
    let mechanism = shm_arithmetic(node.busbw_gbps, node.gpus.len());
    let recovery = if pair.env_fix.is_empty() {
        NO_P2P.to_string()
    } else {
        format!("`explain --ab` measures forcing P2P pair by pair; {SEED_000}")
    };
    let better = match pair.kind {
        CauseKind::VmNoP2p => BETTER_VM,
        CauseKind::P2pNotSupported => pair.fix.trim_start_matches("nothing on this machine: "),
        _ => BETTER_PCIE,
    };
    c.message = format!(
        "all {} GPUs: {}; the ring runs over SHM on every hop: {mechanism}; {better}; {recovery}",
        node.gpus.len(),
        against_capacity(node.busbw_gbps, node.capacity.as_ref()),
    );
    c.evidence = evidence(node.busbw_gbps, node.capacity.as_ref(), Transport::Shm);
    c.env_fix = Vec::new();
    Some(c)
}

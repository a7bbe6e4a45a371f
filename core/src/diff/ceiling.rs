//! Capacity arithmetic of a comparison: what a run's path could carry at most (each hop's
//! transport over its link: NVLinks × the per-link rate, PCIe generation × width, SHM's staging
//! share of the link; the node's all-reduce bounded by its best ring's slowest hop), and how much
//! of the measured ratio each change accounts for on its own.

use serde::{Deserialize, Serialize};

use super::changes::{effective_transport, pair_name, Found, Target};
use super::{ChangeKind, Figure, GpuFacts, PairFacts, RunFacts};
use crate::capacity::{self as cap, GB};
use crate::explain::{best_ring_bottleneck, Transport};
use crate::topology::LinkClass;

/// SHM stages every byte through host memory; the field reports' machines reach at most about
/// this share of the slower GPU's PCIe link that way (4.33 GB/s at 4 GPUs = 27.5% of gen3 x16's
/// 15.75, 3.9 = 25% per pair, on the 4xA6000 PHB report; 2xT4 4.05 = 26%: docs/explain.md,
/// "Platform limits"), rounded up to the next percent so the best of them sits under it. The
/// ceiling of a staged hop.
pub const SHM_STAGED_SHARE: f64 = 0.28;

const SHM_SOURCE: &str = "SHM staging reaches at most about 28% of the link (4xA6000 PHB field report: 4.33 GB/s of PCIe gen3 x16's 15.75; docs/explain.md)";

/// What a run's path carried at most: its slowest hop.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathCeiling {
    pub gbps: f64,
    /// The hop (`GPU1–GPU2`), or the pair.
    pub hop: String,
    /// The hop's path in words (`P2P over PCIe gen4 x16: 31.50 GB/s each way`).
    pub path: String,
    /// The ceiling is a figure staged paths were measured to reach (SHM), not a link's raw rate.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub achieved: bool,
}

fn gpu(r: &RunFacts, i: u32) -> Option<&GpuFacts> {
    r.gpus.iter().find(|g| g.index == i)
}

fn pcie_gbps(g: &GpuFacts) -> Option<(f64, String)> {
    let (gen, width) = g.pcie?;
    Some((
        cap::pcie_bytes_per_s(gen, width)? / GB,
        format!("PCIe gen{gen} x{width}"),
    ))
}

/// The slower of two GPUs' PCIe links: a PCIe path carries each byte up one and down the other.
fn pcie_pair(a: &GpuFacts, b: &GpuFacts) -> Option<(f64, String)> {
    let (x, y) = (pcie_gbps(a)?, pcie_gbps(b)?);
    Some(if y.0 < x.0 { y } else { x })
}

/// The ceiling of one hop: its transport over its link.
fn hop(r: &RunFacts, p: &PairFacts) -> Option<(f64, String)> {
    let (t, _) = effective_transport(r, p)?;
    let (ga, gb) = (gpu(r, p.a)?, gpu(r, p.b)?);
    match (t, p.link?) {
        (Transport::P2p, LinkClass::Nv(n)) => {
            let gbps = cap::nvlink_bytes_per_s_for_gpu(n, &ga.name)? / GB;
            Some((gbps, format!("P2P over NV{n}: {gbps:.2} GB/s each way")))
        }
        (_, LinkClass::X) => None,
        (Transport::P2p, _) => {
            let (gbps, words) = pcie_pair(ga, gb)?;
            Some((gbps, format!("P2P over {words}: {gbps:.2} GB/s each way")))
        }
        (Transport::Shm, _) => {
            let (link, words) = pcie_pair(ga, gb)?;
            let gbps = link * SHM_STAGED_SHARE;
            Some((
                gbps,
                format!(
                    "SHM staged through host memory over {words}: {:.0}% of {link:.2} = {gbps:.2} GB/s",
                    SHM_STAGED_SHARE * 100.0
                ),
            ))
        }
        _ => None,
    }
}

/// The run's ceiling: its pair's for two GPUs, else its best ring's slowest hop.
pub(crate) fn node_ceiling(r: &RunFacts) -> Option<PathCeiling> {
    let mut idx: Vec<u32> = r.pairs.iter().flat_map(|p| [p.a, p.b]).collect();
    idx.sort_unstable();
    idx.dedup();
    if idx.len() < 2 || idx.len() != r.gpu_count {
        return None;
    }
    let n = idx.len();
    let mut hops = vec![vec![f64::INFINITY; n]; n];
    let mut words = vec![vec![String::new(); n]; n];
    for p in &r.pairs {
        let (h, w) = hop(r, p)?;
        let i = idx.iter().position(|x| *x == p.a)?;
        let j = idx.iter().position(|x| *x == p.b)?;
        hops[i][j] = h;
        hops[j][i] = h;
        words[i][j] = w.clone();
        words[j][i] = w;
    }
    let (i, j) = if n == 2 {
        (0, 1)
    } else {
        best_ring_bottleneck(&hops)?
    };
    Some(PathCeiling {
        gbps: hops[i][j],
        hop: pair_name(idx[i], idx[j]),
        achieved: words[i][j].starts_with("SHM"),
        path: std::mem::take(&mut words[i][j]),
    })
}

/// Run A with only `found` changed to run B's side.
fn apply(a: &RunFacts, b: &RunFacts, found: &Found) -> RunFacts {
    let mut out = a.clone();
    for t in &found.targets {
        match t {
            Target::Gpu(i) => {
                let (Some(to), Some(from)) = (
                    out.gpus.iter_mut().find(|g| g.index == *i),
                    b.gpus.iter().find(|g| g.index == *i),
                ) else {
                    continue;
                };
                match found.change.kind {
                    ChangeKind::PcieLink => to.pcie = from.pcie,
                    ChangeKind::GpuModel => to.name.clone_from(&from.name),
                    _ => {}
                }
            }
            Target::Pair(x, y) => {
                let (Some(to), Some(from)) = (
                    out.pairs.iter_mut().find(|p| p.a == *x && p.b == *y),
                    b.pairs.iter().find(|p| p.a == *x && p.b == *y),
                ) else {
                    continue;
                };
                match found.change.kind {
                    ChangeKind::Topology => to.link = from.link,
                    ChangeKind::P2pStatus => to.p2p = from.p2p,
                    ChangeKind::Transport => {
                        // Run B's transport as B used it: its log's, else its prediction.
                        to.transport = effective_transport(b, from).map(|(t, _)| t);
                        to.transport_raw.clone_from(&from.transport_raw);
                    }
                    _ => {}
                }
            }
            Target::Env(name) => match b.nccl_env.get(name) {
                Some(v) => {
                    out.nccl_env.insert(name.clone(), v.clone());
                }
                None => {
                    out.nccl_env.remove(name);
                }
            },
            Target::Node => {}
        }
    }
    out
}

fn busbw(r: &RunFacts) -> Option<f64> {
    match r.figure {
        Some(Figure::Busbw { gbps, .. }) if gbps.is_finite() && gbps > 0.0 => Some(gbps),
        _ => None,
    }
}

/// The ratio a move from ceiling `from` to ceiling `to` accounts for, with its arithmetic.
/// Between two raw rates (links narrowed, NVLinks lost) the figure keeps its share of the path,
/// so it scales as the ceilings do. Where one side is a staged path's measured ceiling (SHM), that
/// ceiling bounds the figure: a narrower path keeps at most `to ÷ fig_a` of run A's figure, a
/// wider one lets run B exceed what A's path carried (`fig_b ÷ from`).
fn bound(from: &PathCeiling, to: &PathCeiling, fig_a: f64, fig_b: f64) -> Option<(f64, String)> {
    if (to.gbps - from.gbps).abs() < 1e-9 {
        return None;
    }
    let moved = format!(
        "the path's ceiling goes from {:.2} GB/s ({}, {}) to {:.2} GB/s ({}, {})",
        from.gbps, from.hop, from.path, to.gbps, to.hop, to.path
    );
    if from.achieved == to.achieved {
        let r = to.gbps / from.gbps;
        return Some((
            r,
            format!("{moved}: the same share of a path of {r:.2}× the capacity"),
        ));
    }
    if to.gbps < from.gbps {
        let r = (to.gbps / fig_a).min(1.0);
        Some((
            r,
            format!("{moved}; run A's {fig_a:.2} GB/s can keep at most {r:.2}× of it"),
        ))
    } else {
        let r = (fig_b / from.gbps).max(1.0);
        Some((
            r,
            format!(
                "{moved}; run B's {fig_b:.2} GB/s is {r:.2}× what run A's path carried at most"
            ),
        ))
    }
}

/// Fills each change's `explains_ratio` and arithmetic; returns the ratio all of them account
/// for together (run B's ceiling against run A's), and what could not be worked out.
pub(crate) fn explain_all(
    found: &mut [Found],
    a: &RunFacts,
    b: &RunFacts,
) -> (Option<f64>, Vec<String>, [Option<PathCeiling>; 2]) {
    let ceilings = [node_ceiling(a), node_ceiling(b)];
    let mut undecided = Vec::new();
    let (Some(fig_a), Some(fig_b)) = (busbw(a), busbw(b)) else {
        if a.figure.is_some() && !a.figure.as_ref().is_some_and(Figure::is_bandwidth) {
            undecided.push(
                "step times: no capacity arithmetic applies, so the changes are named but not sized"
                    .into(),
            );
        }
        return (None, undecided, ceilings);
    };
    let [Some(cap_a), Some(cap_b)] = &ceilings else {
        let topology = |r: &RunFacts| r.pairs.iter().any(|p| p.link.is_some());
        if topology(a) && topology(b) {
            undecided.push(
            "the links, GPUs or transports of every pair are not known in both runs: no capacity arithmetic, so the changes are named but not sized"
                .into(),
            );
        }
        return (None, undecided, ceilings);
    };
    for f in found.iter_mut() {
        let Some(to) = node_ceiling(&apply(a, b, f)) else {
            continue;
        };
        if let Some((r, words)) = bound(cap_a, &to, fig_a, fig_b) {
            f.change.explains_ratio = Some(r);
            f.change.arithmetic = Some(if to.achieved || cap_a.achieved {
                format!("{words}; {SHM_SOURCE}")
            } else {
                words
            });
        }
    }
    for (name, fig, c) in [("A", fig_a, cap_a), ("B", fig_b, cap_b)] {
        if fig > c.gbps * (1.0 + super::SAME_WITHIN) {
            undecided.push(format!(
                "run {name}'s {fig:.2} GB/s is above what its path carries at most ({:.2} GB/s, {}): a link or transport reading is doubtful (a link read at rest, a transport predicted rather than read)",
                c.gbps, c.path
            ));
        }
    }
    let total = bound(cap_a, cap_b, fig_a, fig_b).map_or(1.0, |(r, _)| r);
    (Some(total), undecided, ceilings)
}

//! Every change between two runs' facts, one entry per kind and before → after, with the GPUs,
//! pairs or variables it concerns (six pairs that went from P2P to SHM are one change).

use std::collections::BTreeSet;

use super::{Change, ChangeKind, PairFacts, RunFacts};
use crate::explain::transport::{self, Transport};
use crate::topology::P2pStatus;

/// What a change concerns, so its effect can be worked out on its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Gpu(u32),
    Pair(u32, u32),
    Env(String),
    Node,
}

/// A change with its targets (kept apart from the JSON).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Found {
    pub change: Change,
    pub targets: Vec<Target>,
}

/// SM clocks within this share of each other are the same clock (boost moves them).
const CLOCK_SAME_WITHIN: f64 = 0.10;

/// NCCL variables that only set what NCCL prints: no change of the run.
const QUIET_VARS: [&str; 4] = [
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_DEBUG_FILE",
    "NCCL_DEBUG_TIMESTAMP_FORMAT",
];

pub(crate) fn pair_name(a: u32, b: u32) -> String {
    format!("GPU{a}–GPU{b}")
}

fn change(kind: ChangeKind, before: String, after: String) -> Change {
    Change {
        rank: 0,
        kind,
        r#where: Vec::new(),
        before,
        after,
        explains_ratio: None,
        arithmetic: None,
        cause: None,
        caused: Vec::new(),
        message: String::new(),
    }
}

/// Adds `target` (named `name`) to the change of `kind` from `before` to `after`, making one.
fn add(
    out: &mut Vec<Found>,
    kind: ChangeKind,
    (before, after): (String, String),
    target: Target,
    name: String,
) {
    if let Some(f) = out
        .iter_mut()
        .find(|f| f.change.kind == kind && f.change.before == before && f.change.after == after)
    {
        f.change.r#where.push(name);
        f.targets.push(target);
        return;
    }
    let mut c = change(kind, before, after);
    c.r#where.push(name);
    out.push(Found {
        change: c,
        targets: vec![target],
    });
}

fn opt(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "unknown".into())
}

/// Every change from run A to run B.
pub(crate) fn between(a: &RunFacts, b: &RunFacts) -> Vec<Found> {
    let mut out = Vec::new();
    versions(&mut out, a, b);
    gpus(&mut out, a, b);
    pairs(&mut out, a, b);
    node_transport(&mut out, a, b);
    env(&mut out, a, b);
    if let (Some(x), Some(y)) = (&a.algo_proto, &b.algo_proto) {
        if x != y {
            add(
                &mut out,
                ChangeKind::AlgoProto,
                (x.clone(), y.clone()),
                Target::Node,
                "node".into(),
            );
        }
    }
    out
}

fn versions(out: &mut Vec<Found>, a: &RunFacts, b: &RunFacts) {
    let pairs = [
        (ChangeKind::NcclVersion, &a.nccl_version, &b.nccl_version),
        (ChangeKind::Driver, &a.driver_version, &b.driver_version),
        (ChangeKind::Cuda, &a.cuda_version, &b.cuda_version),
    ];
    for (kind, x, y) in pairs {
        if x.is_some() && y.is_some() && x != y {
            add(out, kind, (opt(x), opt(y)), Target::Node, "node".into());
        }
    }
}

fn gpus(out: &mut Vec<Found>, a: &RunFacts, b: &RunFacts) {
    for ga in &a.gpus {
        let Some(gb) = b.gpus.iter().find(|g| g.index == ga.index) else {
            continue;
        };
        let (t, name) = (Target::Gpu(ga.index), format!("GPU{}", ga.index));
        if ga.name != gb.name && !ga.name.is_empty() && !gb.name.is_empty() {
            add(
                out,
                ChangeKind::GpuModel,
                (ga.name.clone(), gb.name.clone()),
                t.clone(),
                name.clone(),
            );
        }
        if let (Some(x), Some(y)) = (ga.pcie, gb.pcie) {
            if x != y {
                let w = |(g, l): (u32, u32)| format!("PCIe gen{g} x{l}");
                add(
                    out,
                    ChangeKind::PcieLink,
                    (w(x), w(y)),
                    t.clone(),
                    name.clone(),
                );
            }
        }
        if let (Some(x), Some(y)) = (ga.nvlinks_active, gb.nvlinks_active) {
            if x != y {
                let w = |n: u32| format!("{n} NVLinks active");
                add(
                    out,
                    ChangeKind::NvlinkCount,
                    (w(x), w(y)),
                    t.clone(),
                    name.clone(),
                );
            }
        }
        if let (Some(x), Some(y)) = (ga.sm_clock_mhz, gb.sm_clock_mhz) {
            let (fx, fy) = (f64::from(x), f64::from(y));
            if (fy - fx).abs() > CLOCK_SAME_WITHIN * fx.max(fy) {
                let w = |n: u32| format!("SM clock {n} MHz");
                add(
                    out,
                    ChangeKind::Clocks,
                    (w(x), w(y)),
                    t.clone(),
                    name.clone(),
                );
            }
        }
        let set = |v: &[String]| v.iter().cloned().collect::<BTreeSet<_>>();
        let (x, y) = (set(&ga.throttle_reasons), set(&gb.throttle_reasons));
        if x != y {
            let w = |s: &BTreeSet<String>| {
                if s.is_empty() {
                    "no throttle reason".to_string()
                } else {
                    s.iter().cloned().collect::<Vec<_>>().join(", ")
                }
            };
            add(out, ChangeKind::Throttling, (w(&x), w(&y)), t, name);
        }
    }
}

/// The transport a run used on a pair: NCCL's log where read, else what the topology and the
/// NCCL variables leave (`explain::transport::predicted`).
pub(crate) fn effective_transport(r: &RunFacts, p: &PairFacts) -> Option<(Transport, bool)> {
    if let Some(t) = p.transport {
        return Some((t, true));
    }
    let link = p.link?;
    Some((transport::predicted(link, p.p2p, &r.nccl_env), false))
}

fn transport_words((t, measured): (Transport, bool), raw: Option<&String>) -> String {
    match (measured, raw) {
        (true, Some(raw)) => format!("{} ({raw})", t.label()),
        (true, None) => t.label().to_string(),
        (false, _) => format!("{} (predicted)", t.label()),
    }
}

fn pairs(out: &mut Vec<Found>, a: &RunFacts, b: &RunFacts) {
    for pa in &a.pairs {
        let Some(pb) = b.pairs.iter().find(|p| p.a == pa.a && p.b == pa.b) else {
            continue;
        };
        let (t, name) = (Target::Pair(pa.a, pa.b), pair_name(pa.a, pa.b));
        if let (Some(x), Some(y)) = (pa.link, pb.link) {
            if x != y {
                add(
                    out,
                    ChangeKind::Topology,
                    (x.to_string(), y.to_string()),
                    t.clone(),
                    name.clone(),
                );
            }
        }
        let known = |s: Option<P2pStatus>| s.filter(|s| *s != P2pStatus::Unknown);
        if let (Some(x), Some(y)) = (known(pa.p2p), known(pb.p2p)) {
            if x != y {
                let w = |s: P2pStatus| {
                    format!(
                        "P2P {}",
                        if s == P2pStatus::Ok {
                            "OK"
                        } else {
                            "not supported"
                        }
                    )
                };
                add(
                    out,
                    ChangeKind::P2pStatus,
                    (w(x), w(y)),
                    t.clone(),
                    name.clone(),
                );
            }
        }
        if let (Some(x), Some(y)) = (effective_transport(a, pa), effective_transport(b, pb)) {
            if x.0 != y.0 {
                let words = (
                    transport_words(x, pa.transport_raw.as_ref()),
                    transport_words(y, pb.transport_raw.as_ref()),
                );
                add(out, ChangeKind::Transport, words, t, name);
            }
        }
    }
}

/// The whole run's transports where no pair's were read (`bench collectives`).
fn node_transport(out: &mut Vec<Found>, a: &RunFacts, b: &RunFacts) {
    if !a.pairs.iter().all(|p| p.transport.is_none()) {
        return;
    }
    let (Some(x), Some(y)) = (&a.node_transport, &b.node_transport) else {
        return;
    };
    if Transport::worst_of(x) != Transport::worst_of(y) {
        add(
            out,
            ChangeKind::Transport,
            (x.clone(), y.clone()),
            Target::Node,
            "node".into(),
        );
    }
}

fn env(out: &mut Vec<Found>, a: &RunFacts, b: &RunFacts) {
    let names: BTreeSet<&String> = a.nccl_env.keys().chain(b.nccl_env.keys()).collect();
    for name in names {
        if QUIET_VARS.contains(&name.as_str()) {
            continue;
        }
        let (x, y) = (a.nccl_env.get(name), b.nccl_env.get(name));
        if x == y {
            continue;
        }
        let w =
            |v: Option<&String>| v.map_or_else(|| "unset".to_string(), |v| format!("{name}={v}"));
        let kind = if name == "NCCL_ALGO" || name == "NCCL_PROTO" {
            ChangeKind::AlgoProto
        } else {
            ChangeKind::NcclEnv
        };
        let mut c = change(kind, w(x), w(y));
        c.r#where.push(name.clone());
        out.push(Found {
            change: c,
            targets: vec![Target::Env(name.clone())],
        });
    }
}

//! `ddpcheck explain` as text: each pair's chain in a line, every cause with its evidence, fix
//! and source, and the reference figures.

use ddpcheck_core::explain::{Action, Cause, Explanation, NodeChain, PairChain, PathCapacity};
use ddpcheck_core::hostcopy::HostCopyRun;
use ddpcheck_core::node_gpus::GpuInfo;
use ddpcheck_core::report::ExplainReport;
use ddpcheck_core::{Finding, Severity};

use super::banner;
use crate::width::Width;

fn gbps(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// One pair's chain in a line: figure, share of expected, transport and why, fix, A/B.
fn chain_line(c: &PairChain) -> String {
    let mut s = format!("GPU{}–GPU{} ({}): ", c.a.index, c.b.index, c.link);
    match (c.busbw_gbps, &c.measure_error) {
        (Some(b), _) => s.push_str(&format!("{} GB/s", gbps(b))),
        (None, Some(e)) => s.push_str(&format!("not measured ({e})")),
        (None, None) => s.push_str("not measured"),
    }
    if let (Some(r), Some(e)) = (c.ratio, &c.expected) {
        s.push_str(&format!(
            ", {:.0}% of expected ({} GB/s)",
            r * 100.0,
            gbps(e.busbw_gbps)
        ));
    }
    s.push_str(&capacity_words(c.capacity.as_ref()));
    let how = if c.transport_measured {
        ""
    } else {
        " (predicted)"
    };
    s.push_str(&format!("; transport {}{how}", c.transport.label()));
    if c.transport > c.transport_allowed {
        s.push_str(&format!(
            ", the topology allows {}",
            c.transport_allowed.label()
        ));
    }
    // Words of a healthy chain (a VM) are notes, not reasons.
    let troubled = !c.fix.is_empty() || c.transport > c.transport_allowed;
    if !c.because.is_empty() {
        let word = if troubled { " because" } else { "; note:" };
        s.push_str(&format!("{word} {}", c.because.join("; ")));
    }
    if c.fix.is_empty() {
        s.push_str("; nothing to fix");
    } else {
        s.push_str(&format!("; fix: {}", c.fix));
    }
    if let Some(ab) = &c.ab {
        match (ab.after_gbps, &ab.error) {
            (Some(after), _) => s.push_str(&format!(
                " (A/B: {} → {} GB/s, ×{:.2}, under {})",
                gbps(ab.before_gbps),
                gbps(after),
                after / ab.before_gbps,
                env_words(&ab.overrides)
            )),
            (None, Some(e)) => s.push_str(&format!(" (A/B failed: {e})")),
            (None, None) => {}
        }
    }
    s
}

fn env_words(env: &[(String, String)]) -> String {
    env.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// ", 25% of capacity (PCIe gen3 x16, 15.75 GB/s)": the second reference beside the class's.
fn capacity_words(c: Option<&PathCapacity>) -> String {
    match c {
        Some(k) => match k.fraction {
            Some(f) => format!(
                ", {:.0}% of capacity ({}, {:.2} GB/s)",
                f * 100.0,
                k.path,
                k.gbps
            ),
            None => format!("; capacity {}, {:.2} GB/s", k.path, k.gbps),
        },
        None => String::new(),
    }
}

/// The node's all-reduce in a line: figure, both references, the ring's slowest hop.
fn node_line(n: &NodeChain) -> String {
    let mut s = format!("all {} GPUs: ", n.gpus.len());
    match (n.busbw_gbps, &n.measure_error) {
        (Some(b), _) => s.push_str(&format!("{} GB/s", gbps(b))),
        (None, Some(e)) => s.push_str(&format!("not measured ({e})")),
        (None, None) => s.push_str("not measured"),
    }
    if let (Some(r), Some(e)) = (n.ratio, &n.expected) {
        s.push_str(&format!(
            ", {:.0}% of expected ({} GB/s)",
            r * 100.0,
            gbps(e.busbw_gbps)
        ));
    }
    s.push_str(&capacity_words(n.capacity.as_ref()));
    if let Some((a, b)) = n.slowest_hop {
        s.push_str(&format!(" on the ring's slowest hop GPU{a}–GPU{b}"));
    }
    if let Some(t) = &n.transport_raw {
        s.push_str(&format!("; transport {t}"));
    }
    let limits: Vec<&str> = n.causes.iter().map(|c| c.short.as_str()).collect();
    if !limits.is_empty() {
        s.push_str(&format!("; note: {}", limits.join("; ")));
    }
    s
}

fn cause_lines(c: &Cause) -> String {
    let mut s = format!(
        "  {:<8} {} [{}]: {}\n",
        c.severity.label(),
        c.kind.as_str(),
        c.action.as_str(),
        c.message
    );
    for e in &c.evidence {
        s.push_str(&format!("           {}: {}", e.what, e.measured));
        if let Some(x) = &e.expected {
            s.push_str(&format!(" (expected {x})"));
        }
        s.push('\n');
    }
    if c.action != Action::None || c.severity > Severity::Info {
        s.push_str(&format!("           fix: {}\n", c.fix));
    }
    s.push_str(&format!("           source: {}\n", c.source));
    s
}

/// Platform limits, one kind at a time: the node's (else the first) in full, the others of the
/// same kind in a line each (their share of capacity and their A/B).
fn limit_lines(limits: &[&Cause]) -> String {
    let mut s = String::new();
    let mut kinds: Vec<_> = limits.iter().map(|c| c.kind).collect();
    kinds.dedup();
    kinds.sort();
    kinds.dedup();
    for kind in kinds {
        let of_kind: Vec<&Cause> = limits.iter().copied().filter(|c| c.kind == kind).collect();
        // The node-wide one (most GPUs) tells the mechanism with the node's arithmetic.
        let Some(main) = of_kind.iter().copied().max_by_key(|c| c.gpus.len()) else {
            continue;
        };
        s.push_str(&cause_lines(main));
        for c in of_kind.iter().filter(|c| !std::ptr::eq(**c, main)) {
            s.push_str(&format!("           also {}\n", also_words(c)));
        }
    }
    s
}

/// "GPU0–GPU2: 25% (3.93 GB/s); forced P2P (NCCL_P2P_LEVEL=SYS): 3.93 → 2.11 GB/s (×0.54)".
fn also_words(c: &Cause) -> String {
    let who: Vec<String> = c.gpus.iter().map(|g| format!("GPU{}", g.index)).collect();
    let mut parts = Vec::new();
    for ev in &c.evidence {
        if ev.what == "share of capacity" {
            parts.push(format!("share of capacity {}", ev.measured));
        } else if ev.source.as_deref() == Some("this run's A/B") {
            parts.push(format!("{}: {}", ev.what, ev.measured));
        }
    }
    format!("{}: {}", who.join("–"), parts.join("; "))
}

/// A live explain, `width` columns wide at most.
pub fn explain(r: &ExplainReport, width: Width) -> String {
    let mut s = banner(&r.header, "explain");
    s.push_str(&body(&Body {
        reason: &r.reason,
        gpus: &r.gpus,
        explanation: &r.explanation,
        host_copies: r.host_copies.as_ref(),
        host_copy_findings: &r.host_copy_findings,
        history: true,
        no_pairs: None,
        width,
    }));
    super::fit(&s, width)
}

/// What an explain report says below its banner, live or read from artifacts.
pub(super) struct Body<'a> {
    pub reason: &'a str,
    pub gpus: &'a [GpuInfo],
    pub explanation: &'a Explanation,
    pub host_copies: Option<&'a HostCopyRun>,
    pub host_copy_findings: &'a [Finding],
    /// Whether to say the node's history (a live node has one; artifacts none).
    pub history: bool,
    /// Why there is no pair where there are several GPUs (artifacts without a topo matrix);
    /// `None`: one GPU.
    pub no_pairs: Option<&'a str>,
    /// The columns its tables fit in.
    pub width: Width,
}

/// The reason, the pairs' chains, the node's all-reduce, the causes, the platform limits and
/// the references.
pub(super) fn body(b: &Body<'_>) -> String {
    let mut s = format!("{}\n", b.reason);
    let e = b.explanation;
    if let (true, Some(why)) = (e.pairs.is_empty(), b.no_pairs) {
        s.push_str(&format!(
            "\n{} GPUs; {why}; the node and its GPUs:\n",
            b.gpus.len()
        ));
    } else if e.pairs.is_empty() {
        s.push_str(&format!(
            "\n{} GPU{}: no pair to measure; the node and its GPUs:\n",
            b.gpus.len(),
            if b.gpus.len() == 1 { "" } else { "s" }
        ));
    } else {
        s.push_str("\nPairs:\n");
        for c in &e.pairs {
            s.push_str(&format!("  {}\n", chain_line(c)));
        }
    }
    if let Some(run) = b.host_copies {
        s.push_str(&super::host_copies(b.gpus, run, b.width));
    }
    for f in b.host_copy_findings {
        s.push_str(&format!("  {}: {}\n", f.severity.label(), f.message));
    }
    if let Some(n) = &e.node {
        s.push_str(&format!("\nNode all-reduce:\n  {}\n", node_line(n)));
    }
    let (limits, all): (Vec<&Cause>, Vec<&Cause>) =
        e.all_causes().partition(|c| c.kind.is_platform_limit());
    if all.is_empty() && limits.is_empty() {
        s.push_str("\nNo cause of low bandwidth found.\n");
    } else if all.is_empty() {
        s.push_str("\nNo fault found.\n");
    } else {
        s.push_str("\nCauses:\n");
        for c in all {
            s.push_str(&cause_lines(c));
        }
    }
    if !limits.is_empty() {
        s.push_str("\nPlatform limits (the platform's nature, not faults):\n");
        s.push_str(&limit_lines(&limits));
    }
    s.push_str("\nReference:\n");
    let mut refs: Vec<String> = e
        .pairs
        .iter()
        .filter_map(|c| c.expected.as_ref())
        .map(|x| {
            format!(
                "  {} GB/s for {} ({})",
                gbps(x.busbw_gbps),
                x.class,
                x.source
            )
        })
        .collect();
    refs.dedup();
    if let Some(x) = e.node.as_ref().and_then(|n| n.expected.as_ref()) {
        refs.push(format!(
            "  {} GB/s for the node's all-reduce, {} ({})",
            gbps(x.busbw_gbps),
            x.class,
            x.source
        ));
    }
    if refs.is_empty() {
        refs.push(match b.no_pairs {
            Some(why) => format!("  none: {why}"),
            None => "  no pair: the reference table has no figure for one GPU".into(),
        });
    }
    let mut caps: Vec<String> = e
        .pairs
        .iter()
        .filter_map(|c| c.capacity.as_ref())
        .chain(e.node.iter().filter_map(|n| n.capacity.as_ref()))
        .map(|k| format!("  capacity {}: {} ({})", k.path, k.arithmetic, k.source))
        .collect();
    caps.sort();
    caps.dedup();
    refs.extend(caps);
    if b.host_copies.is_some() {
        refs.extend(super::copy_reference_lines(b.gpus));
    }
    for line in refs {
        s.push_str(&line);
        s.push('\n');
    }
    if !b.history {
        return s;
    }
    s.push_str(&match e.history_median_gbps {
        Some(m) => format!("  this node's recent median: {} GB/s\n", gbps(m)),
        // Locally there is never any; through a daemon, none until it has run a preflight.
        None => "  this node's history: none (the daemon keeps its preflights' figures)\n".into(),
    });
    s
}

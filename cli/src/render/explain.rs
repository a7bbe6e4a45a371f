//! `ddpcheck explain` as text: each pair's chain in a line, every cause with its evidence, fix
//! and source, and the reference figures.

use ddpcheck_core::explain::{Action, Cause, PairChain};
use ddpcheck_core::report::ExplainReport;
use ddpcheck_core::Severity;

use super::banner;

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
                " (A/B: {} → {} GB/s)",
                gbps(ab.before_gbps),
                gbps(after)
            )),
            (None, Some(e)) => s.push_str(&format!(" (A/B failed: {e})")),
            (None, None) => {}
        }
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

pub fn explain(r: &ExplainReport) -> String {
    let mut s = banner(&r.header, "explain");
    s.push_str(&format!("{}\n", r.reason));
    let e = &r.explanation;
    if e.pairs.is_empty() {
        s.push_str(&format!(
            "\n{} GPU{}: no pair to measure; the node and its GPUs:\n",
            r.gpus.len(),
            if r.gpus.len() == 1 { "" } else { "s" }
        ));
    } else {
        s.push_str("\nPairs:\n");
        for c in &e.pairs {
            s.push_str(&format!("  {}\n", chain_line(c)));
        }
    }
    if let Some(run) = &r.host_copies {
        s.push_str(&super::host_copies(&r.gpus, run));
    }
    for f in &r.host_copy_findings {
        s.push_str(&format!("  {}: {}\n", f.severity.label(), f.message));
    }
    let all: Vec<&Cause> = e.all_causes().collect();
    if all.is_empty() {
        s.push_str("\nNo cause of low bandwidth found.\n");
    } else {
        s.push_str("\nCauses:\n");
        for c in all {
            s.push_str(&cause_lines(c));
        }
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
    if refs.is_empty() {
        refs.push("  no pair: the reference table has no figure for one GPU".into());
    }
    for line in refs {
        s.push_str(&line);
        s.push('\n');
    }
    s.push_str(&match e.history_median_gbps {
        Some(m) => format!("  this node's recent median: {} GB/s\n", gbps(m)),
        // Locally there is never any; through a daemon, none until it has run a preflight.
        None => "  this node's history: none (the daemon keeps its preflights' figures)\n".into(),
    });
    s
}

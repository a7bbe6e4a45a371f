//! `ddpcheck explain --from-artifacts` as text: the files read and their provenance, the same
//! body as a live explain, `check`'s findings on the same readings, and what was not judged.

use ddpcheck_artifacts::judge::ArtifactsReport;
use ddpcheck_core::Severity;

use super::explain::{body, Body};
use crate::width::Width;

fn banner(r: &ArtifactsReport) -> String {
    let v = &r.versions;
    format!(
        "ddpcheck explain — from {} artifact reading{} (driver {}, CUDA {}, NCCL {}), not a measurement by ddpcheck\n",
        r.provenance.len(),
        if r.provenance.len() == 1 { "" } else { "s" },
        v.driver.as_deref().unwrap_or("?"),
        v.cuda.as_deref().unwrap_or("?"),
        v.nccl.as_deref().unwrap_or("?"),
    )
}

fn gbps(v: Option<f64>) -> String {
    v.map_or("no figure".into(), |b| format!("{b:.1} GB/s"))
}

fn size(bytes: Option<u64>) -> String {
    bytes.map_or(String::new(), |b| format!(" at {} MiB", b >> 20))
}

/// Every measurement the artifacts hold, judged or not: a figure read is always shown.
fn measured(r: &ArtifactsReport) -> String {
    let mut lines = Vec::new();
    for m in &r.measurements {
        let mut l = format!(
            "  GPU{}–GPU{}: {}{}",
            m.a,
            m.b,
            gbps(m.busbw_gbps),
            size(m.bytes)
        );
        if let Some(t) = &m.transport {
            l.push_str(&format!(", transport {t}"));
        }
        if let Some(e) = &m.error {
            l.push_str(&format!(", failed: {e}"));
        }
        lines.push(l);
    }
    if let Some(n) = &r.node_measurement {
        let mut l = format!(
            "  all {} GPUs: {}{}",
            r.gpus.len(),
            gbps(n.busbw_gbps),
            size(n.bytes)
        );
        if let Some(t) = &n.transport {
            l.push_str(&format!(", transports {t}"));
        }
        if let Some(e) = &n.error {
            l.push_str(&format!(", failed: {e}"));
        }
        lines.push(l);
    }
    if lines.is_empty() {
        return String::new();
    }
    format!(
        "\nMeasured (large-message all-reduce busbw, as read):\n{}\n",
        lines.join("\n")
    )
}

/// The artifacts' explain, `width` columns wide at most.
pub fn explain_artifacts(r: &ArtifactsReport, width: Width) -> String {
    let mut s = banner(r);
    s.push_str("\nRead:\n");
    for p in &r.provenance {
        let versions: Vec<String> = p.versions.iter().map(|(k, v)| format!("{k} {v}")).collect();
        s.push_str(&format!("  {} ({}): {}", p.file, p.command, p.summary));
        if !versions.is_empty() {
            s.push_str(&format!("; {}", versions.join(", ")));
        }
        s.push('\n');
    }
    s.push('\n');
    s.push_str(&body(&Body {
        reason: &r.reason,
        gpus: &r.gpus,
        explanation: &r.explanation,
        host_copies: None,
        host_copy_findings: &[],
        history: false,
        no_pairs: (r.topology.is_none() && r.gpus.len() > 1)
            .then_some("no topo matrix, so no pair is known"),
        width,
    }));
    s.push_str(&measured(r));
    let findings: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.severity > Severity::Info)
        .collect();
    if !findings.is_empty() {
        s.push_str("\nCheck's findings:\n");
        for f in findings {
            s.push_str(&format!(
                "  {:<8} {}: {}\n",
                f.severity.label(),
                f.code,
                f.message
            ));
        }
    }
    if !r.undecided.is_empty() {
        s.push_str("\nNot judged:\n");
        for u in &r.undecided {
            s.push_str(&format!("  {u}\n"));
        }
    }
    super::fit(&s, width)
}

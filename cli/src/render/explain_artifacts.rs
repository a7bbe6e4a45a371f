//! `ddpcheck explain --from-artifacts` as text: the files read and their provenance, the same
//! body as a live explain, `check`'s findings on the same readings, and what was not judged.

use ddpcheck_artifacts::judge::ArtifactsReport;
use ddpcheck_core::Severity;

use super::explain::{body, Body};

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

pub fn explain_artifacts(r: &ArtifactsReport) -> String {
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
    }));
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
    s
}

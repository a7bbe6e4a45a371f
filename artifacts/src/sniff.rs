//! Which artifact a file is, by its content (file names are free): one format, or nccl-tests
//! output with NCCL's INFO log interleaved (NCCL_DEBUG=INFO on nccl-tests). Anything else that
//! holds two formats is mixed; empty, binary or unknown content is refused.

use crate::text::{clean, looks_binary};
use crate::topo_matrix::gpu_index;
use crate::{ArtifactError, Format};

const LINK_WORDS: [&str; 5] = ["PIX", "PXB", "PHB", "NODE", "SYS"];
const P2P_WORDS: [&str; 8] = ["X", "OK", "CNS", "GNS", "TNS", "NS", "DR", "U"];

fn is_topo_link(w: &str) -> bool {
    LINK_WORDS.contains(&w)
        || w.strip_prefix("NV")
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

fn topo_matrix(lines: &[&str]) -> bool {
    lines.iter().any(|l| {
        let toks: Vec<&str> = l.split_whitespace().collect();
        match toks.first() {
            Some(&"GPU0") if l.contains("CPU Affinity") => true,
            Some(f) if gpu_index(f).is_some() => {
                toks.len() > 1 && toks[1..].iter().any(|w| is_topo_link(w))
            }
            _ => false,
        }
    }) || lines.iter().any(|l| l.contains("= Connection traversing"))
}

fn topo_p2p(lines: &[&str]) -> bool {
    lines.iter().any(|l| l.contains("= Chipset not supported"))
        || lines.iter().any(|l| {
            let toks: Vec<&str> = l.split_whitespace().collect();
            toks.len() > 2
                && gpu_index(toks[0]).is_some()
                && toks[1..].iter().all(|w| P2P_WORDS.contains(w))
                && toks[1..].iter().any(|w| *w != "X")
        })
}

fn smi_query(text: &str, lines: &[&str]) -> bool {
    text.contains("NVSMI LOG")
        || lines.iter().any(|l| {
            let t = l.trim_start();
            l.starts_with(' ')
                && ["Product Name", "GPU UUID", "Bus Id", "Attached GPUs"]
                    .iter()
                    .any(|k| t.starts_with(k))
                && t.contains(" : ")
        })
        || lines.iter().any(|l| l.starts_with("Attached GPUs"))
}

fn nvlink_status(lines: &[&str]) -> bool {
    lines
        .iter()
        .any(|l| crate::nvlink_status::gpu_line(l).is_some())
        && lines.iter().any(|l| {
            l.trim()
                .strip_prefix("Link ")
                .and_then(|r| r.split_once(':'))
                .is_some_and(|(n, _)| n.trim().parse::<u32>().is_ok())
        })
}

fn nccl_tests(text: &str) -> bool {
    text.contains("# nThread")
        || text.contains("Avg bus bandwidth")
        || text.contains("# Using devices")
        || text
            .lines()
            .any(|l| l.contains("busbw") && l.contains("size") && l.contains("count"))
}

fn nccl_log(text: &str) -> bool {
    text.contains(" NCCL INFO ") || text.contains(" NCCL WARN ")
}

fn lspci(lines: &[&str]) -> bool {
    lines.iter().any(|l| {
        let mut it = l.splitn(2, ' ');
        let head = it.next().unwrap_or("");
        let rest = it.next().unwrap_or("");
        let parts: Vec<&str> = head.split(':').collect();
        let hexes = parts.len() >= 2
            && parts[..parts.len() - 1]
                .iter()
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_hexdigit()))
            && parts[parts.len() - 1].contains('.');
        hexes && rest.contains(": ")
    })
}

/// A JSON object, or an array that parses as JSON: no artifact begins with `{`, while Open MPI's
/// `[1,0]<stdout>:` prefixes begin nccl-tests' lines with `[`.
fn is_json(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with('{')
        || (t.starts_with('[') && serde_json::from_str::<serde_json::Value>(t).is_ok())
}

/// The formats `text` holds: one, or nccl-tests and an NCCL log together.
pub fn sniff(text: &str) -> Result<Vec<Format>, ArtifactError> {
    if text.trim().is_empty() {
        return Err(ArtifactError::Empty);
    }
    if looks_binary(text) {
        return Err(ArtifactError::Binary);
    }
    let text = clean(text);
    // A JSON document (a ddpcheck report, say) is no artifact, whatever words it holds: a
    // compact report is one line with "size", "count" and "busbw" in it.
    if is_json(&text) {
        return Err(ArtifactError::Foreign);
    }
    let lines: Vec<&str> = text.lines().collect();
    let found: Vec<Format> = [
        (Format::TopoMatrix, topo_matrix(&lines)),
        (Format::TopoP2p, !topo_matrix(&lines) && topo_p2p(&lines)),
        (Format::SmiQuery, smi_query(&text, &lines)),
        (Format::NvlinkStatus, nvlink_status(&lines)),
        (Format::NcclTests, nccl_tests(&text)),
        (Format::NcclLog, nccl_log(&text)),
        (Format::Lspci, lspci(&lines)),
    ]
    .into_iter()
    .filter_map(|(f, yes)| yes.then_some(f))
    .collect();
    match found.as_slice() {
        [] => Err(ArtifactError::Foreign),
        [_] | [Format::NcclTests, Format::NcclLog] => Ok(found),
        [a, b, ..] => Err(ArtifactError::Mixed(*a, *b)),
    }
}

/// The file's readings: as sniffed, or as `wanted` says (then the file must be that format;
/// an NCCL log inside nccl-tests output is read too).
pub fn read(text: &str, wanted: Option<Format>) -> Result<Vec<crate::Reading>, ArtifactError> {
    let found = match (sniff(text), wanted) {
        // Named by its flag but not recognised: the parser says what is missing.
        (Err(ArtifactError::Foreign), Some(w)) => return Ok(vec![crate::parse(w, text)?]),
        (found, _) => found?,
    };
    if let Some(w) = wanted {
        if !found.contains(&w) {
            return Err(ArtifactError::WrongFormat {
                wanted: w,
                found: found[0],
            });
        }
    }
    found.iter().map(|f| crate::parse(*f, text)).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn empty_binary_foreign_and_mixed_are_refused() {
        assert_eq!(sniff("  \n"), Err(ArtifactError::Empty));
        assert_eq!(
            sniff("\u{7f}ELF\u{2}\u{1}\u{1}\0\0\0"),
            Err(ArtifactError::Binary)
        );
        assert_eq!(
            sniff("{\"kind\": \"check\"}\n"),
            Err(ArtifactError::Foreign)
        );
        let mixed = "GPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\nGPU1\tNV4\t X \t0-7\nGPU 0: A (UUID: GPU-a)\n Link 0: 25.781 GB/s\n";
        assert_eq!(
            sniff(mixed),
            Err(ArtifactError::Mixed(
                Format::TopoMatrix,
                Format::NvlinkStatus
            ))
        );
    }

    #[test]
    fn a_compact_json_report_is_foreign_not_a_truncated_nccl_tests_run() {
        let report =
            "{\"kind\":\"bench_collectives\",\"sweeps\":[{\"size\":8,\"count\":2,\"busbw\":0.1}]}";
        assert_eq!(sniff(report), Err(ArtifactError::Foreign));
        assert_eq!(
            sniff("[{\"size\": 8, \"count\": 2, \"busbw\": 0}]"),
            Err(ArtifactError::Foreign)
        );
        let mpi = "[1,0]<stdout>:# nThread 1 nGpus 1 minBytes 8\n";
        assert_eq!(sniff(mpi).unwrap(), vec![Format::NcclTests]);
    }

    #[test]
    fn nccl_tests_with_its_log_is_one_file() {
        let t = "# nThread 1 nGpus 2\nh:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n";
        assert_eq!(sniff(t).unwrap(), vec![Format::NcclTests, Format::NcclLog]);
    }
}

//! `ddpcheck history`: the runs a node's daemon has stored, newest first, each with its outcome
//! in a line (verdict, bandwidth, speedup, or why it failed); `--json` adds the stored reports.

use clap::Args;
use ddpcheck_core::collective::judged_peak;
use ddpcheck_core::report::{BenchCollectivesReport, DdpReport, ExplainReport, PreflightReport};
use ddpcheck_proto::v1 as pb;
use serde::Serialize;

use crate::global_args::{daemon_runner, GlobalArgs};
use crate::print_json;
use ddpcheck_engine::RunError;

#[derive(Args, Debug)]
pub struct HistoryArgs {
    /// Only runs of this kind.
    #[arg(long, value_parser = ["preflight", "bench_collectives", "bench_ddp", "explain"])]
    pub kind: Option<String>,
    /// How many runs, newest first.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,
    /// Compare two stored runs as `ddpcheck diff` does: the ids given (A, then B), else the
    /// last two complete runs of `--kind` (of the newest run's kind without it).
    #[arg(long, num_args = 0..=2, value_name = "ID")]
    pub compare: Option<Vec<i64>>,
}

/// How many stored runs `--compare` looks through for the ids it is given.
const COMPARE_SEARCH: u32 = 1000;

/// One stored run as `--json` prints it.
#[derive(Serialize)]
struct Entry {
    id: i64,
    kind: String,
    backend: String,
    /// RFC 3339, UTC, to the second.
    started: String,
    /// `complete`, `failed`, `running` or `interrupted` (the daemon stopped during the run).
    status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    verdict: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    summary: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// The stored report, as `check --json` or `bench ... --json` printed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    report: Option<serde_json::Value>,
}

pub fn run(cli: &GlobalArgs, a: &HistoryArgs) -> Result<i32, RunError> {
    let Some(daemon) = daemon_runner(cli)? else {
        return Err(RunError::Usage(
            "history is kept by the daemon: give --daemon SOCKET (or set DDPCHECK_DAEMON); \
             local runs store none"
                .into(),
        ));
    };
    if let Some(ids) = &a.compare {
        let rows = daemon.history_rows(a.kind.as_deref().unwrap_or(""), COMPARE_SEARCH)?;
        let (x, y) = pick_pair(&rows, ids, a.kind.as_deref())?;
        let origin = |r: &pb::Report| format!("stored run {}", r.id);
        let before = crate::diff_cmd::facts_from_json(&x.json, &origin(x))?;
        let after = crate::diff_cmd::facts_from_json(&y.json, &origin(y))?;
        return crate::diff_cmd::show(cli, &before, &after);
    }
    let rows = daemon.history_rows(a.kind.as_deref().unwrap_or(""), a.limit)?;
    let entries: Vec<Entry> = rows.into_iter().map(entry).collect();
    if cli.json {
        print_json(&entries)?;
    } else {
        out!("{}", table(&daemon.addr, &entries, cli.width()));
    }
    Ok(0)
}

fn entry(r: pb::Report) -> Entry {
    let summary = summary(&r.kind, &r.json);
    let report = serde_json::from_str(&r.json).ok();
    let complete = r.status == "complete";
    Entry {
        id: r.id,
        started: started(r.started_unix),
        verdict: (!r.verdict.is_empty()).then_some(r.verdict),
        // The daemon sends -1 where it stored none (benchmarks, unfinished runs).
        exit_code: (complete && r.exit_code >= 0 && judged(&r.kind)).then_some(r.exit_code),
        error: (!r.error.is_empty()).then_some(r.error),
        kind: r.kind,
        backend: r.backend,
        status: r.status,
        summary,
        report,
    }
}

/// Kinds `--compare` reads.
const COMPARABLE: [&str; 4] = ["preflight", "bench_collectives", "bench_ddp", "explain"];

/// The two stored runs to compare, older first: the ids given, else the newest two complete
/// runs of `kind` (of the newest complete run's kind where none is given). `rows` are newest
/// first.
fn pick_pair<'a>(
    rows: &'a [pb::Report],
    ids: &[i64],
    kind: Option<&str>,
) -> Result<(&'a pb::Report, &'a pb::Report), RunError> {
    let usable = |r: &&pb::Report| {
        r.status == "complete" && !r.json.is_empty() && COMPARABLE.contains(&r.kind.as_str())
    };
    match ids {
        [x, y] => {
            let find = |id: i64| {
                rows.iter().find(|r| r.id == id).ok_or_else(|| {
                    RunError::Usage(format!("history --compare: no stored run {id}"))
                })
            };
            let (a, b) = (find(*x)?, find(*y)?);
            for r in [a, b] {
                if !usable(&r) {
                    return Err(RunError::Usage(format!(
                        "history --compare: stored run {} ({} {}) has no report to compare",
                        r.id, r.status, r.kind
                    )));
                }
            }
            Ok((a, b))
        }
        [] => {
            let kind = kind
                .or_else(|| rows.iter().find(usable).map(|r| r.kind.as_str()))
                .unwrap_or("");
            let mut last = rows.iter().filter(usable).filter(|r| r.kind == kind);
            match (last.next(), last.next()) {
                (Some(newer), Some(older)) => Ok((older, newer)),
                _ => Err(RunError::Usage(format!(
                    "history --compare: fewer than two complete {} runs stored",
                    if kind.is_empty() { "comparable" } else { kind }
                ))),
            }
        }
        _ => Err(RunError::Usage(
            "history --compare takes two run ids (A, then B) or none (the last two runs)".into(),
        )),
    }
}

/// Kinds whose reports carry a verdict and an exit code.
fn judged(kind: &str) -> bool {
    matches!(kind, "preflight" | "explain")
}

/// A report's reason without the `ddpcheck: VERDICT: ` a prolog line starts with (the verdict
/// has its own column).
fn bare_reason<'a>(reason: &'a str, verdict: &str) -> &'a str {
    let reason = reason.trim_start_matches("ddpcheck: ");
    reason
        .strip_prefix(verdict)
        .and_then(|r| r.strip_prefix(": "))
        .unwrap_or(reason)
}

fn started(unix: f64) -> String {
    if !(unix.is_finite() && unix > 0.0) {
        return "-".into();
    }
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(unix);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// The outcome of a stored report in a line; empty where none was stored (an unfinished or
/// failed run) or it cannot be read.
fn summary(kind: &str, json: &str) -> String {
    let gbps = |g: f64| format!("{g:.1} GB/s");
    match kind {
        "preflight" => serde_json::from_str::<PreflightReport>(json)
            .map(|r| {
                let peak = r.all_reduce.as_ref().and_then(judged_peak);
                let reason = bare_reason(&r.reason, r.verdict.as_str());
                match peak {
                    Some((_, b)) => format!("{reason}; all-reduce {}", gbps(b)),
                    None => reason.to_string(),
                }
            })
            .unwrap_or_default(),
        "bench_collectives" => serde_json::from_str::<BenchCollectivesReport>(json)
            .ok()
            .and_then(|r| {
                let s = r.all_reduce()?;
                let (_, b) = judged_peak(s)?;
                Some(format!("all-reduce {} at {} ranks", gbps(b), s.ranks))
            })
            .unwrap_or_default(),
        "bench_ddp" => serde_json::from_str::<DdpReport>(json)
            .map(|r| {
                let best = r
                    .results
                    .iter()
                    .filter(|x| x.world_size > 1)
                    .filter_map(|x| Some((x.speedup?, x)))
                    .max_by(|a, b| a.0.total_cmp(&b.0));
                let n = r.results.len();
                let runs = if n == 1 {
                    "1 run".into()
                } else {
                    format!("{n} runs")
                };
                match best {
                    Some((s, x)) => format!(
                        "{runs}; best {s:.2}x: {} {} at {} GPUs",
                        x.model, x.variant, x.world_size
                    ),
                    None => format!("{runs} at one GPU"),
                }
            })
            .unwrap_or_default(),
        "explain" => serde_json::from_str::<ExplainReport>(json)
            .map(|r| bare_reason(&r.reason, r.verdict.as_str()).to_string())
            .unwrap_or_default(),
        _ => String::new(),
    }
}

fn table(addr: &str, entries: &[Entry], width: crate::width::Width) -> String {
    let sim = entries.iter().any(|e| e.backend == "sim");
    let mut out = format!(
        "ddpcheck history — daemon at {addr}, newest first{}\n",
        if sim {
            " (SIMULATED NODE: not measurements of real GPUs)"
        } else {
            ""
        }
    );
    if entries.is_empty() {
        out.push_str("no runs stored yet\n");
        return out;
    }
    let mut t = crate::render::table();
    t.set_header([
        "id",
        "started (UTC)",
        "kind",
        "status",
        "verdict",
        "outcome",
    ]);
    for e in entries {
        t.add_row([
            e.id.to_string(),
            e.started.clone(),
            e.kind.clone(),
            e.status.clone(),
            e.verdict.clone().unwrap_or_default(),
            e.error.clone().unwrap_or_else(|| e.summary.clone()),
        ]);
    }
    out.push_str(&crate::render::fit_table(t, width));
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_or_missing_reports_summarise_to_nothing() {
        assert_eq!(summary("preflight", ""), "");
        assert_eq!(summary("bench_ddp", "{not json"), "");
        assert_eq!(summary("topo", "{}"), "");
        assert_eq!(started(0.0), "-");
        assert_eq!(started(1.0e9), "2001-09-09T01:46:40Z");
    }

    #[test]
    fn a_reason_loses_the_prefix_and_the_verdict_its_columns_show() {
        let r = "ddpcheck: WARNING: GPU1 link at gen2 x8";
        assert_eq!(bare_reason(r, "WARNING"), "GPU1 link at gen2 x8");
        // Another verdict's name is part of the reason, not the prefix.
        assert_eq!(bare_reason(r, "OK"), "WARNING: GPU1 link at gen2 x8");
        assert!(judged("explain") && judged("preflight") && !judged("bench_ddp"));
    }
}

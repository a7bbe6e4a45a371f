//! `ddpcheck diff A B`: two saved reports (or artifact folders) read into core's run facts and
//! compared (`core::diff`); `render::diff` is its text. Also the reading `history --compare`
//! shares: one stored report's JSON into facts.

use std::path::{Path, PathBuf};

use clap::Args;
use ddpcheck_artifacts::folder::{folder_sources, read_all};
use ddpcheck_artifacts::node::assemble;
use ddpcheck_core::bounded::FileKind;
use ddpcheck_core::diff::{self, Diff, RunFacts};
use ddpcheck_core::report::{BenchCollectivesReport, DdpReport, ExplainReport, PreflightReport};
use ddpcheck_core::saved;
use ddpcheck_engine::{read_file, RunError};
use serde::Serialize;

use crate::global_args::GlobalArgs;
use crate::{print_json, render};

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// Run A, before: a saved `check`, `bench collectives`, `explain` or `bench ddp` `--json`
    /// report, or a folder of artifacts (nvidia-smi, nccl-tests, NCCL's log).
    pub a: PathBuf,
    /// Run B, after: as A, of the same kind of measurement and the same GPU count.
    pub b: PathBuf,
}

/// `diff --json`: the comparison under its kind.
#[derive(Serialize)]
pub struct DiffOutput<'a> {
    pub kind: &'static str,
    #[serde(flatten)]
    pub diff: &'a Diff,
}

pub fn run(cli: &GlobalArgs, a: &DiffArgs) -> Result<i32, RunError> {
    let before = read_run(&a.a)?;
    let after = read_run(&a.b)?;
    show(cli, &before, &after)
}

/// Compares two runs' facts and prints the answer (0: a comparison is no verdict).
pub fn show(cli: &GlobalArgs, a: &RunFacts, b: &RunFacts) -> Result<i32, RunError> {
    let d = diff::diff(a, b).map_err(|e| RunError::Usage(e.to_string()))?;
    if cli.json {
        print_json(&DiffOutput {
            kind: "diff",
            diff: &d,
        })?;
    } else {
        out!("{}", render::diff(&d));
    }
    Ok(0)
}

fn read_run(path: &Path) -> Result<RunFacts, RunError> {
    let origin = path.display().to_string();
    if path.is_dir() {
        return artifact_folder(path);
    }
    let text =
        read_file(path, FileKind::Report).map_err(|e| RunError::Usage(format!("{origin}: {e}")))?;
    facts_from_json(&text, &origin)
}

/// A folder of artifacts: read and assembled by `ddpcheck-artifacts` into the core types a live
/// explain judges, then into facts by `core::diff::from_parts`. A bad file is one line (64).
fn artifact_folder(path: &Path) -> Result<RunFacts, RunError> {
    let usage = |e: String| RunError::Usage(e);
    let sources = folder_sources(path).map_err(|e| usage(e.to_string()))?;
    let reads = read_all(&sources).map_err(|e| usage(e.to_string()))?;
    let a = assemble(&reads).map_err(|e| usage(format!("{}: {e}", path.display())))?;
    Ok(diff::from_parts(&diff::Parts {
        source: path.display().to_string(),
        gpus: &a.gpus,
        topology: a.topology.as_ref(),
        platform: &a.platform,
        nccl_env: &a.nccl_env,
        measurements: &a.measurements,
        node: a.node_measurement.as_ref(),
        nccl_version: a.nccl_version.clone(),
        driver_version: a.driver_version.clone(),
        cuda_version: a.cuda_version.clone(),
        algo_proto: a.algo_proto.clone(),
        log_transport: a.log_transport.clone(),
    }))
}

/// A saved report's JSON (a file's, or one the daemon stored) as run facts; `origin` names it
/// in the one line a bad report gets.
pub fn facts_from_json(text: &str, origin: &str) -> Result<RunFacts, RunError> {
    let usage = |e: String| RunError::Usage(format!("{origin}: {e}"));
    let v: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| usage(format!("not a ddpcheck JSON report: {e}")))?;
    saved::check_schema_version(&v).map_err(|e| usage(e.to_string()))?;
    let kind = v
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or("")
        .to_string();
    let bad = |e: serde_json::Error| usage(format!("unreadable {kind} report: {e}"));
    match kind.as_str() {
        "preflight" => {
            let r: PreflightReport = serde_json::from_value(v).map_err(bad)?;
            saved::check_preflight(&r).map_err(|e| usage(e.to_string()))?;
            Ok(diff::from_preflight(&r))
        }
        "bench_collectives" => {
            let r: BenchCollectivesReport = serde_json::from_value(v).map_err(bad)?;
            saved::check_collectives(&r).map_err(|e| usage(e.to_string()))?;
            Ok(diff::from_collectives(&r))
        }
        "explain" => {
            let r: ExplainReport = serde_json::from_value(v).map_err(bad)?;
            Ok(diff::from_explain(&r))
        }
        "bench_ddp" => {
            let r: DdpReport = serde_json::from_value(v).map_err(bad)?;
            saved::check_ddp(&r).map_err(|e| usage(e.to_string()))?;
            Ok(diff::from_ddp(&r))
        }
        other => Err(usage(format!(
            "a report of kind {other:?} records no run to compare (use check, bench collectives, explain or bench ddp --json)"
        ))),
    }
}

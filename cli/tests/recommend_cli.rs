//! `ddpcheck recommend` end to end on simulated nodes: from saved reports (offline, fast), through
//! the daemon's history, with quick runs, and bad input.

// The offline test checks every part of one recommendation built from the same saved reports.
#![allow(clippy::too_many_lines)]
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use std::time::Instant;

use common::{code, local, local_env, stderr, stdout, Daemon};

fn save(dir: &std::path::Path, name: &str, args: &[&str]) -> std::path::PathBuf {
    let o = local(args);
    assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
    let p = dir.join(name);
    std::fs::write(&p, &o.stdout).unwrap();
    p
}

/// A saved `bench ddp --json` of gpt2-124m on the simulated 4xA6000 box, with `more` arguments.
fn save_a6000_gpt2(
    dir: &std::path::Path,
    name: &str,
    variants: &str,
    gpus: &str,
    more: &[&str],
) -> std::path::PathBuf {
    let mut args = vec![
        "--sim",
        "a6000x4-phb",
        "bench",
        "ddp",
        "--model",
        "gpt2-124m",
        "--variants",
        variants,
        "--gpus",
        gpus,
        "--json",
    ];
    args.extend_from_slice(more);
    save(dir, name, &args)
}

/// The codes of a recommend document's warnings.
fn warning_codes(v: &serde_json::Value) -> Vec<String> {
    v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["code"].as_str().unwrap().to_string())
        .collect()
}

/// `ddpcheck --sim h200x2-nvlink recommend ARGS`.
fn recommend_h200(args: &[&str]) -> std::process::Output {
    let mut all = vec!["--sim", "h200x2-nvlink", "recommend"];
    all.extend_from_slice(args);
    local(&all)
}

/// `recommend --model gpt2-124m --json` from saved reports and `more` arguments: its document.
fn recommend_json(files: &[&std::path::Path], more: &[&str]) -> serde_json::Value {
    let mut args = vec!["recommend", "--model", "gpt2-124m", "--json"];
    for f in files {
        args.extend(["--from", f.to_str().unwrap()]);
    }
    args.extend_from_slice(more);
    let o = local(&args);
    assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[path = "recommend_cli/bad_input.rs"]
mod bad_input;
#[path = "recommend_cli/environment.rs"]
mod environment;
#[path = "recommend_cli/launches.rs"]
mod launches;
#[path = "recommend_cli/powersgd.rs"]
mod powersgd;
#[path = "recommend_cli/quick_runs.rs"]
mod quick_runs;
#[path = "recommend_cli/saved_reports.rs"]
mod saved_reports;

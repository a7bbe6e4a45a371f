//! `bench ddp`'s recipe flags (`--variants`, `--amp`, DDP's options, `--compile-mode`,
//! `--backend`, `--device`, `--reference`) read once where the command line is read, and carried
//! typed to the run: through a daemon they reach it as they do locally, and a bad value is one
//! line and exit 64 before anything starts.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use common::{code, local, stderr, stdout, Daemon};

/// Every recipe flag set away from its default, on an MLP at one and two GPUs.
const RECIPE: &[&str] = &[
    "bench",
    "ddp",
    "--model",
    "mlp:256,2",
    "--gpus",
    "1,2",
    "--variants",
    "accum2 + powersgd4, nobucketview+bucket10",
    "--amp",
    "none",
    "--find-unused-parameters",
    "--static-graph",
    "--no-gradient-as-bucket-view",
    "--no-broadcast-buffers",
    "--compile-mode",
    "reduce-overhead",
    "--backend",
    "gloo",
    "--reference",
    "ddp",
    "--json",
];

/// Each row's variant, recipe and reference, in the report's order.
fn rows(o: &std::process::Output) -> Vec<serde_json::Value> {
    assert_eq!(code(o), 0, "{}{}", stdout(o), stderr(o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| serde_json::json!([r["variant"], r["recipe"], r["reference"]]))
        .collect()
}

#[test]
fn recipe_flags_reach_the_run_through_the_daemon_as_locally() {
    let d = Daemon::start(Some("h200x2-nvlink"));
    let through = rows(&d.cli(RECIPE));
    d.stop();
    let here = rows(&local(&[&["--sim", "h200x2-nvlink"], RECIPE].concat()));
    assert_eq!(through, here);
    let recipe = serde_json::json!({
        "amp": "none",
        "find_unused_parameters": true,
        "static_graph": true,
        "gradient_as_bucket_view": false,
        "broadcast_buffers": false,
        "compile": "reduce-overhead",
        "backend": "gloo",
    });
    let mut variants: Vec<&str> = Vec::new();
    for row in &through {
        assert_eq!(row[1], recipe, "{row}");
        assert_eq!(row[2], "ddp", "{row}");
        variants.push(row[0].as_str().unwrap());
    }
    variants.sort_unstable();
    variants.dedup();
    // Named by their parts in one order; the hooked one's 1-GPU reference added.
    assert_eq!(
        variants,
        ["accum2", "bucket10+nobucketview", "powersgd4+accum2"]
    );
}

/// `--device cpu` reaches the daemon's check of the request: CPU ranks have their own bounds,
/// and take no GPU backend.
#[test]
fn the_device_reaches_the_daemons_check() {
    let d = Daemon::start(Some("h200x2-nvlink"));
    let ranks = d.cli(&["bench", "ddp", "--device", "cpu", "--gpus", "1,9"]);
    let nccl2 = d.cli(&["bench", "ddp", "--device", "cpu", "--backend", "nccl2"]);
    let gpus = d.cli(&["bench", "ddp", "--gpus", "1,9"]);
    d.stop();
    assert_eq!(code(&ranks), 64, "{}", stderr(&ranks));
    assert!(
        stderr(&ranks).contains("9 CPU ranks outside 1..=8"),
        "{}",
        stderr(&ranks)
    );
    assert_eq!(code(&nccl2), 64, "{}", stderr(&nccl2));
    assert!(
        stderr(&nccl2).contains("CPU ranks run gloo"),
        "{}",
        stderr(&nccl2)
    );
    assert_eq!(code(&gpus), 64, "{}", stderr(&gpus));
    assert!(
        stderr(&gpus).contains("GPU count 9 outside 1..=2"),
        "{}",
        stderr(&gpus)
    );
}

/// A bad value is the reader's own line, exit 64, with nothing started (no node named).
#[test]
fn a_bad_recipe_value_is_one_line_and_exit_64() {
    for (flag, value, said) in [
        ("--amp", "fp8", "--amp \"fp8\": expected bf16, fp16 or none"),
        (
            "--compile-mode",
            "fast",
            "--compile-mode \"fast\": expected default, reduce-overhead or max-autotune",
        ),
        ("--device", "tpu", "--device \"tpu\": expected cuda or cpu"),
        (
            "--backend",
            "mpi",
            "--backend \"mpi\": expected nccl, gloo or nccl2",
        ),
        ("--variants", "base,turbo", "unknown variant part \"turbo\""),
        ("--variants", "bf16+fsdp", "\"fsdp+bf16\": fsdp is FSDP2's"),
    ] {
        let o = local(&["bench", "ddp", flag, value]);
        assert_eq!(code(&o), 64, "{flag} {value}: {}", stderr(&o));
        let first = stderr(&o).lines().next().unwrap_or_default().to_string();
        assert!(
            first.starts_with("ddpcheck: ") && first.contains(said),
            "{flag} {value}: {first}"
        );
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    }
    let o = local(&["memory", "--model", "gpt2-124m", "--amp", "fp8"]);
    assert_eq!(code(&o), 64, "{}", stderr(&o));
    assert!(stderr(&o).contains("--amp \"fp8\""), "{}", stderr(&o));
}

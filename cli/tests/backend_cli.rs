//! `--backend`: torch's process-group backend for `bench ddp`; `bench collectives` runs NCCL
//! itself and says so in one line for the others.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use common::{code, local, stderr};

#[test]
fn collectives_refuse_a_torch_backend_in_one_line() {
    let o = local(&common::words(
        "--sim a6000x4-phb bench collectives --backend gloo",
    ));
    assert_eq!(code(&o), 64, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("bench collectives runs NCCL itself"),
        "{}",
        stderr(&o)
    );
    assert_eq!(stderr(&o).trim().lines().count(), 1, "{}", stderr(&o));
    let o = local(&common::words(
        "--sim a6000x4-phb bench collectives --backend mpi",
    ));
    assert_eq!(code(&o), 64);
    assert!(
        stderr(&o).contains("expected nccl, gloo or nccl2"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn ddp_takes_the_backend_and_cpu_ranks_refuse_nccl2() {
    let o = local(&common::words(
        "--sim a6000x4-phb bench ddp --device cpu --backend nccl2 --model gpt2-124m",
    ));
    assert_eq!(code(&o), 64, "{}", stderr(&o));
    assert!(stderr(&o).contains("CPU ranks run gloo"), "{}", stderr(&o));
    let o = local(&common::words("--sim a6000x4-phb --json bench ddp --backend gloo --model gpt2-124m --variants base --gpus 1,2"));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["results"][0]["recipe"]["backend"], "gloo");
}

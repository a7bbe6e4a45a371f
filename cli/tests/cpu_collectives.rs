//! `ddpcheck bench collectives --device cpu`: torch's gloo between CPU ranks, run for real with
//! Debian's torch (1.13): the all-reduce sweep in nccl-tests' columns, labelled CPU ranks; a
//! call that torch's gloo lacks (1.13 has neither all_gather_into_tensor nor
//! reduce_scatter_tensor) is one line naming the torch; bad flags are one line before any process
//! starts. Skipped (with a line saying why) where /usr/bin/python3 has no torch; failing instead
//! under DDPCHECK_REQUIRE_SERVICES=1 (CI, where .ci/install-services installs python3-torch).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use std::process::{Command, Output};

use common::{code, local_env, services_must_run, stderr, stdout};
use ddpcheck_core::collective::Collective;
use ddpcheck_core::report::BenchCollectivesReport;

/// Debian's interpreter with python3-torch (the `python3` first on PATH may have none).
const PYTHON: &str = "/usr/bin/python3";

/// Whether `PYTHON -c probe` succeeds; panics under DDPCHECK_REQUIRE_SERVICES=1 where torch is
/// missing, so that CI cannot skip these.
fn torch_can(probe: &str) -> bool {
    let torch = Command::new(PYTHON)
        .args(["-c", "import torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !torch {
        assert!(
            !services_must_run(),
            "DDPCHECK_REQUIRE_SERVICES=1 but {PYTHON} has no torch; .ci/install-services installs python3-torch"
        );
        eprintln!("skipping: {PYTHON} cannot import torch");
        return false;
    }
    Command::new(PYTHON)
        .args(["-c", probe])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn sweep(args: &[&str]) -> Output {
    let mut all = vec![
        "bench",
        "collectives",
        "--device",
        "cpu",
        "-n",
        "2",
        "-w",
        "1",
    ];
    all.extend(args);
    local_env(&all, &[("DDPCHECK_PYTHON", PYTHON)])
}

#[test]
fn two_cpu_ranks_sweep_all_reduce_in_nccl_tests_columns_labelled_cpu_ranks() {
    if !torch_can("import torch") {
        return;
    }
    let o = sweep(&[
        "--json",
        "--ops",
        "all_reduce",
        "-b",
        "4K",
        "-e",
        "64K",
        "-f",
        "4",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let r: BenchCollectivesReport = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(r.header.on_cpu_ranks(), "{:?}", r.header.backend_label);
    assert!(r.header.provenance.torch_version.is_some());
    let s = &r.runs[0].run.sweeps[0];
    assert_eq!((s.op, s.ranks), (Collective::AllReduce, 2));
    let sizes: Vec<u64> = s.samples.iter().map(|x| x.bytes).collect();
    assert_eq!(sizes, [4096, 16384, 65536]);
    for x in &s.samples {
        assert_eq!(x.count, x.bytes / 4);
        assert_eq!(x.out_of_place.wrong, Some(0), "{x:?}");
        assert!(x.out_of_place.time_us > 0.0);
        // At two ranks nccl-tests' all-reduce bus factor is 2(n-1)/n = 1.
        assert!((x.out_of_place.busbw_gbps - x.out_of_place.algbw_gbps).abs() < 1e-9);
        assert!(x.in_place.is_none(), "torch's all_reduce has one form");
    }

    let text = sweep(&["--ops", "all_reduce", "-b", "4K", "-e", "4K"]);
    assert_eq!(code(&text), 0, "{}", stderr(&text));
    let out = stdout(&text);
    assert!(
        out.contains("CPU ranks over gloo") && out.contains("not GPU ones"),
        "{out}"
    );
    assert!(
        out.contains("# all_reduce (float, redop sum) over 2 ranks"),
        "{out}"
    );
}

#[test]
fn a_gloo_without_the_tensor_forms_is_one_line_naming_the_torch() {
    let probe = "import torch.distributed as d, sys; sys.exit(0 if hasattr(d, 'reduce_scatter_tensor') and tuple(map(int, __import__('torch').__version__.split('.')[:2])) >= (2, 0) else 1)";
    if torch_can(probe) {
        eprintln!("skipping: {PYTHON}'s torch may have gloo's tensor forms");
        return;
    }
    for op in ["all_gather", "reduce_scatter"] {
        let o = sweep(&["--ops", op, "-b", "4K", "-e", "4K"]);
        let err = stderr(&o);
        assert_eq!(code(&o), 3, "{op}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{op}: {err}");
        assert!(
            err.contains("torch 1.") && err.contains("gloo"),
            "{op}: {err}"
        );
        assert!(stdout(&o).is_empty());
    }
}

#[test]
fn bad_flags_are_one_line_and_exit_64_before_any_process() {
    for (args, words) in [
        (&["--ranks", "1"][..], "2..=8 CPU ranks"),
        (&["--ranks", "9"], "2..=8 CPU ranks"),
        (
            &["--ops", "alltoall"],
            "all_reduce, all_gather and reduce_scatter",
        ),
        (&["--backend", "nccl"], "CPU ranks run gloo"),
        (&["--env-ab", "NCCL_P2P_DISABLE=1"], "CPU ranks run gloo"),
    ] {
        // A Python that does not exist: a refusal must come before any launch.
        let mut all = vec!["bench", "collectives", "--device", "cpu"];
        all.extend(args);
        let o = local_env(&all, &[("DDPCHECK_PYTHON", "/nonexistent/python3")]);
        let err = stderr(&o);
        assert_eq!(code(&o), 64, "{args:?}: {err}");
        assert!(err.contains(words), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
    let o = local_env(&["bench", "collectives", "--backend", "gloo"], &[]);
    assert_eq!(code(&o), 64, "{}", stderr(&o));
    assert!(stderr(&o).contains("bench collectives --device cpu"));
    let o = local_env(
        &[
            "--sim",
            "a6000x4-pcie",
            "bench",
            "collectives",
            "--device",
            "cpu",
        ],
        &[],
    );
    assert_eq!(code(&o), 64, "{}", stderr(&o));
    assert!(stderr(&o).contains("not with --sim"), "{}", stderr(&o));
}

//! The embedded benchmark script run for real: `ddpcheck bench ddp --device cpu` with Debian's
//! torch (1.13, gloo, two CPU ranks) on a preset, on factories from tests/fixtures/factories.py,
//! on torchvision's resnet18, and on each bad input, which must be one line with its exit code
//! and leave no process of its launch behind. Skipped (with a line saying why) where
//! /usr/bin/python3 has no torch; failing instead under DDPCHECK_REQUIRE_SERVICES=1 (CI, where
//! .ci/install-services installs python3-torch and python3-torchvision).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Mutex;

use common::{code, local_env, repo_root, services_must_run, stderr, stdout};
use ddpcheck_core::ddp::{BucketOrder, DdpResult, Reference};
use ddpcheck_core::report::DdpReport;

/// Debian's interpreter with python3-torch (the `python3` first on PATH may have none).
const PYTHON: &str = "/usr/bin/python3";
/// Two ranks on a 2-core machine: one launch at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Whether torch (and torchvision) can run here; panics under DDPCHECK_REQUIRE_SERVICES=1. A
/// skip names the test (libtest names each test's thread after it).
fn torch_here() -> bool {
    let ok = Command::new(PYTHON)
        .args(["-c", "import torch, torchvision"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok && services_must_run() {
        panic!("DDPCHECK_REQUIRE_SERVICES=1 but {PYTHON} has no torch/torchvision; .ci/install-services installs python3-torch python3-torchvision");
    }
    if !ok {
        let test = this_test();
        eprintln!("skipping {test}: {PYTHON} cannot import torch and torchvision");
    }
    ok
}

/// The test's turn at torch, one test at a time; `None` (the test is skipped) where torch is
/// missing.
fn torch_turn() -> Option<std::sync::MutexGuard<'static, ()>> {
    torch_here().then(|| ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner()))
}

/// As `torch_turn`, for a test of something this torch lacks: `None` (skipped) also where
/// `python3 -c PROBE` succeeds, which finds it there (`present` says so in the skip line).
fn torch_turn_lacking(probe: &str, present: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    if !torch_here() {
        return None;
    }
    let probe = Command::new(PYTHON).args(["-c", probe]).output();
    if probe.is_ok_and(|o| o.status.success()) {
        eprintln!("skipping {}: {present}", this_test());
        return None;
    }
    torch_turn()
}

/// The running test's name: libtest names each test's thread after it.
fn this_test() -> String {
    std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string()
}

fn fixture(name: &str) -> PathBuf {
    std::fs::canonicalize(repo_root().join("cli/tests/fixtures").join(name)).unwrap()
}

/// `ddpcheck bench ddp --device cpu --gpus 2 --json` on `model` with `extra` flags, marked with
/// a variable of its own so that its processes can be found afterwards.
fn bench(mark: &str, model: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "--json",
        "bench",
        "ddp",
        "--device",
        "cpu",
        "--gpus",
        "2",
        "--steps",
        "3",
        "--warmup-steps",
        "1",
        "--model",
        model,
    ];
    if !extra.contains(&"--variants") {
        args.extend(["--variants", "base"]);
    }
    args.extend(extra);
    let mark = format!("{mark}-{}", std::process::id());
    local_env(
        &args,
        &[
            ("DDPCHECK_PYTHON", PYTHON),
            ("DDPCHECK_TORCH_CPU_MARK", &mark),
        ],
    )
}

/// Processes whose environment carries `DDPCHECK_TORCH_CPU_MARK` of `mark`'s launch.
fn left_behind(mark: &str) -> Vec<String> {
    let needle = format!("DDPCHECK_TORCH_CPU_MARK={mark}-{}\0", std::process::id());
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read(e.path().join("environ"))
                .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle.as_bytes()))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// `bench` of the fixtures' small factory (`factories.py:small`) on two CPU ranks.
fn bench_small_factory(mark: &str, extra: &[&str]) -> Output {
    let model = format!("py:{}:small", fixture("factories.py").display());
    bench(mark, &model, extra)
}

fn report(o: &Output) -> DdpReport {
    assert_eq!(code(o), 0, "{}", stderr(o));
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

fn at(r: &DdpReport, world: u32) -> &DdpResult {
    r.results
        .iter()
        .find(|x| x.world_size == world && x.variant == "base")
        .unwrap_or_else(|| panic!("no base result on {world} ranks: {:?}", r.results))
}

/// The `ddpcheck:` line a failed launch printed: exactly one, the rest of stderr progress.
fn error_line(o: &Output) -> String {
    let err = stderr(o);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("ddpcheck: "))
        .collect();
    assert_eq!(lines.len(), 1, "one error line expected: {err}");
    lines[0].to_string()
}

#[test]
fn a_preset_runs_on_two_cpu_ranks_and_reports_its_layout() {
    let Some(_one) = torch_turn() else {
        return;
    };
    let o = bench("preset", "mlp:64,2", &["--variants", "base,fp16"]);
    let r = report(&o);
    for world in [1, 2] {
        let x = at(&r, world);
        // mlp:64,2: two square layers.
        assert_eq!(x.params, 2 * (64 * 64 + 64), "{x:?}");
        assert!(x.step_time_median_s > 0.0, "{x:?}");
        assert_eq!(x.device, ddpcheck_core::ddp::RunDevice::Cpu, "{x:?}");
        let layout = x.param_layout.as_ref().expect("a layout");
        assert_eq!(layout.tensors.len(), 4, "{layout:?}");
        assert_eq!(layout.total_params(), x.params);
        let buckets = x.torch_buckets.as_ref().expect("torch's buckets");
        assert!(
            buckets.agrees_with(
                layout,
                x.recipe
                    .as_ref()
                    .map(|r| r.bucket_order())
                    .unwrap_or_default()
            ),
            "{buckets:?}"
        );
    }
    // The fp16 hook works on gloo.
    assert!(r
        .results
        .iter()
        .any(|x| x.variant == "fp16" && x.world_size == 2 && x.step_time_median_s > 0.0));
    assert!(left_behind("preset").is_empty());
}

#[test]
fn a_factory_with_a_frozen_part_reports_which_tensors_train_and_torchs_buckets() {
    let Some(_one) = torch_turn() else {
        return;
    };
    let r = report(&bench_small_factory(
        "factory",
        &common::words("--micro-batch 8 --static-graph --no-broadcast-buffers --amp none"),
    ));
    for world in [1, 2] {
        let x = at(&r, world);
        let layout = x.param_layout.as_ref().expect("a layout");
        let names: Vec<(&str, bool)> = layout
            .tensors
            .iter()
            .map(|t| (t.name.as_str(), t.trainable))
            .collect();
        assert_eq!(
            names,
            [
                ("stem.weight", false),
                ("body.0.weight", true),
                ("body.2.weight", true),
                ("body.4.weight", true),
                ("body.6.weight", true)
            ],
            "{layout:?}"
        );
        assert_eq!(x.params, 32 * 256 + 256 * 512 + 2 * 512 * 512 + 512 * 10);
        assert_eq!(x.trainable_params(), x.params - 32 * 256);
        let buckets = x.torch_buckets.as_ref().expect("torch's buckets");
        // DDP rebuilds its buckets after its first step (torch 1.13 on one rank too); the
        // script reports the rebuilt ones wherever DDP made them.
        if world == 2 {
            assert_eq!(buckets.source, "rebuilt", "{buckets:?}");
        }
        assert!(
            buckets.agrees_with(layout, BucketOrder::Rebuilt),
            "{buckets:?} against {layout:?}"
        );
        let recipe = x.recipe.as_ref().expect("the recipe that ran");
        assert!(recipe.static_graph, "{recipe:?}");
        // Read from the DDP wrapper itself.
        assert!(!recipe.broadcast_buffers, "{recipe:?}");
        assert_eq!(recipe.amp, ddpcheck_core::ddp::Amp::None);
        assert_eq!(x.throughput_unit, "samples/s");
    }
    assert!(left_behind("factory").is_empty());
}

/// A factory with an unused layer: without --find-unused-parameters one line naming the
/// parameters and the flag; with it, the constructor's buckets as torch sized them, the unused
/// layer named in the report, and the buffers counted with their broadcast timed.
#[test]
fn unused_parameters_name_the_flag_and_keep_the_constructors_buckets() {
    let Some(_one) = torch_turn() else {
        return;
    };
    let model = format!("py:{}:unused", fixture("factories.py").display());
    let flags = ["--micro-batch", "8", "--amp", "none"];
    let o = bench("unused", &model, &flags);
    assert_eq!(code(&o), 64, "{}", stderr(&o));
    let line = error_line(&o);
    assert!(
        line.contains("(unused.weight, unused.bias)")
            && line.contains("pass --find-unused-parameters"),
        "{line}"
    );
    assert!(left_behind("unused").is_empty());

    let with: Vec<&str> = flags
        .iter()
        .copied()
        .chain(["--find-unused-parameters"])
        .collect();
    let r = report(&bench("unused", &model, &with));
    for world in [1, 2] {
        let x = at(&r, world);
        let layout = x.param_layout.as_ref().expect("a layout");
        let buckets = x.torch_buckets.as_ref().expect("torch's buckets");
        assert_eq!(buckets.source, "constructor", "{buckets:?}");
        assert_eq!(buckets.sizes_agree(layout), Some(true), "{buckets:?}");
        assert!(
            buckets.agrees_with(layout, BucketOrder::Constructor),
            "{buckets:?}"
        );
        assert!(
            buckets.moved(layout, BucketOrder::Rebuilt) > 0,
            "the orders differ on this model: {buckets:?}"
        );
        let host = x.host.as_ref().expect("host facts");
        let no_grad = host.no_grad.as_ref().expect("the gradient check");
        assert_eq!(no_grad.names, ["unused.weight", "unused.bias"]);
        assert!(no_grad.same_each_micro_batch);
        let buffers = host.buffers.as_ref().expect("buffers");
        // BatchNorm1d(1024): running mean and var, and its int64 step count.
        assert_eq!((buffers.count, buffers.bytes), (3, 2 * 1024 * 4 + 8));
        assert!(buffers.broadcast_s.is_some_and(|t| t > 0.0), "{buffers:?}");
    }
    assert!(left_behind("unused").is_empty());
}

#[test]
fn torchvision_resnet18_has_torchs_own_count_and_the_tuple_form_runs() {
    let Some(_one) = torch_turn() else {
        return;
    };
    let o = bench("resnet18", "torchvision:resnet18", &["--micro-batch", "2"]);
    let r = report(&o);
    let x = at(&r, 2);
    assert_eq!(x.params, 11_689_512, "{x:?}");
    let layout = x.param_layout.as_ref().expect("a layout");
    assert_eq!(layout.tensors.len(), 62);
    assert_eq!(layout.tensors[0].name, "conv1.weight");
    let buckets = x.torch_buckets.as_ref().expect("torch's buckets");
    let mut all: Vec<usize> = buckets.buckets.iter().flatten().copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..62).collect::<Vec<_>>(), "{buckets:?}");

    let pair = format!("py:{}:pair", fixture("factories.py").display());
    let r = report(&bench("pair", &pair, &["--micro-batch", "4"]));
    assert!(at(&r, 2).step_time_median_s > 0.0);
    assert!(left_behind("resnet18").is_empty() && left_behind("pair").is_empty());
}

/// The 1-rank launch times the model without DDP in rounds beside its DDP steps, by default, and
/// every speedup rests on that step: the 1-rank DDP row's own ratio is 1 / ddp_over_plain.
#[test]
fn the_one_rank_launch_carries_the_plain_step_and_the_speedups_rest_on_it() {
    let Some(_one) = torch_turn() else {
        return;
    };
    let r = report(&bench_small_factory(
        "plain",
        &common::words("--micro-batch 8 --variants base,nocomm --find-unused-parameters"),
    ));
    assert_eq!(r.reference, Reference::Plain);
    let one = at(&r, 1);
    // The DDP side keeps exactly the 3 steps asked; the plain side as many, a round each.
    assert_eq!(one.timed_steps, Some(3), "{one:?}");
    let plain = one.plain_reference.as_ref().expect("a plain reference");
    assert_eq!(plain.rounds.len(), 3, "{plain:?}");
    assert!(plain.step_time_median_s > 0.0, "{plain:?}");
    let ratio = plain.ddp_over_plain().expect("a ratio");
    assert!(ratio.is_finite() && ratio > 0.0, "{plain:?}");
    assert_eq!(one.ddp_over_plain, Some(ratio));
    assert_eq!(one.reference, Reference::Plain);
    let own = one.speedup.expect("the 1-rank row's own ratio");
    assert!((own * ratio - 1.0).abs() < 1e-9, "{one:?}");
    // The 2-rank launch times no plain blocks; its speedup rests on the 1-rank plain step.
    let two = at(&r, 2);
    assert!(two.plain_reference.is_none(), "{two:?}");
    assert_eq!(two.reference, Reference::Plain);
    let against_plain = two.throughput / (one.throughput * ratio);
    assert!(
        (two.speedup.unwrap() / against_plain - 1.0).abs() < 1e-9,
        "{two:?}"
    );
    // nocomm sends nothing already: no reference to take.
    let nocomm = r
        .results
        .iter()
        .find(|x| x.variant == "nocomm" && x.world_size == 2)
        .expect("the nocomm run");
    assert!(nocomm.plain_reference.is_none(), "{nocomm:?}");
    assert!(left_behind("plain").is_empty());
}

/// A bad input: its one line holds each of `words`, its exit code is `exit`, nothing is left.
fn refused(mark: &str, model: &str, extra: &[&str], exit: i32, words: &[&str]) -> String {
    let o = bench(mark, model, extra);
    let line = error_line(&o);
    assert_eq!(code(&o), exit, "{line}");
    for w in words {
        assert!(line.contains(w), "{w:?} not in {line}");
    }
    assert!(!line.contains("Traceback"), "{line}");
    let left = left_behind(mark);
    assert!(left.is_empty(), "processes left behind by {mark}: {left:?}");
    line
}

#[test]
fn each_bad_factory_is_one_line_with_its_exit_code_and_leaves_no_process() {
    let Some(_one) = torch_turn() else {
        return;
    };
    let f = fixture("factories.py");
    let file = f.display().to_string();
    let py = |function: &str| format!("py:{file}:{function}");
    let usage = 64;
    let lines = [
        refused(
            "nofile",
            "py:/nonexistent/f.py:make",
            &[],
            usage,
            &["/nonexistent/f.py"],
        ),
        refused(
            "nomodule",
            "py:no_such_module_xyz:make",
            &[],
            usage,
            &["no module named no_such_module_xyz", PYTHON],
        ),
        refused(
            "nofunction",
            &py("nope"),
            &[],
            usage,
            &[&file, "has no function nope"],
        ),
        refused(
            "raises",
            &py("boom"),
            &[],
            usage,
            &[
                "factory boom raised ValueError: boom",
                &format!("(at {file}:"),
            ],
        ),
        refused(
            "wrong",
            &py("wrong"),
            &[],
            usage,
            &["wrong returned int; expected", "(model, batch)"],
        ),
        refused(
            "rejects",
            &py("rejects"),
            &["--micro-batch", "8"],
            usage,
            &[
                "the model rejected a micro-batch of 8",
                "RuntimeError",
                "(at ",
            ],
        ),
        refused(
            "frozen",
            &py("frozen"),
            &[],
            usage,
            &["no trainable parameters: all 72 are frozen"],
        ),
        refused(
            "sleeps",
            &py("sleeps"),
            &["--deadline", "24"],
            usage,
            &["factory sleeps did not return within 6 s"],
        ),
        refused(
            "hangs",
            &format!("py:{}:make", fixture("hangs_on_import.py").display()),
            &["--deadline", "24"],
            usage,
            &[
                "importing py:",
                "hangs_on_import.py:make did not finish within 6 s",
            ],
        ),
        refused(
            "amp",
            "mlp:64,2",
            &["--amp", "fp16"],
            usage,
            &["no fp16 autocast on CPU"],
        ),
        refused(
            "bf16hook",
            "mlp:64,2",
            &["--variants", "bf16"],
            usage,
            &["bf16 compression hook needs NCCL"],
        ),
    ];
    for l in lines {
        eprintln!("{l}");
    }
}

#[test]
fn a_missing_library_is_one_line_naming_it_and_the_interpreter() {
    let Some(_one) = torch_turn_lacking("import timm", "timm is installed") else {
        return;
    };
    // Unavailable: the UNKNOWN verdict's code.
    refused(
        "timm",
        "timm:resnet18",
        &[],
        3,
        &["timm is not installed for /usr/bin/python3 (needed by timm:resnet18)"],
    );
}

/// A launch of two runs that its deadline stops after the first finished: TIMEOUT (exit 5)
/// with one line that names the run it stopped, the finished run in the report, and nothing of
/// the launch left running. Before, the finished run was dropped and the exit was 3.
#[test]
fn a_deadline_after_the_first_run_keeps_it_and_exits_5() {
    let Some(_one) = torch_turn() else {
        return;
    };
    let model = format!("py:{}:second_stalls", fixture("stalls.py").display());
    let mark = format!("stalls-{}", std::process::id());
    let o = local_env(
        &[
            "--json",
            "bench",
            "ddp",
            "--device",
            "cpu",
            "--gpus",
            "1",
            "--steps",
            "3",
            "--warmup-steps",
            "1",
            "--model",
            &model,
            "--variants",
            "base,fp16",
            "--deadline",
            "30",
        ],
        &[
            ("DDPCHECK_PYTHON", PYTHON),
            ("DDPCHECK_TORCH_CPU_MARK", &mark),
        ],
    );
    assert_eq!(code(&o), 5, "{}\n{}", stdout(&o), stderr(&o));
    let line = error_line(&o);
    assert!(
        line.contains("fp16 on 1 CPU rank did not finish within 30.0 s"),
        "{line}"
    );
    let r: DdpReport = serde_json::from_str(&stdout(&o)).unwrap();
    let ran: Vec<(&str, u32)> = r
        .results
        .iter()
        .map(|x| (x.variant.as_str(), x.world_size))
        .collect();
    assert_eq!(ran, [("base", 1)]);
    assert!(r.results[0].step_time_median_s > 0.0);
    let stopped = r.stopped.expect("the deadline in the report");
    assert!(stopped.stage.ends_with("fp16 on 1 CPU rank"), "{stopped:?}");
    assert!(left_behind("stalls").is_empty());
}

/// `--compile` on a torch without torch.compile (Debian's 1.13): one line saying so, the
/// UNKNOWN verdict's exit code, nothing left behind. The compile path itself is tested with a
/// stand-in for torch.compile (gpu/tests/python/test_compile.py) and runs for real on the GPU
/// (bench/experiments/eager-vs-compiled-one-gpu.sh).
#[test]
fn compile_on_a_torch_without_torch_compile_is_one_line() {
    let probe = "import torch, sys; sys.exit(0 if hasattr(torch, 'compile') else 1)";
    let Some(_one) = torch_turn_lacking(probe, "this torch has torch.compile") else {
        return;
    };
    refused(
        "nocompile",
        "mlp:64x2",
        &["--compile-mode", "max-autotune"],
        3,
        &["has no torch.compile (torch >= 2.0): run without --compile"],
    );
}

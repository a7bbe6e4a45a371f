//! Tests of the DDP runner without torch: fake interpreters (sh scripts) stand in for python3 and
//! torchrun; the embedded benchmark package itself is compiled and its torch-free parts run with
//! python3 (its own unit tests are pytest's, in gpu/tests/python).

mod config;
mod launch;
mod real_gpu;
mod script;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ddpcheck_core::backend::Progress;
use ddpcheck_core::ddp::{DdpRequest, DdpVariant, ModelSpec, RunDevice};
use ddpcheck_core::ProbeError;

use super::outcome::{key_line, unused_parameters_hint};
use super::probe::torch_version;
use super::*;
use crate::supervise::{Line, Next};
use crate::RealConfig;

/// Answers the `python -c` torch probe like a healthy torch 2.11 with 8 GPUs.
pub(super) const PROBE_OK: &str = r#"if [ "$1" = "-c" ]; then
  echo '{"python":"/fake/python3","torch":"2.11.0+cu130","cuda":"13.0","cuda_available":true,"device_count":8,"nccl":true}'
  exit 0
fi
n=0; prev=; script=
for a in "$@"; do
  if [ "$prev" = "--nproc_per_node" ]; then n=$a; fi
  case "$a" in *.py) script=$a ;; esac
  prev=$a
done
"#;

pub(super) fn fake(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, format!("#!/bin/sh\n{PROBE_OK}{body}")).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    p
}

pub(super) fn cfg(python: &Path) -> RealConfig {
    RealConfig {
        python: python.display().to_string(),
        ..RealConfig::default()
    }
}

pub(super) fn request(variant: DdpVariant, worlds: Vec<u32>, deadline_s: f64) -> DdpRequest {
    DdpRequest {
        variants: vec![variant],
        world_sizes: worlds,
        steps: 3,
        price_per_gpu_hour: Some(2.0),
        deadline_s,
        ..ddpcheck_testkit::ddp_request(&["gpt2-124m"], &[], &[])
    }
}

pub(super) fn bf16_p2p_off() -> DdpVariant {
    let mut v: DdpVariant = "bf16".parse().unwrap();
    v.env = vec![("NCCL_P2P_DISABLE".into(), "1".into())];
    v
}

/// A well-behaved benchmark: env, progress and a result whose numbers depend on N
/// (8 × 1024 tokens per GPU per step; 0.100 s on 1 GPU, 0.125 s on 2).
pub(super) fn good_body(dir: &Path) -> String {
    let params = ModelSpec::gpt2_124m().params();
    let d = dir.display();
    format!(
        r#"printf '%s\n' "$@" > "{d}/args_$n"
env > "{d}/env_$n"
pwd > "{d}/pwd_$n"
stat -c %a . > "{d}/mode_$n"
cp -r "$(dirname "$script")" "{d}/script_copy"
case "$n" in
  1) step=0.100; tput=81920; nocomm=null; solo=null; probe=null ;;
  2) step=0.125; tput=131072; nocomm=0.105; solo=0.102; probe='[[4096,0.00002],[67108864,0.0002],[1048576,-1]]' ;;
  *) echo "unexpected N $n" >&2; exit 3 ;;
esac
echo "torchrun chatter on stderr" >&2
echo '{{"event":"env","torch":"2.11.0+cu130","cuda":"13.0","nccl":"2.28.9","gpus":["NVIDIA H200","NVIDIA H200"],"gpu_uuids":["GPU-a","GPU-b"],"gpu_pci_bus_ids":[null,null]}}'
echo '{{"event":"progress","phase":"ready","step":0,"total":4}}'
echo '{{"event":"progress","phase":"timed","step":4,"total":4}}'
echo '{{"event":"some_future_event","x":1}}'
echo "{{\"event\":\"result\",\"model\":\"gpt2-124m\",\"params\":{params},\"variant\":\"bf16\",\"world_size\":$n,\"micro_batch\":8,\"accum\":1,\"step_time_median_s\":$step,\"step_time_p90_s\":$step,\"steps\":3,\"throughput\":$tput,\"throughput_unit\":\"tokens/s\",\"nocomm_step_time_median_s\":$nocomm,\"solo_step_time_median_s\":$solo,\"all_reduce_probe\":$probe,\"step_times_s\":[$step,$step,$step]}}"
exit 0
"#
    )
}

pub(super) fn read(p: PathBuf) -> String {
    fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

pub(super) fn is_gone(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie waiting for a reaper that is not ours is dead too.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

pub(super) fn python3() -> Option<&'static str> {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("python3 not found: skipping");
    }
    ok.then_some("python3")
}

/// python3 (None: the test has nothing to run on) and the embedded package written to a fresh
/// directory, which lives as long as the returned handle, with the path of its main file.
pub(super) fn embedded_script() -> Option<(&'static str, tempfile::TempDir, PathBuf)> {
    let py = python3()?;
    let dir = tempfile::tempdir().unwrap();
    let script = write_script(dir.path()).unwrap();
    Some((py, dir, script))
}

pub(super) fn torch_importable(py: &str) -> bool {
    Command::new(py)
        .args(["-c", "import torch"])
        .output()
        .is_ok_and(|o| o.status.success())
}

pub(super) fn run_script(
    py: &str,
    script: &Path,
    config: &str,
) -> (i32, Vec<serde_json::Value>, String) {
    let out = Command::new(py)
        .arg(script)
        .arg("--config")
        .arg(config)
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .output()
        .unwrap();
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    (
        out.status.code().unwrap_or(-1),
        lines,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `body` under python3 with the embedded package's modules imported by their names
/// (`config`, `errors`, `presets`, `ranks`, `timing`, `torchenv`; and json, os, sys), the path of
/// its main file as argv[1] and `args` after it; returns what it printed as JSON.
pub(super) fn with_script_module(
    py: &str,
    script: &Path,
    body: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> serde_json::Value {
    let code = format!(
        "import importlib, json, os, sys\n\
         folder = os.path.dirname(os.path.abspath(sys.argv[1]))\n\
         sys.path.insert(0, os.path.dirname(folder))\n\
         config, errors, presets, ranks, timing, torchenv = (importlib.import_module(\n\
         \x20   os.path.basename(folder) + '.' + n) for n in\n\
         \x20   ('config', 'errors', 'presets', 'ranks', 'timing', 'torchenv'))\n{body}"
    );
    let out = succeeds(
        Command::new(py)
            .args(["-c", &code])
            .arg(script)
            .args(args)
            .envs(env.iter().copied()),
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs `cmd` to its end and asserts that it succeeded (its stderr in the message).
pub(super) fn succeeds(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn fake_benchmark_gives_results_with_speedups() {
    let dir = tempfile::tempdir().unwrap();
    let py = fake(dir.path(), "python3", &good_body(dir.path()));
    let req = request(bf16_p2p_off(), vec![2, 1, 2], 20.0);
    let mut notes: Vec<Progress> = Vec::new();
    let run = run_ddp_report(
        &cfg(&py),
        &req,
        &DdpOptions {
            measure_nocomm: true,
            keep_going: false,
        },
        &mut |p| notes.push(p),
    )
    .unwrap();

    // 1 GPU first, duplicates dropped.
    let rows = &run.results;
    assert_eq!(
        rows.iter().map(|r| r.world_size).collect::<Vec<_>>(),
        [1, 2]
    );
    let (one, two) = (&rows[0], &rows[1]);
    assert_eq!(
        (one.model.as_str(), one.variant.as_str()),
        ("gpt2-124m", "bf16")
    );
    assert_eq!((two.micro_batch, two.accum), (8, 1));
    assert_eq!(two.throughput_unit, "tokens/s");
    // The steps the script says it timed are kept.
    assert_eq!((one.timed_steps, two.timed_steps), (Some(3), Some(3)));
    assert!((one.speedup.unwrap() - 1.0).abs() < 1e-12);
    assert!((two.speedup.unwrap() - 131072.0 / 81920.0).abs() < 1e-9);
    assert!((two.efficiency.unwrap() - 0.8).abs() < 1e-9);
    assert!((two.exposed_comm_fraction.unwrap() - (0.125 - 0.100) / 0.125).abs() < 1e-9);
    // 2 GPUs at $2 each, 131072 tokens/s.
    let cost = 4.0 * 1e6 / (131072.0 * 3600.0);
    assert!((two.cost_per_million.unwrap() - cost).abs() < 1e-12);

    // The all-reduce probe becomes a 2-rank sweep; a point without a positive time is left out.
    assert_eq!(one.all_reduce_probe, None);
    let probe = two.all_reduce_probe.as_ref().unwrap();
    assert_eq!(probe.ranks, 2);
    assert_eq!(
        probe.samples.iter().map(|s| s.bytes).collect::<Vec<_>>(),
        [4096, 67108864]
    );
    // 64 MiB in 200 µs: 335.5 GB/s algbw, the same busbw on 2 ranks.
    assert!((probe.samples[1].out_of_place.time_us - 200.0).abs() < 1e-9);
    assert!((probe.samples[1].out_of_place.busbw_gbps - 67108864.0 / 200e-6 / 1e9).abs() < 1e-6);

    // Extras: provenance from the env line, the no-communication reference only on N > 1.
    let l2 = &run.launches[1];
    let env = l2.torch_env.as_ref().unwrap();
    assert_eq!(env.nccl.as_deref(), Some("2.28.9"));
    assert_eq!(env.gpu_uuids[1].as_deref(), Some("GPU-b"));
    assert_eq!(l2.nocomm_step_median_s, Some(0.105));
    assert_eq!(run.launches[0].nocomm_step_median_s, None);
    // One GPU alone inside the N-GPU launch, as the script timed it.
    assert_eq!(two.solo_step_time_median_s, Some(0.102));
    assert_eq!(one.solo_step_time_median_s, None);
    assert_eq!(l2.step_times_s, vec![0.125; 3]);
    assert_eq!(
        l2.nccl_env.get("NCCL_P2P_DISABLE").map(String::as_str),
        Some("1")
    );
    assert_eq!(
        l2.nccl_env.get("NCCL_NVLS_ENABLE").map(String::as_str),
        Some("0")
    );
    assert!(l2.warnings.is_empty(), "{:?}", l2.warnings);
    assert_eq!(
        run.probe.as_ref().unwrap().torch.as_deref(),
        Some("2.11.0+cu130")
    );

    // The launch: torch.distributed.run, standalone rendezvous, N processes, the script, config.
    let args: Vec<String> = read(dir.path().join("args_2"))
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(
        &args[..5],
        [
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2"
        ]
    );
    let main = Path::new(SCRIPT_DIR_NAME).join(SCRIPT_MAIN);
    assert!(Path::new(&args[5]).ends_with(&main), "{args:?}");
    assert_eq!(args[6], "--config");
    let config: serde_json::Value = serde_json::from_str(&args[7]).unwrap();
    assert_eq!(config["model"]["kind"], "decoder");
    assert_eq!(config["model"]["layers"], 12);
    assert_eq!(config["variant"]["hook"], "bf16");
    assert_eq!(config["micro_batch"], 8);
    assert_eq!(config["steps"], 3);
    assert_eq!(config["measure_nocomm"], true);
    let config1: serde_json::Value =
        serde_json::from_str(read(dir.path().join("args_1")).lines().nth(7).unwrap()).unwrap();
    assert_eq!(config1["measure_nocomm"], false);
    // Off, the key is left out: a config an older script reads the same.
    assert!(config.get("plain_reference").is_none(), "{config}");
    // The launch ran the package's main file, with the whole package beside it.
    for (name, text) in package_files() {
        assert_eq!(
            read(dir.path().join("script_copy").join(name)),
            *text,
            "{name}"
        );
    }

    // The environment every child gets.
    let env = read(dir.path().join("env_2"));
    for line in [
        "NCCL_NVLS_ENABLE=0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST=1",
        "NVSHMEM_DISABLE_NVLS=1",
        "NCCL_P2P_DISABLE=1",
    ] {
        assert!(env.lines().any(|l| l == line), "{line} missing");
    }
    assert!(env.lines().any(|l| l.starts_with("OMP_NUM_THREADS=")));

    // A private folder for the script, gone afterwards.
    assert_eq!(read(dir.path().join("mode_2")).trim(), "700");
    let workdir = PathBuf::from(read(dir.path().join("pwd_2")).trim());
    assert!(!workdir.exists(), "{} left behind", workdir.display());

    // Progress per launch and per step.
    let msgs: Vec<&str> = notes.iter().map(|p| p.message.as_str()).collect();
    assert!(msgs.contains(&"gpt2-124m bf16 1 GPU: starting"), "{msgs:?}");
    assert!(
        msgs.contains(&"gpt2-124m bf16 2 GPUs: step 4/4"),
        "{msgs:?}"
    );
    assert!(notes.iter().all(|p| p.total == 2 && p.stage == "ddp"));
    assert_eq!(notes.last().unwrap().done, 2);

    // run_ddp is the same without the extras.
    let plain = run_ddp(&cfg(&py), &req, &mut |_| {}).unwrap();
    assert_eq!(plain.len(), 2);
    assert!((plain[1].speedup.unwrap() - 1.6).abs() < 1e-9);
}

#[test]
fn result_then_hang_keeps_the_result_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let body = format!("{}\n", good_body(dir.path()).replace("exit 0", "sleep 300"));
    let py = fake(dir.path(), "python3", &body);
    let req = request(bf16_p2p_off(), vec![1], 1.5);
    let run = run_ddp_report(&cfg(&py), &req, &DdpOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(run.results.len(), 1);
    assert!(
        run.launches[0].warnings[0].contains("did not exit"),
        "{:?}",
        run.launches[0].warnings
    );
}

#[test]
fn crash_is_a_worker_error_with_the_last_stderr_line() {
    let dir = tempfile::tempdir().unwrap();
    let body = r#"echo "Traceback (most recent call last):" >&2
echo '  File "bench.py", line 3, in <module>' >&2
echo "RuntimeError: CUDA error: an illegal memory access was encountered" >&2
exit 1
"#;
    let py = fake(dir.path(), "python3", body);
    let err = run_ddp(
        &cfg(&py),
        &request(DdpVariant::default(), vec![1], 10.0),
        &mut |_| {},
    )
    .unwrap_err();
    let ProbeError::Worker(msg) = &err else {
        panic!("expected a worker error, got {err:?}")
    };
    assert!(msg.starts_with("gpt2-124m base 1 GPU: exit code 1: RuntimeError: CUDA error: an illegal memory access was encountered"), "{msg}");
    assert!(msg.contains("stderr tail: "), "{msg}");
    assert!(!msg.contains('\n'), "{msg}");
}

#[test]
fn torchrun_failure_points_at_the_worker_not_the_wrapper() {
    let tail: Vec<String> = [
        "[rank1]: Traceback (most recent call last):",
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "E1130 12:00:00.000 1234 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: 1) local_rank: 1",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "------------------------------------------------------------",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(
        key_line(&tail),
        Some("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    );
    let ours = [
        tail.clone(),
        vec!["ddpcheck: rank 1, NCCL init: boom".into()],
    ]
    .concat();
    assert_eq!(key_line(&ours), Some("ddpcheck: rank 1, NCCL init: boom"));
    assert_eq!(key_line(&["=====".into(), "   ".into()]), None);
}

#[test]
fn error_lines_from_any_rank_map_to_their_kind() {
    let dir = tempfile::tempdir().unwrap();
    let body = r#"echo '{"event":"error","kind":"error","rank":1,"stage":"building the model","message":"rank 1, building the model: OutOfMemoryError: CUDA out of memory"}'
echo '{"event":"error","kind":"error","rank":0,"stage":"timed step 1/4","message":"rank 0, timed step 1/4: DistBackendError: NCCL communicator was aborted"}'
exit 1
"#;
    let py = fake(dir.path(), "python3", body);
    let req = request(DdpVariant::default(), vec![1], 10.0);
    match run_ddp(&cfg(&py), &req, &mut |_| {}).unwrap_err() {
        ProbeError::Worker(m) => {
            assert!(
                m.contains("rank 1, building the model: OutOfMemoryError"),
                "{m}"
            );
            assert!(m.contains("1 more rank error"), "{m}");
        }
        other => panic!("{other:?}"),
    }

    let body = r#"echo '{"event":"error","kind":"unavailable","rank":0,"stage":"checking torch","message":"rank 0, checking torch: torch 2.11.0 has no usable CUDA"}'
exit 1
"#;
    let py = fake(dir.path(), "python3b", body);
    match run_ddp(&cfg(&py), &req, &mut |_| {}).unwrap_err() {
        ProbeError::Unavailable(m) => assert!(m.contains("no usable CUDA"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn garbage_on_stdout_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let body = "echo 'hello from a print()'\necho '<html>'\necho '[1,2,3]'\nexit 0\n";
    let py = fake(dir.path(), "python3", body);
    let req = request(DdpVariant::default(), vec![1], 10.0);
    let err = run_ddp(&cfg(&py), &req, &mut |_| {}).unwrap_err();
    let ProbeError::Worker(msg) = &err else {
        panic!("{err:?}")
    };
    assert!(msg.contains("without a result line"), "{msg}");
    assert!(msg.contains("not JSON lines (3 line(s)"), "{msg}");
    assert!(msg.contains("hello from a print()"), "{msg}");

    // A malformed result line says what is wrong with it.
    let body = "echo '{\"event\":\"result\",\"world_size\":\"two\"}'\nexit 0\n";
    let py = fake(dir.path(), "python3b", body);
    let err = run_ddp(&cfg(&py), &req, &mut |_| {}).unwrap_err();
    let ProbeError::Worker(msg) = &err else {
        panic!("{err:?}")
    };
    assert!(msg.contains("malformed result line"), "{msg}");
}

#[test]
fn wrong_world_size_in_the_result_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let body = good_body(dir.path()).replace("\\\"world_size\\\":$n", "\\\"world_size\\\":4");
    let py = fake(dir.path(), "python3", &body);
    let err = run_ddp(
        &cfg(&py),
        &request(bf16_p2p_off(), vec![1], 10.0),
        &mut |_| {},
    )
    .unwrap_err();
    assert!(
        matches!(&err, ProbeError::Worker(m) if m.contains("world size 4 for a launch on 1 GPU")),
        "{err:?}"
    );
}

#[test]
fn missing_interpreter_is_unavailable_at_once() {
    let start = Instant::now();
    let cfg = RealConfig {
        python: "/nonexistent/ddpcheck-test/python3".into(),
        ..RealConfig::default()
    };
    let err = run_ddp(
        &cfg,
        &request(DdpVariant::default(), vec![1], 60.0),
        &mut |_| {},
    )
    .unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5));
    match err {
        ProbeError::Unavailable(m) => {
            assert!(
                m.contains("not found") && m.contains("DDPCHECK_PYTHON"),
                "{m}"
            );
            assert!(!m.contains('\n'));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn probe_verdicts() {
    let ok = TorchProbe {
        python: Some("/opt/torch/.venv/bin/python3".into()),
        torch: Some("2.11.0+cu130".into()),
        cuda: Some("13.0".into()),
        cuda_available: Some(true),
        device_count: Some(2),
        nccl: Some(true),
        ..TorchProbe::default()
    };
    assert_eq!(check_probe(&ok, "python3", 2, RunDevice::Cuda), Ok(()));
    let old = TorchProbe {
        torch: Some("2.3.1+cu121".into()),
        ..ok.clone()
    };
    assert!(
        matches!(check_probe(&old, "python3", 1, RunDevice::Cuda), Err(ProbeError::Unavailable(m)) if m.contains("too old"))
    );
    let cpu = TorchProbe {
        cuda_available: Some(false),
        cuda: None,
        ..ok.clone()
    };
    assert!(
        matches!(check_probe(&cpu, "python3", 1, RunDevice::Cuda), Err(ProbeError::Unavailable(m)) if m.contains("no usable CUDA"))
    );
    assert!(
        matches!(check_probe(&ok, "python3", 4, RunDevice::Cuda), Err(ProbeError::Invalid(m)) if m.contains("torch sees 2"))
    );
    assert_eq!(torch_version("2.4.0a0+git1234"), Some((2, 4)));
    assert_eq!(torch_version("2.11.0+cu130"), Some((2, 11)));
    assert_eq!(torch_version("banana"), None);
}

#[test]
fn the_last_expected_result_says_done() {
    let mut got = Collected::expecting(2);
    let result = |variant: &str| {
        format!(
            r#"{{"event":"result","model":"m","variant":"{variant}","params":1,"world_size":1,"step_time_median_s":0.1,"step_time_p90_s":0.1,"throughput":1.0,"throughput_unit":"samples/s"}}"#
        )
    };
    let mut feed = |text: &str| {
        let json = serde_json::from_str(text).ok();
        on_line(Line { text, json }, &mut got, "label", &mut |_| {})
    };
    assert_eq!(feed("not json"), Next::More);
    assert_eq!(feed(&result("a")), Next::More);
    assert_eq!(feed(&result("b")), Next::Done);
    assert_eq!(feed(&result("c")), Next::More);
    assert_eq!(got.results.len(), 2);
    assert_eq!(got.garbage_count, 1);
    assert_eq!(got.warnings.len(), 1, "{:?}", got.warnings);
}

#[test]
fn every_rank_failing_alike_is_one_failure() {
    let dir = tempfile::tempdir().unwrap();
    let body = r#"echo '{"event":"error","kind":"invalid","rank":0,"stage":"building the model","message":"rank 0, building the model: factory make raised ValueError: boom (at /f.py:3)"}'
echo '{"event":"error","kind":"invalid","rank":1,"stage":"building the model","message":"rank 1, building the model: factory make raised ValueError: boom (at /f.py:3)"}'
exit 1
"#;
    let py = fake(dir.path(), "python3", body);
    let req = request(DdpVariant::default(), vec![1], 10.0);
    match run_ddp(&cfg(&py), &req, &mut |_| {}).unwrap_err() {
        ProbeError::Invalid(m) => {
            assert!(
                m.ends_with(
                    "rank 0, building the model: factory make raised ValueError: boom (at /f.py:3)"
                ),
                "{m}"
            );
            assert!(!m.contains("more rank error"), "{m}");
        }
        other => panic!("{other:?}"),
    }
}

/// DDP's own stop over unused parameters names torch's keyword only: the line adds the flag;
/// a line that names the flag already, and other errors, get nothing.
#[test]
fn ddps_unused_parameter_stop_gets_the_flag_to_pass() {
    let ddp = "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. This error indicates that your module has parameters that were not used in producing loss. You can enable unused parameter detection by passing the keyword argument `find_unused_parameters=True` to";
    let hint = unused_parameters_hint(ddp).expect("a hint");
    assert!(hint.contains("pass --find-unused-parameters"), "{hint}");
    assert_eq!(
        unused_parameters_hint("2 tensors got no gradient: pass --find-unused-parameters, or remove them (find_unused_parameters=True)"),
        None
    );
    assert_eq!(
        unused_parameters_hint("RuntimeError: mat1 and mat2 shapes"),
        None
    );
}

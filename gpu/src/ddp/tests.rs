//! Tests of the DDP runner without torch: fake interpreters (sh scripts) stand in for python3 and
//! torchrun; the embedded benchmark package itself is compiled and its torch-free parts run with
//! python3 (its own unit tests are pytest's, in gpu/tests/python).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ddpcheck_core::backend::Progress;
use ddpcheck_core::ddp::{
    CommHook, DdpRequest, DdpVariant, ModelSpec, RunDevice, ALL_REDUCE_PROBE_BYTES,
    POWERSGD_DEFAULT_RANK, POWERSGD_MAX_RANK,
};
use ddpcheck_core::ProbeError;

use super::launch::{sh_quote, shebang_python};
use super::outcome::{key_line, unused_parameters_hint};
use super::probe::torch_version;
use super::*;
use crate::supervise::{Line, Next};
use crate::RealConfig;

/// Answers the `python -c` torch probe like a healthy torch 2.11 with 8 GPUs.
const PROBE_OK: &str = r#"if [ "$1" = "-c" ]; then
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

fn fake(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, format!("#!/bin/sh\n{PROBE_OK}{body}")).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn cfg(python: &Path) -> RealConfig {
    RealConfig {
        python: python.display().to_string(),
        ..RealConfig::default()
    }
}

pub(super) fn request(variant: DdpVariant, worlds: Vec<u32>, deadline_s: f64) -> DdpRequest {
    DdpRequest {
        models: vec![ModelSpec::gpt2_124m()],
        variants: vec![variant],
        world_sizes: worlds,
        micro_batch: 8,
        warmup_steps: 1,
        steps: 3,
        min_timed_s: 0.0,
        price_per_gpu_hour: Some(2.0),
        env: vec![],
        deadline_s,
        repeats: 1,
        recipe: Default::default(),
        device: Default::default(),
        reference: ddpcheck_core::ddp::Reference::Ddp,
    }
}

fn bf16_p2p_off() -> DdpVariant {
    let mut v: DdpVariant = "bf16".parse().unwrap();
    v.env = vec![("NCCL_P2P_DISABLE".into(), "1".into())];
    v
}

/// A well-behaved benchmark: env, progress and a result whose numbers depend on N
/// (8 × 1024 tokens per GPU per step; 0.100 s on 1 GPU, 0.125 s on 2).
fn good_body(dir: &Path) -> String {
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

fn read(p: PathBuf) -> String {
    fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
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

fn is_gone(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie waiting for a reaper that is not ours is dead too.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn hanging_benchmark_times_out_and_leaves_no_process() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    // Ignores SIGTERM (as a wedged NCCL rank may), and leaves a grandchild in its group.
    let body = format!(
        "trap '' TERM\nsleep 300 &\necho $! > \"{d}/pid\"\necho '{{\"event\":\"progress\",\"phase\":\"timed\",\"step\":1,\"total\":50}}'\nwait\n"
    );
    let py = fake(dir.path(), "python3", &body);
    let req = request(DdpVariant::default(), vec![1], 1.0);
    let start = Instant::now();
    let err = run_ddp(&cfg(&py), &req, &mut |_| {}).unwrap_err();
    let took = start.elapsed();
    match &err {
        ProbeError::Timeout { stage, seconds } => {
            assert!(stage.contains("gpt2-124m base 1 GPU"), "{stage}");
            assert_eq!(*seconds, 1.0);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(took >= Duration::from_secs(1), "{took:?}");
    assert!(
        took < Duration::from_secs(1) + TERM_GRACE + Duration::from_secs(3),
        "{took:?}"
    );
    let pid: u32 = read(dir.path().join("pid")).trim().parse().unwrap();
    let until = Instant::now() + Duration::from_secs(2);
    while !is_gone(pid) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(is_gone(pid), "grandchild {pid} survived the deadline");
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

fn python3() -> Option<&'static str> {
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

fn torch_importable(py: &str) -> bool {
    Command::new(py)
        .args(["-c", "import torch"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn real_python_without_torch_is_unavailable() {
    let Some(py) = python3() else { return };
    let cfg = RealConfig {
        python: py.into(),
        ..RealConfig::default()
    };
    let start = Instant::now();
    let err = run_ddp(
        &cfg,
        &request(DdpVariant::default(), vec![1], 60.0),
        &mut |_| {},
    )
    .unwrap_err();
    // Without torch: "not installed"; with a CPU-only torch (no GPU here): "no usable CUDA".
    match err {
        ProbeError::Unavailable(m) => {
            assert!(m.contains("torch"), "{m}");
            assert!(!m.contains('\n'), "{m}");
        }
        other => panic!("{other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(20));
}

#[test]
fn embedded_script_compiles() {
    let Some((py, dir, script)) = embedded_script() else {
        return;
    };
    let probe = dir.path().join("probe.py");
    fs::write(&probe, PROBE).unwrap();
    let folder = script.parent().unwrap();
    let out = Command::new(py)
        .arg("-m")
        .arg("py_compile")
        .args(package_files().iter().map(|(name, _)| folder.join(name)))
        .arg(&probe)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn run_script(py: &str, script: &Path, config: &str) -> (i32, Vec<serde_json::Value>, String) {
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

#[test]
fn script_reports_missing_torch_and_bad_config_as_json() {
    let Some((py, _dir, script)) = embedded_script() else {
        return;
    };

    // A bad config is refused before torch is touched.
    let (code, lines, _) = run_script(py, &script, r#"{"model":{"kind":"cnn"}}"#);
    assert_eq!(code, 1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["event"], "error");
    assert_eq!(lines[0]["kind"], "invalid");
    assert!(lines[0]["message"]
        .as_str()
        .unwrap()
        .contains("kind must be decoder, mlp or external"));

    if torch_importable(py) {
        eprintln!("torch is importable here: skipping the missing-torch half");
        return;
    }
    let (code, lines, stderr) = run_script(py, &script, r#"{"model":{"kind":"mlp","width":64}}"#);
    assert_eq!(code, 1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["event"], "error");
    assert_eq!(lines[0]["kind"], "unavailable");
    let msg = lines[0]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("rank 0, checking torch: torch is not installed"),
        "{msg}"
    );
    assert!(
        stderr.contains("ddpcheck: rank 0, checking torch"),
        "{stderr}"
    );
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
    let out = Command::new(py)
        .args(["-c", &code])
        .arg(script)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn script_helpers_compute_what_they_claim() {
    let Some((py, _dir, script)) = embedded_script() else {
        return;
    };
    let code = r#"
xs = [0.5, 0.1, 0.4, 0.2, 0.3]
cfg = config.load_config('{"model":{"kind":"decoder","layers":2,"width":64,"heads":4},"variant":{"hook":"power_sgd","accum":4}}')
print(json.dumps({
  "median": timing.median(xs), "median_even": timing.median([4.0, 1.0, 3.0, 2.0]),
  "p90": timing.percentile(xs, 0.9), "p0": timing.percentile(xs, 0.0), "one": timing.percentile([7.0], 0.9),
  "v": list(torchenv.version_tuple("2.11.0+cu130")), "v_old": list(torchenv.version_tuple("2.3.1")),
  "cfg": cfg,
}))
"#;
    let v = with_script_module(py, &script, code, &[], &[]);
    assert_eq!(v["median"], 0.3);
    assert_eq!(v["median_even"], 2.5);
    // Sorted 0.1..0.5: position 0.9·4 = 3.6 → 0.4 + 0.6·0.1.
    assert!((v["p90"].as_f64().unwrap() - 0.46).abs() < 1e-12);
    assert_eq!(v["p0"], 0.1);
    assert_eq!(v["one"], 7.0);
    assert_eq!(v["v"], serde_json::json!([2, 11]));
    assert_eq!(v["v_old"], serde_json::json!([2, 3]));
    // Defaults follow the seed recipe; the hook name as Rust serialises it is understood.
    let c = &v["cfg"];
    assert_eq!(c["runs"][0][0]["seq"], 1024);
    assert_eq!(c["runs"][0][0]["vocab"], 50257);
    assert_eq!(c["runs"][0][0]["name"], "decoder-2x64");
    assert_eq!(c["runs"][0][1]["hook"], "powersgd");
    assert_eq!(c["runs"][0][1]["accum"], 4);
    assert_eq!(c["micro_batch"], 8);
    assert_eq!(c["warmup_steps"], 10);
    assert_eq!(c["steps"], 40);
    // By hand without the key: no probe before the steps.
    assert_eq!(c["all_reduce_probe_bytes"], serde_json::json!([]));
}

/// A nocomm run on N GPUs alternates rank 0 alone with every rank together: the order of the
/// blocks, the warm-up only in the first of each side, and the waiting ranks never stepping alone.
#[test]
fn solo_rounds_alternate_alone_and_together() {
    let Some((py, _dir, script)) = embedded_script() else {
        return;
    };
    let code = r#"
out = {}
for rank in (0, 1):
    log, clock = [], iter(range(1000))
    def solo_step():
        log.append("alone")
        return float(next(clock))
    def together(r, warm, n):
        log.append("together %d warm %d" % (r, warm))
        return [100.0 * (r + 1) + i for i in range(warm + n)][warm:]
    def wait():
        log.append("wait")
    solo, tog = timing.alternate_solo(rank, 3, 2, 4, solo_step, together, wait)
    out[str(rank)] = {"log": log, "solo": solo, "together": tog}
out["rounds"] = timing.SOLO_ROUNDS
print(json.dumps(out))
"#;
    let v = with_script_module(py, &script, code, &[], &[]);
    let log = |rank: &str| -> Vec<String> {
        v[rank]["log"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect()
    };
    // Rank 0: 2 + 4 steps alone, then together with the warm-up, then 4 alone and 4 together twice.
    let mut want: Vec<String> = vec!["alone".into(); 6];
    want.extend(["wait".into(), "together 0 warm 2".into()]);
    for r in 1..3 {
        want.extend(vec!["alone".to_string(); 4]);
        want.extend(["wait".into(), format!("together {r} warm 0")]);
    }
    assert_eq!(log("0"), want);
    // The warm-up steps (clock 0 and 1) are dropped; the rest kept in order.
    let solo: Vec<f64> = serde_json::from_value(v["0"]["solo"].clone()).unwrap();
    assert_eq!(
        solo,
        vec![2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0]
    );
    let together: Vec<f64> = serde_json::from_value(v["0"]["together"].clone()).unwrap();
    assert_eq!(together.len(), 12);
    assert_eq!(&together[..4], &[102.0, 103.0, 104.0, 105.0]);
    assert_eq!(
        &together[4..],
        &[200.0, 201.0, 202.0, 203.0, 300.0, 301.0, 302.0, 303.0]
    );
    // Rank 1 only waits and steps together.
    assert!(!log("1").iter().any(|x| x == "alone"), "{:?}", log("1"));
    assert_eq!(log("1").iter().filter(|x| *x == "wait").count(), 3);
    assert_eq!(v["1"]["solo"], serde_json::json!([]));
    assert_eq!(v["1"]["together"], v["0"]["together"]);
    assert!(v["rounds"].as_u64().unwrap() >= 2);
}

#[test]
fn rust_config_is_what_the_script_reads() {
    // Every hook as serde spells it must be accepted by the script's parser.
    let Some((py, _dir, script)) = embedded_script() else {
        return;
    };
    let req = request(DdpVariant::default(), vec![1], 100.0);
    let mlp = ModelSpec::square_mlp(256, 3);
    // The script's reading of a config, or its Fatal message as a JSON string.
    let read = |json: &str| {
        with_script_module(
            py,
            &script,
            "try:\n    print(json.dumps(config.load_config(sys.argv[2])))\nexcept errors.Fatal as e:\n    print(json.dumps(str(e)))",
            &[json],
            &[],
        )
    };
    for (hook, expect) in [
        (CommHook::None, "none"),
        (CommHook::Fp16, "fp16"),
        (CommHook::Bf16, "bf16"),
        (CommHook::PowerSgd, "powersgd"),
    ] {
        let v = DdpVariant {
            hook,
            accum: 2,
            bucket_cap_mb: Some(50.0),
            ..DdpVariant::default()
        };
        let c = read(&script_config(&req, &[(&mlp, &v)], 1, false));
        assert_eq!(c["runs"][0][1]["hook"], expect);
        assert_eq!(c["runs"][0][1]["bucket_cap_mb"], 50.0);
        assert_eq!(c["runs"][0][1]["nocomm"], false);
        assert_eq!(c["runs"][0][0]["name"], "mlp:256x3");
        assert_eq!(c["steps"], 3);
        assert_eq!(c["nccl_timeout_s"], 50);
        assert_eq!(
            c["all_reduce_probe_bytes"],
            serde_json::json!(ALL_REDUCE_PROBE_BYTES)
        );
    }
    // PowerSGD's rank reaches the script: the one the variant names, else torch's default.
    for (name, rank) in [("powersgd4", 4), ("powersgd", POWERSGD_DEFAULT_RANK)] {
        let v: DdpVariant = name.parse().unwrap();
        let c = read(&script_config(&req, &[(&mlp, &v)], 1, false));
        assert_eq!(c["runs"][0][1]["powersgd_rank"], rank, "{name}");
    }
    // The script refuses a rank core would refuse.
    let v: DdpVariant = "powersgd4".parse().unwrap();
    let json = script_config(&req, &[(&mlp, &v)], 1, false);
    let over = json.replace(
        "\"powersgd_rank\":4",
        &format!("\"powersgd_rank\":{}", POWERSGD_MAX_RANK + 1),
    );
    assert_ne!(over, json);
    assert!(read(&over).as_str().unwrap_or("").contains("powersgd_rank"));
    // Probe sizes the script cannot all-reduce as whole float32 buffers are refused.
    let json = script_config(&req, &[(&mlp, &DdpVariant::default())], 1, false);
    let odd = json.replace("[4096,", "[4097,");
    assert_ne!(odd, json);
    let c = read(&odd);
    assert!(
        c.as_str().unwrap_or("").contains("all_reduce_probe_bytes"),
        "{c}"
    );
    // nocomm reaches the script, which refuses it with a hook as core does.
    let nocomm: DdpVariant = "nocomm+accum8".parse().unwrap();
    let json = script_config(&req, &[(&mlp, &nocomm)], 1, false);
    let c = read(&json);
    assert_eq!(c["runs"][0][1]["nocomm"], true);
    assert_eq!(c["runs"][0][1]["accum"], 8);
    let bad = json.replace("\"hook\":\"none\"", "\"hook\":\"bf16\"");
    assert_ne!(bad, json);
    let c = read(&bad);
    assert!(c.as_str().unwrap_or("").contains("nocomm"), "{c}");
}

/// A request's minimum timed seconds reach the script, which then times more steps where they are
/// short and exactly `steps` where they are long; none asked, none taken.
#[test]
fn a_minimum_timed_stretch_reaches_the_script_and_sizes_short_runs() {
    let Some((py, _dir, script)) = embedded_script() else {
        return;
    };
    let mlp = ModelSpec::square_mlp(256, 3);
    let mut req = request(DdpVariant::default(), vec![1], 100.0);
    let plain = script_config(&req, &[(&mlp, &DdpVariant::default())], 1, false);
    assert!(!plain.contains("min_timed_s"), "{plain}");
    req.min_timed_s = 2.0;
    let sized = script_config(&req, &[(&mlp, &DdpVariant::default())], 1, false);
    let code = "cfg = config.load_config(sys.argv[2])\n\
                print(json.dumps({'plain': config.load_config(sys.argv[3])['min_timed_s'],\n\
                'sized': cfg['min_timed_s'], 'steps': cfg['steps'],\n\
                'short': timing.steps_for(2.0, 15, 0.002), 'long': timing.steps_for(2.0, 15, 0.2),\n\
                'tiny': timing.steps_for(2.0, 15, 1e-7), 'off': timing.steps_for(0.0, 15, 0.002)}))";
    let v = with_script_module(py, &script, code, &[&sized, &plain], &[]);
    assert_eq!(
        (v["plain"].as_f64(), v["sized"].as_f64()),
        (Some(0.0), Some(2.0))
    );
    // 2 s of 2 ms steps is 1000; 15 steps of 200 ms already time 3 s; never past the cap.
    assert_eq!(v["short"], 1000);
    assert_eq!(v["long"], 15);
    assert_eq!(v["tiny"], 10_000);
    assert_eq!(v["off"], 15);
    // Out of range is refused by the script as by core.
    let bad = sized.replace("\"min_timed_s\":2.0", "\"min_timed_s\":-1");
    assert_ne!(bad, sized);
    let code = "try:\n    config.load_config(sys.argv[2]); print(json.dumps('ok'))\nexcept errors.Fatal as e:\n    print(json.dumps(str(e)))";
    let v = with_script_module(py, &script, code, &[&bad], &[]);
    assert!(v.as_str().unwrap_or("").contains("min_timed_s"), "{v}");
}

/// The plain reference's rounds: every step of both sides in `rounds` blocks as even as can be,
/// in A B B A order (a drift along the launch then weighs on both sides alike), the warm-up in
/// each side's first block only; the flag reaches the script when asked.
#[test]
fn the_plain_reference_interleaves_blocks_in_abba_order_and_reaches_the_script() {
    let Some((py, _dir, script)) = embedded_script() else {
        return;
    };
    let mlp = ModelSpec::square_mlp(256, 3);
    let mut req = request(DdpVariant::default(), vec![1], 100.0);
    req.reference = ddpcheck_core::ddp::Reference::Plain;
    let config = script_config(&req, &[(&mlp, &DdpVariant::default())], 1, false);
    let code = "calls = []\n\
                def block(plain, n, first):\n\
                \x20   calls.append(['plain' if plain else 'ddp', n, first])\n\
                \x20   return [2.0 if plain else 3.0] * n\n\
                ddp, plain, pairs = timing.interleave_plain(3, 7, block)\n\
                print(json.dumps({'on': config.load_config(sys.argv[2])['plain_reference'],\n\
                'calls': calls, 'ddp': len(ddp), 'plain': len(plain), 'pairs': pairs}))";
    let v = with_script_module(py, &script, code, &[&config], &[]);
    assert_eq!(v["on"], true);
    assert_eq!(
        v["calls"],
        serde_json::json!([
            ["ddp", 3, true],
            ["plain", 3, true],
            ["plain", 2, false],
            ["ddp", 2, false],
            ["ddp", 2, false],
            ["plain", 2, false]
        ])
    );
    assert_eq!((v["ddp"].as_u64(), v["plain"].as_u64()), (Some(7), Some(7)));
    assert_eq!(
        v["pairs"],
        serde_json::json!([[3.0, 2.0], [3.0, 2.0], [3.0, 2.0]])
    );
}

/// The plain blocks are the 1-GPU launch's: an N-GPU launch's config leaves the key out.
#[test]
fn the_plain_reference_reaches_only_the_one_gpu_launch() {
    let mlp = ModelSpec::square_mlp(256, 3);
    let mut req = request(DdpVariant::default(), vec![1, 2], 100.0);
    req.reference = ddpcheck_core::ddp::Reference::Plain;
    let config = |world: u32| -> serde_json::Value {
        let text = script_config(&req, &[(&mlp, &DdpVariant::default())], world, false);
        serde_json::from_str(&text).unwrap()
    };
    assert_eq!(config(1)["plain_reference"], true);
    assert!(config(2).get("plain_reference").is_none(), "{}", config(2));
}

#[test]
fn manual_command_runs_the_same_launch() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let py = fake(
        dir.path(),
        "python3",
        &format!("printf '%s\\n' \"$@\" > \"{d}/args\"\nenv > \"{d}/env\"\n"),
    );
    let mut variant = bf16_p2p_off();
    variant.name = "it's bf16".into(); // needs quoting
    let req = request(variant.clone(), vec![2], 30.0);
    let script = Path::new("/tmp/some dir/ddpcheck_bench_ddp/__main__.py");
    let line = manual_command(
        &cfg(&py),
        &req,
        &ModelSpec::gpt2_124m(),
        &variant,
        2,
        script,
    );
    assert!(line.contains("NCCL_NVLS_ENABLE=0 "), "{line}");
    assert!(
        line.contains("-m torch.distributed.run --standalone --nproc_per_node 2 '/tmp/some dir/ddpcheck_bench_ddp/__main__.py' --config '"),
        "{line}"
    );
    let status = Command::new("sh").arg("-c").arg(&line).status().unwrap();
    assert!(status.success());
    let args: Vec<String> = read(dir.path().join("args"))
        .lines()
        .map(str::to_string)
        .collect();
    let (program, expected) = launch_argv(
        &Launcher::Python(py.display().to_string()),
        2,
        script,
        &script_config(&req, &[(&ModelSpec::gpt2_124m(), &variant)], 2, false),
        RunDevice::Cuda,
    );
    assert_eq!(program, py.display().to_string());
    assert_eq!(args, expected);
    let config: serde_json::Value = serde_json::from_str(&args[7]).unwrap();
    assert_eq!(config["variant"]["name"], "it's bf16");
    let env = read(dir.path().join("env"));
    assert!(env.lines().any(|l| l == "NCCL_P2P_DISABLE=1"));
    assert!(env.lines().any(|l| l == "NVSHMEM_DISABLE_NVLS=1"));
}

#[test]
fn torchrun_launcher_is_called_directly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    // A `#!/bin/sh` torchrun has no Python to probe; the launch goes straight to it.
    let body = format!(
        "echo \"$1\" >> \"{d}/first_args\"\n{}",
        good_body(dir.path())
    );
    let tr = fake(dir.path(), "torchrun", &body);
    let rows = run_ddp(
        &cfg(&tr),
        &request(bf16_p2p_off(), vec![1, 2], 20.0),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(rows.len(), 2);
    let firsts = read(dir.path().join("first_args"));
    assert_eq!(
        firsts.lines().collect::<Vec<_>>(),
        ["--standalone", "--standalone"]
    );
    let args = read(dir.path().join("args_2"));
    assert_eq!(args.lines().nth(2), Some("2"));

    // Shebangs name the interpreter to probe.
    let sb = dir.path().join("tr1");
    fs::write(&sb, "#!/opt/torch/.venv/bin/python3\nimport sys\n").unwrap();
    assert_eq!(
        shebang_python(&sb).as_deref(),
        Some("/opt/torch/.venv/bin/python3")
    );
    fs::write(&sb, "#!/usr/bin/env -S python3.12 -u\n").unwrap();
    assert_eq!(shebang_python(&sb).as_deref(), Some("python3.12"));
    fs::write(&sb, "#!/bin/sh\n").unwrap();
    assert_eq!(shebang_python(&sb), None);
}

/// A grouped launch that its deadline stops after its first run reported: the deadline is the
/// outcome (TIMEOUT), naming the run it stopped, and every run that finished before it stays,
/// those of earlier launches and the first of this one.
#[test]
fn a_deadline_after_some_runs_keeps_them_and_is_a_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let params = ModelSpec::gpt2_124m().params();
    let body = format!(
        r#"res() {{ echo "{{\"event\":\"result\",\"model\":\"gpt2-124m\",\"params\":{params},\"variant\":\"$1\",\"world_size\":$n,\"step_time_median_s\":0.1,\"step_time_p90_s\":0.1,\"throughput\":1000,\"throughput_unit\":\"tokens/s\"}}"; }}
res base
if [ "$n" = 2 ]; then sleep 300; fi
res bf16
exit 0
"#
    );
    let py = fake(dir.path(), "python3", &body);
    let mut req = request("base".parse().unwrap(), vec![1, 2], 2.0);
    req.variants.push("bf16".parse().unwrap());
    let out = run_ddp_outcome(&cfg(&py), &req, &mut |_| {}).unwrap();
    let mut ran: Vec<(String, u32)> = out
        .results
        .iter()
        .map(|r| (r.variant.clone(), r.world_size))
        .collect();
    ran.sort();
    assert_eq!(
        ran,
        [("base".into(), 1), ("base".into(), 2), ("bf16".into(), 1)]
    );
    match &out.stopped {
        Some(ProbeError::Timeout { stage, seconds }) => {
            assert_eq!(stage, "DDP benchmark gpt2-124m bf16 on 2 GPUs");
            assert_eq!(*seconds, 2.0);
        }
        other => panic!("expected the deadline, got {other:?}"),
    }
    // Where only results count, the deadline is the error, not a missing result.
    assert!(matches!(
        run_ddp(&cfg(&py), &req, &mut |_| {}),
        Err(ProbeError::Timeout { .. })
    ));
}

#[test]
fn keep_going_records_a_failed_launch() {
    let dir = tempfile::tempdir().unwrap();
    // The 2-GPU launch crashes; the 1-GPU one succeeds.
    let body = good_body(dir.path()).replace(
        "  2) step=0.125",
        "  2) echo 'ValueError: rank 1 fell over' >&2; exit 1 ;;\n  9) step=0.125",
    );
    let py = fake(dir.path(), "python3", &body);
    let req = request(bf16_p2p_off(), vec![1, 2], 20.0);
    let opts = DdpOptions {
        keep_going: true,
        ..DdpOptions::default()
    };
    let run = run_ddp_report(&cfg(&py), &req, &opts, &mut |_| {}).unwrap();
    assert_eq!(run.results.len(), 1);
    assert!(
        matches!(&run.launches[1].error, Some(ProbeError::Worker(m)) if m.contains("ValueError: rank 1 fell over"))
    );
    // Without keep_going the same crash is the run's error.
    assert!(matches!(
        run_ddp(&cfg(&py), &req, &mut |_| {}),
        Err(ProbeError::Worker(_))
    ));
}

#[test]
fn requests_are_bounded() {
    let ok = request(DdpVariant::default(), vec![1, 2], 60.0);
    assert!(plan(&ok).is_ok());
    let invalid = |f: &dyn Fn(&mut DdpRequest)| {
        let mut r = ok.clone();
        f(&mut r);
        match plan(&r) {
            Err(ProbeError::Invalid(m)) => m,
            other => panic!("expected Invalid, got {other:?}"),
        }
    };
    // The runner's GPU bound says it is the runner's (a plan does not know the node's GPUs).
    for worlds in [vec![0], vec![1, 65]] {
        let m = invalid(&|r| r.world_sizes = worlds.clone());
        assert!(
            m.contains("outside the runner's 1..=64 processes per launch"),
            "{m}"
        );
        assert!(!m.contains("this node has"), "{m}");
    }
    // Field bounds: core's DdpRequest::validate.
    assert!(
        invalid(&|r| r.world_sizes.clear()).contains("at least one model, variant and GPU count")
    );
    assert!(invalid(&|r| r.steps = 0).contains("steps 0"));
    assert!(invalid(&|r| r.steps = 10_001).contains("steps 10001"));
    assert!(invalid(&|r| r.warmup_steps = 10_001).contains("warm-up 10001"));
    assert!(invalid(&|r| r.micro_batch = 0).contains("micro-batch 0"));
    assert!(invalid(&|r| r.micro_batch = 4097).contains("micro-batch 4097"));
    assert!(invalid(&|r| r.deadline_s = 0.0).contains("deadline 0 s"));
    assert!(invalid(&|r| r.repeats = 0).contains("repeats 0"));
    assert!(invalid(&|r| r.repeats = 21).contains("repeats 21"));
    assert!(invalid(&|r| r.deadline_s = f64::NAN).contains("deadline NaN s"));
    assert!(invalid(&|r| r.price_per_gpu_hour = Some(-1.0)).contains("price -1"));
    assert!(invalid(&|r| r.models.clear()).contains("at least one model"));
    assert!(invalid(&|r| r.variants.clear()).contains("at least one model, variant"));
    assert!(invalid(&|r| r.models = vec![ModelSpec::square_mlp(4, 1)]).contains("MLP width 4"));
    assert!(
        invalid(&|r| r.env = vec![("LD_PRELOAD".into(), "x.so".into())]).contains("LD_PRELOAD")
    );
    assert!(invalid(&|r| r.variants[0].accum = 0)
        .contains("variant base: accumulation must be 1..=1024"));
    assert!(
        invalid(&|r| r.variants[0].bucket_cap_mb = Some(f64::INFINITY)).contains("bucket_cap_mb")
    );
    assert!(invalid(&|r| {
        r.variants[0].fsdp = true;
        r.variants[0].hook = CommHook::Bf16;
    })
    .contains("FSDP"));
    assert!(invalid(&|r| r.variants = vec![DdpVariant::default(); 200]).contains("variants (32)"));
    // TORCH_NCCL_* goes the way of validate: refused (the runner alone used to take it).
    assert!(
        invalid(&|r| r.env = vec![("TORCH_NCCL_BLOCKING_WAIT".into(), "1".into())])
            .contains("TORCH_NCCL_BLOCKING_WAIT")
    );

    // What only the runner checks.
    assert!(invalid(&|r| r.env = vec![("NCCL_NVLS_ENABLE".into(), "1".into())]).contains("pinned"));
    assert!(
        invalid(&|r| r.variants[0].env = vec![("NCCL_ALGO".into(), "a\nb".into())])
            .contains("one line")
    );
    // validate takes any NCCL_/CUDA_ prefix; a child's variable needs a proper name after it.
    assert!(invalid(&|r| r.env = vec![("NCCL_".into(), "1".into())]).contains("\"NCCL_\""));
    assert!(invalid(&|r| r.env = vec![("NCCL_algo".into(), "ring".into())]).contains("NCCL_algo"));
    assert!(invalid(&|r| r.env = vec![("NCCL_A B".into(), "1".into())]).contains("NCCL_A B"));
    assert!(
        invalid(&|r| r.env = vec![("NCCL_ALGO".into(), "ring".into()); 65])
            .contains("65 variables")
    );
    assert!(invalid(&|r| r.variants[0].name = "a\nb".into()).contains("variant name"));
    assert!(invalid(&|r| r.variants[0].name = "x".repeat(65)).contains("variant name"));
    // Within validate's 24 h, above the runner's 4 h.
    assert!(invalid(&|r| r.deadline_s = MAX_DEADLINE_S + 1.0).contains("runner's bound"));
    let mut four_hours = ok.clone();
    four_hours.deadline_s = MAX_DEADLINE_S;
    assert!(plan(&four_hours).is_ok());
    // Each list within validate's bounds, their product above MAX_LAUNCHES: 5 × 32 × 2 = 320.
    assert!(invalid(&|r| {
        r.models = vec![ModelSpec::gpt2_124m(); 5];
        r.variants = vec![DdpVariant::default(); 32];
    })
    .contains("320 launches"));
    // Pinned values themselves are fine to repeat.
    let mut same = ok.clone();
    same.env = vec![("NCCL_NVLS_ENABLE".into(), "0".into())];
    assert!(plan(&same).is_ok());
}

#[test]
fn shell_quoting_round_trips() {
    for s in [
        "plain",
        "two words",
        "it's",
        "",
        "a'b'c",
        "{\"k\":[1,2]}",
        "$HOME `x`",
    ] {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("printf %s {}", sh_quote(s)))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), s);
    }
}

/// The real thing, on a node with torch and GPUs:
/// `DDPCHECK_PYTHON=/opt/torch/.venv/bin/python3 cargo test -p ddpcheck-gpu real_ddp -- --ignored --nocapture`
#[test]
#[ignore = "needs torch ≥ 2.4 with CUDA and GPUs"]
fn real_ddp_smoke_on_this_node() {
    let worlds: Vec<u32> = std::env::var("DDPCHECK_TEST_WORLDS")
        .unwrap_or_else(|_| "1,2".into())
        .split(',')
        .map(|w| w.trim().parse().unwrap())
        .collect();
    let req = DdpRequest {
        models: vec![ModelSpec::gpt2_124m(), ModelSpec::square_mlp(4096, 4)],
        variants: std::env::var("DDPCHECK_TEST_VARIANTS")
            .unwrap_or_else(|_| "base,bf16,fp16,powersgd,bf16+accum2,bucket100,fsdp".into())
            .split(',')
            .map(|v| v.parse().unwrap())
            .collect(),
        world_sizes: worlds,
        micro_batch: 8,
        warmup_steps: 3,
        steps: 6,
        min_timed_s: 0.0,
        price_per_gpu_hour: Some(3.0),
        env: vec![],
        deadline_s: 180.0,
        repeats: 1,
        recipe: Default::default(),
        device: Default::default(),
        reference: ddpcheck_core::ddp::Reference::Ddp,
    };
    let opts = DdpOptions {
        measure_nocomm: true,
        keep_going: true,
    };
    let run = run_ddp_report(&RealConfig::default(), &req, &opts, &mut |p| {
        eprintln!("[{}/{}] {}", p.done, p.total, p.message)
    })
    .unwrap();
    println!("{}", serde_json::to_string_pretty(&run).unwrap());
    let failed: Vec<String> = run
        .launches
        .iter()
        .filter_map(|l| l.error.as_ref().map(|e| e.to_string()))
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
    assert!(run.results.iter().all(|r| r.speedup.is_some()));
}

/// Processes whose command line mentions the benchmark script.
fn bench_processes() -> Vec<String> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(SCRIPT_DIR_NAME) && !is_gone(pid) {
                found.push(format!("{pid}: {cmd}"));
            }
        }
    }
    found
}

/// A real torchrun with NCCL ranks mid-run is stopped at the deadline, every rank with it.
#[test]
#[ignore = "needs torch ≥ 2.4 with CUDA and 2 GPUs"]
fn real_ddp_deadline_stops_every_rank() {
    let req = DdpRequest {
        models: vec![ModelSpec::gpt2_355m()],
        variants: vec![DdpVariant::default()],
        world_sizes: vec![2],
        micro_batch: 8,
        warmup_steps: 0,
        steps: 10_000,
        min_timed_s: 0.0,
        price_per_gpu_hour: None,
        env: vec![],
        deadline_s: 30.0,
        repeats: 1,
        recipe: Default::default(),
        device: Default::default(),
        reference: ddpcheck_core::ddp::Reference::Ddp,
    };
    // Timed from the launch's own start: the torch check before it takes a few seconds.
    let mut launched: Option<Instant> = None;
    let mut last = String::new();
    let err = run_ddp(&RealConfig::default(), &req, &mut |p| {
        if p.message.ends_with(": starting") {
            launched = Some(Instant::now());
        }
        last = p.message;
    })
    .unwrap_err();
    let took = launched.unwrap().elapsed();
    eprintln!("{err} after {took:?} from the launch; last progress: {last}");
    assert!(matches!(err, ProbeError::Timeout { .. }), "{err:?}");
    assert!(last.contains("step"), "{last}");
    // TERM grace, then up to 3 s for killed CUDA processes to close their pipes.
    assert!(
        took < Duration::from_secs(30) + TERM_GRACE + Duration::from_secs(4),
        "{took:?}"
    );
    // SIGKILLed ranks can take a moment to leave while the driver tears their context down.
    let until = Instant::now() + Duration::from_secs(5);
    while !bench_processes().is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(bench_processes(), Vec::<String>::new());
}

/// `repeats`: the whole launch sequence runs again (1, 2, 1, 2, 1, 2 GPUs), and each
/// configuration's result is the median of its launches, every launch's median kept.
#[test]
fn repeated_launches_give_the_median_and_keep_each_launch() {
    let dir = tempfile::tempdir().unwrap();
    let params = ModelSpec::gpt2_124m().params();
    let d = dir.path().display();
    // The k-th launch of N GPUs takes the k-th step time of its list.
    let body = format!(
        r#"echo "$n" >> "{d}/sequence"
k=$(grep -c "^$n$" "{d}/sequence")
case "$n:$k" in
  1:1) step=0.100 ;; 1:2) step=0.130 ;; 1:3) step=0.090 ;;
  2:1) step=0.125 ;; 2:2) step=0.120 ;; 2:3) step=0.200 ;;
  *) echo "unexpected launch $n:$k" >&2; exit 3 ;;
esac
tput=$(awk "BEGIN {{ print $n * 8 * 1024 / $step }}")
echo "{{\"event\":\"result\",\"model\":\"gpt2-124m\",\"params\":{params},\"variant\":\"bf16\",\"world_size\":$n,\"micro_batch\":8,\"accum\":1,\"step_time_median_s\":$step,\"step_time_p90_s\":$step,\"throughput\":$tput,\"throughput_unit\":\"tokens/s\"}}"
"#
    );
    let py = fake(dir.path(), "python3", &body);
    let mut req = request("bf16".parse().unwrap(), vec![1, 2], 20.0);
    req.repeats = 3;
    let run = run_ddp_report(&cfg(&py), &req, &DdpOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(
        read(dir.path().join("sequence")),
        "1\n2\n1\n2\n1\n2\n",
        "the sequence repeats as a whole"
    );
    assert_eq!(run.launches.len(), 6);
    let rows = &run.results;
    assert_eq!(rows.len(), 2);
    let (one, two) = (&rows[0], &rows[1]);
    assert_eq!(one.launch_step_medians_s, vec![0.100, 0.130, 0.090]);
    assert_eq!(two.launch_step_medians_s, vec![0.125, 0.120, 0.200]);
    assert!((one.step_time_median_s - 0.100).abs() < 1e-12);
    assert!((two.step_time_median_s - 0.125).abs() < 1e-12);
    // Throughput follows the median step; the speedup compares the medians.
    assert!((two.throughput - 2.0 * 8.0 * 1024.0 / 0.125).abs() < 1e-6);
    assert!((two.speedup.unwrap() - 2.0 * 0.100 / 0.125).abs() < 1e-9);
    assert!((two.launch_spread().unwrap() - (0.200 - 0.120) / 0.125).abs() < 1e-9);
}

#[test]
fn runs_of_one_world_size_and_environment_share_a_launch() {
    let base: DdpVariant = "base".parse().unwrap();
    let bf16: DdpVariant = "bf16".parse().unwrap();
    let mut other_env: DdpVariant = "accum4".parse().unwrap();
    other_env.env = vec![("NCCL_P2P_DISABLE".into(), "1".into())];
    let req = DdpRequest {
        models: vec![ModelSpec::gpt2_124m()],
        variants: vec![base.clone(), bf16.clone(), other_env.clone()],
        world_sizes: vec![1, 2],
        micro_batch: 8,
        warmup_steps: 1,
        steps: 2,
        min_timed_s: 0.0,
        price_per_gpu_hour: None,
        env: Vec::new(),
        deadline_s: 60.0,
        repeats: 1,
        recipe: Default::default(),
        device: Default::default(),
        reference: ddpcheck_core::ddp::Reference::Ddp,
    };
    let plan = plan(&req).unwrap();
    let groups = launch_groups(&req, &plan);
    let shape: Vec<(u32, Vec<String>)> = groups
        .iter()
        .map(|(w, items)| (*w, items.iter().map(|(_, v)| v.name.clone()).collect()))
        .collect();
    assert_eq!(
        shape,
        vec![
            (1, vec!["base".to_string(), "bf16".to_string()]),
            (1, vec!["accum4".to_string()]),
            (2, vec!["base".to_string(), "bf16".to_string()]),
            (2, vec!["accum4".to_string()]),
        ]
    );
    // A grouped config lists every run; the script reads them all.
    let items: Vec<(&ModelSpec, &DdpVariant)> = groups[0].1.clone();
    let json: serde_json::Value =
        serde_json::from_str(&script_config(&req, &items, 1, false)).unwrap();
    assert_eq!(json["version"], 2);
    assert_eq!(json["runs"].as_array().unwrap().len(), 2);
    assert!(json.get("model").is_none());
}

#[test]
fn launch_sees_its_own_group_in_our_session_and_no_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    // pid, process group and session of the launched program, and what its stdin is.
    let body = format!(
        "read -r _ _ _ _ pgrp sid _ < /proc/$$/stat\necho \"$$ $pgrp $sid\" > \"{d}/ids\"\nreadlink /proc/$$/fd/0 > \"{d}/stdin\"\nexit 1\n"
    );
    let py = fake(dir.path(), "python3", &body);
    let err = run_ddp(
        &cfg(&py),
        &request(DdpVariant::default(), vec![1], 10.0),
        &mut |_| {},
    )
    .unwrap_err();
    assert!(matches!(err, ProbeError::Worker(_)), "{err:?}");
    let ids: Vec<i64> = read(dir.path().join("ids"))
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    // SAFETY: getsid(0) only reads our own session id.
    let ours = i64::from(unsafe { libc::getsid(0) });
    assert_eq!(ids[1], ids[0], "its own process group: {ids:?}");
    assert_eq!(ids[2], ours, "our session (no setsid): {ids:?}");
    assert_eq!(read(dir.path().join("stdin")).trim(), "/dev/null");
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
fn script_pins_local_ranks_to_disjoint_cores() {
    let Some((py, _dir, script)) = embedded_script() else {
        return;
    };
    // Each local rank of two pins itself and prints the CPUs it may run on afterwards.
    let code = r#"
before = sorted(os.sched_getaffinity(0))
pinned = ranks.bind_cpus(sys.argv[2])
print(json.dumps({"before": before, "pinned": pinned, "after": sorted(os.sched_getaffinity(0)),
                  "list": ranks.cpu_list([0, 1, 2, 5, 7, 8])}))
"#;
    let run = |rank: &str, mode: &str| {
        with_script_module(
            py,
            &script,
            code,
            &[mode],
            &[("LOCAL_RANK", rank), ("LOCAL_WORLD_SIZE", "2")],
        )
    };
    let off = run("0", "none");
    assert_eq!(off["pinned"], serde_json::Value::Null);
    assert_eq!(off["after"], off["before"]);
    assert_eq!(off["list"], "0-2,5,7-8");

    let (r0, r1) = (run("0", "cores"), run("1", "cores"));
    let cpus = |v: &serde_json::Value, k: &str| -> Vec<u64> {
        v[k].as_array()
            .map(|a| a.iter().filter_map(|x| x.as_u64()).collect())
            .unwrap_or_default()
    };
    let all = cpus(&r0, "before");
    if r0["pinned"].is_null() {
        // Fewer physical cores than ranks (one core, maybe with two hyperthreads): the script says
        // so and leaves the mask alone. This machine and CI have two cores and take the path below.
        assert_eq!(cpus(&r0, "after"), all);
        return;
    }
    let (a, b) = (cpus(&r0, "after"), cpus(&r1, "after"));
    assert_eq!(a, cpus(&r0, "pinned"));
    assert!(!a.is_empty() && !b.is_empty(), "{r0} {r1}");
    assert!(
        a.iter().all(|c| all.contains(c) && !b.contains(c)),
        "{r0} {r1}"
    );
    assert!(b.iter().all(|c| all.contains(c)), "{r1}");
}

#[test]
fn script_refuses_an_unknown_cpu_binding() {
    let Some((py, _dir, script)) = embedded_script() else {
        return;
    };
    let (code, lines, _) = run_script(
        py,
        &script,
        r#"{"model":{"kind":"mlp","width":64},"cpu_binding":"numa"}"#,
    );
    assert_eq!(code, 1);
    assert_eq!(lines[0]["kind"], "invalid", "{lines:?}");
    assert!(lines[0]["message"]
        .as_str()
        .unwrap()
        .contains("cpu_binding must be one of none, cores"));
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

/// A CPU launch is one interpreter running the script (it starts its ranks itself), with the
/// recipe, the device, the rank count and the factory's deadline in its config; a CUDA launch's
/// config leaves the device and the rank count out.
#[test]
fn a_cpu_launch_runs_the_script_itself_with_the_recipe_and_its_rank_count() {
    let factory = ModelSpec::External {
        source: ddpcheck_core::ddp::ModelSource::Python {
            target: "/abs/f.py".into(),
            function: "make".into(),
        },
    };
    let mut req = request(DdpVariant::default(), vec![1, 2], 100.0);
    req.device = RunDevice::Cpu;
    req.recipe.static_graph = true;
    req.recipe.broadcast_buffers = false;
    req.recipe.amp = ddpcheck_core::ddp::Amp::None;
    let v = DdpVariant::default();
    let config = script_config(&req, &[(&factory, &v)], 2, false);
    let c: serde_json::Value = serde_json::from_str(&config).unwrap();
    assert_eq!(c["device"], "cpu");
    assert_eq!(c["world_size"], 2);
    assert_eq!(c["factory_deadline_s"], 25.0);
    assert_eq!(c["model_name"], "py:/abs/f.py:make");
    assert_eq!(c["model"]["source"]["target"], "/abs/f.py");
    assert_eq!(c["recipe"]["static_graph"], true);
    assert_eq!(c["recipe"]["broadcast_buffers"], false);
    assert_eq!(c["recipe"]["amp"], "none");
    let script = Path::new("/tmp/s.py");
    let (program, args) = launch_argv(
        &Launcher::Python("/usr/bin/python3".into()),
        2,
        script,
        &config,
        RunDevice::Cpu,
    );
    assert_eq!(program, "/usr/bin/python3");
    assert_eq!(args, ["/tmp/s.py", "--config", config.as_str()]);

    req.device = RunDevice::Cuda;
    let mlp = ModelSpec::square_mlp(64, 2);
    let c: serde_json::Value =
        serde_json::from_str(&script_config(&req, &[(&mlp, &v)], 2, false)).unwrap();
    assert!(
        c.get("device").is_none() && c.get("world_size").is_none(),
        "{c}"
    );
    assert!(
        c.get("model_name").is_none() && c.get("factory_deadline_s").is_none(),
        "{c}"
    );
    let (_, args) = launch_argv(
        &Launcher::Python("python3".into()),
        2,
        script,
        "{}",
        RunDevice::Cuda,
    );
    assert_eq!(args[..2], ["-m", "torch.distributed.run"]);
}

/// The binary carries the whole package: every Python file of `bench_ddp/`, as it is there, and
/// nothing else (a module added to the folder but not to the table would be missing at run time).
#[test]
fn every_python_file_of_the_package_is_embedded() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ddp/bench_ddp");
    let mut on_disk: Vec<String> = fs::read_dir(&folder)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".py"))
        .collect();
    on_disk.sort();
    let mut embedded: Vec<String> = package_files()
        .iter()
        .map(|(name, _)| (*name).to_string())
        .collect();
    embedded.sort();
    assert_eq!(embedded, on_disk);
    for (name, text) in package_files() {
        assert_eq!(read(folder.join(name)), *text, "{name}");
    }
    // Written out, the folder is the package a launch runs.
    let dir = tempfile::tempdir().unwrap();
    let main = write_script(dir.path()).unwrap();
    assert_eq!(main, dir.path().join(SCRIPT_DIR_NAME).join(SCRIPT_MAIN));
    let written = fs::read_dir(dir.path().join(SCRIPT_DIR_NAME))
        .unwrap()
        .count();
    assert_eq!(written, package_files().len());
}

/// The counts the launch budget relies on (sizing steps, rounds alone and of the plain reference)
/// reach the benchmark in its config, which runs what it is sent; its own defaults, for a run by
/// hand without them, are core's too, and so is its bound on steps.
#[test]
fn the_counts_the_budget_relies_on_travel_in_the_config() {
    use ddpcheck_core::ddp::{MAX_STEPS, PLAIN_ROUNDS, SIZING_STEPS, SOLO_ROUNDS};
    let Some((py, _dir, script)) = embedded_script() else {
        return;
    };
    let req = request(DdpVariant::default(), vec![1], 100.0);
    let mlp = ModelSpec::square_mlp(256, 3);
    let json = script_config(&req, &[(&mlp, &DdpVariant::default())], 1, false);
    let sent: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(sent["sizing_steps"], SIZING_STEPS);
    assert_eq!(sent["solo_rounds"], SOLO_ROUNDS);
    assert_eq!(sent["plain_rounds"], PLAIN_ROUNDS);
    let other = json
        .replace(
            &format!("\"solo_rounds\":{SOLO_ROUNDS}"),
            "\"solo_rounds\":5",
        )
        .replace(
            &format!("\"plain_rounds\":{PLAIN_ROUNDS}"),
            "\"plain_rounds\":6",
        )
        .replace(
            &format!("\"sizing_steps\":{SIZING_STEPS}"),
            "\"sizing_steps\":7",
        );
    let without: serde_json::Value = serde_json::json!({"model": {"kind": "mlp", "width": 64}});
    let code = "read = lambda text: {k: config.load_config(text)[k] for k in\n\
                \x20   ('sizing_steps', 'solo_rounds', 'plain_rounds')}\n\
                print(json.dumps({'sent': read(sys.argv[2]), 'other': read(sys.argv[3]),\n\
                'default': read(sys.argv[4]), 'max_steps': timing.MAX_STEPS}))";
    let v = with_script_module(
        py,
        &script,
        code,
        &[&json, &other, &without.to_string()],
        &[],
    );
    let counts = serde_json::json!({
        "sizing_steps": SIZING_STEPS, "solo_rounds": SOLO_ROUNDS, "plain_rounds": PLAIN_ROUNDS
    });
    assert_eq!(v["sent"], counts);
    assert_eq!(
        v["other"],
        serde_json::json!({"sizing_steps": 7, "solo_rounds": 5, "plain_rounds": 6})
    );
    assert_eq!(v["default"], counts);
    assert_eq!(v["max_steps"], MAX_STEPS);
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

/// --compile reaches the script: the recipe carries torch.compile's mode as the script reads it
/// (the Python side's stand-in tests, gpu/tests/python/test_compile.py, take it from there: this
/// machine's torch has no torch.compile); an eager config leaves the key out.
#[test]
fn the_config_carries_compile_and_its_mode() {
    use ddpcheck_core::ddp::CompileMode;
    let Some((py, _dir, script)) = embedded_script() else {
        return;
    };
    let mlp = ModelSpec::square_mlp(256, 3);
    let mut req = request(DdpVariant::default(), vec![1], 100.0);
    let eager = script_config(&req, &[(&mlp, &DdpVariant::default())], 1, false);
    assert!(!eager.contains("compile"), "{eager}");
    req.recipe.compile = Some(CompileMode::ReduceOverhead);
    let compiled = script_config(&req, &[(&mlp, &DdpVariant::default())], 1, false);
    let code =
        "print(json.dumps([config.load_config(a)['recipe'].get('compile') for a in sys.argv[2:]]))";
    let v = with_script_module(py, &script, code, &[&compiled, &eager], &[]);
    assert_eq!(v, serde_json::json!(["reduce-overhead", null]));
}

/// A compiled launch keeps its compile cache in ddpcheck's cache folder (beside CUDA's under
/// the daemon's unit), and a cache folder the caller chose stays theirs; eager sets none.
#[test]
fn a_compiled_launch_keeps_its_cache_in_ddpchecks_cache_folder() {
    use super::launch::compile_cache_env;
    use std::ffi::OsString;
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    };
    let unit = env(&[
        ("CUDA_CACHE_PATH", "/var/cache/ddpcheck/nv"),
        ("XDG_CACHE_HOME", "/var/cache/ddpcheck"),
        ("HOME", "/var/lib/ddpcheck"),
    ]);
    assert_eq!(
        compile_cache_env(&unit),
        [
            (
                "TORCHINDUCTOR_CACHE_DIR".to_string(),
                "/var/cache/ddpcheck/inductor".to_string()
            ),
            (
                "TRITON_CACHE_DIR".to_string(),
                "/var/cache/ddpcheck/triton".to_string()
            ),
        ]
    );
    let user = env(&[("HOME", "/home/u"), ("TRITON_CACHE_DIR", "/scratch/triton")]);
    assert_eq!(
        compile_cache_env(&user),
        [(
            "TORCHINDUCTOR_CACHE_DIR".to_string(),
            "/home/u/.cache/ddpcheck/inductor".to_string()
        )]
    );
    assert!(compile_cache_env(&env(&[])).is_empty());
    // Only a compiled request sets them.
    let mut req = request(DdpVariant::default(), vec![1], 100.0);
    let has = |req: &DdpRequest| {
        env_overrides(req, &DdpVariant::default())
            .iter()
            .any(|(k, _)| k == "TORCHINDUCTOR_CACHE_DIR")
    };
    let here = compile_cache_env(&|k| std::env::var_os(k))
        .iter()
        .any(|(k, _)| k == "TORCHINDUCTOR_CACHE_DIR");
    assert!(!has(&req));
    req.recipe.compile = Some(ddpcheck_core::ddp::CompileMode::Default);
    assert_eq!(has(&req), here);
}

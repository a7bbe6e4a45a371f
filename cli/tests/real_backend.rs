//! `ddpcheck` on the real backend end to end, without GPUs: the fake NVML, CUDA and NCCL
//! libraries (gpu/src/*/testdata) stand in for the driver. The inventory and health come from
//! NVML, the sweep from the NCCL worker process, DDP from a fake launcher in place of torchrun;
//! Ctrl-C of a local run ends the worker or the launch.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::fake_gpu::FakeGpuLibs;
use common::{bin, children_of, code, output_within, stderr, stdout};

/// `check --json SWEEP...` on the fake GPUs (two minutes at most), which must exit `want`, as JSON.
fn check_json(
    libs: &FakeGpuLibs,
    runtime: &Path,
    env: &[(&str, &str)],
    sweep: &[&str],
    want: i32,
) -> serde_json::Value {
    let args = [&["check", "--json"][..], sweep].concat();
    let o = output_within(
        &mut ddpcheck(libs, runtime, env, &args),
        Duration::from_secs(120),
    );
    assert_eq!(code(&o), want, "{}\n{}", stdout(&o), stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The `field` of each item of the JSON array `items`, as text.
fn each_str<'a>(items: &'a serde_json::Value, field: &str) -> Vec<&'a str> {
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i[field].as_str().unwrap())
        .collect()
}

/// The fake GPU libraries and a runtime folder of the test's own (the node lock); `None` (the
/// test is skipped) where the fakes cannot be built.
fn fake_node() -> Option<(FakeGpuLibs, tempfile::TempDir)> {
    Some((FakeGpuLibs::build()?, tempfile::tempdir().unwrap()))
}

/// `ddpcheck ARGS` on the fake GPUs, with its own runtime dir (the node lock) and env extras.
fn ddpcheck(libs: &FakeGpuLibs, runtime: &Path, extra: &[(&str, &str)], args: &[&str]) -> Command {
    let mut cmd = Command::new(bin("ddpcheck"));
    cmd.args(args)
        .env_remove("DDPCHECK_SIM")
        .env_remove("DDPCHECK_DAEMON")
        .env("DDPCHECK_RUNTIME_DIR", runtime)
        .envs(libs.env(true))
        .envs(extra.iter().copied());
    cmd
}

#[test]
fn check_reads_the_gpus_from_nvml_and_fails_a_node_whose_all_reduce_is_wrong() {
    let Some((libs, rt)) = fake_node() else {
        return;
    };
    let wrong = [("FAKE_NCCL_WRONG", "1")];
    // The fake's all-reduce adds up host memory: up to 16 MiB, not the default 256, keeps the
    // sweep to a second or two on two busy cores, far inside the NCCL step's 30 s deadline.
    let sweep = ["--min-bytes", "8M", "--max-bytes", "16M"];
    let args = |extra: &[&'static str]| [extra, &sweep[..]].concat();
    let r = check_json(&libs, rt.path(), &wrong, &sweep, 2);
    assert_eq!(r["backend"], "real");
    assert_eq!(r["verdict"], "CRITICAL");
    assert_eq!(r["provenance"]["driver_version"], "999.99-fake");
    let uuids: Vec<&str> = each_str(&r["gpus"], "uuid");
    assert_eq!(
        uuids,
        [
            "GPU-fa4e0000-0000-0000-0000-000000000000",
            "GPU-fa4e0000-0000-0000-0000-000000000001"
        ]
    );
    assert_eq!(r["gpus"][1]["pcie"]["width_current"], 16);
    assert_eq!(r["topology"]["links"][0][1], "PHB");
    let codes: Vec<&str> = each_str(&r["findings"], "code");
    assert!(codes.contains(&"allreduce_wrong"), "{codes:?}");

    // The same node as a Slurm prolog: drain (exit 1) with one line that says why.
    let o = output_within(
        &mut ddpcheck(&libs, rt.path(), &wrong, &args(&["check", "--prolog"])),
        Duration::from_secs(120),
    );
    assert_eq!(code(&o), 1, "{}\n{}", stdout(&o), stderr(&o));
    let line = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(line.trim().lines().count(), 1, "{line}");
    assert!(line.starts_with("ddpcheck: CRITICAL"), "{line}");
}

/// A node of one GPU gets a bandwidth verdict of its own: the host-copy child times its link
/// (the fake's copies run at FAKE_COPY_GBPS against the fake NVML's gen4 x16, 31.5 GB/s), a
/// healthy link passes with its figures in the one line, a slow one warns, and
/// `--no-host-copies` measures nothing.
#[test]
fn check_on_one_gpu_judges_its_own_link_from_timed_copies() {
    let Some((libs, rt)) = fake_node() else {
        return;
    };
    let check = |gbps: &str, extra: &[&str]| {
        let env = [("FAKE_GPUS", "1"), ("FAKE_COPY_GBPS", gbps)];
        let mut args = vec!["check", "--json"];
        args.extend_from_slice(extra);
        let o = output_within(
            &mut ddpcheck(&libs, rt.path(), &env, &args),
            Duration::from_secs(120),
        );
        let r: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(&o), stderr(&o)));
        (code(&o), r)
    };
    let best = |r: &serde_json::Value, dir: &str| -> f64 {
        r["host_copies"]["gpus"][0]["samples"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["direction"] == dir)
            .map(|s| s["gbps"].as_f64().unwrap())
            .fold(0.0, f64::max)
    };
    let (c, r) = check("26", &[]);
    assert_eq!(c, 0, "{r}");
    for dir in ["host_to_device", "device_to_host"] {
        let b = best(&r, dir);
        assert!((b / 26.0 - 1.0).abs() < 0.05, "{dir}: {b}");
    }
    assert!(
        r["reason"]
            .as_str()
            .unwrap()
            .starts_with("ddpcheck: OK: single GPU healthy: copies host-to-device 2"),
        "{}",
        r["reason"]
    );
    assert!(r["host_copies"]["cuda_library"]
        .as_str()
        .unwrap()
        .ends_with("libcuda.so.1"));
    let step = r["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "host_copies")
        .unwrap();
    assert_eq!(step["status"], "ok", "{step}");

    // 6 GB/s on a 31.5 GB/s link: 19%, a warning naming the GPU.
    let (c, r) = check("6", &[]);
    assert_eq!(c, 1, "{r}");
    assert_eq!(r["verdict"], "WARNING");
    let codes: Vec<&str> = each_str(&r["findings"], "code");
    assert_eq!(
        codes
            .iter()
            .filter(|c| **c == "host_copy_below_capacity")
            .count(),
        2,
        "{codes:?}"
    );
    assert!(
        r["reason"]
            .as_str()
            .unwrap()
            .contains("19% of its gen4 x16"),
        "{}",
        r["reason"]
    );

    let (c, r) = check("6", &["--no-host-copies"]);
    assert_eq!(c, 0, "{r}");
    assert!(r.get("host_copies").is_none(), "{r}");
}

/// `explain` on the real backend, its platform read from the lent H200 guest's captured tree
/// (gpu/src/platform/testdata/vm-h200) with NVML's one GPU where that guest has it, 00:06.0: a
/// virtual machine whose guest sees no IOMMU, said as such, never "translated".
#[test]
fn explain_reads_the_platform_of_the_lent_h200_guest() {
    let Some((libs, rt)) = fake_node() else {
        return;
    };
    let tree = common::repo_root().join("gpu/src/platform/testdata/vm-h200");
    let tree = tree.to_string_lossy().into_owned();
    let env = [
        ("FAKE_GPUS", "1"),
        ("FAKE_BUS_ID", "00000000:00:06.0"),
        ("DDPCHECK_PLATFORM_ROOT", tree.as_str()),
    ];
    let o = output_within(
        &mut ddpcheck(&libs, rt.path(), &env, &["explain", "--json"]),
        Duration::from_secs(120),
    );
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["backend"], "real");
    let gpu = &r["platform"]["gpus"][0];
    assert_eq!(gpu["numa_node"], -1, "{gpu}");
    assert_eq!(gpu["on_root_bus"], true, "{gpu}");
    assert_eq!(r["platform"]["hypervisor"], true);
    assert_eq!(r["platform"]["iommu"]["mode"], "off");
    let causes = r["causes"].as_array().unwrap();
    let kinds: Vec<&str> = causes.iter().filter_map(|c| c["kind"].as_str()).collect();
    assert!(kinds.contains(&"virtual_machine"), "{kinds:?}");
    assert!(!kinds.contains(&"iommu_translated"), "{kinds:?}");
    let vm = causes
        .iter()
        .find(|c| c["kind"] == "virtual_machine")
        .unwrap();
    let iommu = vm["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["what"] == "IOMMU")
        .unwrap();
    assert!(
        iommu["measured"]
            .as_str()
            .unwrap()
            .starts_with("none visible in the guest"),
        "{iommu}"
    );
}

/// Gone, or a zombie nobody reaped yet: either way it runs nothing.
/// Polls `found` until it gives something, while `child` (ddpcheck) still runs; panics with
/// `what` past `limit`, or when ddpcheck ends first.
fn wait_while_running<T>(
    child: &mut std::process::Child,
    limit: Duration,
    what: &str,
    mut found: impl FnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(t) = found() {
            return t;
        }
        assert!(start.elapsed() < limit, "{what}");
        assert!(child.try_wait().unwrap().is_none(), "ddpcheck ended early");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

/// Sends SIGINT (Ctrl-C) to `child` and waits for it to exit (20 s at most).
fn interrupt(child: &mut std::process::Child) -> std::process::ExitStatus {
    assert!(Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let sent = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if sent.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("ddpcheck did not end within 20 s of Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (10 s at most) until every one of `pids` has ended.
fn assert_all_end(pids: &[u32], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pids.iter().all(|&p| ended(p)) {
        assert!(
            Instant::now() < deadline,
            "{what} {pids:?} still running after ddpcheck exited"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn ctrl_c_of_a_local_check_ends_its_worker_and_exits_130() {
    let Some((libs, rt)) = fake_node() else {
        return;
    };
    let mut child = ddpcheck(
        &libs,
        rt.path(),
        &[],
        &["check", "--inject-hang", "--deadline", "120"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let pid = child.id();

    // Wait for the NCCL worker (hanging by request) to be running.
    let workers = wait_while_running(
        &mut child,
        Duration::from_secs(60),
        "no worker started",
        || Some(children_of(pid)).filter(|w| !w.is_empty()),
    );
    std::thread::sleep(Duration::from_millis(300));
    let status = interrupt(&mut child);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("ddpcheck: interrupted"), "{err}");
    // No report of the stopped run (its killed worker would read as UNKNOWN).
    assert!(out.is_empty(), "{out}");
    // Its worker went with it (SIGTERM, then SIGKILL after 3 s).
    assert_all_end(&workers, "worker(s)");
}

/// A stand-in for python3 and torchrun: answers the torch check like torch 2.11 with two GPUs,
/// and a launch with the script's JSON lines (40 ms a step on one GPU, 2 ms more per extra GPU).
/// With FAKE_HANG=FILE a launch starts a `sleep` (its pid in FILE) and waits for it instead.
fn fake_python(dir: &Path) -> std::path::PathBuf {
    let params = ddpcheck_core::ddp::ModelSpec::gpt2_124m().params();
    let body = format!(
        r#"#!/bin/sh
if [ "$1" = "-c" ]; then
  echo '{{"python":"/fake/python3","torch":"2.11.0+cu130","cuda":"13.0","cuda_available":true,"device_count":2,"nccl":true}}'
  exit 0
fi
n=1; prev=
for a in "$@"; do [ "$prev" = "--nproc_per_node" ] && n=$a; prev=$a; done
if [ -n "$FAKE_HANG" ]; then sleep 300 & echo $! > "$FAKE_HANG"; wait; fi
echo '{{"event":"env","torch":"2.11.0+cu130","gpus":["Fake GPU"]}}'
step=$(awk "BEGIN {{ print 0.040 + 0.002 * ($n - 1) }}")
tput=$(awk "BEGIN {{ print $n * 8 * 1024 / $step }}")
echo "{{\"event\":\"result\",\"model\":\"gpt2-124m\",\"variant\":\"base\",\"params\":{params},\"world_size\":$n,\"step_time_median_s\":$step,\"step_time_p90_s\":$step,\"throughput\":$tput,\"throughput_unit\":\"tokens/s\"}}"
"#
    );
    let path = dir.join("python3");
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path
}

#[test]
fn bench_ddp_runs_the_launcher_through_the_real_backend_and_ctrl_c_ends_the_launch() {
    let Some((libs, rt)) = fake_node() else {
        return;
    };
    let py = fake_python(rt.path());
    let py = py.to_str().unwrap();
    let args = common::words(
        "bench ddp --model gpt2-124m --variants base --gpus 1,2 --steps 5 --warmup-steps 1",
    );
    let mut json_args = args.to_vec();
    json_args.extend(["--repeats", "2", "--json"]);
    let o = output_within(
        &mut ddpcheck(&libs, rt.path(), &[("DDPCHECK_PYTHON", py)], &json_args),
        Duration::from_secs(60),
    );
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["backend"], "real");
    let rows = r["results"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{r}");
    assert_eq!(rows[1]["world_size"], 2);
    assert_eq!(
        rows[1]["launch_step_medians_s"],
        serde_json::json!([0.042, 0.042])
    );
    let speedup = rows[1]["speedup"].as_f64().unwrap();
    // The fake prints throughput to 6 significant digits.
    assert!((speedup - 2.0 * 0.040 / 0.042).abs() < 1e-4, "{speedup}");

    // Ctrl-C while a launch runs: the launcher's process group ends with ddpcheck.
    let pidfile = rt.path().join("sleep.pid");
    let mut child = ddpcheck(
        &libs,
        rt.path(),
        &[
            ("DDPCHECK_PYTHON", py),
            ("FAKE_HANG", pidfile.to_str().unwrap()),
        ],
        &args,
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let sleeper = wait_while_running(
        &mut child,
        Duration::from_secs(30),
        "no launch started",
        || {
            std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok())
        },
    );
    assert_eq!(interrupt(&mut child).code(), Some(130));
    assert_all_end(&[sleeper], "the launch's sleep");
}

/// NVML's P2P status per capability and pair on the real backend (the fake NVML answers what
/// FAKE_P2P_* say), and a hang injected into the fake NCCL where P2P is forced across its host
/// bridge: `check` gives TIMEOUT with forced P2P as the likely cause and NCCL_P2P_DISABLE=1 to
/// try; `explain --ab` measures that fix in a worker of its own, with its own deadline, after
/// the pair's own run hung.
#[test]
fn forced_p2p_hang_on_the_fake_nccl_names_its_cause_and_the_ab_measures_the_fix() {
    let Some((libs, rt)) = fake_node() else {
        return;
    };
    let env = [
        ("FAKE_NCCL_P2P_HANG", "1"),
        ("NCCL_P2P_LEVEL", "SYS"),
        ("FAKE_P2P_R", "2,1-0=1"),
        ("FAKE_P2P_W", "2"),
        ("FAKE_P2P_A", "2"),
        ("FAKE_P2P_N", "5"),
    ];
    let sweep = ["--min-bytes", "8M", "--max-bytes", "16M", "--deadline", "3"];
    let r = check_json(&libs, rt.path(), &env, &sweep, 5);
    let reason = r["reason"].as_str().unwrap();
    assert!(reason.starts_with("ddpcheck: TIMEOUT: "), "{reason}");
    assert!(reason.contains("NCCL_P2P_LEVEL=SYS forces P2P"), "{reason}");
    assert!(
        reason.contains("NVML reports P2P read GPU_NOT_SUPPORTED"),
        "{reason}"
    );
    assert!(reason.contains("try NCCL_P2P_DISABLE=1"), "{reason}");
    let st = &r["topology"]["p2p_status"];
    assert_eq!(st[0][1]["read"], "gpu_not_supported", "{st}");
    assert_eq!(st[0][1]["write"], "gpu_not_supported", "{st}");
    assert_eq!(st[0][1]["nvlink"], "not_supported", "{st}");
    assert_eq!(st[1][0]["read"], "chipset_not_supported", "{st}");
    assert_eq!(st[0][0]["read"], "ok", "{st}");
    assert_eq!(r["topology"]["p2p"][0][1], "not_supported");

    let o = output_within(
        &mut ddpcheck(
            &libs,
            rt.path(),
            &env,
            &common::words("explain --json --ab --max-bytes 16M --deadline 3"),
        ),
        Duration::from_secs(120),
    );
    let r: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(&o), stderr(&o)));
    let pair = &r["pairs"][0];
    let kinds: Vec<&str> = each_str(&pair["causes"], "kind");
    assert!(kinds.contains(&"p2p_broken"), "{kinds:?}");
    assert!(pair["busbw_gbps"].is_null(), "{pair}");
    assert_eq!(pair["ab"]["overrides"][0][0], "NCCL_P2P_DISABLE", "{pair}");
    assert!(pair["ab"]["after_gbps"].as_f64().unwrap() > 0.0, "{pair}");
}

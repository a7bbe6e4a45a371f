//! Tests of how launches run, with fake interpreters: their deadline and process group, the launcher
//! and the by-hand command, the request's bounds, launches shared and repeated, CPU ranks, and the
//! compile cache's folder.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ddpcheck_core::ddp::{CommHook, DdpRequest, DdpVariant, ModelSpec, RunDevice};
use ddpcheck_core::ProbeError;

use super::super::launch::{sh_quote, shebang_python};
use super::super::*;
use super::{bf16_p2p_off, cfg, fake, good_body, is_gone, read, request};

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
        variants: vec![base.clone(), bf16.clone(), other_env.clone()],
        ..ddpcheck_testkit::ddp_request(&["gpt2-124m"], &[], &[1, 2])
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

/// A compiled launch keeps its compile cache in ddpcheck's cache folder (beside CUDA's under
/// the daemon's unit), and a cache folder the caller chose stays theirs; eager sets none.
#[test]
fn a_compiled_launch_keeps_its_cache_in_ddpchecks_cache_folder() {
    use super::super::launch::compile_cache_env;
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

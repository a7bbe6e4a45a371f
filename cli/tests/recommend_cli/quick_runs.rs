//! recommend through the daemon's history and with quick runs on a simulated node: `--verify`,
//! `--save-runs`/`--from`, the inherited NCCL environment.

use super::*;

#[test]
fn recommends_through_the_daemon_history() {
    let d = Daemon::start(Some("t4x2-pcie"));
    assert_eq!(code(&d.cli(&["bench", "collectives", "-e", "256M"])), 0);
    assert_eq!(
        code(&d.cli(&[
            "bench",
            "ddp",
            "--model",
            "mlp:4096",
            "--variants",
            "base",
            "--gpus",
            "1,2"
        ])),
        0
    );
    let o = d.cli(&["recommend", "--model", "mlp:4096", "--micro-batch", "256"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let t = stdout(&o);
    assert!(t.contains("SIMULATED"), "{t}");
    assert!(t.contains("Recommendation"), "{t}");
}

#[test]
fn quick_runs_and_verify_on_a_simulated_node() {
    let recommend = recommend_h200;
    let o = recommend(&["--model", "gpt2-124m", "--verify", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["verify"].as_array().unwrap();
    assert!(!rows.is_empty());
    for r in rows {
        assert!(r["measured_speedup"].as_f64().unwrap() > 0.0);
        assert!(
            r.get("measured_spread").is_none() && r.get("measured_uncertainty").is_none(),
            "one launch has no spread: {r}"
        );
    }
    // The verify runs timed the network in their own process group; on the simulated node it
    // is the curve the predictions read (the sweep of the quick runs), at DDP's 25 MiB bucket.
    let n = &v["verify_network"];
    assert_eq!(
        (n["world_size"].as_u64(), n["bytes"].as_u64()),
        (Some(2), Some(25 << 20)),
        "{n}"
    );
    let (p, m) = (
        n["predicted_busbw_gbps"].as_f64().unwrap(),
        n["measured_busbw_gbps"].as_f64().unwrap(),
    );
    assert!(m > 0.0 && (m / p - 1.0).abs() < 0.05, "{n}");
    // One GPU during the verify runs against the step the predictions read (the quick runs'):
    // the same simulated compute, once per one-GPU run, never a hooked one.
    let compute = v["verify_compute"].as_array().unwrap();
    assert!(
        compute.iter().any(|c| c["variant"] == "base"),
        "{compute:?}"
    );
    for c in compute {
        let variant = c["variant"].as_str().unwrap();
        assert!(
            !variant.contains("bf16") && !variant.contains("fp16"),
            "{c}"
        );
        let (p, m) = (
            c["predicted_step_s"].as_f64().unwrap(),
            c["measured_step_s"].as_f64().unwrap(),
        );
        assert!(m > 0.0 && (m / p - 1.0).abs() < 0.02, "{c}");
    }

    // --repeats 3: every DDP run launched three times (in a budget that covers three 2-GPU
    // launches); verify says how far apart they landed.
    let o = recommend(&common::words(
        "--model gpt2-124m --verify --repeats 3 --budget 300",
    ));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let t = stdout(&o);
    assert!(t.contains("% apart)"), "{t}");
    assert!(t.contains("network during these runs"), "{t}");
    assert!(t.contains("one GPU during these runs: base "), "{t}");
    // ... and how uncertain the measured speedup is, and whether the error stands out of it.
    assert!(t.contains("measured ±"), "{t}");
    let o = recommend(&common::words(
        "--model gpt2-124m --verify --repeats 3 --budget 300 --json",
    ));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = doc["verify"].as_array().unwrap();
    assert!(!rows.is_empty());
    for r in rows {
        let u = r["measured_uncertainty"].as_f64().unwrap();
        assert!((0.0..0.5).contains(&u), "{r}");
    }
    // The 2-GPU launch of the measure-first path timed the network in DDP's own process
    // group: that is the curve, with or without repeats. `--quick` sweeps instead.
    let provenance = |v: &serde_json::Value| v["curve"]["provenance"].as_str().unwrap().to_string();
    for doc in [&v, &doc] {
        assert!(
            provenance(doc).contains("bench ddp run(s) in DDP's own process group"),
            "{}",
            provenance(doc)
        );
    }
    let o = recommend(&["--model", "gpt2-124m", "--quick", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let quick: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        !provenance(&quick).contains("bench ddp"),
        "{}",
        provenance(&quick)
    );
    // --quick measures too (a 1-GPU launch and a sweep), against the budget.
    let own = &quick["own_measurements"];
    assert_eq!(own["launches"].as_array().unwrap().len(), 1, "{quick}");
    assert_eq!(own["sweeps"][0]["purpose"], "curve", "{quick}");
    // With repeats the quick runs measure 2 GPUs side by side (nocomm) and cite it.
    assert!(t.contains("nocomm at 2 GPUs"), "{t}");
    assert!(!t.contains("side_by_side_unmeasured"), "{t}");
    // Short steps, --quick: one 1-GPU launch cannot measure how much 2 GPUs slow each other,
    // so the quick runs do not try, and it says so (the measure-first default times it inside
    // its 2-GPU launch).
    let o = recommend(&["--model", "mlp:1024,4", "--micro-batch", "256", "--quick"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("[side_by_side_unmeasured]"),
        "{}",
        stdout(&o)
    );
    let o = recommend(&["--model", "gpt2-124m", "--verify", "--repeats", "0"]);
    assert_eq!(code(&o), 64, "{}", stderr(&o));
}

#[test]
fn verify_measures_the_recommendation_against_the_baseline() {
    // The simulated 4xA6000 PHB box recommends bf16 with accumulation: --verify runs both and
    // says how much faster the recommendation trained, launch by launch with --repeats.
    let verify = |extra: &[&str]| {
        let mut all = common::words("--sim a6000x4-phb recommend --model gpt2-124m --verify");
        all.extend_from_slice(extra);
        local(&all)
    };
    let o = verify(&["--repeats", "3", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let g = &doc["verify_gain"];
    assert_eq!(g["variant"], doc["chosen"], "{g}");
    assert_eq!(g["baseline"], "base");
    // The seed measured 2.0x for base and 3.5-3.7x for bf16 + accumulation 4: about 1.8x.
    let (p, m) = (
        g["predicted_ratio"].as_f64().unwrap(),
        g["measured_ratio"].as_f64().unwrap(),
    );
    assert!((1.3..2.5).contains(&p) && (1.3..2.5).contains(&m), "{g}");
    let u = g["measured_uncertainty"].as_f64().unwrap();
    assert!((0.0..0.1).contains(&u), "{g}");
    let o = verify(&["--repeats", "3"]);
    let t = stdout(&o);
    assert!(
        t.contains("against base on 4 GPUs")
            && t.contains("(within launches)")
            && t.contains("pays off"),
        "{t}"
    );
    // One launch each: the ratio, without an uncertainty.
    let o = verify(&["--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(doc["verify_gain"]["measured_ratio"].as_f64().unwrap() > 1.0);
    assert!(doc["verify_gain"].get("measured_uncertainty").is_none());
    // Where the recommendation is the baseline, there is nothing to compare.
    let o = recommend_h200(&["--model", "gpt2-124m", "--verify", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["chosen"], "base");
    assert!(doc.get("verify_gain").is_none(), "{doc}");
}

#[test]
fn save_runs_keeps_the_measurements_and_from_replays_them() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("runs");
    let model = ["--model", "mlp:2048,4", "--micro-batch", "256", "--json"];
    let mut args = vec![
        "--repeats",
        "2",
        "--verify",
        "--save-runs",
        dir.to_str().unwrap(),
    ];
    args.extend_from_slice(&model);
    let o = recommend_h200(&args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let live: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // Each measurement as the report its own command writes, named on stderr.
    let kinds = [
        ("ddp-1gpu", "bench_ddp"),
        ("ddp-2gpu", "bench_ddp"),
        ("topo", "topo"),
        ("verify", "bench_ddp"),
    ];
    for (name, kind) in kinds {
        let path = dir.join(format!("{name}.json"));
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(doc["kind"], kind, "{name}");
        assert_eq!(doc["backend"], "sim", "{name}: labelled simulated");
        assert!(
            stderr(&o).contains(path.to_str().unwrap()),
            "{}",
            stderr(&o)
        );
    }
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        kinds.len(),
        "no stray files"
    );
    // Offline, from those files but verify's: the same recommendation, number for number.
    let mut args = vec!["recommend"];
    args.extend_from_slice(&model);
    let files: Vec<String> = kinds[..3]
        .iter()
        .map(|(n, _)| dir.join(format!("{n}.json")).display().to_string())
        .collect();
    for f in &files {
        args.extend(["--from", f.as_str()]);
    }
    let o = local(&args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let replay: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(!stderr(&o).contains("kept"), "{}", stderr(&o));
    for key in [
        "curve",
        "compute",
        "overheads",
        "rows",
        "chosen",
        "reasons",
        "warnings",
    ] {
        assert_eq!(live[key], replay[key], "{key}");
    }
    assert!(live["rows"].as_array().is_some_and(|r| !r.is_empty()));
    // Offline with --save-runs: nothing measured, said so, nothing written.
    let again = d.path().join("again");
    args.extend(["--save-runs", again.to_str().unwrap()]);
    let o = local(&args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).contains("nothing kept"), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(&again).unwrap().count(), 0);
    // A folder that cannot be made is a usage error before anything runs.
    let file = d.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let under_file = file.join("runs");
    let o = recommend_h200(&[
        "--model",
        "gpt2-124m",
        "--save-runs",
        under_file.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 64, "{}", stderr(&o));
    assert!(stderr(&o).contains("--save-runs"), "{}", stderr(&o));
}

#[test]
fn the_simulated_node_runs_under_the_nccl_environment_it_inherits() {
    // As a real worker would: NCCL_P2P_DISABLE=1 in the caller's environment takes the
    // simulated 2xH200 off NVLink (shared memory, ~27 GB/s against ~330), and the warning about
    // it rests on the curve it caused.
    let args =
        common::words("--sim h200x2-nvlink recommend --model gpt2-124m --step-time-ms 40 --json");
    let run = |env: &[(&str, &str)]| {
        let o = local_env(&args, env);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let busbw = |v: &serde_json::Value| v["curve"]["busbw_at_bucket_gbps"].as_f64().unwrap();
    let codes = warning_codes;
    let nvlink = run(&[]);
    let shm = run(&[("NCCL_P2P_DISABLE", "1")]);
    assert!(busbw(&nvlink) > 200.0, "{}", busbw(&nvlink));
    assert!(busbw(&shm) < 50.0, "{}", busbw(&shm));
    assert!(!codes(&nvlink).contains(&"nvlink_transport_disabled".to_string()));
    assert!(codes(&shm).contains(&"nvlink_transport_disabled".to_string()));
}

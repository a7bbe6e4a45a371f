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

#[test]
fn recommends_from_saved_reports_offline_in_under_a_second() {
    let d = tempfile::tempdir().unwrap();
    let coll = save(
        d.path(),
        "coll.json",
        &[
            "--sim",
            "a6000x4-phb",
            "bench",
            "collectives",
            "--json",
            "-e",
            "256M",
        ],
    );
    let ddp = save_a6000_gpt2(d.path(), "ddp.json", "base,bf16+accum4", "1,4", &[]);
    // recommend from the saved reports and `more` arguments.
    let recommend = |more: &[&str]| {
        let mut args = vec![
            "recommend",
            "--model",
            "gpt2-124m",
            "--from",
            coll.to_str().unwrap(),
            "--from",
            ddp.to_str().unwrap(),
            "--json",
        ];
        args.extend_from_slice(more);
        local(&args)
    };
    let t0 = Instant::now();
    let o = recommend(&["--price-per-hour", "2.64"]);
    let took = t0.elapsed();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        took.as_secs_f64() < 1.0,
        "recommend from stored measurements took {took:?}"
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["kind"], "recommend");
    assert_eq!(v["backend"], "sim");
    assert_eq!(v["gpus"], 4);
    // The compute time is the measured 1-GPU run, not an estimate.
    assert_eq!(v["compute"]["kind"], "measured");
    // On the seed's PHB box plain DDP misses 85%: the recommendation is a hook and/or accumulation.
    let chosen = v["chosen"].as_str().unwrap();
    assert_ne!(chosen, "base", "{chosen}");
    assert!(v["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| !r["rests_on"].as_str().unwrap().is_empty()));
    // Calibrated on the node's own plain DDP at 4 GPUs (its step, the overlap it realised).
    assert!(
        v["overheads_source"]
            .as_str()
            .unwrap()
            .contains("calibrated on plain DDP's measured step"),
        "{}",
        v["overheads_source"]
    );
    // The node's own 4-GPU runs stand beside the predictions of their variants (one launch
    // each: no standard error), and a reason compares them.
    let rows = v["rows"].as_array().unwrap();
    let measured_of =
        |name: &str| rows.iter().find(|r| r["variant"] == name).unwrap()["measured"].clone();
    for name in ["base", "bf16+accum4"] {
        let m = measured_of(name);
        assert!(m["speedup"].as_f64().unwrap() > 0.0, "{name}: {m}");
        assert!(m.get("uncertainty").is_none(), "one launch: {m}");
    }
    assert!(measured_of("accum2").is_null());
    assert!(v["reasons"].as_array().unwrap().iter().any(|r| r["text"]
        .as_str()
        .unwrap()
        .starts_with("Measured on this node at 4 GPUs")));
    // No nocomm runs, but 120 ms steps: not worth a warning (long steps are not slowed enough).
    let codes = warning_codes;
    assert!(!codes(&v).contains(&"side_by_side_unmeasured".to_string()));

    // The curve is the one the three 4-GPU DDP runs (base, bf16+accum4 and its reference accum4)
    // timed in their own process group, not the sweep.
    let provenance = |v: &serde_json::Value| v["curve"]["provenance"].as_str().unwrap().to_string();
    assert!(
        provenance(&v).contains("by 3 bench ddp run(s) in DDP's own process group"),
        "{}",
        provenance(&v)
    );
    let base_speedup = |v: &serde_json::Value| {
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["variant"] == "base")
            .unwrap()["prediction"]["speedup"]
            .as_f64()
            .unwrap()
    };
    // Those probes three times slower: plain DDP predicted slower (the probes are what is read).
    let mut slow: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&ddp).unwrap()).unwrap();
    for r in slow["results"].as_array_mut().unwrap() {
        let probe = r
            .get_mut("all_reduce_probe")
            .and_then(|p| p.get_mut("samples"));
        for s in probe.and_then(|s| s.as_array_mut()).into_iter().flatten() {
            let t = s["out_of_place"]["time_us"].as_f64().unwrap();
            s["out_of_place"]["time_us"] = (3.0 * t).into();
        }
    }
    let slow_path = d.path().join("ddp-slow-probes.json");
    std::fs::write(&slow_path, slow.to_string()).unwrap();
    let s = recommend_json(&[&coll, &slow_path], &[]);
    assert!(
        base_speedup(&s) < 0.9 * base_speedup(&v),
        "{} against {}",
        base_speedup(&s),
        base_speedup(&v)
    );
    // ... and the sweep, a second look at the link, now parts from them: warned. The simulated
    // probes themselves agree with the sweep: not warned.
    assert!(codes(&s).contains(&"network_moved".to_string()), "{s}");
    assert!(!codes(&v).contains(&"network_moved".to_string()), "{v}");
    // 1-GPU runs only: no probe, so the sweep it is.
    let single = save_a6000_gpt2(d.path(), "ddp1.json", "base", "1", &[]);
    let w = recommend_json(&[&coll, &single], &["--gpus", "4"]);
    assert!(!provenance(&w).contains("bench ddp"), "{}", provenance(&w));
    // Probes at 2 of the node's 4 GPUs: the default is still the 4 GPUs the sweep saw, on the
    // sweep's curve; asked for 2 GPUs, the probes' curve, with the node's price still split four
    // ways.
    let two = save_a6000_gpt2(d.path(), "ddp2.json", "base", "1,2", &[]);
    let w = recommend_json(&[&coll, &two], &[]);
    assert_eq!(w["gpus"], 4);
    assert!(!provenance(&w).contains("bench ddp"), "{}", provenance(&w));
    let w = recommend_json(&[&coll, &two], &["--gpus", "2", "--price-per-hour", "2.64"]);
    assert_eq!(w["gpus"], 2);
    assert!(
        provenance(&w).contains("by 1 bench ddp run(s)"),
        "{}",
        provenance(&w)
    );
    assert!(
        w["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["rests_on"]
                .as_str()
                .unwrap()
                .contains("price $2.64/h for 4 GPUs")),
        "{w}"
    );

    // With nocomm runs at 1 and 4 GPUs (three launches each) the measurement is cited instead.
    let nocomm = save_a6000_gpt2(
        d.path(),
        "nocomm.json",
        "nocomm",
        "1,4",
        &["--repeats", "3"],
    );
    let o = recommend(&["--from", nocomm.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let w: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(!codes(&w).contains(&"side_by_side_unmeasured".to_string()));
    let cited = w["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rests_on"].as_str().unwrap().contains("nocomm at 4 GPUs"))
        .unwrap_or_else(|| panic!("no side-by-side reason: {w}"));
    assert!(
        cited["rests_on"].as_str().unwrap().contains("3 launches"),
        "{cited}"
    );
    // The nocomm rows are inputs, not DDP runs to calibrate on: the same calibration as before.
    assert_eq!(w["overheads_source"], v["overheads_source"]);
}

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
    let o = recommend(&[
        "--model",
        "gpt2-124m",
        "--verify",
        "--repeats",
        "3",
        "--budget",
        "300",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let t = stdout(&o);
    assert!(t.contains("% apart)"), "{t}");
    assert!(t.contains("network during these runs"), "{t}");
    assert!(t.contains("one GPU during these runs: base "), "{t}");
    // ... and how uncertain the measured speedup is, and whether the error stands out of it.
    assert!(t.contains("measured ±"), "{t}");
    let o = recommend(&[
        "--model",
        "gpt2-124m",
        "--verify",
        "--repeats",
        "3",
        "--budget",
        "300",
        "--json",
    ]);
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
        let mut all = vec![
            "--sim",
            "a6000x4-phb",
            "recommend",
            "--model",
            "gpt2-124m",
            "--verify",
        ];
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
    let args = [
        "--sim",
        "h200x2-nvlink",
        "recommend",
        "--model",
        "gpt2-124m",
        "--step-time-ms",
        "40",
        "--json",
    ];
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

#[test]
fn bad_input_is_a_usage_error() {
    for args in [
        vec!["--sim", "h200x2-nvlink", "recommend"],
        vec!["--sim", "h200x2-nvlink", "recommend", "--params", "lots"],
        vec![
            "--sim",
            "h200x2-nvlink",
            "recommend",
            "--model",
            "gpt2-124m",
            "--target-efficiency",
            "2",
        ],
        vec![
            "recommend",
            "--model",
            "gpt2-124m",
            "--from",
            "/nonexistent.json",
        ],
        // A price is a positive, finite number, refused before anything is measured.
        vec![
            "--sim",
            "h200x2-nvlink+hang",
            "recommend",
            "--model",
            "gpt2-124m",
            "--price-per-hour=0",
        ],
        vec![
            "--sim",
            "h200x2-nvlink+hang",
            "recommend",
            "--model",
            "gpt2-124m",
            "--price-per-hour=-2",
        ],
        vec![
            "--sim",
            "h200x2-nvlink+hang",
            "recommend",
            "--model",
            "gpt2-124m",
            "--price-per-hour=inf",
        ],
    ] {
        let o = local(&args);
        assert_eq!(code(&o), 64, "{args:?}: {}", stderr(&o));
        assert_eq!(
            stderr(&o).lines().count(),
            1,
            "one clear line: {}",
            stderr(&o)
        );
    }
}

#[test]
fn a_fresh_node_measures_plain_ddp_first_within_its_budget() {
    // No history, no --from: one 1-GPU launch, then ONE 2-GPU launch of plain DDP, nocomm and
    // the likely changes; the model is calibrated on the measured plain DDP.
    let o = recommend_h200(&["--model", "gpt2-124m", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let own = &v["own_measurements"];
    assert_eq!(own["budget_s"], 120.0, "{own}");
    let launches = own["launches"].as_array().unwrap();
    let gpus: Vec<u64> = launches
        .iter()
        .map(|l| l["gpus"].as_u64().unwrap())
        .collect();
    assert_eq!(gpus, [1, 2], "{own}");
    let two: Vec<&str> = launches[1]["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    assert_eq!(two[..2], ["base", "nocomm"], "{own}");
    assert!(
        v["overheads_source"]
            .as_str()
            .unwrap()
            .starts_with("calibrated on plain DDP's measured step"),
        "{}",
        v["overheads_source"]
    );
    // Every variant of the launch is measured beside its prediction; plain DDP's prediction is
    // its measurement (the model is calibrated on it); the others are predictions.
    let rows = v["rows"].as_array().unwrap();
    let row = |name: &str| rows.iter().find(|r| r["variant"] == name).unwrap().clone();
    for name in &two {
        if *name != "nocomm" {
            assert!(
                row(name)["measured"]["speedup"].as_f64().unwrap() > 0.0,
                "{name}"
            );
        }
    }
    let base = row("base");
    let (p, m) = (
        base["prediction"]["speedup"].as_f64().unwrap(),
        base["measured"]["speedup"].as_f64().unwrap(),
    );
    assert!((p / m - 1.0).abs() < 0.01, "{base}");
    assert!(row("accum8")["measured"].is_null());
    // The text says what ran against the budget, and which rows are predictions only.
    let o = recommend_h200(&["--model", "gpt2-124m"]);
    let t = stdout(&o);
    assert!(
        t.contains("measured here: 1 GPU (base, accum4, bf16)"),
        "{t}"
    );
    assert!(t.contains("of the 120 s budget"), "{t}");
    let accum8 = t.lines().find(|l| l.starts_with("accum8 ")).unwrap();
    assert!(accum8.ends_with("predicted"), "{accum8}");

    // A budget below one launch: no 2-GPU launch, said why, the sweep's curve instead.
    let o = recommend_h200(&["--model", "gpt2-124m", "--budget", "10", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let launches = v["own_measurements"]["launches"].as_array().unwrap();
    assert_eq!(launches.len(), 1, "{v}");
    assert!(
        v["own_measurements"]["skipped"]
            .as_str()
            .unwrap()
            .contains("of the 10 s budget"),
        "{v}"
    );
    assert!(!v["curve"]["provenance"]
        .as_str()
        .unwrap()
        .contains("bench ddp"));

    // A budget that is no number of seconds is a usage error.
    for bad in ["0", "-5", "nan"] {
        let budget = format!("--budget={bad}");
        let o = recommend_h200(&["--model", "gpt2-124m", &budget]);
        assert_eq!(code(&o), 64, "{bad}: {}", stderr(&o));
        assert!(stderr(&o).contains("--budget"), "{}", stderr(&o));
    }
}

/// recommend --sim: its own 1-GPU launch times the model without DDP by default, the
/// recommendation rests on it (DDP's own work a reported figure and the model's term), and the
/// model still reproduces the rows the launch measured; --reference ddp times no plain step.
#[test]
fn recommend_rests_on_one_gpu_without_ddp_from_its_own_launch_or_a_saved_run() {
    let o = recommend_h200(&["--model", "gpt2-124m", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["reference"], "plain", "{v}");
    let own = v["ddp_over_plain"].as_f64().unwrap();
    assert!(own > 1.0, "the simulated DDP's own work at one GPU: {v}");
    assert!(
        warning_codes(&v).contains(&"ddp_own_work".to_string()),
        "{v}"
    );
    let check = &v["model_check"];
    assert_eq!(check["reliable"], true, "{check}");
    assert!(
        check["rows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["error"].as_f64().unwrap().abs() < 0.10),
        "{check}"
    );
    // The compute the model starts from is the step without DDP: the 1-GPU DDP step over
    // DDP's own work, and one GPU's throughput is that step's.
    assert!(
        v["compute"]["detail"]
            .as_str()
            .unwrap()
            .contains("its step without DDP"),
        "{v}"
    );
    // --plain-reference is accepted and changes nothing.
    let o = recommend_h200(&["--model", "gpt2-124m", "--plain-reference", "--json"]);
    let same: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(same["reference"], "plain");
    let o = recommend_h200(&["--model", "gpt2-124m", "--reference", "ddp", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["reference"], "ddp", "{v}");
    assert!(
        v.get("ddp_over_plain").is_none(),
        "no plain blocks timed: {v}"
    );
    assert!(
        !warning_codes(&v).contains(&"ddp_own_work".to_string()),
        "{v}"
    );

    // From a saved `bench ddp` report, which times the plain step by default.
    let dir = tempfile::tempdir().unwrap();
    let saved = save_a6000_gpt2(dir.path(), "ddp.json", "base", "1,4", &[]);
    let v = recommend_json(&[&saved], &["--gpus", "4"]);
    assert_eq!(v["reference"], "plain", "{v}");
    let w = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["code"] == "ddp_own_work")
        .unwrap_or_else(|| panic!("no ddp_own_work warning: {v}"));
    assert!(
        w["rests_on"]
            .as_str()
            .unwrap()
            .starts_with("1-GPU base run of gpt2-124m and the same model without DDP"),
        "{w}"
    );
}

/// A saved `bench ddp` of gpt2-124m at 1 and 4 GPUs run with `--no-broadcast-buffers`.
fn saved_without_buffer_broadcast(dir: &std::path::Path) -> std::path::PathBuf {
    save_a6000_gpt2(dir, "ddp.json", "base", "1,4", &["--no-broadcast-buffers"])
}

#[test]
fn saved_runs_of_another_recipe_are_set_aside_and_said() {
    let dir = tempfile::tempdir().unwrap();
    let saved = saved_without_buffer_broadcast(dir.path());
    let from = |more: &[&str]| {
        let mut args = vec!["--sim", "a6000x4-phb", "recommend", "--model", "gpt2-124m"];
        args.extend(["--from", saved.to_str().unwrap(), "--gpus", "4", "--json"]);
        args.extend_from_slice(more);
        let o = local(&args);
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    // The same recipe: the saved 1-GPU run is the compute, the snippet passes the option.
    let same = from(&["--no-broadcast-buffers"]);
    assert!(!warning_codes(&same).contains(&"other_recipe".to_string()));
    let detail = same["compute"]["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("1-GPU base run of gpt2-124m"),
        "{detail}"
    );
    assert!(same["python"]
        .as_str()
        .unwrap()
        .contains("broadcast_buffers=False"));
    // DDP's defaults: the saved runs measured another training, so recommend measures its own
    // (the simulated node) and says what it set aside.
    let other = from(&[]);
    let w = other["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["code"] == "other_recipe")
        .unwrap_or_else(|| panic!("no other_recipe warning: {other}"));
    let text = w["text"].as_str().unwrap();
    assert!(
        text.starts_with(
            "2 saved run(s) of gpt2-124m ran another recipe (amp bf16, broadcast_buffers=False)"
        ),
        "{text}"
    );
    let detail = other["compute"]["detail"].as_str().unwrap();
    assert!(!detail.starts_with("1-GPU base run"), "{detail}");
    assert!(!other["python"]
        .as_str()
        .unwrap()
        .contains("broadcast_buffers"));
}

/// Where nothing here can measure the recipe asked for, the error names the saved runs it set
/// aside, with the launch's own exit code.
#[test]
fn a_launch_that_fails_after_setting_runs_aside_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let saved = saved_without_buffer_broadcast(dir.path());
    let o = local_env(
        &[
            "recommend",
            "--model",
            "gpt2-124m",
            "--from",
            saved.to_str().unwrap(),
            "--gpus",
            "4",
            "--device",
            "cpu",
        ],
        &[("DDPCHECK_PYTHON", "/nonexistent/python3")],
    );
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("2 saved run(s) of gpt2-124m ran another recipe (amp bf16, broadcast_buffers=False), not used"),
        "{err}"
    );
    assert!(err.contains("/nonexistent/python3 not found"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// The rows a recommend report measured at its GPU count, by name.
fn measured_rows(v: &serde_json::Value) -> Vec<(String, f64)> {
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| {
            let m = r["measured"]["speedup"].as_f64()?;
            Some((r["variant"].as_str().unwrap().to_string(), m))
        })
        .collect()
}

#[test]
fn measurements_overrule_a_model_that_misses_them() {
    // A model that fits: the simulated 2xH200 measures plain DDP and three changes, and the
    // calibrated model reproduces each within 10%. Its choice stands.
    let o = recommend_h200(&["--model", "gpt2-124m", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let check = &v["model_check"];
    assert_eq!(check["reliable"], true, "{check}");
    assert_eq!(check["rows"].as_array().unwrap().len(), 4, "{check}");
    assert!(!warning_codes(&v).contains(&"model_unreliable".to_string()));

    // A model that does not: GPU 1 computes at 60% of its speed, which neither the 1-GPU launch
    // (GPU 0) nor nocomm shows, so every synchronising 2-GPU step is slower than the model,
    // calibrated on what it can see, predicts.
    let args = [
        "--sim",
        "h200x2-nvlink+slow-gpu",
        "recommend",
        "--model",
        "gpt2-124m",
    ];
    let o = local(&[&args[..], &["--json"]].concat());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let check = &v["model_check"];
    assert_eq!(check["reliable"], false, "{check}");
    let missed: Vec<&serde_json::Value> = check["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["missed"] == true)
        .collect();
    assert!(!missed.is_empty(), "{check}");
    // No predicted row over a measured one: the best measured row, by its measurement (none
    // reaches the target on this node).
    let measured = measured_rows(&v);
    let chosen = measured
        .iter()
        .find(|(name, _)| *name == v["chosen"])
        .unwrap_or_else(|| panic!("{} is not a measured row: {measured:?}", v["chosen"]));
    assert!(measured.iter().all(|(_, s)| *s <= chosen.1), "{measured:?}");
    assert_eq!(v["answer"]["measured"], true, "{}", v["answer"]);
    // The text says which measured row the model missed, and by how much.
    let o = local(&args);
    let t = stdout(&o);
    let warning = t
        .lines()
        .find(|l| l.contains("[model_unreliable]"))
        .unwrap_or_else(|| panic!("{t}"));
    for m in &missed {
        let said = format!(
            "{} by {:+.0}%",
            m["variant"].as_str().unwrap(),
            m["error"].as_f64().unwrap() * 100.0
        );
        assert!(warning.contains(&said), "{said}: {warning}");
    }
    assert!(t.contains("Chosen from the measured rows only"), "{t}");
    // The model's own pick, which nobody measured, is what --verify measures.
    let pick = check["unmeasured_pick"].as_str().unwrap();
    assert!(
        warning.contains(pick) && warning.contains("--verify"),
        "{warning}"
    );
    let o = local(&[&args[..], &["--verify", "--json"]].concat());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["verify"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["variant"] == pick),
        "{}",
        v["verify"]
    );
}

#[test]
fn the_budget_bounds_every_launch_and_sweep() {
    // Each kind of measuring recommend does, reported against its budget: the sum of their
    // wall times stays within it.
    let spent = |v: &serde_json::Value| {
        let own = &v["own_measurements"];
        let sum = |key: &str| {
            own[key].as_array().map_or(0.0, |a| {
                a.iter().map(|x| x["seconds"].as_f64().unwrap()).sum()
            })
        };
        (
            sum("launches") + sum("sweeps"),
            own["budget_s"].as_f64().unwrap(),
        )
    };
    for (args, sweeps) in [
        // Measure first, in the default 120 s: the 1-GPU and the 2-GPU launch.
        (vec![], 0),
        // Too little for the 2-GPU launch: the 1-GPU launch and the sweep instead.
        (vec!["--budget", "10"], 1),
        // --quick: the 1-GPU launch and a sweep.
        (vec!["--quick", "--budget", "30"], 1),
        // Three launches of each: the 2-GPU launch's estimate three times over does not fit
        // the default 120 s, so the sweep instead.
        (vec!["--repeats", "3"], 1),
        // --env-ab's sweep counts too.
        (vec!["--quick", "--env-ab", "NCCL_P2P_DISABLE=1"], 2),
    ] {
        let o = recommend_h200(&[&["--model", "gpt2-124m", "--json"][..], &args].concat());
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let (sum, budget) = spent(&v);
        assert!(sum <= budget, "{args:?}: {sum} s of {budget}");
        let own = &v["own_measurements"];
        assert!(
            !own["launches"].as_array().unwrap().is_empty(),
            "{args:?}: {own}"
        );
        let n = own["sweeps"].as_array().map_or(0, Vec::len);
        assert_eq!(n, sweeps, "{args:?}: {own}");
    }
    // A launch that would run past the budget is stopped at its end: a hung one ends with the
    // budget, not with the runner's own deadline of 600 s, and says so.
    let started = Instant::now();
    let o = local(&[
        "--sim",
        "h200x2-nvlink+hang",
        "recommend",
        "--model",
        "gpt2-124m",
        "--budget",
        "3",
    ]);
    assert_eq!(code(&o), 5, "TIMEOUT: {}", stderr(&o));
    assert!(
        started.elapsed().as_secs_f64() < 60.0,
        "{:?}",
        started.elapsed()
    );
    let line = stderr(&o);
    assert!(
        line.contains("--budget 3 s") && line.contains("1-GPU launch"),
        "{line}"
    );
}

/// recommend --compile on a simulated node: its own launches compile, the text says so on a line
/// of its own with the compile time, the snippet compiles the DDP model after wrapping it, and
/// the bucket advice names DDPOptimizer's graph pieces.
#[test]
fn recommend_with_compile_says_so_and_compiles_in_the_snippet() {
    let o = local(&[
        "--sim",
        "h200x2-nvlink",
        "recommend",
        "--model",
        "gpt2-124m",
        "--compile",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("compiled: torch.compile (mode default) after DDP, DDPOptimizer: one graph piece per bucket; compile up to 35.0 s a run"),
        "{text}"
    );
    assert!(text.contains("net = torch.compile(ddp)"), "{text}");
    assert!(text.contains("loss = loss_fn(net, next_batch())"), "{text}");
    assert!(
        text.contains("bucket_cap_mb also sets how many graph pieces torch.compile makes"),
        "{text}"
    );
    let eager = stdout(&local(&[
        "--sim",
        "h200x2-nvlink",
        "recommend",
        "--model",
        "gpt2-124m",
    ]));
    assert!(!eager.contains("torch.compile"), "{eager}");
}

/// The snippet's environment lines of `ddpcheck --sim SIM recommend --model gpt2-124m` under
/// `env`.
fn env_lines_on(sim: &str, env: &[(&str, &str)]) -> Vec<String> {
    let args = ["--sim", sim, "recommend", "--model", "gpt2-124m", "--json"];
    let o = local_env(&args, env);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn consumer_nodes_never_force_p2p_and_disable_it_where_it_hangs() {
    // NVML's policy is off (GPU_NOT_SUPPORTED): nothing to change, and the line says not to
    // force P2P, with why.
    let plain = env_lines_on("rtx4090x4-phb", &[]);
    assert!(
        plain[0].starts_with("# no NCCL environment change"),
        "{plain:?}"
    );
    assert!(
        plain
            .iter()
            .any(|l| l.starts_with("# leave NCCL_P2P_LEVEL unset")
                && l.contains("GPU_NOT_SUPPORTED")),
        "{plain:?}"
    );
    assert!(!plain.iter().any(|l| l.starts_with("export")), "{plain:?}");

    // P2P forced across the host bridge on cards where it hangs: unset it, saying why, and
    // disable P2P, marked unmeasured (no A/B ran).
    let forced = env_lines_on("rtx4090x4-phb+p2p-hang", &[("NCCL_P2P_LEVEL", "SYS")]);
    let unset = forced
        .iter()
        .find(|l| l.starts_with("unset NCCL_P2P_LEVEL"))
        .unwrap_or_else(|| panic!("{forced:?}"));
    assert!(
        unset.contains("never force P2P where NVML's policy is off"),
        "{unset}"
    );
    assert!(unset.contains("GPU_NOT_SUPPORTED"), "{unset}");
    let disable = forced
        .iter()
        .find(|l| l.starts_with("export NCCL_P2P_DISABLE=1"))
        .unwrap_or_else(|| panic!("{forced:?}"));
    assert!(
        disable.contains("hangs or returns wrong values"),
        "{disable}"
    );
    assert!(disable.contains("unmeasured on this node"), "{disable}");

    // A card whose NVML allows P2P over NVLink gets none of it.
    let nvlink = env_lines_on("rtx3090x2-nvlink", &[("NCCL_P2P_LEVEL", "SYS")]);
    assert!(
        !nvlink.iter().any(|l| l.contains("NCCL_P2P_DISABLE")),
        "{nvlink:?}"
    );
}

/// PowerSGD's compression compute from the simulated node's 1-GPU launch (the simulator pays it
/// at world size one): priced, the slow PHB box offers a rank against bf16; without a 1-GPU
/// PowerSGD run, no rank is offered and the answer names the launch that would measure it.
#[test]
fn powersgd_is_offered_from_a_measured_1_gpu_compression_compute() {
    let d = tempfile::tempdir().unwrap();
    let with = save_a6000_gpt2(d.path(), "psgd.json", "base,bf16,powersgd4", "1,4", &[]);
    let w = recommend_json(&[&with], &[]);
    let o = &w["powersgd"];
    assert_eq!(o["against"], "bf16", "{o}");
    let row4 = o["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rank"] == 4)
        .unwrap();
    let compute = row4["compute_s"].as_f64().unwrap();
    assert!(compute > 0.0, "{o}");
    let step = row4["step_s"].as_f64().unwrap();
    let against = o["against_step_s"].as_f64().unwrap();
    assert!(step < against, "{o}");
    assert_eq!(o["rank"], 4, "{o}");
    assert!(o["snippet"]
        .as_str()
        .unwrap()
        .contains("matrix_approximation_rank=4,"));
    assert!(o["rests_on"].as_str().unwrap().contains("powersgd4"), "{o}");
    // The text says it, with its costs.
    let text = local(&[
        "recommend",
        "--model",
        "gpt2-124m",
        "--from",
        with.to_str().unwrap(),
    ]);
    assert_eq!(code(&text), 0, "{}", stderr(&text));
    let text = stdout(&text);
    assert!(text.contains("rank 4 beats bf16:"), "{text}");
    assert!(
        text.contains("numerics: PowerSGD is a biased compressor"),
        "{text}"
    );
    // No 1-GPU PowerSGD run: unmeasured, not offered, and what to run.
    let without = save_a6000_gpt2(d.path(), "plain.json", "base,bf16", "1,4", &[]);
    let w = recommend_json(&[&without], &[]);
    assert!(w["powersgd"]["rank"].is_null(), "{}", w["powersgd"]);
    assert_eq!(
        w["powersgd"]["why_not"],
        "compression compute unmeasured: run bench ddp --gpus 1 --variants base,powersgd4"
    );
}

/// The buffer broadcast is read against one micro-batch's step: a real H200 launch's base run
/// (2.3 ms of broadcast in a 39 ms step, 6%) gives the broadcast_buffers lever, though the same
/// launch's accumulation-4 run, which came later, spreads it over four forwards (under 2%).
#[test]
fn the_buffer_broadcast_is_read_against_the_step_at_accumulation_one() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/results/2026-12-03-h200-plain-reference-and-powersgd"
    );
    let runs = format!("{dir}/powersgd/runs-resnet50/ddp-1gpu.json");
    let curve = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../bench/accuracy/fixtures/2026-11-30-h200x2-1817/mlprep8/mlprep8-curve-hostnet.json"
    );
    let o = local(&[
        "--json",
        "recommend",
        "--from",
        &runs,
        "--from",
        curve,
        "--model",
        "torchvision:resnet50",
        "--micro-batch",
        "64",
        "--gpus",
        "2",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let w = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["code"] == "broadcast_buffers")
        .unwrap_or_else(|| panic!("no broadcast_buffers lever: {}", v["warnings"]));
    let rests_on = w["rests_on"].as_str().unwrap();
    assert!(rests_on.starts_with("the base run"), "{rests_on}");
}

/// A curve given by --from that is slow at DDP's bucket size (two H200s over a host network)
/// makes the 1-GPU launch measure powersgd4 even where this node's own GPUs have NVLink: the
/// link the prediction is for is the given one.
#[test]
fn a_slow_curve_given_by_from_makes_the_one_gpu_launch_measure_powersgd() {
    let curve = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../bench/accuracy/fixtures/2026-11-30-h200x2-1817/mlprep8/mlprep8-curve-hostnet.json"
    );
    let o = recommend_h200(&[
        "--from",
        curve,
        "--model",
        "gpt2-124m",
        "--gpus",
        "2",
        "--json",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let variants = v["own_measurements"]["launches"][0]["variants"].to_string();
    assert!(variants.contains("powersgd4"), "{variants}");
    assert!(
        v["powersgd"]["rows"][2]["compute_s"].as_f64().is_some(),
        "{}",
        v["powersgd"]
    );
}

/// On a fresh node without NVLink (the simulated 4xA6000 box over the host bridge) the 1-GPU
/// launch also runs powersgd4, so the offer is priced with measured compute, and `--verify` runs
/// the offered rank beside bf16; on NVLink (2xH200) it does not.
#[test]
fn a_fresh_node_without_nvlink_measures_powersgd_and_verify_runs_the_offered_rank() {
    let one_gpu_variants = |v: &serde_json::Value| -> Vec<String> {
        v["own_measurements"]["launches"][0]["variants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect()
    };
    let o = local(&[
        "--sim",
        "a6000x4-phb",
        "recommend",
        "--model",
        "gpt2-124m",
        "--verify",
        "--json",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        one_gpu_variants(&v).contains(&"powersgd4".to_string()),
        "{v}"
    );
    assert_eq!(v["powersgd"]["rank"], 4, "{}", v["powersgd"]);
    let verified = &v["verify_powersgd"];
    assert_eq!(verified["variant"], "powersgd4", "{v}");
    assert_eq!(verified["against"], "bf16");
    assert!(verified["measured_step_s"].as_f64().unwrap() > 0.0);
    assert!(verified["against_measured_step_s"].as_f64().unwrap() > 0.0);

    let o = recommend_h200(&["--model", "gpt2-124m", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        !one_gpu_variants(&v).contains(&"powersgd4".to_string()),
        "{v}"
    );
    assert!(v["powersgd"]["rank"].is_null());
}

//! recommend from saved reports: the offline recommendation, runs of another recipe set aside,
//! measurements that overrule the model, the buffer broadcast read at accumulation one.

use super::*;

#[test]
fn recommends_from_saved_reports_offline_in_under_a_second() {
    let d = tempfile::tempdir().unwrap();
    let coll = save(
        d.path(),
        "coll.json",
        &common::words("--sim a6000x4-phb bench collectives --json -e 256M"),
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
    let args = common::words("--sim h200x2-nvlink+slow-gpu recommend --model gpt2-124m");
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

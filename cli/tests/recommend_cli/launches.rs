//! A node's own recommend launches: plain DDP first within the budget, the 1-GPU launch without
//! DDP, the budget's bound, `--compile`.

use super::*;

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
    let o = local(&common::words(
        "--sim h200x2-nvlink+hang recommend --model gpt2-124m --budget 3",
    ));
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
    let o = local(&common::words(
        "--sim h200x2-nvlink recommend --model gpt2-124m --compile",
    ));
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
    let eager = stdout(&local(&common::words(
        "--sim h200x2-nvlink recommend --model gpt2-124m",
    )));
    assert!(!eager.contains("torch.compile"), "{eager}");
}

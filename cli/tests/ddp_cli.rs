//! `ddpcheck bench ddp` on a simulated node: the table, the sweep, the SVG plot, a saved report
//! shown again with `--from`, and bad input.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use common::{code, local, stderr, stdout, Daemon};

#[test]
fn sweep_plots_speedup_with_the_y1_line_and_labels_the_simulation() {
    let d = tempfile::tempdir().unwrap();
    let svg = d.path().join("mlp.svg");
    let o = local(&[
        "--sim",
        "t4x2-pcie",
        "bench",
        "ddp",
        "--sweep",
        "mlp:512,1024,2048,4096",
        "--variants",
        "base,fp16,accum8",
        "--gpus",
        "1,2",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let table = stdout(&o);
    assert!(table.contains("SIMULATED NODE"), "{table}");
    assert!(table.contains("mlp:4096x4"), "{table}");
    // The 2-GPU runs' all-reduce probes, as recommend will read them: 4 models x 3 variants.
    assert!(
        table.contains("all-reduce alone in DDP's process group before the steps (2 GPUs, median of 12 run(s)): 64.0 MiB in "),
        "{table}"
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"), "not an SVG");
    assert!(
        text.contains("SIMULATED"),
        "the plot must say it is simulated"
    );
    assert!(text.contains("y = 1"), "the plot must draw the y = 1 line");
    assert!(
        text.contains("exposed communication"),
        "the plot must label the comm bars"
    );
}

#[test]
fn a_saved_report_is_shown_and_plotted_again() {
    let d = tempfile::tempdir().unwrap();
    let json = d.path().join("ddp.json");
    let o = local(&common::words(
        "--sim a6000x4-phb bench ddp --model gpt2-124m --gpus 1,4 --json",
    ));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    std::fs::write(&json, &o.stdout).unwrap();
    let svg = d.path().join("again.svg");
    let o = local(&[
        "bench",
        "ddp",
        "--from",
        json.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
        // Wide enough that the table's cells stay whole (tests/fits_terminal.rs holds them to 100).
        "--width",
        "250",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("bf16+accum4"), "{}", stdout(&o));
    assert!(svg.exists());
    // Not a bench ddp report: a usage error in one line.
    let o = local(&["bench", "ddp", "--from", "/nonexistent.json"]);
    assert_eq!(code(&o), 64);
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
}

#[test]
fn bad_ddp_requests_are_usage_errors() {
    for args in [
        common::words("--sim h200x2-nvlink bench ddp --variants turbo"),
        common::words("--sim h200x2-nvlink bench ddp --model resnet50"),
        vec!["--sim", "h200x2-nvlink", "bench", "ddp", "--gpus", "1,16"],
        vec!["--sim", "h200x2-nvlink", "bench", "ddp", "--sweep", "cnn:3"],
        vec!["--sim", "h200x2-nvlink", "bench", "ddp", "--env", "FOO=1"],
        vec!["--sim", "h200x2-nvlink", "bench", "ddp", "--repeats", "0"],
        vec!["--sim", "h200x2-nvlink", "bench", "ddp", "--repeats", "21"],
        common::words("--sim h200x2-nvlink bench ddp --min-timed-seconds -1"),
        common::words("--sim h200x2-nvlink bench ddp --min-timed-seconds 61"),
    ] {
        let o = local(&args);
        assert_eq!(code(&o), 64, "{args:?}: {}", stderr(&o));
    }
}

/// `--repeats N`: every configuration launched N times, locally and through the daemon; the
/// table shows the launches and their spread, the JSON each launch's median.
#[test]
fn repeated_launches_are_reported_with_their_spread() {
    let args =
        common::words("bench ddp --model gpt2-124m --variants base,bf16 --gpus 1,2 --repeats 3");
    // Wide enough that the table's cells stay whole (tests/fits_terminal.rs holds them to 100).
    let mut local_args = vec!["--sim", "h200x2-nvlink", "--width", "250"];
    local_args.extend(&args);
    let o = local(&local_args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let table = stdout(&o);
    assert!(table.contains("launches (spread)"), "{table}");
    assert!(table.contains("3 ("), "{table}");
    assert!(!table.contains("nocomm:"), "{table}");
    // Each 2-GPU speedup carries its standard error, explained under the table.
    assert!(table.contains("x ±"), "{table}");
    assert!(table.contains("±: the speedup's standard error"), "{table}");

    let d = Daemon::start(Some("h200x2-nvlink"));
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let o = d.cli(&json_args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = r["results"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for row in rows {
        let launches: Vec<f64> = row["launch_step_medians_s"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(launches.len(), 3, "{row}");
        let mut sorted = launches.clone();
        sorted.sort_by(f64::total_cmp);
        assert!((row["step_time_median_s"].as_f64().unwrap() - sorted[1]).abs() < 1e-12);
        // Only a multi-GPU row has a speedup uncertainty (both sides were launched 3 times).
        let u = row.get("speedup_uncertainty").and_then(|v| v.as_f64());
        assert_eq!(u.is_some(), row["world_size"] == 2, "{row}");
    }
    d.stop();
}

/// `bench ddp` of gpt2-124m on the simulated 2xH200 at 1 and 2 GPUs, with these variants and
/// more arguments.
fn sim_gpt2_bench(variants: &str, more: &[&str]) -> std::process::Output {
    let mut args = common::words("--sim h200x2-nvlink bench ddp --model gpt2-124m --gpus 1,2");
    args.extend_from_slice(&["--variants", variants]);
    args.extend_from_slice(more);
    local(&args)
}

/// Under the table, caveats name what not to take at face value: a saved report whose 2-GPU
/// speedup is above 2 and whose 1-GPU launches landed far apart.
#[test]
fn soft_results_are_named_under_the_table() {
    let o = sim_gpt2_bench("base", &["--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let mut r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // A steady report has no caveats.
    let d = tempfile::tempdir().unwrap();
    let steady = d.path().join("steady.json");
    std::fs::write(&steady, serde_json::to_vec(&r).unwrap()).unwrap();
    let o = local(&["bench", "ddp", "--from", steady.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(!stdout(&o).contains("caveats:"), "{}", stdout(&o));

    // The same report as a noisy machine would give it.
    let rows = r["results"].as_array_mut().unwrap();
    let step1 = rows[0]["step_time_median_s"].as_f64().unwrap();
    rows[0]["launch_step_medians_s"] = serde_json::json!([step1 * 0.8, step1, step1 * 1.2]);
    rows[1]["speedup"] = serde_json::json!(2.3);
    let noisy = d.path().join("noisy.json");
    std::fs::write(&noisy, serde_json::to_vec(&r).unwrap()).unwrap();
    let o = local(&["bench", "ddp", "--from", noisy.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("caveats:"), "{text}");
    assert!(
        text.contains("gpt2-124m base on 1 GPU: its 3 launches landed 40% apart"),
        "{text}"
    );
    assert!(
        text.contains("gpt2-124m base on 2 GPUs: speedup 2.30x is above 2x"),
        "{text}"
    );
}

/// `nocomm` runs DDP with no gradient communication (N GPUs side by side) and the table says
/// what its exposed-comm column then means.
#[test]
fn nocomm_runs_side_by_side_and_is_explained() {
    let o = sim_gpt2_bench("base,nocomm", &["--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let step = |variant: &str, n: u64| {
        r["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["variant"] == variant && x["world_size"] == n)
            .unwrap()["step_time_median_s"]
            .as_f64()
            .unwrap()
    };
    // The simulated GPUs do not slow each other, and nocomm communicates nothing: its 2-GPU step
    // is its 1-GPU step; plain DDP pays for its all-reduce.
    assert!((step("nocomm", 2) - step("nocomm", 1)).abs() < 1e-12);
    assert!(step("base", 2) > step("nocomm", 2));
    let o = sim_gpt2_bench("nocomm", &[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("nocomm: no gradient communication"),
        "{}",
        stdout(&o)
    );
    // The 2-GPU run timed one GPU alone in its own launch too: the table says so, and that one
    // launch gives no noise bound; three give one.
    assert!(
        stdout(&o).contains("gpt2-124m nocomm at 2 GPUs: one GPU alone in the same launch ")
            && stdout(&o).contains("side by side x1.000 (one launch: no noise bound)"),
        "{}",
        stdout(&o)
    );
    let o = sim_gpt2_bench("nocomm", &["--repeats", "3"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("one GPU alone in the same launches")
            && stdout(&o).contains("from 3 launches)"),
        "{}",
        stdout(&o)
    );
    // With a hook it is a usage error, not a run.
    let o = sim_gpt2_bench("nocomm+bf16", &[]);
    assert_eq!(code(&o), 64, "{}", stderr(&o));
}

#[test]
fn a_hooked_variant_is_measured_against_one_gpu_without_its_hook() {
    // Only bf16+accum4 asked for: the 1-GPU reference of its speedup, accum4, runs too.
    let o = sim_gpt2_bench("bf16+accum4", &["--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = doc["results"].as_array().unwrap();
    let row = |variant: &str, n: u64| {
        rows.iter()
            .find(|r| r["variant"] == variant && r["world_size"] == n)
            .unwrap_or_else(|| panic!("no {variant} at {n} GPUs in {rows:?}"))
    };
    // Its throughput without DDP: the DDP step's over DDP's own work at one GPU.
    let one = row("accum4", 1);
    let reference = one["throughput"].as_f64().unwrap() * one["ddp_over_plain"].as_f64().unwrap();
    let hooked = row("bf16+accum4", 2);
    let want = hooked["throughput"].as_f64().unwrap() / reference;
    let got = hooked["speedup"].as_f64().unwrap();
    assert!((got - want).abs() < 1e-9, "{got} against {want}");
    let o = sim_gpt2_bench("bf16", &[]);
    assert!(
        stdout(&o).contains("without its comm hook"),
        "{}",
        stdout(&o)
    );
}

/// `--min-timed-seconds`: short steps are timed for at least that long, long ones for `--steps`;
/// the table says how many steps the runs timed, the JSON each run's count. Without it every run
/// times `--steps` and the table says nothing.
#[test]
fn a_minimum_timed_stretch_lengthens_short_runs_only() {
    let run = |more: &[&str]| {
        let mut args = common::words(
            "--sim h200x2-nvlink bench ddp --sweep mlp:1024,8192 --variants base --steps 40",
        );
        args.extend_from_slice(more);
        let text = local(&args);
        args.push("--json");
        let json = local(&args);
        assert_eq!(code(&text), 0, "{}", stderr(&text));
        let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        let steps: Vec<(f64, u32)> = v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let step = r["step_time_median_s"].as_f64().unwrap();
                let n = u32::try_from(r["timed_steps"].as_u64().unwrap()).unwrap();
                (step, n)
            })
            .collect();
        (stdout(&text), steps)
    };
    let (text, steps) = run(&["--min-timed-seconds", "2"]);
    assert!(text.contains("timed steps: "), "{text}");
    for (step, n) in &steps {
        // At least 2 s of steps, or the 40 asked where those already take longer.
        let timed = step * f64::from(*n);
        assert!(*n >= 40 && (timed >= 2.0 || *n == 40), "{step} s x {n}");
        assert!(
            *n == 40 || timed < 2.0 + step,
            "{step} s x {n}: more than needed"
        );
    }
    assert!(steps.iter().any(|(_, n)| *n > 40), "{steps:?}");
    let (text, steps) = run(&[]);
    assert!(!text.contains("timed steps: "), "{text}");
    assert!(steps.iter().all(|(_, n)| *n == 40), "{steps:?}");
}

#[test]
fn the_plain_reference_is_reported_beside_the_one_gpu_run_and_folded_over_launches() {
    // --plain-reference is accepted and changes nothing: the plain reference is the default.
    let o = sim_gpt2_bench("base,nocomm", &["--plain-reference", "--repeats", "3"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    // The simulated node's DDP adds its own work at one GPU; every launch's round kept.
    assert!(
        text.contains("gpt2-124m base at 1 GPU(s): ")
            && text.contains(
                "DDP's own work +5.0% (ddp_over_plain 1.050, median of 3 interleaved rounds)"
            ),
        "{text}"
    );
    // The plain blocks run in the 1-GPU launch only; nocomm sends nothing and has none.
    assert!(!text.contains("gpt2-124m base at 2 GPU(s): "), "{text}");
    assert!(!text.contains("gpt2-124m nocomm at 1 GPU(s): "), "{text}");
    assert!(
        text.contains("speedup: against 1 GPU without DDP"),
        "{text}"
    );
}

/// Every row of `bench ddp --sim` rests on one GPU without DDP, where the 1-GPU DDP row shows
/// DDP's own work below 1.0; `--reference ddp` times no plain step and rests on one GPU in DDP.
#[test]
fn bench_ddp_rows_say_their_reference_and_the_one_gpu_ddp_row_is_below_one() {
    let rows = |more: &[&str]| {
        let mut args = vec!["--json"];
        args.extend_from_slice(more);
        let o = sim_gpt2_bench("base", &args);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["schema_version"], 3);
        (
            v["reference"].clone(),
            v["results"].as_array().unwrap().clone(),
        )
    };
    let (reference, plain) = rows(&[]);
    assert_eq!(reference, "plain");
    assert!(plain.iter().all(|r| r["reference"] == "plain"), "{plain:?}");
    let one = &plain[0];
    assert_eq!(one["world_size"], 1);
    let speedup = one["speedup"].as_f64().unwrap();
    let own = one["ddp_over_plain"].as_f64().unwrap();
    assert!(speedup < 1.0 && (speedup * own - 1.0).abs() < 1e-9, "{one}");
    let (reference, ddp) = rows(&["--reference", "ddp"]);
    assert_eq!(reference, "ddp");
    assert!(ddp
        .iter()
        .all(|r| r["reference"] == "ddp" && r.get("plain_reference").is_none()));
    assert_eq!(ddp[0]["speedup"].as_f64(), Some(1.0));
    // The same 2-GPU step against the faster plain step: a lower speedup.
    let two = |rows: &[serde_json::Value]| rows[1]["speedup"].as_f64().unwrap();
    assert!(
        (two(&plain) * own - two(&ddp)).abs() < 1e-9,
        "{plain:?} {ddp:?}"
    );
    let o = sim_gpt2_bench("base", &["--reference", "both"]);
    assert_eq!(code(&o), 64, "{}", stderr(&o));
}

/// --compile through a daemon: the mode reaches the (simulated) launch and each run reports its
/// compile time on its own line. A saved report whose model failed to compile shows its eager
/// figures with one line naming the compiler's error, and exits 1 (WARNING).
#[test]
fn compile_reaches_the_daemon_and_a_failed_compile_is_one_line_with_exit_1() {
    let d = Daemon::start(Some("h200x2-nvlink"));
    let args = common::words(
        "bench ddp --model gpt2-124m --gpus 1,2 --variants base --compile-mode max-autotune",
    );
    let text = d.cli(&args);
    assert_eq!(code(&text), 0, "{}", stderr(&text));
    assert!(
        stdout(&text).contains(
            "gpt2-124m base at 2 GPU(s): compiled (torch.compile, mode max-autotune): compile "
        ),
        "{}",
        stdout(&text)
    );
    let o = d.cli(&[&args[..], &["--json"]].concat());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let mut report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let first = &mut report["results"][0];
    assert_eq!(first["compile"]["mode"], "max-autotune");
    assert_eq!(first["recipe"]["compile"], "max-autotune");
    first["compile"]["error"] = "BackendCompilerFailed: backend='inductor' raised:".into();
    first["compile"]["compile_s"] = serde_json::Value::Null;
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("failed.json");
    std::fs::write(&saved, serde_json::to_vec(&report).unwrap()).unwrap();
    let o = local(&["bench", "ddp", "--from", saved.to_str().unwrap()]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let lines: Vec<String> = stderr(&o)
        .lines()
        .filter(|l| l.starts_with("ddpcheck: "))
        .map(str::to_string)
        .collect();
    assert_eq!(
        lines,
        ["ddpcheck: torch.compile failed on gpt2-124m (base at 1 GPU(s)): BackendCompilerFailed: backend='inductor' raised:; that run's figures are eager"]
    );
    assert!(
        stdout(&o).contains("failed: BackendCompilerFailed"),
        "{}",
        stdout(&o)
    );
    d.stop();
}

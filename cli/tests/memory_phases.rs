//! Each wrapper's activations measured by its own 1-GPU step read at its phases, end to end on a
//! simulated node: the simulator reads each step at its phases as ddpcheck's memory model
//! predicts them, and `ddpcheck memory --from` and `recommend --from` take them back as each
//! wrapper's own measured activations, scaled linearly to the micro-batch asked.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use common::{code, local, stderr, stdout};

const SIM: &str = "a6000x4-phb";

fn json(args: &[&str]) -> serde_json::Value {
    let o = local(args);
    assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

/// A simulated 1-GPU launch of gpt2-124m under `variants` at micro-batch 4, saved in `dir`.
fn launch(dir: &std::path::Path, variants: &str) -> String {
    let line = format!("--sim {SIM} --json bench ddp --model gpt2-124m --variants {variants} --gpus 1 --micro-batch 4");
    let v = json(&common::words(&line));
    for r in v["results"].as_array().unwrap() {
        assert!(
            r["memory_phases"]["wrapped"]["after_forward"].as_u64() > Some(0),
            "{r}"
        );
    }
    let path = dir.join("report.json");
    std::fs::write(&path, v.to_string()).unwrap();
    path.to_str().unwrap().to_string()
}

fn memory(report: &str, micro_batch: &str) -> serde_json::Value {
    json(&[
        "--json",
        "memory",
        "--model",
        "gpt2-124m",
        "--micro-batch",
        micro_batch,
        "--gpu-memory-gib",
        "48",
        "--from",
        report,
    ])
}

/// The measured activations of `wrapper` in a plan's model, bytes and words.
fn measured(plan: &serde_json::Value, wrapper: &str) -> Option<(u64, String)> {
    let m = plan["model"]["measured"].as_array()?;
    let x = m.iter().find(|x| x["wrapper"] == wrapper)?;
    let a = &x["activations"];
    assert_eq!(a["kind"], "measured", "{x}");
    Some((a["bytes"].as_u64()?, a["what"].as_str()?.to_string()))
}

#[test]
fn memory_takes_each_wrappers_activations_from_its_own_phases_scaled_to_the_micro_batch() {
    let dir = tempfile::tempdir().unwrap();
    let report = launch(dir.path(), "base,replicate,fsdp");
    let at_4 = memory(&report, "4");
    let at_8 = memory(&report, "8");
    for w in ["ddp", "replicate", "fsdp"] {
        let (b4, what4) = measured(&at_4["plan"], w).expect(w);
        let (b8, what8) = measured(&at_8["plan"], w).expect(w);
        assert!(what4.starts_with("MEASURED at micro-batch 4"), "{what4}");
        assert!(!what4.contains("scaled"), "{what4}");
        assert!(
            what8.contains("scaled linearly to micro-batch 8"),
            "{what8}"
        );
        assert!(b8.abs_diff(2 * b4) <= 1, "{w}: {b4} at 4, {b8} at 8");
    }
    // fsdp-noreshard did not run: nothing is carried to it from the wrappers that did.
    assert!(measured(&at_8["plan"], "fsdp-noreshard").is_none());
    // Each run is checked at the micro-batch it ran, from its own phases: the simulator's peak
    // is the model's, so reading the phases back gives it to the byte.
    let checks = at_8["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 3);
    for c in checks {
        assert_eq!(c["from_measured_bytes"], c["peak_bytes"], "{c}");
    }
}

#[test]
fn the_text_names_each_wrappers_own_source() {
    let dir = tempfile::tempdir().unwrap();
    let report = launch(dir.path(), "base,fsdp");
    let o = local(&[
        "memory",
        "--model",
        "gpt2-124m",
        "--micro-batch",
        "8",
        "--gpu-memory-gib",
        "48",
        "--from",
        &report,
    ]);
    let text = stdout(&o);
    assert!(
        text.contains("activations, each wrapper its own:"),
        "{text}"
    );
    let line = |w: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("{w}: ")))
            .unwrap_or_else(|| panic!("{w}: {text}"))
            .to_string()
    };
    assert!(line("fsdp").contains("MEASURED at micro-batch 4"), "{text}");
    assert!(line("replicate").contains("ESTIMATED"), "{text}");
}

#[test]
fn recommend_gates_memory_on_each_wrappers_own_phases_from_a_report() {
    let dir = tempfile::tempdir().unwrap();
    let report = launch(dir.path(), "base,replicate");
    let v = json(&[
        "--sim",
        SIM,
        "--json",
        "recommend",
        "--model",
        "gpt2-124m",
        "--micro-batch",
        "8",
        "--from",
        &report,
    ]);
    let plan = &v["memory"];
    let (_, what) = measured(plan, "replicate").expect("replicate measured");
    assert!(what.contains("scaled linearly to micro-batch 8"), "{what}");
    assert!(measured(plan, "fsdp").is_none(), "fsdp did not run");
}

#[test]
fn recommends_own_launch_gives_its_wrappers_their_activations() {
    let v = json(&["--sim", SIM, "--json", "recommend", "--model", "gpt2-124m"]);
    assert!(v.get("own_measurements").is_some(), "recommend launched");
    let (_, what) = measured(&v["memory"], "ddp").expect("the 1-GPU launch's DDP run");
    assert!(what.starts_with("MEASURED at micro-batch 8"), "{what}");
}

//! Tests of the embedded benchmark package run by python3 without torch: it compiles, reports
//! a missing torch and a bad config as JSON, its helpers compute what they claim, and every Python
//! file of the package is embedded.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ddpcheck_core::ddp::DdpVariant;
use ddpcheck_core::ProbeError;

use super::super::*;
use super::{
    embedded_script, python3, read, request, run_script, succeeds, torch_importable,
    with_script_module,
};
use crate::RealConfig;

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
    succeeds(
        Command::new(py)
            .arg("-m")
            .arg("py_compile")
            .args(package_files().iter().map(|(name, _)| folder.join(name)))
            .arg(&probe),
    );
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

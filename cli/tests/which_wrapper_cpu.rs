//! Which wrapper at CPU ranks, from saved reports alone: `recommend --device cpu --from` the
//! reports of docs/results/2026-12-06-cpu2-fsdp2-step-model/ (gloo curves between two CPU
//! ranks, the FSDP2 wrappers and plain DDP at one and two ranks, `nocomm` side by side) weighs
//! `replicate()`, `fully_shard` and `fsdp-noreshard` beside DDP without launching anything, each
//! predicted by FSDP2's model as CPU ranks run it and overruled by its measured step.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use common::{code, local_env, repo_root, stderr, stdout};
use ddpcheck_core::collective::Collective;
use ddpcheck_core::ddp::{DdpResult, DdpVariant, Wrapper};
use ddpcheck_core::report::{BenchCollectivesReport, DdpReport};
use ddpcheck_core::step_time::fsdp::{
    predict_fsdp2, Fsdp2Curves, Fsdp2Inputs, Fsdp2Units, Overlap,
};
use ddpcheck_core::step_time::op_curve::OpCurve;
use ddpcheck_core::step_time::{side_by_side, LinkCurve};

const DIR: &str = "docs/results/2026-12-06-cpu2-fsdp2-step-model";
const MODEL: &str = "decoder:6,512,8,128,4000,llama";
const FILES: [&str; 4] = [
    "curves-cpu2.json",
    "decoder-6x512.json",
    "decoder-6x512-nocomm.json",
    "decoder-6x512-ddp.json",
];

fn path(file: &str) -> String {
    repo_root().join(DIR).join(file).display().to_string()
}

fn read<T: serde::de::DeserializeOwned>(file: &str) -> T {
    serde_json::from_str(&std::fs::read_to_string(path(file)).unwrap()).unwrap()
}

fn recommend(json: bool) -> std::process::Output {
    let paths: Vec<String> = FILES.iter().map(|f| path(f)).collect();
    let mut args = vec![
        if json { "--json" } else { "--width=300" },
        "recommend",
        "--device",
        "cpu",
        "--amp",
        "none",
        "--model",
        MODEL,
        "--gpus",
        "2",
        "--micro-batch",
        "2",
    ];
    for p in &paths {
        args.extend(["--from", p.as_str()]);
    }
    // No interpreter: any launch would fail, so the answer rests on the reports alone.
    let o = local_env(&args, &[("DDPCHECK_PYTHON", "/nonexistent/python3")]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    o
}

/// FSDP2's step for `w` at two CPU ranks from the same reports, through core's model.
fn expected(w: Wrapper, plain: f64, runs: &[DdpResult], rows: &[&DdpResult]) -> f64 {
    let curves: BenchCollectivesReport = read("curves-cpu2.json");
    let sweep = |op| {
        let s = curves.runs[0]
            .run
            .sweeps
            .iter()
            .find(|s| s.op == op)
            .unwrap();
        OpCurve::from_sweep(s).unwrap()
    };
    let all_reduce = curves.runs[0]
        .run
        .sweeps
        .iter()
        .find(|s| s.op == Collective::AllReduce);
    let c = Fsdp2Curves {
        all_gather: Some(sweep(Collective::AllGather)),
        reduce_scatter: Some(sweep(Collective::ReduceScatter)),
        all_reduce: all_reduce.map(|s| LinkCurve::from_sweep(s).unwrap()),
    };
    let one = runs
        .iter()
        .find(|r| r.world_size == 1 && r.variant.parse::<DdpVariant>().unwrap().wrapper() == w)
        .unwrap();
    let units = Fsdp2Units::from_layout(runs[0].param_layout.as_ref().unwrap());
    let mut i = Fsdp2Inputs::new(w, 2, units, plain);
    i.param_bytes = 4.0;
    i.own_one_gpu_s =
        one.step_time_median_s - one.plain_reference.as_ref().unwrap().step_time_median_s;
    i.overlap = Overlap::Serial;
    i.side_by_side = side_by_side(rows, &one.model, 2, 2).unwrap().counted();
    predict_fsdp2(&i, &c).unwrap().step_s
}

#[test]
fn cpu_ranks_weigh_the_wrappers_from_saved_reports_and_the_measured_steps_overrule() {
    let v: serde_json::Value = serde_json::from_str(&stdout(&recommend(true))).unwrap();
    let wrappers: DdpReport = read("decoder-6x512.json");
    let nocomm: DdpReport = read("decoder-6x512-nocomm.json");
    let ddp: DdpReport = read("decoder-6x512-ddp.json");
    let rows: Vec<&DdpResult> = wrappers
        .results
        .iter()
        .chain(&nocomm.results)
        .chain(&ddp.results)
        .collect();
    let plain = v["single_gpu"]["step_s"].as_f64().unwrap();
    let got = v["wrapper_rows"].as_array().unwrap();
    let names: Vec<&str> = got.iter().map(|r| r["wrapper"].as_str().unwrap()).collect();
    // HSDP needs four ranks: two is refused, not weighed.
    assert_eq!(names, ["replicate", "fsdp-noreshard", "fsdp"], "{v}");
    for row in got {
        let w: Wrapper = serde_json::from_value(row["wrapper"].clone()).unwrap();
        let two = wrappers
            .results
            .iter()
            .find(|r| r.world_size == 2 && r.variant.parse::<DdpVariant>().unwrap().wrapper() == w)
            .unwrap();
        assert_eq!(
            row["measured_step_s"].as_f64(),
            Some(two.step_time_median_s)
        );
        assert_eq!(row["measured"], true);
        let predicted = row["predicted_step_s"].as_f64().unwrap();
        let want = expected(w, plain, &wrappers.results, &rows);
        assert!(
            (predicted - want).abs() < 1e-9,
            "{w}: {predicted} against {want}"
        );
        // The speedup rests on the measured step, not the prediction.
        let speedup = row["speedup"].as_f64().unwrap();
        assert!((speedup - 2.0 * plain / two.step_time_median_s).abs() < 1e-9);
    }
    // DDP's measured speedup beats every wrapper's measured one here: DDP stays.
    assert_eq!(v["chosen"], "base", "{}", v["summary"]);
    assert!(
        v["summary"].as_str().unwrap().contains("(measured)"),
        "{}",
        v["summary"]
    );
    // Said in the ranks' own words.
    let text = stdout(&recommend(false));
    assert!(
        text.contains("FSDP2's wrappers at 2 CPU ranks (one CPU rank's plain step = 1×)"),
        "{text}"
    );
    assert!(text.contains("own work at one CPU rank: replicate measured at world size one"));
}

//! FSDP2's step model at two CPU ranks over gloo: each wrapper's step at two ranks predicted from
//! the plain step and its own work at one rank (the same launches) and the curves `bench
//! collectives --device cpu` measured between the two ranks, against the step measured
//! (docs/results/2026-12-06-cpu2-fsdp2-step-model/).

use crate::ddp::rounds_noise_bound;
use crate::ddp::{DdpResult, DdpVariant, Wrapper};
use crate::report::{BenchCollectivesReport, DdpReport};

use super::crowd::side_by_side;
use super::fsdp::{predict_fsdp2, Fsdp2Curves, Fsdp2Inputs, Fsdp2Units, Overlap};
use super::op_curve::OpCurve;
use super::LinkCurve;
use crate::collective::Collective;

const CURVES: &str =
    include_str!("../../../docs/results/2026-12-06-cpu2-fsdp2-step-model/curves-cpu2.json");
/// Each model's launches: (name, the wrappers at one and two ranks, `nocomm` at two ranks
/// launched four times).
const REPORTS: [(&str, &str, &str); 2] = [
    (
        "decoder 4x256",
        include_str!("../../../docs/results/2026-12-06-cpu2-fsdp2-step-model/decoder-4x256.json"),
        include_str!(
            "../../../docs/results/2026-12-06-cpu2-fsdp2-step-model/decoder-4x256-nocomm.json"
        ),
    ),
    (
        "decoder 6x512",
        include_str!("../../../docs/results/2026-12-06-cpu2-fsdp2-step-model/decoder-6x512.json"),
        include_str!(
            "../../../docs/results/2026-12-06-cpu2-fsdp2-step-model/decoder-6x512-nocomm.json"
        ),
    ),
];

fn curves() -> Fsdp2Curves {
    let r: BenchCollectivesReport = serde_json::from_str(CURVES).unwrap();
    assert!(r.header.on_cpu_ranks(), "the curves are CPU ranks'");
    let sweep = |op: Collective| {
        r.runs[0]
            .run
            .sweeps
            .iter()
            .find(|s| s.op == op && s.ranks == 2)
            .unwrap_or_else(|| panic!("no {} sweep at 2 ranks", op.name()))
    };
    Fsdp2Curves {
        all_gather: Some(OpCurve::from_sweep(sweep(Collective::AllGather)).unwrap()),
        reduce_scatter: Some(OpCurve::from_sweep(sweep(Collective::ReduceScatter)).unwrap()),
        all_reduce: Some(LinkCurve::from_sweep(sweep(Collective::AllReduce)).unwrap()),
    }
}

/// One wrapper's runs of a report: at one rank (with its plain reference) and at two.
struct Pair<'a> {
    wrapper: Wrapper,
    one: &'a DdpResult,
    two: &'a DdpResult,
}

fn pairs(report: &DdpReport) -> Vec<Pair<'_>> {
    let at = |v: &str, world: u32| {
        report
            .results
            .iter()
            .find(|r| r.variant == v && r.world_size == world)
    };
    ["fsdp-noreshard", "fsdp", "replicate"]
        .into_iter()
        .map(|v| Pair {
            wrapper: v.parse::<DdpVariant>().unwrap().wrapper(),
            one: at(v, 1).unwrap_or_else(|| panic!("no {v} at one rank")),
            two: at(v, 2).unwrap_or_else(|| panic!("no {v} at two ranks")),
        })
        .collect()
}

/// How far the measured step and the inputs moved by their own noise, seconds: the two-rank
/// launches' range, the own work's Student's t bound over its interleaved rounds at one rank,
/// and how far the plain step moved between the wrappers' one-rank launches.
fn tolerance_s(p: &Pair<'_>, plain_spread_s: f64) -> f64 {
    let plain = p.one.plain_reference.as_ref().unwrap();
    let own = rounds_noise_bound(&plain.rounds).unwrap() * p.one.step_time_median_s;
    let (lo, hi) = p.two.launch_range().unwrap();
    (hi - lo) + own + plain_spread_s
}

/// Where the prediction misses by more than the noise, and why: each must still miss (a model
/// that learns it moves it out of here).
const KNOWN_MISSES: [(&str, Wrapper, &str); 1] = [(
    "decoder 4x256",
    Wrapper::Fsdp,
    "resharding's copies between CPU ranks (-11.0%): torch's profiler \
     (bench/experiments/fsdp2-cpu-ranks-profile.py) puts fsdp's aten::copy_ at two ranks at \
     371 ms over six steps against fsdp-noreshard's 65 ms (54 and 47 at one rank), and each \
     block's gather region at about 5 ms against the curve's 2.1 ms for its 4.2 MB; the model \
     prices a gather by the collective's curve alone, and fsdp gathers every block twice",
)];

#[test]
fn two_cpu_ranks_fsdp2_steps_from_the_gloo_curves() {
    let c = curves();
    for (name, text, nocomm) in REPORTS {
        let report: DdpReport = serde_json::from_str(text).unwrap();
        let nocomm: DdpReport = serde_json::from_str(nocomm).unwrap();
        // The newest nocomm run last: side_by_side prefers it.
        let rows: Vec<&DdpResult> = report.results.iter().chain(&nocomm.results).collect();
        let pairs = pairs(&report);
        let plains: Vec<f64> = pairs
            .iter()
            .map(|p| p.one.plain_reference.as_ref().unwrap().step_time_median_s)
            .collect();
        let plain_spread = plains.iter().copied().fold(f64::MIN, f64::max)
            - plains.iter().copied().fold(f64::MAX, f64::min);
        for p in &pairs {
            let layout = p.one.param_layout.as_ref().unwrap();
            let plain = p.one.plain_reference.as_ref().unwrap().step_time_median_s;
            let mut i = Fsdp2Inputs::new(p.wrapper, 2, Fsdp2Units::from_layout(layout), plain);
            i.param_bytes = 4.0; // --amp none: parameters gathered in fp32
            i.own_one_gpu_s = p.one.step_time_median_s - plain;
            let beside = predict_fsdp2(&i, &c).unwrap();
            let sbs = side_by_side(&rows, &p.one.model, p.one.micro_batch, 2).unwrap();
            assert_eq!(
                sbs.nocomm.launch_step_medians_s.len(),
                4,
                "the four-launch nocomm run"
            );
            i.overlap = Overlap::on(p.two.device);
            i.side_by_side = sbs.counted();
            let predicted = predict_fsdp2(&i, &c).unwrap();
            println!(
                "  beside: {:.1} ms; side by side x{:.3} (counted x{:.3})",
                beside.step_s * 1e3,
                sbs.slowdown,
                sbs.counted()
            );
            let measured = p.two.step_time_median_s;
            let err = predicted.step_s - measured;
            let tol = tolerance_s(p, plain_spread);
            println!(
                "{name} {}: predicted {:.1} ms (plain {:.1}, own {:+.1}, exposed {:.1}; gathers {:.1}, reductions {:.1}), measured {:.1} ms ({:+.1}%), tolerance {:.1} ms",
                p.wrapper,
                predicted.step_s * 1e3,
                plain * 1e3,
                i.own_one_gpu_s * 1e3,
                predicted.exposed_s * 1e3,
                predicted.gather_s * 1e3,
                predicted.reduce_s * 1e3,
                measured * 1e3,
                err / measured * 100.0,
                tol * 1e3
            );
            let known = KNOWN_MISSES
                .iter()
                .any(|(n, w, _)| *n == name && *w == p.wrapper);
            assert_eq!(
                err.abs() > tol,
                known,
                "{name} {}: {err} against {tol}",
                p.wrapper
            );
            // Planted: the GPU's overlap at CPU ranks (collectives beside the compute, no
            // side-by-side slowdown) misses every row by more than the noise.
            assert!(
                (beside.step_s - measured).abs() > tol,
                "{name} {}: the GPU's overlap came within the noise",
                p.wrapper
            );
        }
    }
}

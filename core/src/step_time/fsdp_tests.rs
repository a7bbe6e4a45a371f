//! FSDP2's step model: its timeline on invented curves, and its world-size-one prediction
//! against one H100's launches (docs/results/2026-12-06-h100-fsdp2-variants/) with that VM's
//! own one-GPU all-gather curve (artifacts/tests/fixtures/captured/2026-12-06-h100-vm/).

use crate::collective::{Collective, Sample, Sweep, Timing};
use crate::ddp::{DdpVariant, Wrapper};
use crate::num::ToF64;
use crate::report::DdpReport;

use super::fsdp::{predict_fsdp2, Fsdp2Curves, Fsdp2Inputs, Fsdp2Units};
use super::fsdp_own::{one_gpu_own, regather_copies_s};
use super::op_curve::OpCurve;
use super::LinkCurve;

/// nccl-tests' table rows (size, count, type, redop, root, then time, algbw, busbw, #wrong
/// out-of-place and in-place) as a sweep.
fn nccl_tests(text: &str, op: Collective, ranks: u32) -> Sweep {
    let samples = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let bytes: u64 = f.first()?.parse().ok()?;
            let at = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
            let timing = |t: f64| Timing::from_time(op, ranks, bytes, t, Some(0));
            Some(Sample {
                bytes,
                count: f.get(1)?.parse().ok()?,
                dtype: "float".into(),
                out_of_place: timing(at(5)?),
                in_place: at(9).map(timing),
            })
        })
        .collect();
    Sweep {
        op,
        ranks,
        redop: "none".into(),
        root: -1,
        samples,
    }
}

fn h100_copy_curve() -> OpCurve {
    let text = include_str!(
        "../../../artifacts/tests/fixtures/captured/2026-12-06-h100-vm/all_gather_perf.txt"
    );
    OpCurve::from_sweep(&nccl_tests(text, Collective::AllGather, 1)).unwrap()
}

/// Each wrapper's run of one report: (wrapper, step, plain step of its rounds, rounds' ratios).
struct Run {
    wrapper: Wrapper,
    step: f64,
    plain: f64,
    ratios: Vec<f64>,
}

fn runs(report: &str) -> (Fsdp2Units, Vec<Run>) {
    let r: DdpReport = serde_json::from_str(report).unwrap();
    let layout = r.results[0].param_layout.as_ref().unwrap();
    let runs = r
        .results
        .iter()
        .map(|x| {
            let p = x.plain_reference.as_ref().unwrap();
            Run {
                wrapper: x.variant.parse::<DdpVariant>().unwrap().wrapper(),
                step: x.step_time_median_s,
                plain: p.step_time_median_s,
                ratios: p.rounds.iter().map(|[w, q]| w / q).collect(),
            }
        })
        .collect();
    (Fsdp2Units::from_layout(layout), runs)
}

const REPORTS: [(&str, &str); 3] = [
    (
        "llama-12x1024",
        include_str!("../../../docs/results/2026-12-06-h100-fsdp2-variants/llama-small.json"),
    ),
    (
        "llama8b 2 layers",
        include_str!("../../../docs/results/2026-12-06-h100-fsdp2-variants/llama8b-2layers.json"),
    ),
    (
        "llama8b 4 layers",
        include_str!("../../../docs/results/2026-12-06-h100-fsdp2-variants/llama8b-4layers.json"),
    ),
];

/// The spread of one run's own work measured round by round in its launch: Student's t (95%,
/// 7 degrees of freedom for 8 rounds) times the standard error of the rounds' ratios, in
/// seconds of its plain step.
fn noise_s(run: &Run) -> f64 {
    let n = run.ratios.len().to_f64();
    let mean = run.ratios.iter().sum::<f64>() / n;
    let var = run.ratios.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n - 1.0);
    2.365 * (var / n).sqrt() * run.plain
}

/// The launch's own spread of the plain step: the same model without a wrapper, timed beside
/// each run of one launch, moves by this much from run to run (largest less smallest median).
fn plain_spread_s(runs: &[Run]) -> f64 {
    let p = runs.iter().map(|r| r.plain);
    p.clone().fold(f64::MIN, f64::max) - p.fold(f64::MAX, f64::min)
}

/// Where the prediction misses by more than the launch's noise, and why: each must still miss
/// (a model that learns it moves it out of here).
const KNOWN_MISSES: [(&str, Wrapper, &str); 2] = [
    ("llama8b 2 layers", Wrapper::Fsdp, OVERLAP),
    ("llama8b 4 layers", Wrapper::Fsdp, OVERLAP),
];
const OVERLAP: &str = "the second gather's copies of 537 MB blocks partly overlap the backward, \
                       which the model counts whole (+0.9% and +1.8% of the step)";

/// World size one: `fsdp`'s step predicted from `fsdp-noreshard`'s own work in the same launch
/// plus the copies of the second gather on the VM's one-GPU all-gather curve, against `fsdp`
/// measured; `replicate()` from `fsdp-noreshard` (both gather once). The tolerance is the
/// launch's noise: each of the two runs' own work over its 8 interleaved rounds (Student's t
/// bound), plus how far the plain step itself moved between the runs of the launch.
#[test]
fn one_h100_fsdp_step_from_noreshard_and_the_copy_curve() {
    let copy = h100_copy_curve();
    for (name, report) in REPORTS {
        let (units, runs) = runs(report);
        let of = |w: Wrapper| runs.iter().find(|r| r.wrapper == w).unwrap();
        let base = of(Wrapper::FsdpNoReshard);
        let measured = [(Wrapper::FsdpNoReshard, base.step - base.plain)];
        for w in [Wrapper::Fsdp, Wrapper::Replicate] {
            let run = of(w);
            let own = one_gpu_own(w, &measured, &units, 2.0, Some(&copy)).unwrap();
            let mut i = Fsdp2Inputs::new(w, 1, units.clone(), run.plain);
            i.own_one_gpu_s = own.seconds;
            let p = predict_fsdp2(&i, &Fsdp2Curves::default()).unwrap();
            let err = p.step_s - run.step;
            let tol = noise_s(run) + noise_s(base) + plain_spread_s(&runs);
            println!(
                "{name} {w}: predicted {:.2} ms, measured {:.2} ms ({:+.1}%), tolerance {:.2} ms",
                p.step_s * 1e3,
                run.step * 1e3,
                err / run.step * 100.0,
                tol * 1e3
            );
            let known = KNOWN_MISSES.iter().any(|(n, k, _)| *n == name && *k == w);
            assert_eq!(err.abs() > tol, known, "{name} {w}: {err} against {tol}");
        }
    }
}

#[test]
fn regather_copies_scale_with_the_blocks_and_the_curve() {
    let copy = h100_copy_curve();
    let one = Fsdp2Units::uniform(0, 1, 1 << 28);
    let four = Fsdp2Units::uniform(0, 4, 1 << 28);
    let a = regather_copies_s(&one, 2.0, &copy);
    // 256 Mi parameters gathered in bf16 are 512 MiB: 3.5 copies at the curve's 357.92 us.
    assert!((a - 3.5 * 357.92e-6).abs() < 1e-9, "{a}");
    assert!((regather_copies_s(&four, 2.0, &copy) - 4.0 * a).abs() < 1e-12);
    // No cast without bf16 parameters: two copies of the fp32 bytes.
    let fp32 = regather_copies_s(&Fsdp2Units::uniform(0, 1, 1 << 27), 4.0, &copy);
    assert!((fp32 - 2.0 * 357.92e-6).abs() < 1e-9);
}

/// A curve at `ranks` GPUs of `gbps` (bytes per ns) with no latency: two points a decade apart.
fn linear(op: Collective, ranks: u32, gbps: f64) -> OpCurve {
    let at = |bytes: u64| super::op_curve::OpPoint {
        bytes,
        out_of_place_s: bytes.to_f64() / (gbps * 1e9),
        in_place_s: Some(bytes.to_f64() / (gbps * 1e9)),
    };
    OpCurve {
        op,
        ranks,
        points: vec![at(1 << 20), at(1 << 30)],
    }
}

fn curves(gbps: f64) -> Fsdp2Curves {
    Fsdp2Curves {
        all_gather: Some(linear(Collective::AllGather, 4, gbps)),
        reduce_scatter: Some(linear(Collective::ReduceScatter, 4, gbps)),
        all_reduce: Some(LinkCurve::flat(2, gbps, 0.0).unwrap()),
    }
}

fn at(w: Wrapper, world: u32, plain_s: f64, c: &Fsdp2Curves) -> super::fsdp::Fsdp2Prediction {
    let units = Fsdp2Units::uniform(500 << 20, 8, 50 << 20);
    predict_fsdp2(&Fsdp2Inputs::new(w, world, units, plain_s), c).unwrap()
}

#[test]
fn resharding_gathers_the_blocks_twice_and_replicate_only_all_reduces() {
    let c = curves(10.0);
    let (nr, fs, rep) = (
        at(Wrapper::FsdpNoReshard, 4, 1.0, &c),
        at(Wrapper::Fsdp, 4, 1.0, &c),
        at(Wrapper::Replicate, 4, 1.0, &c),
    );
    // 500 Mi parameters in bf16 over the curve: the root and 8 blocks once, the blocks again.
    let once = (500u64 << 21).to_f64() / 10e9;
    assert!((nr.gather_s - once).abs() < 1e-9, "{}", nr.gather_s);
    let blocks = (400u64 << 21).to_f64() / 10e9;
    assert!((fs.gather_s - once - blocks).abs() < 1e-9);
    assert_eq!(rep.gather_s, 0.0);
    // replicate all-reduces the fp32 gradients over 4 GPUs: 2·3/4 of them over the link.
    let ar = (500u64 << 22).to_f64() * 1.5 / 10e9;
    assert!((rep.reduce_s - ar).abs() < 1e-9, "{}", rep.reduce_s);
}

#[test]
fn long_compute_hides_all_but_each_passs_first_gather_and_the_last_reduction() {
    let c = curves(100.0);
    let p = at(Wrapper::Fsdp, 4, 10.0, &c);
    // Forward waits for the root, backward for the last block gathered again; the root's
    // gradients, reduced last, end the step.
    let root = (100u64 << 21).to_f64() / 100e9;
    let last_block = (50u64 << 21).to_f64() / 100e9;
    let last_reduce = (100u64 << 22).to_f64() / 100e9;
    let exposed = root + last_block + last_reduce;
    assert!((p.exposed_s - exposed).abs() < 1e-9, "{}", p.exposed_s);
    let nr = at(Wrapper::FsdpNoReshard, 4, 10.0, &c);
    assert!(
        (nr.exposed_s - root - last_reduce).abs() < 1e-9,
        "{}",
        nr.exposed_s
    );
    // A step of nothing but communication exposes all of it.
    let q = at(Wrapper::Fsdp, 4, 1e-9, &c);
    assert!((q.exposed_s - q.gather_s - q.reduce_s).abs() < 1e-6);
    assert!(q.speedup < p.speedup && p.efficiency < 1.0);
}

#[test]
fn a_missing_curve_or_mesh_is_said_not_guessed() {
    let mut c = curves(10.0);
    c.all_reduce = None;
    let units = Fsdp2Units::uniform(1 << 20, 2, 1 << 20);
    let hsdp = predict_fsdp2(&Fsdp2Inputs::new(Wrapper::Hsdp, 4, units.clone(), 1.0), &c);
    assert!(format!("{}", hsdp.unwrap_err()).contains("all_reduce"));
    let odd = predict_fsdp2(&Fsdp2Inputs::new(Wrapper::Hsdp, 3, units.clone(), 1.0), &c);
    assert!(odd.is_err());
    // One GPU needs no curve: its collectives are copies, in the own work.
    let one = Fsdp2Inputs::new(Wrapper::Fsdp, 1, units, 1.0);
    let p = predict_fsdp2(&one, &Fsdp2Curves::default()).unwrap();
    assert_eq!((p.step_s, p.exposed_s), (1.0, 0.0));
    // A one-GPU curve says nothing of the links between GPUs.
    let copy = Fsdp2Curves {
        all_gather: Some(h100_copy_curve()),
        ..curves(10.0)
    };
    let units = Fsdp2Units::uniform(1 << 20, 2, 1 << 20);
    assert!(predict_fsdp2(&Fsdp2Inputs::new(Wrapper::Fsdp, 2, units, 1.0), &copy).is_err());
}

#[test]
fn units_follow_the_outermost_module_list() {
    let r: DdpReport = serde_json::from_str(REPORTS[1].1).unwrap();
    let layout = r.results[0].param_layout.as_ref().unwrap();
    let u = Fsdp2Units::from_layout(layout);
    assert_eq!(u.blocks.len(), 2);
    assert_eq!(u.params(), layout.total_params());
    assert_eq!(u.root, 32000 * 4096 + 4096);
}

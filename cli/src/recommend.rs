//! `ddpcheck recommend`: predicts DDP scaling for a model on this node and recommends settings,
//! from this node's measurements: saved reports (`--from`), the daemon's history, or quick runs.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use ddpcheck_core::collective::{Collective, Sweep};
use ddpcheck_core::ddp::{
    beyond_noise, fill_scaling, one_gpu_partner, probe_curve, throughput_ratio, CommHook,
    DdpRequest, DdpResult, DdpVariant, ModelSpec,
};
use ddpcheck_core::model::{calibrate, cross_check, side_by_side, LinkCurve};
use ddpcheck_core::preflight::judged_peak;
use ddpcheck_core::recommend::{
    estimate_flops, recommend, variant_name, CalibrationInput, ComputeSource, CurveProvenance,
    EnvAb, MeasuredSpeedup, ModelInput, OtherCurve, RecommendInput, Recommendation,
    SideBySideInput,
};
use ddpcheck_core::report::{
    BenchCollectivesReport, DdpReport, Header, PreflightReport, ReportKind, TopoReport,
};
use ddpcheck_core::topology::LinkClass;
use ddpcheck_core::verdict::Verdict;
use ddpcheckd::engine::{self, CollectiveParams};
use serde::{Deserialize, Serialize};

use crate::saved_runs::SavedRuns;
use crate::target::{CliError, Target};
use crate::{make_target, print_json, progress, Cli};

#[derive(Args, Debug)]
pub struct RecommendArgs {
    /// Model: gpt2-124m, gpt2-355m, decoder:LAYERS,WIDTH,HEADS[,SEQ[,VOCAB]], mlp:WIDTH[,DEPTH].
    #[arg(long, conflicts_with = "params")]
    pub model: Option<String>,
    /// Or only a parameter count: 124M, 1.3B, 350000000.
    #[arg(long, value_parser = parse_count)]
    pub params: Option<u64>,
    #[arg(long, default_value_t = 8)]
    pub micro_batch: u32,
    #[arg(long, default_value_t = 1024)]
    pub seq: u32,
    /// GPUs the job will use (default: those of the measured all-reduce).
    #[arg(long)]
    pub gpus: Option<u32>,
    /// Price of the whole node per hour, for cost per million tokens.
    #[arg(long)]
    pub price_per_hour: Option<f64>,
    #[arg(long, default_value_t = 0.85)]
    pub target_efficiency: f64,
    /// Saved reports to use instead of measuring (`check --json`, `topo --json`, `bench
    /// collectives --json`, `bench ddp --json`); repeatable. Lets a colleague's node be advised
    /// offline. Multi-GPU `bench ddp` runs also give the all-reduce curve (timed in DDP's own
    /// process group), which is read before a sweep.
    #[arg(long = "from", value_name = "FILE")]
    pub from: Vec<PathBuf>,
    /// Compute time of one micro-batch on one GPU, instead of measuring it.
    #[arg(long)]
    pub step_time_ms: Option<f64>,
    /// Estimate compute from FLOPs at this rate (TFLOP/s) instead of measuring (flagged as an estimate).
    #[arg(long, conflicts_with = "step_time_ms")]
    pub estimate_tflops: Option<f64>,
    /// Measure candidate NCCL settings and fold them in (as `bench collectives --env-ab`).
    #[arg(long, value_name = "CANDIDATES")]
    pub env_ab: Option<String>,
    /// Run the DDP benchmark for the baseline and the recommended variant and print predicted against measured.
    #[arg(long)]
    pub verify: bool,
    /// Launch each DDP run (the 1-GPU compute measurement and --verify's runs) N times and use
    /// the median: short steps moved 10-57% between launches of the same command on 2xH200.
    /// With N > 1 it also measures how much the GPUs slow each other side by side (`nocomm`).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub repeats: u32,
    /// Keep what this run measures itself in DIR (created), each as the JSON report its own
    /// command writes: sweep.json, the quick runs (ddp-1gpu.json, ddp-nocomm-Ngpu.json),
    /// topo.json and verify.json. `recommend --from` each of them but verify.json, in that
    /// order, gives the same answer offline. One that cannot be written is said on stderr, and
    /// the exit code is then 1 (WARNING).
    #[arg(long, value_name = "DIR")]
    pub save_runs: Option<PathBuf>,
}

/// `124M`, `1.3B`, `350000`.
pub fn parse_count(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1e3),
        Some('M') => (&t[..t.len() - 1], 1e6),
        Some('B') | Some('G') => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a parameter count (e.g. 124M, 1.3B)"))?;
    let n = v * mult;
    if !(n.is_finite() && (1e3..=1e13).contains(&n)) {
        return Err(format!("{s:?}: parameter count outside 1K..10T"));
    }
    Ok(n as u64)
}

/// Predicted against measured, for `--verify`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VerifyRow {
    pub variant: String,
    pub world_size: u32,
    pub predicted_speedup: f64,
    pub measured_speedup: f64,
    pub error: f64,
    /// With --repeats: the larger launch spread of the measured 1-GPU and N-GPU rows
    /// ((slowest − fastest) / median), how soft the measured speedup is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_spread: Option<f64>,
    /// With --repeats: the measured speedup's relative standard error
    /// (`ddpcheck_core::ddp::speedup_uncertainty`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_uncertainty: Option<f64>,
    /// With --repeats: how far the measured speedup may move by launch noise alone
    /// (`ddpcheck_core::ddp::speedup_noise_bound`); an error beyond it is the model's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_noise_bound: Option<f64>,
}

/// What `--verify` measured of the recommendation against the baseline at the same GPU count:
/// throughput over throughput, within launches when they were repeated
/// (`ddpcheck_core::ddp::throughput_ratio`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VerifyGain {
    pub variant: String,
    pub baseline: String,
    pub world_size: u32,
    pub predicted_ratio: f64,
    pub measured_ratio: f64,
    /// With --repeats: the measured ratio's relative standard error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_uncertainty: Option<f64>,
    /// With --repeats: how far the measured ratio may move by launch noise alone
    /// (`ddpcheck_core::ddp::noise_bound`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_noise_bound: Option<f64>,
}

/// The network during `--verify`'s runs (their all-reduce probes) against the curve the
/// predictions read, at DDP's bucket size: where the two part, the verify errors follow.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VerifyNetwork {
    pub world_size: u32,
    pub bytes: u64,
    /// What the predictions read at `bytes`, GB/s.
    pub predicted_busbw_gbps: f64,
    /// What the verify runs timed in their own process group before their steps, GB/s.
    pub measured_busbw_gbps: f64,
    /// How many runs' probes (their median).
    pub runs: usize,
}

/// One GPU during `--verify`'s runs against the one-GPU step the predictions read (the quick
/// runs', or the history's): a measured speedup is over the verify runs' own one-GPU step, so
/// where the node's compute moved between the two, the verify errors follow. (On 2×H200 the
/// same MLP's one-GPU step went from 1.77 to 2.50 ms between the quick runs and the verify runs
/// minutes later: docs/results/h200x2-session10.md §3.)
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VerifyCompute {
    /// The one-GPU run's variant (a hooked variant's speedup is taken against one GPU without
    /// the hook).
    pub variant: String,
    /// What the predictions read, seconds per step.
    pub predicted_step_s: f64,
    /// What the verify runs measured on one GPU, seconds per step.
    pub measured_step_s: f64,
}

/// The `--json` document: the report head, the recommendation, and `--verify` rows.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RecommendReport {
    #[serde(flatten)]
    pub header: Header,
    #[serde(flatten)]
    pub recommendation: Recommendation,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verify: Vec<VerifyRow>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_gain: Option<VerifyGain>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_network: Option<VerifyNetwork>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verify_compute: Vec<VerifyCompute>,
    /// Seconds spent (measurements included).
    pub seconds: f64,
}

/// What the recommendation rests on, gathered from files, history or runs.
#[derive(Default)]
struct Measurements {
    sweep: Option<(Sweep, Header)>,
    /// The runs of the newest `bench ddp` report that timed all-reduces alone in DDP's own
    /// process group before their steps, with its header.
    probed: Option<(Vec<DdpResult>, Header)>,
    preflight: Option<PreflightReport>,
    /// `topo --json`: the GPU links and memory, where no preflight gives them.
    topo: Option<TopoReport>,
    ddp: Vec<(DdpResult, Header)>,
}

impl Measurements {
    fn add_json(&mut self, text: &str, origin: &str) -> Result<(), CliError> {
        let v: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| CliError::Usage(format!("{origin}: not a ddpcheck JSON report: {e}")))?;
        let kind = v
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or("")
            .to_string();
        let bad = |e: serde_json::Error| {
            CliError::Usage(format!("{origin}: unreadable {kind} report: {e}"))
        };
        match kind.as_str() {
            "preflight" => {
                let r: PreflightReport = serde_json::from_value(v).map_err(bad)?;
                if self.sweep.is_none() {
                    if let Some(s) = &r.all_reduce {
                        self.sweep = Some((s.clone(), r.header.clone()));
                    }
                }
                self.preflight = Some(r);
            }
            "topo" => self.topo = Some(serde_json::from_value(v).map_err(bad)?),
            "bench_collectives" => {
                let r: BenchCollectivesReport = serde_json::from_value(v).map_err(bad)?;
                // A full sweep (from small messages) beats the preflight's large-message one.
                if let Some(s) = r.all_reduce() {
                    self.sweep = Some((s.clone(), r.header.clone()));
                }
            }
            "bench_ddp" => {
                let mut r: DdpReport = serde_json::from_value(v).map_err(bad)?;
                // The report's own pairing again (same speedups, no price: costs stay as
                // written), so reports written before `speedup_uncertainty` existed carry it too.
                fill_scaling(&mut r.results, None);
                self.add_ddp(r);
            }
            other => {
                return Err(CliError::Usage(format!(
                    "{origin}: report kind {other:?} carries no measurements for recommend (use check, topo, bench collectives or bench ddp --json)"
                )))
            }
        }
        Ok(())
    }

    /// A `bench ddp` report's runs; those that timed the network before their steps replace
    /// the probes held so far (the newest report's count).
    fn add_ddp(&mut self, r: DdpReport) {
        let probed: Vec<DdpResult> = r
            .results
            .iter()
            .filter(|x| x.all_reduce_probe.is_some())
            .cloned()
            .collect();
        if !probed.is_empty() {
            self.probed = Some((probed, r.header.clone()));
        }
        self.ddp
            .extend(r.results.into_iter().map(|x| (x, r.header.clone())));
    }
}

/// The node's stored measurements, newest last so they win where one kind replaces another.
fn daemon_history(target: &Target, m: &mut Measurements) -> Result<(), CliError> {
    for kind in ["preflight", "bench_collectives", "bench_ddp"] {
        for r in target.history(kind, 5)? {
            m.add_json(&r.json, "daemon history")?;
        }
    }
    Ok(())
}

fn model_input(a: &RecommendArgs) -> Result<ModelInput, CliError> {
    match (&a.model, a.params) {
        (Some(m), _) => Ok(ModelInput::Spec {
            spec: m.parse::<ModelSpec>().map_err(CliError::Usage)?,
        }),
        (None, Some(p)) => Ok(ModelInput::Params { params: p }),
        (None, None) => Err(CliError::Usage(
            "give --model NAME or --params COUNT".into(),
        )),
    }
}

fn provenance_of(h: &Header) -> CurveProvenance {
    CurveProvenance {
        host: h.provenance.hostname.clone(),
        time: h.provenance.time.clone(),
        backend: Some(h.backend),
        label: h.backend_label.clone(),
        method: String::new(),
    }
}

/// The all-reduce curve the multi-GPU DDP runs timed in their own process group before their
/// steps, at `gpus` (or, with no count known, the largest count probed): the median over those
/// runs, their report's header, and how many runs. Preferred to a `bench collectives` sweep:
/// over the host network DDP's all-reduces ran 0.84-1.37x a sweep's time minutes apart, and
/// these probes followed them (docs/results/h200x2-session8.md).
fn in_launch_curve(m: &Measurements, gpus: Option<u32>) -> Option<(Sweep, Header, usize)> {
    let (runs, header) = m.probed.as_ref()?;
    let world = gpus.or_else(|| runs.iter().map(|r| r.world_size).max())?;
    let (curve, n) = probe_curve(runs, world)?;
    Some((curve, header.clone(), n))
}

/// The all-reduce curve the model reads, and what it rests on.
struct ChosenCurve {
    header: Header,
    curve: LinkCurve,
    /// How it was measured when not by a sweep (`CurveProvenance::method`).
    method: String,
    /// With the curve from DDP's runs, the node's sweep: a second look at the same link.
    other: Option<OtherCurve>,
}

/// DDP's own probes (`in_launch_curve`'s answer) where there are any, else the node's sweep.
fn choose_curve(
    m: &Measurements,
    in_launch: Option<(Sweep, Header, usize)>,
) -> Result<ChosenCurve, CliError> {
    let read = |s: &Sweep| {
        LinkCurve::from_sweep(s).map_err(|e| CliError::Usage(format!("all-reduce curve: {e}")))
    };
    Ok(match in_launch {
        Some((probes, header, runs)) => ChosenCurve {
            curve: read(&probes)?,
            header,
            method: format!(
                "by {runs} bench ddp run(s) in DDP's own process group before their steps"
            ),
            other: m.sweep.as_ref().and_then(|(s, h)| {
                Some(OtherCurve {
                    curve: LinkCurve::from_sweep(s).ok()?,
                    provenance: provenance_of(h),
                })
            }),
        },
        None => {
            let (sweep, header) = m.sweep.clone().ok_or_else(|| {
                CliError::Usage("the measurements hold no all-reduce sweep".into())
            })?;
            ChosenCurve {
                curve: read(&sweep)?,
                header,
                method: String::new(),
                other: None,
            }
        }
    })
}

/// The one-GPU baseline row of this model: its step time / accumulation is one micro-batch.
/// Compute of one micro-batch, and (when measured) the once-per-step optimizer work.
type MeasuredCompute = (ComputeSource, Option<f64>);

/// Per-step cost of a compressing hook on one GPU: a 1-GPU bf16 (else fp16) run minus the plain
/// one, both at accumulation 1; and the runs it rests on.
fn measured_hook_cost(
    m: &Measurements,
    model: &ModelInput,
    micro_batch: u32,
) -> Option<(f64, String)> {
    let ModelInput::Spec { spec } = model else {
        return None;
    };
    let name = spec.name();
    let one_gpu = |hook: CommHook| {
        m.ddp.iter().rev().find(|(r, _)| {
            r.model == name
                && r.world_size == 1
                && r.micro_batch == micro_batch
                && r.accum == 1
                && r.variant
                    .parse::<DdpVariant>()
                    .map(|v| v.plain_ddp_with(hook))
                    .unwrap_or(false)
        })
    };
    let plain = one_gpu(CommHook::None)?;
    let hooked = one_gpu(CommHook::Bf16).or_else(|| one_gpu(CommHook::Fp16))?;
    let cost = (hooked.0.step_time_median_s - plain.0.step_time_median_s).max(0.0);
    let detail = format!(
        "1-GPU {} run of {name} over its {} run ({})",
        hooked.0.variant,
        plain.0.variant,
        measured_at(&hooked.1)
    );
    Some((cost, detail))
}

fn measured_compute(
    m: &Measurements,
    model: &ModelInput,
    micro_batch: u32,
) -> Option<MeasuredCompute> {
    let ModelInput::Spec { spec } = model else {
        return None;
    };
    let name = spec.name();
    // 1-GPU runs without a hook, newest last, by accumulation.
    let plain: Vec<&(DdpResult, Header)> = m
        .ddp
        .iter()
        .filter(|(r, _)| {
            r.model == name
                && r.world_size == 1
                && r.micro_batch == micro_batch
                && r.variant
                    .parse::<DdpVariant>()
                    .map(|v| v.plain_ddp_with(CommHook::None))
                    .unwrap_or(false)
        })
        .collect();
    let (one, h) = plain
        .iter()
        .rev()
        .find(|(r, _)| r.accum == 1)
        .or_else(|| plain.last())?;
    let at = measured_at(h);
    // Two accumulations separate the per-micro-batch work from the once-per-step optimizer:
    // step(k) = k·c + o.
    if one.accum == 1 {
        if let Some((many, _)) = plain.iter().rev().find(|(r, _)| r.accum > 1) {
            let k = f64::from(many.accum);
            let c = (many.step_time_median_s - one.step_time_median_s) / (k - 1.0);
            let o = one.step_time_median_s - c;
            if c > 0.0 && o >= 0.0 {
                return Some((
                    ComputeSource::Measured {
                        seconds: c,
                        detail: format!(
                            "1-GPU runs of {name} at accumulation 1 and {} ({at}); optimizer step {:.1} ms",
                            many.accum,
                            o * 1e3
                        ),
                    },
                    Some(o),
                ));
            }
        }
    }
    Some((
        ComputeSource::Measured {
            seconds: one.step_time_median_s / f64::from(one.accum.max(1)),
            detail: format!("1-GPU {} run of {name} ({at})", one.variant),
        },
        None,
    ))
}

/// Where and when a run was measured, and whether on real GPUs: `real, HOST TIME`.
fn measured_at(h: &Header) -> String {
    let kind = if h.backend == ddpcheck_core::BackendKind::Sim {
        "SIMULATED"
    } else {
        "real"
    };
    format!("{kind}, {} {}", h.provenance.hostname, h.provenance.time)
}

/// The speedups measured for recommend's variants at `gpus` (plain DDP in the measured
/// environment, the same model and micro-batch), oldest first.
fn measured_speedups(
    m: &Measurements,
    model: &ModelInput,
    micro_batch: u32,
    gpus: u32,
) -> Vec<MeasuredSpeedup> {
    let ModelInput::Spec { spec } = model else {
        return Vec::new();
    };
    let name = spec.name();
    m.ddp
        .iter()
        .filter(|(r, _)| r.model == name && r.micro_batch == micro_batch && r.world_size == gpus)
        .filter_map(|(r, h)| {
            let v: DdpVariant = r.variant.parse().ok()?;
            if !(v.plain_ddp_with(v.hook) && v.env.is_empty() && v.accum == r.accum) {
                return None;
            }
            let launches = r.launch_step_medians_s.len().max(1);
            Some(MeasuredSpeedup {
                variant: variant_name(v.hook, v.accum)?.to_string(),
                speedup: r.speedup.filter(|s| s.is_finite() && *s > 0.0)?,
                uncertainty: r.speedup_uncertainty,
                noise_bound: r.speedup_noise_bound,
                rests_on: format!(
                    "bench ddp at {gpus} GPUs, {launches} launch{} ({})",
                    if launches == 1 { "" } else { "es" },
                    measured_at(h)
                ),
            })
        })
        .collect()
}

/// N GPUs side by side against one, from the runs gathered (a `nocomm` run at `gpus`).
fn measured_side_by_side(
    m: &Measurements,
    model: &ModelInput,
    micro_batch: u32,
    gpus: u32,
) -> Option<SideBySideInput> {
    let ModelInput::Spec { spec } = model else {
        return None;
    };
    let rows: Vec<&DdpResult> = m.ddp.iter().map(|(r, _)| r).collect();
    let sbs = side_by_side(&rows, &spec.name(), micro_batch, gpus)?;
    let at = |r: &DdpResult| {
        m.ddp
            .iter()
            .find(|(x, _)| std::ptr::eq(x, r))
            .map(|(_, h)| measured_at(h))
            .unwrap_or_default()
    };
    let launches = |r: &DdpResult| match r.launch_range() {
        Some((fastest, slowest)) => format!(
            "{} launches {:.2}-{:.2} ms",
            r.launch_step_medians_s.len(),
            fastest * 1e3,
            slowest * 1e3
        ),
        None => "1 launch".to_string(),
    };
    let nocomm = format!(
        "{} at {gpus} GPUs: {:.2} ms per step, {} ({})",
        sbs.nocomm.variant,
        sbs.nocomm.step_time_median_s * 1e3,
        launches(sbs.nocomm),
        at(sbs.nocomm)
    );
    let rests_on = match sbs.one_gpu {
        Some(one) => format!(
            "{nocomm}; 1-GPU {}: {:.2} ms, {} ({})",
            one.variant,
            one.step_time_median_s * 1e3,
            launches(one),
            at(one)
        ),
        None => format!(
            "{nocomm}; one GPU alone in the same launches: {:.2} ms",
            sbs.nocomm.solo_step_time_median_s.unwrap_or(f64::NAN) * 1e3
        ),
    };
    Some(SideBySideInput {
        measured_ratio: sbs.slowdown,
        launches: sbs.fewest_launches(),
        within_launch: sbs.within_launch(),
        distinct: sbs.distinct(),
        noise_bound: sbs.noise_bound,
        rests_on,
    })
}

fn ddp_request(
    models: Vec<ModelSpec>,
    variants: &[&str],
    sizes: Vec<u32>,
    micro_batch: u32,
    steps: u32,
    repeats: u32,
) -> Result<DdpRequest, CliError> {
    Ok(DdpRequest {
        models,
        variants: variants
            .iter()
            .map(|v| v.parse::<DdpVariant>().map_err(CliError::Usage))
            .collect::<Result<_, _>>()?,
        world_sizes: sizes,
        micro_batch,
        warmup_steps: 5,
        steps,
        price_per_gpu_hour: None,
        env: Vec::new(),
        deadline_s: 600.0,
        repeats,
    })
}

/// What recommend says on a node of fewer than two GPUs, where it has no curve to read.
fn one_gpu_node(gpus: usize) -> String {
    format!(
        "this node has {gpus} GPU{}: no interconnect to measure, and DDP needs two or more. \
         To predict DDP for a node of N GPUs from here, give --from that node's `ddpcheck check \
         --json` or `ddpcheck bench collectives --json` report and --gpus N (the compute is then \
         measured on this node's GPU, or give --step-time-ms)",
        if gpus == 1 { "" } else { "s" }
    )
}

fn busbw_large(s: &Sweep) -> Option<f64> {
    judged_peak(s).map(|x| x.1)
}

pub fn build(
    a: &RecommendArgs,
    target: &Target,
    saved: &mut SavedRuns,
) -> Result<RecommendReport, CliError> {
    let started = Instant::now();
    if !(a.target_efficiency > 0.0 && a.target_efficiency <= 1.0) {
        return Err(CliError::Usage(format!(
            "--target-efficiency {} outside (0, 1]",
            a.target_efficiency
        )));
    }
    let model = model_input(a)?;
    let mut m = Measurements::default();
    for f in &a.from {
        let text = std::fs::read_to_string(f)
            .map_err(|e| CliError::Usage(format!("--from {}: {e}", f.display())))?;
        m.add_json(&text, &f.display().to_string())?;
    }
    if a.from.is_empty() {
        daemon_history(target, &mut m)?;
    }
    let reporter = progress::Reporter::new();
    // The node's GPUs as its sweep or preflight saw them: the default GPU count, and the price's
    // split. DDP's probes may cover only some of them.
    let node_seen = [
        m.sweep.as_ref().map(|(s, _)| s.ranks),
        m.preflight.as_ref().map(|p| p.gpus.len() as u32),
    ]
    .into_iter()
    .flatten()
    .max();
    // The all-reduce curve: as DDP's own process group timed it where a multi-GPU run did,
    // else a sweep from small messages (α) to large (bandwidth).
    let in_launch = in_launch_curve(&m, a.gpus.or(node_seen));
    // This node's GPU count, read once and only where needed (a curve given by --from may be
    // another node's).
    let mut gpus_here = None;
    let mut node_gpus_here = || -> Result<usize, CliError> {
        if let Some(n) = gpus_here {
            return Ok(n);
        }
        let n = target.topo("")?.gpus.len();
        gpus_here = Some(n);
        Ok(n)
    };
    if m.sweep.is_none() && in_launch.is_none() {
        // A node of one GPU has no interconnect to sweep: say what recommend can do there
        // rather than pass on the sweep's refusal.
        let here = node_gpus_here()?;
        if here < 2 {
            return Err(CliError::Usage(one_gpu_node(here)));
        }
        let params = CollectiveParams {
            ops: vec![Collective::AllReduce],
            min_bytes: 4 << 10,
            max_bytes: 256 << 20,
            iters: 10,
            warmup_iters: 3,
            in_place: false,
            ..CollectiveParams::default()
        };
        let r = target.bench_collectives(&params, &mut |p| reporter.update(p))?;
        saved.save("sweep", &r);
        if let Some(s) = r.all_reduce() {
            m.sweep = Some((s.clone(), r.header.clone()));
        }
    }
    let mut chosen = choose_curve(&m, in_launch)?;
    // The GPUs the curve was measured on.
    let measured_ranks = chosen.curve.ranks;
    let gpus = a.gpus.unwrap_or(measured_ranks);
    let node_gpus = node_seen.unwrap_or(0).max(measured_ranks).max(gpus);
    // Compute per micro-batch: given, measured (a 1-GPU run), or estimated from FLOPs.
    let mut optimizer_s = None;
    let compute = if let Some(ms) = a.step_time_ms {
        if !(ms.is_finite() && ms > 0.0 && ms < 1e7) {
            return Err(CliError::Usage(format!(
                "--step-time-ms {ms} is not a positive time"
            )));
        }
        ComputeSource::Given {
            seconds: ms / 1e3,
            detail: "--step-time-ms".into(),
        }
    } else if let Some(tflops) = a.estimate_tflops {
        if !(tflops.is_finite() && tflops > 0.0) {
            return Err(CliError::Usage(format!(
                "--estimate-tflops {tflops} is not positive"
            )));
        }
        ComputeSource::Estimated {
            flops: estimate_flops(&model, a.micro_batch, a.seq),
            tflops,
        }
    } else if let Some((c, o)) = measured_compute(&m, &model, a.micro_batch) {
        optimizer_s = o;
        c
    } else {
        let ModelInput::Spec { spec } = &model else {
            return Err(CliError::Usage(
                "with --params, give --step-time-ms or --estimate-tflops (no model to run)".into(),
            ));
        };
        // Two accumulations on one GPU separate per-micro-batch work from the optimizer step.
        // With repeated launches, `nocomm` on one GPU and on N measures how much N processes
        // slow each other (one launch each cannot tell that from launch noise: not worth a
        // launch).
        // Only where this node has the GPUs.
        let side_by_side = a.repeats > 1 && gpus > 1 && gpus as usize <= node_gpus_here()?;
        let variants: &[&str] = if side_by_side {
            &["base", "accum4", "bf16", "nocomm"]
        } else {
            &["base", "accum4", "bf16"]
        };
        let mut quick_run = |variants: &[&str], gpus: u32, name: &str| -> Result<(), CliError> {
            let req = ddp_request(
                vec![spec.clone()],
                variants,
                vec![gpus],
                a.micro_batch,
                15,
                a.repeats,
            )?;
            let r = target.bench_ddp(&req, &mut |p| reporter.update(p))?;
            saved.save(name, &r);
            m.add_ddp(r);
            Ok(())
        };
        quick_run(variants, 1, "ddp-1gpu")?;
        if side_by_side {
            quick_run(&["nocomm"], gpus, &format!("ddp-nocomm-{gpus}gpu"))?;
        }
        let (c, o) = measured_compute(&m, &model, a.micro_batch).ok_or_else(|| {
            CliError::Probe(ddpcheck_core::ProbeError::Worker(
                "the 1-GPU DDP run returned no baseline row".into(),
            ))
        })?;
        optimizer_s = o;
        c
    };
    // Once more now the GPU count is known and the quick runs are in: their N-GPU launch
    // (`nocomm`, with --repeats) timed the network in DDP's own process group too.
    if let Some(probed) = in_launch_curve(&m, Some(gpus)) {
        chosen = choose_curve(&m, Some(probed))?;
    }
    let curve = chosen.curve;
    let sweep_header = chosen.header;
    // Candidate NCCL settings, measured on the node.
    let mut env_ab = Vec::new();
    if let Some(spec) = &a.env_ab {
        let params = CollectiveParams {
            ops: vec![Collective::AllReduce],
            min_bytes: 64 << 20,
            max_bytes: 256 << 20,
            iters: 10,
            warmup_iters: 3,
            in_place: false,
            env_ab: engine::parse_env_ab(spec)?,
            ..CollectiveParams::default()
        };
        let r = target.bench_collectives(&params, &mut |p| reporter.update(p))?;
        let base = r.all_reduce().and_then(busbw_large);
        for run in r.runs.iter().skip(1) {
            let cand = run
                .run
                .sweeps
                .iter()
                .find(|s| s.op == Collective::AllReduce)
                .and_then(busbw_large);
            if let (Some(b), Some(c)) = (base, cand) {
                if b > 0.0 {
                    env_ab.push(EnvAb {
                        label: run.label.replace('+', ","),
                        busbw_ratio: c / b,
                    });
                }
            }
        }
    }
    reporter.finish();
    // The node's own DDP runs tune the model's overheads.
    let measured: Vec<DdpResult> = m.ddp.iter().map(|(r, _)| r.clone()).collect();
    let calibration = calibrate(&measured, &curve)
        .ok()
        .filter(|c| c.runs_used > 0)
        .map(|c| CalibrationInput {
            source: format!(
                "{} DDP run(s) on {}",
                c.runs_used, sweep_header.provenance.hostname
            ),
            cross_check: cross_check(&measured, &curve),
            calibration: c,
        });
    // Topology and GPU memory: from a saved preflight or topology, else asked of the node (cheap).
    if m.preflight.is_none() && m.topo.is_none() && a.from.is_empty() {
        if let Ok(t) = target.topo("") {
            saved.save("topo", &t);
            m.topo = Some(t);
        }
    }
    let (worst_link, gpu_memory_bytes): (Option<LinkClass>, Option<u64>) =
        match (&m.preflight, &m.topo) {
            (Some(p), _) => (
                p.topology.as_ref().and_then(|t| t.worst_link()),
                p.gpus.first().map(|g| g.memory_total_bytes),
            ),
            (None, Some(t)) => (
                t.topology.worst_link(),
                t.gpus.first().map(|g| g.memory_total_bytes),
            ),
            (None, None) => (None, None),
        };
    let (hook_compute_s, hook_rests_on) = measured_hook_cost(&m, &model, a.micro_batch).unzip();
    let side_by_side = measured_side_by_side(&m, &model, a.micro_batch, gpus);
    let measured = measured_speedups(&m, &model, a.micro_batch, gpus);
    let input = RecommendInput {
        model,
        micro_batch: a.micro_batch,
        seq: a.seq,
        gpus,
        node_gpus,
        price_per_hour: a.price_per_hour,
        target_efficiency: a.target_efficiency,
        curve,
        curve_provenance: CurveProvenance {
            method: chosen.method,
            ..provenance_of(&sweep_header)
        },
        worst_link,
        nccl_env: engine::nccl_env_from_process(),
        env_ab,
        compute,
        calibration,
        bucket_cap_mb: None,
        gpu_memory_bytes,
        optimizer_s,
        hook_compute_s,
        hook_rests_on,
        side_by_side,
        measured,
        other_curve: chosen.other,
    };
    let rec = recommend(&input).map_err(|e| CliError::Usage(format!("recommend: {e}")))?;
    let header = Header::new(
        ReportKind::Recommend,
        sweep_header.backend,
        sweep_header.backend_label.clone(),
        sweep_header.provenance.clone(),
    );
    Ok(RecommendReport {
        header,
        recommendation: rec,
        verify: Vec::new(),
        verify_gain: None,
        verify_network: None,
        verify_compute: Vec::new(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn verify(
    a: &RecommendArgs,
    target: &Target,
    report: &mut RecommendReport,
    saved: &mut SavedRuns,
) -> Result<(), CliError> {
    let rec = &report.recommendation;
    let spec = match model_input(a)? {
        ModelInput::Spec { spec } => spec,
        ModelInput::Params { .. } => {
            return Err(CliError::Usage(
                "--verify needs --model (something to run)".into(),
            ))
        }
    };
    let mut variants = vec!["base"];
    if rec.chosen != "base" && rec.chosen != "1 GPU" {
        variants.push(rec.chosen.as_str());
    }
    let req = ddp_request(
        vec![spec],
        &variants,
        vec![1, rec.gpus],
        a.micro_batch,
        30,
        a.repeats,
    )?;
    let reporter = progress::Reporter::new();
    let r = target.bench_ddp(&req, &mut |p| reporter.update(p));
    reporter.finish();
    let r = r?;
    saved.save("verify", &r);
    for row in rec
        .rows
        .iter()
        .filter(|x| variants.contains(&x.variant.as_str()))
    {
        let multi_run = r
            .results
            .iter()
            .find(|x| x.variant == row.variant && x.world_size == rec.gpus);
        if let Some((multi, meas)) = multi_run.and_then(|x| Some((x, x.speedup?))) {
            // The 1-GPU run the speedup was taken against (without the hook), not the
            // variant's own.
            let one_gpu = one_gpu_partner(&r.results, multi);
            let measured_spread = [
                multi.launch_spread(),
                one_gpu.and_then(DdpResult::launch_spread),
            ]
            .into_iter()
            .flatten()
            .reduce(f64::max);
            if let Some(one) = one_gpu {
                if !report
                    .verify_compute
                    .iter()
                    .any(|c| c.variant == one.variant)
                {
                    report.verify_compute.push(VerifyCompute {
                        variant: one.variant.clone(),
                        predicted_step_s: row.prediction.single_gpu_step_s,
                        measured_step_s: one.step_time_median_s,
                    });
                }
            }
            report.verify.push(VerifyRow {
                variant: row.variant.clone(),
                world_size: rec.gpus,
                predicted_speedup: row.prediction.speedup,
                measured_speedup: meas,
                error: (row.prediction.speedup - meas) / meas,
                measured_spread,
                measured_uncertainty: multi.speedup_uncertainty,
                measured_noise_bound: multi.speedup_noise_bound,
            });
        }
    }
    report.verify_network = verify_network(&r.results, rec);
    let at_n = |name: &str| {
        let row = rec.rows.iter().find(|x| x.variant == name)?;
        let run = r
            .results
            .iter()
            .find(|x| x.variant == name && x.world_size == rec.gpus)?;
        Some((row, run))
    };
    if let (Some((chosen, chosen_run)), Some((base, base_run))) =
        (at_n(rec.chosen.as_str()), at_n("base"))
    {
        if chosen.variant != base.variant && base.prediction.throughput > 0.0 {
            if let Some(m) = throughput_ratio(chosen_run, base_run) {
                report.verify_gain = Some(VerifyGain {
                    variant: chosen.variant.clone(),
                    baseline: base.variant.clone(),
                    world_size: rec.gpus,
                    predicted_ratio: chosen.prediction.throughput / base.prediction.throughput,
                    measured_ratio: m.ratio,
                    measured_uncertainty: m.uncertainty,
                    measured_noise_bound: m.noise_bound,
                });
            }
        }
    }
    Ok(())
}

/// The verify runs' all-reduce probes at the recommendation's GPU count, read as the model reads
/// a curve, at the bucket size the predictions were summarised at.
fn verify_network(runs: &[DdpResult], rec: &Recommendation) -> Option<VerifyNetwork> {
    let (probes, n) = probe_curve(runs, rec.gpus)?;
    let curve = LinkCurve::from_sweep(&probes).ok()?;
    Some(VerifyNetwork {
        world_size: rec.gpus,
        bytes: rec.curve.bucket_bytes,
        predicted_busbw_gbps: rec.curve.busbw_at_bucket_gbps,
        measured_busbw_gbps: curve.busbw_at(rec.curve.bucket_bytes),
        runs: n,
    })
}

pub fn render(r: &RecommendReport) -> String {
    let mut s = crate::render::banner(&r.header, "recommend");
    s.push_str(&crate::render::recommendation(&r.recommendation));
    if !r.verify.is_empty() {
        s.push_str("\n--verify: predicted against measured speedup\n");
        for v in &r.verify {
            let spread = v
                .measured_spread
                .map(|sp| format!("  (launches {:.0}% apart)", sp * 100.0))
                .unwrap_or_default();
            // fill_scaling sets both together, from repeated launches.
            let noise = v
                .measured_uncertainty
                .zip(v.measured_noise_bound)
                .map(|(u, bound)| {
                    let verdict = if beyond_noise(v.error, Some(bound)) {
                        "the error exceeds the measurement's noise"
                    } else {
                        "the error is within the measurement's noise"
                    };
                    format!(
                        "  measured ±{:.1}% (noise up to ±{:.1}% for these launches): {verdict}",
                        u * 100.0,
                        bound * 100.0
                    )
                })
                .unwrap_or_default();
            s.push_str(&format!(
                "  {:<14} {} GPUs  predicted {:.2}x  measured {:.2}x  error {:+.1}%{spread}{noise}\n",
                v.variant,
                v.world_size,
                v.predicted_speedup,
                v.measured_speedup,
                v.error * 100.0
            ));
        }
    }
    if let Some(n) = &r.verify_network {
        let ratio = n.predicted_busbw_gbps / n.measured_busbw_gbps;
        s.push_str(&format!(
            "  network during these runs ({} run(s) on {} GPUs, all-reduce alone in DDP's process group): {:.2} GB/s busbw at {}, the predictions read {:.2} GB/s: an all-reduce took {ratio:.2}x the time the model assumed\n",
            n.runs,
            n.world_size,
            n.measured_busbw_gbps,
            ddpcheck_core::recommend::fmt_bytes(n.bytes as f64),
            n.predicted_busbw_gbps,
        ));
    }
    if !r.verify_compute.is_empty() {
        let each: Vec<String> = r
            .verify_compute
            .iter()
            .map(|c| {
                format!(
                    "{} {:.2} ms a step, the predictions read {:.2} ms ({:.2}x)",
                    c.variant,
                    c.measured_step_s * 1e3,
                    c.predicted_step_s * 1e3,
                    c.measured_step_s / c.predicted_step_s
                )
            })
            .collect();
        s.push_str(&format!(
            "  one GPU during these runs: {}\n",
            each.join("; ")
        ));
    }
    if let Some(g) = &r.verify_gain {
        let how = match g.measured_uncertainty {
            Some(u) => format!(" ±{:.1}% (within launches)", u * 100.0),
            None => " (one launch each)".to_string(),
        };
        // The same noise test as the rows above, on ln(ratio) so faster and slower weigh alike.
        let verdict = if !beyond_noise(g.measured_ratio.ln(), g.measured_noise_bound) {
            match g.measured_uncertainty {
                Some(_) => "these launches do not tell the two apart",
                None => "one launch each cannot tell the two apart (--repeats 3 or more can)",
            }
        } else if g.measured_ratio > 1.0 {
            "the recommendation pays off on this node"
        } else {
            "the recommendation measured slower than the baseline: keep the baseline"
        };
        s.push_str(&format!(
            "  {} against {} on {} GPUs: predicted {:.2}x the throughput, measured {:.2}x{how}: {verdict}\n",
            g.variant, g.baseline, g.world_size, g.predicted_ratio, g.measured_ratio
        ));
    }
    s
}

pub fn run(cli: &Cli, a: &RecommendArgs) -> Result<i32, CliError> {
    let target = make_target(cli)?;
    let mut saved = SavedRuns::open(a.save_runs.as_deref())?;
    let mut report = build(a, &target, &mut saved)?;
    if a.verify {
        verify(a, &target, &mut report, &mut saved)?;
    }
    if a.save_runs.is_some() && saved.written().is_empty() && saved.failed() == 0 {
        eprintln!("ddpcheck: --save-runs: nothing was measured here (all from --from or history), nothing kept");
    }
    if !saved.written().is_empty() {
        let files: Vec<String> = saved
            .written()
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        eprintln!(
            "ddpcheck: kept this run's measurements: {}",
            files.join(", ")
        );
    }
    if cli.json {
        print_json(&report)?;
    } else {
        print!("{}", render(&report));
    }
    // Measurements asked to be kept but not kept: the recommendation stands, with a warning.
    Ok(if saved.failed() > 0 {
        Verdict::Warning.exit_code()
    } else {
        0
    })
}

/// The demo's recommendation: gpt2-124m on the simulated node, from the demo daemon's
/// preflight plus a collective sweep and a 1-GPU run on the same simulated node.
pub fn demo_recommendation(target: &Target) -> Result<RecommendReport, CliError> {
    let a = RecommendArgs {
        model: Some("gpt2-124m".into()),
        params: None,
        micro_batch: 8,
        seq: 1024,
        gpus: None,
        price_per_hour: Some(2.64),
        target_efficiency: 0.85,
        from: Vec::new(),
        step_time_ms: None,
        estimate_tflops: None,
        env_ab: Some("NCCL_P2P_LEVEL=SYS".into()),
        verify: false,
        repeats: 1,
        save_runs: None,
    };
    build(&a, target, &mut SavedRuns::open(None)?)
}

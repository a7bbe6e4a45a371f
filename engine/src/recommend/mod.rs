//! The gathering half of `recommend`: the measurements a recommendation rests on (saved
//! reports, the daemon's history, or quick runs on the node), the curve the model reads, and
//! core's model on them. Arguments and rendering are the CLI's.

mod budget;
mod curve;
mod fit;
mod measured;
mod measurements;
mod report;
mod verify;
mod wrapper_step;
mod wrappers;

use ddpcheck_core::num::len_u32;
use ddpcheck_core::ProbeError;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ddpcheck_core::backend::Progress;
use ddpcheck_core::bounded::FileKind;
use ddpcheck_core::collective::{judged_peak, Collective, Sweep};
use ddpcheck_core::ddp::{
    DdpRequest, DdpResult, DdpVariant, ModelSpec, Recipe, Reference, RunDevice, MAX_CPU_RANKS,
};
use ddpcheck_core::num::floor_u64;
use ddpcheck_core::params::CollectiveParams;
use ddpcheck_core::recommend::{
    estimate_flops, recommend, CalibrationInput, ComputeSource, CurveProvenance, EnvAb, ModelInput,
    P2pRisk, RecommendInput,
};
use ddpcheck_core::report::{Header, ReportKind};
use ddpcheck_core::step_time::mechanisms::SLOW_LINK_GBPS;
use ddpcheck_core::step_time::{calibrate, cross_check, LinkCurve, DEFAULT_BUCKET_CAP_MB, MIB};
use ddpcheck_core::topology::LinkClass;

use crate::runner::{RunError, Runner};
use crate::runs::{nccl_env_from_process, parse_env_ab};
use crate::saved_runs::SavedRuns;
use curve::{choose_curve, has_curve, one_gpu_node, provenance_of};
use measured::{
    measured_baseline, measured_compile, measured_compute, measured_ddp_own_work,
    measured_hook_cost, measured_host, measured_layout, measured_powersgd_cost,
    measured_side_by_side, measured_speedups, measured_tokens_per_sample, MeasuredCompute,
};
use measurements::{daemon_history, Measurements};

pub use budget::{OwnLaunch, OwnMeasurements, OwnSweep, DEFAULT_BUDGET_S};
pub use report::{
    RecommendReport, VerifyCompute, VerifyGain, VerifyNetwork, VerifyPowerSgd, VerifyRow,
};
pub use verify::verify;

/// What a recommendation is asked for (the CLI's `recommend` flags).
#[derive(Clone, Debug)]
pub struct RecommendRequest {
    /// The model, as the CLI read it from `--model` or `--model-config`; or else only `params`.
    pub model: Option<ModelSpec>,
    pub params: Option<u64>,
    pub micro_batch: u32,
    pub seq: u32,
    /// GPUs the job will use (default: those of the measured all-reduce).
    pub gpus: Option<u32>,
    pub price_per_hour: Option<f64>,
    pub target_efficiency: f64,
    /// Saved reports to read instead of the daemon's history or new runs.
    pub from: Vec<PathBuf>,
    pub step_time_ms: Option<f64>,
    pub estimate_tflops: Option<f64>,
    /// Candidate NCCL settings to measure (`--env-ab`).
    pub env_ab: Option<String>,
    /// Launches of each DDP run.
    pub repeats: u32,
    /// Today's sweep-only path on a fresh node: an all-reduce sweep and 1-GPU runs, no N-GPU
    /// launch.
    pub quick: bool,
    /// Seconds recommend's own measurements (every launch and sweep before the recommendation)
    /// may take.
    pub budget_s: f64,
    /// The user's recipe (autocast, DDP options): every launch runs it, the snippet says it.
    pub recipe: Recipe,
    /// Where recommend's own launches run (CPU ranks: a test of the flow, CPU figures).
    pub device: RunDevice,
    /// What the speedups rest on: with `plain` its own 1-GPU launches also time the model
    /// without DDP (`DdpRequest::reference`), the compute is that step and DDP's own work
    /// a term of every step; with `ddp` the 1-GPU step in DDP.
    pub reference: Reference,
}

impl RecommendRequest {
    fn model_input(&self) -> Result<ModelInput, RunError> {
        match (&self.model, self.params) {
            (Some(spec), _) => Ok(ModelInput::Spec { spec: spec.clone() }),
            (None, Some(p)) => Ok(ModelInput::Params { params: p }),
            (None, None) => Err(RunError::Usage(
                "give --model NAME, --model-config FILE or --params COUNT".into(),
            )),
        }
    }
}

impl RecommendRequest {
    /// One of recommend's own launches: the request's recipe and device, `steps` timed steps
    /// (at least `budget::MIN_TIMED_S` of them), five warm-up steps.
    fn ddp_request(
        &self,
        models: Vec<ModelSpec>,
        variants: &[&str],
        sizes: Vec<u32>,
        steps: u32,
    ) -> Result<DdpRequest, RunError> {
        // The runners time the plain blocks in the 1-GPU launch only
        // (`DdpRequest::plain_blocks_at`): that is where DDP's own work sets the reference.
        Ok(DdpRequest {
            models,
            variants: variants
                .iter()
                .map(|v| {
                    self.measured_as(v)
                        .parse::<DdpVariant>()
                        .map_err(RunError::usage)
                })
                .collect::<Result<_, _>>()?,
            world_sizes: sizes,
            micro_batch: self.micro_batch,
            warmup_steps: 5,
            steps,
            min_timed_s: budget::MIN_TIMED_S,
            price_per_gpu_hour: None,
            env: Vec::new(),
            deadline_s: budget::LAUNCH_DEADLINE_S,
            repeats: self.repeats,
            recipe: self.recipe.clone(),
            device: self.device,
            reference: self.reference,
        })
    }

    /// The variant a launch runs for `variant`: itself, or on CPU ranks fp16 for bf16, whose
    /// all-reduce gloo cannot do (the same bytes on the wire).
    pub(super) fn measured_as(&self, variant: &str) -> String {
        match self.device {
            RunDevice::Cuda => variant.to_string(),
            RunDevice::Cpu => variant.replace("bf16", "fp16"),
        }
    }

    /// The 1-GPU launch's variants: plain DDP at two accumulations (compute and the optimizer
    /// step) and bf16 (the hook's cost), which gloo's CPU ranks cannot run.
    fn one_gpu_variants(&self) -> &'static [&'static str] {
        match self.device {
            RunDevice::Cuda => &["base", "accum4", "bf16"],
            RunDevice::Cpu => &["base", "accum4"],
        }
    }
}

/// The PowerSGD rank the 1-GPU launch measures on a node without NVLink (`powersgd4`): the
/// middle of the ranks PyTorch's documentation suggests (1 to 4, more for some NLP tasks).
const POWERSGD_PROBE: &str = "powersgd4";

/// CPU ranks recommend runs by default: one per core, at least the two DDP needs, at most
/// [`MAX_CPU_RANKS`] (two on a 2-core machine).
fn default_cpu_ranks() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
    cores.clamp(2, MAX_CPU_RANKS as usize)
}

fn busbw_large(s: &Sweep) -> Option<f64> {
    judged_peak(s).map(|x| x.1)
}

/// One recommendation's gathering: what it asks, where it runs, what it has found so far.
struct Gathering<'a> {
    req: &'a RecommendRequest,
    target: &'a dyn Runner,
    saved: &'a mut SavedRuns,
    progress: &'a mut dyn FnMut(Progress),
    m: Measurements,
    /// This node's GPU count, asked once and only where needed (a curve given by --from may
    /// be another node's).
    gpus_here: Option<usize>,
    started: Instant,
    /// What recommend measured itself against its budget.
    own: OwnMeasurements,
}

impl Gathering<'_> {
    /// Saved reports (`--from`), else the daemon's history.
    fn read_reports(&mut self) -> Result<(), RunError> {
        for f in &self.req.from {
            let text = crate::read_file(f, FileKind::Report)
                .map_err(|e| RunError::Usage(format!("--from {}: {e}", f.display())))?;
            self.m.add_json(&text, &f.display().to_string())?;
        }
        if self.req.from.is_empty() {
            daemon_history(self.target, &mut self.m)?;
        }
        Ok(())
    }

    fn node_gpus_here(&mut self) -> Result<usize, RunError> {
        if let Some(n) = self.gpus_here {
            return Ok(n);
        }
        let n = match self.req.device {
            RunDevice::Cuda => self.target.topo("")?.gpus.len(),
            // CPU ranks: whatever GPUs there are, one per core (no more than a request may start,
            // no fewer than the two DDP needs): more ranks than cores measure the machine's
            // oversubscription, not DDP, and overrun the budget.
            RunDevice::Cpu => default_cpu_ranks(),
        };
        self.gpus_here = Some(n);
        Ok(n)
    }

    /// Sweeps the node's all-reduce from small messages (α) to large (bandwidth) when the
    /// measurements hold no curve for `wanted` GPUs.
    fn ensure_curve(&mut self, wanted: Option<u32>) -> Result<(), RunError> {
        if has_curve(&self.m, wanted) {
            return Ok(());
        }
        // CPU ranks have no NCCL to sweep: their curve is the one their own launch timed.
        if self.req.device == RunDevice::Cpu {
            return Err(RunError::Usage(
                "CPU ranks: no all-reduce curve, since the N-rank launch did not run (raise \
                 --budget) and CPU ranks have no NCCL to sweep; or give --from a report with one"
                    .into(),
            ));
        }
        // A node of one GPU has no interconnect to sweep: say what recommend can do there
        // rather than pass on the sweep's refusal.
        let here = self.node_gpus_here()?;
        if here < 2 {
            return Err(RunError::Usage(one_gpu_node(here)));
        }
        let params = all_reduce_to_256m(4 << 10);
        let r = self.budgeted_sweep(params, wanted.unwrap_or(0), "curve")?;
        self.saved.save("sweep", &r);
        if let Some(s) = r.all_reduce() {
            self.m.sweep = Some((s.clone(), r.header.clone()));
        }
        Ok(())
    }

    /// Compute per micro-batch: given, estimated from FLOPs, measured in the runs gathered, or
    /// measured now by quick runs; and (when measured) the once-per-step optimizer work.
    fn compute(&mut self, model: &ModelInput, gpus: u32) -> Result<MeasuredCompute, RunError> {
        let a = self.req;
        if let Some(ms) = a.step_time_ms {
            if !(ms.is_finite() && ms > 0.0 && ms < 1e7) {
                return Err(RunError::Usage(format!(
                    "--step-time-ms {ms} is not a positive time"
                )));
            }
            let given = ComputeSource::Given {
                seconds: ms / 1e3,
                detail: "--step-time-ms".into(),
            };
            return Ok((given, None));
        }
        if let Some(tflops) = a.estimate_tflops {
            if !(tflops.is_finite() && tflops > 0.0) {
                return Err(RunError::Usage(format!(
                    "--estimate-tflops {tflops} is not positive"
                )));
            }
            let estimated = ComputeSource::Estimated {
                flops: estimate_flops(model, a.micro_batch, a.seq),
                tflops,
            };
            return Ok((estimated, None));
        }
        if let Some(measured) = measured_compute(&self.m, model, a.micro_batch, a.reference) {
            return Ok(measured);
        }
        let ModelInput::Spec { spec } = model else {
            return Err(RunError::Usage(
                "with --params, give --step-time-ms or --estimate-tflops (no model to run)".into(),
            ));
        };
        self.quick_runs(spec, gpus)?;
        measured_compute(&self.m, model, a.micro_batch, a.reference).ok_or_else(|| {
            RunError::Probe(ddpcheck_core::ProbeError::Worker(
                "the 1-GPU DDP run returned no baseline row".into(),
            ))
        })
    }

    /// Two accumulations on one GPU separate per-micro-batch work from the optimizer step.
    /// With repeated launches, `nocomm` on one GPU and on N measures how much N processes slow
    /// each other (one launch each cannot tell that from launch noise: not worth a launch),
    /// only where this node has the GPUs.
    fn quick_runs(&mut self, spec: &ModelSpec, gpus: u32) -> Result<(), RunError> {
        let side_by_side =
            self.req.repeats > 1 && gpus > 1 && gpus as usize <= self.node_gpus_here()?;
        let mut variants = self.one_gpu_launch();
        if side_by_side {
            variants.push("nocomm");
        }
        self.quick_run(spec, &variants, 1, "ddp-1gpu")?;
        if side_by_side {
            self.quick_run(spec, &["nocomm"], gpus, &format!("ddp-nocomm-{gpus}gpu"))?;
        }
        Ok(())
    }

    fn quick_run(
        &mut self,
        spec: &ModelSpec,
        variants: &[&str],
        gpus: u32,
        name: &str,
    ) -> Result<(), RunError> {
        let mut req =
            self.req
                .ddp_request(vec![spec.clone()], variants, vec![gpus], budget::STEPS)?;
        let what = format!(
            "recommend's {gpus}-{} launch",
            if self.req.device == RunDevice::Cpu {
                "rank"
            } else {
                "GPU"
            }
        );
        req.deadline_s = self.deadline_s(&what, req.repeats)?;
        let t0 = Instant::now();
        let ran = self.target.bench_ddp(&req, self.progress);
        // What ran, as it ran (CPU ranks run fp16 for bf16), and for how long, failed or not.
        self.own.launches.push(OwnLaunch {
            gpus,
            variants: req.variants.iter().map(|v| v.name.clone()).collect(),
            seconds: t0.elapsed().as_secs_f64(),
        });
        let r = ran.map_err(|e| self.over_budget(e, &what, req.deadline_s))?;
        // A launch its deadline stopped is TIMEOUT, as everywhere; no model rests on half of it.
        if let Some(stopped) = &r.stopped {
            return Err(self.over_budget(stopped.error().into(), &what, req.deadline_s));
        }
        self.saved.save(name, &r);
        // --compile that did not compile: nothing compiled to recommend on. The eager figures
        // are kept (--save-runs) and the answer is one line.
        if let Some(line) = ddpcheck_core::ddp::compile_failure(&r.results) {
            return Err(RunError::Probe(ProbeError::Unavailable(format!(
                "{line}; recommend without --compile, or fix what the compiler names"
            ))));
        }
        self.m.add_ddp(r);
        Ok(())
    }

    /// Whether this recommendation may measure DDP itself first: a model to run, nothing given
    /// in its place (no `--from`, compute or FLOP rate), and not `--quick`.
    fn measures_first(&self, model: &ModelInput) -> bool {
        let a = self.req;
        matches!(model, ModelInput::Spec { .. })
            && !a.quick
            && a.from.is_empty()
            && a.step_time_ms.is_none()
            && a.estimate_tflops.is_none()
    }

    /// The measure-first path on a node that has the GPUs: the 1-GPU quick run (compute, the
    /// optimizer step, the hook's cost), then ONE N-GPU launch of plain DDP (its step and the
    /// all-reduce in DDP's own process group), `nocomm` (the GPUs side by side) and as many
    /// likely changes as the budget allows. The GPU count is the request's or this node's.
    fn measure_first(&mut self, model: &ModelInput) -> Result<(), RunError> {
        let ModelInput::Spec { spec } = model else {
            return Ok(());
        };
        if !self.measures_first(model) {
            return Ok(());
        }
        let here = len_u32(self.node_gpus_here()?);
        let gpus = self.req.gpus.unwrap_or(here);
        let measured = measured_baseline(&self.m, model, self.req.micro_batch, gpus);
        if gpus < 2 || gpus > here || measured.is_some() {
            return Ok(());
        }
        if measured_compute(&self.m, model, self.req.micro_batch, self.req.reference).is_none() {
            let variants = self.one_gpu_launch();
            self.quick_run(spec, &variants, 1, "ddp-1gpu")?;
        }
        // The launch's estimate from the 1-GPU step in DDP, DDP's own work included: every run
        // of the N-GPU launch pays it, however the speedups' reference leaves it out.
        let Some((compute, optimizer_s)) =
            measured_compute(&self.m, model, self.req.micro_batch, Reference::Ddp)
        else {
            return Ok(());
        };
        let step_s = compute.seconds() + optimizer_s.unwrap_or(0.0);
        let left_s = self.left_s();
        // With --repeats N the launch runs N times, each within its share of what is left.
        let launches = self.req.repeats.max(1);
        let compile_s = self.compile_allowance_s(spec);
        match budget::plan_launch(step_s, left_s / f64::from(launches), compile_s) {
            Some(plan) => {
                (self.progress)(Progress {
                    stage: "recommend".into(),
                    done: 1,
                    total: 2,
                    message: format!(
                        "{} at {gpus} GPUs in one launch, about {:.0} s of {:.0} s left",
                        plan.variants.join(", "),
                        plan.estimate_s,
                        left_s
                    ),
                });
                self.quick_run(spec, &plan.variants, gpus, &format!("ddp-{gpus}gpu"))
            }
            None => {
                let times = if launches > 1 {
                    format!(" × {launches} launches")
                } else {
                    String::new()
                };
                let skipped = format!(
                    "no {gpus}-GPU launch: plain DDP and nocomm need about {:.0} s{times} and {:.0} s of the {:.0} s budget were left; predicted from an all-reduce sweep instead",
                    budget::required_s(step_s, compile_s),
                    left_s.max(0.0),
                    self.req.budget_s
                );
                self.own.skipped = Some(skipped);
                Ok(())
            }
        }
    }

    /// Under `--compile`, what compiling one run of `spec` takes: the longest compile this node
    /// measured for it (its 1-GPU launch, under the same recipe), else [`budget::COMPILE_S`];
    /// `None` for eager.
    fn compile_allowance_s(&self, spec: &ModelSpec) -> Option<f64> {
        self.req.recipe.compile?;
        let name = spec.name();
        let measured = self
            .m
            .ddp
            .iter()
            .filter(|(r, _)| r.model == name)
            .filter_map(|(r, _)| r.compile.as_ref()?.compile_s)
            .filter(|s| s.is_finite() && *s >= 0.0)
            .fold(None, |acc: Option<f64>, s| {
                Some(acc.map_or(s, |a| a.max(s)))
            });
        Some(measured.unwrap_or(budget::COMPILE_S))
    }

    /// Candidate NCCL settings (`--env-ab`), measured on the node: each one's large-message
    /// bandwidth over the current environment's.
    fn env_ab(&mut self) -> Result<Vec<EnvAb>, RunError> {
        let Some(spec) = &self.req.env_ab else {
            return Ok(Vec::new());
        };
        let params = CollectiveParams {
            env_ab: parse_env_ab(spec)?,
            ..all_reduce_to_256m(64 << 20)
        };
        let r = self.budgeted_sweep(params, 0, "env_ab")?;
        let base = r.all_reduce().and_then(busbw_large);
        let mut out = Vec::new();
        for run in r.runs.iter().skip(1) {
            let cand = run
                .run
                .sweeps
                .iter()
                .find(|s| s.op == Collective::AllReduce)
                .and_then(busbw_large);
            if let (Some(b), Some(c)) = (base, cand) {
                if b > 0.0 {
                    out.push(EnvAb {
                        label: run.label.replace('+', ","),
                        busbw_ratio: c / b,
                    });
                }
            }
        }
        Ok(out)
    }

    /// Seconds of the budget left.
    fn left_s(&self) -> f64 {
        self.req.budget_s - self.started.elapsed().as_secs_f64()
    }

    /// The deadline of each of `launches` launches of `what`: their share of the budget left.
    /// With nothing left, it does not start, and the error says so.
    fn deadline_s(&self, what: &str, launches: u32) -> Result<f64, RunError> {
        budget::launch_deadline_s(self.left_s(), launches).ok_or_else(|| {
            RunError::Usage(format!(
                "--budget {:.0} s was spent before {what}: raise --budget",
                self.req.budget_s
            ))
        })
    }

    /// A launch or sweep stopped at its budget's deadline says so, with the same exit code.
    fn over_budget(&self, e: RunError, what: &str, deadline_s: f64) -> RunError {
        match e {
            RunError::Probe(ProbeError::Timeout { stage, seconds })
                if deadline_s < budget::LAUNCH_DEADLINE_S =>
            {
                RunError::Probe(ProbeError::Timeout {
                    stage: format!(
                        "{what} ({stage}), given the {deadline_s:.0} s left of --budget {:.0} s,",
                        self.req.budget_s
                    ),
                    seconds,
                })
            }
            other => other,
        }
    }

    /// An all-reduce sweep within the budget left, recorded against it.
    fn budgeted_sweep(
        &mut self,
        mut params: CollectiveParams,
        gpus: u32,
        purpose: &str,
    ) -> Result<ddpcheck_core::report::BenchCollectivesReport, RunError> {
        let what = format!("recommend's all-reduce sweep ({purpose})");
        let deadline_s = self
            .deadline_s(&what, 1)?
            .min(params.deadline.as_secs_f64());
        params.deadline = Duration::from_secs_f64(deadline_s);
        let t0 = Instant::now();
        let ran = self.target.bench_collectives(&params, self.progress);
        let r = ran.map_err(|e| self.over_budget(e, &what, deadline_s));
        let ranks = r
            .as_ref()
            .ok()
            .and_then(|r| r.all_reduce())
            .map_or(gpus, |s| s.ranks);
        self.own.sweeps.push(OwnSweep {
            gpus: ranks,
            purpose: purpose.to_string(),
            seconds: t0.elapsed().as_secs_f64(),
        });
        r
    }

    /// The 1-GPU launch's variants, and PowerSGD at rank 4 ([`POWERSGD_PROBE`]) where the
    /// node's GPUs talk over PCIe or the host (no NVLink between some pair): there bf16 is
    /// likeliest to leave communication exposed, and PowerSGD's offer needs its compression
    /// compute, which only a 1-GPU run measures. The link's curve is not known yet when this
    /// launch runs (its compute comes first), so the topology decides; one more run in a launch
    /// already paid for costs its steps, not another start-up, and the N-GPU launch's plan is
    /// made from what is left of the budget after it.
    fn one_gpu_launch(&mut self) -> Vec<&'static str> {
        let mut variants = self.req.one_gpu_variants().to_vec();
        let slow_link = self.req.device == RunDevice::Cuda
            && (self.given_curve_is_slow()
                || self
                    .links()
                    .0
                    .is_some_and(|l| l != LinkClass::X && !l.is_nvlink()));
        if slow_link {
            variants.push(POWERSGD_PROBE);
        }
        variants
    }

    /// Whether a curve the caller gave (`--from`, read before any launch) is below
    /// [`SLOW_LINK_GBPS`] at DDP's bucket size: another node's link, or a network, which this
    /// node's own topology does not show.
    fn given_curve_is_slow(&self) -> bool {
        // choose_curve errs where no curve was given: nothing to judge then.
        choose_curve(&self.m, self.req.gpus).is_ok_and(|c| {
            c.curve.busbw_at(floor_u64(DEFAULT_BUCKET_CAP_MB * MIB)) < SLOW_LINK_GBPS
        })
    }

    /// The worst GPU link and GPU memory: from a saved preflight or topology, else asked of
    /// the node (cheap).
    fn links(&mut self) -> (Option<LinkClass>, Option<u64>) {
        if self.m.preflight.is_none() && self.m.topo.is_none() && self.req.from.is_empty() {
            if let Ok(t) = self.target.topo("") {
                self.saved.save("topo", &t);
                self.m.topo = Some(t);
            }
        }
        match (&self.m.preflight, &self.m.topo) {
            (Some(p), _) => (
                p.topology.as_ref().and_then(|t| t.worst_link()),
                p.gpus.first().map(|g| g.memory_total_bytes),
            ),
            (None, Some(t)) => (
                t.topology.worst_link(),
                t.gpus.first().map(|g| g.memory_total_bytes),
            ),
            (None, None) => (None, None),
        }
    }

    /// P2P over PCIe on the node's pairs under `env`, from the topology `links` read.
    fn p2p_risk(&self, env: &BTreeMap<String, String>) -> Option<P2pRisk> {
        let (topology, gpus) = match (&self.m.preflight, &self.m.topo) {
            (Some(p), _) => (p.topology.as_ref()?, &p.gpus),
            (None, Some(t)) => (&t.topology, &t.gpus),
            (None, None) => return None,
        };
        let model = gpus.first().map_or("", |g| g.name.as_str());
        P2pRisk::of(topology, model, env)
    }
}

/// The node's own DDP runs tune the model's overheads.
fn calibration(
    m: &Measurements,
    curve: &LinkCurve,
    curve_header: &Header,
) -> Option<CalibrationInput> {
    let measured: Vec<DdpResult> = m.ddp.iter().map(|(r, _)| r.clone()).collect();
    calibrate(&measured, curve)
        .ok()
        .filter(|c| c.runs_used > 0)
        .map(|c| CalibrationInput {
            source: format!(
                "{} DDP run(s) on {}",
                c.runs_used, curve_header.provenance.hostname
            ),
            cross_check: cross_check(&measured, curve),
            calibration: c,
        })
}

/// Gathers the measurements (reading, sweeping and running what is missing, each run kept in
/// `saved`) and makes the recommendation.
/// A launch that fails after saved runs of another recipe were set aside names them: whoever
/// gave `--from` expected none. The error keeps its kind and exit code.
fn after_set_aside(e: RunError, said: Option<&str>) -> RunError {
    use ddpcheck_core::ProbeError as P;
    let Some(said) = said else { return e };
    let why = |m: String| {
        format!(
            "{said}, not used (give the same flags to use them); measuring this recipe here: {m}"
        )
    };
    match e {
        RunError::Usage(m) => RunError::Usage(why(m)),
        RunError::Probe(P::Unavailable(m)) => RunError::Probe(P::Unavailable(why(m))),
        RunError::Probe(P::Invalid(m)) => RunError::Probe(P::Invalid(why(m))),
        other => other,
    }
}

pub fn build(
    a: &RecommendRequest,
    target: &dyn Runner,
    saved: &mut SavedRuns,
    progress: &mut dyn FnMut(Progress),
) -> Result<RecommendReport, RunError> {
    let started = Instant::now();
    if !(a.target_efficiency > 0.0 && a.target_efficiency <= 1.0) {
        return Err(RunError::Usage(format!(
            "--target-efficiency {} outside (0, 1]",
            a.target_efficiency
        )));
    }
    let model = a.model_input()?;
    if let Some(p) = a.price_per_hour.filter(|p| !(p.is_finite() && *p > 0.0)) {
        return Err(RunError::Usage(format!(
            "--price-per-hour {p} is not a positive price"
        )));
    }
    if !(a.budget_s.is_finite() && a.budget_s > 0.0) {
        return Err(RunError::Usage(format!(
            "--budget {} is not a positive number of seconds",
            a.budget_s
        )));
    }
    let mut g = Gathering {
        req: a,
        target,
        saved,
        progress,
        m: Measurements::default(),
        gpus_here: None,
        started,
        own: OwnMeasurements {
            budget_s: a.budget_s,
            ..OwnMeasurements::default()
        },
    };
    g.read_reports()?;
    if let Some(answer) = g.memory_first(&model, started) {
        return Ok(answer);
    }
    let other_recipe = g.m.set_aside_other_recipes(&model, &a.recipe);
    g.measure_first(&model)
        .map_err(|e| after_set_aside(e, other_recipe.as_deref()))?;
    // The node's GPUs as its sweep or preflight saw them: the default GPU count, and the price's
    // split. DDP's probes may cover only some of them.
    let node_seen = [
        g.m.sweep.as_ref().map(|(s, _)| s.ranks),
        g.m.preflight.as_ref().map(|p| len_u32(p.gpus.len())),
    ]
    .into_iter()
    .flatten()
    .max();
    let wanted = a.gpus.or(node_seen);
    g.ensure_curve(wanted)?;
    // The GPUs the curve was measured on; the curve itself is chosen once the quick runs are
    // in (their N-GPU launch timed the network in DDP's own process group too).
    let measured_ranks = choose_curve(&g.m, wanted)?.curve.ranks;
    let gpus = a.gpus.unwrap_or(measured_ranks);
    let node_gpus = node_seen.unwrap_or(0).max(measured_ranks).max(gpus);
    let (compute, optimizer_s) = g
        .compute(&model, gpus)
        .map_err(|e| after_set_aside(e, other_recipe.as_deref()))?;
    let chosen = choose_curve(&g.m, Some(gpus))?;
    let env_ab = g.env_ab()?;
    let calibration = calibration(&g.m, &chosen.curve, &chosen.header);
    let (worst_link, gpu_memory_bytes) = g.links();
    let nccl_env = nccl_env_from_process();
    let p2p = g.p2p_risk(&nccl_env);
    let own = std::mem::take(&mut g.own);
    let m = &g.m;
    let cpu_ranks = m.ddp.iter().any(|(r, _)| r.device == RunDevice::Cpu);
    let (hook_compute_s, hook_rests_on) = measured_hook_cost(m, &model, a.micro_batch).unzip();
    let compile = a.recipe.compile.and_then(|_| measured_compile(m, &model));
    let input = RecommendInput {
        micro_batch: a.micro_batch,
        seq: a.seq,
        tokens_per_sample: measured_tokens_per_sample(m, &model),
        gpus,
        node_gpus,
        price_per_hour: a.price_per_hour,
        target_efficiency: a.target_efficiency,
        curve: chosen.curve,
        curve_provenance: CurveProvenance {
            method: chosen.method,
            ..provenance_of(&chosen.header)
        },
        worst_link,
        nccl_env,
        env_ab,
        p2p,
        compute,
        calibration,
        bucket_cap_mb: None,
        gpu_memory_bytes,
        memory_peak: fit::measured_peak(m, &model, a.micro_batch),
        memory_phases: fit::measured_phases(m, &model),
        optimizer_s,
        hook_compute_s,
        hook_rests_on,
        powersgd_compute: measured_powersgd_cost(m, &model, a.micro_batch),
        side_by_side: measured_side_by_side(m, &model, a.micro_batch, gpus),
        measured: measured_speedups(m, &model, a.micro_batch, gpus, a.reference),
        other_curve: chosen.other,
        baseline: measured_baseline(m, &model, a.micro_batch, gpus),
        param_layout: measured_layout(m, &model),
        ddp_own_work: measured_ddp_own_work(m, &model, a.micro_batch),
        reference: a.reference,
        host: measured_host(m, &model, a.micro_batch, gpus),
        recipe: a.recipe.clone(),
        other_recipe,
        device: if cpu_ranks { RunDevice::Cpu } else { a.device },
        model,
    };
    let mut rec = recommend(&input).map_err(|e| RunError::Usage(format!("recommend: {e}")))?;
    g.weigh_wrappers(&input.model, &mut rec);
    let h = &chosen.header;
    let header = Header::new(
        ReportKind::Recommend,
        h.backend,
        h.backend_label.clone(),
        h.provenance.clone(),
    );
    Ok(RecommendReport {
        header,
        recommendation: rec,
        verify: Vec::new(),
        verify_gain: None,
        verify_network: None,
        verify_compute: Vec::new(),
        verify_powersgd: None,
        own_measurements: (!own.is_empty()).then_some(own),
        seconds: started.elapsed().as_secs_f64(),
        cpu_ranks,
        compile,
    })
}

/// All-reduce alone from `min_bytes` to 256 MiB, 10 timed iterations after 3, out of place.
fn all_reduce_to_256m(min_bytes: u64) -> CollectiveParams {
    CollectiveParams {
        ops: vec![Collective::AllReduce],
        min_bytes,
        max_bytes: 256 << 20,
        iters: 10,
        warmup_iters: 3,
        in_place: false,
        ..CollectiveParams::default()
    }
}

//! One recommendation's gathering: saved reports or the history, the curve, the compute, quick
//! runs and the node's own launches within the budget.

use ddpcheck_core::num::len_u32;
use ddpcheck_core::ProbeError;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ddpcheck_core::backend::Progress;
use ddpcheck_core::bounded::FileKind;
use ddpcheck_core::collective::{judged_peak, Collective, Sweep};
use ddpcheck_core::ddp::{ModelSpec, Reference, RunDevice, MAX_CPU_RANKS};
use ddpcheck_core::num::floor_u64;
use ddpcheck_core::params::CollectiveParams;
use ddpcheck_core::recommend::{estimate_flops, ComputeSource, EnvAb, ModelInput, P2pRisk};
use ddpcheck_core::step_time::mechanisms::SLOW_LINK_GBPS;
use ddpcheck_core::step_time::{DEFAULT_BUCKET_CAP_MB, MIB};
use ddpcheck_core::topology::LinkClass;

use super::budget::{self, OwnLaunch, OwnMeasurements, OwnSweep};
use super::curve::{choose_curve, has_curve};
use super::measured::{measured_baseline, measured_compute, MeasuredCompute};
use super::measurements::{daemon_history, Measurements};
use super::request::RecommendRequest;
use crate::runner::{RunError, Runner};
use crate::runs::parse_env_ab;
use crate::saved_runs::SavedRuns;

/// The PowerSGD rank the 1-GPU launch measures on a node without NVLink (`powersgd4`): the
/// middle of the ranks PyTorch's documentation suggests (1 to 4, more for some NLP tasks).
const POWERSGD_PROBE: &str = "powersgd4";

/// CPU ranks recommend runs by default: one per core, at least the two DDP needs, at most
/// [`MAX_CPU_RANKS`] (two on a 2-core machine).
fn default_cpu_ranks() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
    cores.clamp(2, MAX_CPU_RANKS as usize)
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

/// One recommendation's gathering: what it asks, where it runs, what it has found so far.
pub(super) struct Gathering<'a> {
    pub(super) req: &'a RecommendRequest,
    pub(super) target: &'a dyn Runner,
    pub(super) saved: &'a mut SavedRuns,
    pub(super) progress: &'a mut dyn FnMut(Progress),
    pub(super) m: Measurements,
    /// This node's GPU count, asked once and only where needed (a curve given by --from may
    /// be another node's).
    pub(super) gpus_here: Option<usize>,
    pub(super) started: Instant,
    /// What recommend measured itself against its budget.
    pub(super) own: OwnMeasurements,
}

impl Gathering<'_> {
    /// Saved reports (`--from`), else the daemon's history.
    pub(super) fn read_reports(&mut self) -> Result<(), RunError> {
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
    pub(super) fn ensure_curve(&mut self, wanted: Option<u32>) -> Result<(), RunError> {
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
        let params = CollectiveParams {
            ops: vec![Collective::AllReduce],
            min_bytes: 4 << 10,
            max_bytes: 256 << 20,
            iters: 10,
            warmup_iters: 3,
            in_place: false,
            ..CollectiveParams::default()
        };
        let r = self.budgeted_sweep(params, wanted.unwrap_or(0), "curve")?;
        self.saved.save("sweep", &r);
        if let Some(s) = r.all_reduce() {
            self.m.sweep = Some((s.clone(), r.header.clone()));
        }
        Ok(())
    }

    /// Compute per micro-batch: given, estimated from FLOPs, measured in the runs gathered, or
    /// measured now by quick runs; and (when measured) the once-per-step optimizer work.
    pub(super) fn compute(
        &mut self,
        model: &ModelInput,
        gpus: u32,
    ) -> Result<MeasuredCompute, RunError> {
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
    pub(super) fn measure_first(&mut self, model: &ModelInput) -> Result<(), RunError> {
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
    pub(super) fn env_ab(&mut self) -> Result<Vec<EnvAb>, RunError> {
        let Some(spec) = &self.req.env_ab else {
            return Ok(Vec::new());
        };
        let params = CollectiveParams {
            ops: vec![Collective::AllReduce],
            min_bytes: 64 << 20,
            max_bytes: 256 << 20,
            iters: 10,
            warmup_iters: 3,
            in_place: false,
            env_ab: parse_env_ab(spec)?,
            ..CollectiveParams::default()
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
    pub(super) fn links(&mut self) -> (Option<LinkClass>, Option<u64>) {
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
    pub(super) fn p2p_risk(&self, env: &BTreeMap<String, String>) -> Option<P2pRisk> {
        let (topology, gpus) = match (&self.m.preflight, &self.m.topo) {
            (Some(p), _) => (p.topology.as_ref()?, &p.gpus),
            (None, Some(t)) => (&t.topology, &t.gpus),
            (None, None) => return None,
        };
        let model = gpus.first().map_or("", |g| g.name.as_str());
        P2pRisk::of(topology, model, env)
    }
}

//! One measured (or simulated) DDP configuration, repeated launches folded into one, the
//! all-reduce curve the runs timed in their own process group, and the scaling arithmetic
//! (speedup, efficiency, exposed communication, cost) against each run's 1-GPU partner: its step
//! without DDP where its launch timed one ([`Reference::Plain`]), else its step in DDP.

use serde::{Deserialize, Serialize};

use super::noise::{noise_bound, paired_log_ratio, sample_sd};
use super::one_gpu_reference;
use super::{HostFacts, ParamLayout, PlainReference, Recipe, Reference, RunDevice, TorchBuckets};
use crate::collective::Sweep;
use crate::num::ToF64;

/// One measured (or simulated) configuration. `Default` leaves what is derived from several runs
/// (speedup, efficiency, launches, uncertainty) empty, for [`merge_repeats`] and [`fill_scaling`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DdpResult {
    pub model: String,
    pub params: u64,
    pub variant: String,
    pub world_size: u32,
    pub micro_batch: u32,
    pub accum: u32,
    /// Median and 90th-percentile optimizer-step time, seconds.
    pub step_time_median_s: f64,
    /// Steps timed (the first launch's, when repeated): more than asked where a minimum timed
    /// stretch (`DdpRequest::min_timed_s`) lengthened a run of short steps. Absent from reports
    /// of runners that do not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_steps: Option<u32>,
    pub step_time_p90_s: f64,
    /// Tokens/s (decoders) or samples/s (MLP) over all GPUs.
    pub throughput: f64,
    pub throughput_unit: String,
    /// Against one GPU of the same model and variant without its comm hook
    /// ([`one_gpu_reference`]), on the step `reference` names; filled by [`fill_scaling`].
    pub speedup: Option<f64>,
    /// What `speedup`, `efficiency`, `exposed_comm_fraction` rest on: the partner's step
    /// without DDP (`plain`) or in DDP (`ddp`). Rows of reports written before the field rest
    /// on the step in DDP.
    #[serde(default = "Reference::before_the_field")]
    pub reference: Reference,
    /// A 1-GPU run timed beside its model without DDP: its DDP step over the plain step, the
    /// median of the interleaved rounds' ratios (DDP's own work at one GPU); filled by
    /// [`fill_scaling`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ddp_over_plain: Option<f64>,
    pub efficiency: Option<f64>,
    /// (step_N − step_1) / step_N for the same recipe: the part of a step that is communication
    /// and synchronisation not hidden behind compute (weak scaling keeps per-GPU work fixed).
    pub exposed_comm_fraction: Option<f64>,
    pub cost_per_million: Option<f64>,
    /// With repeated launches: each launch's median step time, in launch order (the result's
    /// step time is their median). Empty for a single launch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub launch_step_medians_s: Vec<f64>,
    /// With repeated launches at 1 and N GPUs: the relative standard error of `speedup`, from
    /// how far the launches of both sides spread ([`speedup_uncertainty`]). Filled by
    /// [`fill_scaling`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup_uncertainty: Option<f64>,
    /// With repeated launches at 1 and N GPUs: how far, relative, the speedup may move by launch
    /// noise alone ([`speedup_noise_bound`]: Student's t for the launches' degrees of freedom
    /// times `speedup_uncertainty`, at least twice it). Filled by [`fill_scaling`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup_noise_bound: Option<f64>,
    /// On more than one GPU: all-reduces of [`ALL_REDUCE_PROBE_BYTES`] timed alone in the run's
    /// own process group seconds before its steps (the median over launches when repeated).
    /// The network as this run's NCCL saw it; over the host network it moved −16% to +37%
    /// against a `bench collectives` sweep run minutes before (docs/results/2026-11-30-h200x2-hook-cost.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_reduce_probe: Option<Sweep>,
    /// A `nocomm` run on more than one GPU: the median step of one GPU alone inside the same
    /// launch (rank 0 stepping while the other ranks wait idle, in rounds alternating with all
    /// ranks together), the reference N side by side is measured against where the launch's own
    /// speed cancels ([`DdpResult::solo_slowdown`]). The median over launches when repeated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solo_step_time_median_s: Option<f64>,
    /// With repeated launches: each launch's `solo_step_time_median_s`, in the order of
    /// `launch_step_medians_s`. Empty unless every launch had one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub launch_solo_step_medians_s: Vec<f64>,
    /// The model's parameters as the launch's torch registered them (name, shape, dtype,
    /// trainable), in registration order: the layout the step-time model packs into buckets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param_layout: Option<ParamLayout>,
    /// DDP's buckets as torch itself assigned them in this launch, beside ddpcheck's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch_buckets: Option<TorchBuckets>,
    /// The recipe the launch ran (autocast, DDP options); absent from older reports (bf16 and
    /// DDP's defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipe: Option<Recipe>,
    /// `cpu` where the ranks were CPU processes over gloo: not a GPU figure.
    #[serde(default, skip_serializing_if = "RunDevice::is_cuda")]
    pub device: RunDevice,
    /// The model timed without DDP in the same launch, interleaved with these steps
    /// (`DdpRequest::reference`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plain_reference: Option<PlainReference>,
    /// The parameters that got no gradient and the buffers DDP broadcasts, with the broadcast
    /// timed ([`HostFacts`]); absent from older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostFacts>,
    /// A run asked to compile (`Recipe::compile`): what compiling took, outside every timed
    /// step, or the compiler's first line where it failed (the run's figures are then eager).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile: Option<CompileOutcome>,
    /// The largest peak of allocated GPU memory over the ranks (`torch.cuda.max_memory_allocated`),
    /// bytes; an FSDP2 run's before its plain copy came onto the GPU. The largest over launches
    /// when repeated; absent on CPU ranks and from older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_bytes: Option<u64>,
    /// One step after the timed ones read at its phases on rank 0 (the wrapped step, and for
    /// DDP the plain step too); absent on CPU ranks and from older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_phases: Option<RunPhases>,
}

/// A run's steps read at their phases: the wrapped model's, and the plain model's beside it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunPhases {
    pub wrapped: crate::memory::phases::MemoryPhases,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plain: Option<crate::memory::phases::MemoryPhases>,
}

/// How a run's `torch.compile` went: its warm-up ran until steps were steady, and the time it
/// took beyond as many steady steps is the compile time; no timed step holds any of it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CompileOutcome {
    pub mode: super::CompileMode,
    /// Seconds the DDP model's warm-up took beyond as many steady steps: compiling, autotuning
    /// and recompiling. `None` where compiling failed.
    #[serde(default)]
    pub compile_s: Option<f64>,
    /// The same for the model without DDP, with the plain reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plain_compile_s: Option<f64>,
    /// Steps the warm-up until steady took (both sides).
    #[serde(default)]
    pub warmup_steps: u32,
    /// Whether two successive blocks of warm-up steps agreed before the warm-up's bound.
    #[serde(default)]
    pub steady: bool,
    /// Whether dynamo split the DDP model's graph at its buckets (DDPOptimizer,
    /// `torch._dynamo.config.optimize_ddp`); `None` where torch did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ddp_optimizer: Option<bool>,
    /// The compiler's first line where compiling failed; the run then ran eager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl CompileOutcome {
    /// Whether the run's steps ran compiled.
    pub fn ran_compiled(&self) -> bool {
        self.error.is_none()
    }
}

/// The first run whose model failed to compile, as one line: the model, the run and the
/// compiler's first line (that run's figures are eager); `None` where every compile went.
pub fn compile_failure(results: &[DdpResult]) -> Option<String> {
    results.iter().find_map(|r| {
        let error = r.compile.as_ref()?.error.as_ref()?;
        Some(format!(
            "torch.compile failed on {} ({} at {} GPU(s)): {error}; that run's figures are eager",
            r.model, r.variant, r.world_size
        ))
    })
}

impl DdpResult {
    /// Gradient-carrying parameters: the launch's trainable ones where it reported them, else
    /// every parameter.
    pub fn trainable_params(&self) -> u64 {
        self.param_layout
            .as_ref()
            .map_or(self.params, ParamLayout::trainable_params)
    }

    /// Tokens in one sample where the run counted its throughput in tokens (a decoder, or a
    /// factory that declared `tokens_per_sample`): the throughput times the step over the
    /// samples every rank processed in it; `None` for samples/s or figures that are not positive.
    pub fn tokens_per_sample(&self) -> Option<u32> {
        if self.throughput_unit != "tokens/s" {
            return None;
        }
        let samples =
            f64::from(self.world_size) * f64::from(self.micro_batch) * f64::from(self.accum.max(1));
        let tokens = self.throughput * self.step_time_median_s / samples;
        (tokens.is_finite() && tokens >= 1.0)
            .then(|| u32::try_from(crate::num::floor_u64(tokens.round())).unwrap_or(u32::MAX))
    }
}

/// N processes side by side against one alone, measured inside the same launches
/// ([`DdpResult::solo_slowdown`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SoloSlowdown {
    /// The N-GPU step over the one-GPU-alone step: the median over launches of each launch's
    /// ratio.
    pub ratio: f64,
    /// How far ln(ratio) may move by launch noise alone ([`noise_bound`] of its relative
    /// standard error, n − 1 degrees of freedom); `None` for a single launch.
    pub noise_bound: Option<f64>,
}

/// The sizes (bytes per rank) a multi-GPU DDP run all-reduces alone before its steps: 4 KiB for
/// the per-call latency up to 64 MiB, past DDP's 25 MiB buckets, doubling from 1 MiB where a
/// bucket's time is mostly bandwidth. Larger sizes read the last point's bandwidth.
pub const ALL_REDUCE_PROBE_BYTES: [u64; 11] = [
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    2 << 20,
    4 << 20,
    8 << 20,
    16 << 20,
    32 << 20,
    64 << 20,
];

/// The all-reduce curve the runs at `world` GPUs timed in their own process group before their
/// steps: the median of their probes at each size, and how many runs had one.
pub fn probe_curve(results: &[DdpResult], world: u32) -> Option<(Sweep, usize)> {
    let probes: Vec<&Sweep> = results
        .iter()
        .filter(|r| r.world_size == world)
        .filter_map(|r| r.all_reduce_probe.as_ref())
        .collect();
    Some((Sweep::median_of(&probes)?, probes.len()))
}

impl DdpResult {
    /// (slowest − fastest) / median of the launches' step times; `None` for a single launch.
    pub fn launch_spread(&self) -> Option<f64> {
        if self.step_time_median_s <= 0.0 {
            return None;
        }
        let (lo, hi) = self.launch_range()?;
        Some((hi - lo) / self.step_time_median_s)
    }

    /// The sample standard deviation of ln(step time) over the launches: how far one launch
    /// lands from the next, as a fraction. `None` for fewer than two launches.
    pub fn launch_log_sd(&self) -> Option<f64> {
        let logs: Vec<f64> = self
            .launch_step_medians_s
            .iter()
            .filter(|x| x.is_finite() && **x > 0.0)
            .map(|x| x.ln())
            .collect();
        if logs.len() != self.launch_step_medians_s.len() {
            return None;
        }
        sample_sd(&logs)
    }

    /// A `nocomm` run's slowdown against one GPU alone in the same launches, from
    /// `solo_step_time_median_s` (and each launch's, when repeated); `None` without it. Paired
    /// within each launch, the launch's own speed cancels: on 2×H200 launches of the same MLP
    /// step spread 10–15%, more than the slowdown of two processes side by side (7–15%,
    /// docs/results/2026-11-30-h200x2-accumulation-gap.md), which comparing separate launches could not show.
    pub fn solo_slowdown(&self) -> Option<SoloSlowdown> {
        let positive = |x: f64| x.is_finite() && x > 0.0;
        let (l, s) = (
            &self.launch_step_medians_s,
            &self.launch_solo_step_medians_s,
        );
        if l.len() > 1 && l.len() == s.len() {
            let logs: Option<Vec<f64>> = l
                .iter()
                .zip(s)
                .map(|(&n, &one)| (positive(n) && positive(one)).then(|| (n / one).ln()))
                .collect();
            let p = paired_log_ratio(&logs?)?;
            return Some(SoloSlowdown {
                ratio: p.median.exp(),
                noise_bound: Some(p.noise_bound),
            });
        }
        let one = self.solo_step_time_median_s.filter(|x| positive(*x))?;
        positive(self.step_time_median_s).then(|| SoloSlowdown {
            ratio: self.step_time_median_s / one,
            noise_bound: None,
        })
    }

    /// The fastest and the slowest launch's step time; `None` for a single launch.
    pub fn launch_range(&self) -> Option<(f64, f64)> {
        let l = &self.launch_step_medians_s;
        (l.len() > 1).then(|| {
            l.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &x| {
                (lo.min(x), hi.max(x))
            })
        })
    }
}

/// Folds repeated launches of one configuration (model, variant, GPU count, micro-batch,
/// accumulation) into one result: the median of the launches' median step times (throughput
/// scaled to it), the median of their p90s, and every launch's median kept in
/// `launch_step_medians_s`. A launch of a command moves as a whole (on 2xH200 the same gpt2-124m
/// launch ran at ~40.2 or ~42.5 ms a step for its whole length, docs/results), so repeating the
/// launch, not the steps, is what steadies the figure. Order: first appearance.
pub fn merge_repeats(results: Vec<DdpResult>) -> Vec<DdpResult> {
    fn key(r: &DdpResult) -> (&str, &str, u32, u32, u32) {
        (&r.model, &r.variant, r.world_size, r.micro_batch, r.accum)
    }
    let mut groups: Vec<Vec<DdpResult>> = Vec::new();
    for r in results {
        match groups.iter_mut().find(|g| key(&g[0]) == key(&r)) {
            Some(g) => g.push(r),
            None => groups.push(vec![r]),
        }
    }
    groups
        .into_iter()
        .map(|mut g| {
            if g.len() == 1 {
                return g.remove(0);
            }
            let steps: Vec<f64> = g.iter().map(|r| r.step_time_median_s).collect();
            let p90s: Vec<f64> = g.iter().map(|r| r.step_time_p90_s).collect();
            // One GPU alone in each launch (nocomm on N GPUs): kept only if every launch had it.
            let solos: Vec<f64> = g.iter().map_while(|r| r.solo_step_time_median_s).collect();
            let solos = if solos.len() == g.len() {
                solos
            } else {
                Vec::new()
            };
            let plain = PlainReference::fold(
                &g.iter()
                    .map(|r| r.plain_reference.as_ref())
                    .collect::<Vec<_>>(),
            );
            // One configuration, so one GPU count: its launches' probes, folded.
            let probe = probe_curve(&g, g[0].world_size).map(|(sweep, _)| sweep);
            let peak = g.iter().filter_map(|r| r.max_memory_bytes).max();
            let first = g.remove(0);
            // Runners report finite steps; a launch without one does not move the figure.
            let step = crate::expect::median(&steps).unwrap_or(first.step_time_median_s);
            let p90 = crate::expect::median(&p90s).unwrap_or(first.step_time_p90_s);
            // Throughput is work per step over the step time; the work is the same each launch.
            let throughput = if step > 0.0 {
                first.throughput * first.step_time_median_s / step
            } else {
                first.throughput
            };
            DdpResult {
                step_time_median_s: step,
                step_time_p90_s: p90,
                throughput,
                launch_step_medians_s: steps,
                speedup_uncertainty: None,
                all_reduce_probe: probe,
                solo_step_time_median_s: crate::expect::median(&solos),
                launch_solo_step_medians_s: solos,
                plain_reference: plain,
                max_memory_bytes: peak,
                ..first
            }
        })
        .collect()
}

/// The 1-GPU run among `runs` that `r`'s speedup is taken against: the same model's run of
/// `r`'s [`one_gpu_reference`] (without its comm hook), else, in reports that lack that run,
/// the variant's own 1-GPU run.
pub fn one_gpu_partner<'a>(runs: &'a [DdpResult], r: &DdpResult) -> Option<&'a DdpResult> {
    let find = |variant: &str| {
        runs.iter()
            .find(|one| one.world_size == 1 && one.model == r.model && one.variant == variant)
    };
    find(&one_gpu_reference(&r.variant)).or_else(|| find(&r.variant))
}

/// Fills speedup (and its uncertainty), efficiency, exposed communication and cost against one
/// GPU without DDP where the 1-GPU launch timed it, else against one GPU in DDP
/// ([`fill_scaling_against`] with [`Reference::Plain`]).
pub fn fill_scaling(results: &mut [DdpResult], price_per_gpu_hour: Option<f64>) {
    fill_scaling_against(results, price_per_gpu_hour, Reference::Plain);
}

/// The 1-GPU step `one` stands for under `wanted`, and the reference it is: the step without
/// DDP ([`PlainReference::step_against`]) where `wanted` is plain and the launch timed it, else
/// the step in DDP.
fn reference_step(one: &DdpResult, wanted: Reference) -> (f64, Reference) {
    match (&one.plain_reference, wanted) {
        (Some(p), Reference::Plain) => (p.step_against(one.step_time_median_s), Reference::Plain),
        _ => (one.step_time_median_s, Reference::Ddp),
    }
}

/// Fills speedup (and its uncertainty), efficiency, exposed communication and cost from the
/// 1-GPU rows of the same model ([`one_gpu_partner`]) on the step `wanted` names (where the
/// partner has no plain step, its DDP step; each row says which in `reference`). A 1-GPU row
/// against its own plain step shows DDP's own work: its ratio is below 1. Rows without a 1-GPU
/// partner keep `None`. Cost uses the price of one GPU-hour (a node's price divided by its
/// GPUs): a job pays for the GPUs it holds.
pub fn fill_scaling_against(
    results: &mut [DdpResult],
    price_per_gpu_hour: Option<f64>,
    wanted: Reference,
) {
    let singles: Vec<DdpResult> = results
        .iter()
        .filter(|r| r.world_size == 1)
        .cloned()
        .collect();
    for r in results.iter_mut() {
        if let Some(p) = price_per_gpu_hour {
            if r.throughput > 0.0 {
                let per_hour = p * f64::from(r.world_size);
                r.cost_per_million = Some(per_hour * 1e6 / (r.throughput * 3600.0));
            }
        }
        if r.world_size == 1 {
            r.ddp_over_plain = r
                .plain_reference
                .as_ref()
                .and_then(PlainReference::ddp_over_plain);
        }
        if let Some(one) = one_gpu_partner(&singles, r) {
            let (s1, reference) = reference_step(one, wanted);
            if one.throughput > 0.0 && s1 > 0.0 && r.step_time_median_s > 0.0 {
                // The same work per step at the reference's speed.
                let t1 = one.throughput * one.step_time_median_s / s1;
                let speedup = r.throughput / t1;
                r.speedup = Some(speedup);
                r.reference = reference;
                (r.speedup_uncertainty, r.speedup_noise_bound) = if r.world_size > 1 {
                    (speedup_uncertainty(r, one), speedup_noise_bound(r, one))
                } else {
                    (None, None)
                };
                r.efficiency = Some(speedup / f64::from(r.world_size));
                r.exposed_comm_fraction =
                    Some(((r.step_time_median_s - s1) / r.step_time_median_s).clamp(0.0, 1.0));
            }
        }
    }
}

/// How uncertain a speedup measured from repeated launches is: its relative standard error,
/// `√(π/2)·√(σ₁²/n₁ + σ_N²/n_N)`, where σ is each side's [`DdpResult::launch_log_sd`] and n its
/// number of launches (a median's standard error is about √(π/2) times the mean's). `None`
/// unless both sides were launched at least twice.
///
/// Why it matters: on the shared 2xH200 VMs, launches of a 2 ms MLP step spread σ ≈ 0.1, so a
/// speedup from one launch each is uncertain by about ±14%, from five launches each by about ±8%
/// (docs/results/2026-11-30-h200x2-overlap-and-noise.md).
pub fn speedup_uncertainty(multi: &DdpResult, single: &DdpResult) -> Option<f64> {
    let ((a, _), (b, _)) = (launch_variance(multi)?, launch_variance(single)?);
    Some((std::f64::consts::FRAC_PI_2 * (a + b)).sqrt())
}

/// One side's share of a speedup's variance, σ²/n of ln(step) over its n launches, and its
/// degrees of freedom (n − 1). `None` for fewer than two launches.
fn launch_variance(r: &DdpResult) -> Option<(f64, f64)> {
    let sd = r.launch_log_sd()?;
    let n = r.launch_step_medians_s.len().to_f64();
    Some((sd * sd / n, n - 1.0))
}

/// [`noise_bound`] of a speedup (or any ratio of the two runs' step times): σ its
/// [`speedup_uncertainty`], the degrees of freedom the Welch–Satterthwaite ones of the two
/// launch sets. `None` unless both were launched at least twice.
pub fn speedup_noise_bound(multi: &DdpResult, single: &DdpResult) -> Option<f64> {
    let sigma = speedup_uncertainty(multi, single)?;
    let ((a, da), (b, db)) = (launch_variance(multi)?, launch_variance(single)?);
    let welch = (a + b).powi(2) / (a * a / da + b * b / db);
    // Identical launches on both sides leave 0/0: fall back to the pooled count.
    let dof = if welch.is_finite() { welch } else { da + db };
    Some(noise_bound(sigma, dof))
}

/// A run as the memory model reads it.
impl DdpResult {
    /// torch's peak of this run, with its wrapper; `None` where it reported no peak or its
    /// variant is not one this build reads.
    pub fn measured_peak(&self) -> Option<crate::memory::check::MeasuredPeak> {
        let variant: super::DdpVariant = self.variant.parse().ok()?;
        Some(crate::memory::check::MeasuredPeak {
            variant: self.variant.clone(),
            wrapper: variant.wrapper(),
            gpus: self.world_size,
            peak_bytes: self.max_memory_bytes?,
        })
    }

    /// This run's wrapped step read at its phases, with its wrapper and micro-batch; `None`
    /// where it read none or its variant is not one this build reads.
    pub fn phase_run(&self) -> Option<crate::memory::phases::PhaseRun> {
        let variant: super::DdpVariant = self.variant.parse().ok()?;
        Some(crate::memory::phases::PhaseRun {
            variant: self.variant.clone(),
            wrapper: variant.wrapper(),
            micro_batch: self.micro_batch,
            phases: self.memory_phases.as_ref()?.wrapped.clone(),
        })
    }
}

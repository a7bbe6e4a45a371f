//! How much `recommend` measures in its budget: the one N-GPU launch it plans on a fresh node
//! (plain DDP, the GPUs side by side without communication, then the likeliest changes while
//! they fit) and the estimate of its length; and what it measured against the budget. Every
//! launch and sweep of its own runs with the budget's end as its deadline, so the sum of their
//! wall times stays within it (`--verify`'s runs come after the recommendation, on top). The
//! 1-GPU launch runs first and counts by its wall time, the plain blocks of its unhooked runs
//! (the reference, doubling their timed steps) included; the N-GPU launch is then planned from
//! what is left, on the 1-GPU step in DDP, whose own work every N-GPU run pays.

use ddpcheck_core::ddp::{DdpVariant, SIZING_STEPS, SOLO_ROUNDS};
use serde::{Deserialize, Serialize};

/// Seconds a `torchrun` launch takes before its first step (torch import, process group and
/// NCCL init): 16–23 s on the 2×H200 hosts whatever the run's length
/// (docs/results/2026-11-30-h200x2-launch-spread.md).
pub const LAUNCH_S: f64 = 20.0;
/// The all-reduce probe (4 KiB–64 MiB) each multi-GPU run times before its steps.
pub const PROBE_S: f64 = 3.0;
/// Warm-up and timed steps of a quick run.
pub const WARMUP_STEPS: u32 = 5;
pub const STEPS: u32 = 15;
/// Each quick run times at least this long (more than [`STEPS`] where steps are short): runs side
/// by side in one launch then compare to 3-8% where 20-step runs spread 9-17%
/// (docs/results/2026-12-01-h200-one-gpu-launch-noise.md).
pub const MIN_TIMED_S: f64 = 2.0;
/// An N-GPU step also waits on the network and the other GPUs: its estimate is the 1-GPU
/// step times this.
const MARGIN: f64 = 1.5;
/// Forward and backward passes of the bare model before DDP wraps it, one micro-batch each, in
/// every run (`GRAD_CHECK_MICRO_BATCHES` in the benchmark's `host.py`: which parameters get a
/// gradient).
const GRAD_CHECK_PASSES: u32 = 2;
/// Buffer broadcasts each run times after DDP's steps, half of them untimed first
/// (`2 * BROADCAST_REPEATS` in `host.py`).
const BROADCASTS: u32 = 20;
/// What one of those broadcasts is allowed: twice the slowest one timed of a LLaMA-style model's
/// buffers on one H200, 2.4 ms (docs/results/2026-12-03-h200-plain-reference-and-powersgd/).
const BROADCAST_S: f64 = 0.005;
/// A `nocomm` run on N GPUs times one GPU alone and all together, [`SOLO_ROUNDS`] rounds each
/// (the launch's config sends the benchmark that count): twice as many timed blocks.
const NOCOMM_BLOCKS: u32 = 2 * SOLO_ROUNDS;

/// What compiling one run takes before its first steady step, seconds, where this node has not
/// measured it yet (`--compile`): the first compiled step of resnet50 and of a LLaMA-style 200M
/// model took 39 s and 31 s on one H200 with a cold cache (issue 38's timing, torch 2.11). A
/// warm compile cache (kept in ddpcheck's cache folder across launches) makes it far shorter;
/// the 1-GPU launch's own compile time replaces this figure once measured.
pub const COMPILE_S: f64 = 40.0;
/// Steps a compiled run's warm-up until steady may take beyond its first (the benchmark's
/// blocks of 5 until two agree: most settle within four blocks).
const COMPILE_WARMUP_STEPS: u32 = 20;

/// The default budget of recommend's own measurements, seconds.
pub const DEFAULT_BUDGET_S: f64 = 120.0;

/// What must run: plain DDP (the baseline the model is calibrated on, with DDP's own
/// all-reduce probe) and `nocomm` (the GPUs side by side).
const REQUIRED: [&str; 2] = ["base", "nocomm"];
/// The changes recommend chooses among most often, simplest first: measured where the budget
/// allows, predicted otherwise.
const CANDIDATES: [&str; 3] = ["bf16", "accum4", "bf16+accum4"];

/// The N-GPU launch that fits the budget.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchPlan {
    pub variants: Vec<&'static str>,
    pub estimate_s: f64,
}

/// Estimated seconds of one variant's run at N GPUs, `step_s` being one 1-GPU micro-batch plus
/// the optimizer step: the bare model's [`GRAD_CHECK_PASSES`] (one micro-batch each), the sizing
/// steps and two warm-ups, then each timed block of at least [`MIN_TIMED_S`], and the
/// [`BROADCASTS`] of the buffers after them; with `compile_s` (a compiled recipe), that compile
/// and its warm-up until steady first.
fn run_estimate(variant: &str, step_s: f64, compile_s: Option<f64>) -> f64 {
    // The variants here are this module's own names: one that does not parse counts as plain.
    let v = variant.parse::<DdpVariant>().unwrap_or_default();
    let step = f64::from(v.accum.max(1)) * step_s;
    let blocks = if v.nocomm {
        f64::from(NOCOMM_BLOCKS)
    } else {
        1.0
    };
    let untimed = f64::from(2 * WARMUP_STEPS + SIZING_STEPS) * step;
    let timed = (f64::from(STEPS) * step).max(MIN_TIMED_S);
    let compile = compile_s.map_or(0.0, |c| c + f64::from(COMPILE_WARMUP_STEPS) * step);
    PROBE_S + compile + (extra_passes_s(step_s) + untimed + blocks * timed) * MARGIN
}

/// What every run does beside its steps: the bare model's passes and the timed broadcasts.
fn extra_passes_s(step_s: f64) -> f64 {
    f64::from(GRAD_CHECK_PASSES) * step_s + f64::from(BROADCASTS) * BROADCAST_S
}

/// Estimated seconds of the launch with only the required runs (`compile_s`: each run's
/// compile allowance under `--compile`).
pub fn required_s(one_gpu_step_s: f64, compile_s: Option<f64>) -> f64 {
    LAUNCH_S
        + REQUIRED
            .iter()
            .map(|v| run_estimate(v, one_gpu_step_s, compile_s))
            .sum::<f64>()
}

/// The N-GPU launch to run with `left_s` seconds of budget: the required runs and then each
/// candidate in order while the estimate fits; `None` when even the required runs do not.
/// `compile_s`: what compiling each run takes under `--compile` (each run compiles its own
/// DDP model), `None` for eager.
pub fn plan_launch(one_gpu_step_s: f64, left_s: f64, compile_s: Option<f64>) -> Option<LaunchPlan> {
    let mut estimate_s = required_s(one_gpu_step_s, compile_s);
    if estimate_s > left_s {
        return None;
    }
    let mut variants = REQUIRED.to_vec();
    for c in CANDIDATES {
        let more = run_estimate(c, one_gpu_step_s, compile_s);
        if estimate_s + more > left_s {
            break;
        }
        estimate_s += more;
        variants.push(c);
    }
    Some(LaunchPlan {
        variants,
        estimate_s,
    })
}

/// The least budget left a launch or sweep is started with: with less, the budget is spent.
pub const MIN_LEFT_S: f64 = 1.0;

/// The runner's own deadline of a launch (`bench ddp --deadline`'s default): the budget's
/// deadline is never longer.
pub const LAUNCH_DEADLINE_S: f64 = 600.0;

/// Each of `launches` launches' deadline with `left_s` of the budget left: their share of it,
/// never more than the runner's own deadline; `None` when the budget is spent.
pub fn launch_deadline_s(left_s: f64, launches: u32) -> Option<f64> {
    (left_s >= MIN_LEFT_S).then(|| (left_s / f64::from(launches.max(1))).min(LAUNCH_DEADLINE_S))
}

/// What recommend measured itself, for the report: the budget, the launches and sweeps it ran,
/// and the N-GPU launch it left out when the budget did not allow it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OwnMeasurements {
    pub budget_s: f64,
    /// Each launch: GPU count, its variants as they ran, seconds it took.
    pub launches: Vec<OwnLaunch>,
    /// Each all-reduce sweep (the curve where no N-GPU launch timed one, `--env-ab`'s).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sweeps: Vec<OwnSweep>,
    /// Why the N-GPU launch did not run (the budget), when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

impl OwnMeasurements {
    /// Wall seconds of every launch and sweep: what the budget bounds.
    pub fn spent_s(&self) -> f64 {
        self.launches.iter().map(|l| l.seconds).sum::<f64>()
            + self.sweeps.iter().map(|s| s.seconds).sum::<f64>()
    }

    /// Nothing measured and nothing left out.
    pub fn is_empty(&self) -> bool {
        self.launches.is_empty() && self.sweeps.is_empty() && self.skipped.is_none()
    }
}

/// One all-reduce sweep recommend ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OwnSweep {
    pub gpus: u32,
    /// `curve` (the model's all-reduce curve) or `env_ab` (`--env-ab`'s candidates).
    pub purpose: String,
    pub seconds: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OwnLaunch {
    pub gpus: u32,
    pub variants: Vec<String>,
    pub seconds: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt2_124m_on_two_gpus_fits_every_candidate_in_the_default_budget() {
        // gpt2-124m: 40 ms a micro-batch on one H200 (docs/results/2026-11-30-h200x2-gpt2-probes.md),
        // after a 1-GPU launch of about 25 s.
        let plan = plan_launch(0.040, DEFAULT_BUDGET_S - 25.0, None).unwrap();
        assert_eq!(
            plan.variants,
            ["base", "nocomm", "bf16", "accum4", "bf16+accum4"]
        );
        assert!(
            plan.estimate_s < DEFAULT_BUDGET_S - 25.0,
            "{}",
            plan.estimate_s
        );
    }

    #[test]
    fn candidates_are_dropped_last_first_and_nothing_runs_below_the_required() {
        // A 355M-sized step of 100 ms: base and nocomm take 20 s of launch, 3 + 3 s of probes
        // and (2 × 13 untimed steps + 2 × 2 bare passes + 7 timed blocks of 2 s + 2 × 20
        // broadcasts of 5 ms) × 1.5: 52 s; bf16 adds 8.4 s, accum4 20 s.
        let plan = plan_launch(0.100, 61.0, None).unwrap();
        assert_eq!(plan.variants, ["base", "nocomm", "bf16"]);
        assert_eq!(plan_launch(0.100, 40.0, None), None);
    }

    #[test]
    fn a_launch_gets_its_share_of_what_is_left_and_none_once_it_is_spent() {
        assert_eq!(launch_deadline_s(90.0, 1), Some(90.0));
        assert_eq!(launch_deadline_s(90.0, 3), Some(30.0));
        assert_eq!(launch_deadline_s(5000.0, 1), Some(LAUNCH_DEADLINE_S));
        assert_eq!(launch_deadline_s(0.5, 1), None);
        assert_eq!(launch_deadline_s(-3.0, 1), None);
    }

    #[test]
    fn every_pass_of_a_run_is_counted() {
        // 1 s steps: the bare model's 2 passes of one micro-batch, 13 untimed steps (sizing and
        // two warm-ups), 15 timed and 20 buffer broadcasts of 5 ms, with the margin, after the
        // all-reduce probe.
        let want = PROBE_S + (2.0 + 13.0 + 15.0 + 20.0 * 0.005) * MARGIN;
        let base = run_estimate("base", 1.0, None);
        assert!((base - want).abs() < 1e-9, "{base} against {want}");
        // Accumulation repeats the steps' micro-batches, not the bare passes nor the broadcasts.
        let want = PROBE_S + (2.0 + 4.0 * (13.0 + 15.0) + 20.0 * 0.005) * MARGIN;
        let accum4 = run_estimate("accum4", 1.0, None);
        assert!((accum4 - want).abs() < 1e-9, "{accum4} against {want}");
    }

    #[test]
    fn long_steps_count_their_accumulation_and_short_ones_the_minimum_timed_stretch() {
        // 1 s steps: every block is STEPS steps, so accumulation 4 is four times the work (the
        // bare passes and broadcasts, one micro-batch each, aside).
        let fixed = PROBE_S + extra_passes_s(1.0) * MARGIN;
        let one = run_estimate("base", 1.0, None);
        assert!((run_estimate("accum4", 1.0, None) - fixed - 4.0 * (one - fixed)).abs() < 1e-9);
        assert!(
            (run_estimate("bf16+accum4", 1.0, None) - run_estimate("accum4", 1.0, None)).abs()
                < 1e-9
        );
        // 1 ms steps: a block times MIN_TIMED_S whatever the step, nocomm six of them.
        let fixed = PROBE_S + extra_passes_s(0.001) * MARGIN;
        let short = run_estimate("base", 0.001, None);
        assert!((short - run_estimate("base", 0.0005, None)).abs() < 0.05);
        assert!((short - fixed - MIN_TIMED_S * MARGIN).abs() < 0.05);
        let nocomm = run_estimate("nocomm", 0.001, None);
        assert!((nocomm - fixed - 6.0 * MIN_TIMED_S * MARGIN).abs() < 0.05);
    }

    #[test]
    fn a_compiled_recipe_counts_each_runs_compile_against_the_budget() {
        // gpt2-124m's 40 ms step: every candidate fits eager (above); compiling each run with a
        // cold cache does not fit the required runs in the default budget, with a warm one it does.
        let left = DEFAULT_BUDGET_S - 25.0;
        assert_eq!(plan_launch(0.040, left, Some(COMPILE_S)), None);
        let warm = plan_launch(0.040, left, Some(2.0)).unwrap();
        let eager = plan_launch(0.040, left, None).unwrap();
        assert!(warm.variants.len() >= 2 && warm.variants.len() <= eager.variants.len());
        // Each run pays its compile and its warm-up until steady.
        let with = run_estimate("base", 0.040, Some(10.0));
        let without = run_estimate("base", 0.040, None);
        assert!((with - without - 10.0 - 20.0 * 0.040).abs() < 1e-9);
        assert!(
            (required_s(0.040, Some(10.0)) - required_s(0.040, None) - 2.0 * (10.0 + 0.8)).abs()
                < 1e-9
        );
    }
}

//! What the step-time model reads from a set of runs, as `recommend` reads it: compute per
//! micro-batch and the optimizer step from 1-GPU runs at two accumulations, a comm hook's own
//! cost from a 1-GPU hook run, the side-by-side slowdown from `nocomm` runs; and the naive
//! formula the model is compared with.

use ddpcheck_core::ddp::{CommHook, DdpResult, DdpVariant, ModelSpec};
use ddpcheck_core::num::floor_u64;
use ddpcheck_core::step_time::{
    self, GradLayout, LinkCurve, StepInputs, DEFAULT_BUCKET_CAP_MB, MIB,
};

/// The model a run names (`gpt2-124m`, `mlp:1024x4`).
pub fn spec_of(name: &str) -> Option<ModelSpec> {
    if let Some(rest) = name.strip_prefix("mlp:") {
        let (w, d) = rest.split_once('x')?;
        return Some(ModelSpec::square_mlp(w.parse().ok()?, d.parse().ok()?));
    }
    name.parse().ok()
}

/// Mechanism constants to try in place of the model's own (for `--fit` on the fit calls).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Knobs {
    /// The overlap a slow link realises (`mechanisms::SLOW_LINK_OVERLAP`).
    pub slow_link_overlap: Option<f64>,
    /// `mechanisms::NO_SYNC_HOST_S`, seconds.
    pub no_sync_host_s: Option<f64>,
}

/// One model's inputs at one micro-batch and GPU count.
#[derive(Clone, Debug)]
pub struct Reading {
    pub spec: ModelSpec,
    pub world: u32,
    /// One micro-batch on one GPU.
    pub compute_s: f64,
    /// Once-per-step work (0 when only one accumulation was run).
    pub optimizer_s: f64,
    /// A compressing hook's cost per step on one GPU (0 when not measured).
    pub hook_cost_s: f64,
    /// N processes side by side, where it stands out of the launches' noise (1 otherwise).
    pub side_by_side: f64,
    pub knobs: Knobs,
}

fn plain_one_gpu<'a>(runs: &'a [DdpResult], model: &str, hook: CommHook) -> Vec<&'a DdpResult> {
    runs.iter()
        .filter(|r| r.model == model && r.world_size == 1 && r.step_time_median_s > 0.0)
        .filter(|r| {
            r.variant
                .parse::<DdpVariant>()
                .is_ok_and(|v| v.plain_ddp_with(hook))
        })
        .collect()
}

/// Compute per micro-batch and the optimizer step: `step(k) = k·c + o` from 1-GPU runs at
/// accumulation 1 and k (the newest of each), else the 1-GPU step over its accumulation.
fn compute(runs: &[DdpResult], model: &str) -> Option<(f64, f64)> {
    let plain = plain_one_gpu(runs, model, CommHook::None);
    let one = plain
        .iter()
        .rev()
        .find(|r| r.accum == 1)
        .or_else(|| plain.last())?;
    if one.accum == 1 {
        if let Some(many) = plain.iter().rev().find(|r| r.accum > 1) {
            let k = f64::from(many.accum);
            let c = (many.step_time_median_s - one.step_time_median_s) / (k - 1.0);
            let o = one.step_time_median_s - c;
            if c > 0.0 && o >= 0.0 {
                return Some((c, o));
            }
        }
    }
    Some((one.step_time_median_s / f64::from(one.accum.max(1)), 0.0))
}

/// A 1-GPU bf16 (else fp16) run at accumulation 1 over the plain one.
fn hook_cost(runs: &[DdpResult], model: &str) -> f64 {
    let at_one = |hook| {
        plain_one_gpu(runs, model, hook)
            .into_iter()
            .rev()
            .find(|r| r.accum == 1)
    };
    match (
        at_one(CommHook::None),
        at_one(CommHook::Bf16).or_else(|| at_one(CommHook::Fp16)),
    ) {
        (Some(plain), Some(hooked)) => {
            (hooked.step_time_median_s - plain.step_time_median_s).max(0.0)
        }
        _ => 0.0,
    }
}

impl Reading {
    /// From the runs a protocol allows as inputs; `None` without a 1-GPU plain run.
    pub fn from_runs(
        inputs: &[DdpResult],
        model: &str,
        micro_batch: u32,
        world: u32,
    ) -> Option<Self> {
        let spec = spec_of(model)?;
        let (compute_s, optimizer_s) = compute(inputs, model)?;
        let rows: Vec<&DdpResult> = inputs.iter().collect();
        let side_by_side =
            step_time::side_by_side(&rows, model, micro_batch, world).map_or(1.0, |s| s.counted());
        Some(Reading {
            spec,
            world,
            compute_s,
            optimizer_s,
            hook_cost_s: hook_cost(inputs, model),
            side_by_side,
            knobs: Knobs::default(),
        })
    }

    /// The model's inputs for one variant, with the model's default overheads.
    pub fn step_inputs(&self, v: &DdpVariant) -> StepInputs {
        let mut s = StepInputs::new(
            GradLayout::for_model(&self.spec),
            self.compute_s,
            self.world,
            1,
        )
        .with_variant(v);
        s.optimizer_s = self.optimizer_s;
        s.hook_compute_s = self.hook_cost_s;
        s.side_by_side_slowdown = self.side_by_side;
        s
    }

    /// The model's inputs for a variant on a link, with the knobs in place of the model's
    /// constants where set.
    pub fn inputs_on(&self, v: &DdpVariant, curve: &LinkCurve) -> StepInputs {
        let mut s = self.step_inputs(v);
        if let Some(o) = self.knobs.slow_link_overlap {
            let slow = step_time::mechanisms::realised_overlap(curve, self.world) < 1.0
                || curve.busbw_at(floor_u64(DEFAULT_BUCKET_CAP_MB * MIB))
                    < step_time::mechanisms::SLOW_LINK_GBPS;
            s.realised_overlap = Some(if slow { o } else { 1.0 });
        }
        s.no_sync_host_s = self.knobs.no_sync_host_s;
        s
    }

    /// The model's predicted speedup of a variant.
    pub fn predict(&self, v: &DdpVariant, curve: &LinkCurve) -> Option<f64> {
        step_time::predict(&self.inputs_on(v, curve), curve)
            .ok()
            .map(|p| p.speedup)
    }

    /// The naive formula: one GPU's step plus a ring all-reduce of every gradient at the bus
    /// bandwidth the curve gives at DDP's bucket size, none of it overlapped.
    pub fn naive(&self, v: &DdpVariant, curve: &LinkCurve) -> f64 {
        let inputs = self.step_inputs(v);
        let single = f64::from(inputs.accum) * self.compute_s + self.optimizer_s;
        let bytes = inputs.wire_bytes();
        let busbw = curve.busbw_at(floor_u64(DEFAULT_BUCKET_CAP_MB * MIB)) * 1e9;
        let ring = 2.0 * f64::from(self.world - 1) / f64::from(self.world);
        let comm = bytes * ring / busbw;
        f64::from(self.world) * single / (single + comm)
    }
}

//! The sharded answer's step: the node's all-gather and reduce-scatter curves (given with
//! `--from`, else swept here within the budget), the plain step (`--step-time-ms` or
//! `--estimate-tflops`: a model that does not fit one GPU cannot be launched on one), the
//! wrapper's own work at one GPU and its step at N where the node measured them, into core's
//! FSDP2 model ([`ddpcheck_core::recommend::predict_wrapper_step`]).

use ddpcheck_core::collective::{Collective, Sweep};
use ddpcheck_core::ddp::Wrapper;
use ddpcheck_core::memory::MemoryPlan;
use ddpcheck_core::params::CollectiveParams;
use ddpcheck_core::recommend::{
    estimate_flops, predict_wrapper_step, ModelInput, Recommendation, WrapperStepInput,
};
use ddpcheck_core::step_time::fsdp::{Fsdp2Curves, Fsdp2Units};
use ddpcheck_core::step_time::fsdp_own::one_gpu_own;
use ddpcheck_core::step_time::op_curve::OpCurve;
use ddpcheck_core::step_time::{LinkCurve, DEFAULT_BACKWARD_FRACTION};

use super::measured::measured_side_by_side;
use super::Gathering;
use crate::RunError;

/// Why the sharded answer's step is not predicted (said in one reason; the answer stands).
#[derive(Debug, thiserror::Error)]
pub(super) enum WrapperStepError {
    #[error("it needs one GPU's plain step, which a model that does not fit one GPU cannot measure: give --step-time-ms or --estimate-tflops")]
    NoPlainStep,
    #[error("no memory plan")]
    NoMemoryPlan,
    /// The node's GPUs could not be counted, or its sweep did not run.
    #[error("{0}")]
    Node(#[from] RunError),
    /// FSDP2's model refused the inputs (a missing curve, a mesh that cannot run).
    #[error("{0}")]
    Model(#[from] ddpcheck_core::step_time::ModelError),
}

impl Gathering<'_> {
    /// Predicts the sharded answer's step where a plain step is known; otherwise says in one
    /// reason what it needs. Never fails the answer: memory decided it.
    pub(super) fn wrapper_step(&mut self, model: &ModelInput, rec: &mut Recommendation) {
        let Some(wrapper) = Wrapper::from_part(&rec.chosen) else {
            return;
        };
        let plan = rec.memory.clone();
        let result = self
            .step_input(model, rec, plan.as_ref(), wrapper)
            .and_then(|(input, curves)| Ok(predict_wrapper_step(rec, wrapper, input, &curves)?));
        if let Err(why) = result {
            rec.reasons.push(ddpcheck_core::recommend::Reason {
                text: format!("{wrapper}'s step is not predicted: {why}."),
                rests_on: "FSDP2's step-time model (docs/recommend.md, Which wrapper)".into(),
            });
        }
    }

    fn step_input(
        &mut self,
        model: &ModelInput,
        rec: &Recommendation,
        plan: Option<&MemoryPlan>,
        wrapper: Wrapper,
    ) -> Result<(WrapperStepInput, Fsdp2Curves), WrapperStepError> {
        let a = self.req;
        let (plain_step_s, plain_how) = if let Some(ms) = a.step_time_ms {
            let scaled = ms / 1e3 * f64::from(rec.micro_batch) / f64::from(a.micro_batch.max(1));
            (
                scaled,
                "given (--step-time-ms, at the answer's micro-batch)".to_string(),
            )
        } else if let Some(tflops) = a.estimate_tflops {
            let flops = estimate_flops(model, rec.micro_batch, a.seq);
            (
                flops / (tflops * 1e12),
                format!("ESTIMATED from {flops:.3e} FLOPs at {tflops} TFLOP/s"),
            )
        } else {
            return Err(WrapperStepError::NoPlainStep);
        };
        // Every block checkpointed runs its forward again in backward.
        let ckpt = plan
            .and_then(|p| p.fit.as_ref())
            .is_some_and(|f| f.checkpointing);
        let reference_step_s = plain_step_s;
        let (plain_step_s, plain_how) = if ckpt {
            (
                plain_step_s * (2.0 - DEFAULT_BACKWARD_FRACTION),
                format!("{plain_how}, with each block's forward run again (checkpointed)"),
            )
        } else {
            (plain_step_s, plain_how)
        };
        let m = plan
            .map(|p| &p.model)
            .ok_or(WrapperStepError::NoMemoryPlan)?;
        let layers = (m.params.saturating_sub(m.root))
            .checked_div(m.largest_block)
            .unwrap_or(0);
        let units = Fsdp2Units::uniform(m.params, layers, m.largest_block);
        let curves = self.fsdp2_curves(rec.gpus)?;
        let own_measured = self.fsdp2_own_measured(model);
        let measured_step_s = self
            .fsdp2_runs(model, rec.gpus)
            .into_iter()
            .find(|(w, r)| *w == wrapper && r.micro_batch == rec.micro_batch && r.accum == 1)
            .map(|(_, r)| r.step_time_median_s);
        let one_gpu_copy = self.fsdp2_one_gpu_copy();
        let param_bytes = a.recipe.amp.compute_bytes();
        let own = one_gpu_own(
            wrapper,
            &own_measured,
            &units,
            param_bytes,
            one_gpu_copy.as_ref(),
        );
        let (per_sample, unit_word) = match model {
            ModelInput::Spec { spec } if spec.tokens_per_sample() > 1 => {
                (f64::from(spec.tokens_per_sample()), "tokens")
            }
            ModelInput::Spec { .. } => (1.0, "samples"),
            ModelInput::Params { .. } => (f64::from(a.seq.max(1)), "tokens"),
        };
        let input = WrapperStepInput {
            units,
            plain_step_s,
            plain_how,
            reference_step_s,
            units_per_micro_batch: per_sample * f64::from(rec.micro_batch),
            unit_word: unit_word.into(),
            own,
            measured_step_s,
            price_per_gpu_hour: a
                .price_per_hour
                .map(|p| p / f64::from(plan.map_or(1, |p| p.gpus).max(1))),
            curves_how: curves.1,
            side_by_side: self.side_by_side_counted(model, rec.micro_batch, rec.gpus),
            param_bytes,
        };
        Ok((input, curves.0))
    }

    /// The all-gather and reduce-scatter curves at (or nearest above one GPU to) `gpus`, from
    /// the reports given, else swept here; the all-reduce curve beside them.
    fn fsdp2_curves(&mut self, gpus: u32) -> Result<(Fsdp2Curves, String), RunError> {
        let mut how = "from the reports given";
        if !self.has_fsdp2_sweeps() && self.req.from.is_empty() {
            let here = self.node_gpus_here()?;
            if here >= 2 {
                // HSDP and replicate() all-reduce over the replicas too.
                let mut ops = vec![Collective::AllGather, Collective::ReduceScatter];
                if self.m.sweep.is_none() {
                    ops.push(Collective::AllReduce);
                }
                let params = CollectiveParams {
                    ops,
                    min_bytes: 64 << 10,
                    max_bytes: 1 << 30,
                    iters: 10,
                    warmup_iters: 3,
                    in_place: true,
                    ..CollectiveParams::default()
                };
                let r = self.budgeted_sweep(params, gpus, "FSDP2's collectives")?;
                self.saved.save("sweep-fsdp2", &r);
                let h = r.header.clone();
                if let (None, Some(s)) = (&self.m.sweep, r.all_reduce()) {
                    self.m.sweep = Some((s.clone(), h.clone()));
                }
                for run in r.runs.iter().take(1) {
                    for s in &run.run.sweeps {
                        self.m.fsdp2_sweeps.push((s.clone(), h.clone()));
                    }
                }
                how = "swept here by recommend";
            }
        }
        let (curves, ranks) = self.fsdp2_curves_given(gpus);
        Ok((
            curves,
            format!("all_gather and reduce_scatter over {ranks} GPUs, {how}"),
        ))
    }

    /// The curves the measurements hold (given, or swept before), and the all-gather's ranks.
    pub(super) fn fsdp2_curves_given(&self, gpus: u32) -> (Fsdp2Curves, u32) {
        let pick = |op: Collective| -> Option<OpCurve> {
            let best: &Sweep = self
                .m
                .fsdp2_sweeps
                .iter()
                .map(|(s, _)| s)
                .filter(|s| s.op == op && s.ranks >= 2)
                .min_by_key(|s| s.ranks.abs_diff(gpus))?;
            OpCurve::from_sweep(best).ok()
        };
        let curves = Fsdp2Curves {
            all_gather: pick(Collective::AllGather),
            reduce_scatter: pick(Collective::ReduceScatter),
            all_reduce: self
                .m
                .sweep
                .as_ref()
                .and_then(|(s, _)| LinkCurve::from_sweep(s).ok()),
        };
        let ranks = curves.all_gather.as_ref().map_or(0, |c| c.ranks);
        (curves, ranks)
    }

    /// N ranks side by side over one alone where a `nocomm` run measured it beyond its
    /// launches' noise, else 1: the rule DDP's model counts it by.
    pub(super) fn side_by_side_counted(
        &self,
        model: &ModelInput,
        micro_batch: u32,
        gpus: u32,
    ) -> f64 {
        measured_side_by_side(&self.m, model, micro_batch, gpus).map_or(1.0, |s| s.counted())
    }

    fn has_fsdp2_sweeps(&self) -> bool {
        self.m.fsdp2_sweeps.iter().any(|(s, _)| s.ranks >= 2)
    }

    /// A one-GPU all-gather sweep given (its out-of-place time is a copy on the GPU).
    pub(super) fn fsdp2_one_gpu_copy(&self) -> Option<OpCurve> {
        self.m
            .fsdp2_sweeps
            .iter()
            .find(|(s, _)| s.op == Collective::AllGather && s.ranks == 1)
            .and_then(|(s, _)| OpCurve::from_sweep(s).ok())
    }
}

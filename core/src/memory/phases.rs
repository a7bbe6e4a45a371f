//! One optimizer step of a launch read at its phases (`torch.cuda.memory_allocated` and the
//! peak of each phase): what the forward leaves saved, what backward and the optimizer step
//! take. The benchmark reads them after its timed steps, so the optimizer's states exist.
//!
//! A 1-GPU run's phases are its wrapper's measured activations, for any model (one ddpcheck
//! cannot count included): what its forward kept for backward (allocated at the loss less
//! allocated before the forward), less the parameters it kept to compute on, plus what backward
//! allocates as it starts (the loss's gradients, [`MemoryModel::backward_start_per_sample`]).
//! Each wrapper's figure is its own, never carried to another wrapper, and scales linearly with
//! the micro-batch.

use serde::{Deserialize, Serialize};

use super::{ActivationSource, MemoryModel};
use crate::ddp::{Amp, Wrapper};
use crate::num::{floor_u64, ToF64};

/// Bytes allocated at each phase of one step, and each phase's peak.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryPhases {
    pub before_forward: u64,
    /// The loss computed, backward not started: the forward's saved tensors are held.
    pub after_forward: u64,
    pub peak_forward: u64,
    pub after_backward: u64,
    pub peak_backward: u64,
    /// After `optimizer.step()` and `zero_grad(set_to_none=True)`.
    pub after_step: u64,
    pub peak_step: u64,
}

impl MemoryPhases {
    /// What the forward left allocated for backward: activations, the loss's output and the
    /// parameters cast or gathered to compute on.
    pub fn forward_kept(&self) -> u64 {
        self.after_forward.saturating_sub(self.before_forward)
    }
}

/// A 1-GPU run's step read at its phases: its variant, wrapper and micro-batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseRun {
    pub variant: String,
    pub wrapper: Wrapper,
    pub micro_batch: u32,
    pub phases: MemoryPhases,
}

/// One wrapper's activations measured by its own run, at the micro-batch it ran and at the
/// model's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WrapperActivations {
    pub wrapper: Wrapper,
    pub variant: String,
    /// The micro-batch the run measured at, and the activations it measured there.
    pub measured_at: u32,
    pub measured_bytes: u64,
    /// At the model's micro-batch (scaled linearly where it differs).
    pub activations: ActivationSource,
}

impl WrapperActivations {
    /// The same measurement at `micro_batch`, scaled linearly from the one it ran at.
    pub fn at_micro_batch(&self, micro_batch: u32) -> Self {
        let ratio = f64::from(micro_batch) / f64::from(self.measured_at.max(1));
        let scaled = if micro_batch == self.measured_at {
            String::new()
        } else {
            format!(", scaled linearly to micro-batch {micro_batch}")
        };
        WrapperActivations {
            activations: ActivationSource::Measured {
                bytes: floor_u64(self.measured_bytes.to_f64() * ratio),
                what: format!(
                    "MEASURED at micro-batch {} by the 1-GPU step of {} read at its phases (kept \
                     by the forward, less the parameters it kept to compute on, plus the loss's \
                     gradients as backward starts){scaled}",
                    self.measured_at, self.variant
                ),
            },
            ..self.clone()
        }
    }
}

/// The parameters a wrapper keeps to compute on when its loss is computed, bytes: DDP's
/// autocast casts (saved for backward), the bf16 copies `replicate()` and `fsdp-noreshard`
/// keep gathered; none for `fsdp` and HSDP, which reshard after forward (on one H100 `fsdp`'s
/// forward kept exactly the bf16 copy less than `fsdp-noreshard`'s on the decoders, and about
/// it, 56 MB against 51 MB, on resnet50).
fn kept_to_compute(m: &MemoryModel, wrapper: Wrapper) -> u64 {
    let per_param = m.amp.compute_bytes();
    let bytes = match wrapper {
        Wrapper::Ddp if m.amp == Amp::None => 0.0,
        Wrapper::Ddp | Wrapper::Replicate | Wrapper::FsdpNoReshard => per_param * m.params.to_f64(),
        Wrapper::Fsdp | Wrapper::Hsdp => 0.0,
    };
    floor_u64(bytes)
}

/// `run`'s wrapper's activations from its phases, at the model's micro-batch; `None` where the
/// step read nothing at its loss.
pub fn activations_from_phases(m: &MemoryModel, run: &PhaseRun) -> Option<WrapperActivations> {
    let kept = run.phases.forward_kept();
    if kept == 0 || run.micro_batch == 0 {
        return None;
    }
    let at_loss = kept.saturating_sub(kept_to_compute(m, run.wrapper));
    let backward_start = m
        .backward_start_per_sample
        .saturating_mul(u64::from(run.micro_batch));
    let measured = WrapperActivations {
        wrapper: run.wrapper,
        variant: run.variant.clone(),
        measured_at: run.micro_batch,
        measured_bytes: at_loss + backward_start,
        activations: ActivationSource::Unknown,
    };
    Some(measured.at_micro_batch(m.micro_batch))
}

/// `m` with each wrapper's activations measured by the first of `runs` of that wrapper; every
/// other wrapper keeps what it had.
pub fn with_phases(m: &MemoryModel, runs: &[PhaseRun]) -> MemoryModel {
    let mut out = m.clone();
    for run in runs {
        if out.measured.iter().any(|x| x.wrapper == run.wrapper) {
            continue;
        }
        out.measured.extend(activations_from_phases(m, run));
    }
    out
}

/// The phases the model predicts for one step of `wrapper` at one GPU (the simulator's
/// reading, the inverse of [`activations_from_phases`]): the state before the forward (DDP's
/// gradients kept, FSDP2's freed), at the loss the parameters kept to compute on and the
/// activations less the loss's gradients, the peak in backward the row's total (less DDP's
/// unidentified bytes, which the launches held outside the steady step), every gradient after
/// backward.
pub fn predicted_phases(m: &MemoryModel, wrapper: Wrapper) -> MemoryPhases {
    let row = super::predict(m, wrapper, 1);
    let grads_kept = if wrapper == Wrapper::Ddp {
        row.grads_bytes
    } else {
        0
    };
    let before_forward = row.params_bytes + grads_kept + row.optimizer_bytes;
    let backward_start = m
        .backward_start_per_sample
        .saturating_mul(u64::from(m.micro_batch));
    let after_forward = before_forward
        + kept_to_compute(m, wrapper)
        + m.activations_for(wrapper)
            .bytes()
            .saturating_sub(backward_start);
    let unidentified = if wrapper == Wrapper::Ddp {
        row.other_bytes
    } else {
        0
    };
    let after_backward = row.params_bytes + row.grads_bytes + row.optimizer_bytes;
    MemoryPhases {
        before_forward,
        after_forward,
        peak_forward: after_forward,
        after_backward,
        peak_backward: row
            .total_bytes
            .saturating_sub(unidentified)
            .max(after_forward),
        after_step: before_forward,
        peak_step: after_backward,
    }
}

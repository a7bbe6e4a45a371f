//! One optimizer step of a launch read at its phases (`torch.cuda.memory_allocated` and the
//! peak of each phase): what the forward leaves saved, what backward and the optimizer step
//! take. The benchmark reads them after its timed steps, so the optimizer's states exist.

use serde::{Deserialize, Serialize};

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

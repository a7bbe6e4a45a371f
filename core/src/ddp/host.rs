//! What DDP does on the host beside the all-reduces, as a launch measured it on the run's own
//! model: the trainable parameters that got no gradient (DDP needs `find_unused_parameters` for
//! them), whether the same ones got gradients in each checked micro-batch, and the buffers DDP
//! broadcasts from rank 0 in every forward (`broadcast_buffers`), with one broadcast timed.

use serde::{Deserialize, Serialize};

/// A launch's host-side facts (the script's `host` object).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostFacts {
    /// The bare model's gradient check before DDP wraps it; absent for FSDP's runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_grad: Option<NoGrad>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffers: Option<Buffers>,
}

/// Trainable parameters without a gradient after a forward and backward of the bare model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoGrad {
    /// The first of them by name, registration order (the script lists a few).
    pub names: Vec<String>,
    /// How many tensors got no gradient.
    pub count: u32,
    /// Their elements.
    pub params: u64,
    /// Micro-batches checked.
    pub micro_batches: u32,
    /// Whether each checked micro-batch left out the same tensors: a sign, not a proof, that
    /// the graph is static.
    pub same_each_micro_batch: bool,
}

/// The model's buffers and DDP's broadcast of them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Buffers {
    pub count: u32,
    pub bytes: u64,
    /// One broadcast of every buffer as DDP makes it before each forward, timed alone in the
    /// run's process group (median, slowest rank), seconds; `None` where DDP broadcasts none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broadcast_s: Option<f64>,
}

//! One gradient tensor as the step-time model sees it (its size, when it is ready, its dtype and
//! the matrix PowerSGD views it as): shared by the gradient layout and PowerSGD's split.

use serde::{Deserialize, Serialize};

/// One parameter tensor's gradient: its size and when it becomes ready, as a fraction (0..=1) of
/// the backward pass.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GradTensor {
    pub params: u64,
    pub ready: f64,
    /// torch's dtype name; `None`: the step's `grad_bytes_per_param` (fp32 unless told).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    /// The tensor as the matrix PowerSGD's hook views it, `[shape[0], numel / shape[0]]`
    /// (`[n, 1]` for a vector); `None` where the shape is unknown (then it counts as sent
    /// uncompressed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matrix: Option<[u64; 2]>,
}

impl GradTensor {
    pub fn new(params: u64, ready: f64) -> Self {
        GradTensor {
            params,
            ready,
            dtype: None,
            matrix: None,
        }
    }
}

//! One collective's measured cost against its size (`bench collectives --op all_gather`,
//! `reduce_scatter`, `all_reduce`, or nccl-tests' output of them): the out-of-place and in-place
//! times of nccl-tests' `size` column (all_gather: the bytes gathered; reduce_scatter: the bytes
//! reduced), interpolated log–log, at the rank count it was measured at or rescaled to another.

use serde::{Deserialize, Serialize};

use crate::collective::{Collective, Sweep};
use crate::num::ToF64;

use super::ModelError;

/// One measured size: seconds out-of-place, and in-place where the sweep timed it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpPoint {
    pub bytes: u64,
    pub out_of_place_s: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_s: Option<f64>,
}

/// A collective's curve as a sweep measured it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpCurve {
    pub op: Collective,
    pub ranks: u32,
    /// Ascending in size, one point per size, zero sizes left out.
    pub points: Vec<OpPoint>,
}

impl OpCurve {
    /// The curve of a sweep of any collective at any rank count (one rank too: there the
    /// out-of-place all-gather is a copy on the GPU, the in-place one nothing to move).
    pub fn from_sweep(sweep: &Sweep) -> Result<Self, ModelError> {
        let mut points: Vec<OpPoint> = sweep
            .samples
            .iter()
            .filter(|s| s.bytes > 0 && positive(s.out_of_place.time_us))
            .map(|s| OpPoint {
                bytes: s.bytes,
                out_of_place_s: s.out_of_place.time_us * 1e-6,
                in_place_s: s
                    .in_place
                    .map(|t| t.time_us * 1e-6)
                    .filter(|t| positive(*t)),
            })
            .collect();
        points.sort_by_key(|p| p.bytes);
        points.dedup_by_key(|p| p.bytes);
        if points.is_empty() {
            return Err(ModelError::EmptySweep);
        }
        Ok(OpCurve {
            op: sweep.op,
            ranks: sweep.ranks.max(1),
            points,
        })
    }

    /// Seconds for one call of `bytes` at the measured rank count: log–log between points, the
    /// smallest point's time below them, the largest point's bandwidth above them.
    pub fn time_s(&self, bytes: f64, in_place: bool) -> f64 {
        if bytes <= 0.0 {
            return 0.0;
        }
        let t = |p: &OpPoint| {
            if in_place {
                p.in_place_s.unwrap_or(p.out_of_place_s)
            } else {
                p.out_of_place_s
            }
        };
        let (first, last) = (&self.points[0], &self.points[self.points.len() - 1]);
        if bytes <= first.bytes.to_f64() {
            return t(first);
        }
        if bytes >= last.bytes.to_f64() {
            return t(last) * bytes / last.bytes.to_f64();
        }
        let x = bytes.ln();
        self.points
            .windows(2)
            .find_map(|w| {
                let (x0, x1) = (w[0].bytes.to_f64().ln(), w[1].bytes.to_f64().ln());
                (x >= x0 && x <= x1).then(|| {
                    let f = if x1 > x0 { (x - x0) / (x1 - x0) } else { 0.0 };
                    (t(&w[0]).ln() + f * (t(&w[1]).ln() - t(&w[0]).ln())).exp()
                })
            })
            .unwrap_or_else(|| t(last))
    }

    /// Seconds for one in-place call of `bytes` over `ranks` GPUs: 0 on one (a collective of one
    /// rank moves nothing between GPUs); at another count than measured, the time beyond the
    /// smallest size's (the latency) rescaled by nccl-tests' bus factor, as the all-reduce curve
    /// is. `None` where the curve was measured on one GPU and `ranks` is more: a copy on one
    /// GPU says nothing of the links between them.
    pub fn between_gpus_s(&self, bytes: f64, ranks: u32) -> Option<f64> {
        if ranks <= 1 || bytes <= 0.0 {
            return Some(0.0);
        }
        if self.ranks <= 1 {
            return None;
        }
        let t = self.time_s(bytes, true);
        if ranks == self.ranks {
            return Some(t);
        }
        let a = self.time_s(1.0, true).min(t);
        Some(a + (t - a) * self.op.busbw_factor(ranks) / self.op.busbw_factor(self.ranks))
    }
}

fn positive(t: f64) -> bool {
    t.is_finite() && t > 0.0
}

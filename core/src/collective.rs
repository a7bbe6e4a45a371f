//! Collective operations and their samples, with nccl-tests' algbw/busbw arithmetic and table.

use std::fmt;
use std::str::FromStr;

use crate::num::ToF64;
use serde::{Deserialize, Serialize};

/// Messages at least this large are compared with the reference table.
pub const LARGE_MESSAGE: u64 = 64 << 20;

/// The all-reduce figure a sweep is judged and shown by: its best busbw at `LARGE_MESSAGE` or
/// more, else at any size (a sweep that stopped short of it), with the size it was reached at.
pub fn judged_peak(s: &Sweep) -> Option<(u64, f64)> {
    s.peak_busbw(LARGE_MESSAGE).or_else(|| s.peak_busbw(0))
}

/// A collective, named as nccl-tests names its binaries (`all_reduce` → `all_reduce_perf`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    AllReduce,
    AllGather,
    ReduceScatter,
    #[serde(rename = "alltoall")]
    AllToAll,
    Broadcast,
    Reduce,
}

impl Collective {
    pub const ALL: [Collective; 6] = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllToAll,
        Collective::Broadcast,
        Collective::Reduce,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::AllToAll => "alltoall",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
        }
    }

    /// busbw = algbw × factor (nccl-tests doc/PERFORMANCE.md): the bandwidth each link carries.
    pub fn busbw_factor(self, ranks: u32) -> f64 {
        let n = f64::from(ranks.max(1));
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => {
                (n - 1.0) / n
            }
            Collective::Broadcast | Collective::Reduce => 1.0,
        }
    }

    /// Whether nccl-tests prints a reduction operator for it.
    pub fn has_redop(self) -> bool {
        matches!(
            self,
            Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce
        )
    }

    /// Whether nccl-tests prints a root for it.
    pub fn has_root(self) -> bool {
        matches!(self, Collective::Broadcast | Collective::Reduce)
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown collective {0:?}: expected all_reduce, all_gather, reduce_scatter, alltoall, broadcast or reduce")]
pub struct ParseCollectiveError(pub String);

impl FromStr for Collective {
    type Err = ParseCollectiveError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm = s.trim().to_ascii_lowercase().replace('-', "_");
        Collective::ALL
            .into_iter()
            .find(|c| c.name() == norm || format!("{}_perf", c.name()) == norm)
            .ok_or_else(|| ParseCollectiveError(s.to_string()))
    }
}

/// One timed run of one size, out-of-place or in-place.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Mean time of one collective, microseconds.
    pub time_us: f64,
    /// bytes / time, in GB/s (1e9 bytes per second), as nccl-tests prints it.
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
    /// Elements that differed from the expected result; `None` when the check did not run.
    pub wrong: Option<u64>,
}

impl Timing {
    /// Derives algbw and busbw from the size and the measured time, as nccl-tests does.
    pub fn from_time(
        op: Collective,
        ranks: u32,
        bytes: u64,
        time_us: f64,
        wrong: Option<u64>,
    ) -> Self {
        let algbw = if time_us > 0.0 {
            bytes.to_f64() / (time_us * 1e-6) / 1e9
        } else {
            0.0
        };
        Timing {
            time_us,
            algbw_gbps: algbw,
            busbw_gbps: algbw * op.busbw_factor(ranks),
            wrong,
        }
    }
}

/// One size of a sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Message size in bytes (nccl-tests' `size` column: per-rank buffer for all_reduce).
    pub bytes: u64,
    /// Elements per rank.
    pub count: u64,
    pub dtype: String,
    pub out_of_place: Timing,
    pub in_place: Option<Timing>,
}

/// A sweep of one collective over sizes, on one communicator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sweep {
    pub op: Collective,
    pub ranks: u32,
    pub redop: String,
    pub root: i32,
    pub samples: Vec<Sample>,
}

impl Sweep {
    /// nccl-tests' `# Avg bus bandwidth`: the mean busbw over every size, out-of-place and in-place.
    pub fn avg_busbw(&self) -> f64 {
        let vals: Vec<f64> = self
            .samples
            .iter()
            .flat_map(|s| std::iter::once(s.out_of_place).chain(s.in_place))
            .map(|t| t.busbw_gbps)
            .collect();
        if vals.is_empty() {
            0.0
        } else {
            vals.iter().sum::<f64>() / vals.len().to_f64()
        }
    }

    /// An all-reduce sweep from (bytes per rank, seconds) pairs timed out of place on float32
    /// buffers, e.g. by the DDP runner in its own process group; pairs whose time is not a
    /// positive number are left out. `None` when none is left.
    pub fn all_reduce_from_times(ranks: u32, times: &[(u64, f64)]) -> Option<Sweep> {
        let op = Collective::AllReduce;
        let samples: Vec<Sample> = times
            .iter()
            .filter(|(bytes, s)| *bytes > 0 && s.is_finite() && *s > 0.0)
            .map(|&(bytes, s)| Sample {
                bytes,
                count: bytes / 4,
                dtype: "float".into(),
                out_of_place: Timing::from_time(op, ranks, bytes, s * 1e6, None),
                in_place: None,
            })
            .collect();
        (!samples.is_empty()).then(|| Sweep {
            op,
            ranks,
            redop: "sum".into(),
            root: -1,
            samples,
        })
    }

    /// Several sweeps of one collective and rank count folded into one: at each size all of
    /// them measured, the median out-of-place time. `None` when they share no size, or differ
    /// in collective or ranks.
    pub fn median_of(sweeps: &[&Sweep]) -> Option<Sweep> {
        let first = sweeps.first()?;
        if sweeps
            .iter()
            .any(|s| s.op != first.op || s.ranks != first.ranks)
        {
            return None;
        }
        let samples: Vec<Sample> = first
            .samples
            .iter()
            .filter_map(|s| {
                let times: Option<Vec<f64>> = sweeps
                    .iter()
                    .map(|w| {
                        w.samples
                            .iter()
                            .find(|x| x.bytes == s.bytes)
                            .map(|x| x.out_of_place.time_us)
                    })
                    .collect();
                let t = crate::expect::median(&times?)?;
                Some(Sample {
                    out_of_place: Timing::from_time(first.op, first.ranks, s.bytes, t, None),
                    in_place: None,
                    ..s.clone()
                })
            })
            .collect();
        (!samples.is_empty()).then(|| Sweep {
            samples,
            ..(*first).clone()
        })
    }

    /// Total wrong elements over the sweep, if any check ran.
    pub fn wrong_total(&self) -> Option<u64> {
        let mut any = false;
        let mut sum = 0u64;
        for t in self
            .samples
            .iter()
            .flat_map(|s| std::iter::once(s.out_of_place).chain(s.in_place))
        {
            if let Some(w) = t.wrong {
                any = true;
                sum = sum.saturating_add(w);
            }
        }
        any.then_some(sum)
    }

    /// Best out-of-place busbw among samples of at least `min_bytes`.
    pub fn peak_busbw(&self, min_bytes: u64) -> Option<(u64, f64)> {
        self.samples
            .iter()
            .filter(|s| s.bytes >= min_bytes)
            .map(|s| (s.bytes, s.out_of_place.busbw_gbps))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// Out-of-place busbw at a size, interpolated in log(size) between measured points and
    /// clamped at the ends. Used by the step-time model to read the node's curve.
    pub fn busbw_at(&self, bytes: u64) -> Option<f64> {
        let pts: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter(|s| s.bytes > 0 && s.out_of_place.busbw_gbps > 0.0)
            .map(|s| (s.bytes.to_f64().ln(), s.out_of_place.busbw_gbps))
            .collect();
        let x = bytes.max(1).to_f64().ln();
        let first = pts.first()?;
        let last = pts.last()?;
        if x <= first.0 {
            return Some(first.1);
        }
        if x >= last.0 {
            return Some(last.1);
        }
        pts.windows(2)
            .find(|w| x >= w[0].0 && x <= w[1].0)
            .map(|w| {
                let t = (x - w[0].0) / (w[1].0 - w[0].0);
                w[0].1 + t * (w[1].1 - w[0].1)
            })
    }
}

/// Sizes from `min` to `max` bytes, multiplying by `factor` (nccl-tests' -b/-e/-f).
pub fn size_ladder(min: u64, max: u64, factor: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut b = min.max(1);
    let f = factor.max(2);
    while b <= max {
        out.push(b);
        match b.checked_mul(f) {
            Some(n) => b = n,
            None => break,
        }
    }
    out
}

#[cfg(test)]
mod tests;

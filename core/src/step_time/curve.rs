//! The node's all-reduce curve: measured points read by interpolation, and `α + x/B` fitted on
//! relative errors for sizes, world sizes and given numbers beyond them.

use serde::{Deserialize, Serialize};

use super::ModelError;
use crate::collective::{Collective, Sweep};
use crate::num::ToF64;

fn ring_factor(world: u32) -> f64 {
    Collective::AllReduce.busbw_factor(world)
}

/// How [`LinkCurve`] turns a size into a time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CurveMode {
    /// Interpolate the measured points (log–log); α–β outside them. The default.
    #[default]
    Interpolate,
    /// Always `α + bytes·2(n−1)/n / busbw` with the fitted (or given) α and busbw.
    AlphaBeta,
}

/// One measured all-reduce: per-rank buffer size and mean time.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    pub bytes: u64,
    pub time_s: f64,
}

/// The node's all-reduce cost as a function of size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkCurve {
    /// Ranks the curve was measured (or given) at.
    pub ranks: u32,
    /// Per-call latency α, seconds.
    pub alpha_s: f64,
    /// Asymptotic bus bandwidth (1/β), GB/s (1e9 bytes/s).
    pub busbw_gbps: f64,
    /// Measured points, ascending in size; empty for given numbers.
    pub points: Vec<CurvePoint>,
    pub mode: CurveMode,
}

impl LinkCurve {
    /// Given numbers: a flat bus bandwidth and a latency (α = 0 when none is published).
    pub fn flat(ranks: u32, busbw_gbps: f64, alpha_s: f64) -> Result<Self, ModelError> {
        if !(busbw_gbps.is_finite() && busbw_gbps > 0.0) {
            return Err(ModelError::Invalid(format!(
                "bus bandwidth {busbw_gbps} GB/s must be positive"
            )));
        }
        if !(alpha_s.is_finite() && alpha_s >= 0.0) {
            return Err(ModelError::Invalid(format!(
                "latency {alpha_s} s must be zero or positive"
            )));
        }
        Ok(LinkCurve {
            ranks: ranks.max(2),
            alpha_s,
            busbw_gbps,
            points: Vec::new(),
            mode: CurveMode::AlphaBeta,
        })
    }

    /// From a measured all-reduce sweep (out-of-place times). Fits α and busbw (see the module
    /// docs) and keeps the points for interpolation.
    pub fn from_sweep(sweep: &Sweep) -> Result<Self, ModelError> {
        if sweep.op != Collective::AllReduce {
            return Err(ModelError::NotAllReduce(sweep.op.name().to_string()));
        }
        if sweep.ranks < 2 {
            return Err(ModelError::Invalid(format!(
                "an all-reduce curve needs at least 2 ranks, the sweep has {}",
                sweep.ranks
            )));
        }
        let mut pts: Vec<CurvePoint> = sweep
            .samples
            .iter()
            .filter(|s| {
                s.bytes > 0 && s.out_of_place.time_us.is_finite() && s.out_of_place.time_us > 0.0
            })
            .map(|s| CurvePoint {
                bytes: s.bytes,
                time_s: s.out_of_place.time_us * 1e-6,
            })
            .collect();
        if pts.is_empty() {
            return Err(ModelError::EmptySweep);
        }
        pts.sort_by_key(|p| p.bytes);
        // Repeated sizes: keep their mean, so interpolation sees one point per size.
        let mut merged: Vec<(CurvePoint, u32)> = Vec::new();
        for p in pts {
            match merged.last_mut() {
                Some((q, n)) if q.bytes == p.bytes => {
                    q.time_s += p.time_s;
                    *n += 1;
                }
                _ => merged.push((p, 1)),
            }
        }
        let points: Vec<CurvePoint> = merged
            .into_iter()
            .map(|(p, n)| CurvePoint {
                bytes: p.bytes,
                time_s: p.time_s / f64::from(n),
            })
            .collect();
        let f = ring_factor(sweep.ranks);
        let (alpha_s, g) = fit_alpha_beta(
            &points
                .iter()
                .map(|p| (p.bytes.to_f64() * f, p.time_s))
                .collect::<Vec<_>>(),
        )?;
        Ok(LinkCurve {
            ranks: sweep.ranks,
            alpha_s,
            busbw_gbps: 1.0 / g / 1e9,
            points,
            mode: CurveMode::Interpolate,
        })
    }

    pub fn with_mode(mut self, mode: CurveMode) -> Self {
        self.mode = mode;
        self
    }

    fn alpha_beta_s(&self, bytes: f64, world: u32) -> f64 {
        self.alpha_s + bytes * ring_factor(world) / (self.busbw_gbps * 1e9)
    }

    /// Time at the measured rank count: log–log interpolation between points, α–β (capped by the
    /// smallest point) below them, the last point's bus bandwidth above them.
    fn measured_time_s(&self, bytes: f64) -> Option<f64> {
        let first = self.points.first()?;
        let last = self.points.last()?;
        let f = ring_factor(self.ranks);
        if bytes <= first.bytes.to_f64() {
            return Some(self.alpha_beta_s(bytes, self.ranks).min(first.time_s));
        }
        if bytes >= last.bytes.to_f64() {
            let bus = last.bytes.to_f64() * f / last.time_s;
            return Some(last.time_s + (bytes - last.bytes.to_f64()) * f / bus);
        }
        let x = bytes.ln();
        self.points.windows(2).find_map(|w| {
            let (x0, x1) = (w[0].bytes.to_f64().ln(), w[1].bytes.to_f64().ln());
            (x >= x0 && x <= x1).then(|| {
                let t = if x1 > x0 { (x - x0) / (x1 - x0) } else { 0.0 };
                (w[0].time_s.ln() + t * (w[1].time_s.ln() - w[0].time_s.ln())).exp()
            })
        })
    }

    /// Seconds for one all-reduce of `bytes` per rank over `world` ranks (0 for one rank).
    pub fn allreduce_s(&self, bytes: f64, world: u32) -> f64 {
        if world <= 1 || bytes <= 0.0 {
            return 0.0;
        }
        match (self.mode, self.measured_time_s(bytes)) {
            (CurveMode::Interpolate, Some(t)) if world == self.ranks => t,
            (CurveMode::Interpolate, Some(t)) => {
                // Another world size: keep the latency, rescale the bandwidth part by the ring
                // factor (ring busbw is roughly independent of the rank count).
                let a = self.alpha_s.min(t);
                a + (t - a) * ring_factor(world) / ring_factor(self.ranks)
            }
            _ => self.alpha_beta_s(bytes, world),
        }
    }

    /// The bus bandwidth the curve gives at a size (as nccl-tests would report it), GB/s.
    pub fn busbw_at(&self, bytes: u64) -> f64 {
        let b = bytes.max(1).to_f64();
        let t = self.allreduce_s(b, self.ranks);
        if t > 0.0 {
            b * ring_factor(self.ranks) / t / 1e9
        } else {
            self.busbw_gbps
        }
    }
}

/// Weighted least squares of `t = α + g·x` with weights `1/t²`; α is clamped at 0 (then `g` is
/// refitted alone). Returns (α, g).
fn fit_alpha_beta(pts: &[(f64, f64)]) -> Result<(f64, f64), ModelError> {
    let (mut sw, mut sx, mut sxx, mut st, mut sxt) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(x, t) in pts {
        let w = 1.0 / (t * t);
        sw += w;
        sx += w * x;
        sxx += w * x * x;
        st += w * t;
        sxt += w * x * t;
    }
    if sxx <= 0.0 {
        return Err(ModelError::EmptySweep);
    }
    let det = sw * sxx - sx * sx;
    let mut fit = if pts.len() >= 2 && det > 1e-12 * sw * sxx {
        let alpha = (st * sxx - sx * sxt) / det;
        let g = (sw * sxt - sx * st) / det;
        (alpha, g)
    } else {
        (0.0, sxt / sxx)
    };
    if fit.0 < 0.0 {
        fit = (0.0, sxt / sxx);
    }
    if !(fit.1.is_finite() && fit.1 > 0.0) {
        return Err(ModelError::Invalid(
            "all-reduce time does not grow with size: no bandwidth can be fitted".into(),
        ));
    }
    Ok(fit)
}

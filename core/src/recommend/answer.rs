//! The answer in the user's terms: how many times sooner N GPUs finish the same work than one
//! GPU, and how much more (or less) GPU time, and money with a price, they spend per million
//! tokens or samples. One GPU is nearly always cheaper per token: N GPUs buy wall-clock time
//! ("rent the 4x machine when wall-clock time matters, not to save money": the 4×A6000 seed).

use serde::{Deserialize, Serialize};

use super::basis::Basis;
use super::words::Words;
use super::{RecommendInput, VariantRow};
use crate::units::fmt_money;

/// Below this much more device time per token (relative), N GPUs cost about what one does and
/// the answer does not call one GPU cheaper.
const SAME_COST: f64 = 0.01;

/// The chosen row against one GPU running the same recipe, per million units of work.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// The row it speaks of: the chosen one, or the best where one GPU is recommended.
    pub variant: String,
    pub gpus: u32,
    /// How many times sooner N GPUs finish the same work than one GPU (the speedup).
    pub times_sooner: f64,
    /// `times_sooner` is the node's measurement of the row, not the model's prediction.
    pub measured: bool,
    /// `tokens` or `samples`.
    pub unit: String,
    /// Device-seconds (GPU-seconds, or CPU-rank-seconds) N GPUs spend per million units.
    pub gpu_seconds_per_million: f64,
    /// The same on one GPU (the same recipe, without a comm hook).
    pub one_gpu_seconds_per_million: f64,
    /// Price of one GPU-hour (the node's `--price-per-hour` over its GPUs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_per_gpu_hour: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_per_million: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub one_gpu_cost_per_million: Option<f64>,
}

impl Answer {
    /// The answer for `row`: its measured speedup where the node measured it, else the model's.
    pub(super) fn new(
        input: &RecommendInput,
        basis: &Basis,
        row: &VariantRow,
        price_per_gpu_hour: Option<f64>,
    ) -> Option<Answer> {
        let (times_sooner, measured) = match &row.measured {
            Some(m) => (m.speedup, true),
            None => (row.prediction.speedup, false),
        };
        let n = input.gpus;
        // One GPU, the same recipe (accumulation included) without a hook: the speedup's reference.
        let one_step = row.prediction.single_gpu_step_s;
        let units = basis.units * f64::from(row.accum.max(1));
        if !(one_step > 0.0 && units > 0.0 && times_sooner > 0.0) {
            return None;
        }
        let one_gpu_s = 1e6 * one_step / units;
        let gpu_s = one_gpu_s * f64::from(n) / times_sooner;
        let money = |s: f64| price_per_gpu_hour.map(|p| p * s / 3600.0);
        Some(Answer {
            variant: row.variant.clone(),
            gpus: n,
            times_sooner,
            measured,
            unit: basis.unit_word.to_string(),
            gpu_seconds_per_million: gpu_s,
            one_gpu_seconds_per_million: one_gpu_s,
            price_per_gpu_hour,
            cost_per_million: money(gpu_s),
            one_gpu_cost_per_million: money(one_gpu_s),
        })
    }

    /// N GPUs' device time per unit over one GPU's: `N / times_sooner`.
    pub fn gpu_time_ratio(&self) -> f64 {
        self.gpu_seconds_per_million / self.one_gpu_seconds_per_million
    }

    /// One GPU does the work for noticeably less device time (and money).
    pub fn one_gpu_cheaper(&self) -> bool {
        self.gpu_time_ratio() > 1.0 + SAME_COST
    }

    /// `2 GPUs finish the same work 1.95× sooner than one GPU (measured) and spend 3% more GPU
    /// time per million tokens (2.94 against 2.86 GPU-seconds; $0.002045 against $0.001989 at
    /// $2.50 a GPU-hour)`.
    pub(super) fn sentence(&self, w: &Words) -> String {
        let s = self.times_sooner;
        let how = if self.measured {
            "measured"
        } else {
            "predicted"
        };
        let speed = if s >= 1.0 {
            format!(
                "{} finish the same work {s:.2}× sooner than {} ({how})",
                w.n(self.gpus),
                w.one()
            )
        } else {
            format!(
                "{} take {:.2}× as long as {} for the same work ({how})",
                w.n(self.gpus),
                1.0 / s,
                w.one()
            )
        };
        let ratio = self.gpu_time_ratio();
        let more = if (ratio - 1.0).abs() < 0.005 {
            format!("about the same {}", w.time())
        } else if ratio > 1.0 {
            format!("{:.0}% more {}", (ratio - 1.0) * 100.0, w.time())
        } else {
            format!("{:.0}% less {}", (1.0 - ratio) * 100.0, w.time())
        };
        let money = match (
            self.cost_per_million,
            self.one_gpu_cost_per_million,
            self.price_per_gpu_hour,
        ) {
            (Some(c), Some(c1), Some(p)) => format!(
                "; {} against {} at {} a {}",
                fmt_money(c),
                fmt_money(c1),
                fmt_money(p),
                w.hour()
            ),
            _ => String::new(),
        };
        let (n_time, one_time) = (
            w.device_time(self.gpu_seconds_per_million),
            w.device_time(self.one_gpu_seconds_per_million),
        );
        // `4.71 against 2.86 GPU-seconds` where both read in the same unit.
        let times = match (n_time.split_once(' '), one_time.split_once(' ')) {
            (Some((a, unit)), Some((b, same))) if unit == same => format!("{a} against {b} {unit}"),
            _ => format!("{n_time} against {one_time}"),
        };
        format!(
            "{speed} and spend {more} per million {} ({times}{money})",
            self.unit
        )
    }

    /// Where one GPU is cheaper per unit: when N GPUs are still worth it.
    pub(super) fn cheaper_sentence(&self, w: &Words) -> Option<String> {
        let unit_one = self.unit.trim_end_matches('s');
        self.one_gpu_cheaper().then(|| {
            if self.times_sooner > 1.0 {
                format!(
                    "Per {unit_one}, {} is cheaper: use {} when wall-clock time matters, not to save money.",
                    w.one(),
                    w.n(self.gpus)
                )
            } else {
                format!(
                    "Per {unit_one}, {} is cheaper, and sooner too.",
                    w.one()
                )
            }
        })
    }
}

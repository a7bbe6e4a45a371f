//! The choice: every variant predicted on the node's curve, then the cheapest change that
//! reaches the target (else the most efficient variant, else one GPU), and the one-line
//! summary of it. Where the calibrated model misses a row the node measured by more than
//! [`MODEL_TOLERANCE`], the choice is made among the measured rows only.

use serde::{Deserialize, Serialize};

use super::answer::Answer;
use super::basis::Basis;
use super::{RecommendInput, SingleGpu, VariantRow};
use crate::ddp::{CommHook, RunDevice};
use crate::step_time::{cost_per_million, predict, ModelError};
use crate::units::{fmt_count, fmt_s};

/// Rows in display order: (name, hook, accumulation).
const VARIANTS: [(&str, CommHook, u32); 9] = [
    ("base", CommHook::None, 1),
    ("fp16", CommHook::Fp16, 1),
    ("bf16", CommHook::Bf16, 1),
    ("accum2", CommHook::None, 2),
    ("accum4", CommHook::None, 4),
    ("accum8", CommHook::None, 8),
    ("bf16+accum2", CommHook::Bf16, 2),
    ("bf16+accum4", CommHook::Bf16, 4),
    ("bf16+accum8", CommHook::Bf16, 8),
];

/// The rows on CPU ranks: gloo has no bf16 all-reduce hook (it fails there), so fp16, the same
/// bytes on the wire, takes its place.
const CPU_VARIANTS: [(&str, CommHook, u32); 8] = [
    ("base", CommHook::None, 1),
    ("fp16", CommHook::Fp16, 1),
    ("accum2", CommHook::None, 2),
    ("accum4", CommHook::None, 4),
    ("accum8", CommHook::None, 8),
    ("fp16+accum2", CommHook::Fp16, 2),
    ("fp16+accum4", CommHook::Fp16, 4),
    ("fp16+accum8", CommHook::Fp16, 8),
];

/// The same variants from the cheapest change to the most invasive.
pub const CHANGE_ORDER: [&str; 9] = [
    "base",
    "bf16",
    "fp16",
    "accum2",
    "bf16+accum2",
    "accum4",
    "bf16+accum4",
    "accum8",
    "bf16+accum8",
];

/// [`CHANGE_ORDER`] on CPU ranks.
const CPU_CHANGE_ORDER: [&str; 8] = [
    "base",
    "fp16",
    "accum2",
    "fp16+accum2",
    "accum4",
    "fp16+accum4",
    "accum8",
    "fp16+accum8",
];

/// How far (relative, either way) the calibrated model may miss a speedup the node measured
/// before its predictions for the node count as unreliable (or the measurement's own noise
/// bound, where repeated launches measured a larger one).
pub const MODEL_TOLERANCE: f64 = 0.10;

/// The row name of plain DDP with this hook and accumulation, if recommend has such a row.
pub fn variant_name(hook: CommHook, accum: u32) -> Option<&'static str> {
    variant_name_on(RunDevice::Cuda, hook, accum)
}

/// [`variant_name`] among the rows of GPUs or of CPU ranks (where fp16 takes bf16's place).
pub fn variant_name_on(device: RunDevice, hook: CommHook, accum: u32) -> Option<&'static str> {
    variants_for(device)
        .iter()
        .find(|(_, h, k)| *h == hook && *k == accum)
        .map(|(name, _, _)| *name)
}

fn variants_for(device: RunDevice) -> &'static [(&'static str, CommHook, u32)] {
    match device {
        RunDevice::Cuda => &VARIANTS,
        RunDevice::Cpu => &CPU_VARIANTS,
    }
}

fn change_order_for(device: RunDevice) -> &'static [&'static str] {
    match device {
        RunDevice::Cuda => &CHANGE_ORDER,
        RunDevice::Cpu => &CPU_CHANGE_ORDER,
    }
}

/// One measured row against the calibrated model's prediction of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckedRow {
    pub variant: String,
    pub predicted_speedup: f64,
    pub measured_speedup: f64,
    /// (predicted − measured) / measured.
    pub error: f64,
    /// The model missed it: `|error|` beyond the tolerance (or the measurement's noise bound).
    pub missed: bool,
}

/// Whether the calibrated model reproduces the rows the node measured at the job's GPU count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelCheck {
    /// The largest relative miss allowed ([`MODEL_TOLERANCE`]).
    pub tolerance: f64,
    pub rows: Vec<CheckedRow>,
    /// No row missed: the model's predictions stand. Otherwise they are marked unreliable for
    /// this node and the choice is made among the measured rows.
    pub reliable: bool,
    /// Where unreliable: the row the model would have recommended, which nobody measured;
    /// `--verify` measures it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmeasured_pick: Option<String>,
}

impl ModelCheck {
    /// The rows the model missed.
    pub fn misses(&self) -> impl Iterator<Item = &CheckedRow> {
        self.rows.iter().filter(|r| r.missed)
    }
}

/// Each measured row against its prediction; `None` where nothing was measured.
fn check_model(rows: &[VariantRow]) -> Option<ModelCheck> {
    let checked: Vec<CheckedRow> = rows
        .iter()
        .filter_map(|r| {
            let m = r.measured.as_ref()?;
            let error = (r.prediction.speedup - m.speedup) / m.speedup;
            let allowed = MODEL_TOLERANCE.max(m.noise_bound.unwrap_or(0.0));
            Some(CheckedRow {
                variant: r.variant.clone(),
                predicted_speedup: r.prediction.speedup,
                measured_speedup: m.speedup,
                error,
                missed: error.abs() > allowed,
            })
        })
        .collect();
    (!checked.is_empty()).then(|| ModelCheck {
        tolerance: MODEL_TOLERANCE,
        reliable: checked.iter().all(|c| !c.missed),
        rows: checked,
        unmeasured_pick: None,
    })
}

/// Every variant's prediction and the one chosen.
pub(super) struct Choice {
    pub single: SingleGpu,
    pub rows: Vec<VariantRow>,
    /// Index in `rows` of plain DDP and of the chosen variant.
    baseline: usize,
    chosen: usize,
    pub reaches_target: bool,
    /// Even the most efficient variant is slower than one GPU.
    pub use_one_gpu: bool,
    /// The measured rows against the model, where any were measured.
    pub model_check: Option<ModelCheck>,
    /// The choice in the user's terms (N GPUs only).
    pub answer: Option<Answer>,
}

impl Choice {
    pub fn baseline(&self) -> &VariantRow {
        &self.rows[self.baseline]
    }

    pub fn chosen(&self) -> &VariantRow {
        &self.rows[self.chosen]
    }
}

/// Predicts every variant and chooses: the first in the change order that reaches the target,
/// else the most efficient; among the measured rows, by their measured speedups, where the
/// model missed one of them.
pub(super) fn choose(input: &RecommendInput, basis: &Basis) -> Result<Choice, ModelError> {
    let n = input.gpus;
    let price_per_gpu = input.price_per_hour.map(|p| p / f64::from(input.node_gpus));
    let cost = |tput: f64, gpus: u32| price_per_gpu.and_then(|p| cost_per_million(tput, p, gpus));
    let single_step = basis.compute_s + basis.base.optimizer_s;
    let single_tput = basis.units / single_step;
    let single = SingleGpu {
        step_s: single_step,
        throughput: single_tput,
        cost_per_million: cost(single_tput, 1),
    };
    let mut rows = Vec::new();
    for &(name, hook, k) in variants_for(input.device) {
        let p = predict(
            &basis.base.clone().with_hook(hook).with_accum(k),
            &input.curve,
        )?;
        let measured = input
            .measured
            .iter()
            .rev()
            .find(|m| m.variant == name)
            .cloned();
        // The row's throughput at its measured speedup where the node measured it: the figure
        // the answer prices, so the table and the recommendation say one cost.
        let measured_cost = measured
            .as_ref()
            .filter(|_| p.speedup > 0.0)
            .and_then(|m| cost(p.throughput * m.speedup / p.speedup, n));
        rows.push(VariantRow {
            variant: name.to_string(),
            hook,
            accum: k,
            cost_measured: measured_cost.is_some(),
            cost_per_million: measured_cost.or_else(|| cost(p.throughput, n)),
            reaches_target: p.efficiency >= input.target_efficiency,
            prediction: p,
            measured,
        });
    }
    let order = change_order_for(input.device);
    let predicted: Vec<(&str, f64)> = rows
        .iter()
        .map(|r| (r.variant.as_str(), r.prediction.efficiency))
        .collect();
    let baseline = rows.iter().position(|r| r.variant == "base");
    let (Some(baseline), Some(model_pick)) = (
        baseline,
        pick_in(order, &predicted, input.target_efficiency),
    ) else {
        return Err(ModelError::Invalid("no variant could be predicted".into()));
    };
    let mut model_check = if n > 1 { check_model(&rows) } else { None };
    let (pick, best_speedup) = match model_check.as_mut().filter(|c| !c.reliable) {
        Some(check) => {
            // The measured rows' target column from what they measured, as the choice is.
            for r in rows.iter_mut() {
                if let Some(m) = &r.measured {
                    r.reaches_target = m.speedup / f64::from(n) >= input.target_efficiency;
                }
            }
            let pick = pick_measured(order, &rows, n, input.target_efficiency)
                .ok_or_else(|| ModelError::Invalid("no measured variant to choose".into()))?;
            let model_choice = &rows[model_pick.chosen];
            if model_choice.measured.is_none() && model_pick.chosen != pick.chosen {
                check.unmeasured_pick = Some(model_choice.variant.clone());
            }
            let best = rows[pick.best].measured.as_ref().map_or(0.0, |m| m.speedup);
            (pick, best)
        }
        None => (model_pick, rows[model_pick.best].prediction.speedup),
    };
    let use_one_gpu = n > 1 && best_speedup < 1.0;
    let chosen_row = if use_one_gpu { pick.best } else { pick.chosen };
    let answer = (n > 1)
        .then(|| Answer::new(input, basis, &rows[chosen_row], price_per_gpu))
        .flatten();
    Ok(Choice {
        single,
        baseline,
        chosen: pick.chosen,
        reaches_target: pick.reaches_target,
        use_one_gpu,
        model_check,
        answer,
        rows,
    })
}

/// [`pick_in`] over the rows the node measured, by their measured efficiencies; indices into
/// `rows`.
fn pick_measured(order: &[&str], rows: &[VariantRow], n: u32, target: f64) -> Option<Pick> {
    let measured: Vec<(usize, &str, f64)> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let m = r.measured.as_ref()?;
            Some((i, r.variant.as_str(), m.speedup / f64::from(n)))
        })
        .collect();
    let efficiencies: Vec<(&str, f64)> = measured.iter().map(|(_, v, e)| (*v, *e)).collect();
    let p = pick_in(order, &efficiencies, target)?;
    Some(Pick {
        chosen: measured[p.chosen].0,
        best: measured[p.best].0,
        reaches_target: p.reaches_target,
    })
}

/// What [`pick`] chose among variants, as indices into its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pick {
    /// The variant recommended.
    pub chosen: usize,
    /// The most efficient variant.
    pub best: usize,
    /// Whether the chosen variant reaches the target.
    pub reaches_target: bool,
}

/// recommend's rule over `(variant, efficiency)` pairs: the first in [`CHANGE_ORDER`] whose
/// efficiency reaches `target` (the simplest change that does), else the most efficient.
/// Variants outside [`CHANGE_ORDER`] are only ever the most efficient. `None` when empty.
pub fn pick(efficiencies: &[(&str, f64)], target: f64) -> Option<Pick> {
    pick_in(&CHANGE_ORDER, efficiencies, target)
}

/// [`pick`] in a given change order.
fn pick_in(order: &[&str], efficiencies: &[(&str, f64)], target: f64) -> Option<Pick> {
    let best = efficiencies
        .iter()
        .enumerate()
        .max_by(|(_, a), (_, b)| a.1.total_cmp(&b.1))
        .map(|(i, _)| i)?;
    let first_ok = order
        .iter()
        .filter_map(|v| efficiencies.iter().position(|(name, _)| name == v))
        .find(|&i| efficiencies[i].1 >= target);
    Some(Pick {
        chosen: first_ok.unwrap_or(best),
        best,
        reaches_target: first_ok.is_some(),
    })
}

/// The recommendation in one sentence: the choice, then the answer in the user's terms (how
/// much sooner, at what device time and money per million units against one GPU).
pub(super) fn summary(input: &RecommendInput, basis: &Basis, choice: &Choice) -> String {
    let w = &basis.words;
    let n = input.gpus;
    let chosen = choice.chosen();
    if n == 1 {
        return format!(
            "One {}: {} per step, {} {}.",
            w.one_unit(),
            fmt_s(choice.single.step_s),
            fmt_count(chosen.prediction.throughput),
            basis.unit
        );
    }
    let answer = choice.answer.as_ref();
    let said = answer.map(|a| a.sentence(w)).unwrap_or_default();
    // The figures the choice rests on: measured where the node measured the row.
    let speedup = answer.map_or(chosen.prediction.speedup, |a| a.times_sooner);
    let efficiency = speedup / f64::from(n);
    let mut s = if choice.use_one_gpu {
        format!(
            "Train on {}: every variant is slower on {} than on one (best: {} at {speedup:.2}×); {said}.",
            w.one(),
            w.n(n),
            chosen.variant
        )
    } else if choice.reaches_target {
        let what = if chosen.variant == "base" {
            "DDP as it is".to_string()
        } else {
            describe_variant(chosen.hook, chosen.accum)
        };
        format!(
            "Use {what}: {said}; {:.0}% efficiency (target {:.0}%).",
            efficiency * 100.0,
            input.target_efficiency * 100.0
        )
    } else {
        format!(
            "No variant reaches {:.0}% efficiency on {}; the best is {} at {speedup:.2}× ({:.0}%): {said}.",
            input.target_efficiency * 100.0,
            w.n(n),
            describe_variant(chosen.hook, chosen.accum),
            efficiency * 100.0
        )
    };
    if let Some(check) = choice.model_check.as_ref().filter(|c| !c.reliable) {
        let worst = check
            .misses()
            .max_by(|a, b| a.error.abs().total_cmp(&b.error.abs()));
        if let Some(m) = worst {
            s.push_str(&format!(
                " Chosen from the measured rows only: the model missed {} by {:+.0}% (warning model_unreliable).",
                m.variant,
                m.error * 100.0
            ));
        }
    }
    if let Some(cheaper) = answer.and_then(|a| a.cheaper_sentence(w)) {
        s.push(' ');
        s.push_str(&cheaper);
    }
    s
}

/// A hook's name as a sentence reads it.
pub(super) fn hook_name(h: CommHook) -> &'static str {
    match h {
        CommHook::None => "no",
        CommHook::Fp16 => "fp16",
        CommHook::Bf16 => "bf16",
        CommHook::PowerSgd => "PowerSGD",
    }
}

fn describe_variant(hook: CommHook, accum: u32) -> String {
    match (hook, accum) {
        (CommHook::None, 1) => "plain DDP".into(),
        (h, 1) => format!("{} gradient compression", hook_name(h)),
        (CommHook::None, k) => format!("gradient accumulation {k}"),
        (h, k) => format!(
            "{} gradient compression with accumulation {k}",
            hook_name(h)
        ),
    }
}

//! The choice: every variant predicted on the node's curve, then the cheapest change that
//! reaches the target (else the most efficient variant, else one GPU), and the one-line
//! summary of it.

use super::basis::Basis;
use super::{RecommendInput, SingleGpu, VariantRow};
use crate::ddp::CommHook;
use crate::model::{cost_per_million, predict, ModelError, Prediction};
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

/// The row name of plain DDP with this hook and accumulation, if recommend has such a row.
pub fn variant_name(hook: CommHook, accum: u32) -> Option<&'static str> {
    VARIANTS
        .iter()
        .find(|(_, h, k)| *h == hook && *k == accum)
        .map(|(name, _, _)| *name)
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
}

impl Choice {
    pub fn baseline(&self) -> &VariantRow {
        &self.rows[self.baseline]
    }

    pub fn chosen(&self) -> &VariantRow {
        &self.rows[self.chosen]
    }
}

/// Predicts every variant and chooses: the first in [`CHANGE_ORDER`] that reaches the target,
/// else the most efficient.
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
    for (name, hook, k) in VARIANTS {
        let p = predict(
            &basis.base.clone().with_hook(hook).with_accum(k),
            &input.curve,
        )?;
        rows.push(VariantRow {
            variant: name.to_string(),
            hook,
            accum: k,
            cost_per_million: cost(p.throughput, n),
            reaches_target: p.efficiency >= input.target_efficiency,
            prediction: p,
            measured: input
                .measured
                .iter()
                .rev()
                .find(|m| m.variant == name)
                .cloned(),
        });
    }
    let efficiencies: Vec<(&str, f64)> = rows
        .iter()
        .map(|r| (r.variant.as_str(), r.prediction.efficiency))
        .collect();
    let baseline = rows.iter().position(|r| r.variant == "base");
    let (Some(baseline), Some(pick)) = (baseline, pick(&efficiencies, input.target_efficiency))
    else {
        return Err(ModelError::Invalid("no variant could be predicted".into()));
    };
    let use_one_gpu = n > 1 && rows[pick.best].prediction.speedup < 1.0;
    Ok(Choice {
        single,
        baseline,
        chosen: pick.chosen,
        reaches_target: pick.reaches_target,
        use_one_gpu,
        rows,
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
    let best = efficiencies
        .iter()
        .enumerate()
        .max_by(|(_, a), (_, b)| a.1.total_cmp(&b.1))
        .map(|(i, _)| i)?;
    let first_ok = CHANGE_ORDER
        .iter()
        .filter_map(|v| efficiencies.iter().position(|(name, _)| name == v))
        .find(|&i| efficiencies[i].1 >= target);
    Some(Pick {
        chosen: first_ok.unwrap_or(best),
        best,
        reaches_target: first_ok.is_some(),
    })
}

/// The recommendation in one sentence.
pub(super) fn summary(input: &RecommendInput, basis: &Basis, choice: &Choice) -> String {
    let n = input.gpus;
    let chosen = choice.chosen();
    let cp = &chosen.prediction;
    let tpu = |p: &Prediction| format!("{} {}", fmt_count(p.throughput), basis.unit);
    if n == 1 {
        format!(
            "One GPU: {} per step, {}.",
            fmt_s(choice.single.step_s),
            tpu(cp)
        )
    } else if choice.use_one_gpu {
        format!(
            "Train on one GPU: every variant is slower on {n} GPUs than on one (best: {} at {:.2}×).",
            chosen.variant, cp.speedup
        )
    } else if choice.reaches_target {
        let what = if chosen.variant == "base" {
            "DDP as it is".to_string()
        } else {
            describe_variant(chosen.hook, chosen.accum)
        };
        format!(
            "Use {what}: {:.2}× on {n} GPUs, {:.0}% efficiency (target {:.0}%), {} per step, {}.",
            cp.speedup,
            cp.efficiency * 100.0,
            input.target_efficiency * 100.0,
            fmt_s(cp.step_s),
            tpu(cp)
        )
    } else {
        format!(
            "No variant reaches {:.0}% efficiency on {n} GPUs; the best is {} at {:.2}× ({:.0}%).",
            input.target_efficiency * 100.0,
            describe_variant(chosen.hook, chosen.accum),
            cp.speedup,
            cp.efficiency * 100.0
        )
    }
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

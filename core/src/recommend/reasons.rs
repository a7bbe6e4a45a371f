//! The reasons: why the recommendation says what it says, each citing the measurement (or
//! assumption) it rests on — the compute time, plain DDP's communication, the side-by-side
//! slowdown, DDP's own overheads, the chosen hook and accumulation, cost, measured speedups
//! and environment A/B results.

use super::basis::Basis;
use super::choice::{hook_name, Choice};
use super::{MeasuredSpeedup, Reason, RecommendInput, SideBySideInput, VariantRow};
use crate::ddp::CommHook;
use crate::step_time::{predict, ModelError};
use crate::units::{fmt_bytes, fmt_count, fmt_money, fmt_s};

/// Every reason, in the order a reader follows them.
pub(super) fn reasons(
    input: &RecommendInput,
    basis: &Basis,
    choice: &Choice,
) -> Result<Vec<Reason>, ModelError> {
    let w = &basis.words;
    let mut reasons = vec![Reason {
        text: format!(
            "One micro-batch of {} takes {} on {} ({} {}).",
            input.model.name(),
            fmt_s(basis.compute_s),
            w.one(),
            fmt_count(basis.units),
            basis.unit_word
        ),
        rests_on: basis.compute_cite.clone(),
    }];
    if input.gpus == 1 {
        reasons.push(Reason {
            text: format!(
                "One {}: there are no gradients to communicate.",
                w.one_unit()
            ),
            rests_on: "--gpus 1".into(),
        });
        return Ok(reasons);
    }
    reasons.push(plain_ddp(input.gpus, basis, choice.baseline()));
    if let Some(sbs) = &input.side_by_side {
        reasons.push(side_by_side(input.gpus, basis, sbs));
    }
    reasons.push(overheads(basis));
    reasons.extend(hook(input, basis, choice.chosen())?);
    reasons.extend(accumulation(basis, choice));
    reasons.extend(cost(input, basis, choice));
    reasons.extend(measured(input.gpus, basis, &choice.rows));
    reasons.extend(env_ab(input, basis));
    Ok(reasons)
}

/// What plain DDP sends, how much of it shows after the backward pass, and its speedup.
fn plain_ddp(n: u32, basis: &Basis, baseline: &VariantRow) -> Reason {
    let bp = &baseline.prediction;
    Reason {
        text: format!(
            "Plain DDP all-reduces {} of fp32 gradients per step in {} buckets: {} of communication on this link, {} of it after the backward pass ends; {:.2}× on {} ({:.0}% efficiency).",
            fmt_bytes(bp.wire_bytes),
            bp.buckets,
            fmt_s(bp.comm_s),
            fmt_s(bp.exposed_comm_s),
            bp.speedup,
            basis.words.n(n),
            bp.efficiency * 100.0
        ),
        rests_on: basis.curve_cite.clone(),
    }
}

/// How much N processes side by side slowed each other, and whether that counts.
fn side_by_side(n: u32, basis: &Basis, sbs: &SideBySideInput) -> Reason {
    let pct = (sbs.measured_ratio - 1.0) * 100.0;
    let (one, ranks) = (basis.words.one(), basis.words.n(n));
    let alone = if sbs.within_launch {
        format!("{one} alone in the same launches")
    } else {
        format!("{one} alone")
    };
    let measured = if pct.abs() < 0.5 {
        format!("{ranks} side by side, with no communication, ran a step as fast as {alone}")
    } else {
        format!(
            "{ranks} side by side, with no communication, ran a step {:.0}% {} than {alone}",
            pct.abs(),
            if pct > 0.0 { "slower" } else { "faster" }
        )
    };
    // The bound in the units of the measurement, so a reader sees how firm the count is, or
    // how many more launches it would take.
    let bound = |then: &str| {
        sbs.noise_bound.map_or(String::new(), |b| {
            format!(
                "{}{then}",
                crate::ddp::describe_noise_bound(b, sbs.launches)
            )
        })
    };
    let text = if sbs.distinct && pct >= 0.5 {
        let bound = bound("; ");
        format!(
            "{measured}, beyond the noise of their launches ({bound}their processes share the host): the micro-batches under no_sync pay it in full, a synchronising one only where it outlasts the wait for its all-reduces, and no setting of DDP recovers it."
        )
    } else if pct.abs() < 0.5 {
        format!("{measured}: no slowdown to count.")
    } else if sbs.launches > 1 {
        let few = match (sbs.launches, sbs.within_launch) {
            (2, false) => "; two launches a side tell little",
            (2, true) => "; two launches tell little",
            _ => "",
        };
        let bound = bound(": ");
        format!(
            "{measured}, within the noise of their launches ({bound}Student's t times its standard error, at least twice it{few}): not counted."
        )
    } else {
        // Five: on 2×H200 the noise bound of five launches of three solo rounds each comes
        // near ±9% (docs/results/2026-11-30-h200x2-accumulation-gap.md §3).
        format!(
            "{measured}, one launch each: not counted, as one launch of a short step can move more than that (with --repeats N the slowdown gets a noise bound; a 10% one needs about five launches to stand out)."
        )
    };
    Reason {
        text,
        rests_on: sbs.rests_on.clone(),
    }
}

/// DDP's own per-step and per-bucket costs, and where they come from.
fn overheads(basis: &Basis) -> Reason {
    let base = &basis.base;
    Reason {
        text: format!(
            "DDP's own cost: {} per step and {} per bucket ({} more with a comm hook); backward is {:.0}% of a micro-batch.",
            fmt_s(base.overheads.ddp_fixed_s),
            fmt_s(base.overheads.per_bucket_s),
            fmt_s(base.overheads.hook_per_bucket_s),
            base.backward_fraction * 100.0
        ),
        rests_on: basis.overheads_source.clone(),
    }
}

/// The chosen hook: what it saves on the wire and, where measured, what its own cost adds.
fn hook(
    input: &RecommendInput,
    basis: &Basis,
    chosen: &VariantRow,
) -> Result<Vec<Reason>, ModelError> {
    if chosen.hook == CommHook::None {
        return Ok(Vec::new());
    }
    let cp = &chosen.prediction;
    let mut reasons = vec![Reason {
        text: format!(
            "A {} comm hook sends 2 bytes per gradient instead of 4 (fp16 and bf16 are the same on the wire; bf16 needs no loss scaling of its range): {} on the wire, {} of communication, {} exposed.",
            hook_name(chosen.hook),
            fmt_bytes(cp.wire_bytes),
            fmt_s(cp.comm_s),
            fmt_s(cp.exposed_comm_s)
        ),
        rests_on: basis.curve_cite.clone(),
    }];
    let Some(h) = input.hook_compute_s.filter(|h| *h > 0.0) else {
        return Ok(reasons);
    };
    // What the hook's own cost adds to the N-GPU step: the same prediction without it.
    let mut free = basis
        .base
        .clone()
        .with_hook(chosen.hook)
        .with_accum(chosen.accum);
    free.hook_compute_s = 0.0;
    let added = cp.step_s - predict(&free, &input.curve)?.step_s;
    let hidden = if added < 0.95 * h {
        "part of it hides behind earlier buckets' all-reduces"
    } else {
        "with no earlier all-reduce still running to hide it behind, nearly all of it shows"
    };
    reasons.push(Reason {
        text: format!(
            "The hook itself costs {} a step on {} (its host work and casts). DDP pays it bucket by bucket as the backward hands them over, so {hidden}: it adds {} to the {}-{} step.",
            fmt_s(h),
            basis.words.one(),
            fmt_s(added),
            input.gpus,
            basis.words.one_unit()
        ),
        rests_on: input
            .hook_rests_on
            .clone()
            .unwrap_or_else(|| "measured on one GPU".into()),
    });
    Ok(reasons)
}

/// The chosen accumulation: how far it lowers the communication's share of a step.
fn accumulation(basis: &Basis, choice: &Choice) -> Option<Reason> {
    let chosen = choice.chosen();
    (chosen.accum > 1).then(|| Reason {
        text: format!(
            "Accumulating {} micro-batches all-reduces once per {} of compute: the communication share of a step falls from {:.0}% to {:.0}%.",
            chosen.accum,
            fmt_s(chosen.prediction.compute_s),
            choice.baseline().prediction.comm_share * 100.0,
            chosen.prediction.comm_share * 100.0
        ),
        rests_on: basis.model_cite.clone(),
    })
}

/// Cost per unit of work on one GPU against the chosen variant on N, where a price is known.
fn cost(input: &RecommendInput, basis: &Basis, choice: &Choice) -> Option<Reason> {
    let n = input.gpus;
    let chosen = choice.chosen();
    let (c1, cn) = (choice.single.cost_per_million?, chosen.cost_per_million?);
    let unit_one = basis.unit_one;
    let (one, ranks) = (basis.words.one(), basis.words.n(n));
    // The chosen row's cost rests on its measured speedup where the node measured it.
    let measured = chosen.measured.as_ref().filter(|_| chosen.cost_measured);
    let (speedup, how) = measured.map_or((chosen.prediction.speedup, "predicted"), |m| {
        (m.speedup, "measured")
    });
    let text = if c1 < cn {
        format!(
            "Per {unit_one}, {one} is cheaper: {} against {} per million on {ranks} ({:+.0}%, {how}). {ranks} buy wall-clock time ({speedup:.2}× faster), not savings.",
            fmt_money(c1),
            fmt_money(cn),
            (cn / c1 - 1.0) * 100.0,
        )
    } else {
        format!(
            "Per {unit_one}, {ranks} cost no more than one: {} against {} per million ({how}).",
            fmt_money(cn),
            fmt_money(c1)
        )
    };
    let measured_cite = measured.map_or(String::new(), |m| format!("; {}", m.rests_on));
    Some(Reason {
        text,
        rests_on: format!(
            "price ${:.2}/h for {}; {}{measured_cite}",
            input.price_per_hour.unwrap_or(0.0),
            basis.words.n(input.node_gpus),
            basis.model_cite
        ),
    })
}

/// The speedups the node measured, each against its prediction and the measurement's noise.
fn measured(n: u32, basis: &Basis, rows: &[VariantRow]) -> Option<Reason> {
    let measured: Vec<(&VariantRow, &MeasuredSpeedup)> = rows
        .iter()
        .filter_map(|r| Some((r, r.measured.as_ref()?)))
        .collect();
    if measured.is_empty() {
        return None;
    }
    let parts: Vec<String> = measured
        .iter()
        .map(|(r, m)| {
            let error = (r.prediction.speedup - m.speedup) / m.speedup * 100.0;
            let noise = match m.uncertainty {
                Some(u) => format!(", measured ±{:.1}%", u * 100.0),
                None => ", its noise unmeasured".into(),
            };
            let verdict = if m.contradicted_by(r.prediction.speedup) {
                "beyond the noise"
            } else {
                "within the noise"
            };
            format!(
                "{} {:.2}× (predicted {:.2}×, {error:+.1}%{noise}: {verdict})",
                r.variant, m.speedup, r.prediction.speedup
            )
        })
        .collect();
    let mut cites: Vec<&str> = measured.iter().map(|(_, m)| m.rests_on.as_str()).collect();
    cites.dedup();
    Some(Reason {
        text: format!(
            "Measured on this node at {}: {}.",
            basis.words.n(n),
            parts.join("; ")
        ),
        rests_on: cites.join("; "),
    })
}

/// Environment candidates that moved all-reduce bandwidth by 5% or more either way.
fn env_ab<'a>(input: &'a RecommendInput, basis: &'a Basis) -> impl Iterator<Item = Reason> + 'a {
    input
        .env_ab
        .iter()
        .filter(|ab| ab.busbw_ratio >= 1.05 || ab.busbw_ratio <= 0.95)
        .map(|ab| Reason {
            text: format!(
                "{} changed all-reduce busbw ×{:.2} against the current environment: {}.",
                ab.label,
                ab.busbw_ratio,
                if ab.busbw_ratio > 1.0 {
                    "worth setting"
                } else {
                    "do not set it"
                }
            ),
            rests_on: format!("environment A/B all-reduce test, {}", basis.provenance),
        })
}

//! The warnings: what could make the recommendation wrong or the job slower than it need be
//! — NCCL settings that fight the node's links, one GPU being faster, a changed effective
//! batch, bucket size, FSDP, a curve from elsewhere, unmeasured or contradicting measurements.
//! Each has a stable code and cites what it rests on.

use std::fmt::Write as _;

use super::basis::Basis;
use super::choice::Choice;
use super::{ComputeSource, RecommendInput, Warning};
use crate::backend::BackendKind;
use crate::num::ToF64;
use crate::step_time::{predict, ModelError};
use crate::topology::LinkClass;
use crate::units::{fmt_bytes, fmt_count};

/// How far (as a factor either way) two measurements of one link may part at the bucket size
/// before `network_moved` is warned: beyond the 1–3% by which DDP's probes and the sweeps agreed
/// over NVLink and shm, and enough to move a communication-bound prediction by more than 10%
/// (over the host network they parted by 2–26% minutes apart; docs/results/2026-11-30-h200x2-ddp-own-all-reduce.md).
const NETWORK_MOVED_FACTOR: f64 = 1.15;

/// Every warning, in the order the output lists them.
pub(super) fn warnings(
    input: &RecommendInput,
    basis: &Basis,
    choice: &Choice,
) -> Result<Vec<Warning>, ModelError> {
    let mut warnings = Vec::new();
    warnings.extend(model_unreliable(input, basis, choice));
    // CPU ranks have no GPU links, NCCL transports or GPU memory to warn about.
    let gpus = !basis.words.is_cpu();
    if let Some(link) = input.worst_link.filter(|_| gpus) {
        warnings.extend(p2p_forced_across_host_bridge(input, basis, link));
        warnings.extend(nvlink_transport_disabled(input, basis, link));
    }
    if input.gpus > 1 {
        warnings.extend(one_gpu_faster(input.gpus, basis, choice));
        warnings.extend(accumulation_changes_batch(input, basis, choice));
        warnings.push(bucket_cap_mb(input, basis, choice)?);
        if gpus {
            warnings.push(fsdp(input));
        }
        warnings.extend(curve_other_world_size(input, basis));
    }
    warnings.extend(side_by_side_unmeasured(input, basis));
    warnings.extend(network_moved(input, basis));
    warnings.extend(measured_below_prediction(input.gpus, choice));
    warnings.extend(ddp_own_work(input, basis, choice));
    if input.gpus > 1 {
        warnings.extend(super::levers::levers(input, &basis.words));
    }
    warnings.extend(other_recipe(input));
    if let ComputeSource::Estimated { .. } = input.compute {
        warnings.push(Warning {
            code: "compute_estimated".into(),
            text: "The compute time is an estimate from FLOPs, not a measurement: every number above scales with it. Measure it with a one-GPU `ddpcheck bench ddp` run.".into(),
            rests_on: basis.compute_cite.clone(),
        });
    }
    if input.curve_provenance.backend == Some(BackendKind::Sim) {
        warnings.push(Warning {
            code: "curve_simulated".into(),
            text: "The all-reduce curve comes from a simulated node: these are not this machine's numbers.".into(),
            rests_on: basis.provenance.clone(),
        });
    }
    Ok(warnings)
}

/// The `NCCL_P2P_LEVEL` in force, upper-cased.
fn p2p_level(input: &RecommendInput) -> Option<String> {
    input
        .nccl_env
        .get("NCCL_P2P_LEVEL")
        .map(|v| v.trim().to_ascii_uppercase())
}

/// Whether the environment forces peer-to-peer over a path of this class.
pub(super) fn p2p_forced(input: &RecommendInput, link: LinkClass) -> bool {
    p2p_level(input).is_some_and(|lvl| p2p_level_reaches(&lvl, link))
}

/// The NCCL transports over NVLink or shared memory the environment turns off.
pub(super) fn disabled_nvlink_transports(input: &RecommendInput) -> Vec<String> {
    ["NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"]
        .iter()
        .filter(|k| input.nccl_env.get(**k).is_some_and(|v| is_truthy(v)))
        .map(|k| k.to_string())
        .collect()
}

/// Forced P2P (or an A/B that measured it slower) across a host bridge without NVLink.
fn p2p_forced_across_host_bridge(
    input: &RecommendInput,
    basis: &Basis,
    link: LinkClass,
) -> Option<Warning> {
    let forced = p2p_forced(input, link);
    let ab = input
        .env_ab
        .iter()
        .filter(|a| a.label.to_ascii_uppercase().contains("NCCL_P2P_LEVEL"))
        .min_by(|a, b| a.busbw_ratio.total_cmp(&b.busbw_ratio))
        .filter(|a| a.busbw_ratio < 0.95);
    if link.is_nvlink() || !link.crosses_host_bridge() || !(forced || ab.is_some()) {
        return None;
    }
    let mut rests = format!("worst GPU pair link {link} (no NVLink)");
    if let Some(l) = p2p_level(input) {
        let _ = write!(rests, "; NCCL_P2P_LEVEL={l} in force");
    }
    if let Some(a) = ab {
        let _ = write!(
            rests,
            "; env A/B: {} gave ×{:.2} busbw, {}",
            a.label, a.busbw_ratio, basis.provenance
        );
    }
    Some(Warning {
        code: "p2p_forced_across_host_bridge".into(),
        text: format!(
            "Forcing peer-to-peer (NCCL_P2P_LEVEL=SYS or similar) across a {link} path without NVLink usually lowers all-reduce bandwidth (the seed machine halved it, 4.3 → 2.3 GB/s); leave NCCL's own choice."
        ),
        rests_on: rests,
    })
}

/// NVLink's transports turned off on an NVLink machine.
fn nvlink_transport_disabled(
    input: &RecommendInput,
    basis: &Basis,
    link: LinkClass,
) -> Option<Warning> {
    if !link.is_nvlink() {
        return None;
    }
    let disabled = disabled_nvlink_transports(input);
    if disabled.is_empty() {
        return None;
    }
    let in_force: Vec<String> = disabled
        .iter()
        .map(|k| {
            let v = input.nccl_env.get(k).map(String::as_str).unwrap_or("");
            format!("{k}={v}")
        })
        .collect();
    Some(Warning {
        code: "nvlink_transport_disabled".into(),
        text: format!(
            "{} set on an NVLink machine: NCCL falls back to slower paths (on 2×H200, 327 GB/s over NVLink against ≈27 GB/s through shared memory and ≈3.9 GB/s over the host network). Unset it unless you are testing exactly that.",
            disabled.join(" and ")
        ),
        rests_on: format!(
            "worst GPU pair link {link}; {} in force; the curve used: {}",
            in_force.join(" "),
            basis.curve_cite
        ),
    })
}

/// The calibrated model missed a row the node measured: its predictions for this node are
/// unreliable, the choice rests on the measured rows, and a `--verify` run settles the row the
/// model would have chosen where nobody measured it.
fn model_unreliable(input: &RecommendInput, basis: &Basis, choice: &Choice) -> Option<Warning> {
    let check = choice.model_check.as_ref().filter(|c| !c.reliable)?;
    let n = basis.words.n(input.gpus);
    let missed: Vec<String> = check
        .misses()
        .map(|m| {
            format!(
                "{} by {:+.0}% (predicted {:.2}×, measured {:.2}×)",
                m.variant,
                m.error * 100.0,
                m.predicted_speedup,
                m.measured_speedup
            )
        })
        .collect();
    let then = match &check.unmeasured_pick {
        Some(v) => format!(
            " The model's own pick, {v}, was not measured here: `ddpcheck recommend --verify` (same flags) measures it beside the measured choice."
        ),
        None => " The recommendation rests on the measured rows.".to_string(),
    };
    let mut cites: Vec<&str> = choice
        .rows
        .iter()
        .filter(|r| check.misses().any(|m| m.variant == r.variant))
        .filter_map(|r| Some(r.measured.as_ref()?.rests_on.as_str()))
        .collect();
    cites.sort_unstable();
    cites.dedup();
    Some(Warning {
        code: "model_unreliable".into(),
        text: format!(
            "The step-time model, calibrated on this node, misses what it measured at {n}: {}. Beyond {:.0}%, its predictions here are unreliable: no predicted row is recommended over a measured one.{then}",
            missed.join("; "),
            check.tolerance * 100.0
        ),
        rests_on: format!("{}; {}", cites.join("; "), basis.overheads_source),
    })
}

/// The variants slower on N GPUs than on one.
fn one_gpu_faster(n: u32, basis: &Basis, choice: &Choice) -> Option<Warning> {
    let slower: Vec<String> = choice
        .rows
        .iter()
        .filter(|r| r.prediction.speedup < 1.0)
        .map(|r| format!("{} ({:.2}×)", r.variant, r.prediction.speedup))
        .collect();
    (!slower.is_empty()).then(|| Warning {
        code: "one_gpu_faster".into(),
        text: format!(
            "One {} is faster than {n} with {}.",
            basis.words.one_unit(),
            slower.join(", ")
        ),
        rests_on: format!("{}; {}", basis.model_cite, basis.curve_cite),
    })
}

/// Accumulation changes the effective batch, so the learning rate needs retuning.
/// Where a 1-GPU run timed the model without DDP: DDP's own work at one GPU (1–19% on one H200,
/// docs/results/2026-12-02-h200-ddp-own-work.md). Against one GPU without DDP (the reference) it
/// is a term of every step in DDP; with `--reference ddp` the speedups rest on one GPU in DDP,
/// and the warning says what they would be against one GPU without DDP.
fn ddp_own_work(input: &RecommendInput, basis: &Basis, choice: &Choice) -> Option<Warning> {
    let own = input.ddp_own_work.as_ref()?;
    if input.gpus < 2 || own.ratio.is_nan() || own.ratio <= 0.0 {
        return None;
    }
    let (row, one) = (choice.chosen(), basis.words.one());
    let figure = format!(
        "DDP's own work at {one} is {:+.1}% of a step (the median of its rounds' ratios; medians {:.2} ms in DDP, {:.2} ms without, in one launch).",
        (own.ratio - 1.0) * 100.0,
        own.ddp_step_s * 1e3,
        own.plain_step_s * 1e3,
    );
    let text = match input.rests_on_reference() {
        crate::ddp::Reference::Plain => format!(
            "{figure} The speedups here are against {one} without DDP, and every step in DDP pays it: {} at {} is x{:.2}.",
            row.variant,
            basis.words.n(input.gpus),
            row.prediction.speedup
        ),
        crate::ddp::Reference::Ddp => format!(
            "{figure} The speedups here are against {one} in DDP (--reference ddp); against training on {one} without DDP divide them by {:.3}: {} at {} is then x{:.2}, not x{:.2}.",
            own.ratio,
            row.variant,
            basis.words.n(input.gpus),
            row.prediction.speedup / own.ratio,
            row.prediction.speedup
        ),
    };
    Some(Warning {
        code: "ddp_own_work".into(),
        text,
        rests_on: own.rests_on.clone(),
    })
}

/// Saved runs of the model under another recipe measured another training: said, not used.
fn other_recipe(input: &RecommendInput) -> Option<Warning> {
    let said = input.other_recipe.as_ref()?;
    Some(Warning {
        code: "other_recipe".into(),
        text: format!(
            "{said}: not used. The figures rest on runs of this recipe ({}) only.",
            input.recipe.describe()
        ),
        rests_on: "each saved run's `recipe` (a run without one ran bf16 and DDP's defaults)"
            .into(),
    })
}

fn accumulation_changes_batch(
    input: &RecommendInput,
    basis: &Basis,
    choice: &Choice,
) -> Option<Warning> {
    let accum = choice.chosen().accum;
    let per_gpu = u64::from(input.micro_batch) * u64::from(accum);
    (accum > 1).then(|| Warning {
        code: "accumulation_changes_batch".into(),
        text: format!(
            "Accumulation {accum} makes the effective batch {per_gpu} per {} ({} over {}): retune the learning rate (and warm-up) before comparing runs.",
            basis.words.one_unit(),
            per_gpu * u64::from(input.gpus),
            basis.words.n(input.gpus)
        ),
        rests_on: format!("micro-batch {} × accumulation {accum}", input.micro_batch),
    })
}

/// bucket_cap_mb: what the best size in 5–200 MB would gain over the one in use.
fn bucket_cap_mb(
    input: &RecommendInput,
    basis: &Basis,
    choice: &Choice,
) -> Result<Warning, ModelError> {
    let (base, chosen) = (&basis.base, choice.chosen());
    let mut steps = Vec::new();
    let mut pieces = Vec::new();
    for mb in [5.0, 10.0, 25.0, 50.0, 100.0, 200.0, base.bucket_cap_mb] {
        let mut i = base.clone().with_hook(chosen.hook).with_accum(chosen.accum);
        i.bucket_cap_mb = mb;
        steps.push((mb, predict(&i, &input.curve)?.step_s));
        pieces.push((mb, i.buckets().len()));
    }
    let current = steps.last().map(|s| s.1).unwrap_or(0.0);
    let (best_mb, best_step) = steps
        .iter()
        .copied()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((base.bucket_cap_mb, current));
    let gain = if best_step > 0.0 {
        current / best_step - 1.0
    } else {
        0.0
    };
    let mut text = format!(
        "bucket_cap_mb is not worth tuning unless measured: the model's best size in 5–200 MB ({best_mb:.0} MB) would gain {:.1}% over {:.0} MB (the 2×T4 seed measured 0.3% across a hundredfold sweep); check with `ddpcheck bench ddp --variants base,bucket10,bucket100` before changing it.",
        gain * 100.0,
        base.bucket_cap_mb
    );
    if input.recipe.compile.is_some() {
        text.push_str(&graph_pieces(&pieces, base.bucket_cap_mb, best_mb));
    }
    Ok(Warning {
        code: "bucket_cap_mb".into(),
        text,
        rests_on: basis.model_cite.clone(),
    })
}

/// Under torch.compile: DDPOptimizer compiles one graph piece per DDP bucket, so the bucket size
/// also sets the graph breaks: smaller buckets overlap more and compile into more, smaller
/// pieces (pytorch issue 108966). `pieces`: (bucket_cap_mb, buckets) as tried.
fn graph_pieces(pieces: &[(f64, usize)], current_mb: f64, best_mb: f64) -> String {
    let at = |mb: f64| {
        pieces
            .iter()
            .find(|(m, _)| (m - mb).abs() < 1e-9)
            .map_or(0, |p| p.1)
    };
    let (now, best) = (at(current_mb), at(best_mb));
    let breaks = |n: usize| n.saturating_sub(1);
    let mut s = format!(
        " Under torch.compile, bucket_cap_mb also sets how many graph pieces torch.compile makes: DDPOptimizer compiles one per bucket, {now} at {current_mb:.0} MB ({} graph breaks)",
        breaks(now)
    );
    if (best_mb - current_mb).abs() > 1e-9 {
        let _ = write!(
            s,
            ", {best} at {best_mb:.0} MB ({} graph breaks)",
            breaks(best)
        );
    }
    s.push_str("; more pieces overlap more all-reduce with the backward pass but may compile into slower code, so measure both with --compile (pytorch issue 108966).");
    s
}

/// FSDP against DDP, from whether the training state fits on one GPU.
fn fsdp(input: &RecommendInput) -> Warning {
    // Trainable: params + grads + Adam moments in fp32 = 16 B/param; frozen: the weights alone.
    let trainable = input.trainable_params().to_f64();
    let frozen = input.model_params().to_f64() - trainable;
    let state = trainable * 16.0 + frozen * 4.0;
    let params = trainable + frozen;
    let (text, rests_on) = match input.gpu_memory_bytes {
        Some(mem) if state < 0.8 * mem.to_f64() => (
            format!(
                "FSDP costs more than DDP here: the model's training state ({}) fits on one GPU ({}), and FSDP all-gathers parameters on top of reduce-scattering gradients (≈1.5× DDP's bytes; all-gather often runs slower than all-reduce: 1.73 against 4.05 GB/s on the 2×T4 seed, where FSDP was 33–35% slower).",
                fmt_bytes(state),
                fmt_bytes(mem.to_f64())
            ),
            format!(
                "{} parameters × 16 B (fp32 weights, gradients, Adam moments); GPU memory {}",
                fmt_count(params),
                fmt_bytes(mem.to_f64())
            ),
        ),
        Some(mem) => (
            format!(
                "The training state ({}) does not fit comfortably on one GPU ({}): DDP keeps a full copy per GPU; FSDP (or ZeRO) is needed despite its extra all-gathers.",
                fmt_bytes(state),
                fmt_bytes(mem.to_f64())
            ),
            format!(
                "{} parameters × 16 B; GPU memory {}",
                fmt_count(params),
                fmt_bytes(mem.to_f64())
            ),
        ),
        None => (
            format!(
                "If the model's training state (≈{}) fits on one GPU, FSDP costs more than DDP: it all-gathers parameters on top of reduce-scattering gradients (≈1.5× DDP's bytes; on the 2×T4 seed FSDP was 33–35% slower).",
                fmt_bytes(state)
            ),
            format!(
                "{} parameters × 16 B (fp32 weights, gradients, Adam moments); GPU memory unknown",
                fmt_count(params)
            ),
        ),
    };
    Warning {
        code: "fsdp".into(),
        text,
        rests_on,
    }
}

/// A curve measured on another number of ranks, rescaled.
fn curve_other_world_size(input: &RecommendInput, basis: &Basis) -> Option<Warning> {
    let (ranks, n) = (input.curve.ranks, input.gpus);
    (ranks != n).then(|| Warning {
        code: "curve_other_world_size".into(),
        text: format!(
            "The all-reduce curve was measured on {ranks} ranks; for {} its bandwidth part was rescaled by the ring factor. Measure on {} for a firmer number.",
            basis.words.n(n),
            basis.words.n(n)
        ),
        rests_on: basis.curve_cite.clone(),
    })
}

/// A short, measured step whose side-by-side slowdown nobody measured.
fn side_by_side_unmeasured(input: &RecommendInput, basis: &Basis) -> Option<Warning> {
    let n = input.gpus;
    // Only short, host-bound steps are slowed by N processes enough to matter (measured 1.00
    // for gpt2-355m and 1.05 for gpt2-124m against up to 1.21 for small MLPs on 2xH200).
    let short = basis.compute_s < crate::caveats::HOST_BOUND_STEP_S;
    let measured = matches!(input.compute, ComputeSource::Measured { .. });
    let (w, ranks) = (&basis.words, basis.words.n(n));
    (n > 1 && short && input.side_by_side.is_none() && measured).then(|| Warning {
        code: "side_by_side_unmeasured".into(),
        text: format!(
            "Not measured: how much {n} processes side by side slow each other's compute; the model assumes not at all, which over-predicts short, host-bound steps where they do. `--repeats N` measures it (`nocomm` runs at 1 and {ranks}, the {n}-{} ones timing {} alone in the same launches too); a slowdown of 10% needs about five launches to stand out of launch noise.",
            w.one_unit(),
            w.one()
        ),
        rests_on: basis.compute_cite.clone(),
    })
}

/// The node's other measurement of the same link parts from the curve the predictions read.
fn network_moved(input: &RecommendInput, basis: &Basis) -> Option<Warning> {
    let o = input
        .other_curve
        .as_ref()
        .filter(|o| o.curve.ranks == input.curve.ranks)?;
    let at_bucket = basis.curve.busbw_at_bucket_gbps;
    let other = o.curve.busbw_at(basis.curve.bucket_bytes);
    let factor = at_bucket / other;
    (other > 0.0 && (factor.ln().abs() > NETWORK_MOVED_FACTOR.ln())).then(|| Warning {
        code: "network_moved".into(),
        text: format!(
            "The all-reduce the predictions read runs at {factor:.2}× the bus bandwidth of the node's other measurement ({at_bucket:.2} against {other:.2} GB/s at {}): this node's network moves between measurements (over a host network 0.84–1.37× within minutes on 2×H200). Every communication-bound figure above moves with it: re-measure with `bench ddp --repeats 3` just before a long run.",
            fmt_bytes(basis.curve.bucket_bytes.to_f64())
        ),
        rests_on: format!(
            "{}; the other: {}",
            basis.curve_cite,
            o.provenance.describe()
        ),
    })
}

/// The chosen variant measured slower than predicted, beyond the measurement's noise.
fn measured_below_prediction(n: u32, choice: &Choice) -> Option<Warning> {
    let chosen = choice.chosen();
    let m = chosen.measured.as_ref()?;
    let p = chosen.prediction.speedup;
    (n > 1 && p > m.speedup && m.contradicted_by(p)).then(|| Warning {
        code: "measured_below_prediction".into(),
        text: format!(
            "{} measured {:.2}× on this node against the {p:.2}× predicted, further apart than the measurement's noise: expect the measured figure, and re-measure with `--verify --repeats 5` before a long run.",
            chosen.variant, m.speedup
        ),
        rests_on: m.rests_on.clone(),
    })
}

/// Whether an `NCCL_P2P_LEVEL` value allows P2P over a path of this class (NCCL's levels:
/// LOC < NVL < PIX < PXB < PHB < SYS; legacy integers 0..=5).
fn p2p_level_reaches(level: &str, link: LinkClass) -> bool {
    let rank = match level {
        "LOC" | "0" => 0,
        "NVL" => 1,
        "PIX" | "1" => 2,
        "PXB" | "2" => 3,
        "PHB" | "3" => 4,
        "NODE" => 5,
        "SYS" | "4" | "5" => 6,
        _ => return false,
    };
    rank >= link.rank()
}

fn is_truthy(v: &str) -> bool {
    !matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "" | "0" | "false" | "no" | "off"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p2p_levels() {
        assert!(p2p_level_reaches("SYS", LinkClass::Phb));
        assert!(p2p_level_reaches("PHB", LinkClass::Phb));
        assert!(!p2p_level_reaches("PXB", LinkClass::Phb));
        assert!(!p2p_level_reaches("PHB", LinkClass::Sys));
        assert!(p2p_level_reaches("5", LinkClass::Sys));
        assert!(!p2p_level_reaches("bogus", LinkClass::Sys));
    }
}

//! The host-side levers: DDP's options the launch's own figures argue for, each said only where
//! its figure supports it and with that figure: parameters that got no gradient (does the
//! training need `find_unused_parameters`, or should they go), the buffer broadcast
//! (`broadcast_buffers=False` where it is worth [`BROADCAST_SHARE`] of a step), and
//! `static_graph=True` where DDP's own work is [`STATIC_GRAPH_SHARE`] of a step and the graph
//! looks static. What each rests on: PyTorch's DDP documentation
//! (torch.nn.parallel.DistributedDataParallel: `find_unused_parameters`, `broadcast_buffers`,
//! `static_graph`).

use super::measured::HostMeasured;
use super::words::Words;
use super::{DdpOwnWork, RecommendInput, Warning};
use crate::ddp::{beyond_noise, Buffers, NoGrad};
use crate::num::ToF64;
use crate::units::{fmt_bytes, fmt_count, fmt_s};

/// The buffer broadcast is worth a lever from this share of a step: below it, a change that
/// costs BatchNorm's shared statistics buys less than launch-to-launch noise of a few percent.
pub const BROADCAST_SHARE: f64 = 0.02;
/// `static_graph=True` is suggested where DDP's own work at one GPU is at least this share of a
/// step: below it, the most it could save is within the plain reference's own noise.
pub const STATIC_GRAPH_SHARE: f64 = 0.03;

/// Every lever the measurements support, in the order: parameters, buffers, static graph.
pub(super) fn levers(input: &RecommendInput, words: &Words) -> Vec<Warning> {
    let Some(host) = &input.host else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(no_grad) = &host.facts.no_grad {
        out.extend(unused_parameters(input, host, no_grad));
    }
    if let Some(buffers) = &host.facts.buffers {
        out.extend(broadcast_buffers(input, host, buffers, words));
    }
    if let (Some(own), Some(no_grad)) = (&input.ddp_own_work, &host.facts.no_grad) {
        out.extend(static_graph(input, host, own, no_grad, words));
    }
    out
}

/// Up to three names, and how many more.
fn named(no_grad: &NoGrad) -> String {
    let shown: Vec<&str> = no_grad.names.iter().take(3).map(String::as_str).collect();
    let more = no_grad
        .count
        .saturating_sub(u32::try_from(shown.len()).unwrap_or(0));
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

/// Parameters without a gradient: they need `find_unused_parameters` (or `static_graph`), or
/// they are dead and should go. None without any: then the flag, where set, is unneeded.
fn unused_parameters(
    input: &RecommendInput,
    host: &HostMeasured,
    no_grad: &NoGrad,
) -> Option<Warning> {
    let recipe = &input.recipe;
    if no_grad.count == 0 {
        return recipe.find_unused_parameters.then(|| Warning {
            code: "find_unused_parameters_unneeded".into(),
            text: format!(
                "Every trainable parameter got a gradient in each of {} micro-batches checked, yet the recipe sets find_unused_parameters=True: DDP then searches the autograd graph for unused parameters after every forward and keeps its constructor's buckets. Drop it unless some steps leave parameters out (branches the data chooses).",
                no_grad.micro_batches
            ),
            rests_on: host.rests_on.clone(),
        });
    }
    let steady = if no_grad.same_each_micro_batch && !recipe.static_graph {
        format!(
            " The same ones in each of {} micro-batches checked: if that holds for the whole training, static_graph=True copes with them without the search.",
            no_grad.micro_batches
        )
    } else {
        String::new()
    };
    Some(Warning {
        code: "unused_parameters".into(),
        text: format!(
            "{} trainable parameter tensors ({} parameters) got no gradient: {}. DDP needs find_unused_parameters=True for them, which searches the autograd graph after every forward and keeps DDP's constructor buckets; if they are dead weight, remove them (or freeze them with requires_grad_(False)) and drop the flag.{steady}",
            no_grad.count,
            fmt_count(no_grad.params.to_f64()),
            named(no_grad)
        ),
        rests_on: host.rests_on.clone(),
    })
}

/// `broadcast_buffers=False` where the broadcast, timed alone, is worth [`BROADCAST_SHARE`] of
/// the run's step.
fn broadcast_buffers(
    input: &RecommendInput,
    host: &HostMeasured,
    buffers: &Buffers,
    words: &Words,
) -> Option<Warning> {
    let took = buffers.broadcast_s.filter(|t| t.is_finite() && *t > 0.0)?;
    let share = took / host.step_s;
    if !(input.recipe.broadcast_buffers && host.step_s > 0.0 && share >= BROADCAST_SHARE) {
        return None;
    }
    Some(Warning {
        code: "broadcast_buffers".into(),
        text: format!(
            "DDP sends rank 0's {} buffers ({}) to every rank before each forward: timed alone, {} a step, {:.1}% of the {} step at {}. broadcast_buffers=False saves it; each rank then keeps its own buffers (BatchNorm's running statistics from its own batches), so they differ per rank: evaluate or save from one rank, or use SyncBatchNorm.",
            buffers.count,
            fmt_bytes(buffers.bytes.to_f64()),
            fmt_s(took),
            share * 100.0,
            fmt_s(host.step_s),
            words.n(host.world)
        ),
        rests_on: host.rests_on.clone(),
    })
}

/// `static_graph=True` where DDP's own work at one GPU is [`STATIC_GRAPH_SHARE`] of a step,
/// beyond its rounds' noise ([`beyond_noise`]: a single round is held to one launch's bound),
/// and each checked micro-batch used the same parameters.
fn static_graph(
    input: &RecommendInput,
    host: &HostMeasured,
    own: &DdpOwnWork,
    no_grad: &NoGrad,
    words: &Words,
) -> Option<Warning> {
    let share = own.ratio - 1.0;
    if input.recipe.static_graph
        || !no_grad.same_each_micro_batch
        || share.is_nan()
        || share < STATIC_GRAPH_SHARE
        || !beyond_noise(own.ratio.ln(), own.noise_bound)
    {
        return None;
    }
    let noise = own.noise_bound.map_or(String::new(), |b| {
        format!(", beyond its rounds' noise (±{:.1}%)", b.exp_m1() * 100.0)
    });
    Some(Warning {
        code: "static_graph".into(),
        text: format!(
            "DDP's own work at {} is {:+.1}% of a step ({} in DDP, {} without{noise}), and the same parameters got gradients in each of {} micro-batches checked: static_graph=True lets DDP skip per-step work it does for graphs that may change (the unused-parameter search, the per-step bookkeeping of which gradients came). It is a promise you make: wrong where the data or control flow changes which parameters are used. Measure it: the same command with --static-graph.",
            words.one(),
            share * 100.0,
            fmt_s(own.ddp_step_s),
            fmt_s(own.plain_step_s),
            no_grad.micro_batches
        ),
        rests_on: format!("{}; {}", own.rests_on, host.rests_on),
    })
}

//! An FSDP2 wrapper's own work at world size one: measured against the plain step of the same
//! launch, or carried over from a wrapper measured there, with the copies that tell them apart
//! priced on the one-GPU all-gather curve.
//!
//! `replicate()` and `fully_shard(reshard_after_forward=False)` gather each unit once, in
//! forward; `fully_shard` and HSDP (resharding after forward) gather every block again in
//! backward. At world size one that second gather is, per block, the cast of the fp32 shard to
//! bf16 into a flat buffer (torch's `_get_param_all_gather_inputs`: reads 4 B and writes 2 B a
//! parameter, 1.5 times a copy's bytes), the copy into the all-gather's buffer
//! (`all_gather_copy_in`) and the copy out into the parameters (`split_with_sizes_copy`).

use serde::{Deserialize, Serialize};

use crate::ddp::Wrapper;
use crate::num::ToF64;

use super::fsdp::Fsdp2Units;
use super::op_curve::OpCurve;

/// The own work at world size one and where it comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OneGpuOwn {
    pub seconds: f64,
    pub how: String,
}

/// Whether the wrapper gathers its blocks again in backward.
pub fn reshards(w: Wrapper) -> bool {
    matches!(w, Wrapper::Fsdp | Wrapper::Hsdp)
}

/// Seconds of the copies that gather every block a second time at world size one, on a curve
/// measured on one GPU (its out-of-place all-gather is a copy of the bytes gathered).
pub fn regather_copies_s(units: &Fsdp2Units, param_bytes: f64, copy: &OpCurve) -> f64 {
    // The cast reads fp32 and writes the gathered dtype; a copy reads and writes that dtype.
    let cast = if param_bytes < 4.0 {
        (4.0 + param_bytes) / (2.0 * param_bytes)
    } else {
        0.0
    };
    units
        .blocks
        .iter()
        .map(|p| (cast + 2.0) * copy.time_s(p.to_f64() * param_bytes, false))
        .sum()
}

/// The wrapper's own work at world size one from what `measured` holds (each wrapper's step less
/// the plain step of its launch, seconds): its own; else a wrapper that gathers as often; else
/// one that gathers once more or less, with the copies of the second gather added or taken off
/// (`copy`, a one-GPU all-gather curve). `None` where nothing was measured.
pub fn one_gpu_own(
    wrapper: Wrapper,
    measured: &[(Wrapper, f64)],
    units: &Fsdp2Units,
    param_bytes: f64,
    copy: Option<&OpCurve>,
) -> Option<OneGpuOwn> {
    let find = |pred: &dyn Fn(Wrapper) -> bool| {
        measured
            .iter()
            .find(|(w, s)| w.is_fsdp2() && pred(*w) && s.is_finite())
    };
    if let Some((_, s)) = find(&|w| w == wrapper) {
        return Some(OneGpuOwn {
            seconds: *s,
            how: format!("{wrapper} measured at world size one against the plain step"),
        });
    }
    if let Some((w, s)) = find(&|w| reshards(w) == reshards(wrapper)) {
        return Some(OneGpuOwn {
            seconds: *s,
            how: format!("{w}'s, measured at world size one (it gathers as often as {wrapper})"),
        });
    }
    let copy = copy.filter(|c| c.ranks == 1)?;
    let (w, s) = find(&|w| reshards(w) != reshards(wrapper))?;
    let again = regather_copies_s(units, param_bytes, copy);
    let (seconds, sign) = if reshards(wrapper) {
        (s + again, "plus")
    } else {
        ((s - again).max(0.0), "less")
    };
    Some(OneGpuOwn {
        seconds,
        how: format!(
            "{w}'s, measured at world size one, {sign} the copies of gathering every block again in \
             backward ({:.2} ms on the one-GPU all-gather curve)",
            again * 1e3
        ),
    })
}

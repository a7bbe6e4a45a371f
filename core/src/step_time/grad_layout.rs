//! Gradients as the step-time model sees them: each trainable tensor's size, dtype and when its
//! gradient is ready during the backward pass, built from a model's parameters as torch registers
//! them (one path for presets, specs and models a launch reported), and their DDP buckets.

use serde::{Deserialize, Serialize};

use super::grad_tensor::GradTensor;
use super::powersgd;
use crate::ddp::{
    bucket_groups, constructor_groups, dtype_bytes, BucketOrder, ModelSpec, ParamLayout,
};
use crate::num::{floor_u64, ToF64};

/// Gradients in the order they become ready during the backward pass.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GradLayout {
    pub tensors: Vec<GradTensor>,
}

impl GradLayout {
    /// No structure known: gradients arrive uniformly over the backward, in 100 equal pieces.
    pub fn uniform(params: u64) -> Self {
        let pieces = params.clamp(1, 100);
        let base = params / pieces;
        let extra = params % pieces;
        let tensors = (0..pieces)
            .map(|i| {
                GradTensor::new(
                    base + u64::from(i < extra),
                    (i + 1).to_f64() / pieces.to_f64(),
                )
            })
            .collect();
        GradLayout { tensors }
    }

    /// A preset's or spec's layout: its parameters as the benchmark script registers them,
    /// through [`Self::from_params`]; empty for a model built by code (a launch reports those).
    pub fn for_model(spec: &ModelSpec) -> Self {
        Self::from_params(&spec.param_layout().unwrap_or_default())
    }

    /// The gradients of `layout`'s trainable tensors in the order DDP expects them: the reverse
    /// of registration (the forward's order, backwards). Frozen tensors get no gradient.
    ///
    /// When each is ready: the backward's work is spread over the tensors in proportion to their
    /// size, frozen ones included (the backward still runs through them to reach earlier
    /// trainable ones), except that an embedding lookup's backward is a scatter and costs
    /// nothing here. An output projection tied to the input embedding runs its matmul's
    /// backward first, before any gradient is final; its gradient is final at the end, with the
    /// lookup's. A tensor is ready once the work up to and including its own is done.
    pub fn from_params(layout: &ParamLayout) -> Self {
        let work = |t: &crate::ddp::ParamTensor| if t.lookup { 0 } else { t.numel() };
        let head: u64 = layout
            .tensors
            .iter()
            .filter(|t| t.tied_output)
            .map(|t| t.numel())
            .sum();
        let total = (head + layout.tensors.iter().map(work).sum::<u64>()).max(1);
        let mut done = head;
        let mut tensors = Vec::new();
        for t in layout.tensors.iter().rev() {
            done += work(t);
            if t.trainable && t.numel() > 0 {
                tensors.push(GradTensor {
                    params: t.numel(),
                    ready: done.to_f64() / total.to_f64(),
                    dtype: Some(t.dtype.clone()).filter(|d| d != "float32"),
                    matrix: matrix_view(&t.shape),
                });
            }
        }
        GradLayout { tensors }
    }

    pub fn params(&self) -> u64 {
        self.tensors.iter().map(|t| t.params).sum()
    }
}

/// A shape as `tensor.view(shape[0], -1)` sees it; `None` for a scalar.
fn matrix_view(shape: &[u64]) -> Option<[u64; 2]> {
    let (&rows, rest) = shape.split_first()?;
    (rows > 0).then(|| [rows, rest.iter().product()])
}

/// One DDP bucket: parameters it holds, their bytes per element, and when its last gradient is
/// ready (fraction of backward).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    pub params: u64,
    pub ready: f64,
    /// Bytes per gradient element in this bucket (a bucket holds one dtype).
    #[serde(default = "four")]
    pub bytes_per_param: f64,
    /// What PowerSGD sends of it, where the step runs PowerSGD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub powersgd: Option<powersgd::Split>,
}

fn four() -> f64 {
    4.0
}

/// DDP's bucket assignment ([`bucket_groups`]): tensors in ready order, one bucket per dtype at
/// a time, closed once it holds at least its cap (`first_cap_bytes` for the first, `cap_bytes`
/// after), so one tensor may overshoot it. A tensor without a dtype has `bytes_per_param`.
pub fn assign_buckets(
    layout: &GradLayout,
    bytes_per_param: f64,
    cap_bytes: f64,
    first_cap_bytes: f64,
) -> Vec<Bucket> {
    assign_buckets_in(
        layout,
        BucketOrder::Rebuilt,
        bytes_per_param,
        cap_bytes,
        first_cap_bytes,
    )
}

/// [`assign_buckets`] in the assignment `order` a recipe trains with: the constructor's runs
/// over registration order, the reverse of `layout`'s ready order ([`constructor_groups`]).
pub fn assign_buckets_in(
    layout: &GradLayout,
    order: BucketOrder,
    bytes_per_param: f64,
    cap_bytes: f64,
    first_cap_bytes: f64,
) -> Vec<Bucket> {
    assign_bucket_members(layout, order, bytes_per_param, cap_bytes, first_cap_bytes)
        .iter()
        .map(|ids| bucket_of(layout, ids, bytes_per_param))
        .collect()
}

/// [`assign_buckets_in`] with what PowerSGD at `rank` sends of each bucket.
pub fn assign_buckets_powersgd(
    layout: &GradLayout,
    order: BucketOrder,
    bytes_per_param: f64,
    cap_bytes: f64,
    first_cap_bytes: f64,
    rank: u32,
) -> Vec<Bucket> {
    assign_bucket_members(layout, order, bytes_per_param, cap_bytes, first_cap_bytes)
        .iter()
        .map(|ids| Bucket {
            powersgd: Some(powersgd::split(
                ids.iter().map(|&i| &layout.tensors[i]),
                rank,
            )),
            ..bucket_of(layout, ids, bytes_per_param)
        })
        .collect()
}

fn bucket_of(layout: &GradLayout, ids: &[usize], bytes_per_param: f64) -> Bucket {
    let members = ids.iter().map(|&i| &layout.tensors[i]);
    Bucket {
        params: members.clone().map(|t| t.params).sum(),
        ready: members.clone().map(|t| t.ready).fold(0.0, f64::max),
        bytes_per_param: layout.tensors[ids[0]]
            .dtype
            .as_deref()
            .and_then(dtype_bytes)
            .map_or(bytes_per_param, f64::from),
        powersgd: None,
    }
}

/// [`assign_buckets_in`]' buckets as the positions of their tensors in `layout`.
pub fn assign_bucket_members(
    layout: &GradLayout,
    order: BucketOrder,
    bytes_per_param: f64,
    cap_bytes: f64,
    first_cap_bytes: f64,
) -> Vec<Vec<usize>> {
    let elem = |t: &GradTensor| {
        t.dtype
            .as_deref()
            .and_then(dtype_bytes)
            .map_or(bytes_per_param, f64::from)
    };
    let bytes = |t: &GradTensor| floor_u64(t.params.to_f64() * elem(t));
    let items = layout
        .tensors
        .iter()
        .enumerate()
        .filter(|(_, t)| t.params > 0)
        .map(|(i, t)| (i, t.dtype.as_deref().unwrap_or(""), bytes(t)));
    let cap = floor_u64(cap_bytes.ceil());
    let first = floor_u64(first_cap_bytes.ceil());
    match order {
        BucketOrder::Rebuilt => bucket_groups(items, cap, first),
        // Registration order is the ready order reversed: position n-1-i, mapped back after.
        BucketOrder::Constructor => {
            let n = layout.tensors.len();
            let registered: Vec<(usize, &str, u64)> =
                items.map(|(i, d, b)| (n - 1 - i, d, b)).collect();
            constructor_groups(registered.into_iter().rev(), cap, first)
                .into_iter()
                .map(|ids| ids.into_iter().map(|j| n - 1 - j).collect())
                .collect()
        }
    }
}

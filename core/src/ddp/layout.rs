//! A model's parameters as PyTorch registers them (name, shape, dtype, trainable), reported by
//! each launch of the benchmark script or built here for a preset, and DDP's assignment of the
//! trainable ones to buckets, as `torch.distributed._compute_bucket_assignment_by_size` makes it:
//! gradients in reverse registration order, one open bucket per dtype, a bucket closed once it
//! holds at least its cap (the first bucket's cap, then `bucket_cap_mb`), so a tensor larger
//! than a bucket closes the bucket it lands in; frozen parameters are in no bucket. Under
//! `find_unused_parameters` without `static_graph` DDP never rebuilds its buckets
//! (`should_rebuild_buckets` in torch's reducer) and keeps its constructor's: the same function
//! over registration order, the buckets then reversed ([`BucketOrder`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::model_error::LayoutError;

/// One parameter tensor, as `model.named_parameters()` yields it (a tied weight once).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParamTensor {
    pub name: String,
    pub shape: Vec<u64>,
    /// torch's dtype name without `torch.`: `float32`, `bfloat16`, `float16`, ...
    pub dtype: String,
    /// `requires_grad`: frozen parameters send no gradients.
    #[serde(default = "yes")]
    pub trainable: bool,
    /// An embedding table (`nn.Embedding`): its backward is a scatter, no matmul.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lookup: bool,
    /// Also the output projection (tied embeddings): its matmul's backward runs first, while
    /// its gradient is final only at the end, with the lookup's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tied_output: bool,
}

fn yes() -> bool {
    true
}

impl ParamTensor {
    pub fn new(name: impl Into<String>, shape: &[u64]) -> Self {
        ParamTensor {
            name: name.into(),
            shape: shape.to_vec(),
            dtype: "float32".into(),
            trainable: true,
            lookup: false,
            tied_output: false,
        }
    }

    pub fn numel(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Bytes per element of the dtype; 4 for one this table does not know.
    pub fn element_bytes(&self) -> u32 {
        dtype_bytes(&self.dtype).unwrap_or(4)
    }

    pub fn bytes(&self) -> u64 {
        self.numel() * u64::from(self.element_bytes())
    }
}

/// Bytes per element of a torch dtype name (`float32`, `torch.bfloat16`, ...).
pub fn dtype_bytes(dtype: &str) -> Option<u32> {
    match dtype.trim_start_matches("torch.") {
        "float64" | "double" | "int64" | "long" | "complex64" => Some(8),
        "float32" | "float" | "int32" | "int" => Some(4),
        "bfloat16" | "float16" | "half" | "int16" => Some(2),
        "int8" | "uint8" | "bool" | "float8_e4m3fn" | "float8_e5m2" => Some(1),
        _ => None,
    }
}

/// Which of DDP's two assignments a recipe trains with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BucketOrder {
    /// Rebuilt after the first iteration, over the gradients in reverse registration order: the
    /// first (small) bucket holds the last registered tensors.
    #[default]
    Rebuilt,
    /// The constructor's, kept for good under `find_unused_parameters` without `static_graph`:
    /// assigned over registration order, the small first bucket holding the first registered
    /// tensors, the list of buckets then reversed (DDP's `__init__`), so it is reduced last.
    Constructor,
}

/// A model's parameters in registration order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParamLayout {
    pub tensors: Vec<ParamTensor>,
}

impl ParamLayout {
    /// Every parameter, trainable or frozen (`sum(p.numel() for p in model.parameters())`).
    pub fn total_params(&self) -> u64 {
        self.tensors.iter().map(ParamTensor::numel).sum()
    }

    /// The parameters DDP all-reduces.
    pub fn trainable_params(&self) -> u64 {
        self.trainable().map(ParamTensor::numel).sum()
    }

    /// Gradient bytes per step, before any comm hook.
    pub fn trainable_bytes(&self) -> u64 {
        self.trainable().map(ParamTensor::bytes).sum()
    }

    /// The trainable tensors in registration order: DDP's parameter list, whose positions
    /// bucket indices count.
    pub fn trainable(&self) -> impl DoubleEndedIterator<Item = &ParamTensor> + '_ {
        self.tensors.iter().filter(|t| t.trainable)
    }

    /// DDP's buckets over the trainable tensors, first bucket first; each bucket lists positions
    /// in [`Self::trainable`], in the order their gradients are expected (reverse registration).
    pub fn ddp_buckets(&self, cap_bytes: u64, first_cap_bytes: u64) -> Vec<Vec<usize>> {
        self.ddp_buckets_in(BucketOrder::Rebuilt, cap_bytes, first_cap_bytes)
    }

    /// DDP's buckets in the assignment `order` a recipe trains with, first bucket first; each
    /// lists positions in [`Self::trainable`].
    pub fn ddp_buckets_in(
        &self,
        order: BucketOrder,
        cap_bytes: u64,
        first_cap_bytes: u64,
    ) -> Vec<Vec<usize>> {
        let items: Vec<(usize, &str, u64)> = self
            .trainable()
            .enumerate()
            .map(|(i, t)| (i, t.dtype.as_str(), t.bytes()))
            .collect();
        match order {
            BucketOrder::Rebuilt => {
                bucket_groups(items.into_iter().rev(), cap_bytes, first_cap_bytes)
            }
            BucketOrder::Constructor => {
                constructor_groups(items.into_iter(), cap_bytes, first_cap_bytes)
            }
        }
    }

    /// Checks what a launch reported: at least one tensor, shapes of positive sizes.
    pub fn validate(&self) -> Result<(), LayoutError> {
        if self.tensors.is_empty() {
            return Err(LayoutError::NoParameters);
        }
        if self.trainable_params() == 0 {
            return Err(LayoutError::NoTrainable);
        }
        match self.tensors.iter().find(|t| t.shape.contains(&0)) {
            Some(t) => Err(LayoutError::EmptyShape {
                name: t.name.clone(),
                shape: t.shape.clone(),
            }),
            None => Ok(()),
        }
    }
}

/// DDP's bucket assignment over `items` given in gradient-ready order as (id, dtype, bytes):
/// one accumulating bucket per dtype, closed once it holds at least its limit (`first_cap`
/// for a dtype's first bucket, `cap` after), the rest closed at the end, dtype by dtype. Each
/// bucket lists the items' ids in the order they were added.
pub fn bucket_groups<'a>(
    items: impl Iterator<Item = (usize, &'a str, u64)>,
    cap: u64,
    first_cap: u64,
) -> Vec<Vec<usize>> {
    #[derive(Default)]
    struct Open {
        ids: Vec<usize>,
        bytes: u64,
        closed: usize,
    }
    let mut open: BTreeMap<&str, Open> = BTreeMap::new();
    let mut out = Vec::new();
    for (id, dtype, bytes) in items {
        let b = open.entry(dtype).or_default();
        b.ids.push(id);
        b.bytes += bytes;
        let limit = if b.closed == 0 { first_cap } else { cap };
        if b.bytes >= limit {
            out.push(std::mem::take(&mut b.ids));
            b.bytes = 0;
            b.closed += 1;
        }
    }
    out.extend(
        open.into_values()
            .map(|b| b.ids)
            .filter(|ids| !ids.is_empty()),
    );
    out
}

/// DDP's constructor assignment over `items` in registration order: [`bucket_groups`], the
/// buckets sorted by their first tensor (as torch's assignment does without an explicit order),
/// then reversed.
pub fn constructor_groups<'a>(
    items: impl Iterator<Item = (usize, &'a str, u64)>,
    cap: u64,
    first_cap: u64,
) -> Vec<Vec<usize>> {
    let mut buckets = bucket_groups(items, cap, first_cap);
    buckets.sort_by_key(|ids| ids.iter().min().copied());
    buckets.reverse();
    buckets
}

/// DDP's buckets as torch itself reported them for a launch (the script asks torch, it does not
/// compute them): positions in [`ParamLayout::trainable`], first bucket first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TorchBuckets {
    /// `rebuilt`: DDP's buckets after its first iteration, in the gradients' real ready order
    /// (`rebuilt_per_bucket_param_indices` of DDP's logging data; more than one rank);
    /// `assignment`: `_compute_bucket_assignment_by_size` over the parameters in reverse order,
    /// the function DDP rebuilds them with (one rank, where DDP does not rebuild);
    /// `constructor`: the constructor's assignment (registration order, buckets reversed), which
    /// DDP keeps under `find_unused_parameters` without `static_graph`.
    pub source: String,
    pub buckets: Vec<Vec<usize>>,
    pub cap_bytes: u64,
    pub first_cap_bytes: u64,
    /// Each bucket's bytes as DDP's own logging data has them (`rebuilt_bucket_sizes`, else
    /// `bucket_sizes`), in the reducer's order: torch's own figure to hold `buckets` to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sizes_bytes: Option<Vec<u64>>,
}

impl TorchBuckets {
    /// Whether ddpcheck's own assignment in `order` over `layout` puts the same tensors in
    /// the same buckets (order within a bucket aside: the real ready order may swap
    /// neighbours), and torch's own bucket sizes, where it logged them, are those of the lists.
    pub fn agrees_with(&self, layout: &ParamLayout, order: BucketOrder) -> bool {
        self.moved(layout, order) == 0 && self.sizes_agree(layout) != Some(false)
    }

    /// Whether the bytes of each listed bucket over `layout` are torch's own logged sizes, bucket
    /// by bucket; `None` where torch logged none.
    pub fn sizes_agree(&self, layout: &ParamLayout) -> Option<bool> {
        let logged = self.sizes_bytes.as_ref()?;
        let trainable: Vec<&ParamTensor> = layout.trainable().collect();
        let listed: Vec<u64> = self
            .buckets
            .iter()
            .map(|ids| {
                ids.iter()
                    .filter_map(|&i| trainable.get(i))
                    .map(|t| t.bytes())
                    .sum()
            })
            .collect();
        Some(&listed == logged)
    }

    /// Tensors that ddpcheck's own assignment in `order` over `layout` puts in another bucket
    /// (by position) than torch did, or that only one of the two assigns.
    pub fn moved(&self, layout: &ParamLayout, order: BucketOrder) -> usize {
        let place = |buckets: &[Vec<usize>]| -> BTreeMap<usize, usize> {
            buckets
                .iter()
                .enumerate()
                .flat_map(|(j, ids)| ids.iter().map(move |&i| (i, j)))
                .collect()
        };
        let ours = place(&layout.ddp_buckets_in(order, self.cap_bytes, self.first_cap_bytes));
        let torch = place(&self.buckets);
        ours.iter().filter(|(i, j)| torch.get(i) != Some(j)).count()
            + torch.keys().filter(|i| !ours.contains_key(i)).count()
    }
}

/// What a layout sends: its tensors, the trainable ones, and DDP's buckets at a cap.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutSummary {
    pub tensors: u32,
    pub trainable_tensors: u32,
    pub trainable_params: u64,
    /// Gradient bytes per step before any comm hook.
    pub gradient_bytes: u64,
    pub buckets: u32,
    pub cap_bytes: u64,
}

impl ParamLayout {
    pub fn summary(
        &self,
        order: BucketOrder,
        cap_bytes: u64,
        first_cap_bytes: u64,
    ) -> LayoutSummary {
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        LayoutSummary {
            tensors: count(self.tensors.len()),
            trainable_tensors: count(self.trainable().count()),
            trainable_params: self.trainable_params(),
            gradient_bytes: self.trainable_bytes(),
            buckets: count(self.ddp_buckets_in(order, cap_bytes, first_cap_bytes).len()),
            cap_bytes,
        }
    }
}

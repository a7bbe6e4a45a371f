//! FSDP2's step on N GPUs (`replicate()`, `fully_shard` resharding after forward or not, HSDP),
//! from the node's all-gather, reduce-scatter and all-reduce curves.
//!
//! The step is the plain step (the model without a wrapper on one GPU), plus the wrapper's own
//! work at world size one, plus the communication between GPUs that the compute does not hide:
//!
//! - forward: each unit (a block, and the root first) is all-gathered over its shard group; the
//!   next unit's gather is issued when a unit starts computing (FSDP2's implicit prefetch);
//! - backward: under resharding every block is gathered again, the next one issued when a block
//!   starts its backward; each unit's gradients are reduce-scattered over the shard group once
//!   its backward ends, and under HSDP and `replicate()` all-reduced over the replicas;
//! - the collectives run one after another on the network, beside the compute, which waits only
//!   for the gather of the unit it needs; what is left when the compute ends is exposed. Between
//!   CPU ranks that take every core, gloo moves the bytes on the cores that compute, and each
//!   collective adds its time to the step ([`Overlap::Serial`]);
//! - N ranks side by side slow each rank's compute by what a `nocomm` run measured, where one did.
//!
//! At world size one the collectives move nothing between GPUs: FSDP2 copies on the GPU (the
//! gather's copy-in and copy-out, the reduction's copy; torch's `foreach_reduce` copies the
//! input to the output where the group has one rank). Those copies share the GPU's memory and
//! SMs with the compute and are not hidden by it: they are the wrapper's own work at world size
//! one, measured in `bench ddp --gpus 1` against the plain step of the same launch. A wrapper
//! not measured there takes a measured one's, with the copies that tell them apart priced on
//! the one-GPU all-gather curve (out-of-place: a copy of the bytes gathered).

use serde::{Deserialize, Serialize};

use crate::ddp::{ParamLayout, RunDevice, Wrapper};
use crate::num::ToF64;

use super::op_curve::OpCurve;
use super::{LinkCurve, ModelError, DEFAULT_BACKWARD_FRACTION};

/// The units FSDP2 gathers one at a time: the root (everything outside the blocks, gathered
/// first and kept to the end of backward) and the blocks in forward order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fsdp2Units {
    pub root: u64,
    pub blocks: Vec<u64>,
}

impl Fsdp2Units {
    /// `layers` equal blocks of `block` parameters and the rest at the root.
    pub fn uniform(params: u64, layers: u64, block: u64) -> Self {
        Fsdp2Units {
            root: params.saturating_sub(layers * block),
            blocks: vec![block; usize::try_from(layers).unwrap_or(0)],
        }
    }

    /// From a launch's parameter list: a block is every tensor under one index of the outermost
    /// list of modules (`blocks.3.`, `model.layers.3.`); the others are the root's.
    pub fn from_layout(layout: &ParamLayout) -> Self {
        let mut blocks: Vec<(String, u64)> = Vec::new();
        let mut root = 0;
        for t in &layout.tensors {
            match block_key(&t.name) {
                Some(k) => match blocks.iter_mut().find(|(b, _)| *b == k) {
                    Some((_, n)) => *n += t.numel(),
                    None => blocks.push((k, t.numel())),
                },
                None => root += t.numel(),
            }
        }
        Fsdp2Units {
            root,
            blocks: blocks.into_iter().map(|(_, n)| n).collect(),
        }
    }

    pub fn params(&self) -> u64 {
        self.root + self.blocks.iter().sum::<u64>()
    }

    /// Every unit in forward order, the root first.
    fn in_forward(&self) -> Vec<u64> {
        std::iter::once(self.root)
            .chain(self.blocks.iter().copied())
            .collect()
    }
}

/// The prefix up to the first numeric part of a tensor's name (`model.layers.3`).
fn block_key(name: &str) -> Option<String> {
    let parts: Vec<&str> = name.split('.').collect();
    let i = parts
        .iter()
        .position(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))?;
    Some(parts[..=i].join("."))
}

/// The curves the model reads: all-gather and reduce-scatter over the shard group, all-reduce
/// over the replicas (HSDP, `replicate()`).
#[derive(Clone, Debug, Default)]
pub struct Fsdp2Curves {
    pub all_gather: Option<OpCurve>,
    pub reduce_scatter: Option<OpCurve>,
    pub all_reduce: Option<LinkCurve>,
}

/// What one FSDP2 step needs besides the curves.
#[derive(Clone, Debug)]
pub struct Fsdp2Inputs {
    pub wrapper: Wrapper,
    pub world: u32,
    pub units: Fsdp2Units,
    /// One micro-batch's plain step on one GPU (forward, backward, optimizer), seconds.
    pub plain_step_s: f64,
    pub backward_fraction: f64,
    /// Bytes of a parameter as gathered: 2 under bf16 (`MixedPrecisionPolicy(param_dtype)`).
    pub param_bytes: f64,
    /// Bytes of a gradient as reduced: 4 (`reduce_dtype=torch.float32`).
    pub reduce_bytes: f64,
    /// The wrapper's own work at world size one ([`one_gpu_own`]), seconds.
    pub own_one_gpu_s: f64,
    /// Whether the collectives run beside the compute or take its time.
    pub overlap: Overlap,
    /// How much N ranks side by side slow each rank's own compute (a `nocomm` run's slowdown,
    /// [`super::crowd::side_by_side`]); 1 where nothing measured it.
    pub side_by_side: f64,
}

/// Where the collectives run against the compute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// GPUs: NCCL's kernels on their own streams beside the compute, which waits only for the
    /// gather of the unit it needs.
    #[default]
    Beside,
    /// CPU ranks over gloo where the ranks take every core (one compute thread each): gloo's
    /// threads move the bytes on the cores that compute, so each collective adds its time to
    /// the step (2 ranks on 2 cores, docs/results/2026-12-06-cpu2-fsdp2-step-model.md).
    Serial,
}

impl Overlap {
    /// Where ranks of `device` run their collectives: CPU ranks over gloo take their cores.
    pub fn on(device: RunDevice) -> Self {
        match device {
            RunDevice::Cuda => Overlap::Beside,
            RunDevice::Cpu => Overlap::Serial,
        }
    }
}

impl Fsdp2Inputs {
    pub fn new(wrapper: Wrapper, world: u32, units: Fsdp2Units, plain_step_s: f64) -> Self {
        Fsdp2Inputs {
            wrapper,
            world,
            units,
            plain_step_s,
            backward_fraction: DEFAULT_BACKWARD_FRACTION,
            param_bytes: 2.0,
            reduce_bytes: 4.0,
            own_one_gpu_s: 0.0,
            overlap: Overlap::Beside,
            side_by_side: 1.0,
        }
    }
}

/// One FSDP2 step predicted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fsdp2Prediction {
    pub wrapper: Wrapper,
    pub world: u32,
    pub step_s: f64,
    pub plain_step_s: f64,
    pub own_one_gpu_s: f64,
    /// Seconds of all-gathers between GPUs in one step (forward, and backward when resharding).
    pub gather_s: f64,
    /// Seconds of reduce-scatters and replica all-reduces between GPUs in one step.
    pub reduce_s: f64,
    /// What of them the compute did not hide.
    pub exposed_s: f64,
    /// N GPUs' throughput over one GPU's plain step.
    pub speedup: f64,
    pub efficiency: f64,
}

/// Seconds each unit's collectives take between GPUs: (gather, reduce).
fn unit_costs(i: &Fsdp2Inputs, c: &Fsdp2Curves, params: u64) -> Result<(f64, f64), ModelError> {
    let g = i.wrapper.shard_group(i.world);
    let replicas = i.world / g;
    let p = params.to_f64();
    let need = |what: &str| {
        ModelError::NoData(format!(
            "no {what} curve over {} GPUs: run `ddpcheck bench collectives --ops {what}`",
            i.world
        ))
    };
    let over = |curve: &Option<OpCurve>, what: &str, bytes: f64| -> Result<f64, ModelError> {
        if g <= 1 {
            return Ok(0.0);
        }
        curve
            .as_ref()
            .and_then(|k| k.between_gpus_s(bytes, g))
            .ok_or_else(|| need(what))
    };
    let gather = over(&c.all_gather, "all_gather", p * i.param_bytes)?;
    let mut reduce = over(&c.reduce_scatter, "reduce_scatter", p * i.reduce_bytes)?;
    if replicas > 1 {
        let ar = c.all_reduce.as_ref().ok_or_else(|| need("all_reduce"))?;
        reduce += ar.allreduce_s(p * i.reduce_bytes / f64::from(g), replicas);
    }
    Ok((gather, reduce))
}

/// The network, one collective after another, beside the compute or taking its time.
struct Lanes {
    overlap: Overlap,
    compute: f64,
    network: f64,
    busy: f64,
}

impl Lanes {
    /// Issues a collective of `s` seconds now; returns when it ends.
    fn issue(&mut self, s: f64) -> f64 {
        self.network = self.network.max(self.compute) + s;
        if self.overlap == Overlap::Serial {
            self.compute = self.network;
        }
        self.busy += s;
        self.network
    }
}

/// FSDP2's step at `world` GPUs (module docs).
pub fn predict_fsdp2(i: &Fsdp2Inputs, c: &Fsdp2Curves) -> Result<Fsdp2Prediction, ModelError> {
    if i.wrapper == Wrapper::Ddp {
        return Err(ModelError::Invalid("DDP is the bucketed model's".into()));
    }
    if let Some(why) = i.wrapper.refuses(i.world) {
        return Err(ModelError::Invalid(why));
    }
    if !(i.plain_step_s.is_finite() && i.plain_step_s > 0.0) || i.units.params() == 0 {
        return Err(ModelError::Invalid(
            "an FSDP2 step needs a plain step and the model's parameters".into(),
        ));
    }
    let units = i.units.in_forward();
    let costs: Vec<(f64, f64)> = units
        .iter()
        .map(|p| unit_costs(i, c, *p))
        .collect::<Result<_, _>>()?;
    let total = i.units.params().to_f64();
    let stretch = if i.side_by_side.is_finite() && i.side_by_side > 0.0 {
        i.side_by_side
    } else {
        1.0
    };
    let compute_s = i.plain_step_s * stretch;
    let share = |p: u64| p.to_f64() / total * compute_s;
    let (fwd, bwd) = (1.0 - i.backward_fraction, i.backward_fraction);
    let mut l = Lanes {
        overlap: i.overlap,
        compute: 0.0,
        network: 0.0,
        busy: 0.0,
    };
    let mut gathered = vec![l.issue(costs[0].0)];
    for (k, p) in units.iter().enumerate() {
        l.compute = l.compute.max(gathered[k]);
        if let Some(next) = costs.get(k + 1) {
            gathered.push(l.issue(next.0));
        }
        l.compute += share(*p) * fwd;
    }
    let reshard = i.wrapper == Wrapper::Fsdp || i.wrapper == Wrapper::Hsdp;
    let last = units.len() - 1;
    let mut ready = vec![0.0; units.len()];
    if reshard && last > 0 {
        ready[last] = l.issue(costs[last].0);
    }
    let mut reduce_s = 0.0;
    for k in (0..units.len()).rev() {
        l.compute = l.compute.max(ready[k]);
        if reshard && k > 1 {
            ready[k - 1] = l.issue(costs[k - 1].0);
        }
        l.compute += share(units[k]) * bwd;
        l.issue(costs[k].1);
        reduce_s += costs[k].1;
    }
    let end = l.compute.max(l.network);
    let exposed = (end - compute_s).max(0.0);
    let step_s = compute_s + i.own_one_gpu_s * stretch + exposed;
    let speedup = f64::from(i.world) * i.plain_step_s / step_s;
    Ok(Fsdp2Prediction {
        wrapper: i.wrapper,
        world: i.world,
        step_s,
        plain_step_s: i.plain_step_s,
        own_one_gpu_s: i.own_one_gpu_s,
        gather_s: l.busy - reduce_s,
        reduce_s,
        exposed_s: exposed,
        speedup,
        efficiency: speedup / f64::from(i.world),
    })
}

//! The DDP step-time model: predicts one optimizer step of PyTorch DDP on N GPUs from the compute
//! time of one micro-batch on one GPU and the node's measured all-reduce curve.
//!
//! # The model
//!
//! One optimizer step with gradient accumulation `k` runs `k` micro-batches; DDP all-reduces only
//! in the last one (the others run under `no_sync`). Within that micro-batch:
//!
//! * the forward (and the rest of the non-backward work) takes `(1 − b)·compute`, the backward
//!   `b·compute` (`b` = [`StepInputs::backward_fraction`], default 2/3);
//! * gradients become ready during the backward in the order of a [`GradLayout`]: per tensor, at
//!   a fraction of the backward. For GPT-2-style decoders the tied embedding's gradient is final
//!   only at the very end of the backward, and the first part of the backward is the LM head,
//!   during which no gradient is ready ([`GradLayout::for_model`]). Without a model structure
//!   the gradients arrive uniformly ([`GradLayout::uniform`]);
//! * tensors are packed into buckets as DDP does (in ready order; a bucket closes once it holds
//!   at least its cap: 1 MiB for the first, `bucket_cap_mb` MiB after, in the parameters' dtype,
//!   so a comm hook halves the bytes on the wire but not the number of buckets);
//! * bucket all-reduces run one after another on one NCCL stream: bucket `j` starts when it is
//!   ready and bucket `j−1` has finished, and takes `per_bucket_s` (+ `hook_per_bucket_s` with a
//!   comm hook) plus the all-reduce time of its wire bytes read from the [`LinkCurve`]. PowerSGD
//!   runs three all-reduces per bucket in series (the gradients it leaves uncompressed, then
//!   `P`, then `Q`, sized from the gradients' shapes and its rank: [`powersgd`]), each read
//!   from the curve, so each pays its latency, and each after the first `per_bucket_s` more;
//! * a comm hook's own cost ([`StepInputs::hook_compute_s`], measured on one GPU) is paid in
//!   equal shares as each bucket becomes ready: a share delays that bucket's all-reduce and the
//!   rest of the backward, so the backward ends `hook` later, and a share paid while earlier
//!   buckets are still on the wire hides behind them. (DDP runs the hook as it hands over each
//!   bucket. On 2×H200 the MLPs' 1-GPU hook cost grew with the number of buckets, about
//!   0.35–0.45 ms a bucket, rather than with their bytes, which the GPU casts in tens of µs.
//!   Paying it all after the backward had under-predicted fp16 over shm by 8–28% on every
//!   measurement's 16.8M and 75.8M MLPs: docs/results/2026-11-30-h200x2-hook-cost.md);
//! * exposed communication is the time the last all-reduce ends after the backward ends.
//!
//! `step(N) = k·compute + hook + own + exposed + ddp_fixed_s + crowd`, and `step(1) = k·compute`,
//! one GPU running the same recipe without the comm hook and without DDP (`own` is DDP's own
//! work per step, [`StepInputs::ddp_own_s`], measured at one GPU against the same model without
//! DDP and paid at every world size; where it was not measured it is 0 and `compute` is the
//! 1-GPU step in DDP) (`hook` is the hook's casts,
//! [`StepInputs::hook_compute_s`]; see [`crate::ddp::one_gpu_reference`]): `compute_s`
//! is what a one-GPU run of the same recipe measures per micro-batch (its own bookkeeping
//! included), and `ddp_fixed_s` what N ranks add every synchronising step (DDP's reducer
//! finalisation, waiting for the slowest rank, stream synchronisation). `crowd` is what N
//! processes side by side add: `s` ([`StepInputs::side_by_side_slowdown`], ≥ 1) is how much
//! slower a micro-batch runs at N GPUs with no communication at all (they share the host's
//! cores, memory and PCIe; measured by a `nocomm` DDP run at N GPUs, 1 when not measured). The
//! `k − 1` micro-batches under `no_sync` and the per-step work stretch by `s` in full; in the
//! synchronising micro-batch the stretch is host time the rank spends waiting for its
//! all-reduces anyway, so only `max(0, (s − 1)·compute − exposed − ddp_fixed_s)` shows. (On
//! 2×H200 the MLPs' unaccumulated runs showed no slowdown where their `nocomm` and accumulated
//! runs did; counted this way rather than on every micro-batch, the errors of the side-by-side
//! datasets (2026-11-30 10:31) fell: docs/results/2026-11-30-h200x2-overlap-and-noise.md.)
//! Hence `speedup = N·k·compute / step(N)`, `efficiency = speedup / N`, and the communication share is
//! `(step(N) − step(1)) / step(N)`, the same definition [`crate::ddp::fill_scaling`] applies to
//! measured runs.
//!
//! # The all-reduce curve
//!
//! [`LinkCurve::from_sweep`] keeps the measured points and also fits `time = α + x/B` with
//! `x = bytes·2(n−1)/n` by least squares on *relative* errors (weights `1/time²`): unweighted
//! least squares would let the largest sizes decide α, which small sizes measure. The model
//! reads times by direct interpolation of the measured points (log size, log time; this is the
//! default, [`CurveMode::Interpolate`], because a measured curve already contains α and NCCL's
//! protocol changes that no two-parameter line captures), and uses α/B outside the measured
//! range, for other world sizes (ring factor rescaled) and for given numbers
//! ([`LinkCurve::flat`], e.g. the seeds' published busbw).
//!
//! # Overheads
//!
//! DDP's own costs ([`Overheads`]) matter where steps are short: with a few MB of gradients and
//! millisecond steps, per-call latency and per-step work dominate. The defaults are small,
//! order-of-magnitude figures for eager PyTorch on a current host (documented on
//! [`Overheads::default`]); [`calibrate`] replaces them, and the backward fraction, with values
//! fitted to the node's own measured DDP runs.

use serde::{Deserialize, Serialize};

use crate::ddp::{BucketOrder, CommHook, DdpResult, DdpVariant, ModelSpec, POWERSGD_DEFAULT_RANK};
use crate::num::{floor_u64, len_u32, ToF64};

/// One MiB, the unit of DDP's `bucket_cap_mb`.
pub const MIB: f64 = 1024.0 * 1024.0;
/// DDP's default `bucket_cap_mb`.
pub const DEFAULT_BUCKET_CAP_MB: f64 = 25.0;
/// DDP's first bucket (`dist._DEFAULT_FIRST_BUCKET_BYTES`), 1 MiB.
pub const DEFAULT_FIRST_BUCKET_MB: f64 = 1.0;
/// Backward ≈ twice the forward: the share of a micro-batch that communication can overlap.
pub const DEFAULT_BACKWARD_FRACTION: f64 = 2.0 / 3.0;

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ModelError {
    #[error("the all-reduce sweep has no usable point (positive size and time)")]
    EmptySweep,
    #[error("expected an all_reduce sweep, got {0}")]
    NotAllReduce(String),
    #[error("{0}")]
    Invalid(String),
    #[error("nothing to calibrate from: {0}")]
    NoData(String),
}

// ---------------------------------------------------------------------------------------------
// Inputs and prediction
// ---------------------------------------------------------------------------------------------

/// DDP's own costs, seconds. See [`Overheads::default`] and [`calibrate`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Overheads {
    /// Added once per synchronising step on N > 1 ranks.
    pub ddp_fixed_s: f64,
    /// Added to every bucket's all-reduce (launch, events, stream waits).
    pub per_bucket_s: f64,
    /// Added to every bucket when a comm hook runs (Python hook, cast, future callback).
    pub hook_per_bucket_s: f64,
}

impl Default for Overheads {
    /// Order-of-magnitude costs of eager PyTorch DDP on a current host, not fitted to any result:
    /// 200 µs per step (reducer prepare/finalise, the final wait, rank skew), 30 µs per bucket
    /// (a ProcessGroupNCCL call: events, stream wait, launch) and 40 µs more per bucket with a
    /// Python comm hook. [`calibrate`] replaces them with the node's own numbers.
    fn default() -> Self {
        Overheads {
            ddp_fixed_s: 200e-6,
            per_bucket_s: 30e-6,
            hook_per_bucket_s: 40e-6,
        }
    }
}

/// Everything [`predict`] needs for one configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepInputs {
    /// Gradients in backward order (sizes and ready times).
    pub layout: GradLayout,
    /// One micro-batch (forward, backward, its share of the rest) on one GPU, seconds.
    pub compute_s: f64,
    /// Share of `compute_s` that is backward: what communication can overlap with.
    pub backward_fraction: f64,
    /// Bytes per gradient element in the buckets (the parameters' dtype; 4 for fp32).
    pub grad_bytes_per_param: f64,
    /// Comm hook; fp16/bf16 send 2 bytes per element, PowerSGD what [`powersgd`] counts from
    /// the gradients' shapes at [`StepInputs::powersgd_rank`].
    pub hook: CommHook,
    pub bucket_cap_mb: f64,
    pub first_bucket_mb: f64,
    /// World size N.
    pub world: u32,
    /// Gradient accumulation k (micro-batches per optimizer step).
    pub accum: u32,
    pub overheads: Overheads,
    /// Tokens (or samples) one micro-batch processes on one GPU, for throughput.
    pub units_per_micro_batch: f64,
    /// Work done once per optimizer step whatever k is (the optimizer update, zeroing
    /// gradients), seconds. It runs after the last all-reduce, so it hides no communication.
    /// Measured from 1-GPU runs at two accumulations; 0 when unknown (then `compute_s` holds it).
    pub optimizer_s: f64,
    /// Extra work per optimizer step when a comm hook compresses gradients (the hook's host
    /// work and casts), seconds. Part of the N-GPU step, not of the speedup's 1-GPU reference,
    /// which runs the same recipe without the hook (`crate::ddp::one_gpu_reference`); paid in
    /// equal shares per bucket as each becomes ready (module docs). Measured as a 1-GPU hook run
    /// minus a 1-GPU plain run; 0 when unknown.
    pub hook_compute_s: f64,
    /// How much slower each GPU's work runs with N processes side by side than with one alone,
    /// communication aside (an N-GPU `nocomm` step over a 1-GPU one); 1 when not measured.
    /// Small, host-bound steps are where it matters: N Python processes share the host.
    pub side_by_side_slowdown: f64,
    /// How much longer the all-reduces take during training than the curve says (effective
    /// bandwidth during training); 1 unless calibrated on a measured baseline
    /// ([`BaselineFit`]).
    #[serde(default = "one")]
    pub comm_scale: f64,
    /// Share (0..=1) of the overlap the timeline allows that a step realises; `None`: the
    /// link's own ([`mechanisms::realised_overlap`]: full on fast links, less over host
    /// sockets).
    #[serde(default)]
    pub realised_overlap: Option<f64>,
    /// Host time each micro-batch under `no_sync` loses at N GPUs when no side-by-side
    /// slowdown was counted, seconds; `None`: [`mechanisms::NO_SYNC_HOST_S`].
    #[serde(default)]
    pub no_sync_host_s: Option<f64>,
    /// PowerSGD's rank, where the hook is PowerSGD ([`powersgd`]).
    #[serde(default = "default_powersgd_rank")]
    pub powersgd_rank: u32,
    /// DDP's bucket assignment under the recipe (the constructor's under
    /// `find_unused_parameters` without `static_graph`).
    #[serde(default)]
    pub bucket_order: BucketOrder,
    /// DDP's own work per optimizer step at any world size, seconds: the 1-GPU step in DDP
    /// minus the same model without DDP, timed interleaved in one launch
    /// (`crate::ddp::PlainReference`). Part of every step in DDP, 1 GPU included, and not of the
    /// speedup's reference, which is then one GPU without DDP; 0 where `compute_s` and
    /// `optimizer_s` come from the step in DDP (the reference is then that step).
    #[serde(default)]
    pub ddp_own_s: f64,
}

fn default_powersgd_rank() -> u32 {
    POWERSGD_DEFAULT_RANK
}

fn one() -> f64 {
    1.0
}

impl StepInputs {
    /// Defaults for everything but the model, compute, world size and accumulation.
    pub fn new(layout: GradLayout, compute_s: f64, world: u32, accum: u32) -> Self {
        StepInputs {
            layout,
            compute_s,
            backward_fraction: DEFAULT_BACKWARD_FRACTION,
            grad_bytes_per_param: 4.0,
            hook: CommHook::None,
            bucket_cap_mb: DEFAULT_BUCKET_CAP_MB,
            first_bucket_mb: DEFAULT_FIRST_BUCKET_MB,
            world,
            accum,
            overheads: Overheads::default(),
            units_per_micro_batch: 1.0,
            optimizer_s: 0.0,
            hook_compute_s: 0.0,
            side_by_side_slowdown: 1.0,
            comm_scale: 1.0,
            realised_overlap: None,
            no_sync_host_s: None,
            powersgd_rank: POWERSGD_DEFAULT_RANK,
            bucket_order: BucketOrder::Rebuilt,
            ddp_own_s: 0.0,
        }
    }

    /// A model preset's layout; throughput in its tokens (decoders) or samples (MLP).
    pub fn for_model(
        spec: &ModelSpec,
        micro_batch: u32,
        compute_s: f64,
        world: u32,
        accum: u32,
    ) -> Self {
        let mut s = Self::new(GradLayout::for_model(spec), compute_s, world, accum);
        s.units_per_micro_batch = f64::from(micro_batch) * f64::from(spec.tokens_per_sample());
        s
    }

    pub fn with_hook(mut self, hook: CommHook) -> Self {
        self.hook = hook;
        self
    }

    pub fn with_accum(mut self, accum: u32) -> Self {
        self.accum = accum;
        self
    }

    pub fn with_world(mut self, world: u32) -> Self {
        self.world = world;
        self
    }

    /// Hook, accumulation and bucket size of a DDP variant (FSDP is not modelled).
    pub fn with_variant(mut self, v: &DdpVariant) -> Self {
        self.hook = v.hook;
        self.powersgd_rank = v.powersgd_rank();
        self.accum = v.accum.max(1);
        if let Some(mb) = v.bucket_cap_mb {
            self.bucket_cap_mb = mb;
        }
        self
    }

    pub fn params(&self) -> u64 {
        self.layout.params()
    }

    /// PowerSGD at this rank (the hook set to PowerSGD).
    pub fn with_powersgd(mut self, rank: u32) -> Self {
        self.hook = CommHook::PowerSgd;
        self.powersgd_rank = rank;
        self
    }

    /// Bytes each rank all-reduces per synchronising step, over every bucket's all-reduces.
    pub fn wire_bytes(&self) -> f64 {
        self.buckets()
            .iter()
            .flat_map(|b| bucket_all_reduces(self.hook, b))
            .sum()
    }

    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |m: String| Err(ModelError::Invalid(m));
        if !(self.compute_s.is_finite() && self.compute_s > 0.0) {
            return bad(format!(
                "compute per micro-batch {} s must be positive",
                self.compute_s
            ));
        }
        if !(0.0..=1.0).contains(&self.backward_fraction) {
            return bad(format!(
                "backward fraction {} must be within 0..=1",
                self.backward_fraction
            ));
        }
        if !(1..=1_000_000).contains(&self.world) {
            return bad(format!("world size {} must be 1..=1000000", self.world));
        }
        if !(1..=1_000_000).contains(&self.accum) {
            return bad(format!("accumulation {} must be 1..=1000000", self.accum));
        }
        if !(self.grad_bytes_per_param.is_finite() && self.grad_bytes_per_param > 0.0) {
            return bad("gradient bytes per parameter must be positive".into());
        }
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !positive(self.bucket_cap_mb) || !positive(self.first_bucket_mb) {
            return bad("bucket sizes must be positive".into());
        }
        let o = &self.overheads;
        if [o.ddp_fixed_s, o.per_bucket_s, o.hook_per_bucket_s]
            .iter()
            .any(|v| !(v.is_finite() && *v >= 0.0))
        {
            return bad("DDP overheads must be zero or positive".into());
        }
        if !(self.hook_compute_s.is_finite() && self.hook_compute_s >= 0.0) {
            return bad(format!(
                "hook compute time {} s must be zero or positive",
                self.hook_compute_s
            ));
        }
        if !(self.ddp_own_s.is_finite() && self.ddp_own_s >= 0.0) {
            return bad(format!(
                "DDP's own work {} s must be zero or positive",
                self.ddp_own_s
            ));
        }
        if !(self.optimizer_s.is_finite() && self.optimizer_s >= 0.0) {
            return bad(format!(
                "optimizer time {} s must be zero or positive",
                self.optimizer_s
            ));
        }
        let s = self.side_by_side_slowdown;
        if !(s.is_finite() && (0.1..=100.0).contains(&s)) {
            return bad(format!(
                "side-by-side slowdown {s} must be within 0.1..=100"
            ));
        }
        if !(1..=crate::ddp::POWERSGD_MAX_RANK).contains(&self.powersgd_rank) {
            return bad(format!(
                "PowerSGD rank {} must be 1..={}",
                self.powersgd_rank,
                crate::ddp::POWERSGD_MAX_RANK
            ));
        }
        if self.layout.tensors.iter().any(|t| !t.ready.is_finite()) {
            return bad("gradient ready times must be finite".into());
        }
        Ok(())
    }

    /// The comm hook's cost per step: [`StepInputs::hook_compute_s`] when a hook runs, else 0.
    fn hook_cost_s(&self) -> f64 {
        if self.hook == CommHook::None {
            0.0
        } else {
            self.hook_compute_s
        }
    }

    /// DDP's buckets at `bucket_cap_mb`: under torch.compile also DDPOptimizer's compiled graph
    /// pieces, one per bucket (pytorch issue 108966).
    pub fn buckets(&self) -> Vec<Bucket> {
        let (cap, first) = (self.bucket_cap_mb * MIB, self.first_bucket_mb * MIB);
        if self.hook == CommHook::PowerSgd {
            assign_buckets_powersgd(
                &self.layout,
                self.bucket_order,
                self.grad_bytes_per_param,
                cap,
                first,
                self.powersgd_rank,
            )
        } else {
            assign_buckets_in(
                &self.layout,
                self.bucket_order,
                self.grad_bytes_per_param,
                cap,
                first,
            )
        }
    }
}

/// What the model predicts for one configuration. Times in seconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    pub world: u32,
    pub accum: u32,
    /// One optimizer step on N GPUs.
    pub step_s: f64,
    /// The same recipe on one GPU, without the comm hook: `k·compute` (the speedup's reference).
    pub single_gpu_step_s: f64,
    /// GPU work per step per GPU, `k·compute`.
    pub compute_s: f64,
    /// Busy time of the NCCL stream per step: the all-reduces and their per-bucket costs.
    pub comm_s: f64,
    /// Communication not hidden behind the backward pass.
    pub exposed_comm_s: f64,
    /// `ddp_fixed_s` (0 on one GPU).
    pub overhead_s: f64,
    /// Time N processes side by side add to a step beyond the communication waits that cover
    /// it (0 on one GPU).
    #[serde(default)]
    pub side_by_side_s: f64,
    pub buckets: u32,
    /// Bytes each rank all-reduces per step.
    pub wire_bytes: f64,
    /// `N·k·compute / step`.
    pub speedup: f64,
    pub efficiency: f64,
    /// `(step(N) − step(1)) / step(N)`: exposed communication, DDP overhead and the side-by-side
    /// slowdown (as measured runs define it).
    pub comm_share: f64,
    /// Units (tokens or samples) per second over all GPUs.
    pub throughput: f64,
}

/// The bytes of each all-reduce one bucket runs, in the order they run one after another: one
/// all-reduce of its gradients (cast to 2 bytes by the fp16 and bf16 hooks), or PowerSGD's
/// three (uncompressed, `P`, `Q`; [`powersgd`]), each in the bucket's dtype. An empty one (no
/// uncompressed gradient) is left out: it sends nothing and waits on nothing.
fn bucket_all_reduces(hook: CommHook, b: &Bucket) -> Vec<f64> {
    match (b.powersgd, hook.cast_bytes_per_param()) {
        (Some(split), _) => split
            .all_reduces()
            .iter()
            .filter(|&&e| e > 0)
            .map(|&e| e.to_f64() * b.bytes_per_param)
            .collect(),
        (None, Some(cast)) => vec![b.params.to_f64() * cast.min(b.bytes_per_param)],
        (None, None) => vec![b.params.to_f64() * b.bytes_per_param],
    }
}

/// Per-bucket durations on the NCCL stream for the given inputs: its all-reduces in series,
/// each read from the curve (so each pays the curve's latency), and each beyond the first
/// paying a call's own cost (the first one's is the timeline's per-bucket cost).
fn bucket_costs(inputs: &StepInputs, buckets: &[Bucket], curve: &LinkCurve) -> Vec<f64> {
    buckets
        .iter()
        .map(|b| {
            let calls = bucket_all_reduces(inputs.hook, b);
            let wire: f64 = calls
                .iter()
                .map(|&bytes| curve.allreduce_s(bytes, inputs.world))
                .sum();
            let extra_calls = calls.len().saturating_sub(1).to_f64();
            inputs.comm_scale * wire + extra_calls * inputs.overheads.per_bucket_s
        })
        .collect()
}

/// The timeline of the synchronising micro-batch: (comm busy time, exposed time). `hook_s` is
/// the comm hook's cost, paid in equal shares as each bucket becomes ready; the backward ends
/// `hook_s` later than `compute_s`, and exposed time counts from there.
fn timeline(
    compute_s: f64,
    backward_fraction: f64,
    buckets: &[Bucket],
    allreduce: &[f64],
    per_bucket_s: f64,
    hook_s: f64,
) -> (f64, f64) {
    let bwd_start = (1.0 - backward_fraction) * compute_s;
    let bwd = backward_fraction * compute_s;
    let per_hook = if buckets.is_empty() {
        0.0
    } else {
        hook_s / buckets.len().to_f64()
    };
    let mut end = 0.0f64;
    let mut busy = 0.0;
    for (j, (b, t)) in buckets.iter().zip(allreduce).enumerate() {
        let ready = bwd_start + b.ready.clamp(0.0, 1.0) * bwd + (j + 1).to_f64() * per_hook;
        let dur = per_bucket_s + t;
        end = end.max(ready) + dur;
        busy += dur;
    }
    (busy, (end - compute_s - hook_s).max(0.0))
}

fn assemble(inputs: &StepInputs, buckets: &[Bucket], busy: f64, exposed: f64) -> Prediction {
    let n = inputs.world;
    let k = f64::from(inputs.accum);
    let hook = inputs.hook_cost_s();
    // The speedup's reference: one GPU running the same recipe without the comm hook
    // (`crate::ddp::one_gpu_reference`); the hook's casts are part of the N-GPU step.
    let reference = k * inputs.compute_s + inputs.optimizer_s;
    let single = reference + hook;
    let (busy, exposed, overhead, crowd) = if n > 1 {
        let fixed = inputs.overheads.ddp_fixed_s;
        let crowd = side_by_side_extra(
            single,
            inputs.compute_s,
            inputs.side_by_side_slowdown,
            exposed + fixed,
        ) + mechanisms::no_sync_extra(inputs);
        (busy, exposed, fixed, crowd)
    } else {
        (0.0, 0.0, 0.0, 0.0)
    };
    // DDP's own work runs at every world size, one GPU included: a 1-GPU step in DDP is this
    // much slower than the reference without DDP.
    let step = single + inputs.ddp_own_s + crowd + exposed + overhead;
    let speedup = f64::from(n) * reference / step;
    Prediction {
        world: n,
        accum: inputs.accum,
        step_s: step,
        single_gpu_step_s: reference,
        compute_s: single,
        comm_s: busy,
        exposed_comm_s: exposed,
        overhead_s: overhead,
        side_by_side_s: crowd,
        buckets: if n > 1 { len_u32(buckets.len()) } else { 0 },
        wire_bytes: if n > 1 {
            buckets
                .iter()
                .flat_map(|b| bucket_all_reduces(inputs.hook, b))
                .sum()
        } else {
            0.0
        },
        speedup,
        efficiency: speedup / f64::from(n),
        comm_share: ((step - reference) / step).clamp(0.0, 1.0),
        throughput: f64::from(n) * k * inputs.units_per_micro_batch / step,
    }
}

/// What the side-by-side slowdown `s` adds to an N-GPU step beyond its exposed communication and
/// fixed cost (`waits`). The micro-batches under `no_sync` and the step's own work (optimizer,
/// hook casts) run `s` times slower in full. In the synchronising micro-batch the slowdown is a
/// host-side stretch that the rank spends anyway waiting for its all-reduces and DDP's fixed
/// work, so only what exceeds those waits shows: `max(0, (s − 1)·compute − waits)`.
fn side_by_side_extra(single: f64, compute: f64, s: f64, waits: f64) -> f64 {
    let stretch = s - 1.0;
    stretch * (single - compute) + (stretch * compute - waits).max(0.0)
}

fn per_bucket(inputs: &StepInputs) -> f64 {
    let o = &inputs.overheads;
    o.per_bucket_s
        + if inputs.hook == CommHook::None {
            0.0
        } else {
            o.hook_per_bucket_s
        }
}

/// Predicts one optimizer step (see the module docs for the model).
pub fn predict(inputs: &StepInputs, curve: &LinkCurve) -> Result<Prediction, ModelError> {
    inputs.validate()?;
    let buckets = inputs.buckets();
    let costs = bucket_costs(inputs, &buckets, curve);
    let (busy, exposed) = timeline(
        inputs.compute_s,
        inputs.backward_fraction,
        &buckets,
        &costs,
        per_bucket(inputs),
        inputs.hook_cost_s(),
    );
    // Without overlap every all-reduce waits for the backward's end: all of it is exposed.
    let overlap = inputs
        .realised_overlap
        .unwrap_or_else(|| mechanisms::realised_overlap(curve, inputs.world))
        .clamp(0.0, 1.0);
    let exposed = overlap * exposed + (1.0 - overlap) * busy;
    Ok(assemble(inputs, &buckets, busy, exposed))
}

/// The smallest accumulation `k ≤ max_k` whose efficiency reaches `target` (0..=1), or `None`.
/// Efficiency never falls as k grows (only the last micro-batch communicates), so the search
/// stops at the first hit.
pub fn min_accum_for(
    inputs: &StepInputs,
    curve: &LinkCurve,
    target: f64,
    max_k: u32,
) -> Result<Option<u32>, ModelError> {
    if !(target.is_finite() && target > 0.0 && target <= 1.0) {
        return Err(ModelError::Invalid(format!(
            "target efficiency {target} must be within (0, 1]"
        )));
    }
    for k in 1..=max_k.clamp(1, 1_000_000) {
        let p = predict(&inputs.clone().with_accum(k), curve)?;
        if p.efficiency >= target {
            return Ok(Some(k));
        }
    }
    Ok(None)
}

/// The parameter count in `[lo, hi]` where N GPUs stop beating one (speedup crosses 1), found by
/// bisection in log(params). `family` builds the inputs for a parameter count (its compute time
/// and layout). `None` when speedup does not go from ≥ 1 at `lo` to < 1 at `hi`. Bucket
/// boundaries make speedup slightly non-monotone; bisection returns one crossing.
pub fn crossover_params(
    lo: u64,
    hi: u64,
    curve: &LinkCurve,
    family: impl Fn(u64) -> StepInputs,
) -> Result<Option<u64>, ModelError> {
    if lo == 0 || hi <= lo {
        return Err(ModelError::Invalid(format!(
            "crossover search needs 0 < lo < hi, got {lo}..{hi}"
        )));
    }
    let speedup = |p: u64| predict(&family(p), curve).map(|r| r.speedup);
    if speedup(lo)? < 1.0 || speedup(hi)? >= 1.0 {
        return Ok(None);
    }
    let (mut a, mut b) = (lo, hi);
    while b - a > 1 && (b.to_f64() / a.to_f64()) > 1.001 {
        let mid = floor_u64((a.to_f64().ln() * 0.5 + b.to_f64().ln() * 0.5).exp());
        let mid = mid.clamp(a + 1, b - 1);
        if speedup(mid)? >= 1.0 {
            a = mid;
        } else {
            b = mid;
        }
    }
    Ok(Some(b))
}

/// Cost of a million tokens (or samples) at `throughput` per second on `n` GPUs priced per GPU-hour.
pub fn cost_per_million(throughput: f64, price_per_gpu_hour: f64, n: u32) -> Option<f64> {
    (throughput.is_finite()
        && throughput > 0.0
        && price_per_gpu_hour.is_finite()
        && price_per_gpu_hour >= 0.0)
        .then(|| price_per_gpu_hour * f64::from(n) * 1e6 / (throughput * 3600.0))
}

mod baseline;
mod calibrate;
mod crowd;
mod curve;
pub mod fsdp;
pub mod fsdp_own;
mod grad_layout;
mod grad_tensor;
pub mod mechanisms;
pub mod op_curve;
pub mod powersgd;
pub use baseline::BaselineFit;
pub use calibrate::{calibrate, cross_check, Calibration, CrossCheck};
pub use crowd::{side_by_side, SideBySide};
pub use curve::{CurveMode, CurvePoint, LinkCurve};
pub use grad_layout::{
    assign_bucket_members, assign_buckets, assign_buckets_in, assign_buckets_powersgd, Bucket,
    GradLayout,
};
pub use grad_tensor::GradTensor;

#[cfg(test)]
mod calibrate_tests;
#[cfg(test)]
mod fsdp_cpu_tests;
#[cfg(test)]
mod fsdp_tests;
#[cfg(test)]
mod powersgd_tests;
#[cfg(test)]
mod side_by_side_tests;
#[cfg(test)]
mod tests;

//! core's `DdpRequest` <-> the API's `BenchDdpRequest`: the variants, the recipe, the device and
//! the reference cross the wire as typed fields and enums, never as text the daemon would read
//! again. The way in refuses an enum value this build does not know, naming the field, and
//! checks each variant's parts by the rules its text form is read by (`DdpVariant::checked`).

use ddpcheck_core::ddp::{
    Amp, Backend, CommHook, CompileMode, DdpRequest, DdpVariant, ModelSpec, Recipe, Reference,
    RunDevice, Wrapper,
};
use ddpcheck_core::params::or_default;

use crate::convert::{deadline, env_pairs, Invalid};
use crate::v1;

/// An enum field's value, or a refusal naming the field where this build does not know it.
fn known<E: TryFrom<i32>>(field: &str, value: i32) -> Result<E, Invalid> {
    E::try_from(value).map_err(|_| Invalid(format!("{field}: unknown value {value}")))
}

impl From<&DdpRequest> for v1::BenchDdpRequest {
    fn from(r: &DdpRequest) -> Self {
        v1::BenchDdpRequest {
            models: r.models.iter().map(v1::ModelChoice::from).collect(),
            variants: r.variants.iter().map(v1::Variant::from).collect(),
            world_sizes: r.world_sizes.clone(),
            micro_batch: r.micro_batch,
            warmup_steps: r.warmup_steps,
            steps: r.steps,
            price_per_gpu_hour: r.price_per_gpu_hour.unwrap_or(0.0),
            env: r.env.iter().cloned().collect(),
            deadline_seconds: r.deadline_s,
            repeats: r.repeats,
            min_timed_seconds: r.min_timed_s,
            recipe: Some(v1::Recipe::from(&r.recipe)),
            device: v1::Device::from(r.device).into(),
            reference: v1::Reference::from(r.reference).into(),
        }
    }
}

/// Unset fields take the seed recipe: micro-batch 8, 10 warm-up and 40 timed steps, one
/// launch, a 600 s deadline, the recipe's defaults, CUDA GPUs and the plain reference.
impl TryFrom<v1::BenchDdpRequest> for DdpRequest {
    type Error = Invalid;

    fn try_from(req: v1::BenchDdpRequest) -> Result<Self, Invalid> {
        let models = req
            .models
            .into_iter()
            .map(ModelSpec::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        let variants = req
            .variants
            .into_iter()
            .enumerate()
            .map(|(i, v)| variant(i, v))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(DdpRequest {
            models,
            variants,
            world_sizes: req.world_sizes,
            micro_batch: or_default(req.micro_batch, 8),
            warmup_steps: or_default(req.warmup_steps, 10),
            steps: or_default(req.steps, 40),
            min_timed_s: req.min_timed_seconds,
            price_per_gpu_hour: (req.price_per_gpu_hour > 0.0).then_some(req.price_per_gpu_hour),
            env: env_pairs(&req.env),
            deadline_s: deadline(req.deadline_seconds, 600.0)?.as_secs_f64(),
            repeats: or_default(req.repeats, 1),
            recipe: req.recipe.map(recipe).transpose()?.unwrap_or_default(),
            device: known::<v1::Device>("device", req.device)?.into(),
            reference: known::<v1::Reference>("reference", req.reference)?.into(),
        })
    }
}

impl From<&DdpVariant> for v1::Variant {
    fn from(v: &DdpVariant) -> Self {
        v1::Variant {
            wrapper: v1::Wrapper::from(v.wrapper()).into(),
            hook: v1::CommHook::from(v.hook).into(),
            powersgd_rank: v.powersgd_rank.unwrap_or(0),
            accumulation: v.accum,
            bucket_cap_mb: v.bucket_cap_mb.unwrap_or(0.0),
            nocomm: v.nocomm,
            no_gradient_as_bucket_view: !v.gradient_as_bucket_view,
            env: v.env.iter().cloned().collect(),
        }
    }
}

/// The `i`th variant from its fields, checked as its text form would be; its name spelled
/// from its parts.
fn variant(i: usize, v: v1::Variant) -> Result<DdpVariant, Invalid> {
    let field = |name: &str| format!("variants[{i}].{name}");
    let parts = DdpVariant {
        name: String::new(),
        hook: known::<v1::CommHook>(&field("hook"), v.hook)?.into(),
        accum: or_default(v.accumulation, 1),
        bucket_cap_mb: (v.bucket_cap_mb != 0.0).then_some(v.bucket_cap_mb),
        gradient_as_bucket_view: !v.no_gradient_as_bucket_view,
        fsdp: false,
        wrapper: known::<v1::Wrapper>(&field("wrapper"), v.wrapper)?.into(),
        nocomm: v.nocomm,
        env: env_pairs(&v.env),
        powersgd_rank: (v.powersgd_rank != 0).then_some(v.powersgd_rank),
    };
    parts
        .checked()
        .map_err(|e| Invalid(format!("variants[{i}]: {e}")))
}

impl From<&Recipe> for v1::Recipe {
    fn from(r: &Recipe) -> Self {
        v1::Recipe {
            amp: v1::Amp::from(r.amp).into(),
            find_unused_parameters: r.find_unused_parameters,
            static_graph: r.static_graph,
            no_gradient_as_bucket_view: !r.gradient_as_bucket_view,
            no_broadcast_buffers: !r.broadcast_buffers,
            compile: v1::Compile::from(r.compile).into(),
            backend: v1::ProcessGroupBackend::from(r.backend).into(),
        }
    }
}

fn recipe(r: v1::Recipe) -> Result<Recipe, Invalid> {
    Ok(Recipe {
        amp: known::<v1::Amp>("recipe.amp", r.amp)?.into(),
        find_unused_parameters: r.find_unused_parameters,
        static_graph: r.static_graph,
        gradient_as_bucket_view: !r.no_gradient_as_bucket_view,
        broadcast_buffers: !r.no_broadcast_buffers,
        compile: known::<v1::Compile>("recipe.compile", r.compile)?.into(),
        backend: known::<v1::ProcessGroupBackend>("recipe.backend", r.backend)?.into(),
    })
}

/// Each enum both ways: core's value as the API's, and the API's (unspecified: the documented
/// default) as core's.
macro_rules! both_ways {
    ($core:ty, $api:ty, unspecified => $default:expr, $([$($c:tt)+] => $a:ident),+ $(,)?) => {
        impl From<$core> for $api {
            fn from(v: $core) -> Self {
                match v {
                    $($($c)+ => <$api>::$a,)+
                }
            }
        }

        impl From<$api> for $core {
            fn from(v: $api) -> Self {
                match v {
                    <$api>::Unspecified => $default,
                    $(<$api>::$a => $($c)+,)+
                }
            }
        }
    };
}

both_ways!(Wrapper, v1::Wrapper, unspecified => Wrapper::Ddp,
    [Wrapper::Ddp] => Ddp,
    [Wrapper::Replicate] => Replicate,
    [Wrapper::Fsdp] => Fsdp,
    [Wrapper::FsdpNoReshard] => FsdpNoreshard,
    [Wrapper::Hsdp] => Hsdp,
);

both_ways!(CommHook, v1::CommHook, unspecified => CommHook::None,
    [CommHook::None] => None,
    [CommHook::Fp16] => Fp16,
    [CommHook::Bf16] => Bf16,
    [CommHook::PowerSgd] => Powersgd,
);

both_ways!(Amp, v1::Amp, unspecified => Amp::Bf16,
    [Amp::Bf16] => Bf16,
    [Amp::Fp16] => Fp16,
    [Amp::None] => None,
);

both_ways!(Option<CompileMode>, v1::Compile, unspecified => None,
    [None] => Eager,
    [Some(CompileMode::Default)] => Default,
    [Some(CompileMode::ReduceOverhead)] => ReduceOverhead,
    [Some(CompileMode::MaxAutotune)] => MaxAutotune,
);

both_ways!(Backend, v1::ProcessGroupBackend, unspecified => Backend::Nccl,
    [Backend::Nccl] => Nccl,
    [Backend::Gloo] => Gloo,
    [Backend::Nccl2] => Nccl2,
);

both_ways!(RunDevice, v1::Device, unspecified => RunDevice::Cuda,
    [RunDevice::Cuda] => Cuda,
    [RunDevice::Cpu] => Cpu,
);

both_ways!(Reference, v1::Reference, unspecified => Reference::Plain,
    [Reference::Plain] => Plain,
    [Reference::Ddp] => Ddp,
);

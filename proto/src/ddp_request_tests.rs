//! Tests of `ddp_request`: a DDP benchmark's request, its variants and its recipe across the
//! wire, every enum value both ways, and unknown values refused with the field named.
#![allow(clippy::unwrap_used)]

use ddpcheck_core::ddp::{
    Amp, Backend, CommHook, CompileMode, DdpRequest, DdpVariant, Recipe, Reference, RunDevice,
    Wrapper,
};

use crate::v1;

fn a_request() -> DdpRequest {
    let mut hooked: DdpVariant = "powersgd4+accum2".parse().unwrap();
    hooked.env = vec![
        ("NCCL_ALGO".into(), "Tree".into()),
        ("NCCL_P2P_DISABLE".into(), "1".into()),
    ];
    DdpRequest {
        models: vec!["gpt2-124m".parse().unwrap(), "mlp:1024,4".parse().unwrap()],
        variants: vec!["base".parse().unwrap(), "bf16".parse().unwrap(), hooked],
        world_sizes: vec![1, 2],
        micro_batch: 4,
        warmup_steps: 3,
        steps: 20,
        min_timed_s: 2.0,
        price_per_gpu_hour: Some(2.5),
        env: vec![("NCCL_ALGO".into(), "Ring".into())],
        deadline_s: 300.0,
        repeats: 3,
        recipe: Recipe {
            amp: Amp::Fp16,
            find_unused_parameters: true,
            static_graph: true,
            gradient_as_bucket_view: false,
            broadcast_buffers: false,
            compile: Some(CompileMode::MaxAutotune),
            backend: Backend::Gloo,
        },
        device: RunDevice::Cpu,
        reference: Reference::Ddp,
    }
}

/// The whole request comes back equal, a variant's own environment included; every flag of
/// the recipe is set away from its default here (the unset request checks the defaults).
#[test]
fn a_ddp_request_survives_the_round_trip() {
    let r = a_request();
    let wire = v1::BenchDdpRequest::from(&r);
    assert_eq!(wire.variants[2].env.len(), 2, "{wire:?}");
    let back = DdpRequest::try_from(wire).unwrap();
    assert_eq!(back, r);
    assert_eq!(back.variants[2].env, r.variants[2].env);
}

#[test]
fn an_unset_ddp_request_takes_the_seed_recipe_and_bad_names_are_refused() {
    let unset = DdpRequest::try_from(v1::BenchDdpRequest::default()).unwrap();
    assert_eq!(
        (
            unset.micro_batch,
            unset.warmup_steps,
            unset.steps,
            unset.repeats
        ),
        (8, 10, 40, 1)
    );
    assert_eq!((unset.deadline_s, unset.price_per_gpu_hour), (600.0, None));
    assert_eq!(unset.recipe, Recipe::default());
    assert_eq!(
        (unset.device, unset.reference),
        (RunDevice::Cuda, Reference::Plain)
    );
    let bad = v1::BenchDdpRequest {
        models: vec![v1::ModelChoice::default()],
        ..Default::default()
    };
    assert!(DdpRequest::try_from(bad).is_err());
}

/// Each text form the CLI reads crosses the wire part by part and comes back equal, named as
/// it was typed.
#[test]
fn every_kind_of_variant_survives_the_round_trip() {
    for text in [
        "base",
        "bf16+accum4",
        "fp16",
        "powersgd",
        "powersgd1",
        "powersgd8+accum2",
        "replicate",
        "fsdp+accum4",
        "fsdp-noreshard",
        "hsdp+accum2",
        "nocomm+accum8",
        "bucket12.5+nobucketview",
        "accum1024+bucket4096",
    ] {
        let v: DdpVariant = text.parse().unwrap();
        assert_eq!(v.name, text);
        let wire = v1::Variant::from(&v);
        let r = v1::BenchDdpRequest {
            variants: vec![wire],
            ..Default::default()
        };
        let back = DdpRequest::try_from(r).unwrap();
        assert_eq!(back.variants, [v], "{text}");
    }
}

/// An unset variant is DDP's base; its parts are held to the rules of the text form.
#[test]
fn variant_fields_are_checked_as_the_text_form_is() {
    let one = |v: v1::Variant| {
        DdpRequest::try_from(v1::BenchDdpRequest {
            variants: vec![v1::Variant::default(), v],
            ..Default::default()
        })
        .map(|r| r.variants[1].clone())
    };
    assert_eq!(one(v1::Variant::default()).unwrap(), DdpVariant::default());
    let refused = |v: v1::Variant| one(v).unwrap_err().0;
    let fsdp_hooked = v1::Variant {
        wrapper: v1::Wrapper::Fsdp.into(),
        hook: v1::CommHook::Bf16.into(),
        ..Default::default()
    };
    let e = refused(fsdp_hooked);
    assert!(
        e.starts_with("variants[1]: \"fsdp+bf16\"") && e.contains("no DDP comm hook"),
        "{e}"
    );
    let long = v1::Variant {
        accumulation: 1025,
        ..Default::default()
    };
    assert!(refused(long).contains("accumulation must be 1..=1024"));
    let stray_rank = v1::Variant {
        powersgd_rank: 4,
        ..Default::default()
    };
    assert!(refused(stray_rank).contains("without the PowerSGD hook"));
    let big_rank = v1::Variant {
        hook: v1::CommHook::Powersgd.into(),
        powersgd_rank: 257,
        ..Default::default()
    };
    assert!(refused(big_rank).contains("rank must be 1..=256"));
    for mb in [0.05, f64::NAN, f64::INFINITY, -1.0] {
        let bucket = v1::Variant {
            bucket_cap_mb: mb,
            ..Default::default()
        };
        assert!(refused(bucket).contains("bucket_cap_mb"), "{mb}");
    }
    let silent = v1::Variant {
        nocomm: true,
        hook: v1::CommHook::Fp16.into(),
        ..Default::default()
    };
    assert!(refused(silent).contains("nocomm sends no gradients"));
}

/// Every value of an API enum (`0..` until the first this build lacks), to core and back: the
/// same value, or for UNSPECIFIED the documented default's.
fn api_values_round_trip<A, C>(default: A)
where
    A: TryFrom<i32> + Copy + PartialEq + std::fmt::Debug + From<C> + Into<i32>,
    C: From<A>,
{
    let mut seen = 0;
    while let Ok(api) = A::try_from(seen) {
        let back = A::from(C::from(api));
        let want = if seen == 0 { default } else { api };
        assert_eq!(back, want, "{api:?}");
        assert_ne!(
            Into::<i32>::into(back),
            0,
            "core's values are sent explicitly"
        );
        seen += 1;
    }
    assert!(seen >= 3, "{seen} values");
}

/// Every value of a core enum to the API and back.
fn core_values_round_trip<C, A>(values: &[C])
where
    C: Copy + PartialEq + std::fmt::Debug + From<A>,
    A: From<C>,
{
    for &c in values {
        assert_eq!(C::from(A::from(c)), c);
    }
}

#[test]
fn every_enum_value_crosses_both_ways() {
    core_values_round_trip::<_, v1::Wrapper>(&Wrapper::ALL);
    api_values_round_trip::<v1::Wrapper, Wrapper>(v1::Wrapper::Ddp);
    let hooks = [
        CommHook::None,
        CommHook::Fp16,
        CommHook::Bf16,
        CommHook::PowerSgd,
    ];
    core_values_round_trip::<_, v1::CommHook>(&hooks);
    api_values_round_trip::<v1::CommHook, CommHook>(v1::CommHook::None);
    core_values_round_trip::<_, v1::Amp>(&[Amp::Bf16, Amp::Fp16, Amp::None]);
    api_values_round_trip::<v1::Amp, Amp>(v1::Amp::Bf16);
    let modes = [
        None,
        Some(CompileMode::Default),
        Some(CompileMode::ReduceOverhead),
        Some(CompileMode::MaxAutotune),
    ];
    core_values_round_trip::<_, v1::Compile>(&modes);
    api_values_round_trip::<v1::Compile, Option<CompileMode>>(v1::Compile::Eager);
    let backends = [Backend::Nccl, Backend::Gloo, Backend::Nccl2];
    core_values_round_trip::<_, v1::ProcessGroupBackend>(&backends);
    api_values_round_trip::<v1::ProcessGroupBackend, Backend>(v1::ProcessGroupBackend::Nccl);
    core_values_round_trip::<_, v1::Device>(&[RunDevice::Cuda, RunDevice::Cpu]);
    api_values_round_trip::<v1::Device, RunDevice>(v1::Device::Cuda);
    core_values_round_trip::<_, v1::Reference>(&[Reference::Plain, Reference::Ddp]);
    api_values_round_trip::<v1::Reference, Reference>(v1::Reference::Plain);
}

/// A change made to a good request.
type Edit = fn(&mut v1::BenchDdpRequest);

/// A value this build does not know (a newer client's) is refused, the field named; never
/// read as the default.
#[test]
fn unknown_enum_values_are_refused_naming_the_field() {
    let good = v1::BenchDdpRequest::from(&a_request());
    fn recipe(r: &mut v1::BenchDdpRequest) -> &mut v1::Recipe {
        r.recipe.as_mut().unwrap()
    }
    let cases: [(&str, Edit); 7] = [
        ("device", |r| r.device = 9),
        ("reference", |r| r.reference = 9),
        ("recipe.amp", |r| recipe(r).amp = 9),
        ("recipe.compile", |r| recipe(r).compile = 9),
        ("recipe.backend", |r| recipe(r).backend = -1),
        ("variants[2].hook", |r| r.variants[2].hook = 9),
        ("variants[0].wrapper", |r| r.variants[0].wrapper = 6),
    ];
    for (field, edit) in cases {
        let mut r = good.clone();
        edit(&mut r);
        let e = DdpRequest::try_from(r).unwrap_err().0;
        assert!(
            e.starts_with(&format!("{field}: unknown value")),
            "{field}: {e}"
        );
    }
}

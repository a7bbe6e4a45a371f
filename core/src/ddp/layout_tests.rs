//! The layout code against torch itself: parameter lists and DDP's bucket assignment read from
//! torch (`bench/validate/model-layouts.py`, committed under `testdata/layouts/`), packed here
//! by [`ParamLayout::ddp_buckets`], and the presets' own tensors against the same torch model.

use super::{ModelSpec, ParamLayout, TorchBuckets};
use crate::num::ToF64;
use crate::step_time::{assign_buckets, GradLayout, MIB};

#[derive(serde::Deserialize)]
struct Fixture {
    model: String,
    total_params: u64,
    trainable_params: u64,
    tensors: Vec<super::ParamTensor>,
    torch_buckets: TorchBuckets,
}

fn fixture(name: &str) -> Fixture {
    let path = format!(
        "{}/src/ddp/testdata/layouts/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn layout(f: &Fixture) -> ParamLayout {
    ParamLayout {
        tensors: f.tensors.clone(),
    }
}

/// Every committed model: its counts, and DDP's buckets exactly as torch assigned them.
#[test]
fn ddp_buckets_are_torchs_own_for_every_committed_model() {
    for (name, tensors, buckets) in [
        ("torchvision-resnet50", 161, 5),
        ("torchvision-resnet50-torch2.11", 161, 5),
        ("torchvision-vit_b_16", 152, 14),
        ("timm-vit_base_patch16_224", 152, 14),
        ("hf-llama-1024x12", 111, 22),
        ("hf-llama-1024x12-frozen", 111, 3),
        ("mlp-1024-2048x1-10", 6, 2),
    ] {
        let f = fixture(name);
        let l = layout(&f);
        assert_eq!(l.tensors.len(), tensors, "{}", f.model);
        assert_eq!(l.total_params(), f.total_params, "{}", f.model);
        assert_eq!(l.trainable_params(), f.trainable_params, "{}", f.model);
        let tb = &f.torch_buckets;
        assert_eq!(tb.buckets.len(), buckets, "{}", f.model);
        assert_eq!(
            l.ddp_buckets(tb.cap_bytes, tb.first_cap_bytes),
            tb.buckets,
            "{}: ddpcheck's buckets against torch's",
            f.model
        );
        // The step-time model's buckets are the same groups, their bytes the tensors' own.
        let grads = GradLayout::from_params(&l);
        let model_buckets = assign_buckets(&grads, 4.0, 25.0 * MIB, MIB);
        assert_eq!(model_buckets.len(), buckets, "{}", f.model);
        let params: u64 = model_buckets.iter().map(|b| b.params).sum();
        assert_eq!(params, f.trainable_params, "{}", f.model);
    }
}

#[test]
fn resnet50_is_what_torch_counts() {
    let f = fixture("torchvision-resnet50");
    assert_eq!(f.total_params, 25_557_032);
    // DDP's small first bucket holds the classifier (fc.bias, fc.weight: 2049000 params).
    assert_eq!(f.torch_buckets.buckets[0].len(), 2);
    let l = layout(&f);
    let first: u64 = l
        .trainable()
        .rev()
        .take(2)
        .map(super::ParamTensor::numel)
        .sum();
    assert_eq!(first, 2_049_000);
}

/// The in/out MLP spec 1024->2048x1->10 is torch's 1024->2048->2048->10: same tensors, same
/// buckets, so the preset and a model a launch reports go through one layout path.
#[test]
fn the_mlp_spec_registers_the_tensors_torch_builds() {
    let f = fixture("mlp-1024-2048x1-10");
    let spec: ModelSpec = "mlp:1024->2048x1->10".parse().unwrap();
    let ours = spec.param_layout().unwrap();
    let shapes = |l: &ParamLayout| {
        l.tensors
            .iter()
            .map(|t| t.shape.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(shapes(&ours), shapes(&layout(&f)));
    assert_eq!(spec.params(), f.total_params);
    let tb = &f.torch_buckets;
    assert_eq!(
        ours.ddp_buckets(tb.cap_bytes, tb.first_cap_bytes),
        tb.buckets
    );
    assert_eq!(
        GradLayout::for_model(&spec),
        GradLayout::from_params(&layout(&f))
    );
}

/// The LLaMA-style model with all but its embeddings and q_proj frozen, as torch 2.11 and
/// transformers built it on the H200: 39% of the gradient bytes its parameter count implies.
#[test]
fn the_frozen_llama_sends_only_its_trainable_gradients() {
    let f = fixture("hf-llama-1024x12-frozen");
    let l = layout(&f);
    assert_eq!(l.total_params(), 200_827_904);
    assert_eq!(l.trainable_params(), 78_118_912);
    assert!(l
        .tensors
        .iter()
        .filter(|t| t.trainable)
        .all(|t| t.name.contains("embed")
            || t.name.contains("q_proj")
            || t.name.contains("lm_head")));
    let grads = GradLayout::from_params(&l);
    assert_eq!(grads.params(), 78_118_912);
    let share = l.trainable_bytes().to_f64() / (l.total_params() * 4).to_f64();
    assert!((share - 0.389).abs() < 0.001, "{share}");
}

/// Frozen parameters send nothing: they are in no bucket and no gradient, yet the backward
/// still runs through them, so the trainable ones keep their ready times.
#[test]
fn frozen_parameters_are_in_no_bucket() {
    let f = fixture("torchvision-vit_b_16");
    let all = layout(&f);
    let mut frozen = all.clone();
    for t in &mut frozen.tensors {
        t.trainable = t.name.contains("self_attention.in_proj") || t.name.starts_with("heads");
    }
    let kept: Vec<&str> = frozen.trainable().map(|t| t.name.as_str()).collect();
    assert!(
        kept.len() >= 13 && kept.len() < all.tensors.len(),
        "{kept:?}"
    );
    let buckets = frozen.ddp_buckets(25 << 20, 1 << 20);
    let in_buckets: usize = buckets.iter().map(Vec::len).sum();
    assert_eq!(in_buckets, kept.len());
    let grads = GradLayout::from_params(&frozen);
    assert_eq!(grads.params(), frozen.trainable_params());
    assert!(frozen.trainable_params() < all.trainable_params() / 2);
    // The same tensor is ready at the same moment with or without the others frozen.
    let ready = |l: &ParamLayout, name: &str| {
        let g = GradLayout::from_params(l);
        let pos = l.trainable().rev().position(|t| t.name == name).unwrap();
        g.tensors[pos].ready
    };
    let name = "encoder.layers.encoder_layer_0.self_attention.in_proj_weight";
    assert!((ready(&all, name) - ready(&frozen, name)).abs() < 1e-12);
}

/// A tensor larger than a bucket closes the bucket it lands in; a second dtype opens its own.
#[test]
fn large_tensors_and_dtypes_bucket_as_ddp_does() {
    let mut l = ParamLayout {
        tensors: vec![
            super::ParamTensor::new("a", &[100]),
            super::ParamTensor::new("big", &[8 << 20]),
            super::ParamTensor::new("b", &[100]),
        ],
    };
    // Reverse order: b, big (32 MiB: over the 1 MiB first cap, closes [b, big]), a.
    assert_eq!(l.ddp_buckets(25 << 20, 1 << 20), vec![vec![2, 1], vec![0]]);
    l.tensors[0].dtype = "bfloat16".into();
    l.tensors[2].dtype = "bfloat16".into();
    // b and a share the bf16 bucket; big its own fp32 one.
    assert_eq!(l.ddp_buckets(25 << 20, 1 << 20), vec![vec![1], vec![2, 0]]);
}

/// Three 512×512 layers registered a, b, c and an unused 8×8 one, under
/// `find_unused_parameters` with a 1 MiB cap: torch 1.13's own logging data gave the bucket
/// sizes 2336, 1050624, 1050624, 1048576 bytes (the constructor's buckets, never rebuilt;
/// gpu/tests/python/test_host.py holds the script's lists to torch's sizes on every run).
fn constructor_case() -> ParamLayout {
    let mut tensors = Vec::new();
    for (layer, width) in [("a", 512), ("b", 512), ("c", 512), ("unused", 8)] {
        tensors.push(super::ParamTensor::new(
            format!("{layer}.weight"),
            &[width, width],
        ));
        tensors.push(super::ParamTensor::new(format!("{layer}.bias"), &[width]));
    }
    ParamLayout { tensors }
}

fn bucket_bytes(l: &ParamLayout, buckets: &[Vec<usize>]) -> Vec<u64> {
    let t: Vec<&super::ParamTensor> = l.trainable().collect();
    buckets
        .iter()
        .map(|b| b.iter().map(|&i| t[i].bytes()).sum())
        .collect()
}

#[test]
fn under_find_unused_parameters_the_buckets_are_the_constructors_as_torch_sized_them() {
    use super::BucketOrder;
    let l = constructor_case();
    let torch_sizes = vec![2336, 1_050_624, 1_050_624, 1_048_576];
    let ours = l.ddp_buckets_in(BucketOrder::Constructor, 1 << 20, 1 << 20);
    assert_eq!(bucket_bytes(&l, &ours), torch_sizes);
    assert_eq!(ours, vec![vec![5, 6, 7], vec![3, 4], vec![1, 2], vec![0]]);
    // The rebuilt packing, reverse order from the last tensor, is another one here.
    let rebuilt = l.ddp_buckets(1 << 20, 1 << 20);
    assert_ne!(bucket_bytes(&l, &rebuilt), torch_sizes);

    let tb = TorchBuckets {
        source: "constructor".into(),
        buckets: ours.clone(),
        cap_bytes: 1 << 20,
        first_cap_bytes: 1 << 20,
        sizes_bytes: Some(torch_sizes),
    };
    assert!(tb.agrees_with(&l, BucketOrder::Constructor));
    assert!(
        tb.moved(&l, BucketOrder::Rebuilt) > 0,
        "the rebuilt packing is not torch's here, and says so"
    );
    assert!(!tb.agrees_with(&l, BucketOrder::Rebuilt));
    // Same lists, but torch logged other sizes: not "the same buckets".
    let off = TorchBuckets {
        sizes_bytes: Some(vec![1, 2, 3, 4]),
        ..tb
    };
    assert_eq!(off.sizes_agree(&l), Some(false));
    assert!(!off.agrees_with(&l, BucketOrder::Constructor));
}

/// The step-time model packs the gradients in the recipe's order: under the constructor's
/// buckets, the same tensors as the layout's own assignment, the small bucket reduced last.
#[test]
fn the_models_packing_follows_the_constructors_buckets() {
    use super::BucketOrder;
    use crate::step_time::assign_buckets_in;
    let l = constructor_case();
    let grads = GradLayout::from_params(&l);
    let params = |order| -> Vec<u64> {
        assign_buckets_in(&grads, order, 4.0, MIB, MIB)
            .iter()
            .map(|b| b.params)
            .collect()
    };
    let expect = |order| -> Vec<u64> {
        bucket_bytes(&l, &l.ddp_buckets_in(order, 1 << 20, 1 << 20))
            .iter()
            .map(|b| b / 4)
            .collect()
    };
    assert_eq!(
        params(BucketOrder::Constructor),
        expect(BucketOrder::Constructor)
    );
    assert_eq!(params(BucketOrder::Rebuilt), expect(BucketOrder::Rebuilt));
    assert_ne!(
        params(BucketOrder::Constructor),
        params(BucketOrder::Rebuilt)
    );
}

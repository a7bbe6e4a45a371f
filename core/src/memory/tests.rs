//! The memory arithmetic against figures computed by hand.

use super::*;
use crate::ddp::ModelSpec;
use crate::num::ToF64;

/// `decoder:32,4096,32,2048,32000,llama`: 8.7B parameters.
fn llama_8b() -> ModelSpec {
    "decoder:32,4096,32,2048,32000,llama".parse().unwrap()
}

#[test]
fn the_8b_decoder_counts_as_by_hand() {
    // One block: down 16384·4096 + gate-and-up 2·4096·16384 + norm 4096 + proj 4096² + qkv
    // 4096·12288 + norm 4096 = 268,443,648; 32 of them, the final norm 4096 and the tied
    // embedding 32000·4096 = 131,072,000.
    let m = MemoryModel::of_spec(&llama_8b(), 1, Amp::Bf16);
    assert_eq!(m.largest_block, 268_443_648);
    assert_eq!(m.params, 32 * 268_443_648 + 4096 + 131_072_000);
    assert_eq!(m.root, 4096 + 131_072_000);
}

#[test]
fn each_wrapper_holds_its_state_copies_and_activations_at_its_peak_moment() {
    let m = MemoryModel {
        params: 1_000_000_000,
        trainable: 1_000_000_000,
        largest_block: 10_000_000,
        root: 100_000_000,
        amp: Amp::Bf16,
        micro_batch: 1,
        activations: ActivationSource::Measured {
            bytes: 5_000_000_000,
            what: "test".into(),
        },
        checkpointed_bytes: None,
        fsdp2_activations: Some(ActivationSource::Measured {
            bytes: 3_000_000_000,
            what: "test".into(),
        }),
        fsdp2_checkpointed_bytes: None,
        measured: Vec::new(),
        backward_start_per_sample: 0,
    };
    // DDP when backward starts: 16 B of state, the 4 B it holds unidentified, autocast's 2 B
    // casts and its activations: 27 GB (the end, 20 GB, is lower).
    let ddp = predict(&m, Wrapper::Ddp, 8);
    assert_eq!(
        (ddp.params_bytes, ddp.grads_bytes, ddp.optimizer_bytes),
        (4_000_000_000, 4_000_000_000, 8_000_000_000)
    );
    assert_eq!(
        (ddp.compute_bytes, ddp.other_bytes),
        (2_000_000_000, 4_000_000_000)
    );
    assert_eq!(
        (ddp.total_bytes, ddp.peak_at),
        (27_000_000_000, Moment::BackwardStart)
    );
    // fully_shard at 8 when backward starts: 12 B / 8 = 1.5 GB of state without gradients, the
    // root and one block gathered in bf16 (220 MB), FSDP2's own activations (3 GB).
    let fsdp = predict(&m, Wrapper::Fsdp, 8);
    assert_eq!(fsdp.compute_bytes, 220_000_000);
    assert_eq!(fsdp.activations_bytes, 3_000_000_000);
    assert_eq!(fsdp.total_bytes, 4_720_000_000);
    // Its end: 2 GB of state, the last block's bf16 gradient and fp32 copy (60 MB), the root's
    // bf16 parameters and gradient (400 MB) less its sharded gradient (50 MB): 2.41 GB.
    assert_eq!(fsdp.other_bytes, 410_000_000);
    // Without resharding every parameter stays gathered: 2 B each.
    let noreshard = predict(&m, Wrapper::FsdpNoReshard, 8);
    assert_eq!(noreshard.compute_bytes, 2_000_000_000);
    assert_eq!(
        noreshard.total_bytes,
        1_500_000_000 + 2_000_000_000 + 3_000_000_000
    );
    // HSDP at 8 shards over 4: 3 B of state per parameter without gradients.
    let hsdp = predict(&m, Wrapper::Hsdp, 8);
    assert_eq!(hsdp.shard_group, 4);
    assert_eq!(
        hsdp.total_bytes,
        3_000_000_000 + 220_000_000 + 3_000_000_000
    );
    // With no activations the end is the peak.
    let bare = m.with_activations(Wrapper::Fsdp, ActivationSource::Unknown);
    let row = predict(&bare, Wrapper::Fsdp, 8);
    assert_eq!(
        (row.total_bytes, row.peak_at),
        (2_410_000_000, Moment::BackwardEnd)
    );
    // Full precision: DDP computes on its fp32 weights, no copy; FSDP2 gathers fp32.
    let fp32 = MemoryModel {
        amp: Amp::None,
        ..m.clone()
    };
    assert_eq!(predict(&fp32, Wrapper::Ddp, 8).compute_bytes, 0);
    assert_eq!(
        predict(&fp32, Wrapper::Fsdp, 8).compute_bytes,
        4 * 110_000_000
    );
}

#[test]
fn a_block_saves_what_the_presets_code_keeps_for_backward() {
    use super::activations::{block_bytes_per_token, outside_bytes_per_token};
    let spec = llama_8b();
    let d = spec.decoder().unwrap();
    // h = 4096, ffn 16384, 32 heads, as many key/value heads. Per token: two fp32 norm inputs
    // (2·4·h); 16-bit: ln1's output h, the qkv output 3h (kept by v's view) with the rotated q
    // and k (2h), the attention's output and its contiguous copy (2h), ln2's output h, the
    // gate-and-up output, SiLU output and product (4·ffn); the log-sum-exp 4 B per head.
    let ddp = Dtypes::of(Wrapper::Ddp, Amp::Bf16);
    assert_eq!(
        block_bytes_per_token(d, ddp),
        8.0 * 4096.0 + 2.0 * (9.0 * 4096.0 + 4.0 * 16384.0) + 128.0
    );
    // FSDP2's bf16 parameters: the residual stream is bf16 too.
    let fsdp2 = Dtypes::of(Wrapper::Fsdp, Amp::Bf16);
    assert_eq!(
        block_bytes_per_token(d, fsdp2) + 4.0 * 4096.0,
        block_bytes_per_token(d, ddp)
    );
    // The loss when backward starts: three vocab-wide tensors, fp32 under autocast.
    assert_eq!(
        outside_bytes_per_token(d, ddp),
        6.0 * 4096.0 + 12.0 * 32000.0
    );
    assert_eq!(
        outside_bytes_per_token(d, fsdp2),
        4.0 * 4096.0 + 6.0 * 32000.0
    );
    // Grouped-query attention saves the repeated k and v, not the qkv output.
    let gqa = crate::ddp::Decoder {
        kv_heads: Some(8),
        ..d.clone()
    };
    assert_eq!(
        block_bytes_per_token(d, fsdp2) - block_bytes_per_token(&gqa, fsdp2),
        2.0 * 2.0 * 4096.0
    );
    let (bytes, how) = decoder_activation_bytes(d, 1, ddp);
    assert_eq!(
        bytes.to_f64(),
        2048.0 * (32.0 * block_bytes_per_token(d, ddp) + outside_bytes_per_token(d, ddp))
    );
    assert!(how.contains("residual stream fp32"), "{how}");
    let (two, _) = decoder_activation_bytes(d, 2, ddp);
    assert_eq!(two, 2 * bytes, "linear in the micro-batch");
}

#[test]
fn on_4x48gb_ddp_does_not_fit_the_8b_decoder_and_fsdp_with_checkpointing_does() {
    let gpu = 51_527_024_640; // an RTX A6000 as NVML reports it
    let m = MemoryModel::of_spec(&llama_8b(), 8, Amp::Bf16);
    let p = plan(&m, 4, Some(gpu));
    assert_eq!(p.ddp_fits, Some(false));
    let ddp = p.row(Wrapper::Ddp).unwrap();
    // 22 B per parameter (16 of state, 4 unidentified, autocast's 2) and 8 sequences'
    // activations.
    assert_eq!(ddp.total_bytes, 22 * m.params + m.activations.bytes());
    // 4 GPUs: fully_shard's state is 3 B per parameter when backward starts (26.2 GB), the
    // root and a block gathered (0.8 GB), and one sequence of 2048 tokens keeps 14.9 GB of
    // activations under FSDP2's bf16 parameters: 41.9 GB of the 46.4 GB usable. Two sequences
    // do not fit (56.8 GB): micro-batch 1, without checkpointing.
    let fit = p.fit.as_ref().unwrap();
    assert_eq!(fit.row.wrapper, Wrapper::Fsdp);
    assert!(!fit.checkpointing);
    assert_eq!(fit.micro_batch, 1);
    let usable = usable_bytes(gpu);
    assert!(fit.row.total_bytes <= usable);
    assert!(predict(&m.at_micro_batch(2), Wrapper::Fsdp, 4).total_bytes > usable);
    let fsdp2_acts = m.at_micro_batch(1).activations_for(Wrapper::Fsdp).bytes();
    assert_eq!(
        fsdp2_acts, 14_930_673_664,
        "2048 × (32 × 221,312 + 208,384)"
    );
    assert_eq!(p.fsdp_fits_at, None);
}

#[test]
fn a_model_that_fits_leaves_no_fit_to_find_and_unknown_memory_judges_nothing() {
    let m = MemoryModel::of_spec(&ModelSpec::gpt2_124m(), 8, Amp::Bf16);
    let p = plan(&m, 2, Some(85_520_809_984));
    assert_eq!(p.ddp_fits, Some(true));
    assert!(p.fit.is_none());
    assert!(p.row(Wrapper::Hsdp).is_none(), "HSDP needs 4 GPUs");
    let unknown = plan(&m, 2, None);
    assert_eq!(unknown.ddp_fits, None);
    assert!(unknown.rows.iter().all(|r| r.fits.is_none()));
}

#[test]
fn where_nothing_fits_the_plan_names_the_gpus_fsdp_needs() {
    let m = MemoryModel::of_spec(&llama_8b(), 1, Amp::Bf16);
    let usable = usable_bytes(16_106_127_360);
    let p = plan(&m, 2, Some(16_106_127_360));
    assert!(p.fit.is_none());
    let at = p.fsdp_fits_at.unwrap();
    assert!(
        at.checkpointing,
        "one sequence's 14 GB of activations never fit 14.5 GB"
    );
    let ckpt = m.checkpointed().unwrap();
    assert!(predict(&ckpt, Wrapper::Fsdp, at.row.gpus).total_bytes <= usable);
    assert!(predict(&ckpt, Wrapper::Fsdp, at.row.gpus - 1).total_bytes > usable);
}

#[test]
fn activations_read_from_a_peak_are_what_the_state_leaves_when_backward_starts() {
    let m = MemoryModel::of_spec(&ModelSpec::gpt2_124m(), 8, Amp::Bf16);
    // DDP when backward starts, without activations: 22 B per parameter.
    let state = 22 * m.params;
    assert_eq!(
        activations_from_peak(&m, Wrapper::Ddp, 1, state + 5_000_000_000),
        Some(5_000_000_000)
    );
    // A peak the backward's end explains (16 B per parameter and the unidentified 4 B) says
    // nothing of the activations.
    assert_eq!(activations_from_peak(&m, Wrapper::Ddp, 1, state - 1), None);
    // FSDP2's state when backward starts: 12 B and the gathered bf16 copy, no gradients.
    let fsdp = 14 * m.params;
    assert_eq!(
        activations_from_peak(&m, Wrapper::Replicate, 1, fsdp + 5_000_000_000),
        Some(5_000_000_000)
    );
}

#[test]
fn peaks_are_checked_before_launch_and_against_activations_another_launch_measured() {
    use super::check::{check_peaks, MeasuredPeak};
    let m = MemoryModel {
        params: 100_000_000,
        trainable: 100_000_000,
        largest_block: 10_000_000,
        root: 0,
        amp: Amp::Bf16,
        micro_batch: 1,
        activations: ActivationSource::Estimated {
            bytes: 1_000_000_000,
            how: "test".into(),
        },
        checkpointed_bytes: None,
        fsdp2_activations: None,
        fsdp2_checkpointed_bytes: None,
        measured: Vec::new(),
        backward_start_per_sample: 0,
    };
    // DDP: 22 B × 100M = 2.2 GB and 1 GB of activations against a peak of 3.0 GB.
    let runs = [
        MeasuredPeak {
            variant: "base".into(),
            wrapper: Wrapper::Ddp,
            gpus: 1,
            peak_bytes: 3_000_000_000,
        },
        MeasuredPeak {
            variant: "fsdp".into(),
            wrapper: Wrapper::Fsdp,
            gpus: 1,
            peak_bytes: 2_900_000_000,
        },
    ];
    let checks = check_peaks(&m, None, &runs);
    assert_eq!(checks[0].predicted_bytes, 3_200_000_000);
    assert!((checks[0].error - (3.2 / 3.0 - 1.0)).abs() < 1e-12);
    assert_eq!(checks[0].from_measured_bytes, None, "nothing measured");
    // fully_shard's activations measured elsewhere: 1.5 GB on 12 B × 100M and one block's
    // gathered bf16 copy (20 MB): 2.72 GB. DDP's are not measured, so its check has none.
    let measured = m.with_activations(
        Wrapper::Fsdp,
        ActivationSource::Measured {
            bytes: 1_500_000_000,
            what: "a slice".into(),
        },
    );
    let checks = check_peaks(&m, Some(&measured), &runs);
    assert_eq!(checks[0].from_measured_bytes, None);
    assert_eq!(checks[1].from_measured_bytes, Some(2_720_000_000));
}

#[test]
fn an_hf_llama_source_is_counted_as_the_decoder_it_builds() {
    // The 6.7B: LLaMA-7B's shape, untied head (LlamaConfig's default): 6,738,415,616.
    let spec: ModelSpec = "hf:llama,hidden_size=4096,intermediate_size=11008,num_hidden_layers=32,num_attention_heads=32,num_key_value_heads=32"
        .parse()
        .unwrap();
    let m = MemoryModel::of_spec(&spec, 1, Amp::Bf16);
    assert_eq!(m.params, 6_738_415_616);
    let p = plan(&m, 1, Some(85_520_809_984));
    assert_eq!(
        p.ddp_fits,
        Some(false),
        "22 B × 6.74B = 148 GB on an 80 GB GPU"
    );
    // A model type ddpcheck does not count stays unknown.
    let other: ModelSpec = "hf:gpt_neox".parse().unwrap();
    assert_eq!(
        MemoryModel::of_spec(&other, 1, Amp::Bf16).params,
        other.params()
    );
}

#[test]
fn slices_of_a_decoder_extrapolate_their_wrappers_activations() {
    use super::slices::{fit_slices, SlicePeak};
    let spec = llama_8b();
    let d = spec.decoder().unwrap();
    // DDP slices of 2 and 4 layers whose peaks hold 1.0 GB + 0.5 GB per layer of activations
    // above their state when backward starts (22 B per parameter).
    let slice = |layers: u32| {
        let s = ModelSpec::Decoder(crate::ddp::Decoder {
            layers,
            ..d.clone()
        });
        SlicePeak {
            params: s.params(),
            wrapper: Wrapper::Ddp,
            peak_bytes: 22 * s.params() + 1_000_000_000 + u64::from(layers) * 500_000_000,
        }
    };
    let fit = fit_slices(d, 1, Amp::Bf16, Wrapper::Ddp, &[slice(2), slice(4)]).unwrap();
    assert_eq!(fit.points, vec![(2, 2_000_000_000), (4, 3_000_000_000)]);
    assert!((fit.per_layer_bytes - 5e8).abs() < 1e-3 && (fit.fixed_bytes - 1e9).abs() < 1e-3);
    assert_eq!(fit.extrapolated_bytes, 17_000_000_000, "1 GB + 32 × 0.5 GB");
    // One slice alone is scaled along the count's split between the blocks and the rest.
    let one = fit_slices(d, 1, Amp::Bf16, Wrapper::Ddp, &[slice(2)]).unwrap();
    let ratio = one.extrapolated_bytes.to_f64() / 2e9;
    let (full, _) = decoder_activation_bytes(d, 1, Dtypes::of(Wrapper::Ddp, Amp::Bf16));
    let (two, _) = decoder_activation_bytes(
        &crate::ddp::Decoder {
            layers: 2,
            ..d.clone()
        },
        1,
        Dtypes::of(Wrapper::Ddp, Amp::Bf16),
    );
    assert!((ratio - full.to_f64() / two.to_f64()).abs() < 1e-6);
    // Another wrapper's slices are not DDP's; a report of another model is no slice.
    assert!(fit_slices(d, 1, Amp::Bf16, Wrapper::Fsdp, &[slice(2), slice(4)]).is_none());
    let other = SlicePeak {
        params: 123,
        wrapper: Wrapper::Ddp,
        peak_bytes: 1,
    };
    assert!(fit_slices(d, 1, Amp::Bf16, Wrapper::Ddp, &[other]).is_none());
}

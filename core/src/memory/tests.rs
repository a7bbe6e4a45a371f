//! The memory arithmetic against figures computed by hand.

use super::*;
use crate::ddp::ModelSpec;

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
fn ddp_keeps_16_bytes_of_state_and_a_bf16_copy_per_parameter() {
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
    };
    let ddp = predict(&m, Wrapper::Ddp, 8);
    assert_eq!(
        (ddp.params_bytes, ddp.grads_bytes, ddp.optimizer_bytes),
        (4_000_000_000, 4_000_000_000, 8_000_000_000)
    );
    assert_eq!(ddp.compute_bytes, 2_000_000_000);
    assert_eq!(ddp.total_bytes, 23_000_000_000);
    // fully_shard at 8: 16 B / 8 = 2 B of state; two blocks and the root gathered in bf16, one
    // block's bf16 gradient and its fp32 copy: 2·(2·10M + 100M) + 6·10M = 300 MB.
    let fsdp = predict(&m, Wrapper::Fsdp, 8);
    assert_eq!(
        fsdp.params_bytes + fsdp.grads_bytes + fsdp.optimizer_bytes,
        2_000_000_000
    );
    assert_eq!(fsdp.compute_bytes, 300_000_000);
    assert_eq!(fsdp.total_bytes, 7_300_000_000);
    // Without resharding every parameter stays gathered: 2 B each, plus the block's gradient.
    let noreshard = predict(&m, Wrapper::FsdpNoReshard, 8);
    assert_eq!(noreshard.compute_bytes, 2_060_000_000);
    // HSDP at 8 shards over 4: 4 B of state per parameter.
    let hsdp = predict(&m, Wrapper::Hsdp, 8);
    assert_eq!(hsdp.shard_group, 4);
    assert_eq!(
        hsdp.params_bytes + hsdp.grads_bytes + hsdp.optimizer_bytes,
        4_000_000_000
    );
    // Full precision: DDP computes on its fp32 weights, no copy.
    let fp32 = MemoryModel {
        amp: Amp::None,
        ..m.clone()
    };
    assert_eq!(predict(&fp32, Wrapper::Ddp, 8).compute_bytes, 0);
    assert_eq!(
        predict(&fp32, Wrapper::Fsdp, 8).compute_bytes,
        4 * 120_000_000 + 8 * 10_000_000
    );
}

#[test]
fn korthikanti_per_layer_bytes_match_the_paper_formula() {
    // s=2048, b=1, h=4096, a=32: 2048·4096·(34 + 5·32·2048/4096) = 8,388,608 · 114.
    assert_eq!(
        korthikanti_layer_bytes(2048, 1, 4096, 32, false),
        8_388_608.0 * 114.0
    );
    // Fused attention stores no scores: 34 per element of s·b·h.
    assert_eq!(
        korthikanti_layer_bytes(2048, 1, 4096, 32, true),
        8_388_608.0 * 34.0
    );
}

#[test]
fn the_8b_decoders_activations_are_the_stated_sum() {
    // Per layer 34·s·b·h = 285,212,672, the gated MLP's 2h + 8f - 19h = 61,440 per token
    // (125,829,120); 32 layers, the embedding's output 2·2048·4096 and the logits 10·2048·32000.
    let d = llama_8b();
    let (bytes, how) = decoder_activation_bytes(d.decoder().unwrap(), 1, Amp::Bf16);
    let layer = 285_212_672u64 + 125_829_120;
    assert_eq!(bytes, 32 * layer + 16_777_216 + 655_360_000);
    assert!(how.contains("Korthikanti et al. 2022"), "{how}");
    let (two, _) = decoder_activation_bytes(d.decoder().unwrap(), 2, Amp::Bf16);
    assert_eq!(two, 2 * bytes, "linear in the micro-batch");
}

#[test]
fn on_4x48gb_ddp_does_not_fit_the_8b_decoder_and_fsdp_with_checkpointing_does() {
    let gpu = 51_527_024_640; // an RTX A6000 as NVML reports it
    let m = MemoryModel::of_spec(&llama_8b(), 8, Amp::Bf16);
    let p = plan(&m, 4, Some(gpu));
    assert_eq!(p.ddp_fits, Some(false));
    let ddp = p.row(Wrapper::Ddp).unwrap();
    // 18 B per parameter (157.0 GB) and 8 sequences' activations (110.6 GB).
    assert_eq!(ddp.total_bytes, 18 * m.params + 110_603_796_480);
    // 4 GPUs: fully_shard's state is 4 B per parameter (34.9 GB), but 8 sequences of 2048 tokens
    // keep 110 GB of activations and even one keeps 13.8 GB (51.7 GB in all): only checkpointing
    // every block fits, at 5 sequences (45.9 GB of the 46.4 GB usable; 6 would take 47.5 GB).
    let fit = p.fit.as_ref().unwrap();
    assert_eq!(fit.row.wrapper, Wrapper::Fsdp);
    assert!(fit.checkpointing);
    assert_eq!(fit.micro_batch, 5);
    assert_eq!(fit.row.total_bytes, 45_931_929_600);
    let six = m.at_micro_batch(6).checkpointed().unwrap();
    assert!(predict(&six, Wrapper::Fsdp, 4).total_bytes > usable_bytes(gpu));
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
    // 8.7B at micro-batch 1 on 16 GB GPUs (14.50 GB usable): one sequence's 13.8 GB of
    // activations and 2.9 GB of gathered parameters never fit; checkpointed (1.62 GB), 9.93 GB
    // are left for the state's 139.54 GB, which fits from N = 15 (9.30 GB; at 14, 9.97 GB).
    let m = MemoryModel::of_spec(&llama_8b(), 1, Amp::Bf16);
    let usable = usable_bytes(16_106_127_360);
    let p = plan(&m, 2, Some(16_106_127_360));
    assert!(p.fit.is_none());
    let at = p.fsdp_fits_at.unwrap();
    assert!(at.checkpointing);
    assert_eq!(at.row.gpus, 15);
    let ckpt = m.checkpointed().unwrap();
    assert!(predict(&ckpt, Wrapper::Fsdp, 15).total_bytes <= usable);
    assert!(predict(&ckpt, Wrapper::Fsdp, 14).total_bytes > usable);
}

#[test]
fn activations_read_from_a_peak_are_what_the_state_leaves() {
    let m = MemoryModel::of_spec(&ModelSpec::gpt2_124m(), 8, Amp::Bf16);
    let state = predict(
        &MemoryModel {
            activations: ActivationSource::Unknown,
            ..m.clone()
        },
        Wrapper::Ddp,
        1,
    )
    .total_bytes;
    assert_eq!(state, 18 * m.params);
    assert_eq!(
        activations_from_peak(&m, Wrapper::Ddp, 1, state + 123),
        Some(123)
    );
    assert_eq!(activations_from_peak(&m, Wrapper::Ddp, 1, state - 1), None);
}

#[test]
fn peaks_are_checked_against_the_estimate_and_against_the_ddp_runs_measured_activations() {
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
    };
    // DDP's state: 18 B × 100M = 1.8 GB; its peak 3.0 GB leaves 1.2 GB of activations.
    // fully_shard at 1 GPU: 16 B × 100M + 2·(2·10M) + 6·10M = 1.7 GB of state; with the measured
    // 1.2 GB, 2.9 GB against its peak of 2.9 GB.
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
    let checks = check_peaks(&m, &runs);
    assert_eq!(checks[0].predicted_bytes, 2_800_000_000);
    assert!((checks[0].error - (2.8 / 3.0 - 1.0)).abs() < 1e-12);
    assert_eq!(
        checks[0].from_measured_bytes, None,
        "the reference checks nothing"
    );
    assert_eq!(checks[1].from_measured_bytes, Some(2_900_000_000));
    assert_eq!(checks[1].from_measured_error, Some(0.0));
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
        "18 B × 6.74B = 121 GB on an 80 GB GPU"
    );
    // A model type ddpcheck does not count stays unknown.
    let other: ModelSpec = "hf:gpt_neox".parse().unwrap();
    assert_eq!(
        MemoryModel::of_spec(&other, 1, Amp::Bf16).params,
        other.params()
    );
}

#[test]
fn slices_of_a_decoder_extrapolate_its_activations_along_a_line() {
    use super::slices::{fit_slices, SlicePeak};
    let spec = llama_8b();
    let d = spec.decoder().unwrap();
    // Slices of 2 and 4 layers whose peaks hold 1.0 GB + 0.5 GB per layer of activations above
    // their predicted state (18 B per parameter under DDP, bf16).
    let slice = |layers: u32| {
        let s = ModelSpec::Decoder(crate::ddp::Decoder {
            layers,
            ..d.clone()
        });
        let state = 18 * s.params();
        SlicePeak {
            params: s.params(),
            peak_bytes: state + 1_000_000_000 + u64::from(layers) * 500_000_000,
        }
    };
    let fit = fit_slices(d, 1, Amp::Bf16, &[slice(2), slice(4)]).unwrap();
    assert_eq!(fit.points, vec![(2, 2_000_000_000), (4, 3_000_000_000)]);
    assert!((fit.per_layer_bytes - 5e8).abs() < 1e-3 && (fit.fixed_bytes - 1e9).abs() < 1e-3);
    assert_eq!(fit.extrapolated_bytes, 17_000_000_000, "1 GB + 32 × 0.5 GB");
    // One depth is no line; a report of another model is no slice.
    assert!(fit_slices(d, 1, Amp::Bf16, &[slice(2), slice(2)]).is_none());
    let other = SlicePeak {
        params: 123,
        peak_bytes: 1,
    };
    assert!(fit_slices(d, 1, Amp::Bf16, &[slice(2), other]).is_none());
}

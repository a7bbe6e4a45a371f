//! Memory first: recommend offers nothing that does not fit, and where DDP does not fit one GPU
//! it answers with the least sharding that does.

use super::tests::a6000_input;
use super::*;
use crate::ddp::Wrapper;

/// The seed A6000 node (4 × 48 GiB) asked about `decoder:32,4096,32,2048,32000,llama` (8.7B
/// parameters) at micro-batch 8.
fn eight_b_on_a6000() -> RecommendInput {
    RecommendInput {
        model: ModelInput::Spec {
            spec: "decoder:32,4096,32,2048,32000,llama".parse().unwrap(),
        },
        ..a6000_input()
    }
}

#[test]
fn an_8b_decoder_on_4x48gb_gets_fully_shard_not_ddp() {
    let r = recommend(&eight_b_on_a6000()).unwrap();
    assert_eq!(r.chosen, "fsdp", "{}", r.summary);
    assert!(r.rows.is_empty(), "no DDP variant is offered");
    assert!(r.summary.starts_with("DDP does not fit"), "{}", r.summary);
    let plan = r.memory.as_ref().unwrap();
    assert_eq!(plan.ddp_fits, Some(false));
    let fit = plan.fit.as_ref().unwrap();
    assert_eq!((fit.row.wrapper, fit.row.gpus), (Wrapper::Fsdp, 4));
    // 8 sequences fit as 8 accumulation steps of 1 (one sequence keeps 14.9 GB of activations
    // under FSDP2's bf16 parameters, two do not fit), no block checkpointed.
    assert_eq!((r.micro_batch, r.chosen_accum), (1, 8));
    assert!(
        !r.summary.contains("with every block checkpointed"),
        "{}",
        r.summary
    );
    assert!(r
        .python
        .contains("fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=True)"));
    assert!(!r.python.contains("checkpoint_wrapper(block)"));
    assert!(r
        .python
        .contains("set_requires_gradient_sync(k == ACCUM - 1)"));
    assert!(
        r.reasons[0].rests_on.contains("saves for backward"),
        "{}",
        r.reasons[0].rests_on
    );
    // What it offers fits: the row at the kept batch is within 90% of 48 GiB.
    assert!(r.reasons[1].text.starts_with("fsdp at 4 GPUs keeps"));
}

#[test]
fn a_model_that_fits_keeps_its_ddp_answer_with_the_memory_table_beside_it() {
    let r = recommend(&a6000_input()).unwrap();
    assert_ne!(r.chosen, "fsdp");
    assert!(!r.rows.is_empty());
    let plan = r.memory.unwrap();
    assert_eq!(plan.ddp_fits, Some(true));
    assert!(plan.fit.is_none());
    assert_eq!(plan.rows.first().unwrap().wrapper, Wrapper::Ddp);
}

#[test]
fn where_nothing_fits_the_job_gpus_the_answer_names_how_many_fully_shard_needs() {
    let mut input = eight_b_on_a6000();
    input.gpus = 2;
    input.gpu_memory_bytes = Some(16 << 30);
    let r = recommend(&input).unwrap();
    assert_eq!(r.chosen, "fsdp");
    assert!(r.gpus > 2, "{}", r.summary);
    assert!(
        r.summary
            .contains(&format!("from {} GPUs (not at 2)", r.gpus)),
        "{}",
        r.summary
    );
    // One sequence's 14.9 GB of activations never fit 14.5 GB: every block checkpointed.
    assert!(
        r.python.contains("checkpoint_wrapper(block)"),
        "{}",
        r.python
    );
}

#[test]
fn keeping_the_batch_takes_as_few_accumulation_steps_as_reach_it() {
    assert_eq!(keep_batch(8, 5), (4, 2));
    assert_eq!(keep_batch(8, 8), (8, 1));
    assert_eq!(keep_batch(8, 3), (3, 3));
    assert_eq!(keep_batch(8, 1), (1, 8));
    assert_eq!(keep_batch(7, 4), (4, 2));
}

#[test]
fn a_measured_one_gpu_peak_gives_the_plan_its_activations() {
    use crate::memory::check::MeasuredPeak;
    use crate::memory::ActivationSource;
    let mut input = a6000_input();
    // gpt2-124m: 124,439,808 parameters, 22 B each under DDP with bf16 autocast when backward
    // starts = 2.74 GB; a peak of 6 GB leaves 3.26 GB of activations.
    input.memory_peak = Some(MeasuredPeak {
        variant: "base".into(),
        wrapper: Wrapper::Ddp,
        gpus: 1,
        peak_bytes: 6_000_000_000,
    });
    let plan = recommend(&input).unwrap().memory.unwrap();
    let ActivationSource::Measured { bytes, what } = &plan.model.activations else {
        panic!("{:?}", plan.model.activations);
    };
    assert_eq!(*bytes, 6_000_000_000 - 22 * 124_439_808);
    assert!(what.contains("the 1-GPU run of base"), "{what}");
    assert_eq!(plan.row(Wrapper::Ddp).unwrap().total_bytes, 6_000_000_000);
}

#[test]
fn a_wrappers_own_phases_overrule_its_estimate_and_no_other_wrappers() {
    use crate::memory::phases::MemoryPhases;
    use crate::memory::{ActivationSource, PhaseRun};
    let mut input = a6000_input();
    let mb = input.micro_batch;
    // replicate's 1-GPU step at half the micro-batch kept 30 GB for backward: scaled to the
    // requested micro-batch, more than a 48 GiB GPU holds.
    input.memory_phases = vec![PhaseRun {
        variant: "replicate".into(),
        wrapper: Wrapper::Replicate,
        micro_batch: mb / 2,
        phases: MemoryPhases {
            before_forward: 2_000_000_000,
            after_forward: 32_000_000_000,
            ..MemoryPhases::default()
        },
    }];
    let plan = recommend(&input).unwrap().memory.unwrap();
    let ActivationSource::Measured { bytes, what } = plan.model.activations_for(Wrapper::Replicate)
    else {
        panic!("{:?}", plan.model.measured);
    };
    assert!(*bytes > 2 * 29_000_000_000, "{bytes}");
    assert!(what.contains("scaled linearly"), "{what}");
    assert_eq!(plan.row(Wrapper::Replicate).unwrap().fits, Some(false));
    // DDP and fsdp-noreshard keep their estimates: a measurement is never carried over.
    for w in [Wrapper::Ddp, Wrapper::FsdpNoReshard] {
        assert!(matches!(
            plan.model.activations_for(w),
            ActivationSource::Estimated { .. }
        ));
        assert_eq!(plan.row(w).unwrap().fits, Some(true));
    }
}

//! Builders of core's types that the tests of several crates share: a quick DDP request, the
//! seed-000 recommendation input (as published, with its P2P level forced, under an unreliable
//! model), a healthy GPU, a two-GPU topology and a two-size all-reduce sweep.
//!
//! Compiled for core's own tests and, with the `testkit` feature, for the `ddpcheck-testkit`
//! crate, which the other crates' tests reach them through; never in a release build.
#![allow(clippy::unwrap_used)] // builders of fixed, valid test data

use std::collections::BTreeMap;

use crate::collective::{Collective, Sample, Sweep, Timing};
use crate::ddp::{DdpRequest, ModelSpec, Reference};
use crate::node_gpus::{GpuHealth, GpuInfo, ProbeState};
use crate::num::ToF64;
use crate::recommend::{
    recommend, ComputeSource, CurveProvenance, EnvAb, MeasuredSpeedup, ModelInput, RecommendInput,
};
use crate::step_time::LinkCurve;
use crate::topology::{GpuRef, LinkClass, TopologyMatrix};

/// A request a test runs quickly: the named models and variants at these world sizes, micro-batch
/// 8, one warm-up and two timed steps, a 60 s deadline, one launch, the default recipe on CUDA,
/// no price, no extra environment and no plain reference. Tests change the fields they are about.
pub fn ddp_request(models: &[&str], variants: &[&str], worlds: &[u32]) -> DdpRequest {
    DdpRequest {
        models: models.iter().map(|m| m.parse().unwrap()).collect(),
        variants: variants.iter().map(|v| v.parse().unwrap()).collect(),
        world_sizes: worlds.to_vec(),
        micro_batch: 8,
        warmup_steps: 1,
        steps: 2,
        min_timed_s: 0.0,
        price_per_gpu_hour: None,
        env: Vec::new(),
        deadline_s: 60.0,
        repeats: 1,
        recipe: Default::default(),
        device: Default::default(),
        reference: crate::ddp::Reference::Ddp,
    }
}

/// The seed-000 machine: 4× A6000, PHB, flat 4.3 GB/s, $2.64/h, 130 ms per micro-batch.
pub fn a6000_input() -> RecommendInput {
    RecommendInput {
        model: ModelInput::Spec {
            spec: ModelSpec::gpt2_124m(),
        },
        micro_batch: 8,
        seq: 1024,
        tokens_per_sample: None,
        gpus: 4,
        node_gpus: 4,
        price_per_hour: Some(2.64),
        target_efficiency: 0.85,
        curve: LinkCurve::flat(4, 4.3, 0.0).unwrap(),
        curve_provenance: CurveProvenance {
            host: "runcrate-a6000x4".into(),
            time: "2026-10-26T09:00:00Z".into(),
            backend: None,
            label: "seed 000".into(),
            method: String::new(),
        },
        worst_link: Some(LinkClass::Phb),
        nccl_env: BTreeMap::new(),
        env_ab: Vec::new(),
        p2p: None,
        compute: ComputeSource::Given {
            seconds: 0.130,
            detail: "seed 000".into(),
        },
        calibration: None,
        bucket_cap_mb: None,
        gpu_memory_bytes: Some(48 << 30),
        memory_peak: None,
        memory_phases: Vec::new(),
        optimizer_s: None,
        hook_compute_s: None,
        hook_rests_on: None,
        powersgd_compute: Vec::new(),
        side_by_side: None,
        measured: Vec::new(),
        other_curve: None,
        baseline: None,
        param_layout: None,
        recipe: Default::default(),
        ddp_own_work: None,
        reference: Reference::Plain,
        host: None,
        other_recipe: None,
        device: Default::default(),
    }
}

/// The seed-000 machine as its users ran it: `NCCL_P2P_LEVEL=SYS` set, and its A/B run measured
/// (2.3 of 4.3 GB/s with it).
pub fn a6000_p2p_level_sys() -> RecommendInput {
    let mut input = a6000_input();
    input.nccl_env.insert("NCCL_P2P_LEVEL".into(), "SYS".into());
    input.env_ab.push(EnvAb {
        label: "NCCL_P2P_LEVEL=SYS".into(),
        busbw_ratio: 2.3 / 4.3,
    });
    input
}

/// The seed-000 input with plain DDP measured at half its prediction: the model misses it, so
/// its predictions for the node are unreliable.
pub fn a6000_unreliable() -> RecommendInput {
    base_measured_at(a6000_input(), 0.5)
}

/// The seed-000 input on a fast link (plain DDP reaches the target and is chosen), plain DDP
/// measured 5% below its prediction: within the model's tolerance, so the model stands.
pub fn a6000_fast_base_measured() -> RecommendInput {
    let mut input = a6000_input();
    input.curve = LinkCurve::flat(4, 400.0, 20e-6).unwrap();
    assert_eq!(recommend(&input).unwrap().chosen, "base");
    base_measured_at(input, 0.95)
}

/// `input` with plain DDP's speedup measured at `fraction` of what the model predicts for it, as
/// the node's only measured speedup.
pub fn base_measured_at(mut input: RecommendInput, fraction: f64) -> RecommendInput {
    let predicted = recommend(&input).unwrap();
    let base = predicted.rows.iter().find(|r| r.variant == "base").unwrap();
    input.measured = vec![MeasuredSpeedup {
        variant: "base".into(),
        speedup: base.prediction.speedup * fraction,
        uncertainty: None,
        noise_bound: None,
        rests_on: "bench ddp of base (test)".into(),
    }];
    input
}

/// GPU `i` as a healthy probe reports it: on bus `0x18 + i`, no PCIe facts and no processes.
pub fn healthy_gpu(i: u32, uuid: String, name: &str, memory_total_bytes: u64) -> GpuInfo {
    GpuInfo {
        index: i,
        uuid,
        pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + i),
        name: name.into(),
        memory_total_bytes,
        pcie: None,
        health: GpuHealth::default(),
        processes: vec![],
        state: ProbeState::Ok,
    }
}

/// Two GPUs (`GPU-0`, `GPU-1` on buses 00 and 01) joined by `link`, with no P2P, affinity or
/// NUMA facts.
pub fn two_gpus(link: LinkClass) -> TopologyMatrix {
    let g = |i: u32| GpuRef {
        index: i,
        uuid: format!("GPU-{i}"),
        pci_bus_id: format!("00000000:0{i}:00.0"),
    };
    TopologyMatrix {
        gpus: vec![g(0), g(1)],
        links: vec![vec![LinkClass::X, link], vec![link, LinkClass::X]],
        p2p: vec![],
        p2p_status: vec![],
        cpu_affinity: vec![],
        numa_affinity: vec![],
    }
}

/// An all-reduce over 2 ranks at two sizes: 1 MiB at 100 GB/s and 1 GiB at 300 GB/s (bus
/// bandwidth; the factor is 1 at 2 ranks), out of place and in place alike.
pub fn two_size_sweep() -> Sweep {
    let mk = |bytes: u64, bus: f64| {
        let t_us = bytes.to_f64() / (bus * 1e9) * 1e6;
        let t = Timing::from_time(Collective::AllReduce, 2, bytes, t_us, Some(0));
        Sample {
            bytes,
            count: bytes / 4,
            dtype: "float".into(),
            out_of_place: t,
            in_place: Some(t),
        }
    };
    Sweep {
        op: Collective::AllReduce,
        ranks: 2,
        redop: "sum".into(),
        root: -1,
        samples: vec![mk(1 << 20, 100.0), mk(1 << 30, 300.0)],
    }
}

//! The simulated nodes seen from outside: parsing, core's preflight verdicts per profile and
//! fault, the collective curves against the profiles' measured facts, and the DDP physics against
//! Runcrate's 4xA6000 field report (seed 000 in the tests' names).

// Test helpers outside #[test] functions unwrap too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use ddpcheck_core::backend::{CollectiveRequest, CollectiveRun};
use ddpcheck_core::cluster::ClusterMember;
use ddpcheck_core::collective::Collective;
use ddpcheck_core::ddp::{DdpRequest, DdpResult, ModelSpec};
use ddpcheck_core::explain::platform::PlatformReader;
use ddpcheck_core::hostcopy::HostCopier;
use ddpcheck_core::preflight::{self, PreflightOptions};
use ddpcheck_core::report::PreflightReport;
use ddpcheck_core::topology::{GpuRef, LinkClass};
use ddpcheck_core::{BackendKind, NodeBackend, ProbeError, Severity, Verdict};
use ddpcheck_sim::{faults, profiles, SimBackend, SimError};

#[path = "sim/cluster.rs"]
mod cluster;

fn sim(spec: &str) -> SimBackend {
    SimBackend::parse(spec).unwrap()
}

fn preflight_with(spec: &str, opts: &PreflightOptions) -> PreflightReport {
    preflight::run(&sim(spec), opts, &mut |_| {}).unwrap()
}

fn preflight(spec: &str) -> PreflightReport {
    preflight_with(spec, &PreflightOptions::default())
}

fn env(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn sweep_req(
    b: &SimBackend,
    ops: &[Collective],
    ranks: usize,
    e: &[(&str, &str)],
) -> CollectiveRequest {
    let inv = b.inventory().unwrap();
    CollectiveRequest {
        ops: ops.to_vec(),
        gpus: inv.gpus.iter().take(ranks).map(|g| g.gpu_ref()).collect(),
        min_bytes: 1 << 10,
        max_bytes: 1 << 30,
        step_factor: 2,
        warmup_iters: 1,
        iters: 5,
        in_place: true,
        check: true,
        env: env(e),
        deadline: Duration::from_secs(30),
        inject_hang: false,
        group: None,
        record_transport: false,
    }
}

fn run(spec: &str, ops: &[Collective], ranks: usize, e: &[(&str, &str)]) -> CollectiveRun {
    let b = sim(spec);
    let req = sweep_req(&b, ops, ranks, e);
    b.collectives(&req, &mut |_| {}).unwrap()
}

/// Out-of-place busbw of `op` at `bytes`.
fn busbw(r: &CollectiveRun, op: Collective, bytes: u64) -> f64 {
    let s = r.sweeps.iter().find(|s| s.op == op).unwrap();
    s.samples
        .iter()
        .find(|x| x.bytes == bytes)
        .unwrap()
        .out_of_place
        .busbw_gbps
}

fn within(measured: f64, expected: f64, tol: f64) -> bool {
    (measured / expected - 1.0).abs() <= tol
}

/// Asserts that `measured` is within `tol` (relative) of `expected`.
fn assert_within(measured: f64, expected: f64, tol: f64) {
    assert!(
        within(measured, expected, tol),
        "{measured} is not within {tol} of {expected}"
    );
}

#[test]
fn every_profile_parses_and_labels_itself() {
    assert_eq!(
        profiles(),
        vec![
            "a6000x4-phb",
            "t4x2-pcie",
            "h200x2-nvlink",
            "h200x8-nvswitch",
            "a6000x2-pxb",
            "rtx4090x4-phb",
            "rtx3090x2-nvlink",
            "rtx5090x2-pcie",
            "h100pcie-nvbridge",
            "a10gx8-vm",
            "h100pcie-x2",
            "l40s-gen4",
            "hgx-h100-slice2"
        ]
    );
    assert_eq!(faults().len(), 20);
    for p in profiles() {
        let b = sim(p);
        assert_eq!(b.kind(), BackendKind::Sim);
        assert_eq!(b.label(), format!("sim:{p}"));
        let inv = b.inventory().unwrap();
        assert_eq!(inv.hostname, format!("sim-{p}"));
        assert!(inv.driver_version.unwrap().contains("(sim)"));
        for g in &inv.gpus {
            assert!(g.uuid.starts_with("GPU-5a1b"), "{}", g.uuid);
            assert_eq!(g.uuid.len(), 40, "{}", g.uuid);
        }
        // Every fault combines with every profile, and the label parses back.
        let all = format!("{p}+{}", faults().join("+"));
        let b = sim(&all);
        assert_eq!(b.label(), format!("sim:{all}"));
        assert_eq!(sim(&b.label()).label(), b.label());
    }
    assert_eq!(
        sim(" H200x2-NVLink + Busy + busy ").label(),
        "sim:h200x2-nvlink+busy"
    );
}

#[test]
fn unknown_names_list_the_valid_ones() {
    let e = SimBackend::parse("a100x8").unwrap_err();
    assert!(matches!(e, SimError::UnknownProfile { .. }));
    let msg = e.to_string();
    for p in profiles() {
        assert!(msg.contains(p), "{msg}");
    }
    let msg = SimBackend::parse("t4x2-pcie+meltdown")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("\"meltdown\""), "{msg}");
    for f in faults() {
        assert!(msg.contains(f), "{msg}");
    }
    let msg = SimBackend::parse("t4x2-pcie+").unwrap_err().to_string();
    assert!(msg.contains("unknown sim fault"), "{msg}");
    let e = SimBackend::parse("  ").unwrap_err();
    assert!(matches!(e, SimError::Empty { .. }));
    assert!(e.to_string().contains("a6000x4-phb"));
}

#[path = "sim/collectives.rs"]
mod collectives;
#[path = "sim/ddp.rs"]
mod ddp;
#[path = "sim/host_copies.rs"]
mod host_copies;
#[path = "sim/platform.rs"]
mod platform;
#[path = "sim/verdicts.rs"]
mod verdicts;

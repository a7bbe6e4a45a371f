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

#[test]
fn healthy_profiles_pass_the_preflight_against_the_reference_table() {
    // The bridged H100 PCIe pair reproduces the one published figure (116 GB/s,
    // NVIDIA/nccl#1161), which the table's NV12 row (A100 SXM, ~230) reads as a warning;
    // cli/tests/field_profiles.rs holds what it is judged.
    for p in profiles().into_iter().filter(|p| *p != "h100pcie-nvbridge") {
        let r = preflight(p);
        assert_eq!(
            r.verdict,
            Verdict::Ok,
            "{p}: {} {:#?}",
            r.reason,
            r.findings
        );
        assert_eq!(r.header.backend, BackendKind::Sim);
        assert_eq!(r.header.backend_label, format!("sim:{p}"));
        // The expected-busbw table of core/src/expect.rs covers the profile and agrees with it.
        let e = r
            .expected
            .as_ref()
            .unwrap_or_else(|| panic!("{p}: no expectation"));
        let ok = r.findings.iter().find(|f| f.code == "busbw_ok");
        assert!(
            ok.is_some(),
            "{p}: expected {} GB/s, findings {:#?}",
            e.busbw_gbps,
            r.findings
        );
        assert!(
            r.findings.iter().all(|f| f.severity == Severity::Info),
            "{p}"
        );
        assert!(r
            .header
            .provenance
            .nccl_version
            .clone()
            .unwrap()
            .ends_with("(sim)"));
    }
}

#[test]
fn degraded_pcie_warns_naming_the_gpu_and_width() {
    let b = sim("h200x2-nvlink");
    let gpu1 = b.inventory().unwrap().gpus[1].uuid.clone();
    let r = preflight("h200x2-nvlink+degraded-pcie");
    assert_eq!(r.verdict, Verdict::Warning, "{}", r.reason);
    assert!(
        r.reason.contains(&gpu1) && r.reason.contains("x8"),
        "{}",
        r.reason
    );
    let f = r
        .findings
        .iter()
        .find(|f| f.code == "pcie_downtrained")
        .unwrap();
    assert!(
        f.message.contains("gen4 x8") && f.message.contains("gen5 x16"),
        "{}",
        f.message
    );
    // NVLink carries the all-reduce: its bandwidth is unchanged.
    let healthy = preflight("h200x2-nvlink").all_reduce.unwrap();
    let degraded = r.all_reduce.unwrap();
    assert_eq!(healthy.peak_busbw(0), degraded.peak_busbw(0));
    // On a PCIe-only node the same fault also slows the ring.
    let r = preflight("a6000x4-phb+degraded-pcie");
    assert_eq!(r.verdict, Verdict::Warning, "{}", r.reason);
    let (_, bw) = r.all_reduce.unwrap().peak_busbw(0).unwrap();
    assert!(bw < 3.5, "{bw}");
}

/// idle-downclock: gen1 at rest, the maximum once a collective ran; degraded-pcie stays below
/// its maximum under load too. Bandwidth and the preflight verdict are unchanged.
#[test]
fn idle_downclock_trains_up_under_load_degraded_pcie_does_not() {
    let b = sim("h200x2-nvlink+idle-downclock");
    let gpus = b.inventory().unwrap().gpus;
    let gen_width = |l: &ddpcheck_core::explain::platform::SysfsLink| {
        (l.current_gts, l.max_gts, l.current_width)
    };
    let rest = b.link_state(&gpus).unwrap();
    assert_eq!(gpus[0].pcie.unwrap().gen_current, 1);
    assert_eq!(gen_width(&rest[0].link), (Some(2.5), Some(32.0), Some(16)));
    b.collectives(
        &sweep_req(&b, &[Collective::AllReduce], 2, &[]),
        &mut |_| {},
    )
    .unwrap();
    let load = b.link_state(&gpus).unwrap();
    assert_eq!(gen_width(&load[0].link), (Some(32.0), Some(32.0), Some(16)));
    assert_eq!(load[1].pci_bus_id, gpus[1].pci_bus_id);

    let d = sim("h200x2-nvlink+degraded-pcie");
    let gpus = d.inventory().unwrap().gpus;
    d.collectives(
        &sweep_req(&d, &[Collective::AllReduce], 2, &[]),
        &mut |_| {},
    )
    .unwrap();
    let load = d.link_state(&gpus).unwrap();
    assert_eq!(gen_width(&load[1].link), (Some(16.0), Some(32.0), Some(8)));

    let r = preflight("a6000x4-phb+idle-downclock");
    assert_eq!(r.verdict, preflight("a6000x4-phb").verdict, "{}", r.reason);
}

#[test]
fn slow_link_is_warning_or_critical_everywhere() {
    for p in profiles() {
        let r = preflight(&format!("{p}+slow-link"));
        assert!(
            matches!(r.verdict, Verdict::Warning | Verdict::Critical),
            "{p}: {}",
            r.reason
        );
        assert!(
            r.findings.iter().any(|f| f.code == "busbw_below_expected"),
            "{p}"
        );
    }
}

#[test]
fn busy_gpu_gives_busy_and_names_the_process() {
    for p in profiles() {
        let r = preflight(&format!("{p}+busy"));
        assert_eq!(r.verdict, Verdict::Busy, "{p}");
        assert!(r.reason.contains("4242"), "{}", r.reason);
        let procs = &r.gpus[0].processes;
        assert_eq!(procs[0].name.as_deref(), Some("python3"));
    }
    // Direct GPU work on the busy GPU is refused, not run.
    let b = sim("t4x2-pcie+busy");
    let req = sweep_req(&b, &[Collective::AllReduce], 2, &[]);
    assert!(matches!(
        b.collectives(&req, &mut |_| {}),
        Err(ProbeError::Busy(_))
    ));
}

#[test]
fn hang_times_out_at_the_deadline() {
    let opts = PreflightOptions {
        deadline: Duration::from_millis(200),
        ..PreflightOptions::default()
    };
    let t0 = Instant::now();
    let r = preflight_with("h200x2-nvlink+hang", &opts);
    let wall = t0.elapsed();
    assert_eq!(r.verdict, Verdict::Timeout, "{}", r.reason);
    assert!(wall >= Duration::from_millis(200), "{wall:?}");
    assert!(wall < Duration::from_secs(5), "{wall:?}");
    // The request's own hang hook behaves the same on a healthy profile.
    let opts = PreflightOptions {
        inject_hang: true,
        ..opts
    };
    assert_eq!(preflight_with("t4x2-pcie", &opts).verdict, Verdict::Timeout);
}

#[test]
fn broken_gpus_are_critical() {
    for p in profiles() {
        for f in ["stuck-nvml", "gpu-lost", "ecc", "wrong-result"] {
            let r = preflight(&format!("{p}+{f}"));
            assert_eq!(r.verdict, Verdict::Critical, "{p}+{f}: {}", r.reason);
        }
    }
    let r = preflight("h200x2-nvlink+wrong-result");
    assert!(r.findings.iter().any(|f| f.code == "allreduce_wrong"));
    let r = preflight("a6000x4-phb+ecc");
    assert!(r.findings.iter().any(|f| f.code == "ecc_uncorrected"));
    assert_eq!(r.gpus[0].health.ecc_uncorrected_volatile, Some(2));
    // A lost GPU cannot run collectives: a GPU failure, not a crash.
    let b = sim("h200x2-nvlink+gpu-lost");
    let req = sweep_req(&b, &[Collective::AllReduce], 2, &[]);
    assert!(matches!(
        b.collectives(&req, &mut |_| {}),
        Err(ProbeError::GpuFailed(_))
    ));
}

#[test]
fn a6000_all_reduce_matches_seed_000() {
    let big = 1 << 30;
    let r4 = run("a6000x4-phb", &[Collective::AllReduce], 4, &[]);
    for bytes in [8 << 20, 64 << 20, big] {
        let bw = busbw(&r4, Collective::AllReduce, bytes);
        assert!(within(bw, 4.3, 0.02), "{bytes}: {bw}");
    }
    let r2 = run("a6000x4-phb", &[Collective::AllReduce], 2, &[]);
    assert!(within(busbw(&r2, Collective::AllReduce, big), 3.9, 0.02));
    let sys = run(
        "a6000x4-phb",
        &[Collective::AllReduce],
        4,
        &[("NCCL_P2P_LEVEL", "SYS")],
    );
    assert!(within(busbw(&sys, Collective::AllReduce, big), 2.3, 0.02));
    assert_eq!(sys.env, env(&[("NCCL_P2P_LEVEL", "SYS")]));
}

#[test]
fn h200_curves_match_the_measured_pair_and_its_regimes() {
    let r = run("h200x2-nvlink", &[Collective::AllReduce], 2, &[]);
    assert!(within(
        busbw(&r, Collective::AllReduce, 8 << 20),
        173.0,
        0.02
    ));
    assert!(within(
        busbw(&r, Collective::AllReduce, 1 << 30),
        327.0,
        0.02
    ));
    assert_eq!(r.nccl_version.as_deref(), Some("2.28.9 (sim)"));
    // busbw rises with size: latency-bound below, bandwidth-bound above.
    let s = &r.sweeps[0];
    assert!(s
        .samples
        .windows(2)
        .all(|w| w[1].out_of_place.busbw_gbps > w[0].out_of_place.busbw_gbps * 0.99));
    assert!(s.samples[0].out_of_place.busbw_gbps < 1.0);
    let shm = run(
        "h200x2-nvlink",
        &[Collective::AllReduce],
        2,
        &[("NCCL_P2P_DISABLE", "1")],
    );
    assert!(within(
        busbw(&shm, Collective::AllReduce, 1 << 30),
        27.0,
        0.02
    ));
    let net = run(
        "h200x2-nvlink",
        &[Collective::AllReduce],
        2,
        &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")],
    );
    assert!(within(
        busbw(&net, Collective::AllReduce, 1 << 30),
        3.9,
        0.02
    ));

    let nvls = run("h200x8-nvswitch", &[Collective::AllReduce], 8, &[]);
    assert!(within(
        busbw(&nvls, Collective::AllReduce, 1 << 30),
        475.0,
        0.02
    ));
    let ring = run(
        "h200x8-nvswitch",
        &[Collective::AllReduce],
        8,
        &[("NCCL_NVLS_ENABLE", "0")],
    );
    assert!(within(
        busbw(&ring, Collective::AllReduce, 1 << 30),
        365.0,
        0.02
    ));
    // Two GPUs of the eight run at the 2-GPU numbers.
    let pair = run("h200x8-nvswitch", &[Collective::AllReduce], 2, &[]);
    assert!(within(
        busbw(&pair, Collective::AllReduce, 1 << 30),
        327.0,
        0.02
    ));
}

#[test]
fn t4_collectives_match_seed_002_and_every_op_has_a_curve() {
    let r = run("t4x2-pcie", &Collective::ALL, 2, &[]);
    assert!(within(
        busbw(&r, Collective::AllReduce, 1 << 30),
        4.05,
        0.02
    ));
    assert!(within(
        busbw(&r, Collective::AllGather, 1 << 30),
        1.73,
        0.02
    ));
    for s in &r.sweeps {
        assert!(s.avg_busbw() > 0.0, "{}", s.op);
        assert_eq!(s.wrong_total(), Some(0));
    }
}

#[test]
fn collectives_are_deterministic_and_report_not_sleep_init() {
    let b = sim("a6000x4-phb");
    let req = sweep_req(&b, &[Collective::AllReduce, Collective::Broadcast], 4, &[]);
    let t0 = Instant::now();
    let one = b.collectives(&req, &mut |_| {}).unwrap();
    assert!(t0.elapsed() < Duration::from_millis(500));
    assert!(one.init_seconds > 0.1);
    assert_eq!(one, b.collectives(&req, &mut |_| {}).unwrap());
    // wrong-result counts wrong elements only where the check runs.
    let w = sim("a6000x4-phb+wrong-result");
    let mut req = sweep_req(&w, &[Collective::AllReduce], 4, &[]);
    assert!(
        w.collectives(&req, &mut |_| {}).unwrap().sweeps[0]
            .wrong_total()
            .unwrap()
            > 0
    );
    req.check = false;
    assert_eq!(
        w.collectives(&req, &mut |_| {}).unwrap().sweeps[0].wrong_total(),
        None
    );
}

#[test]
fn bad_requests_are_usage_errors() {
    let b = sim("h200x2-nvlink");
    let mut req = sweep_req(&b, &[Collective::AllReduce], 2, &[]);
    req.gpus.push(GpuRef {
        index: 7,
        uuid: "GPU-00000000-0000-0000-0000-000000000000".into(),
        pci_bus_id: "00000000:FF:00.0".into(),
    });
    assert!(matches!(
        b.collectives(&req, &mut |_| {}),
        Err(ProbeError::Invalid(_))
    ));
    let mut req = sweep_req(&b, &[Collective::AllReduce], 2, &[]);
    req.min_bytes = req.max_bytes + 1;
    assert!(matches!(
        b.collectives(&req, &mut |_| {}),
        Err(ProbeError::Invalid(_))
    ));
}

#[test]
fn topology_uses_the_profile_classes() {
    for (p, class) in [
        ("a6000x4-phb", LinkClass::Phb),
        ("t4x2-pcie", LinkClass::Phb),
        ("h200x2-nvlink", LinkClass::Nv(18)),
        ("h200x8-nvswitch", LinkClass::Nv(18)),
    ] {
        let b = sim(p);
        let gpus = b.inventory().unwrap().gpus;
        let t = b.topology(&gpus).unwrap();
        t.validate().unwrap();
        assert!(t.pairs().iter().all(|x| x.link == class), "{p}");
        // A subset of the GPUs gives the subset's matrix.
        assert_eq!(b.topology(&gpus[..2]).unwrap().gpus.len(), 2);
    }
}

fn ddp_req(models: &[&str], variants: &[&str], worlds: &[u32], e: &[(&str, &str)]) -> DdpRequest {
    DdpRequest {
        models: models
            .iter()
            .map(|m| m.parse::<ModelSpec>().unwrap())
            .collect(),
        variants: variants.iter().map(|v| v.parse().unwrap()).collect(),
        world_sizes: worlds.to_vec(),
        micro_batch: 8,
        warmup_steps: 10,
        steps: 40,
        min_timed_s: 0.0,
        price_per_gpu_hour: Some(2.64 / 4.0),
        env: env(e),
        deadline_s: 60.0,
        repeats: 1,
        recipe: Default::default(),
        device: Default::default(),
        plain_reference: false,
    }
}

fn row<'a>(rows: &'a [DdpResult], variant: &str, world: u32) -> &'a DdpResult {
    rows.iter()
        .find(|r| r.variant == variant && r.world_size == world)
        .unwrap()
}

/// Seed 000 measured: plain DDP ≈255 ms per step at 4 GPUs (129k tokens/s, 2.04x against the
/// 130 ms 1-GPU step); bf16+accum4 at 88% efficiency (3.52x); NCCL_P2P_LEVEL=SYS 80k tokens/s.
/// The PCIe overlap rate was calibrated once on the first number, so that check is a
/// consistency check (±10%); the other two are predictions of the physics (±10%).
#[test]
fn ddp_on_a6000_reproduces_seed_000() {
    let b = sim("a6000x4-phb");
    let rows = b
        .ddp(
            &ddp_req(&["gpt2-124m"], &["base", "bf16+accum4"], &[1, 2, 4], &[]),
            &mut |_| {},
        )
        .unwrap();
    assert_eq!(rows.len(), 6);
    let one = row(&rows, "base", 1);
    assert!(
        within(one.step_time_median_s, 0.130, 0.01),
        "{}",
        one.step_time_median_s
    );
    let base4 = row(&rows, "base", 4);
    assert!(
        within(base4.speedup.unwrap(), 2.04, 0.10),
        "{:?}",
        base4.speedup
    );
    let both1 = row(&rows, "bf16+accum4", 1);
    assert!(
        within(both1.throughput, 66_189.0, 0.01),
        "{}",
        both1.throughput
    );
    let both4 = row(&rows, "bf16+accum4", 4);
    assert!(
        within(both4.speedup.unwrap(), 3.52, 0.10),
        "{:?}",
        both4.speedup
    );
    // Per token, one GPU still wins (seed 000, surprise 4).
    assert!(both4.cost_per_million.unwrap() > both1.cost_per_million.unwrap());
    assert!(base4.exposed_comm_fraction.unwrap() > both4.exposed_comm_fraction.unwrap());

    let sys = b
        .ddp(
            &ddp_req(
                &["gpt2-124m"],
                &["base"],
                &[4],
                &[("NCCL_P2P_LEVEL", "SYS")],
            ),
            &mut |_| {},
        )
        .unwrap();
    assert!(
        within(sys[0].throughput, 80_000.0, 0.10),
        "{}",
        sys[0].throughput
    );
}

#[test]
fn ddp_h200_is_faster_and_scales_on_nvlink() {
    let req = ddp_req(&["gpt2-124m"], &["base"], &[1, 2], &[]);
    let a = sim("a6000x4-phb").ddp(&req, &mut |_| {}).unwrap();
    let h = sim("h200x2-nvlink").ddp(&req, &mut |_| {}).unwrap();
    let ratio = row(&h, "base", 1).throughput / row(&a, "base", 1).throughput;
    assert!((5.0..=6.0).contains(&ratio), "{ratio}");
    assert!(row(&h, "base", 2).efficiency.unwrap() > 0.9);
    // The host-network regime brings the seeds' slow-link world to the H200 pair.
    let slow = ddp_req(
        &["gpt2-124m"],
        &["base"],
        &[1, 2],
        &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")],
    );
    let h = sim("h200x2-nvlink").ddp(&slow, &mut |_| {}).unwrap();
    assert!(row(&h, "base", 2).speedup.unwrap() < 1.0);
}

#[test]
fn ddp_faults_and_bad_requests() {
    let req = ddp_req(&["mlp:1024"], &["base"], &[1, 2], &[]);
    assert!(matches!(
        sim("t4x2-pcie+busy").ddp(&req, &mut |_| {}),
        Err(ProbeError::Busy(_))
    ));
    let mut short = req.clone();
    short.deadline_s = 0.1;
    assert!(matches!(
        sim("t4x2-pcie+hang").ddp(&short, &mut |_| {}),
        Err(ProbeError::Timeout { .. })
    ));
    let mut wide = req.clone();
    wide.world_sizes = vec![4];
    assert!(matches!(
        sim("t4x2-pcie").ddp(&wide, &mut |_| {}),
        Err(ProbeError::Invalid(_))
    ));
    let mut nan = req.clone();
    nan.deadline_s = f64::NAN;
    assert!(matches!(
        sim("t4x2-pcie").ddp(&nan, &mut |_| {}),
        Err(ProbeError::Invalid(_))
    ));
    // slow-link slows DDP through the same all-reduce curve.
    let ok = sim("t4x2-pcie").ddp(&req, &mut |_| {}).unwrap();
    let slow = sim("t4x2-pcie+slow-link").ddp(&req, &mut |_| {}).unwrap();
    assert!(row(&slow, "base", 2).step_time_median_s > row(&ok, "base", 2).step_time_median_s);
    assert_eq!(row(&ok, "base", 2).throughput_unit, "samples/s");
}

/// Every GPU's own link: a healthy H200 copies at about 55 GB/s each way; degraded-pcie's GPU,
/// alone on a one-GPU check, gets a bandwidth verdict of its own (WARNING, both bounds broken).
#[test]
fn host_copies_judge_each_gpus_own_link() {
    let one = |spec: &str, gpu: &str| {
        let opts = PreflightOptions {
            gpu_filter: gpu.into(),
            ..PreflightOptions::default()
        };
        preflight_with(spec, &opts)
    };
    let r = one("h200x2-nvlink", "1");
    assert_eq!(r.verdict, Verdict::Ok, "{}", r.reason);
    let copies = r.host_copies.as_ref().unwrap();
    assert_eq!(copies.gpus.len(), 1);
    for d in ddpcheck_core::hostcopy::CopyDirection::BOTH {
        let best = copies.gpus[0].best(d).unwrap();
        assert_eq!(best.bytes, 256 << 20);
        assert!(within(best.gbps, 54.8, 0.02), "{d:?}: {}", best.gbps);
    }
    assert!(
        r.reason
            .contains("single GPU healthy: copies host-to-device 54."),
        "{}",
        r.reason
    );
    let step = r.steps.iter().find(|s| s.name == "host_copies").unwrap();
    assert_eq!(step.status, ddpcheck_core::report::StepStatus::Ok);

    let r = one("h200x2-nvlink+degraded-pcie", "1");
    assert_eq!(r.verdict, Verdict::Warning, "{}", r.reason);
    let codes: Vec<&str> = r.findings.iter().map(|f| f.code.as_str()).collect();
    for want in ["host_copy_below_capacity", "host_copy_below_reference"] {
        assert_eq!(
            codes.iter().filter(|c| **c == want).count(),
            2,
            "{want}: {codes:?}"
        );
    }
    // gen4 x8 under load: 15.75 GB/s × 0.87.
    let best = r.host_copies.as_ref().unwrap().gpus[0]
        .best(ddpcheck_core::hostcopy::CopyDirection::HostToDevice)
        .unwrap()
        .gbps;
    assert!(within(best, 13.7, 0.02), "{best}");
    // The link read from NVML stays the reason; the copies measure what it costs.
    assert!(
        r.reason.contains("PCIe link runs at gen4 x8"),
        "{}",
        r.reason
    );
    let f = r
        .findings
        .iter()
        .find(|f| f.code == "host_copy_below_capacity")
        .unwrap();
    assert!(
        f.message.contains("NVML reads gen4 x8 now"),
        "{}",
        f.message
    );
    // The healthy GPU of the same node is not flagged.
    let r = one("h200x2-nvlink+degraded-pcie", "0");
    assert!(
        !r.findings
            .iter()
            .any(|f| f.code.starts_with("host_copy_below")),
        "{:#?}",
        r.findings
    );

    // Turned off: the step is skipped and nothing is measured.
    let opts = PreflightOptions {
        host_copies: false,
        ..PreflightOptions::default()
    };
    let r = preflight_with("h200x2-nvlink+degraded-pcie", &opts);
    assert!(r.host_copies.is_none());
    let step = r.steps.iter().find(|s| s.name == "host_copies").unwrap();
    assert_eq!(step.status, ddpcheck_core::report::StepStatus::Skipped);
    // A busy GPU: no copies start either.
    let r = preflight("h200x2-nvlink+busy");
    assert!(r.host_copies.is_none());
}

/// A simulated node whose host copies fail as given: the preflight's handling of each failure.
struct CopiesFail(SimBackend, ProbeError);

impl NodeBackend for CopiesFail {
    fn kind(&self) -> BackendKind {
        self.0.kind()
    }
    fn label(&self) -> String {
        self.0.label()
    }
    fn inventory(&self) -> Result<ddpcheck_core::node_gpus::NodeInventory, ProbeError> {
        self.0.inventory()
    }
    fn topology(
        &self,
        gpus: &[ddpcheck_core::node_gpus::GpuInfo],
    ) -> Result<ddpcheck_core::topology::TopologyMatrix, ProbeError> {
        self.0.topology(gpus)
    }
    fn collectives(
        &self,
        req: &CollectiveRequest,
        progress: &mut dyn FnMut(ddpcheck_core::backend::Progress),
    ) -> Result<CollectiveRun, ProbeError> {
        self.0.collectives(req, progress)
    }
    fn ddp(
        &self,
        req: &DdpRequest,
        progress: &mut dyn FnMut(ddpcheck_core::backend::Progress),
    ) -> Result<Vec<DdpResult>, ProbeError> {
        self.0.ddp(req, progress)
    }
}

impl HostCopier for CopiesFail {
    fn host_copies(
        &self,
        _req: &ddpcheck_core::hostcopy::CopyRequest,
        _progress: &mut dyn FnMut(ddpcheck_core::backend::Progress),
    ) -> Result<ddpcheck_core::hostcopy::HostCopyRun, ProbeError> {
        Err(self.1.clone())
    }
}

// The platform and cluster runs answer their defaults, as this double did before.
impl PlatformReader for CopiesFail {}
impl ClusterMember for CopiesFail {}

/// A driver without the copy calls skips the step with its one line and the all-reduce still
/// judges the node; a copy that hangs or a crashed child ends the preflight with its verdict.
#[test]
fn host_copy_failures_skip_or_end_the_preflight() {
    let with = |e: ProbeError| {
        let b = CopiesFail(sim("h200x2-nvlink"), e);
        preflight::run(&b, &PreflightOptions::default(), &mut |_| {}).unwrap()
    };
    let step = |r: &PreflightReport, name: &str| r.steps.iter().find(|s| s.name == name).cloned();
    let r = with(ProbeError::Unavailable(
        "libcuda.so.1 has no cuMemHostAlloc".into(),
    ));
    assert_eq!(r.verdict, Verdict::Ok, "{}", r.reason);
    let s = step(&r, "host_copies").unwrap();
    assert_eq!(s.status, ddpcheck_core::report::StepStatus::Skipped);
    assert_eq!(s.detail, "libcuda.so.1 has no cuMemHostAlloc");
    assert!(r.findings.iter().any(|f| f.code == "host_copy_unmeasured"));
    assert!(r.all_reduce.is_some());

    let r = with(ProbeError::Timeout {
        stage: "host copies (GPU 0 host-to-device copies of 1048576 B)".into(),
        seconds: 30.0,
    });
    assert_eq!(r.verdict, Verdict::Timeout, "{}", r.reason);
    assert_eq!(
        step(&r, "host_copies").unwrap().status,
        ddpcheck_core::report::StepStatus::Failed
    );
    assert!(step(&r, "all_reduce").is_none() && r.all_reduce.is_none());

    let r = with(ProbeError::Worker(
        "host-copy worker exited (signal 11)".into(),
    ));
    assert_eq!(r.verdict, Verdict::Unknown, "{}", r.reason);
    let r = with(ProbeError::GpuFailed(
        "cuMemcpyHtoDAsync failed: 700".into(),
    ));
    assert_eq!(r.verdict, Verdict::Critical, "{}", r.reason);
    // A bad request is the caller's error, not a verdict.
    let b = CopiesFail(sim("h200x2-nvlink"), ProbeError::Invalid("x".into()));
    assert!(preflight::run(&b, &PreflightOptions::default(), &mut |_| {}).is_err());
}

/// slow-gpu: DDP of two GPUs waits for GPU 1 at 60% of its speed; one GPU alone and nocomm
/// (rank 0's step) do not show it.
#[test]
fn a_slow_gpu_slows_only_the_runs_that_wait_for_it() {
    let req = ddp_req(&["gpt2-124m"], &["base", "nocomm"], &[1, 2], &[]);
    let step = |p: &str, v: &str, n: u32| {
        row(&sim(p).ddp(&req, &mut |_| {}).unwrap(), v, n).step_time_median_s
    };
    let (fine, slow) = ("h200x2-nvlink", "h200x2-nvlink+slow-gpu");
    assert_eq!(step(fine, "base", 1), step(slow, "base", 1));
    assert_eq!(step(fine, "nocomm", 2), step(slow, "nocomm", 2));
    assert!(
        step(slow, "base", 2) > 1.3 * step(fine, "base", 2),
        "{} against {}",
        step(slow, "base", 2),
        step(fine, "base", 2)
    );
}

/// The consumer profiles carry NVML's status of every capability with its reason; a patched
/// driver (p2p-patched) reports P2P OK where the product policy has none.
#[test]
fn consumer_profiles_carry_nvml_p2p_status_per_capability() {
    use ddpcheck_core::topology::{P2pReason, P2pStatus};
    let caps = |spec: &str| {
        let b = sim(spec);
        let t = b.topology(&b.inventory().unwrap().gpus).unwrap();
        let pair = t.pairs()[0].clone();
        (pair.p2p, pair.p2p_status.unwrap(), t.p2p_status[0][0])
    };
    let (read, c, own) = caps("rtx4090x4-phb");
    assert_eq!(read, Some(P2pStatus::NotSupported));
    assert_eq!(c.read, P2pReason::GpuNotSupported);
    assert_eq!(c.atomics, P2pReason::GpuNotSupported);
    assert_eq!(c.nvlink, P2pReason::NotSupported);
    assert_eq!(own.read, P2pReason::Ok);
    let (read, c, _) = caps("rtx3090x2-nvlink");
    assert_eq!(read, Some(P2pStatus::Ok));
    assert_eq!(c.nvlink, P2pReason::Ok);
    assert_eq!(caps("rtx5090x2-pcie").1.write, P2pReason::GpuNotSupported);
    let (read, c, _) = caps("rtx5090x2-pcie+p2p-patched");
    assert_eq!(read, Some(P2pStatus::Ok));
    assert_eq!(c.read, P2pReason::Ok);
    // The older profiles give the read status alone, as before.
    let b = sim("a6000x4-phb");
    assert!(b
        .topology(&b.inventory().unwrap().gpus)
        .unwrap()
        .p2p_status
        .is_empty());
}

fn forced_p2p(deadline_ms: u64) -> PreflightOptions {
    PreflightOptions {
        deadline: Duration::from_millis(deadline_ms),
        nccl_env: [("NCCL_P2P_LEVEL".to_string(), "SYS".to_string())].into(),
        ..PreflightOptions::default()
    }
}

/// p2p-hang: P2P forced over PCIe on cards whose policy has none never finishes; the TIMEOUT's
/// one line names forced P2P as the likely cause and NCCL_P2P_DISABLE=1 as the thing to try.
/// NCCL's own choice (staging through host memory) runs.
#[test]
fn p2p_hang_times_out_naming_forced_p2p_and_the_fix() {
    let r = preflight_with("rtx4090x4-phb+p2p-hang", &forced_p2p(200));
    assert_eq!(r.verdict, Verdict::Timeout, "{}", r.reason);
    assert!(
        r.reason.contains("likely cause: peer-to-peer over PCIe"),
        "{}",
        r.reason
    );
    assert!(r.reason.contains("NCCL_P2P_LEVEL=SYS"), "{}", r.reason);
    assert!(r.reason.contains("GPU_NOT_SUPPORTED"), "{}", r.reason);
    assert!(r.reason.contains("try NCCL_P2P_DISABLE=1"), "{}", r.reason);
    assert_eq!(preflight("rtx4090x4-phb+p2p-hang").verdict, Verdict::Ok);
    // A hang with P2P out of the picture names no P2P cause.
    let r = preflight_with(
        "rtx4090x4-phb+hang",
        &PreflightOptions {
            deadline: Duration::from_millis(200),
            ..PreflightOptions::default()
        },
    );
    assert_eq!(r.verdict, Verdict::Timeout);
    assert!(!r.reason.contains("likely cause"), "{}", r.reason);
}

/// p2p-patched: a patched driver reports P2P OK and forced P2P returns wrong values: CRITICAL,
/// the one line naming P2P on a GeForce card as the likely cause.
#[test]
fn p2p_patched_returns_wrong_values_naming_the_patched_driver() {
    let r = preflight_with("rtx5090x2-pcie+p2p-patched", &forced_p2p(30_000));
    assert_eq!(r.verdict, Verdict::Critical, "{}", r.reason);
    assert!(r.reason.contains("wrong elements"), "{}", r.reason);
    assert!(r.reason.contains("a patched driver"), "{}", r.reason);
    assert!(r.reason.contains("try NCCL_P2P_DISABLE=1"), "{}", r.reason);
    // NCCL's default across the host bridge stages through host memory: correct results.
    assert_eq!(preflight("rtx5090x2-pcie+p2p-patched").verdict, Verdict::Ok);
}

/// --compile on a simulated node: each run reports its compile time outside its steps, and the
/// compiled compute is shorter than eager's (so communication is a larger share of the step).
#[test]
fn a_compiled_recipe_reports_its_compile_time_and_shorter_compute() {
    let b = sim("a6000x4-phb");
    let eager_req = ddp_req(&["gpt2-124m"], &["base"], &[1, 4], &[]);
    let mut compiled_req = eager_req.clone();
    compiled_req.recipe.compile = Some(ddpcheck_core::ddp::CompileMode::Default);
    let eager = b.ddp(&eager_req, &mut |_| {}).unwrap();
    let compiled = b.ddp(&compiled_req, &mut |_| {}).unwrap();
    let (e1, c1) = (row(&eager, "base", 1), row(&compiled, "base", 1));
    assert!(e1.compile.is_none());
    let outcome = c1.compile.as_ref().unwrap();
    assert!(outcome.ran_compiled() && outcome.compile_s.is_some_and(|s| s > 0.0));
    assert_eq!(
        c1.recipe.as_ref().and_then(|r| r.compile),
        compiled_req.recipe.compile
    );
    assert!(c1.step_time_median_s < e1.step_time_median_s);
    // The same link, a shorter compute: the exposed share of a 4-GPU step grows.
    let (e4, c4) = (row(&eager, "base", 4), row(&compiled, "base", 4));
    assert!(c4.exposed_comm_fraction.unwrap() > e4.exposed_comm_fraction.unwrap());
}

/// A profile that is a VM (a cloud instance) shows what the `vm` fault shows on any profile:
/// the hypervisor flag, every GPU on the virtual root bus, no NUMA node; adding the fault changes
/// nothing, and a bare-metal profile is not a VM.
#[test]
fn a_vm_profile_shows_the_platform_of_the_vm_fault() {
    let facts = |spec: &str| {
        let b = sim(spec);
        let gpus = b.inventory().unwrap().gpus;
        b.platform(&gpus).unwrap()
    };
    for spec in [
        "a10gx8-vm",
        "hgx-h100-slice2",
        "a10gx8-vm+vm",
        "l40s-gen4+vm",
    ] {
        let p = facts(spec);
        assert_eq!(p.hypervisor, Some(true), "{spec}");
        assert!(!p.gpus.is_empty(), "{spec}");
        for g in &p.gpus {
            assert_eq!(g.on_root_bus, Some(true), "{spec}");
            assert_eq!(g.numa_node, Some(-1), "{spec}");
        }
    }
    let bare = facts("l40s-gen4");
    assert_eq!(bare.hypervisor, Some(false));
    assert!(bare.gpus.iter().all(|g| g.on_root_bus == Some(false)));
    // The HGX slice's guest sees no NVSwitch, so no Fabric Manager is asked for.
    assert_eq!(facts("hgx-h100-slice2").fabric.nvswitches, 0);
}

/// FSDP2's wrappers on the simulated 4xA6000 box: replicate() all-reduces as DDP does,
/// fully_shard without resharding gathers once per micro-batch, with resharding twice; each run
/// reports the peak core's memory model predicts.
#[test]
fn fsdp2_wrappers_move_what_they_move() {
    let req = ddp_req(
        &["gpt2-124m"],
        &["base", "replicate", "fsdp", "fsdp-noreshard"],
        &[4],
        &[],
    );
    let rows = sim("a6000x4-phb").ddp(&req, &mut |_| {}).unwrap();
    let step = |v: &str| row(&rows, v, 4).step_time_median_s;
    assert_eq!(step("replicate"), step("base"));
    assert!(
        step("fsdp-noreshard") < step("fsdp"),
        "{} {}",
        step("fsdp-noreshard"),
        step("fsdp")
    );
    let peak = |v: &str| row(&rows, v, 4).max_memory_bytes.unwrap();
    assert!(peak("fsdp") < peak("fsdp-noreshard") && peak("fsdp-noreshard") < peak("base"));
}

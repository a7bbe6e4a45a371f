//! The simulated collective curves against the profiles' measured facts (seeds 000 and 002, the
//! H200 pair), their determinism, and bad requests.

use super::*;

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

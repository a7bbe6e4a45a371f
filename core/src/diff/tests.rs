//! The comparison on the cases: NVIDIA/nccl#1829's transport change, a link that
//! trained down, a drop nothing recorded explains, and runs that cannot be compared.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use super::*;
use crate::explain::Transport;
use crate::topology::{LinkClass, P2pStatus};

/// `n` RTX A6000s on one PCIe switch (PXB), each at gen4 x16, with all-reduce busbw `gbps`.
fn node(n: u32, gbps: f64, nccl: &str) -> RunFacts {
    let gpus = (0..n)
        .map(|i| GpuFacts {
            index: i,
            name: "NVIDIA RTX A6000".into(),
            pcie: Some((4, 16)),
            ..GpuFacts::default()
        })
        .collect();
    let mut pairs = Vec::new();
    for a in 0..n {
        for b in (a + 1)..n {
            pairs.push(PairFacts {
                a,
                b,
                link: Some(LinkClass::Pxb),
                p2p: Some(P2pStatus::Ok),
                transport: None,
                transport_raw: None,
            });
        }
    }
    RunFacts {
        kind: RunKind::Explain,
        source: "test".into(),
        figure: Some(Figure::Busbw {
            gbps,
            what: format!("all-reduce busbw of {n} GPUs"),
        }),
        gpu_count: usize::try_from(n).unwrap(),
        gpus,
        pairs,
        node_transport: None,
        nccl_version: Some(nccl.into()),
        driver_version: Some("535.183.01".into()),
        cuda_version: Some("12.6".into()),
        nccl_env: BTreeMap::new(),
        algo_proto: None,
    }
}

/// Every pair of `r` on links of `class`.
fn on_links(mut r: RunFacts, class: LinkClass) -> RunFacts {
    for p in &mut r.pairs {
        p.link = Some(class);
    }
    r
}

fn with_transport(mut r: RunFacts, t: Transport, raw: &str) -> RunFacts {
    for p in &mut r.pairs {
        p.transport = Some(t);
        p.transport_raw = Some(raw.into());
    }
    r
}

/// NVIDIA/nccl#1829: 4x RTX A6000, more than 2x slower from NCCL 2.23.4 on, the log's
/// transport P2P/CUMEM before and SHM after (CUDA 12.6 → 12.8 in the same container update).
/// The thread publishes the transports and "over 2x slower"; the busbw figures are rebuilt:
/// after, the SHM figure of the 4xA6000 field report (4.3 GB/s at gen3) doubled for gen4
/// (8.5 GB/s); before, just over twice it (18.0 GB/s).
#[test]
fn nccl_1829_transport_change_ranks_first_with_the_version_as_its_cause() {
    // Pairs through the host bridge: NCCL 2.23 lowered its default P2P level from SYS to PXB,
    // which keeps P2P on PXB pairs and sends PHB pairs to SHM (src/graph/paths.cc).
    let phb = |n| on_links(node(4, n, "2.21.5"), LinkClass::Phb);
    let a = with_transport(phb(18.0), Transport::P2p, "P2P/CUMEM");
    let mut b = phb(8.5);
    b.nccl_version = Some("2.23.4".into());
    let mut b = with_transport(b, Transport::Shm, "SHM/direct/direct");
    b.cuda_version = Some("12.8".into());
    let d = diff(&a, &b).unwrap();
    let first = &d.changes[0];
    assert_eq!(first.kind, ChangeKind::Transport, "{:#?}", d.changes);
    assert_eq!(first.r#where.len(), 6, "every pair of four GPUs");
    assert_eq!(first.cause.as_deref(), Some("NCCL 2.21.5 → 2.23.4"));
    assert!(first.before.contains("P2P/CUMEM") && first.after.contains("SHM/direct/direct"));
    // SHM's ceiling over gen4 x16: 28% of 31.51 = 8.82 GB/s, of run A's 18.0.
    let r = first.explains_ratio.unwrap();
    assert!((r - SHM_STAGED_SHARE * 31.508 / 18.0).abs() < 0.001, "{r}");
    assert!(first.arithmetic.as_deref().unwrap().contains("SHM staged"));
    let second = &d.changes[1];
    assert_eq!(second.kind, ChangeKind::NcclVersion);
    assert_eq!(second.caused, vec![ChangeKind::Transport]);
    assert!(
        second
            .message
            .contains("chose another transport on 6 pairs"),
        "{}",
        second.message
    );
    assert!(d
        .changes
        .iter()
        .any(|c| c.kind == ChangeKind::Cuda && c.rank == 3));
    let m = d.measured_ratio.unwrap();
    assert!((m - 8.5 / 18.0).abs() < 1e-9);
    assert!((d.unexplained_ratio.unwrap() - 1.0).abs() < 0.05);
    assert!(d.unexplained.starts_with("nothing"), "{}", d.unexplained);
}

/// A variable that turns P2P off is the transport change's cause, not the version beside it.
#[test]
fn a_variable_that_turns_p2p_off_is_the_cause() {
    let a = node(2, 20.0, "2.21.5");
    let mut b = node(2, 8.0, "2.23.4");
    b.nccl_env.insert("NCCL_P2P_DISABLE".into(), "1".into());
    let d = diff(&a, &b).unwrap();
    assert_eq!(d.changes[0].kind, ChangeKind::Transport);
    assert!(d.changes[0].before.contains("(predicted)"));
    assert_eq!(
        d.changes[0].cause.as_deref(),
        Some("NCCL_P2P_DISABLE: unset → NCCL_P2P_DISABLE=1")
    );
    assert_eq!(d.changes[1].kind, ChangeKind::NcclEnv);
}

/// GPU 2's link trained down from gen4 x16 to x8: every ring through it has a hop of half
/// the capacity, so capacity explains about half the bandwidth (20.0 → 10.4 GB/s).
#[test]
fn a_link_that_trained_down_is_named_and_explains_half_by_capacity() {
    let a = node(4, 20.0, "2.21.5");
    let mut b = node(4, 10.4, "2.21.5");
    b.gpus[2].pcie = Some((4, 8));
    let d = diff(&a, &b).unwrap();
    assert_eq!(d.changes.len(), 1, "{:#?}", d.changes);
    let c = &d.changes[0];
    assert_eq!(c.kind, ChangeKind::PcieLink);
    assert_eq!(c.r#where, vec!["GPU2"]);
    assert_eq!(
        (c.before.as_str(), c.after.as_str()),
        ("PCIe gen4 x16", "PCIe gen4 x8")
    );
    assert!(c.message.contains("the link trained down"), "{}", c.message);
    assert!((c.explains_ratio.unwrap() - 0.5).abs() < 1e-9);
    assert!((d.explained_ratio.unwrap() - 0.5).abs() < 1e-9);
    assert!(d.unexplained.starts_with("nothing"), "{}", d.unexplained);
    assert!(d.b.ceiling.as_ref().unwrap().hop.contains("GPU2"));
}

/// The same node, nothing changed that the runs recorded, and the figure fell to 0.6×: said
/// as unexplained, with nothing named as its cause.
#[test]
fn a_drop_no_change_accounts_for_is_said_unexplained() {
    let a = node(4, 20.0, "2.21.5");
    let b = node(4, 12.0, "2.21.5");
    let d = diff(&a, &b).unwrap();
    assert!(d.changes.is_empty());
    assert_eq!(d.explained_ratio, Some(1.0));
    assert!((d.unexplained_ratio.unwrap() - 0.6).abs() < 1e-9);
    assert!(
        d.unexplained.contains("leaving 0.60× unexplained")
            && d.unexplained
                .contains("no change read between the runs accounts for it"),
        "{}",
        d.unexplained
    );
}

/// A link that trained down and a further drop: the link's half is explained, the rest not.
#[test]
fn the_part_capacity_does_not_explain_stays_unexplained() {
    let a = node(4, 20.0, "2.21.5");
    let mut b = node(4, 6.0, "2.21.5");
    b.gpus[2].pcie = Some((3, 16));
    let d = diff(&a, &b).unwrap();
    assert!((d.explained_ratio.unwrap() - 15.754 / 31.508).abs() < 1e-3);
    assert!((d.unexplained_ratio.unwrap() - 0.6).abs() < 0.01);
    assert!(
        d.unexplained.contains("0.60× unexplained"),
        "{}",
        d.unexplained
    );
}

#[test]
fn runs_that_cannot_be_compared_are_refused() {
    let a = node(4, 20.0, "2.21.5");
    let b = node(2, 20.0, "2.21.5");
    let e = diff(&a, &b).unwrap_err();
    assert_eq!(e, DiffError::GpuCount { a: 4, b: 2 });
    assert!(e.to_string().contains("run A ran 4 GPUs and run B 2"));
    let mut ddp = node(4, 20.0, "2.21.5");
    ddp.kind = RunKind::BenchDdp;
    ddp.figure = Some(Figure::StepTime {
        seconds: 0.2,
        what: "the gpt2 base step at 4 GPUs".into(),
    });
    let e = diff(&a, &ddp).unwrap_err();
    assert!(
        matches!(
            e,
            DiffError::Kinds {
                a: "explain",
                b: "bench_ddp"
            }
        ),
        "{e}"
    );
    let mut other = ddp.clone();
    other.figure = Some(Figure::StepTime {
        seconds: 0.2,
        what: "the resnet50 base step at 4 GPUs".into(),
    });
    assert!(matches!(diff(&ddp, &other), Err(DiffError::Figures { .. })));
}

/// Step times: the changes are named but not sized.
#[test]
fn step_times_name_changes_without_sizing_them() {
    let mut a = node(2, 1.0, "2.21.5");
    a.kind = RunKind::BenchDdp;
    a.figure = Some(Figure::StepTime {
        seconds: 0.1,
        what: "x".into(),
    });
    let mut b = a.clone();
    b.nccl_version = Some("2.23.4".into());
    b.figure = Some(Figure::StepTime {
        seconds: 0.2,
        what: "x".into(),
    });
    let d = diff(&a, &b).unwrap();
    assert!((d.measured_ratio.unwrap() - 0.5).abs() < 1e-9);
    assert_eq!(d.explained_ratio, None);
    assert!(d.changes.iter().all(|c| c.explains_ratio.is_none()));
    assert!(
        d.unexplained.contains("no capacity arithmetic applies"),
        "{}",
        d.unexplained
    );
    assert!(d.unexplained.contains("nccl version"), "{}", d.unexplained);
}

/// A move smaller than capacity accounts for is said so, not as a remainder "unexplained".
#[test]
fn a_smaller_move_than_capacity_accounts_for_is_said_so() {
    let a = node(4, 20.0, "2.21.5");
    let mut b = node(4, 16.0, "2.21.5");
    b.gpus[1].pcie = Some((4, 4));
    let d = diff(&a, &b).unwrap();
    assert!((d.explained_ratio.unwrap() - 0.25).abs() < 1e-9);
    assert!(
        d.unexplained
            .contains("a smaller move than capacity accounts for (0.25×)"),
        "{}",
        d.unexplained
    );
    assert!(
        d.undecided
            .iter()
            .any(|u| u.starts_with("run B's 16.00 GB/s is above what its path carries")),
        "{:?}",
        d.undecided
    );
}

/// What an artifact reader assembles (the core types a live explain judges) becomes the same
/// facts: each pair's transport from its log, the figure from the one pair measured.
#[test]
fn an_artifact_readers_parts_become_facts() {
    use crate::explain::{PairMeasurement, PlatformFacts};
    use crate::node_gpus::{GpuHealth, GpuInfo, PcieLink, ProbeState};
    use crate::topology::TopologyMatrix;
    let gpu = |i: u32| GpuInfo {
        index: i,
        uuid: format!("GPU-{i}"),
        pci_bus_id: format!("00000000:{}:00.0", 17 + i),
        name: "NVIDIA RTX A6000".into(),
        memory_total_bytes: 1,
        pcie: Some(PcieLink {
            gen_current: 4,
            gen_max: 4,
            width_current: 16 / (i + 1),
            width_max: 16,
        }),
        health: GpuHealth::default(),
        processes: vec![],
        state: ProbeState::Ok,
    };
    let gpus = vec![gpu(0), gpu(1)];
    let topology = TopologyMatrix {
        gpus: gpus.iter().map(GpuInfo::gpu_ref).collect(),
        links: vec![
            vec![LinkClass::X, LinkClass::Pxb],
            vec![LinkClass::Pxb, LinkClass::X],
        ],
        p2p: vec![],
        p2p_status: vec![],
        cpu_affinity: vec![],
        numa_affinity: vec![],
    };
    let measured = [PairMeasurement {
        a: 0,
        b: 1,
        busbw_gbps: Some(12.0),
        transport: Some("P2P/CUMEM, SHM/direct/direct".into()),
        ..PairMeasurement::default()
    }];
    let env = BTreeMap::from([("NCCL_P2P_LEVEL".to_string(), "SYS".to_string())]);
    let platform = PlatformFacts::unknown("artifacts");
    let f = from_parts(&Parts {
        source: "artifacts in case-1/".into(),
        gpus: &gpus,
        topology: Some(&topology),
        platform: &platform,
        nccl_env: &env,
        measurements: &measured,
        node: None,
        nccl_version: Some("2.23.4".into()),
        driver_version: None,
        cuda_version: None,
        algo_proto: Some("Ring/Simple".into()),
        log_transport: None,
    });
    assert_eq!(f.kind, RunKind::Artifacts);
    assert_eq!(f.gpu_count, 2);
    assert_eq!(f.gpus[1].pcie, Some((4, 8)));
    assert_eq!(
        f.pairs[0].transport,
        Some(Transport::Shm),
        "the worst channel's"
    );
    assert_eq!(
        f.figure,
        Some(Figure::Busbw {
            gbps: 12.0,
            what: "all-reduce busbw of 2 GPUs".into()
        })
    );
    assert_eq!(
        f.nccl_env.get("NCCL_P2P_LEVEL").map(String::as_str),
        Some("SYS")
    );
    // SHM over the slower link, gen4 x8: 28% of 15.75.
    let c = ceiling::node_ceiling(&f).unwrap();
    assert!((c.gbps - SHM_STAGED_SHARE * 15.754).abs() < 0.01, "{c:?}");
}

/// Two logs that name no GPU (a training job's, given alone): the transports their channel
/// lines show are the runs', so NCCL 2.21.5 → 2.23.4 with P2P/CUMEM → SHM names the transport
/// change with the version as its cause (NVIDIA/nccl#1829's lines).
#[test]
fn a_log_alone_compares_its_channels_transports() {
    let run = |nccl: &str, transport: &str| {
        let platform = crate::explain::PlatformFacts::unknown("artifacts");
        from_parts(&Parts {
            source: "log".into(),
            gpus: &[],
            topology: None,
            platform: &platform,
            nccl_env: &BTreeMap::new(),
            measurements: &[],
            node: None,
            nccl_version: Some(nccl.into()),
            driver_version: None,
            cuda_version: None,
            algo_proto: None,
            log_transport: Some(transport.into()),
        })
    };
    let d = diff(&run("2.21.5", "P2P/CUMEM"), &run("2.23.4", "SHM/direct")).unwrap();
    assert_eq!(d.changes[0].kind, ChangeKind::Transport, "{d:#?}");
    assert_eq!(d.changes[0].cause.as_deref(), Some("NCCL 2.21.5 → 2.23.4"));
    assert_eq!(d.changes[1].kind, ChangeKind::NcclVersion);
}

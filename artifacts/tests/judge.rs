//! Whole folders through the one judge: the expectation from the links the artifacts show, the
//! same chain as a live explain, what a missing artifact leaves undecided, and bad input refused
//! with the file named.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use ddpcheck_artifacts::folder::{folder_sources, read_all, Read, Source};
use ddpcheck_artifacts::judge::{judge, ArtifactsReport};
use ddpcheck_artifacts::node::assemble;
use ddpcheck_artifacts::{ArtifactError, Format};
use ddpcheck_core::explain::{explain, CauseKind};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn reads(dir: &str) -> Vec<Read> {
    read_all(&folder_sources(&fixtures().join("nodes").join(dir)).unwrap()).unwrap()
}

fn report(dir: &str) -> ArtifactsReport {
    judge(&reads(dir), "test").unwrap()
}

fn kinds(r: &ArtifactsReport) -> Vec<CauseKind> {
    r.causes.iter().map(|c| c.kind).collect()
}

#[test]
fn twelve_nvlinks_by_design_are_not_eighteen_missing() {
    let r = report("h100pcie-nvbridge-x2");
    assert_eq!((r.verdict.as_str(), r.exit_code), ("ok", 0), "{}", r.reason);
    assert!(
        !kinds(&r).contains(&CauseKind::NvlinkDown),
        "{:?}",
        kinds(&r)
    );
    assert_eq!(r.gpus[0].health.nvlinks_present, Some(12));
    let pair = &r.explanation.pairs[0];
    let cap = pair.capacity.as_ref().unwrap();
    assert!(cap.path.starts_with("NV12"), "{}", cap.path);
    assert_eq!(
        (pair.transport_measured, pair.transport_raw.as_deref()),
        (true, Some("P2P/CUMEM"))
    );
    assert_eq!(r.versions.nccl.as_deref(), Some("2.23.4"));
    assert_eq!(r.provenance.len(), 7);
    assert!(r.provenance.iter().any(|p| p.format == Format::Lspci));
}

#[test]
fn links_all_down_on_an_hgx_slice_are_down() {
    let r = report("hgx-h100-slice-nvlinks-down");
    let down = r
        .causes
        .iter()
        .find(|c| c.kind == CauseKind::NvlinkDown)
        .unwrap();
    assert!(down.message.contains("0 of 18"), "{}", down.message);
    assert!(kinds(&r).contains(&CauseKind::TransportDowngraded));
    assert_eq!((r.verdict.as_str(), r.exit_code), ("critical", 2));
}

#[test]
fn forcing_p2p_across_the_host_bridge_is_the_cause_and_the_fix() {
    let r = report("a6000x2-phb-p2p-forced");
    let c = r
        .causes
        .iter()
        .find(|c| c.kind == CauseKind::P2pForced)
        .unwrap();
    assert!(c.fix.contains("unset NCCL_P2P_LEVEL"), "{}", c.fix);
    assert_eq!(r.verdict.as_str(), "warning");
    assert!(
        r.findings.iter().any(|f| f.code == "nccl_p2p_forced"),
        "check's rule runs too"
    );
    assert_eq!(
        r.nccl_env.get("NCCL_P2P_LEVEL").map(String::as_str),
        Some("SYS")
    );
    let log = r
        .provenance
        .iter()
        .find(|p| p.format == Format::NcclLog)
        .unwrap();
    assert!(
        log.summary.contains("transports P2P/IPC") && log.summary.contains("NCCL_P2P_LEVEL=SYS"),
        "{}",
        log.summary
    );
}

/// No second rule set: the report's chain is core's `explain` on the assembled readings.
#[test]
fn the_chain_is_the_live_judges_on_the_same_input() {
    for dir in [
        "h100pcie-nvbridge-x2",
        "hgx-h100-slice-nvlinks-down",
        "a6000x2-phb-p2p-forced",
    ] {
        let rs = reads(dir);
        let a = assemble(&rs).unwrap();
        let live = explain(&a.explain_input());
        assert_eq!(judge(&rs, "t").unwrap().explanation, live, "{dir}");
    }
}

fn one(path: &Path, wanted: Option<Format>) -> Vec<Read> {
    read_all(&[Source {
        path: path.to_path_buf(),
        wanted,
    }])
    .unwrap()
}

#[test]
fn what_a_missing_artifact_would_have_decided_is_said() {
    let smi = fixtures().join("formats/smi_query/h100pcie-x2-driver550.txt");
    let r = judge(&one(&smi, None), "t").unwrap();
    for line in [
        "no topo matrix (nvidia-smi topo -m): P2P path unknown",
        "no nccl-tests output: bandwidth not judged",
        "no lspci -vvv: ACS",
    ] {
        assert!(
            r.undecided.iter().any(|u| u.starts_with(line)),
            "{line}: {:?}",
            r.undecided
        );
    }
    // The one GPU at gen4 x8 of gen5 x16 is check's finding and explain's cause alike.
    assert!(r.findings.iter().any(|f| f.code == "pcie_downtrained"));
    assert!(kinds(&r).contains(&CauseKind::PcieDowntrained));
    assert!(r.findings.iter().any(|f| f.code == "throttled"));
    // Its evidence cites the file, never a sysfs path this machine did not read.
    let link = r
        .causes
        .iter()
        .find(|c| c.kind == CauseKind::PcieDowntrained)
        .unwrap();
    let src = link.evidence[0].source.as_deref().unwrap_or("");
    assert!(
        src.starts_with("artifacts: nvidia-smi -q (") && src.contains("h100pcie-x2-driver550.txt"),
        "{src}"
    );
}

#[test]
fn another_collective_or_another_node_is_not_judged_as_this_pair() {
    let f = fixtures().join("formats/nccl_tests");
    let r = judge(&one(&f.join("rtx4090-all-gather-2.13.6.txt"), None), "t").unwrap();
    assert!(
        r.undecided.iter().any(|u| u.contains("ran all_gather")),
        "{:?}",
        r.undecided
    );
    assert!(r.measurements.is_empty());
    let r = judge(&one(&f.join("h100x16-two-nodes-mpirun.txt"), None), "t").unwrap();
    assert!(
        r.undecided.iter().any(|u| u.contains("across 2 hosts")),
        "{:?}",
        r.undecided
    );
    // Nothing names this node's GPUs: UNKNOWN, never OK.
    assert_eq!(
        (r.verdict.as_str(), r.exit_code),
        ("unknown", 3),
        "{}",
        r.reason
    );
}

fn err(path: &Path, wanted: Option<Format>) -> ArtifactError {
    read_all(&[Source {
        path: path.to_path_buf(),
        wanted,
    }])
    .unwrap_err()
    .error
}

#[test]
fn bad_input_is_refused_never_guessed() {
    let bad = fixtures().join("bad");
    assert!(matches!(
        err(&bad.join("h200-smi-q-grep-excerpt.txt"), None),
        ArtifactError::Truncated {
            format: Format::SmiQuery,
            ..
        }
    ));
    assert!(matches!(
        err(&bad.join("topo-m-cut.txt"), None),
        ArtifactError::Truncated {
            format: Format::TopoMatrix,
            ..
        }
    ));
    assert!(matches!(
        err(&bad.join("nccl-tests-cut.txt"), None),
        ArtifactError::Truncated {
            format: Format::NcclTests,
            ..
        }
    ));
    let tests = fixtures().join("formats/nccl_tests/h100x8-2.13.txt");
    assert_eq!(
        err(&tests, Some(Format::TopoMatrix)),
        ArtifactError::WrongFormat {
            wanted: Format::TopoMatrix,
            found: Format::NcclTests
        }
    );
    assert_eq!(err(&bad.join("binary.bin"), None), ArtifactError::Binary);
    assert_eq!(err(&bad.join("report.json"), None), ArtifactError::Foreign);
    assert_eq!(err(&bad.join("empty.txt"), None), ArtifactError::Empty);
    assert!(matches!(
        err(&bad.join("topo-and-nvlink-in-one.txt"), None),
        ArtifactError::Mixed(..)
    ));
}

#[test]
fn two_nodes_artifacts_are_refused() {
    let n = fixtures().join("nodes");
    let rs = read_all(&[
        Source {
            path: n.join("h100pcie-nvbridge-x2/smi-q.txt"),
            wanted: None,
        },
        Source {
            path: fixtures().join("formats/topo_matrix/h100x4-nv6-nics.txt"),
            wanted: None,
        },
    ])
    .unwrap();
    let e = judge(&rs, "t").unwrap_err();
    assert!(matches!(e, ArtifactError::Inconsistent(_)), "{e}");
    assert!(e.to_string().contains("topo -m shows 4 GPUs"), "{e}");
}

/// A run that failed with nccl-tests' own failure line is a failed measurement (UNKNOWN, as a
/// live worker error), never a truncated file and never a figure.
#[test]
fn a_failed_run_is_a_measurement_error() {
    let f = fixtures().join("formats/nccl_tests/failed-run-nccl-failure.txt");
    let smi = fixtures().join("nodes/h100pcie-nvbridge-x2/smi-q.txt");
    let rs = read_all(&[
        Source {
            path: f,
            wanted: None,
        },
        Source {
            path: smi,
            wanted: None,
        },
    ])
    .unwrap();
    let r = judge(&rs, "t").unwrap();
    let m = &r.measurements[0];
    assert!(
        m.error
            .as_deref()
            .unwrap_or("")
            .contains("unhandled cuda error"),
        "{m:?}"
    );
    assert_eq!(m.busbw_gbps, None);
    assert_eq!(
        (r.verdict.as_str(), r.exit_code),
        ("unknown", 3),
        "{}",
        r.reason
    );
}

/// An NCCL log alone (a training job's) gives each pair's transport: SHM where the topology
/// allows P2P is a downgraded transport, with the variable that did it.
#[test]
fn a_log_alone_gives_the_pairs_transport() {
    let r = report("pcie-pair-log-only-shm");
    let pair = &r.explanation.pairs[0];
    assert_eq!(
        (pair.transport_measured, pair.transport_raw.as_deref()),
        (true, Some("SHM/direct"))
    );
    assert!(
        kinds(&r).contains(&CauseKind::P2pDisabled),
        "{:?}",
        kinds(&r)
    );
    assert!(
        kinds(&r).contains(&CauseKind::TransportDowngraded),
        "{:?}",
        kinds(&r)
    );
}

/// nccl-tests of one model beside nvidia-smi -q of another: two nodes' files.
#[test]
fn a_run_on_other_gpus_than_the_query_names_is_refused() {
    let rs = read_all(&[
        Source {
            path: fixtures().join("nodes/h100pcie-nvbridge-x2/smi-q.txt"),
            wanted: None,
        },
        Source {
            path: fixtures().join("nodes/a6000x2-phb-p2p-forced/all-reduce.txt"),
            wanted: None,
        },
    ])
    .unwrap();
    let e = judge(&rs, "t").unwrap_err();
    assert!(e.to_string().contains("NVIDIA RTX A6000"), "{e}");
}

/// A log given apart from an nccl-tests run of another NCCL is not that run's: its transports
/// are not taken for it, and that is said.
#[test]
fn a_log_of_another_nccl_is_not_the_runs() {
    let f = fixtures().join("formats");
    let rs = read_all(&[
        Source {
            path: f.join("nccl_tests/h100x8-2.13.txt"),
            wanted: None,
        },
        Source {
            path: f.join("nccl_log/h100x8-p2p-cumem-2.22.txt"),
            wanted: None,
        },
    ])
    .unwrap();
    let r = judge(&rs, "t").unwrap();
    let node = r.node_measurement.as_ref().unwrap();
    assert_eq!(
        (node.busbw_gbps, node.transport.as_deref()),
        (Some(432.01), None)
    );
    assert!(
        r.undecided
            .iter()
            .any(|u| u.contains("(NCCL 2.22.3) is not of the nccl-tests run (NCCL 2.21.5)")),
        "{:?}",
        r.undecided
    );
}

/// check's health rules run on what `nvidia-smi -q` shows: uncorrected ECC is CRITICAL,
/// a thermal slowdown a warning.
#[test]
fn health_read_from_the_query_is_checks_judgement() {
    let smi = fixtures().join("formats/smi_query/v100-driver470-throttled-ecc.txt");
    let r = judge(&one(&smi, None), "t").unwrap();
    let codes: Vec<&str> = r.findings.iter().map(|f| f.code.as_str()).collect();
    assert!(
        codes.contains(&"ecc_uncorrected") && codes.contains(&"throttled"),
        "{codes:?}"
    );
    assert_eq!(
        (r.verdict.as_str(), r.exit_code),
        ("critical", 2),
        "{}",
        r.reason
    );
}

/// GPUs passed through to a VM without P2P (nvidia-smi -q's `Pass-Through`, CNS, a flat PCI
/// tree): the VM and its staging through host memory are said, as live; no fault is made of it.
#[test]
fn a_vm_without_p2p_is_a_vm_and_a_platform_limit() {
    let r = report("a10g-x2-vm-no-p2p");
    let vm = r
        .causes
        .iter()
        .find(|c| c.kind == CauseKind::VirtualMachine)
        .unwrap();
    assert_eq!(vm.evidence[0].what, "GPUs passed through to a VM");
    assert!(
        vm.evidence[0]
            .source
            .as_deref()
            .unwrap_or("")
            .starts_with("artifacts: "),
        "{:?}",
        vm.evidence[0]
    );
    assert!(kinds(&r).contains(&CauseKind::VmNoP2p), "{:?}", kinds(&r));
    assert!(r.platform.gpus.iter().all(|g| g.on_root_bus == Some(true)));
    assert_ne!(r.verdict.as_str(), "critical", "{}", r.reason);
}

/// ACS on the switch ports between two GPUs, read from lspci -vvv, is the live ACS cause; the
/// GPUs' bus ids come from lspci where no other artifact gives them (nvidia-smi numbers GPUs in
/// bus order), and that is said.
#[test]
fn acs_on_the_switch_between_a_pair_is_found_from_lspci() {
    let r = report("titanxp-x2-plx-acs");
    let acs = r
        .causes
        .iter()
        .find(|c| c.kind == CauseKind::Acs)
        .expect("acs");
    assert!(
        acs.message.contains("0000:03:08.0") && acs.message.contains("0000:03:10.0"),
        "{}",
        acs.message
    );
    assert_eq!(r.gpus[1].pci_bus_id, "0000:05:00.0");
    assert!(
        r.undecided.iter().any(|u| u.contains("bus order")),
        "{:?}",
        r.undecided
    );
}

/// `ACSCtl` lines of bridges whose bus ranges the file does not give (NVIDIA/nccl#2079's, as the
/// thread published them) place no bridge above either GPU: the GPUs' bridges are unknown, never
/// "none", and the report says ACS is not judged, naming the bridges; no ACS cause is guessed.
#[test]
fn acs_on_bridges_without_bus_ranges_is_said_not_judged() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/field-cases/nccl-2079-rtx5880-acs/artifacts");
    let r = judge(&read_all(&folder_sources(&dir).unwrap()).unwrap(), "t").unwrap();
    assert!(!kinds(&r).contains(&CauseKind::Acs), "{:?}", kinds(&r));
    assert_eq!(r.platform.gpus.len(), 2);
    assert!(
        r.platform.gpus.iter().all(|g| g.bridges.is_none()),
        "{:?}",
        r.platform.gpus
    );
    let line = r
        .undecided
        .iter()
        .find(|u| u.contains("ACS"))
        .unwrap_or_else(|| panic!("{:?}", r.undecided));
    assert!(line.contains("10 PCI bridges (0000:00:03.1"), "{line}");
    assert!(line.contains("not judged"), "{line}");
    // A whole listing with bus ranges still places them (and finds the ACS).
    let placed = report("titanxp-x2-plx-acs");
    assert!(
        placed.undecided.iter().all(|u| !u.contains("bus ranges")),
        "{:?}",
        placed.undecided
    );
}

/// A `topo -p2p` matrix whose command line is not in the file may be NVLink's or atomics'
/// (NS on every PCIe pair): its bare NS is not read as "no P2P", and that is said; a named
/// reason (CNS, GNS, TNS, DR) is the pair's alike for every capability and stands.
#[test]
fn an_unnamed_p2p_matrix_of_ns_is_not_read_as_no_p2p() {
    let dir = fixtures().join("nodes/a6000x2-phb-p2p-forced");
    let ns = std::env::temp_dir().join(format!("ddpcheck-p2p-ns-{}.txt", std::process::id()));
    std::fs::write(&ns, " \tGPU0\tGPU1\t\n GPU0\tX\tNS\t\n GPU1\tNS\tX\t\n").unwrap();
    let rs = read_all(&[
        Source {
            path: dir.join("topo-m.txt"),
            wanted: None,
        },
        Source {
            path: ns.clone(),
            wanted: Some(Format::TopoP2p),
        },
    ])
    .unwrap();
    std::fs::remove_file(&ns).unwrap();
    let r = judge(&rs, "t").unwrap();
    let t = r.topology.as_ref().unwrap();
    assert_ne!(
        t.p2p[0][1],
        ddpcheck_core::topology::P2pStatus::NotSupported
    );
    assert!(
        r.undecided.iter().any(|u| u.contains("NS")),
        "{:?}",
        r.undecided
    );
    let gns = fixtures().join("formats/topo_p2p/rtx5090x2-gns.txt");
    let rs = read_all(&[
        Source {
            path: dir.join("topo-m.txt"),
            wanted: None,
        },
        Source {
            path: gns,
            wanted: None,
        },
    ])
    .unwrap();
    let r = judge(&rs, "t").unwrap();
    assert_eq!(
        r.topology.unwrap().p2p[0][1],
        ddpcheck_core::topology::P2pStatus::NotSupported
    );
}

/// Two H100 PCIe without bridges list their 12 links, all inactive: no bridge, not links down
/// (leptonai/gpud PR#1147's false alarm).
#[test]
fn pcie_cards_without_bridges_are_not_links_down() {
    let rs = read_all(&[
        Source {
            path: fixtures().join("nodes/h100pcie-nvbridge-x2/smi-q.txt"),
            wanted: None,
        },
        Source {
            path: fixtures().join("formats/nvlink_status/h100pcie-x2-no-bridge-all-inactive.txt"),
            wanted: None,
        },
    ])
    .unwrap();
    let r = judge(&rs, "t").unwrap();
    assert_eq!(r.gpus[0].health.nvlinks_present, Some(12));
    assert!(
        !kinds(&r).contains(&CauseKind::NvlinkDown),
        "{:?}",
        kinds(&r)
    );
    assert_eq!(r.verdict.as_str(), "ok", "{}", r.reason);
}

/// Fabric State `In Progress` in `nvidia-smi -q` on an NVSwitch system (NVIDIA/NVSentinel#883)
/// is Fabric Manager down, with its fix; `N/A` (PCIe cards, no fabric) is nothing.
#[test]
fn fabric_registration_in_progress_is_fabric_manager_down() {
    let q = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(
        "../fixtures/field-cases/nvsentinel-883-h100-fabric-manager-down/artifacts/smi-q.txt",
    );
    let r = judge(
        &read_all(&[Source {
            path: q,
            wanted: None,
        }])
        .unwrap(),
        "t",
    )
    .unwrap();
    let c = r
        .causes
        .iter()
        .find(|c| c.kind == CauseKind::FabricManagerDown)
        .unwrap_or_else(|| panic!("{:?}", kinds(&r)));
    assert!(c.fix.contains("nvidia-fabricmanager"), "{}", c.fix);
    assert_eq!(r.verdict.as_str(), "critical", "{}", r.reason);
    let na = report("pcie-pair-log-only-shm");
    assert!(
        !kinds(&na).contains(&CauseKind::FabricManagerDown),
        "{:?}",
        kinds(&na)
    );
}

/// A cut `nvlink -s` naming one of the three GPUs a topo matrix shows is part of the same node
/// (NVIDIA/nccl#1608), not two nodes' files: judged, the GPU it names given its links.
#[test]
fn an_nvlink_listing_of_some_of_the_gpus_is_the_same_node() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/field-cases/nccl-1608-h100nvl-nv12-by-design/artifacts");
    let r = judge(&read_all(&folder_sources(&dir).unwrap()).unwrap(), "t").unwrap();
    assert_eq!(r.gpus.len(), 3);
    assert_eq!(r.gpus[0].health.nvlinks_active, Some(12));
    assert_eq!(r.gpus[0].name, "NVIDIA H100 NVL");
    assert_eq!(r.gpus[2].health.nvlinks_active, None);
    assert!(
        !kinds(&r).contains(&CauseKind::NvlinkDown),
        "{:?}",
        kinds(&r)
    );
}

/// A log alone names no GPU of the node, but sockets between nodes where an IB plugin was
/// loaded are a fault found in what was read: a warning, not `unknown`.
#[test]
fn sockets_where_rdma_was_expected_are_a_warning_from_a_log_alone() {
    let log = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/field-cases/nccl-952-ib-not-found-net-socket/artifacts/nccl-debug.log");
    let r = judge(&one(&log, None), "t").unwrap();
    assert_eq!(kinds(&r), vec![CauseKind::NetSocketInsteadOfRdma]);
    assert_eq!(r.verdict, "warning");
    assert!(r.reason.contains("NET/Socket"), "{}", r.reason);
}

/// The operator's GPU count is set against an inventory of the node (`nvidia-smi -q`, `topo -m`)
/// only: the GPUs a job's files name (nccl-tests, NCCL's log) are those it used, so there the
/// count is said undecided, never a GPU missing.
#[test]
fn a_jobs_files_are_no_inventory_for_the_gpu_count() {
    use ddpcheck_artifacts::judge::{judge_expecting, Expectations};
    let x = Expectations { gpus: Some(9) };
    let f = fixtures().join("formats/nccl_tests/h100x8-2.13.txt");
    let r = judge_expecting(&one(&f, None), "t", x).unwrap();
    assert!(!r.gpus.is_empty());
    assert!(
        !kinds(&r).contains(&CauseKind::GpuMissing),
        "{:?}",
        kinds(&r)
    );
    assert!(
        r.undecided
            .iter()
            .any(|u| u.starts_with("--expect-gpus 9: no nvidia-smi -q or topo -m")),
        "{:?}",
        r.undecided
    );
    let r = judge_expecting(&reads("a6000x2-phb-p2p-forced"), "t", x).unwrap();
    assert!(
        kinds(&r).contains(&CauseKind::GpuMissing),
        "{:?}",
        kinds(&r)
    );
    assert_eq!(r.verdict, "critical");
}

/// The numeric tuning lines of NCCL before 2.19 name no collective: they are taken as the
/// all-reduce's only inside an all-reduce run's own file, never from a log given apart (a
/// training job's mixes collectives).
#[test]
fn numbered_tuning_lines_count_only_inside_an_all_reduce_run() {
    let dir = std::env::temp_dir().join(format!("ddpcheck-tuning-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = std::fs::read_to_string(fixtures().join("nodes/a6000x2-phb-p2p-forced/all-reduce.txt"))
        .unwrap()
        .replacen(
            "ws:31337:31337 [0] NCCL INFO Connected all rings\n",
            "ws:31337:31337 [0] NCCL INFO Connected all rings\nws:31337:31337 [0] NCCL INFO 268435456 Bytes -> Algo 1 proto 2 time 1180.5\n",
            1,
        );
    let f = dir.join("run.txt");
    std::fs::write(&f, &run).unwrap();
    let a = assemble(&one(&f, None)).unwrap();
    assert_eq!(a.algo_proto.as_deref(), Some("Ring/Simple"));
    let log = dir.join("train.log");
    std::fs::write(
        &log,
        "h:1:2 [0] NCCL INFO NCCL version 2.18.5+cuda12.2\nh:1:2 [0] NCCL INFO 268435456 Bytes -> Algo 1 proto 2 time 1180.5\n",
    )
    .unwrap();
    let apart = assemble(&one(&log, None)).unwrap().algo_proto;
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(apart, None);
}

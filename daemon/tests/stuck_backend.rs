//! Invariant 2 at the daemon level: a backend whose inventory call stops returning (NVML hung in
//! the kernel) never blocks a reader. `/metrics` and gRPC reads answer from the last snapshot,
//! the GPUs are marked stuck, and the snapshot's age keeps growing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ddpcheck_core::backend::{CollectiveRequest, CollectiveRun, Progress};
use ddpcheck_core::cluster::ClusterMember;
use ddpcheck_core::ddp::{DdpRequest, DdpResult};
use ddpcheck_core::explain::platform::PlatformReader;
use ddpcheck_core::hostcopy::HostCopier;
use ddpcheck_core::node_gpus::{GpuInfo, NodeInventory};
use ddpcheck_core::topology::TopologyMatrix;
use ddpcheck_core::{BackendKind, NodeBackend, ProbeError};
use ddpcheck_proto::v1::GetNodeRequest;
use ddpcheck_sim::SimBackend;
use ddpcheckd::run::{self, DaemonConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Answers its first inventory call, then hangs in every later one (bounded here, so the test
/// process can end).
struct HangsAfterFirst {
    sim: SimBackend,
    calls: AtomicUsize,
}

const HANG: Duration = Duration::from_secs(3);

impl NodeBackend for HangsAfterFirst {
    fn kind(&self) -> BackendKind {
        self.sim.kind()
    }
    fn label(&self) -> String {
        self.sim.label()
    }
    fn inventory(&self) -> Result<NodeInventory, ProbeError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) > 0 {
            std::thread::sleep(HANG);
        }
        self.sim.inventory()
    }
    fn topology(&self, gpus: &[GpuInfo]) -> Result<TopologyMatrix, ProbeError> {
        self.sim.topology(gpus)
    }
    fn collectives(
        &self,
        req: &CollectiveRequest,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<CollectiveRun, ProbeError> {
        self.sim.collectives(req, progress)
    }
    fn ddp(
        &self,
        req: &DdpRequest,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Vec<DdpResult>, ProbeError> {
        self.sim.ddp(req, progress)
    }
}

// The capabilities this double lacks answer their defaults ("not done by this backend").
impl HostCopier for HangsAfterFirst {}
impl PlatformReader for HangsAfterFirst {}
impl ClusterMember for HangsAfterFirst {}

async fn scrape(addr: std::net::SocketAddr) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    buf
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_inventory_never_blocks_readers_and_marks_gpus_stuck() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(HangsAfterFirst {
        sim: SimBackend::parse("h200x2-nvlink").unwrap(),
        calls: AtomicUsize::new(0),
    });
    let cfg = DaemonConfig {
        metrics_addr: Some("127.0.0.1:0".parse().unwrap()),
        collect_interval: Duration::from_millis(50),
        collect_deadline: Duration::from_millis(300),
        ..DaemonConfig::in_dir(dir.path())
    };
    let running = run::start(cfg, backend).await.unwrap();
    let addr = running.metrics_addr.unwrap();

    // The second collection hangs; past its deadline the GPUs are marked stuck.
    let t0 = Instant::now();
    loop {
        let m = scrape(addr).await;
        if m.lines()
            .any(|l| l.starts_with("ddpcheck_gpu_probe_stuck{") && l.ends_with(" 1"))
        {
            assert!(
                m.contains("ddpcheck_collector_success{collector=\"inventory\",backend=\"sim\"} 0"),
                "{m}"
            );
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "stuck gauge never set:\n{m}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // While the backend hangs, every read answers promptly from the snapshot.
    let mut client = ddpcheck_client::connect(&running.socket.display().to_string())
        .await
        .unwrap();
    let mut worst = Duration::ZERO;
    let mut ages = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        let m = scrape(addr).await;
        assert!(m.contains("ddpcheck_snapshot_age_seconds"));
        worst = worst.max(t.elapsed());
        let t = Instant::now();
        let node = client
            .get_node(GetNodeRequest {})
            .await
            .unwrap()
            .into_inner();
        worst = worst.max(t.elapsed());
        assert!(
            node.inventory_json.contains("\"state\":\"stuck\""),
            "{}",
            node.inventory_json
        );
        ages.push(node.age_seconds);
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert!(
        worst < Duration::from_millis(100),
        "a read took {worst:?} while the backend hung"
    );
    assert!(
        ages.windows(2).all(|w| w[1] > w[0]),
        "snapshot age must keep growing: {ages:?}"
    );
    running.shutdown().await;
}

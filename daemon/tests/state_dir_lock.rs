//! One daemon per state folder: a second daemon on a state folder a live one uses is refused at
//! start, and leaves the first one's run in flight `running` (not `interrupted`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

use std::sync::Arc;
use std::time::{Duration, Instant};

use ddpcheck_proto::v1::PreflightRequest;
use ddpcheck_sim::SimBackend;
use ddpcheckd::run::{self, DaemonConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_daemon_on_the_same_state_folder_is_refused_and_marks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let sim = || Arc::new(SimBackend::parse("h200x2-nvlink+hang").unwrap());
    let first = run::start(DaemonConfig::in_dir(dir.path()), sim())
        .await
        .unwrap();
    let mut client = ddpcheck_client::connect(&first.socket.display().to_string())
        .await
        .unwrap();
    // A run that hangs until its 2 s deadline: `running` in the history meanwhile.
    let mut stream = client
        .run_preflight(PreflightRequest {
            deadline_seconds: 2.0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let status = |node: &ddpcheckd::node::Node| {
        node.with_history(|h| h.recent("preflight", None, 1).unwrap())
            .first()
            .map(|r| r.status.clone())
    };
    let t0 = Instant::now();
    while status(&first.node).as_deref() != Some("running") {
        assert!(t0.elapsed() < Duration::from_secs(5), "no running row");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let other = tempfile::tempdir().unwrap();
    let second = DaemonConfig {
        state_dir: dir.path().join("state"),
        ..DaemonConfig::in_dir(other.path())
    };
    let err = match run::start(second, sim()).await {
        Ok(r) => {
            r.shutdown().await;
            panic!("a second daemon started on the same state folder");
        }
        Err(e) => e.to_string(),
    };
    assert!(err.contains("another ddpcheckd"), "{err}");
    assert!(
        err.contains(&dir.path().join("state").display().to_string()),
        "{err}"
    );
    assert_eq!(status(&first.node).as_deref(), Some("running"));

    while stream.message().await.is_ok_and(|m| m.is_some()) {}
    first.shutdown().await;
    // The folder is free again once the first daemon stopped.
    let again = DaemonConfig {
        state_dir: dir.path().join("state"),
        ..DaemonConfig::in_dir(other.path())
    };
    run::start(again, sim()).await.unwrap().shutdown().await;
}

//! Single flight must not refuse a caller's *next* call: a client that starts a new run as soon
//! as it holds the previous report must never get BUSY, because the lock is released before the
//! report is delivered. The release-build demo (preflight, sweep, DDP back to back) hit this race
//! when the release came after the report; this test runs 100 such calls back to back, which
//! catches a release moved after slow work but cannot force the scheduling of the original race.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

use ddpcheck_proto::v1::{work_event, PreflightRequest};
use ddpcheck_sim::SimBackend;
use ddpcheckd::run::{self, DaemonConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_to_back_work_calls_are_never_busy() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = DaemonConfig::in_dir(dir.path());
    let backend = std::sync::Arc::new(SimBackend::parse("h200x2-nvlink").unwrap());
    let running = run::start(cfg, backend).await.unwrap();
    let mut client = ddpcheck_client::connect(&running.socket.display().to_string())
        .await
        .unwrap();
    for i in 0..100 {
        let mut stream = client
            .run_preflight(PreflightRequest::default())
            .await
            .unwrap_or_else(|s| panic!("call {i}: {s}"))
            .into_inner();
        let mut got_report = false;
        while let Some(ev) = stream
            .message()
            .await
            .unwrap_or_else(|s| panic!("call {i}: {s}"))
        {
            if let Some(work_event::Event::Report(r)) = ev.event {
                assert_eq!(r.verdict, "OK");
                got_report = true;
                break; // start the next call at once, as a client would
            }
        }
        assert!(got_report, "call {i} ended without a report");
    }
    running.shutdown().await;
}

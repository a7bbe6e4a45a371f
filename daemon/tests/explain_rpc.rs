//! The `Explain` call on an in-process daemon over a simulated node: progress, then the report
//! with its verdict, stored in the history; bad requests are INVALID_ARGUMENT and the daemon
//! goes on answering.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use common::daemon;

use ddpcheck_core::report::ExplainReport;
use ddpcheck_proto::v1::ddpcheck_client::DdpcheckClient;
use ddpcheck_proto::v1::{work_event, ExplainRequest, GetHistoryRequest, GetNodeRequest, Report};
use tonic::transport::Channel;

/// The call's progress stages and its report, or the status it ended with.
async fn explain(
    c: &mut DdpcheckClient<Channel>,
    req: ExplainRequest,
) -> Result<(Vec<String>, Report), tonic::Status> {
    let mut stream = c.explain(req).await?.into_inner();
    let mut stages = Vec::new();
    while let Some(ev) = stream.message().await? {
        match ev.event {
            Some(work_event::Event::Progress(p)) => stages.push(p.stage),
            Some(work_event::Event::Report(r)) => return Ok((stages, r)),
            None => {}
        }
    }
    panic!("the stream ended without a report");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_streams_progress_then_its_judged_report_and_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let (running, mut c) = daemon("h200x2-nvlink+degraded-pcie", dir.path()).await;
    let (stages, r) = explain(&mut c, ExplainRequest::default()).await.unwrap();
    assert!(stages.iter().any(|s| s == "pairs"), "{stages:?}");
    assert_eq!(
        (r.kind.as_str(), r.verdict.as_str()),
        ("explain", "WARNING")
    );
    assert_eq!(r.exit_code, 1);
    let report: ExplainReport = serde_json::from_str(&r.json).unwrap();
    assert_eq!(report.measurements.len(), 1);
    assert!(
        report
            .explanation
            .all_causes()
            .any(|c| c.kind.as_str() == "pcie_downtrained"),
        "{}",
        report.reason
    );

    let stored = c
        .get_history(GetHistoryRequest {
            kind: "explain".into(),
            limit: 5,
        })
        .await
        .unwrap()
        .into_inner()
        .reports;
    assert_eq!(stored.len(), 1);
    assert_eq!(
        (stored[0].status.as_str(), stored[0].exit_code),
        ("complete", 1)
    );
    assert_eq!(stored[0].json, r.json);
    // The causes it found are the node's cause metric now.
    let scrape = running.node.metrics.encode();
    let cause = scrape
        .lines()
        .find(|l| l.starts_with("ddpcheck_bandwidth_cause{") && l.contains("pcie_downtrained"));
    assert!(cause.is_some_and(|l| l.ends_with(" 1")), "{scrape}");
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_explain_requests_are_invalid_argument_and_the_daemon_lives_on() {
    let dir = tempfile::tempdir().unwrap();
    let (running, mut c) = daemon("h200x2-nvlink", dir.path()).await;
    let bad = [
        ExplainRequest {
            deadline_seconds: -1.0,
            ..Default::default()
        },
        ExplainRequest {
            deadline_seconds: f64::NAN,
            ..Default::default()
        },
        ExplainRequest {
            max_bytes: u64::MAX,
            ..Default::default()
        },
        ExplainRequest {
            gpus: "0,".repeat(4000),
            ..Default::default()
        },
        // Well formed, but no such GPU: refused by the run, still INVALID_ARGUMENT.
        ExplainRequest {
            gpus: "7".into(),
            ..Default::default()
        },
    ];
    for req in bad {
        let what = format!("{req:?}");
        let e = explain(&mut c, req).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{what}: {e}");
        assert!(!e.message().is_empty(), "{what}");
    }
    // Each refusal left the node free and the daemon answering.
    c.get_node(GetNodeRequest {}).await.unwrap();
    let (_, r) = explain(&mut c, ExplainRequest::default()).await.unwrap();
    assert_eq!(r.verdict, "OK");
    running.shutdown().await;
}

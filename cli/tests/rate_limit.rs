//! Rate limit of work-starting calls, end to end: the real `ddpcheckd` (simulated node) with
//! `--work-rate-per-minute 1 --work-burst 3` takes exactly three work calls, refuses the rest with
//! RESOURCE_EXHAUSTED "rate limited: ..." (not BUSY), counts them in
//! `ddpcheck_work_rate_limited_total`, and a call refused as BUSY uses no token. Cluster phases
//! are single flight only (a cluster check makes many phase calls per node within seconds). With
//! the limit off (0) every call runs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use std::time::Instant;

use common::{code, stderr, Daemon};
use ddpcheck_core::ddp::ModelSpec;
use ddpcheck_proto::v1::ddpcheck_client::DdpcheckClient;
use ddpcheck_proto::v1::{
    work_event, BenchCollectivesRequest, BenchDdpRequest, ClusterCollectiveRequest, ModelChoice,
    PreflightRequest,
};
use tonic::transport::Channel;
use tonic::{Code, Status};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A work call's outcome: the report's kind and verdict, or the refusal.
type Outcome = Result<(String, String), Status>;

/// Reads a work call's stream to its report.
async fn finish(
    r: Result<tonic::Response<tonic::Streaming<ddpcheck_proto::v1::WorkEvent>>, Status>,
) -> Outcome {
    let mut stream = r?.into_inner();
    let mut report = None;
    while let Some(ev) = stream.message().await? {
        if let Some(work_event::Event::Report(r)) = ev.event {
            report = Some((r.kind, r.verdict));
        }
    }
    Ok(report.expect("a started call ends with a report"))
}

async fn preflight(c: &mut DdpcheckClient<Channel>) -> Outcome {
    finish(c.run_preflight(PreflightRequest::default()).await).await
}

async fn collectives(c: &mut DdpcheckClient<Channel>) -> Outcome {
    let req = BenchCollectivesRequest {
        ops: vec!["all_reduce".into()],
        min_bytes: 1 << 20,
        max_bytes: 4 << 20,
        ..Default::default()
    };
    finish(c.bench_collectives(req).await).await
}

async fn ddp(c: &mut DdpcheckClient<Channel>) -> Outcome {
    let req = BenchDdpRequest {
        models: vec![ModelChoice::from(&ModelSpec::gpt2_124m())],
        ..Default::default()
    };
    finish(c.bench_ddp(req).await).await
}

async fn cluster_prepare(c: &mut DdpcheckClient<Channel>) -> Result<(), Status> {
    let req = ClusterCollectiveRequest {
        phase: "prepare".into(),
        run_id: "rate-limit-test".into(),
        rank: 0,
        world_nodes: 2,
        gpus_per_node: 2,
        min_bytes: 1 << 20,
        max_bytes: 8 << 20,
        iters: 5,
        deadline_seconds: 10.0,
        ..Default::default()
    };
    c.cluster_collective(req).await.map(|_| ())
}

/// Asserts a refusal by the rate limit and returns its "retry in" seconds.
fn rate_limited(r: Result<(), Status>, call: &str) -> f64 {
    let s = r.expect_err("over the limit: refused");
    assert_eq!(s.code(), Code::ResourceExhausted, "{call}: {s:?}");
    let prefix =
        format!("rate limited: 1 work calls per minute (burst 3); {call} not started; retry in ");
    let m = s.message();
    let secs = m
        .strip_prefix(&prefix)
        .and_then(|r| r.strip_suffix(" s"))
        .unwrap_or_else(|| panic!("{call}: unexpected message {m:?}"));
    secs.parse::<f64>()
        .unwrap_or_else(|_| panic!("{call}: retry time in {m:?}"))
}

fn count(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{series} missing:\n{metrics}"))
}

/// The sim node's `ddpcheck_work_runs_total` of `call` that ended ok.
fn runs_ok(m: &str, call: &str) -> u64 {
    count(
        m,
        &format!("ddpcheck_work_runs_total{{call=\"{call}\",outcome=\"ok\",backend=\"sim\"}}"),
    )
}

#[test]
fn three_calls_run_then_preflights_and_benchmarks_are_rate_limited_and_busy_costs_no_token() {
    let d = Daemon::start_with(
        Some("h200x2-nvlink"),
        &["--work-rate-per-minute", "1", "--work-burst", "3"],
    );
    let socket = d.addr();
    let t0 = Instant::now();
    let retries = runtime().block_on(async move {
        let mut a = ddpcheck_client::connect(&socket).await.unwrap();
        let mut b = ddpcheck_client::connect(&socket).await.unwrap();
        // 1. A preflight that hangs to its 1.5 s deadline holds the node...
        let hung = PreflightRequest {
            inject_hang: true,
            deadline_seconds: 1.5,
            ..Default::default()
        };
        let first = a.run_preflight(hung).await;
        // 2. ...so a second call is BUSY, which must not use up a token.
        let busy = collectives(&mut b)
            .await
            .expect_err("BUSY while the node is held");
        assert_eq!(busy.code(), Code::ResourceExhausted, "{busy:?}");
        assert!(busy.message().starts_with("BUSY: "), "{busy:?}");
        assert_eq!(
            finish(first).await.unwrap(),
            ("preflight".into(), "TIMEOUT".into())
        );
        // 3. Two more calls, one after the other: the burst of 3 is used.
        assert_eq!(
            preflight(&mut a).await.unwrap(),
            ("preflight".into(), "OK".into())
        );
        assert_eq!(collectives(&mut a).await.unwrap().0, "bench_collectives");
        // 4. Every kind of work call is now refused by the limit, with the time to wait.
        let mut retries = Vec::new();
        retries.push(rate_limited(preflight(&mut a).await.map(drop), "preflight"));
        retries.push(rate_limited(
            collectives(&mut a).await.map(drop),
            "bench_collectives",
        ));
        retries.push(rate_limited(ddp(&mut a).await.map(drop), "bench_ddp"));
        // 5. A cluster phase is not rate limited (whatever the simulated node answers).
        if let Err(s) = cluster_prepare(&mut a).await {
            assert!(!s.message().starts_with("rate limited"), "{s:?}");
        }
        retries
    });
    let elapsed = t0.elapsed().as_secs_f64();
    eprintln!("rate_limit: retry in {retries:?} s after {elapsed:.2} s");
    // One token a minute: the next one is due 60 s after the first call, less the time spent.
    for r in &retries {
        assert!(
            *r > 0.0 && *r <= 60.0 && *r >= 60.0 - elapsed - 0.2,
            "retry in {r} s after {elapsed:.2} s"
        );
    }
    assert!(
        elapsed < 30.0,
        "the test must finish well inside one refill"
    );

    // The CLI (a Slurm prolog's `ddpcheck check`) reports it as BUSY (exit 4), saying why.
    let o = d.cli(&["check"]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("rate limited: 1 work calls per minute"),
        "{}",
        stderr(&o)
    );

    let m = d.scrape();
    for (call, n) in [("preflight", 2), ("bench_collectives", 1), ("bench_ddp", 1)] {
        assert_eq!(
            count(
                &m,
                &format!("ddpcheck_work_rate_limited_total{{call=\"{call}\",backend=\"sim\"}}")
            ),
            n,
            "{call}"
        );
    }
    // The BUSY refusal is counted as BUSY only.
    assert_eq!(
        count(
            &m,
            "ddpcheck_work_rejected_total{call=\"bench_collectives\",backend=\"sim\"}"
        ),
        1
    );
    assert_eq!(
        count(
            &m,
            "ddpcheck_work_rejected_total{call=\"preflight\",backend=\"sim\"}"
        ),
        0
    );
    assert_eq!(runs_ok(&m, "preflight"), 2);
    assert_eq!(runs_ok(&m, "bench_collectives"), 1);
    assert_eq!(runs_ok(&m, "bench_ddp"), 0);
    d.stop();
}

#[test]
fn zero_turns_the_limit_off() {
    let d = Daemon::start_with(Some("h200x2-nvlink"), &["--work-rate-per-minute", "0"]);
    let socket = d.addr();
    let n = 15;
    let outcomes = runtime().block_on(async move {
        let mut c = ddpcheck_client::connect(&socket).await.unwrap();
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(preflight(&mut c).await);
        }
        out
    });
    for o in &outcomes {
        assert_eq!(
            o.as_ref().map_err(|s| s.message().to_string()),
            Ok(&("preflight".to_string(), "OK".to_string()))
        );
    }
    let m = d.scrape();
    assert_eq!(runs_ok(&m, "preflight"), n);
    assert_eq!(
        count(
            &m,
            "ddpcheck_work_rate_limited_total{call=\"preflight\",backend=\"sim\"}"
        ),
        0
    );
    d.stop();
}

#[test]
fn bad_limits_are_refused_at_start_with_one_line() {
    for args in [
        ["--work-rate-per-minute=-1", "work_rate_per_minute"],
        ["--work-burst=0", "work_burst"],
        ["--work-burst=2.5", "--work-burst"],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let bin = common::bin("ddpcheckd");
        let o = ddpcheck_testkit::daemon::sim_daemon(
            &bin,
            "h200x2-nvlink",
            dir.path(),
            dir.path().join("d.sock"),
        )
        .arg(args[0])
        .output()
        .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(args[1]), "{args:?}: {err}");
    }
}

//! Slow and silent peers hold nothing for long: a `/metrics` peer that sends nothing is closed
//! within the header timeout, one that sends half a request too, and one that reads its answers
//! too slowly within the idle (write) timeout; a control-socket peer that sends nothing, or only
//! HTTP/2's preface, within the handshake and idle timeouts. 256 silent peers of each listener
//! at once stop no scrape and no gRPC read. The timeouts are the daemon's, set short here.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use ddpcheck_proto::v1::GetNodeRequest;
use ddpcheck_sim::SimBackend;
use ddpcheckd::limits::PeerTimeouts;
use ddpcheckd::run::{self, DaemonConfig, Running};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

const TIMEOUTS: PeerTimeouts = PeerTimeouts {
    header: Duration::from_millis(300),
    idle: Duration::from_millis(800),
    handshake: Duration::from_millis(300),
    keepalive_interval: Duration::from_millis(300),
    keepalive_timeout: Duration::from_millis(300),
};

/// How long past its timeout a held connection may stay open (two busy cores).
const SLACK: Duration = Duration::from_millis(1500);

/// Silent peers of each kind; fewer that send half a request or only the preface, so that all
/// of them together stay under `/metrics`' cap of 512 connections.
const PEERS: usize = 256;
const HALF: usize = 64;

async fn start(dir: &Path) -> Running {
    let _ = ddpcheckd::limits::raise_nofile();
    let mut cfg = DaemonConfig::in_dir(dir);
    cfg.metrics_addr = Some("127.0.0.1:0".parse().unwrap());
    let backend = std::sync::Arc::new(SimBackend::parse("h200x2-nvlink").unwrap());
    let opts = run::Options {
        peer_timeouts: TIMEOUTS,
        ..run::Options::default()
    };
    run::start_with_options(cfg, opts, backend).await.unwrap()
}

/// One plain scrape on a fresh connection: its status line, within 2 s.
async fn scrape(addr: SocketAddr) -> String {
    let go = async {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).await.unwrap();
        String::from_utf8_lossy(&answer)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    };
    tokio::time::timeout(Duration::from_secs(2), go)
        .await
        .expect("a scrape within 2 s")
}

async fn get_node(socket: &Path) {
    let go = async {
        let mut c = ddpcheck_client::connect(&socket.display().to_string())
            .await
            .unwrap();
        c.get_node(GetNodeRequest {}).await.unwrap();
    };
    tokio::time::timeout(Duration::from_secs(2), go)
        .await
        .expect("GetNode within 2 s");
}

/// Whether the daemon closed `s` within `bound`: what it sent before is read and dropped, then
/// the end of the stream (or a reset) must come.
async fn closed_within<S: tokio::io::AsyncRead + Unpin>(s: &mut S, bound: Duration) -> bool {
    let end = Instant::now() + bound;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_peers_are_closed_within_their_timeouts_and_stop_no_scrape() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path()).await;
    let metrics = d.metrics_addr.unwrap();
    let began = Instant::now();
    let mut zero = Vec::new();
    let mut half = Vec::new();
    let mut control = Vec::new();
    let mut preface = Vec::new();
    for i in 0..PEERS {
        zero.push(TcpStream::connect(metrics).await.unwrap());
        control.push(UnixStream::connect(&d.socket).await.unwrap());
        if i < HALF {
            let mut s = TcpStream::connect(metrics).await.unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\n").await.unwrap();
            half.push(s);
            let mut s = UnixStream::connect(&d.socket).await.unwrap();
            s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                .await
                .unwrap();
            preface.push(s);
        }
    }
    assert!(scrape(metrics).await.contains(" 200 "));
    get_node(&d.socket).await;
    let opened = began.elapsed();
    for (what, bound, list) in [
        (
            "a /metrics peer that sends nothing",
            TIMEOUTS.header,
            &mut zero,
        ),
        (
            "a /metrics peer that sends half a request",
            TIMEOUTS.header,
            &mut half,
        ),
    ] {
        for s in list.iter_mut() {
            let left = (opened + bound + SLACK).saturating_sub(began.elapsed());
            assert!(closed_within(s, left).await, "{what} is still open");
        }
    }
    for (what, bound, list) in [
        (
            "a control-socket peer that sends nothing",
            TIMEOUTS.handshake,
            &mut control,
        ),
        (
            "a control-socket peer that sends only the preface",
            TIMEOUTS.idle,
            &mut preface,
        ),
    ] {
        for s in list.iter_mut() {
            let left = (opened + bound + SLACK).saturating_sub(began.elapsed());
            assert!(closed_within(s, left).await, "{what} is still open");
        }
    }
    assert!(scrape(metrics).await.contains(" 200 "));
    get_node(&d.socket).await;
    d.shutdown().await;
}

/// A reader that takes none of its answers: many requests on one connection whose receive
/// buffer is small, so the daemon's writes wait on it; it is closed within the idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_too_slow_for_the_write_timeout_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path()).await;
    let metrics = d.metrics_addr.unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut s = socket.connect(metrics).await.unwrap();
    let requests = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(2000);
    // The daemon stops reading once its answers wait; what it does not take is not waited on.
    let _ = tokio::time::timeout(Duration::from_secs(1), s.write_all(&requests)).await;
    tokio::time::sleep(TIMEOUTS.idle + SLACK).await;
    assert!(
        closed_within(&mut s, Duration::from_secs(2)).await,
        "the slow reader is still open"
    );
    assert!(scrape(metrics).await.contains(" 200 "));
    d.shutdown().await;
}

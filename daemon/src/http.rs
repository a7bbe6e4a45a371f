//! The HTTP side: `/metrics` (Prometheus text format, from the snapshot only) and `/healthz`,
//! optionally behind TLS and basic auth (the exporter-toolkit web configuration, see
//! [`crate::web_config`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::limits::{self, PeerTimeouts};
use crate::node::Node;
use crate::watched::Watched;
use crate::web_config::{Auth, WebConfig};

/// The snapshot's age without copying it (`Node::snapshot_age` clones the whole snapshot,
/// inventory and topology, for one `Instant`).
fn snapshot_age(node: &Node) -> Duration {
    match node.snapshot.read() {
        Ok(s) => s.taken.elapsed(),
        Err(p) => p.into_inner().taken.elapsed(),
    }
}

async fn metrics(State(node): State<Arc<Node>>) -> impl IntoResponse {
    let body = node.metrics.scrape(snapshot_age(&node).as_secs_f64());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
}

async fn healthz(State(node): State<Arc<Node>>) -> impl IntoResponse {
    let age = snapshot_age(&node).as_secs_f64();
    format!("ok snapshot_age_seconds={age:.1}\n")
}

async fn index() -> impl IntoResponse {
    "ddpcheckd: see /metrics\n"
}

pub fn router(node: Arc<Node>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/", get(index))
        .with_state(node)
}

/// Every path answers 401 with `WWW-Authenticate: Basic` unless the request carries the
/// credentials of a configured user (as exporter-toolkit: all paths are protected).
async fn basic_auth(State(web): State<Arc<WebConfig>>, req: Request, next: Next) -> Response {
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes().to_vec());
    let w = web.clone();
    // bcrypt takes tens of milliseconds on a miss of the cache: off the async threads.
    let verdict = tokio::task::spawn_blocking(move || w.check_authorization(header.as_deref()))
        .await
        .unwrap_or(Auth::Denied);
    match verdict {
        Auth::Ok => next.run(req).await,
        Auth::Denied => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic")],
            "Unauthorized\n",
        )
            .into_response(),
    }
}

/// The router with the web configuration's basic auth applied, when it has users.
pub fn app(node: Arc<Node>, web: Option<&Arc<WebConfig>>) -> Router {
    let app = router(node);
    match web {
        Some(w) if w.auth_required() => {
            app.layer(middleware::from_fn_with_state(w.clone(), basic_auth))
        }
        _ => app,
    }
}

/// Serves plain HTTP, no authentication (the behaviour without a web configuration).
pub async fn serve(listener: TcpListener, node: Arc<Node>, stop: watch::Receiver<bool>) {
    serve_with(listener, node, None, PeerTimeouts::default(), stop).await;
}

/// Serves `/metrics` on `listener` as the web configuration says: TLS and/or basic auth.
/// Every connection is bounded (see [`crate::limits`]): at most a share of the descriptors are
/// open at once (one more is closed at once), a request's first byte and headers must arrive
/// within the header timeout (counted from the connection's start: a peer that sends nothing
/// holds its place no longer), a TLS handshake within the handshake timeout, and a connection
/// whose read or write waits for the idle timeout is closed (a reader too slow for its answers
/// too). axum::serve has none of these bounds.
pub async fn serve_with(
    listener: TcpListener,
    node: Arc<Node>,
    web: Option<Arc<WebConfig>>,
    timeouts: PeerTimeouts,
    mut stop: watch::Receiver<bool>,
) {
    let app = app(node, web.as_ref());
    let tls = web.as_ref().and_then(|w| w.tls()).map(TlsAcceptor::from);
    let cap = limits::cap_now(limits::METRICS_MAX_CONNECTIONS);
    let open = Arc::new(Semaphore::new(cap));
    tracing::debug!("/metrics: at most {cap} connections");
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => return,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!("/metrics accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Past the cap the connection is closed at once, so that neither it nor the listen
        // backlog waits on the peers that hold the others.
        let Ok(permit) = open.clone().try_acquire_owned() else {
            tracing::debug!("/metrics: {cap} connections open; closing the one from {peer}");
            continue;
        };
        let greeting = if tls.is_some() {
            timeouts.handshake
        } else {
            timeouts.header
        };
        let io = Watched::new(tcp, greeting, timeouts.idle);
        let (app, tls, stop) = (app.clone(), tls.clone(), stop.clone());
        tokio::spawn(async move {
            let _permit = permit;
            match tls {
                None => serve_connection(io, app, peer, timeouts.header, stop).await,
                Some(acceptor) => {
                    match tokio::time::timeout(timeouts.handshake, acceptor.accept(io)).await {
                        Ok(Ok(s)) => serve_connection(s, app, peer, timeouts.header, stop).await,
                        Ok(Err(e)) => tracing::debug!("/metrics TLS handshake with {peer}: {e}"),
                        Err(_) => tracing::debug!("/metrics TLS handshake with {peer} timed out"),
                    }
                }
            }
        });
    }
}

/// Serves one connection with hyper's HTTP/1 + HTTP/2 builder and the router as its service,
/// until it ends or the daemon stops (then gracefully, for at most 5 s).
async fn serve_connection<I>(
    io: I,
    app: Router,
    peer: SocketAddr,
    header_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    builder.http2().timer(TokioTimer::new());
    let conn = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(app));
    tokio::pin!(conn);
    let stopping = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let stopped = tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!("/metrics connection from {peer}: {e}");
            }
            false
        }
        _ = stopping => true,
    };
    if stopped {
        conn.as_mut().graceful_shutdown();
        let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
    }
}

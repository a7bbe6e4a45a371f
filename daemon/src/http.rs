//! The HTTP side: `/metrics` (Prometheus text format, from the snapshot only) and `/healthz`,
//! optionally behind TLS and basic auth (the exporter-toolkit web configuration, see
//! [`crate::web_config`]).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::node::Node;
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
    serve_with(listener, node, None, stop).await;
}

/// Serves `/metrics` on `listener` as the web configuration says: TLS and/or basic auth.
pub async fn serve_with(
    listener: TcpListener,
    node: Arc<Node>,
    web: Option<Arc<WebConfig>>,
    mut stop: watch::Receiver<bool>,
) {
    let app = app(node, web.as_ref());
    if let Some(tls) = web.as_ref().and_then(|w| w.tls()) {
        serve_tls(listener, app, TlsAcceptor::from(tls), stop).await;
        return;
    }
    let shutdown = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
    {
        tracing::error!("/metrics server: {e}");
    }
}

/// A client that opens a connection and sends nothing does not hold a task for long.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// axum::serve speaks plain TCP only: accept, run the TLS handshake, then serve the connection
/// with hyper's HTTP/1 + HTTP/2 builder and the router as its service.
async fn serve_tls(
    listener: TcpListener,
    app: Router,
    acceptor: TlsAcceptor,
    mut stop: watch::Receiver<bool>,
) {
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
        let acceptor = acceptor.clone();
        let app = app.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
            {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!("/metrics TLS handshake with {peer}: {e}");
                    return;
                }
                Err(_) => return,
            };
            let builder = auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection(TokioIo::new(tls), TowerToHyperService::new(app));
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
        });
    }
}

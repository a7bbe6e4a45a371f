//! The HTTP side: `/metrics` (Prometheus text format, from the snapshot only) and `/healthz`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::node::Node;

async fn metrics(State(node): State<Arc<Node>>) -> impl IntoResponse {
    node.metrics
        .snapshot_age_seconds
        .set(node.snapshot_age().as_secs_f64());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        node.metrics.encode(),
    )
}

async fn healthz(State(node): State<Arc<Node>>) -> impl IntoResponse {
    let age = node.snapshot_age().as_secs_f64();
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

pub async fn serve(listener: TcpListener, node: Arc<Node>, mut stop: watch::Receiver<bool>) {
    let app = router(node);
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

//! The optional TCP listener of the control API, only with mutual TLS (client certificates
//! must chain to the configured CA). Bounded before anyone is authenticated: a capped number of
//! connections ([`crate::limits::TCP_MAX_CONNECTIONS`]) and a handshake timeout; after it,
//! HTTP/2 pings close connections whose peer is gone.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use ddpcheck_proto::v1::ddpcheck_server::DdpcheckServer;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use crate::error::DaemonError;
use crate::limits;
use crate::node::Node;
use crate::server::Service;

/// Server certificate and key, and the CA that client certificates must chain to.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: PathBuf,
}

fn read(path: &std::path::Path) -> Result<Vec<u8>, DaemonError> {
    use ddpcheck_core::bounded::{BoundedReadError, FileKind};
    ddpcheck_engine::read_service_file_bytes(path, FileKind::Pem).map_err(|e| DaemonError::Io {
        what: format!("reading {}", path.display()),
        source: match e {
            BoundedReadError::Io(source) => source,
            other => std::io::Error::new(std::io::ErrorKind::InvalidData, other.to_string()),
        },
    })
}

pub async fn serve_tcp(
    addr: SocketAddr,
    tls: &TlsFiles,
    node: Arc<Node>,
    timeouts: limits::PeerTimeouts,
    mut stop: watch::Receiver<bool>,
) -> Result<(SocketAddr, JoinHandle<()>), DaemonError> {
    let config = ServerTlsConfig::new()
        .identity(Identity::from_pem(read(&tls.cert)?, read(&tls.key)?))
        .client_ca_root(Certificate::from_pem(read(&tls.client_ca)?))
        .client_auth_optional(false)
        .timeout(timeouts.handshake);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| DaemonError::Io {
            what: format!("binding {addr}"),
            source,
        })?;
    let bound = listener.local_addr().map_err(|source| DaemonError::Io {
        what: "local address".into(),
        source,
    })?;
    let cap = limits::cap_now(limits::TCP_MAX_CONNECTIONS);
    tracing::debug!("TCP: at most {cap} connections");
    let incoming = crate::accept::tcp_capped(listener, cap, timeouts, stop.clone());
    let server = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(timeouts.keepalive_interval))
        .http2_keepalive_timeout(Some(timeouts.keepalive_timeout))
        .tls_config(config)
        .map_err(|e| DaemonError::Config(format!("TLS configuration: {e}")))?
        .add_service(DdpcheckServer::new(Service { node }))
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = stop.wait_for(|s| *s).await;
        });
    let task = tokio::spawn(async move {
        if let Err(e) = server.await {
            tracing::error!("gRPC (tcp) server: {e}");
        }
    });
    Ok((bound, task))
}

//! Connecting to a daemon: `unix:/path` (default) or `https://host:port` with a client certificate.

use std::path::PathBuf;

use ddpcheck_proto::v1::ddpcheck_client::DdpcheckClient;
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

#[derive(Debug, thiserror::Error)]
#[error("cannot reach ddpcheckd at {addr}: {reason}")]
pub struct ConnectError {
    pub addr: String,
    pub reason: String,
}

/// The default control socket.
pub const DEFAULT_SOCKET: &str = "/run/ddpcheck/ddpcheck.sock";

/// Connects to `addr`: a socket path, `unix:PATH`, or (mTLS) `https://host:port`.
pub async fn connect(addr: &str) -> Result<DdpcheckClient<Channel>, ConnectError> {
    let err = |reason: String| ConnectError {
        addr: addr.to_string(),
        reason,
    };
    if addr.starts_with("https://") || addr.starts_with("http://") {
        return Err(err(
            "TCP connections need a client certificate; use the Unix socket on the node (TLS client support: see docs/operations.md)".into(),
        ));
    }
    let path = PathBuf::from(addr.strip_prefix("unix:").unwrap_or(addr));
    if !path.exists() {
        return Err(err(format!(
            "{} does not exist (is ddpcheckd running?)",
            path.display()
        )));
    }
    // The URI is required by the API but unused: the connector dials the socket.
    let endpoint = Endpoint::try_from("http://[::1]:50051").map_err(|e| err(e.to_string()))?;
    let channel = endpoint
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let s = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(s))
            }
        }))
        .await
        .map_err(|e| err(format!("{e}")))?;
    Ok(DdpcheckClient::new(channel))
}

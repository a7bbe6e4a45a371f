//! ddpcheck-client: connecting to ddpcheckd's gRPC API, at `unix:/path` (default) or
//! `https://host:port` with a client certificate (mutual TLS). The CLI's daemon runner uses it;
//! the daemon itself is only the server.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ddpcheck_proto::v1::ddpcheck_client::DdpcheckClient;
use hyper_util::rt::TokioIo;
use tokio_rustls::rustls;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity, Uri};

mod access;

#[derive(Debug, thiserror::Error)]
#[error("cannot reach ddpcheckd at {addr}: {reason}")]
pub struct ConnectError {
    pub addr: String,
    pub reason: String,
    /// The settings are wrong (missing or unreadable TLS files, `http://`), not the daemon
    /// unreachable: the CLI exits 64 for these.
    pub usage: bool,
}

pub use ddpcheck_proto::DEFAULT_SOCKET;

/// Bound on TCP connect and TLS handshake: a refused or black-holed peer must not hang the CLI.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// HTTP/2 pings on every connection to the daemon, even while a call waits on a long run: a
/// daemon that answers none within [`KEEPALIVE_TIMEOUT`] is taken for gone and the call fails,
/// whatever the call's own deadline.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// An endpoint's bounds: connect, and the pings that tell a daemon that stopped answering.
fn bounded(endpoint: Endpoint) -> Endpoint {
    endpoint
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
}

/// The client side of the daemon's mutual TLS: PEM files of the CA that signed the daemon's
/// certificate, and of this client's certificate and key (signed by the daemon's client CA).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTls {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

impl ClientTls {
    pub const ENV_CA: &'static str = "DDPCHECK_CLI_TLS_CA";
    pub const ENV_CERT: &'static str = "DDPCHECK_CLI_TLS_CERT";
    pub const ENV_KEY: &'static str = "DDPCHECK_CLI_TLS_KEY";

    /// From `DDPCHECK_CLI_TLS_CA`, `DDPCHECK_CLI_TLS_CERT`, `DDPCHECK_CLI_TLS_KEY` (empty counts
    /// as unset). Not `DDPCHECK_TLS_*`: `DDPCHECK_TLS_CERT`/`_KEY` are the daemon's own server
    /// certificate settings, and `ddpcheck config check` reads them as such.
    pub fn from_env() -> ClientTls {
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        ClientTls {
            ca: var(Self::ENV_CA),
            cert: var(Self::ENV_CERT),
            key: var(Self::ENV_KEY),
        }
    }

    /// Reads the PEM files, or gives a one-line reason why not. Without a client certificate
    /// the handshake is still attempted, so that the refusal is the daemon's own.
    fn load(&self) -> Result<LoadedTls, TlsFileError> {
        let ca = self.ca.as_deref().ok_or(TlsFileError::NoCa)?;
        let ca = read_pem(ca, "--tls-ca")?;
        let identity = match (self.cert.as_deref(), self.key.as_deref()) {
            (Some(cert), Some(key)) => {
                Some((read_pem(cert, "--tls-cert")?, read_pem(key, "--tls-key")?))
            }
            (None, None) => None,
            (Some(_), None) => return Err(TlsFileError::CertWithoutKey),
            (None, Some(_)) => return Err(TlsFileError::KeyWithoutCert),
        };
        Ok(LoadedTls { ca, identity })
    }
}

/// Why the client's TLS settings give no configuration: a flag missing its partner, a file
/// that cannot be read or holds no usable PEM. A usage error (exit 64).
#[derive(Debug, thiserror::Error)]
pub enum TlsFileError {
    #[error(
        "https:// needs the CA certificate that signed ddpcheckd's certificate: set --tls-ca or {}",
        ClientTls::ENV_CA
    )]
    NoCa,
    #[error("--tls-cert needs its key: set --tls-key or {}", ClientTls::ENV_KEY)]
    CertWithoutKey,
    #[error(
        "--tls-key needs its certificate: set --tls-cert or {}",
        ClientTls::ENV_CERT
    )]
    KeyWithoutCert,
    #[error("{flag} {}: {error}", path.display())]
    Read {
        flag: &'static str,
        path: PathBuf,
        error: ddpcheck_core::bounded::BoundedReadError,
    },
    #[error("{flag} {}: not a PEM file", path.display())]
    NotPem { flag: &'static str, path: PathBuf },
    #[error("{flag}: {error}")]
    Pem {
        flag: &'static str,
        error: rustls::pki_types::pem::Error,
    },
    #[error("{flag}: no certificate in the file")]
    NoCertificate { flag: &'static str },
    /// rustls refused the settings: `what` names them (`--tls-ca`, `TLS settings`,
    /// `--tls-cert/--tls-key`).
    #[error("{what}: {error}")]
    Rustls {
        what: &'static str,
        error: rustls::Error,
    },
}

/// The PEM bytes of [`ClientTls`]: the CA, and the client's certificate chain and key.
struct LoadedTls {
    ca: Vec<u8>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl LoadedTls {
    fn tonic_config(&self, host: &str) -> ClientTlsConfig {
        let mut config = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .domain_name(host)
            .timeout(CONNECT_TIMEOUT);
        if let Some((cert, key)) = &self.identity {
            config = config.identity(Identity::from_pem(cert, key));
        }
        config
    }

    /// The same settings for the access check (tonic parses its PEMs late; this names the file).
    fn rustls_config(&self) -> Result<rustls::ClientConfig, TlsFileError> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let pem = |flag| move |error| TlsFileError::Pem { flag, error };
        let refused = |what| move |error| TlsFileError::Rustls { what, error };
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&self.ca) {
            roots
                .add(c.map_err(pem("--tls-ca"))?)
                .map_err(refused("--tls-ca"))?;
        }
        if roots.is_empty() {
            return Err(TlsFileError::NoCertificate { flag: "--tls-ca" });
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(refused("TLS settings"))?
            .with_root_certificates(roots);
        let mut config = match &self.identity {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(pem("--tls-cert"))?;
                if chain.is_empty() {
                    return Err(TlsFileError::NoCertificate { flag: "--tls-cert" });
                }
                let key = PrivateKeyDer::from_pem_slice(key).map_err(pem("--tls-key"))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(refused("--tls-cert/--tls-key"))?
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }
}

type Refusal = (bool, String);

/// Opens one TLS session and only listens: with TLS 1.3 the daemon judges the client
/// certificate after the client's handshake is done, so its refusal (an alert) arrives as the
/// first thing read, while an accepted client first receives the daemon's HTTP/2 SETTINGS.
/// Listening without writing makes that answer certain; a client that writes first may only
/// see a broken pipe.
async fn check_access(host: &str, port: u16, tls: &LoadedTls) -> Result<(), Refusal> {
    use tokio::io::AsyncReadExt;
    let config = tls.rustls_config().map_err(|r| (true, r.to_string()))?;
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| (true, format!("{host}: {e}")))?;
    let reach = |r: String| (false, r);
    let tcp = tokio::time::timeout(
        CONNECT_TIMEOUT,
        tokio::net::TcpStream::connect((host, port)),
    )
    .await
    .map_err(|_| reach(format!("no TCP connection within {CONNECT_TIMEOUT:?}")))?
    .map_err(|e| reach(e.to_string()))?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let mut stream = tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(name, tcp))
        .await
        .map_err(|_| reach(format!("no TLS handshake within {CONNECT_TIMEOUT:?}")))?
        .map_err(|e| reach(format!("TLS handshake failed: {e}")))?;
    let hint = match tls.identity {
        Some(_) => " (ddpcheckd accepts only client certificates signed by its --tls-client-ca)"
            .to_string(),
        None => format!(
            " (no client certificate given: set --tls-cert/--tls-key or {}/{})",
            ClientTls::ENV_CERT,
            ClientTls::ENV_KEY
        ),
    };
    let mut first = [0u8; 1];
    match tokio::time::timeout(CONNECT_TIMEOUT, stream.read(&mut first)).await {
        Ok(Ok(n)) if n > 0 => Ok(()),
        Ok(Ok(_)) => Err(reach(format!(
            "ddpcheckd closed the TLS session right after the handshake{hint}"
        ))),
        Ok(Err(e)) => Err(reach(format!(
            "ddpcheckd refused the TLS session: {e}{hint}"
        ))),
        Err(_) => Err(reach(format!(
            "no answer within {CONNECT_TIMEOUT:?} after the TLS handshake"
        ))),
    }
}

fn read_pem(path: &Path, flag: &'static str) -> Result<Vec<u8>, TlsFileError> {
    use ddpcheck_core::bounded::{read_bytes, FileKind};
    let bytes = std::fs::File::open(path)
        .map_err(Into::into)
        .and_then(|f| read_bytes(f, FileKind::Pem))
        .map_err(|error| TlsFileError::Read {
            flag,
            path: path.to_path_buf(),
            error,
        })?;
    if !String::from_utf8_lossy(&bytes).contains("-----BEGIN ") {
        return Err(TlsFileError::NotPem {
            flag,
            path: path.to_path_buf(),
        });
    }
    Ok(bytes)
}

/// The error and its causes on one line (tonic's own Display is only "transport error").
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}

/// A failed call's reason on one line: the status message and, for transport failures, their
/// causes (with TLS 1.3 a refused client certificate only shows at the first call, as a TLS
/// alert under tonic's "transport error").
pub fn status_reason(s: &tonic::Status) -> String {
    let mut out = s.message().to_string();
    if let Some(src) = std::error::Error::source(s) {
        let causes = chain(src);
        if !out.contains(&causes) {
            out = if out.is_empty() || causes.starts_with(&out) {
                causes
            } else {
                format!("{out}: {causes}")
            };
        }
    }
    let lower = out.to_lowercase();
    if lower.contains("alert") && (lower.contains("certificate") || lower.contains("unknownca")) {
        out.push_str(
            " (ddpcheckd refused the TLS client: it requires a client certificate signed by its --tls-client-ca)",
        );
    }
    out
}

/// Connects to `addr`: a socket path, `unix:PATH`, or (mTLS) `https://host:port` with the TLS
/// settings from the environment (see [`ClientTls::from_env`]).
pub async fn connect(addr: &str) -> Result<DdpcheckClient<Channel>, ConnectError> {
    connect_with(addr, None).await
}

/// Like [`connect`], with explicit TLS settings for `https://` (`None`: from the environment).
pub async fn connect_with(
    addr: &str,
    tls: Option<&ClientTls>,
) -> Result<DdpcheckClient<Channel>, ConnectError> {
    let err = |reason: String| ConnectError {
        addr: addr.to_string(),
        reason,
        usage: false,
    };
    if addr.starts_with("http://") {
        return Err(ConnectError {
            usage: true,
            ..err("plain http:// is not served: ddpcheckd's TCP listener is mutual TLS only (use https:// with --tls-ca, --tls-cert, --tls-key)".into())
        });
    }
    if addr.starts_with("https://") {
        let env;
        let tls = match tls {
            Some(t) => t,
            None => {
                env = ClientTls::from_env();
                &env
            }
        };
        return connect_tls(addr, tls)
            .await
            .map_err(|(usage, reason)| ConnectError {
                usage,
                ..err(reason)
            });
    }
    let path = PathBuf::from(addr.strip_prefix("unix:").unwrap_or(addr));
    match std::fs::metadata(&path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(err(format!(
                "{} does not exist (is ddpcheckd running?)",
                path.display()
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(err(access::permission_denied(&path)))
        }
        Err(e) => return Err(err(format!("{}: {e}", path.display()))),
    }
    // The URI is required by the API but unused: the connector dials the socket.
    let endpoint = Endpoint::try_from("http://[::1]:50051").map_err(|e| err(e.to_string()))?;
    let endpoint = bounded(endpoint);
    let connecting = endpoint.connect_with_connector(tower::service_fn(move |_: Uri| {
        let path = path.clone();
        async move {
            let s = tokio::net::UnixStream::connect(path).await?;
            Ok::<_, std::io::Error>(TokioIo::new(s))
        }
    }));
    let channel = tokio::time::timeout(CONNECT_TIMEOUT, connecting)
        .await
        .map_err(|_| err(format!("did not answer within {CONNECT_TIMEOUT:?}")))?
        .map_err(|e| err(access::unix_failure(addr_path(addr), &e).unwrap_or_else(|| chain(&e))))?;
    Ok(DdpcheckClient::new(channel))
}

/// The socket path of a `unix:` or plain address.
fn addr_path(addr: &str) -> &Path {
    Path::new(addr.strip_prefix("unix:").unwrap_or(addr))
}

/// The error side is (is it a usage error, reason).
async fn connect_tls(addr: &str, tls: &ClientTls) -> Result<DdpcheckClient<Channel>, Refusal> {
    let usage = |reason: String| (true, reason);
    let uri: Uri = addr
        .parse()
        .map_err(|e| usage(format!("not an address (want https://HOST:PORT): {e}")))?;
    let host = uri
        .host()
        .ok_or_else(|| usage("no host (want https://HOST:PORT)".into()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(443);
    let loaded = tls.load().map_err(|e| usage(e.to_string()))?;
    check_access(&host, port, &loaded).await?;
    let endpoint = Endpoint::from(uri)
        .tls_config(loaded.tonic_config(&host))
        .map_err(|e| usage(format!("TLS settings: {}", chain(&e))))?;
    let endpoint = bounded(endpoint);
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| (false, format!("TLS connection failed: {}", chain(&e))))?;
    Ok(DdpcheckClient::new(channel))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn reason(r: Result<DdpcheckClient<Channel>, ConnectError>) -> String {
        match r {
            Ok(_) => panic!("connected"),
            Err(e) => e.to_string(),
        }
    }

    #[tokio::test]
    async fn https_without_ca_is_one_clear_line() {
        let e = reason(connect_with("https://127.0.0.1:1", Some(&ClientTls::default())).await);
        assert!(
            e.contains("--tls-ca") && e.contains("DDPCHECK_CLI_TLS_CA"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
    }

    #[tokio::test]
    async fn missing_files_are_named() {
        let tls = ClientTls {
            ca: Some("/nonexistent/ca.pem".into()),
            cert: Some("/nonexistent/c.pem".into()),
            key: Some("/nonexistent/k.pem".into()),
        };
        let e = reason(connect_with("https://127.0.0.1:1", Some(&tls)).await);
        assert!(e.contains("--tls-ca /nonexistent/ca.pem"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "not pem").unwrap();
        let tls = ClientTls {
            ca: Some(ca),
            ..tls
        };
        let e = reason(connect_with("https://127.0.0.1:1", Some(&tls)).await);
        assert!(e.contains("not a PEM file"), "{e}");
    }

    #[tokio::test]
    async fn cert_without_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\n").unwrap();
        let tls = ClientTls {
            ca: Some(ca),
            cert: Some(dir.path().join("c.pem")),
            key: None,
        };
        let e = reason(connect_with("https://127.0.0.1:1", Some(&tls)).await);
        assert!(e.contains("--tls-key"), "{e}");
    }

    #[tokio::test]
    async fn plain_http_is_refused() {
        let e = reason(connect_with("http://127.0.0.1:1", None).await);
        assert!(e.contains("mutual TLS only"), "{e}");
        let Err(e) = connect_with("http://127.0.0.1:1", None).await else {
            panic!("connected")
        };
        assert!(e.usage);
    }
}

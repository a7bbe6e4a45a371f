//! `/metrics` behind the exporter-toolkit web configuration (`--web-config-file`): TLS with a
//! per-run CA (rcgen) and basic auth with a bcrypt hash made at test time, against the real
//! `ddpcheckd` on a simulated node. Plain `/metrics` without the file is covered by the other
//! tests (`Daemon::scrape`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use common::{bin, code, output_within, stderr, Daemon};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

const USER: &str = "prometheus";
const PASSWORD: &str = "scrape-me-7f3a";

/// A CA, a server certificate for localhost/127.0.0.1 signed by it, and a web config using
/// both plus a bcrypt hash of `PASSWORD`. Returns the temporary directory, the web config's
/// path and the CA's PEM.
fn setup() -> (tempfile::TempDir, PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name
        .push(DnType::CommonName, "ddpcheck test CA");
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut p =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    p.distinguished_name.push(DnType::CommonName, "ddpcheckd");
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = p.signed_by(&key, &ca).unwrap();
    std::fs::write(dir.path().join("server.pem"), cert.pem()).unwrap();
    std::fs::write(dir.path().join("server.key"), key.serialize_pem()).unwrap();
    // Low cost: the test checks the protocol, not bcrypt's strength.
    let hash = bcrypt::hash(PASSWORD, 5).unwrap();
    let web = dir.path().join("web.yml");
    // Relative file names: taken from the web config's directory, as exporter-toolkit does.
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  min_version: TLS12\nbasic_auth_users:\n  {USER}: '{hash}'\n"
        ),
    )
    .unwrap();
    (dir, web, ca.pem())
}

fn client(ca_pem: &str) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

/// One HTTPS GET; returns (status line, whole answer).
async fn https_get(
    addr: &str,
    ca_pem: &str,
    path: &str,
    auth: Option<(&str, &str)>,
) -> (String, String) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = tokio::time::timeout(Duration::from_secs(10), client(ca_pem).connect(name, tcp))
        .await
        .unwrap()
        .unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    if let Some((u, p)) = auth {
        let b = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
        req.push_str(&format!("Authorization: Basic {b}\r\n"));
    }
    req.push_str("\r\n");
    tls.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    // The answer is complete when the server closes; a missing close_notify is not our concern.
    let _ = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text.lines().next().unwrap_or("").to_string();
    (status, text)
}

fn start(web: &Path) -> Daemon {
    Daemon::start_with(
        Some("h200x2-nvlink"),
        &["--web-config-file", web.to_str().unwrap()],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_basic_auth_guard_metrics() {
    let (_dir, web, ca) = setup();
    let d = start(&web);
    let addr = d.metrics.clone().expect("metrics address");

    let (status, text) = https_get(&addr, &ca, "/metrics", Some((USER, PASSWORD))).await;
    assert!(status.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("ddpcheck_build_info{")),
        "{text}"
    );
    // The same credentials again (served from the verification cache): still 200.
    let (status, _) = https_get(&addr, &ca, "/metrics", Some((USER, PASSWORD))).await;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");

    for (what, auth) in [
        ("wrong password", Some((USER, "not-the-password"))),
        ("unknown user", Some(("someone", PASSWORD))),
        ("no credentials", None),
    ] {
        let (status, text) = https_get(&addr, &ca, "/metrics", auth).await;
        assert!(status.starts_with("HTTP/1.1 401"), "{what}: {text}");
        assert!(
            text.to_ascii_lowercase()
                .contains("\r\nwww-authenticate: basic"),
            "{what}: {text}"
        );
        assert!(!text.contains("ddpcheck_build_info"), "{what}: {text}");
    }
    // Every path is protected, /healthz included (as exporter-toolkit).
    let (status, _) = https_get(&addr, &ca, "/healthz", None).await;
    assert!(status.starts_with("HTTP/1.1 401"), "{status}");
    let (status, _) = https_get(&addr, &ca, "/healthz", Some((USER, PASSWORD))).await;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");

    // Plain HTTP to the TLS port: no HTTP answer, no metrics.
    let plain = tokio::task::spawn_blocking({
        let addr = addr.clone();
        move || {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(&addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let _ = write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n");
            let mut buf = Vec::new();
            let _ = s.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).to_string()
        }
    })
    .await
    .unwrap();
    assert!(!plain.starts_with("HTTP/"), "{plain}");
    assert!(!plain.contains("ddpcheck_build_info"), "{plain}");

    // A client that does not trust the daemon's CA is refused at the handshake.
    let (_other_dir, _, other_ca) = setup();
    let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let r = client(&other_ca)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await;
    assert!(r.is_err(), "handshake with an untrusted server succeeded");

    assert!(d.stop().success());
}

#[test]
fn bad_web_config_stops_the_daemon_with_64_and_one_line() {
    let (dir, _web, _) = setup();
    let cases = [
        (
            "unknown key",
            "basic_auth_user:\n  a: b\n",
            "basic_auth_user",
        ),
        (
            "plaintext password",
            "basic_auth_users:\n  prometheus: hunter2\n",
            "bcrypt",
        ),
        (
            "missing key file",
            "tls_server_config:\n  cert_file: server.pem\n  key_file: nope.key\n",
            "nope.key",
        ),
    ];
    for (what, text, needle) in cases {
        let f = dir.path().join("bad.yml");
        std::fs::write(&f, text).unwrap();
        let state = dir.path().join("state");
        let o = output_within(
            Command::new(bin("ddpcheckd"))
                .args(["--sim", "h200x2-nvlink", "--metrics-listen", "127.0.0.1:0"])
                .arg("--listen")
                .arg(dir.path().join("d.sock"))
                .arg("--runtime-dir")
                .arg(dir.path().join("run"))
                .arg("--state-dir")
                .arg(&state)
                .arg("--web-config-file")
                .arg(&f)
                .env("DDPCHECK_LOG", "error")
                .env_remove("DDPCHECK_SIM"),
            Duration::from_secs(30),
        );
        let err = stderr(&o);
        assert_eq!(code(&o), 64, "{what}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{what}: {err}");
        assert!(
            err.contains("web_config_file") && err.contains(needle),
            "{what}: {err}"
        );
    }
}

//! Access: ddpcheckd's TCP listener answers only mutual-TLS clients whose certificate chains to
//! its client CA. Certificates are generated per run (rcgen); the real `ddpcheckd` and the real
//! `ddpcheck` talk over 127.0.0.1. Every client run is bounded in time.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{bin, code, free_loopback_port, output_within, stderr, stdout, Daemon};
use ddpcheck_testkit::daemon::sim_daemon;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A refused handshake must end well within this (the client's own bound is 10 s).
const LIMIT: Duration = Duration::from_secs(30);

/// PEM files written into a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, pem: &str) {
        std::fs::write(self.path(name), pem).unwrap();
    }
}

fn new_ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
}

/// A leaf certificate and its key (PEM), signed by `ca`.
fn leaf(
    ca: &CertifiedIssuer<'static, KeyPair>,
    cn: &str,
    sans: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut p =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![usage];
    let cert = p.signed_by(&key, &**ca).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// ca.pem signs server.pem (127.0.0.1, localhost) and client.pem; other-ca.pem is unrelated and
/// signs other-client.pem.
fn make_pki() -> Pki {
    let pki = Pki {
        dir: tempfile::tempdir().unwrap(),
    };
    let ca = new_ca("ddpcheck test CA");
    pki.write("ca.pem", &ca.pem());
    let (c, k) = leaf(
        &ca,
        "ddpcheckd",
        &["127.0.0.1", "localhost"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    pki.write("server.pem", &c);
    pki.write("server.key", &k);
    let (c, k) = leaf(&ca, "operator", &[], ExtendedKeyUsagePurpose::ClientAuth);
    pki.write("client.pem", &c);
    pki.write("client.key", &k);
    let other = new_ca("unrelated CA");
    pki.write("other-ca.pem", &other.pem());
    let (c, k) = leaf(&other, "intruder", &[], ExtendedKeyUsagePurpose::ClientAuth);
    pki.write("other-client.pem", &c);
    pki.write("other-client.key", &k);
    pki
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// ddpcheckd on the simulated 2xH200 node with the mTLS listener on a free loopback port.
fn start_tls_daemon(pki: &Pki) -> (Daemon, String) {
    // The free port may be taken before the daemon binds it: try a few.
    for _ in 0..3 {
        let addr = format!("127.0.0.1:{}", free_loopback_port());
        let (cert, key, ca) = (
            pki.path("server.pem"),
            pki.path("server.key"),
            pki.path("ca.pem"),
        );
        let extra = [
            "--tcp",
            &addr,
            "--tls-cert",
            s(&cert),
            "--tls-key",
            s(&key),
            "--tls-client-ca",
            s(&ca),
        ];
        if let Ok(d) =
            std::panic::catch_unwind(|| Daemon::start_with(Some("h200x2-nvlink"), &extra))
        {
            return (d, addr);
        }
    }
    panic!("ddpcheckd did not start with a TCP listener");
}

/// `ddpcheck --daemon URL ARGS...` with only the given environment's TLS settings.
fn ddpcheck(url: &str, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(bin("ddpcheck"));
    cmd.arg("--daemon").arg(url).args(args);
    for v in [
        "DDPCHECK_SIM",
        "DDPCHECK_DAEMON",
        "DDPCHECK_CLI_TLS_CA",
        "DDPCHECK_CLI_TLS_CERT",
        "DDPCHECK_CLI_TLS_KEY",
    ] {
        cmd.env_remove(v);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let start = std::time::Instant::now();
    let o = output_within(&mut cmd, LIMIT);
    eprintln!(
        "$ ddpcheck --daemon {url} {} -> exit {} in {:.2} s\n{}{}",
        args.join(" "),
        code(&o),
        start.elapsed().as_secs_f64(),
        stdout(&o),
        stderr(&o)
    );
    o
}

/// Refused: the given exit code (3 UNKNOWN when the peer refused, 64 for wrong settings), no
/// topology, one line on stderr naming one of `words`.
fn assert_refused(o: &Output, exit: i32, words: &[&str]) {
    assert_eq!(code(o), exit, "{}{}", stdout(o), stderr(o));
    assert!(
        !stdout(o).contains("NV18"),
        "a refused client got the topology: {}",
        stdout(o)
    );
    let e = stderr(o);
    assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
    let lower = e.to_lowercase();
    assert!(
        words.iter().any(|w| lower.contains(w)),
        "the message names none of {words:?}: {e}"
    );
}

#[test]
fn tcp_listener_serves_only_mutual_tls_clients() {
    let pki = make_pki();
    let (d, addr) = start_tls_daemon(&pki);
    let url = format!("https://{addr}");
    let (ca, cert, key) = (
        pki.path("ca.pem"),
        pki.path("client.pem"),
        pki.path("client.key"),
    );

    // (a) The CA that signed the daemon's certificate, and a client certificate it signed.
    let flags = [
        "--tls-ca",
        s(&ca),
        "--tls-cert",
        s(&cert),
        "--tls-key",
        s(&key),
    ];
    let o = ddpcheck(&url, &[&flags[..], &["topo"]].concat(), &[]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("NV18"), "{}", stdout(&o));
    // The same through the environment, and with the DNS name in the server certificate.
    let env = [
        ("DDPCHECK_CLI_TLS_CA", ca.as_path()),
        ("DDPCHECK_CLI_TLS_CERT", cert.as_path()),
        ("DDPCHECK_CLI_TLS_KEY", key.as_path()),
    ];
    let port = addr.rsplit(':').next().unwrap();
    let o = ddpcheck(&format!("https://localhost:{port}"), &["topo"], &env);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("NV18"), "{}", stdout(&o));
    // The client's variables are not the daemon's DDPCHECK_TLS_* (its server certificate):
    // `ddpcheck config check` does not read them.
    let empty = pki.path("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let mut cmd = Command::new(bin("ddpcheck"));
    cmd.args(["config", "check", "--config", s(&empty)]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = output_within(&mut cmd, LIMIT);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));

    // (b) No client certificate: the handshake is attempted, the daemon refuses it.
    let o = ddpcheck(&url, &["--tls-ca", s(&ca), "topo"], &[]);
    assert_refused(&o, 3, &["certificate", "tls", "handshake"]);

    // (c) A client certificate from an unrelated CA.
    let o = ddpcheck(
        &url,
        &[
            "--tls-ca",
            s(&ca),
            "--tls-cert",
            s(&pki.path("other-client.pem")),
            "--tls-key",
            s(&pki.path("other-client.key")),
            "topo",
        ],
        &[],
    );
    assert_refused(&o, 3, &["certificate", "tls", "handshake"]);

    // The client checks the daemon too: a CA that did not sign the daemon's certificate.
    let o = ddpcheck(
        &url,
        &[
            "--tls-ca",
            s(&pki.path("other-ca.pem")),
            "--tls-cert",
            s(&cert),
            "--tls-key",
            s(&key),
            "topo",
        ],
        &[],
    );
    assert_refused(&o, 3, &["certificate", "issuer"]);

    // (d) Plain http://: the CLI refuses it, and a plaintext gRPC client gets no answer from
    // the listener either.
    let o = ddpcheck(&format!("http://{addr}"), &["topo"], &[]);
    assert_refused(&o, 64, &["tls"]);
    let plaintext = plaintext_get_topology(&addr);
    assert!(
        plaintext.is_err(),
        "the TCP listener answered a plaintext client: {plaintext:?}"
    );
    eprintln!("plaintext gRPC GetTopology -> {plaintext:?}");
    let answer = raw_h2_preface(&addr);
    eprintln!("raw HTTP/2 preface -> {answer:02x?}");
    // Nothing, or a TLS alert record (content type 21): never an HTTP/2 frame.
    assert!(
        answer.is_empty() || answer[0] == 0x15,
        "the TCP listener answered plaintext HTTP/2: {answer:02x?}"
    );

    // Missing files are named on one line.
    let o = ddpcheck(
        &url,
        &[
            "--tls-ca",
            s(&ca),
            "--tls-cert",
            s(&pki.path("missing.pem")),
            "--tls-key",
            s(&key),
            "topo",
        ],
        &[],
    );
    assert_refused(&o, 64, &["missing.pem"]);
    let o = ddpcheck(&url, &["topo"], &[]);
    assert_refused(&o, 64, &["--tls-ca"]);

    // The refusals did not disturb the daemon: the good client still gets its answer.
    let o = ddpcheck(&url, &[&flags[..], &["topo"]].concat(), &[]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(d.stop().success());
}

/// Sends the HTTP/2 client preface and an empty SETTINGS frame in clear text; returns what
/// comes back before the listener closes (bounded in time).
fn raw_h2_preface(addr: &str) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    s.write_all(&hello).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("no answer and no close from the TCP listener: {e}"),
        }
    }
    got
}

/// A plaintext HTTP/2 gRPC call to the TLS listener, bounded in time.
fn plaintext_get_topology(addr: &str) -> Result<String, String> {
    use ddpcheck_proto::v1 as pb;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let call = async {
            let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                .map_err(|e| e.to_string())?
                .connect_timeout(Duration::from_secs(5))
                .timeout(Duration::from_secs(5))
                .connect()
                .await
                .map_err(|e| format!("connect: {e:?}"))?;
            let r = pb::ddpcheck_client::DdpcheckClient::new(ch)
                .get_topology(pb::GetTopologyRequest {})
                .await
                .map_err(|st| format!("{:?}: {}", st.code(), st.message()))?;
            Ok(r.into_inner().json)
        };
        tokio::time::timeout(Duration::from_secs(20), call)
            .await
            .unwrap_or_else(|_| Err("no answer within 20 s".into()))
    })
}

#[test]
fn tcp_without_tls_files_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_loopback_port().to_string();
    let addr = format!("127.0.0.1:{port}");
    let base = |extra: &[&str]| {
        let bin = bin("ddpcheckd");
        let mut cmd = sim_daemon(&bin, "h200x2-nvlink", dir.path(), dir.path().join("d.sock"));
        cmd.args(["--tcp", &addr]).args(extra);
        for v in [
            "DDPCHECK_TLS_CERT",
            "DDPCHECK_TLS_KEY",
            "DDPCHECK_TLS_CLIENT_CA",
        ] {
            cmd.env_remove(v);
        }
        let o = output_within(&mut cmd, LIMIT);
        eprintln!(
            "$ ddpcheckd --tcp {addr} {} -> exit {}\n{}",
            extra.join(" "),
            code(&o),
            stderr(&o)
        );
        o
    };
    let cert = dir.path().join("server.pem");
    for extra in [&[][..], &["--tls-cert", s(&cert)][..]] {
        let o = base(extra);
        assert_eq!(code(&o), 64, "{}", stderr(&o));
        let e = stderr(&o);
        assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
        assert!(e.contains("tls"), "{e}");
    }
    // Nothing was left listening on the port.
    assert!(std::net::TcpStream::connect(&addr).is_err());
}

#[test]
fn silent_peer_does_not_hang_the_cli() {
    // A listener that completes TCP connections (the kernel does) but never speaks TLS.
    let pki = make_pki();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", silent.local_addr().unwrap());
    let start = std::time::Instant::now();
    let o = ddpcheck(
        &url,
        &[
            "--tls-ca",
            s(&pki.path("ca.pem")),
            "--tls-cert",
            s(&pki.path("client.pem")),
            "--tls-key",
            s(&pki.path("client.key")),
            "topo",
        ],
        &[],
    );
    assert_refused(&o, 3, &["tls handshake"]);
    // The client's bound is 10 s; allow for a loaded machine, but not for a hang.
    assert!(
        start.elapsed() < Duration::from_secs(25),
        "{:?}",
        start.elapsed()
    );
    drop(silent);
}

//! Connection floods against a daemon whose descriptor limit is low: half-open `/metrics`
//! requests and idle connections to the mutual-TLS port, more of them than the daemon has
//! descriptors. Neither may stop the control socket, and the daemon must close what it accepted
//! within its timeouts.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{bin, code, free_loopback_port, output_within, stderr, stdout, Daemon};

/// The daemon's descriptor limit in these probes (soft and hard, its own process only).
const NOFILE: u64 = 256;
/// Connections held at once: more than the daemon has descriptors.
const FLOOD: usize = 300;
/// `check` over the control socket answers in well under a second on a simulated node; this
/// bound only tells an answer from a hang on a loaded machine.
const CHECK_BOUND: Duration = Duration::from_secs(20);
/// The daemon's default bounds on what it accepted (10 s for a request's headers on `/metrics`,
/// 10 s for a TLS handshake), plus slack for a loaded machine.
const CLOSE_BOUND: Duration = Duration::from_secs(25);

/// Opens `FLOOD` connections to `addr`, each having sent `first` and nothing more.
fn hold(addr: &str, first: &[u8]) -> Vec<TcpStream> {
    (0..FLOOD)
        .map(|_| {
            let mut s = TcpStream::connect(addr).expect("connect (the kernel's backlog)");
            if !first.is_empty() {
                // A connection the daemon closed already may refuse the write: still held here.
                let _ = s.write_all(first);
            }
            s
        })
        .collect()
}

/// `ddpcheck --daemon SOCKET check` must answer (a healthy simulated node: exit 0) in time.
fn check_answers(socket: &Path) {
    let mut cmd = Command::new(bin("ddpcheck"));
    cmd.arg("--daemon")
        .arg(socket)
        .arg("check")
        .env_remove("DDPCHECK_SIM")
        .env_remove("DDPCHECK_DAEMON");
    let o = output_within(&mut cmd, CHECK_BOUND);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
}

/// How many of `socks` the server still holds open after waiting up to `bound` for it to close
/// them (end of stream or a reset; an error answer before the close is read through).
fn still_open_after(mut socks: Vec<TcpStream>, bound: Duration) -> usize {
    for s in &socks {
        s.set_nonblocking(true).unwrap();
    }
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    while !socks.is_empty() && start.elapsed() < bound {
        socks.retain_mut(|s| loop {
            match s.read(&mut buf) {
                Ok(0) => break false,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break true,
                Err(_) => break false,
            }
        });
        std::thread::sleep(Duration::from_millis(100));
    }
    socks.len()
}

#[test]
fn half_open_metrics_requests_neither_stop_check_nor_stay_open() {
    let d = Daemon::start_with_nofile(Some("h200x2-nvlink"), &[], NOFILE);
    let metrics = d.metrics.clone().expect("metrics enabled");
    // A request line and one header, never the blank line that ends the headers.
    let held = hold(&metrics, b"GET /metrics HTTP/1.1\r\nHost: x\r\n");
    let start = Instant::now();
    check_answers(&d.socket);
    let open = still_open_after(held, CLOSE_BOUND.saturating_sub(start.elapsed()));
    assert_eq!(
        open, 0,
        "{open} half-open requests still held after {CLOSE_BOUND:?}"
    );
    // And /metrics serves again once the flood is gone.
    assert!(crate::common::http_get(&metrics, "/metrics").contains("ddpcheck_"));
    d.stop();
}

#[test]
fn idle_connections_to_the_tls_port_neither_stop_check_nor_stay_open() {
    let pki = tempfile::tempdir().unwrap();
    write_server_pki(pki.path());
    let (d, addr) = start_tls_daemon(pki.path());
    // Connected, and not a byte of the TLS handshake.
    let held = hold(&addr, b"");
    let start = Instant::now();
    check_answers(&d.socket);
    let open = still_open_after(held, CLOSE_BOUND.saturating_sub(start.elapsed()));
    assert_eq!(
        open, 0,
        "{open} idle TLS connections still held after {CLOSE_BOUND:?}"
    );
    d.stop();
}

/// ca.pem, and server.pem/server.key for 127.0.0.1 signed by it (the daemon's TLS files; no
/// client of these probes gets as far as presenting a certificate).
fn write_server_pki(dir: &Path) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &*ca)
        .unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("server.pem"), leaf.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
}

/// The daemon on a simulated node with the mutual-TLS listener on a free loopback port and the
/// low descriptor limit; the port may be taken before the daemon binds it, so a few tries.
fn start_tls_daemon(pki: &Path) -> (Daemon, String) {
    let s = |name: &str| pki.join(name).display().to_string();
    for _ in 0..3 {
        let addr = format!("127.0.0.1:{}", free_loopback_port());
        let (cert, key, ca) = (s("server.pem"), s("server.key"), s("ca.pem"));
        let extra = [
            "--tcp",
            &addr,
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--tls-client-ca",
            &ca,
        ];
        let started = std::panic::catch_unwind(|| {
            Daemon::start_with_nofile(Some("h200x2-nvlink"), &extra, NOFILE)
        });
        if let Ok(d) = started {
            return (d, addr);
        }
    }
    panic!("ddpcheckd did not start with a TCP listener");
}

//! What a network peer may hold of the daemon: file descriptors, open connections, and how long
//! a connection may wait on its peer. The control socket (local, group `ddpcheck`) has no cap;
//! `/metrics` (no authentication by default) and the mutual-TLS port each get at most a quarter
//! of the descriptors, so that a flood of either leaves half of them to the control socket, the
//! history, and the workers' pipes.

use std::time::Duration;

/// Open `/metrics` connections at most, where the descriptor limit allows (see [`cap`]). 200
/// scrapers at once stay within it; node_exporter bounds requests in flight the same way
/// (`--web.max-requests`).
pub const METRICS_MAX_CONNECTIONS: usize = 512;

/// A `/metrics` request's headers must arrive within this of the connection's first byte, or
/// of the previous answer on a kept-alive connection (exporter-toolkit's read-header timeout is
/// of this order; a scraper sends its headers in one packet).
pub const METRICS_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// A `/metrics` connection on which nothing is read or written for this long is closed: it
/// covers what the header timeout does not (HTTP/2, a client that reads no answer).
pub const METRICS_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Open connections to the mutual-TLS port at most, where the descriptor limit allows.
pub const TCP_MAX_CONNECTIONS: usize = 256;

/// A TLS handshake (`/metrics` with a web configuration, and the mutual-TLS port) must finish
/// within this: before it, the peer is nobody.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// HTTP/2 pings on the mutual-TLS port's connections: a peer that answers none within
/// [`TCP_KEEPALIVE_TIMEOUT`] is gone and its connection closed.
pub const TCP_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
pub const TCP_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a network peer may keep the daemon waiting: the defaults are the constants above,
/// which docs/operations.md lists; tests set them short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerTimeouts {
    /// A `/metrics` request's headers ([`METRICS_HEADER_TIMEOUT`]), and its first byte, counted
    /// from the connection's start.
    pub header: Duration,
    /// Any connection on which a read or a write waits this long is closed
    /// ([`METRICS_IDLE_TIMEOUT`]): a peer gone silent, a reader too slow for its answers.
    pub idle: Duration,
    /// A TLS handshake, and the first bytes of the control socket's HTTP/2 connection
    /// ([`TLS_HANDSHAKE_TIMEOUT`]).
    pub handshake: Duration,
    /// HTTP/2 pings on the control socket and the TCP port ([`TCP_KEEPALIVE_INTERVAL`]); a peer
    /// that answers none within `keepalive_timeout` ([`TCP_KEEPALIVE_TIMEOUT`]) is closed.
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
}

impl Default for PeerTimeouts {
    fn default() -> PeerTimeouts {
        PeerTimeouts {
            header: METRICS_HEADER_TIMEOUT,
            idle: METRICS_IDLE_TIMEOUT,
            handshake: TLS_HANDSHAKE_TIMEOUT,
            keepalive_interval: TCP_KEEPALIVE_INTERVAL,
            keepalive_timeout: TCP_KEEPALIVE_TIMEOUT,
        }
    }
}

/// How long a stopping daemon waits for its listeners and its collector, all together: a
/// client that keeps an idle connection open (HTTP/2 answers GOAWAY only when its peer reads)
/// must not hold the stop, so what is still running then is ended.
pub const STOP_WAIT: Duration = Duration::from_secs(5);

/// The share of the descriptor limit one network listener's connections may hold: 1/4.
const SHARE_DIVISOR: u64 = 4;

/// The process's (soft, hard) limit on open files.
pub fn nofile() -> std::io::Result<(u64, u64)> {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass; no other memory is touched.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((l.rlim_cur, l.rlim_max))
}

/// Raises the soft limit on open files to the hard one (systemd's default soft limit, 1024, is
/// for programs that still use select(2); this one does not). Returns (before, after).
pub fn raise_nofile() -> std::io::Result<(u64, u64)> {
    let (soft, hard) = nofile()?;
    if soft >= hard {
        return Ok((soft, soft));
    }
    let l = libc::rlimit {
        rlim_cur: hard,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the struct we pass; raising the soft limit up to the hard one
    // needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((soft, hard))
}

/// A listener's connection cap: `configured`, or a quarter of the soft descriptor limit
/// `nofile` where that is less (at least one).
pub fn cap(configured: usize, nofile: u64) -> usize {
    let share = usize::try_from(nofile / SHARE_DIVISOR).unwrap_or(usize::MAX);
    configured.min(share).max(1)
}

/// [`cap`] under the process's current soft limit (a failed read leaves `configured`).
pub fn cap_now(configured: usize) -> usize {
    match nofile() {
        Ok((soft, _)) => cap(configured, soft),
        Err(_) => configured,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_gets_at_most_a_quarter_of_the_descriptors() {
        assert_eq!(cap(METRICS_MAX_CONNECTIONS, 1024), 256);
        assert_eq!(cap(METRICS_MAX_CONNECTIONS, 256), 64);
        assert_eq!(cap(METRICS_MAX_CONNECTIONS, 65536), METRICS_MAX_CONNECTIONS);
        assert_eq!(cap(TCP_MAX_CONNECTIONS, 3), 1);
        // Both listeners together leave half of any limit.
        for n in [64, 256, 1024, 4096, 1 << 20] {
            let held = cap(METRICS_MAX_CONNECTIONS, n) + cap(TCP_MAX_CONNECTIONS, n);
            assert!(held as u64 <= n / 2, "{n}: {held}");
        }
    }
}

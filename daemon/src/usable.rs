//! What `ddpcheckd check-config` checks beyond the form of the values: that a daemon could start
//! with them. The TLS files can be read, a `state_dir` that is set can hold the history, and the
//! addresses of `/metrics` and the TCP listener are free. It checks as the user it runs as, which
//! may not be the daemon's (`ddpcheck` under the unit).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::config::{ConfigError, Effective, Settings};

/// `Ok` when a daemon started now with `settings` would get past opening its files and binding
/// its addresses; else the first obstacle, naming the key.
pub fn check(effective: &Effective, settings: &Settings) -> Result<(), ConfigError> {
    if let Some(tls) = &settings.tls {
        for (key, path) in [
            ("tls_cert", &tls.cert),
            ("tls_key", &tls.key),
            ("tls_client_ca", &tls.client_ca),
        ] {
            readable_file(path).map_err(|e| effective.invalid(key, shown(path), e.to_string()))?;
        }
    }
    // Unset, it is systemd's StateDirectory= (or the built-in default), which the unit creates
    // for the daemon's user: nothing a shell could check.
    if let Some(dir) = &settings.state_dir {
        usable_dir(dir).map_err(|e| effective.invalid("state_dir", shown(dir), e.to_string()))?;
    }
    for (key, addr) in [
        ("metrics_listen", settings.metrics_listen),
        ("tcp", settings.tcp),
    ] {
        if let Some(addr) = addr {
            free_address(addr, &settings.listen)
                .map_err(|e| effective.invalid(key, addr.to_string(), e.to_string()))?;
        }
    }
    Ok(())
}

/// Why a file, folder or address a key names could not serve the daemon.
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    #[error("cannot be read: {0}")]
    Unreadable(std::io::Error),
    #[error("is not a regular file")]
    NotAFile,
    #[error("is not a folder")]
    NotAFolder,
    #[error("cannot be used: {0}")]
    Unusable(std::io::Error),
    #[error("holds a NUL byte")]
    NulByte,
    #[error("cannot be written: {0}")]
    Unwritable(std::io::Error),
    #[error("cannot be created: {0}")]
    Uncreatable(std::io::Error),
    /// No socket to bind with (the system's refusal, in its words).
    #[error("{0}")]
    Socket(std::io::Error),
    #[error("cannot be bound: {0}")]
    Unbindable(std::io::Error),
}

fn shown(p: &Path) -> String {
    p.display().to_string()
}

/// A regular file this user may open (not read: a key's size and form are the TLS setup's).
fn readable_file(path: &Path) -> Result<(), Unusable> {
    let m = std::fs::metadata(path).map_err(Unusable::Unreadable)?;
    if !m.is_file() {
        return Err(Unusable::NotAFile);
    }
    std::fs::File::open(path)
        .map(drop)
        .map_err(Unusable::Unreadable)
}

/// An existing folder this user may write in, or one it may create (created and removed again).
fn usable_dir(dir: &Path) -> Result<(), Unusable> {
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => Err(Unusable::NotAFolder),
        Ok(_) => writable(dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => creatable(dir),
        Err(e) => Err(Unusable::Unusable(e)),
    }
}

/// Write and search permission for this process's effective user, as open(2) would judge it
/// (a read-only file system included).
fn writable(dir: &Path) -> Result<(), Unusable> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| Unusable::NulByte)?;
    // SAFETY: a valid C string; faccessat(2) only reads it.
    let rc = unsafe {
        libc::faccessat(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::W_OK | libc::X_OK,
            libc::AT_EACCESS,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(Unusable::Unwritable(std::io::Error::last_os_error()))
    }
}

/// Creates `dir` as the daemon would at start, then removes what this check created.
fn creatable(dir: &Path) -> Result<(), Unusable> {
    let missing: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|p| !p.as_os_str().is_empty() && !p.exists())
        .map(Path::to_path_buf)
        .collect();
    let made = std::fs::create_dir_all(dir).map_err(Unusable::Uncreatable);
    for p in &missing {
        let _ = std::fs::remove_dir(p);
    }
    made
}

/// Bound and released at once, as the daemon binds (SO_REUSEADDR, so a socket of a finished
/// connection does not count, and no listen: two checks at once do not collide). A port the
/// running daemon holds is fine: its control socket answers.
fn free_address(addr: SocketAddr, control_socket: &Path) -> Result<(), Unusable> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    }
    .map_err(Unusable::Socket)?;
    socket.set_reuseaddr(true).map_err(Unusable::Socket)?;
    match socket.bind(addr) {
        Ok(()) => Ok(()),
        Err(e)
            if e.kind() == std::io::ErrorKind::AddrInUse
                && std::os::unix::net::UnixStream::connect(control_socket).is_ok() =>
        {
            Ok(())
        }
        Err(e) => Err(Unusable::Unbindable(e)),
    }
}

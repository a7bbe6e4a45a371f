//! The control socket's address (`listen`): a plain path or gRPC's `unix:` notation; anything
//! else is refused, never taken for a file name. What lies at the path already is replaced only
//! where it is a socket nobody answers on (`before_bind`).

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// The socket path `listen` names: `unix:PATH` (absolute or relative), `unix:///ABS` (gRPC's
/// other form) or a plain path. Another scheme (`http://`, `dns:`, `tcp:`, `unix-abstract:`)
/// is an error saying what is taken, so that it does not become a folder named after the
/// scheme in the working directory.
pub fn socket_path(value: &str) -> Result<PathBuf, ListenError> {
    let path = socket_path_form(value)?;
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(ListenError::TooLong { path, len });
    }
    Ok(path)
}

/// What `listen` takes, for its refusals.
const WANT: &str = "want unix:/PATH, unix:RELATIVE or a plain path";

/// Why `listen` names no socket this daemon binds (a usage error: exit 64).
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("empty socket path")]
    Empty,
    /// A newline or an escape sequence, which log lines would carry as they are.
    #[error("control character in the socket path {0:?}; {WANT}")]
    Control(String),
    #[error("unix:// takes an absolute path (unix:///run/x.sock); {WANT}")]
    RelativeUri,
    #[error("unix: without a path; {WANT}")]
    NoPath,
    #[error("abstract sockets are not served: no file mode or group guards them; {WANT}")]
    Abstract,
    #[error("not a Unix socket: TCP is --tcp (mutual TLS only); {WANT}")]
    Tcp,
    #[error("unknown scheme {scheme}:; {WANT} (./{value} for a file of that name)")]
    Scheme { scheme: String, value: String },
    #[error("{} is {len} bytes long; a Unix socket's path may have at most {MAX_SOCKET_PATH} bytes: name a shorter one", path.display())]
    TooLong { path: PathBuf, len: usize },
    #[error("--listen {}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// `what` lies there (a regular file, a folder, a link...): never replaced.
    #[error("--listen {} is {what}, not a socket: refusing to replace it (name a path of its own)", path.display())]
    NotASocket { path: PathBuf, what: &'static str },
    #[error("{} is in use by a running daemon", .0.display())]
    InUse(PathBuf),
}

/// The longest path a Unix socket may be bound at: `sun_path` holds 108 bytes, the last one the
/// terminating NUL.
pub const MAX_SOCKET_PATH: usize = 107;

/// [`socket_path`]'s reading of the notation, before the path's length is checked.
fn socket_path_form(value: &str) -> Result<PathBuf, ListenError> {
    if value.is_empty() {
        return Err(ListenError::Empty);
    }
    // A newline or an escape sequence would be written into log lines as it is.
    if value.chars().any(char::is_control) {
        return Err(ListenError::Control(value.to_string()));
    }
    if let Some(rest) = value.strip_prefix("unix://") {
        // gRPC: "unix://absolute_path", three slashes in all.
        if !rest.starts_with('/') {
            return Err(ListenError::RelativeUri);
        }
        return Ok(PathBuf::from(rest));
    }
    if let Some(rest) = value.strip_prefix("unix:") {
        if rest.is_empty() {
            return Err(ListenError::NoPath);
        }
        return Ok(PathBuf::from(rest));
    }
    match scheme(value) {
        Some("unix-abstract") => Err(ListenError::Abstract),
        Some("tcp" | "http" | "https" | "dns" | "ipv4" | "ipv6") => Err(ListenError::Tcp),
        Some(other) => Err(ListenError::Scheme {
            scheme: other.to_string(),
            value: value.to_string(),
        }),
        None => Ok(PathBuf::from(value)),
    }
}

/// What lies at the socket path before the daemon binds there.
#[derive(Debug, PartialEq, Eq)]
pub enum AtSocketPath {
    Nothing,
    /// A socket nobody answers on, left by a daemon that died: removed before binding.
    StaleSocket,
}

/// Decides what may be done with `path` before binding: nothing there, or a stale socket, is
/// fine; a socket a daemon answers on, or anything that is not a socket (a regular file, such
/// as the history database, a folder, a link), is refused and never removed.
pub fn before_bind(path: &Path) -> Result<AtSocketPath, ListenError> {
    let io = |error| ListenError::Io {
        path: path.to_path_buf(),
        error,
    };
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(AtSocketPath::Nothing),
        Err(e) => return Err(io(e)),
    };
    let kind = meta.file_type();
    if !kind.is_socket() {
        let what = if kind.is_file() {
            "a regular file"
        } else if kind.is_dir() {
            "a folder"
        } else if kind.is_symlink() {
            "a symbolic link"
        } else if kind.is_fifo() {
            "a named pipe (FIFO)"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else {
            "something else"
        };
        return Err(ListenError::NotASocket {
            path: path.to_path_buf(),
            what,
        });
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(ListenError::InUse(path.to_path_buf())),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Ok(AtSocketPath::StaleSocket)
        }
        Err(e) => Err(io(e)),
    }
}

/// The URI scheme `value` starts with (RFC 3986: a letter, then letters, digits, `+`, `-`, `.`,
/// then `:`), if any. A path with a `/` before its first `:` has none.
fn scheme(value: &str) -> Option<&str> {
    let (head, _) = value.split_once(':')?;
    let mut chars = head.chars();
    let first = chars.next()?;
    let valid = first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(v: &str) -> String {
        socket_path(v).unwrap().display().to_string()
    }

    #[test]
    fn takes_grpc_unix_forms_and_plain_paths() {
        assert_eq!(ok("unix:/tmp/x.sock"), "/tmp/x.sock");
        assert_eq!(ok("unix:run/x.sock"), "run/x.sock");
        assert_eq!(ok("unix:///run/ddpcheck/d.sock"), "/run/ddpcheck/d.sock");
        assert_eq!(
            ok("/run/ddpcheck/ddpcheck.sock"),
            "/run/ddpcheck/ddpcheck.sock"
        );
        assert_eq!(ok("x.sock"), "x.sock");
        // A colon after a slash is part of a file name, not a scheme.
        assert_eq!(ok("./a:b.sock"), "./a:b.sock");
        assert_eq!(ok("/tmp/a:b.sock"), "/tmp/a:b.sock");
    }

    #[test]
    fn only_a_socket_nobody_answers_on_may_be_replaced() {
        let d = tempfile::tempdir().unwrap();
        let at = |name: &str| before_bind(&d.path().join(name)).map_err(|e| e.to_string());
        assert_eq!(at("absent.sock"), Ok(AtSocketPath::Nothing));
        std::fs::write(d.path().join("history.db"), "SQLite format 3").unwrap();
        let e = at("history.db").unwrap_err();
        assert!(e.contains("is a regular file, not a socket"), "{e}");
        std::fs::create_dir(d.path().join("dir")).unwrap();
        assert!(at("dir").unwrap_err().contains("is a folder"));
        let live = std::os::unix::net::UnixListener::bind(d.path().join("live.sock")).unwrap();
        assert!(at("live.sock")
            .unwrap_err()
            .contains("in use by a running daemon"));
        drop(live);
        drop(std::os::unix::net::UnixListener::bind(d.path().join("stale.sock")).unwrap());
        assert_eq!(at("stale.sock"), Ok(AtSocketPath::StaleSocket));
        std::os::unix::fs::symlink(d.path().join("stale.sock"), d.path().join("link.sock"))
            .unwrap();
        assert!(at("link.sock").unwrap_err().contains("symbolic link"));
    }

    #[test]
    fn refuses_other_schemes_with_one_line() {
        for v in [
            "http://127.0.0.1:9402",
            "https://node:50051",
            "dns:///node:50051",
            "tcp:127.0.0.1:1",
            "unix-abstract:ddpcheck",
            "vsock:3:50051",
            "unix:",
            "unix://run/x.sock",
            "",
        ] {
            let e = socket_path(v).unwrap_err().to_string();
            assert!(!e.contains('\n'), "{v}: {e}");
            assert!(
                e.contains("want unix:/PATH") || v.is_empty(),
                "{v}: {e} should say what is taken"
            );
        }
        assert!(socket_path("vsock:3")
            .unwrap_err()
            .to_string()
            .contains("./vsock:3"));
        assert!(socket_path("http://x")
            .unwrap_err()
            .to_string()
            .contains("--tcp"));
    }

    #[test]
    fn refuses_control_characters_on_one_line() {
        for v in [
            "/tmp/a\nb.sock",
            "unix:/tmp/a\rb",
            "/tmp/\u{1b}[31mx",
            "/tmp/a\tb",
        ] {
            let e = socket_path(v).unwrap_err().to_string();
            assert!(e.contains("control character"), "{v:?}: {e}");
            assert!(!e.chars().any(char::is_control), "{v:?}: {e:?}");
        }
    }
}

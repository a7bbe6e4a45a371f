//! The control socket's address (`listen`): a plain path or gRPC's `unix:` notation; anything
//! else is refused, never taken for a file name.

use std::path::PathBuf;

/// The socket path `listen` names: `unix:PATH` (absolute or relative), `unix:///ABS` (gRPC's
/// other form) or a plain path. Another scheme (`http://`, `dns:`, `tcp:`, `unix-abstract:`)
/// is an error saying what is taken, so that it does not become a folder named after the
/// scheme in the working directory.
pub fn socket_path(value: &str) -> Result<PathBuf, String> {
    const WANT: &str = "want unix:/PATH, unix:RELATIVE or a plain path";
    if value.is_empty() {
        return Err("empty socket path".into());
    }
    // A newline or an escape sequence would be written into log lines as it is.
    if value.chars().any(char::is_control) {
        return Err(format!(
            "control character in the socket path {value:?}; {WANT}"
        ));
    }
    if let Some(rest) = value.strip_prefix("unix://") {
        // gRPC: "unix://absolute_path", three slashes in all.
        if !rest.starts_with('/') {
            return Err(format!(
                "unix:// takes an absolute path (unix:///run/x.sock); {WANT}"
            ));
        }
        return Ok(PathBuf::from(rest));
    }
    if let Some(rest) = value.strip_prefix("unix:") {
        if rest.is_empty() {
            return Err(format!("unix: without a path; {WANT}"));
        }
        return Ok(PathBuf::from(rest));
    }
    match scheme(value) {
        Some("unix-abstract") => Err(format!(
            "abstract sockets are not served: no file mode or group guards them; {WANT}"
        )),
        Some("tcp" | "http" | "https" | "dns" | "ipv4" | "ipv6") => Err(format!(
            "not a Unix socket: TCP is --tcp (mutual TLS only); {WANT}"
        )),
        Some(other) => Err(format!(
            "unknown scheme {other}:; {WANT} (./{value} for a file of that name)"
        )),
        None => Ok(PathBuf::from(value)),
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
            let e = socket_path(v).unwrap_err();
            assert!(!e.contains('\n'), "{v}: {e}");
            assert!(
                e.contains("want unix:/PATH") || v.is_empty(),
                "{v}: {e} should say what is taken"
            );
        }
        assert!(socket_path("vsock:3").unwrap_err().contains("./vsock:3"));
        assert!(socket_path("http://x").unwrap_err().contains("--tcp"));
    }

    #[test]
    fn refuses_control_characters_on_one_line() {
        for v in [
            "/tmp/a\nb.sock",
            "unix:/tmp/a\rb",
            "/tmp/\u{1b}[31mx",
            "/tmp/a\tb",
        ] {
            let e = socket_path(v).unwrap_err();
            assert!(e.contains("control character"), "{v:?}: {e}");
            assert!(!e.chars().any(char::is_control), "{v:?}: {e:?}");
        }
    }
}

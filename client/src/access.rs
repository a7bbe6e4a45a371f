//! Why a connection to the control socket failed, in words a caller can act on: a permission
//! problem names the socket, its group and what to do, rather than tonic's "transport error".

use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The group the daemon gives its socket when the package made it.
const PACKAGE_GROUP: &str = "ddpcheck";

/// The reason a connection to the socket at `path` failed, where the I/O error under `e` is
/// one a caller can act on (`None`: the error's own words are the reason).
pub(crate) fn unix_failure(path: &Path, e: &(dyn std::error::Error + 'static)) -> Option<String> {
    match io_kind(e)? {
        ErrorKind::PermissionDenied => Some(permission_denied(path)),
        ErrorKind::ConnectionRefused => Some(format!(
            "{} refuses connections: nothing listens there (is ddpcheckd running?)",
            path.display()
        )),
        _ => None,
    }
}

/// EACCES on the socket or on a folder above it: who may use it and what to do.
pub(crate) fn permission_denied(path: &Path) -> String {
    match std::fs::metadata(path).map(|m| m.gid()) {
        Ok(0) => format!(
            "permission denied: only root may use the socket (its group is root); run as root, or ask an administrator to run ddpcheckd with the socket's group {PACKAGE_GROUP} (the package's unit does) and to add you to it"
        ),
        Ok(gid) => {
            let group = group_name(gid);
            format!(
                "permission denied: only root and members of its group {group} may use ddpcheckd's socket; run as root, or ask an administrator to add you to {group} (usermod -aG {group} USER, then log in again)"
            )
        }
        Err(_) => format!(
            "permission denied: this user may not enter a folder on the socket's path; only root and members of the socket's group (the package's: {PACKAGE_GROUP}) may use ddpcheckd's socket; run as root, or ask an administrator to add you to it (usermod -aG {PACKAGE_GROUP} USER, then log in again)"
        ),
    }
}

/// The first I/O error's kind among `e` and its causes.
fn io_kind(e: &(dyn std::error::Error + 'static)) -> Option<ErrorKind> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        cur = err.source();
    }
    None
}

/// The name /etc/group gives `gid`, else `gid N`.
fn group_name(gid: u32) -> String {
    let groups = std::fs::read_to_string("/etc/group").unwrap_or_default();
    groups
        .lines()
        .find_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            let id = fields.nth(1)?;
            (id.parse::<u32>().ok()? == gid).then(|| name.to_string())
        })
        .unwrap_or_else(|| format!("gid {gid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_group_0_and_an_unknown_gid_is_a_number() {
        assert_eq!(group_name(0), "root");
        assert_eq!(group_name(4_000_000_000), "gid 4000000000");
    }

    #[test]
    fn the_io_error_under_a_wrapper_is_found() {
        #[derive(Debug)]
        struct Wrap(std::io::Error);
        impl std::fmt::Display for Wrap {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("transport error")
            }
        }
        impl std::error::Error for Wrap {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Wrap(std::io::Error::from(ErrorKind::PermissionDenied));
        let said = unix_failure(Path::new("/nonexistent/d.sock"), &e).unwrap();
        assert!(said.starts_with("permission denied: "), "{said}");
        assert!(said.contains("group"), "{said}");
    }
}

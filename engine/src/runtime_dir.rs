//! The runtime folder of the node lock: where it is (`default_runtime_dir`) and whether it may
//! be written in (`prepare`). Accepted: a folder that only we or root can change; inside a
//! folder every user can write (/tmp), only one of ours that nobody else can write (made 0700
//! here). Anything else is refused with one line naming the folder and its owner before a file
//! is opened in it, as sshd's StrictModes refuses files. Root's fallback lies in /run, never in
//! /tmp, where anyone could have made its folder first.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The runtime directory: `$DDPCHECK_RUNTIME_DIR`, else /run/ddpcheck when writable, else
/// `$XDG_RUNTIME_DIR/ddpcheck`, else a private `ddpcheck-<uid>`: for root in /run, where nobody
/// else can make anything (so no other user can plant a folder or a link at the name and turn
/// root's checks into UNKNOWN), for other users in the temporary folder (`$TMPDIR`, else /tmp);
/// [`prepare`] creates it 0700 and checks it.
pub fn default_runtime_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("DDPCHECK_RUNTIME_DIR") {
        return PathBuf::from(d);
    }
    let run = PathBuf::from("/run/ddpcheck");
    if dir_writable(&run) {
        return run;
    }
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
        return PathBuf::from(x).join("ddpcheck");
    }
    let private = format!("ddpcheck-{}", euid());
    let run = Path::new("/run");
    if euid() == 0 && only_root_writes(run) {
        return run.join(private);
    }
    std::env::temp_dir().join(private)
}

/// A folder owned by root that nobody else may write in (/run as systems make it).
fn only_root_writes(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.is_dir() && m.uid() == 0 && m.permissions().mode() & 0o022 == 0)
}

fn dir_writable(d: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(d.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: c is a valid NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    /// Another user could put links or files in it: refused, nothing opened.
    #[error(
        "refusing the runtime folder {path}: {why} (set DDPCHECK_RUNTIME_DIR to a folder of your own)"
    )]
    Unsafe { path: PathBuf, why: String },
    #[error("cannot create the runtime folder {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Creates `dir` where it is missing (0700 inside a folder every user can write) and checks
/// that nobody but us or root can change what is in it.
pub fn prepare(dir: &Path) -> Result<(), FolderError> {
    let refuse = |why: String| FolderError::Unsafe {
        path: dir.to_path_buf(),
        why,
    };
    let shared_parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .and_then(|p| std::fs::metadata(p).ok().map(|m| (p, m)))
        .filter(|(_, m)| m.permissions().mode() & 0o002 != 0)
        .map(|(p, _)| p.to_path_buf());
    create(dir, shared_parent.is_some())?;
    // The folder itself, not where a link at its name points.
    let meta = std::fs::symlink_metadata(dir).map_err(|source| FolderError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mode = meta.permissions().mode() & 0o7777;
    if meta.file_type().is_symlink() {
        return Err(refuse(format!(
            "it is a symbolic link, owned by uid {}",
            meta.uid()
        )));
    }
    if !meta.is_dir() {
        return Err(refuse(format!(
            "it is not a folder (owned by uid {})",
            meta.uid()
        )));
    }
    if mode & 0o002 != 0 {
        return Err(refuse(format!(
            "every user can write in it (mode {mode:04o})"
        )));
    }
    let me = euid();
    if let Some(parent) = shared_parent {
        // In /tmp and the like anyone could have made it first: it must be ours, and nobody
        // else may write in it. One of ours that others may read or enter (0755, as earlier
        // versions made it) is made private: nobody else could have changed what is in it.
        if meta.uid() != me {
            return Err(refuse(format!(
                "it is owned by uid {}, not by this user (uid {me})",
                meta.uid()
            )));
        }
        if mode & 0o022 != 0 {
            return Err(refuse(format!(
                "it lies in {}, which every user can write, and its group can write in it (mode {mode:04o}; make it 0700)",
                parent.display()
            )));
        }
        if mode & 0o077 != 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(
                |source| FolderError::Io {
                    path: dir.to_path_buf(),
                    source,
                },
            )?;
        }
        return Ok(());
    }
    if meta.uid() == me || meta.uid() == 0 || placed_by_root(dir) {
        return Ok(());
    }
    Err(refuse(format!(
        "it is owned by uid {}, neither this user (uid {me}) nor root",
        meta.uid()
    )))
}

/// Missing folders made as before (the process's umask), but 0700 in a folder every user can
/// write, and never through a link there (one component, `mkdir` does not follow it).
fn create(dir: &Path, in_shared: bool) -> Result<(), FolderError> {
    let made = if in_shared {
        std::fs::DirBuilder::new().mode(0o700).create(dir)
    } else {
        std::fs::create_dir_all(dir)
    };
    match made {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(FolderError::Io {
            path: dir.to_path_buf(),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// A folder in a parent only root can write (/run/ddpcheck, made by systemd for the daemon's
/// account): whoever owns it, root put it there.
fn placed_by_root(dir: &Path) -> bool {
    dir.parent()
        .and_then(|p| std::fs::metadata(p).ok())
        .is_some_and(|m| m.uid() == 0 && m.permissions().mode() & 0o022 == 0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A parent every user can write, as /tmp (sticky, 1777).
    fn shared_tmp() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        d
    }

    #[test]
    fn a_missing_folder_in_a_shared_parent_is_created_private() {
        let tmp = shared_tmp();
        let dir = tmp.path().join("ddpcheck-test");
        prepare(&dir).unwrap();
        let m = std::fs::symlink_metadata(&dir).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o700);
        assert_eq!(m.uid(), euid());
        // A second caller finds it and accepts it.
        prepare(&dir).unwrap();
    }

    #[test]
    fn a_folder_in_a_shared_parent_its_group_can_write_is_refused() {
        let tmp = shared_tmp();
        let dir = tmp.path().join("ddpcheck-test");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o770)).unwrap();
        let msg = prepare(&dir).unwrap_err().to_string();
        assert!(
            msg.contains("its group can write in it (mode 0770"),
            "{msg}"
        );
        assert_eq!(msg.lines().count(), 1, "{msg}");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        prepare(&dir).unwrap();
        let m = std::fs::metadata(&dir).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o700, "made private");
    }

    #[test]
    fn a_folder_every_user_can_write_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("rt");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let msg = prepare(&dir).unwrap_err().to_string();
        assert!(msg.contains("every user can write in it"), "{msg}");
    }

    #[test]
    fn a_link_at_the_folder_name_is_refused() {
        let tmp = shared_tmp();
        let elsewhere = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ddpcheck-test");
        std::os::unix::fs::symlink(elsewhere.path(), &dir).unwrap();
        let msg = prepare(&dir).unwrap_err().to_string();
        assert!(msg.contains("symbolic link"), "{msg}");
    }

    /// A planted folder: another user's folder at the predictable name. Only root
    /// can make a folder of another owner, so this runs where the tests run as root.
    #[test]
    fn another_users_folder_in_a_shared_parent_is_refused() {
        if euid() != 0 {
            eprintln!("not root: cannot give a folder to another user; skipped");
            return;
        }
        let tmp = shared_tmp();
        let dir = tmp.path().join("ddpcheck-0");
        std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        let msg = prepare(&dir).unwrap_err().to_string();
        assert!(msg.contains("owned by uid 65534"), "{msg}");
    }

    #[test]
    fn a_folder_of_ours_outside_shared_folders_is_accepted_as_before() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("a/b/run");
        prepare(&dir).unwrap();
        assert!(dir.is_dir());
    }
}

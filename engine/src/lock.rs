//! The node-wide test lock (invariant 3): one flock on a file under the runtime directory,
//! shared by the daemon and local CLI runs. A second caller gets BUSY, never a queue. The
//! folder is checked before anything is opened in it (`runtime_dir`), and the file is opened
//! without following a link and never truncated: nobody else's file can be written through it.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use ddpcheck_core::ProbeError;

pub use crate::runtime_dir::default_runtime_dir;
use crate::runtime_dir::FolderError;

/// Held while a test runs; the lock goes with the file handle (also if the process dies).
#[derive(Debug)]
pub struct NodeLock {
    _file: File,
    path: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("BUSY: another ddpcheck test holds {path} ({holder})")]
    Busy { path: PathBuf, holder: String },
    #[error("cannot open lock file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The folder or the file is not safe to write in (another user's, or a link): nothing
    /// was opened or written.
    #[error("{0}")]
    Unsafe(String),
}

impl From<LockError> for ProbeError {
    /// A held lock is BUSY (as is a lock file that cannot be opened, as before); an unsafe
    /// folder or file is UNKNOWN: the node cannot be tested without writing where we must not.
    fn from(e: LockError) -> Self {
        match e {
            LockError::Unsafe(m) => ProbeError::Unavailable(m),
            other => ProbeError::Busy(other.to_string()),
        }
    }
}

/// The holder line is short; more is not read (a lock file is never trusted to be small).
const HOLDER_MAX_BYTES: u64 = 256;

impl NodeLock {
    /// Takes the lock without waiting; writes our pid and purpose into the file for the next caller.
    pub fn try_acquire(path: &Path, purpose: &str) -> Result<NodeLock, LockError> {
        let io = |source| LockError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent() {
            crate::runtime_dir::prepare(dir).map_err(|e| match e {
                FolderError::Unsafe { .. } => LockError::Unsafe(e.to_string()),
                FolderError::Io { path, source } => LockError::Io { path, source },
            })?;
        }
        let mut file = open_no_follow(path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = Vec::new();
                let _ = (&mut file).take(HOLDER_MAX_BYTES).read_to_end(&mut holder);
                let holder = String::from_utf8_lossy(&holder);
                let holder = holder.lines().next().unwrap_or("").trim();
                return Err(LockError::Busy {
                    path: path.to_path_buf(),
                    holder: if holder.is_empty() {
                        "unknown holder".into()
                    } else {
                        holder.to_string()
                    },
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        // Best effort: who holds it, for the BUSY message of the next caller. Written over the
        // start, never truncated: the reader takes the first line, so a longer old line's tail
        // is harmless.
        let _ = file.write_all_at(
            format!("pid {} running {}\n", std::process::id(), purpose).as_bytes(),
            0,
        );
        let _ = file.flush();
        Ok(NodeLock {
            _file: file,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Opens (or creates) the lock file without following a link at its name (`O_NOFOLLOW`) and
/// without truncating it; refuses anything but a regular file of one link (a hard link to
/// another file would make us write into that file).
fn open_no_follow(path: &Path) -> Result<File, LockError> {
    let unsafe_file = |why: String| {
        LockError::Unsafe(format!(
            "refusing the lock file {}: {why}; nothing was written",
            path.display()
        ))
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        // O_NONBLOCK: a FIFO at the name cannot hold the open; flock does not wait either way.
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => unsafe_file("it is a symbolic link".into()),
            _ => LockError::Io {
                path: path.to_path_buf(),
                source: e,
            },
        })?;
    let meta = file.metadata().map_err(|source| LockError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.file_type().is_file() {
        return Err(unsafe_file("it is not a regular file".into()));
    }
    if meta.nlink() != 1 {
        return Err(unsafe_file(format!(
            "it has {} hard links (another file's content)",
            meta.nlink()
        )));
    }
    Ok(file)
}

pub fn lock_path(runtime_dir: &Path) -> PathBuf {
    runtime_dir.join("test.lock")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn second_caller_gets_busy_with_holder() {
        let d = tempfile::tempdir().unwrap();
        let p = lock_path(d.path());
        let first = NodeLock::try_acquire(&p, "preflight").unwrap();
        let err = NodeLock::try_acquire(&p, "bench").unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("BUSY:"), "{msg}");
        assert!(msg.contains("running preflight"), "{msg}");
        drop(first);
        NodeLock::try_acquire(&p, "bench").unwrap();
    }

    /// A link planted at the lock's name, in a folder of our own, to a
    /// file of ours. The lock is refused (one line, UNKNOWN) and the file keeps its content.
    #[test]
    fn a_link_at_the_lock_path_is_refused_and_its_target_untouched() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim.txt");
        std::fs::write(&victim, "precious\n").unwrap();
        let rt = d.path().join("rt");
        std::fs::create_dir(&rt).unwrap();
        let p = lock_path(&rt);
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        let err = NodeLock::try_acquire(&p, "preflight").unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, LockError::Unsafe(_)), "{msg}");
        assert!(msg.contains("symbolic link"), "{msg}");
        assert_eq!(msg.lines().count(), 1, "{msg}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        let probe = ProbeError::from(err);
        assert_eq!(probe.verdict(), Some(ddpcheck_core::Verdict::Unknown));
    }

    /// A hard link to another file at the lock's name: refused, the file untouched.
    #[test]
    fn a_hard_link_at_the_lock_path_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim.txt");
        std::fs::write(&victim, "precious\n").unwrap();
        let p = lock_path(d.path());
        std::fs::hard_link(&victim, &p).unwrap();
        let err = NodeLock::try_acquire(&p, "preflight").unwrap_err();
        assert!(err.to_string().contains("hard links"), "{err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    }

    /// A lock file left with a longer line is written over, not truncated, and the next
    /// caller's BUSY names the current holder only.
    #[test]
    fn the_lock_file_is_never_truncated() {
        let d = tempfile::tempdir().unwrap();
        let p = lock_path(d.path());
        let old = "pid 1 running a much longer purpose than any of ours\nsecond line\n";
        std::fs::write(&p, old).unwrap();
        let held = NodeLock::try_acquire(&p, "bench").unwrap();
        let now = std::fs::read_to_string(&p).unwrap();
        assert_eq!(now.len(), old.len(), "{now:?}");
        let msg = NodeLock::try_acquire(&p, "preflight")
            .unwrap_err()
            .to_string();
        assert!(
            msg.ends_with(&format!("(pid {} running bench)", std::process::id())),
            "{msg}"
        );
        drop(held);
    }
}

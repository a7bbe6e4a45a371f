//! The node-wide test lock (invariant 3): one flock on a file under the runtime directory,
//! shared by the daemon and local CLI runs. A second caller gets BUSY, never a queue.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

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
}

impl NodeLock {
    /// Takes the lock without waiting; writes our pid and purpose into the file for the next caller.
    pub fn try_acquire(path: &Path, purpose: &str) -> Result<NodeLock, LockError> {
        let io = |source| LockError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
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
        // Best effort: who holds it, for the BUSY message of the next caller.
        let _ = file.set_len(0);
        let _ = file.seek(SeekFrom::Start(0));
        let _ = write!(file, "pid {} running {}", std::process::id(), purpose);
        Ok(NodeLock {
            _file: file,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The runtime directory: `$DDPCHECK_RUNTIME_DIR`, else /run/ddpcheck when writable, else
/// `$XDG_RUNTIME_DIR/ddpcheck`, else /tmp/ddpcheck-<uid>.
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
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    PathBuf::from(format!("/tmp/ddpcheck-{uid}"))
}

fn dir_writable(d: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(d.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: c is a valid NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

pub fn lock_path(runtime_dir: &Path) -> PathBuf {
    runtime_dir.join("test.lock")
}

#[cfg(test)]
mod tests {
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
}

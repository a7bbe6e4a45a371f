//! One daemon per state folder: an flock on `state_dir/ddpcheckd.lock`, taken before the
//! history is opened (and its `running` rows marked `interrupted`) and held while the daemon runs.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::DaemonError;

/// The lock file's name in the state folder.
pub const LOCK_FILE: &str = "ddpcheckd.lock";

/// Held for the daemon's life; the kernel releases it when the process ends, however it ends.
#[derive(Debug)]
pub struct StateLock {
    _file: File,
    pub path: PathBuf,
}

impl StateLock {
    /// Takes the state folder's lock without waiting; a folder another daemon holds is refused
    /// with one line naming it and the holder.
    pub fn take(state_dir: &Path) -> Result<StateLock, DaemonError> {
        let path = state_dir.join(LOCK_FILE);
        let io = |source| DaemonError::Io {
            what: format!("opening {}", path.display()),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = Vec::new();
                let _ = (&mut file).take(256).read_to_end(&mut holder);
                let holder = String::from_utf8_lossy(&holder);
                let holder = holder.lines().next().unwrap_or("").trim().to_string();
                return Err(DaemonError::Config(format!(
                    "another ddpcheckd ({}) uses the state folder {}: one daemon per state folder",
                    if holder.is_empty() {
                        "holder unknown"
                    } else {
                        &holder
                    },
                    state_dir.display()
                )));
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        // Best effort, for the refusal of the next one: written over the start, never truncated
        // (the reader takes the first line).
        let _ = file.write_all_at(format!("pid {}\n", std::process::id()).as_bytes(), 0);
        let _ = file.flush();
        Ok(StateLock { _file: file, path })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid() {
        let d = tempfile::tempdir().unwrap();
        let first = StateLock::take(d.path()).unwrap();
        let err = StateLock::take(d.path()).unwrap_err().to_string();
        assert!(err.contains("another ddpcheckd"), "{err}");
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(first);
        StateLock::take(d.path()).unwrap();
    }
}

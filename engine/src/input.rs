//! Files a caller names (`--from`, `--model-config`, `--config`, `--nodefile`, TLS files),
//! opened here and read through core's bounded read: a file past its kind's limit, or an
//! endless one such as /dev/zero, is refused after limit + 1 bytes. A service's own files are
//! never named pipes: reading one would wait for a writer.

use std::path::Path;

use ddpcheck_core::bounded::{read_bytes, read_text, BoundedReadError, FileKind};

/// The text of `path`, at most `kind`'s limit of it.
pub fn read_file(path: &Path, kind: FileKind) -> Result<String, BoundedReadError> {
    read_text(std::fs::File::open(path)?, kind)
}

/// The bytes of `path`, at most `kind`'s limit of them.
pub fn read_file_bytes(path: &Path, kind: FileKind) -> Result<Vec<u8>, BoundedReadError> {
    read_bytes(std::fs::File::open(path)?, kind)
}

/// As [`read_file`], for a file a service reads at start (its configuration, TLS files): a
/// named pipe is refused at once rather than waited on. It is opened without blocking and its
/// type read from the open descriptor, so nothing can swap it between the check and the read.
pub fn read_service_file(path: &Path, kind: FileKind) -> Result<String, BoundedReadError> {
    read_text(open_not_fifo(path)?, kind)
}

/// As [`read_service_file`], the bytes.
pub fn read_service_file_bytes(path: &Path, kind: FileKind) -> Result<Vec<u8>, BoundedReadError> {
    read_bytes(open_not_fifo(path)?, kind)
}

fn open_not_fifo(path: &Path) -> Result<std::fs::File, BoundedReadError> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    // O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer;
    // on a regular file it changes nothing.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if file.metadata()?.file_type().is_fifo() {
        return Err(BoundedReadError::NamedPipe);
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn dev_zero_is_refused_at_the_limit() {
        let err = read_file(Path::new("/dev/zero"), FileKind::Report).unwrap_err();
        assert!(matches!(err, BoundedReadError::TooLarge { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "larger than 64.0 MiB, the limit for a saved report; not read"
        );
    }

    #[test]
    fn a_named_pipe_is_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) on a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = read_service_file(&fifo, FileKind::Config).unwrap_err();
        assert!(matches!(err, BoundedReadError::NamedPipe), "{err}");
        let err = read_service_file(Path::new("/dev/zero"), FileKind::Config).unwrap_err();
        assert!(matches!(err, BoundedReadError::TooLarge { .. }), "{err}");
    }

    #[test]
    fn a_missing_file_says_so() {
        let err = read_file_bytes(Path::new("/nonexistent/x.pem"), FileKind::Pem).unwrap_err();
        assert!(
            matches!(&err, BoundedReadError::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
        );
    }
}

//! Files a caller names (`--from`, `--model-config`, `--config`, `--nodefile`, TLS files),
//! opened here and read through core's bounded read: a file past its kind's limit, or an
//! endless one such as /dev/zero, is refused after limit + 1 bytes.

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
    fn a_missing_file_says_so() {
        let err = read_file_bytes(Path::new("/nonexistent/x.pem"), FileKind::Pem).unwrap_err();
        assert!(
            matches!(&err, BoundedReadError::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
        );
    }
}

//! Size limits on the files a caller names (saved reports, configuration, keys, node lists) and
//! the one bounded read that holds them: at most limit + 1 bytes are read, so /dev/zero or a
//! growing file stops at the limit. Core opens nothing: the caller hands in what it opened.

use std::io::Read;

use crate::num::ToF64;

/// What a file is read as; each kind has its limit, far above any real one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A saved `--json` report (`--from`). The largest in bench/accuracy/fixtures is under
    /// 200 KiB; a `bench ddp` report of a large model's parameter list and many runs stays a
    /// few MiB.
    Report,
    /// A TOML or JSON configuration (`--config`, `web_config`, a Hugging Face config.json):
    /// kilobytes.
    Config,
    /// A PEM certificate, chain or key: a system CA bundle is about 200 KiB.
    Pem,
    /// `cluster check --nodefile`: one address a line; 100,000 nodes of 40 characters fit.
    NodeList,
    /// An artifact `explain --from-artifacts` reads (nvidia-smi, nccl-tests, NCCL's INFO log,
    /// lspci): an INFO log of a few thousand ranks runs to tens of MiB.
    Artifact,
}

impl FileKind {
    pub const fn limit(self) -> u64 {
        match self {
            FileKind::Report | FileKind::Artifact => 64 << 20,
            FileKind::Config | FileKind::Pem => 1 << 20,
            FileKind::NodeList => 4 << 20,
        }
    }

    const fn what(self) -> &'static str {
        match self {
            FileKind::Report => "a saved report",
            FileKind::Config => "a configuration file",
            FileKind::Pem => "a PEM file",
            FileKind::NodeList => "a node list",
            FileKind::Artifact => "an artifact",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BoundedReadError {
    #[error("larger than {}, the limit for {}; not read", crate::units::fmt_bytes(.kind.limit().to_f64()), .kind.what())]
    TooLarge { kind: FileKind },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not UTF-8 text")]
    NotText,
    /// A named pipe where a service expected a file: reading it would wait for a writer.
    #[error("a named pipe (FIFO), not a file; not read")]
    NamedPipe,
}

/// Every byte of `reader` if there are at most `kind`'s limit of them.
pub fn read_bytes(reader: impl Read, kind: FileKind) -> Result<Vec<u8>, BoundedReadError> {
    let mut buf = Vec::new();
    reader
        .take(kind.limit().saturating_add(1))
        .read_to_end(&mut buf)?;
    if u64::try_from(buf.len()).map_or(true, |n| n > kind.limit()) {
        return Err(BoundedReadError::TooLarge { kind });
    }
    Ok(buf)
}

/// As [`read_bytes`], as text.
pub fn read_text(reader: impl Read, kind: FileKind) -> Result<String, BoundedReadError> {
    String::from_utf8(read_bytes(reader, kind)?).map_err(|_| BoundedReadError::NotText)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// An endless source (as /dev/zero) stops one byte past the limit.
    #[test]
    fn an_endless_reader_stops_past_the_limit() {
        let mut endless = std::io::repeat(0);
        let err = read_bytes(&mut endless, FileKind::Config).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, BoundedReadError::TooLarge { .. }), "{msg}");
        assert!(msg.contains("the limit for a configuration file"), "{msg}");
        assert_eq!(msg.lines().count(), 1);
    }

    #[test]
    fn a_file_at_the_limit_is_read_whole() {
        let limit = usize::try_from(FileKind::Pem.limit()).unwrap();
        let data = vec![b'a'; limit];
        assert_eq!(read_bytes(&data[..], FileKind::Pem).unwrap().len(), limit);
        let over = vec![b'a'; limit + 1];
        assert!(read_bytes(&over[..], FileKind::Pem).is_err());
    }

    #[test]
    fn text_must_be_utf8() {
        assert_eq!(read_text(&b"ok"[..], FileKind::Report).unwrap(), "ok");
        assert!(matches!(
            read_text(&[0xff, 0xfe][..], FileKind::Report),
            Err(BoundedReadError::NotText)
        ));
    }
}

//! The error of starting or running the daemon: a bad configuration, a failed I/O step, or the
//! history store.

/// Why the daemon could not start (or a listener could not be set up).
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("{0}")]
    Config(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    History(#[from] crate::history::HistoryError),
    /// `--listen` names no socket this daemon binds.
    #[error(transparent)]
    Listen(#[from] crate::listen::ListenError),
}

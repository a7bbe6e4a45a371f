//! Where a configuration value came from, and the errors that name it.

use std::fmt;
use std::path::PathBuf;

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Flag,
    Env(&'static str),
    File(PathBuf),
    Default,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Flag => f.write_str("flag"),
            Source::Env(v) => write!(f, "env {v}"),
            Source::File(p) => write!(f, "file {}", p.display()),
            Source::Default => f.write_str("default"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {} does not exist", path.display())]
    Missing { path: PathBuf },
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("{key} = {value:?} ({origin}): {message}")]
    Invalid {
        key: &'static str,
        value: String,
        origin: Source,
        message: String,
    },
}

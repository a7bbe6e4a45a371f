//! The daemon's configuration: a TOML file (default `/etc/ddpcheck/ddpcheck.toml`), `DDPCHECK_*`
//! environment variables and command-line flags, merged with precedence
//! flags > environment > file > defaults, each value remembering where it came from.
//!
//! Keys of the file are the flags' names with `_` (`collect_interval` ↔ `--collect-interval` ↔
//! `DDPCHECK_COLLECT_INTERVAL`); an unknown key is an error, so a typo never passes silently.

mod env;
mod error;
mod keys;
mod layer;
mod merge;
mod validate;

pub use error::{ConfigError, Source};
pub use keys::{
    key, Key, COLLECT_INTERVAL_RANGE, CONFIG_ENV, DEFAULT_COLLECT_INTERVAL_S, DEFAULT_CONFIG_FILE,
    DEFAULT_HISTORY_MAX_RUNS, DEFAULT_METRICS_LISTEN, KEYS, MAX_HISTORY_MAX_RUNS,
};
pub use layer::{read_file, FileLayer, Layer};
pub use merge::{merge, Effective};
pub use validate::Settings;

#[cfg(test)]
mod tests;

//! Parsing: one layer of configuration (file, environment or flags) and the configuration file read
//! from disk.

use std::path::{Path, PathBuf};

use ddpcheck_core::bounded::{BoundedReadError, FileKind};
use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use super::keys::{DEFAULT_CONFIG_FILE, KEYS};

/// One layer of configuration (the file, the environment or the flags): every key optional.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_ca: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_config_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_dir: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collect_interval: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_rate_per_minute: Option<f64>,
    /// Whole calls; any TOML integer parses here, the bounds are checked in `settings()`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_burst: Option<i64>,
    /// Whole runs, as `work_burst`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_max_runs: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factory_dirs: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_env: Option<String>,
}

/// A key's value as text, for messages and `config check`; `None` when unset.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Val {
    Text(String),
    Number(f64),
    Integer(i64),
}

impl Layer {
    pub(super) fn get(&self, name: &str) -> Option<Val> {
        let p = |v: &Option<PathBuf>| v.as_ref().map(|p| Val::Text(p.display().to_string()));
        let s = |v: &Option<String>| v.clone().map(Val::Text);
        match name {
            "sim" => s(&self.sim),
            "listen" => p(&self.listen),
            "tcp" => s(&self.tcp),
            "tls_cert" => p(&self.tls_cert),
            "tls_key" => p(&self.tls_key),
            "tls_client_ca" => p(&self.tls_client_ca),
            "metrics_listen" => s(&self.metrics_listen),
            "web_config_file" => p(&self.web_config_file),
            "runtime_dir" => p(&self.runtime_dir),
            "state_dir" => p(&self.state_dir),
            "collect_interval" => self.collect_interval.map(Val::Number),
            "cluster_address" => s(&self.cluster_address),
            "work_rate_per_minute" => self.work_rate_per_minute.map(Val::Number),
            "work_burst" => self.work_burst.map(Val::Integer),
            "history_max_runs" => self.history_max_runs.map(Val::Integer),
            "factory_dirs" => s(&self.factory_dirs),
            "allow_env" => s(&self.allow_env),
            _ => None,
        }
    }

    /// Takes `name`'s value from `other` into `self`.
    pub(super) fn take_from(&mut self, other: &mut Layer, name: &str) {
        match name {
            "sim" => self.sim = other.sim.take(),
            "listen" => self.listen = other.listen.take(),
            "tcp" => self.tcp = other.tcp.take(),
            "tls_cert" => self.tls_cert = other.tls_cert.take(),
            "tls_key" => self.tls_key = other.tls_key.take(),
            "tls_client_ca" => self.tls_client_ca = other.tls_client_ca.take(),
            "metrics_listen" => self.metrics_listen = other.metrics_listen.take(),
            "web_config_file" => self.web_config_file = other.web_config_file.take(),
            "runtime_dir" => self.runtime_dir = other.runtime_dir.take(),
            "state_dir" => self.state_dir = other.state_dir.take(),
            "collect_interval" => self.collect_interval = other.collect_interval.take(),
            "cluster_address" => self.cluster_address = other.cluster_address.take(),
            "work_rate_per_minute" => self.work_rate_per_minute = other.work_rate_per_minute.take(),
            "work_burst" => self.work_burst = other.work_burst.take(),
            "history_max_runs" => self.history_max_runs = other.history_max_runs.take(),
            "factory_dirs" => self.factory_dirs = other.factory_dirs.take(),
            "allow_env" => self.allow_env = other.allow_env.take(),
            _ => {}
        }
    }

    /// Splits off the keys for which `pred` holds: the daemon's clap parse gives flags and
    /// environment in one struct, and says for each key which one it came from.
    pub fn split_off(&mut self, pred: impl Fn(&str) -> bool) -> Layer {
        let mut out = Layer::default();
        for k in KEYS {
            if pred(k.name) {
                out.take_from(self, k.name);
            }
        }
        out
    }

    /// Parses a configuration file's text; unknown keys and wrong types are errors.
    pub fn from_toml(text: &str, path: &Path) -> Result<Layer, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })
    }
}

/// The configuration file as found: which path, and its layer (empty when absent).
#[derive(Clone, Debug)]
pub struct FileLayer {
    pub path: PathBuf,
    /// False when the default file does not exist (an explicit file must exist).
    pub present: bool,
    pub layer: Layer,
}

/// Reads `explicit` (from `--config` or `DDPCHECK_CONFIG`), which must exist, or else the default
/// file, which may be absent.
pub fn read_file(explicit: Option<&Path>) -> Result<FileLayer, ConfigError> {
    let path = explicit.map_or_else(|| PathBuf::from(DEFAULT_CONFIG_FILE), Path::to_path_buf);
    match ddpcheck_engine::read_service_file(&path, FileKind::Config) {
        Ok(text) => {
            let layer = Layer::from_toml(&text, &path)?;
            Ok(FileLayer {
                path,
                present: true,
                layer,
            })
        }
        Err(BoundedReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            if explicit.is_some() {
                Err(ConfigError::Missing { path })
            } else {
                Ok(FileLayer {
                    path,
                    present: false,
                    layer: Layer::default(),
                })
            }
        }
        Err(BoundedReadError::Io(source)) => Err(ConfigError::Read { path, source }),
        Err(e) => Err(ConfigError::Parse {
            path,
            message: e.to_string(),
        }),
    }
}

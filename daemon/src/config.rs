//! The daemon's configuration: a TOML file (default `/etc/ddpcheck/ddpcheck.toml`), `DDPCHECK_*`
//! environment variables and command-line flags, merged with precedence
//! flags > environment > file > defaults, each value remembering where it came from.
//!
//! Keys of the file are the flags' names with `_` (`collect_interval` ↔ `--collect-interval` ↔
//! `DDPCHECK_COLLECT_INTERVAL`); an unknown key is an error, so a typo never passes silently.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ddpcheck_core::bounded::{BoundedReadError, FileKind};
use serde::{Deserialize, Serialize};

use crate::ratelimit::{WorkRate, MAX_WORK_BURST, MAX_WORK_RATE_PER_MINUTE};
use crate::tls::TlsFiles;
use crate::web_config::WebConfig;

/// Read when no `--config` (or `DDPCHECK_CONFIG`) is given; its absence is fine.
pub const DEFAULT_CONFIG_FILE: &str = "/etc/ddpcheck/ddpcheck.toml";
/// Environment variable naming the configuration file (same meaning as `--config`).
pub const CONFIG_ENV: &str = "DDPCHECK_CONFIG";
pub const DEFAULT_METRICS_LISTEN: &str = "0.0.0.0:9402";
pub const DEFAULT_COLLECT_INTERVAL_S: f64 = 30.0;
/// Bounds of `collect_interval`, seconds.
pub const COLLECT_INTERVAL_RANGE: (f64, f64) = (0.05, 86400.0);
/// Runs the history keeps by default: a preflight before every job for a year or more on a busy
/// node, and the file bounded to about 10 000 reports (tens of MB with two-GPU sweeps).
pub const DEFAULT_HISTORY_MAX_RUNS: u64 = 10_000;

/// [`DEFAULT_HISTORY_MAX_RUNS`] as the configuration file's integer type.
fn history_max_runs_default() -> i64 {
    i64::try_from(DEFAULT_HISTORY_MAX_RUNS).unwrap_or(i64::MAX)
}
pub const MAX_HISTORY_MAX_RUNS: u64 = 100_000_000;

/// One configuration key: its name in the file, its flag and its environment variable.
#[derive(Clone, Copy, Debug)]
pub struct Key {
    pub name: &'static str,
    pub env: &'static str,
    /// What the key means, and what an unset key means.
    pub help: &'static str,
}

impl Key {
    pub fn flag(&self) -> String {
        format!("--{}", self.name.replace('_', "-"))
    }
}

/// Every key, in the order `ddpcheck config check` prints them.
pub const KEYS: [Key; 17] = [
    Key {
        name: "sim",
        env: "DDPCHECK_SIM",
        help: "simulated node PROFILE[+FAULT...]; unset: the real GPUs",
    },
    Key {
        name: "listen",
        env: "DDPCHECK_LISTEN",
        help: "control socket (gRPC): a path or unix:PATH, mode 0660, group ddpcheck",
    },
    Key {
        name: "tcp",
        env: "DDPCHECK_TCP",
        help: "extra TCP listener HOST:PORT, mutual TLS only; unset: none",
    },
    Key {
        name: "tls_cert",
        env: "DDPCHECK_TLS_CERT",
        help: "server certificate (PEM) for tcp",
    },
    Key {
        name: "tls_key",
        env: "DDPCHECK_TLS_KEY",
        help: "server key (PEM) for tcp",
    },
    Key {
        name: "tls_client_ca",
        env: "DDPCHECK_TLS_CLIENT_CA",
        help: "CA that client certificates must chain to",
    },
    Key {
        name: "metrics_listen",
        env: "DDPCHECK_METRICS_LISTEN",
        help: "address of /metrics, or \"none\"",
    },
    Key {
        name: "web_config_file",
        env: "DDPCHECK_WEB_CONFIG_FILE",
        help: "/metrics TLS and basic auth (exporter-toolkit web config YAML); unset: plain HTTP, no auth",
    },
    Key {
        name: "runtime_dir",
        env: "DDPCHECK_RUNTIME_DIR",
        help: "node lock; unset: $RUNTIME_DIRECTORY (systemd), else /run/ddpcheck",
    },
    Key {
        name: "state_dir",
        env: "DDPCHECK_STATE_DIR",
        help: "history database; unset: $STATE_DIRECTORY (systemd), else /var/lib/ddpcheck",
    },
    Key {
        name: "collect_interval",
        env: "DDPCHECK_COLLECT_INTERVAL",
        help: "seconds between snapshot refreshes (and systemd watchdog pings)",
    },
    Key {
        name: "cluster_address",
        env: "DDPCHECK_CLUSTER_ADDRESS",
        help: "host or IP other nodes reach this one at in cluster runs (the NCCL rendezvous when it is the first node); unset: the address the host name resolves to",
    },
    Key {
        name: "work_rate_per_minute",
        env: "DDPCHECK_WORK_RATE_PER_MINUTE",
        help: "work-starting gRPC calls (preflights, benchmarks and explain; not cluster phases) allowed per minute on average, 0 = no limit; unset: 30",
    },
    Key {
        name: "work_burst",
        env: "DDPCHECK_WORK_BURST",
        help: "work-starting calls allowed back to back before the per-minute rate applies; unset: 10",
    },
    Key {
        name: "history_max_runs",
        env: "DDPCHECK_HISTORY_MAX_RUNS",
        help: "runs the history keeps, the oldest deleted beyond it, 0 = keep all; unset: 10000",
    },
    Key {
        name: "factory_dirs",
        env: "DDPCHECK_FACTORY_DIRS",
        help: "folders (':'-separated, absolute) whose Python model factories (bench ddp --model py:FILE:FUNCTION) the daemon may run, as its own user; unset: none (library models only)",
    },
    Key {
        name: "allow_env",
        env: "DDPCHECK_ALLOW_ENV",
        help: "NCCL_*/CUDA_* variables (','-separated names) a caller may set beyond the transport and algorithm settings (docs/operations.md, \"What a caller may set\"); unset: those only",
    },
];

/// Looks a key up by its file name.
pub fn key(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

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
enum Val {
    Text(String),
    Number(f64),
    Integer(i64),
}

impl Layer {
    fn get(&self, name: &str) -> Option<Val> {
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
    fn take_from(&mut self, other: &mut Layer, name: &str) {
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

    /// The `DDPCHECK_*` variables, read through `get` (so tests need not touch the process
    /// environment). An empty variable counts as unset, as clap treats it.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Layer, ConfigError> {
        let mut l = Layer::default();
        for k in KEYS {
            let Some(v) = get(k.env).filter(|v| !v.is_empty()) else {
                continue;
            };
            match k.name {
                "sim" => l.sim = Some(v),
                "listen" => l.listen = Some(v.into()),
                "tcp" => l.tcp = Some(v),
                "tls_cert" => l.tls_cert = Some(v.into()),
                "tls_key" => l.tls_key = Some(v.into()),
                "tls_client_ca" => l.tls_client_ca = Some(v.into()),
                "metrics_listen" => l.metrics_listen = Some(v),
                "web_config_file" => l.web_config_file = Some(v.into()),
                "runtime_dir" => l.runtime_dir = Some(v.into()),
                "state_dir" => l.state_dir = Some(v.into()),
                "cluster_address" => l.cluster_address = Some(v),
                "factory_dirs" => l.factory_dirs = Some(v),
                "allow_env" => l.allow_env = Some(v),
                "collect_interval" => {
                    let n = v.trim().parse::<f64>().map_err(|_| ConfigError::Invalid {
                        key: k.name,
                        value: v.clone(),
                        origin: Source::Env(k.env),
                        message: "not a number of seconds".into(),
                    })?;
                    l.collect_interval = Some(n);
                }
                "work_rate_per_minute" => {
                    let n = v.trim().parse::<f64>().map_err(|_| ConfigError::Invalid {
                        key: k.name,
                        value: v.clone(),
                        origin: Source::Env(k.env),
                        message: "not a number of calls per minute".into(),
                    })?;
                    l.work_rate_per_minute = Some(n);
                }
                "work_burst" => {
                    let n = v.trim().parse::<i64>().map_err(|_| ConfigError::Invalid {
                        key: k.name,
                        value: v.clone(),
                        origin: Source::Env(k.env),
                        message: "not a whole number of calls".into(),
                    })?;
                    l.work_burst = Some(n);
                }
                "history_max_runs" => {
                    let n = v.trim().parse::<i64>().map_err(|_| ConfigError::Invalid {
                        key: k.name,
                        value: v.clone(),
                        origin: Source::Env(k.env),
                        message: "not a whole number of runs".into(),
                    })?;
                    l.history_max_runs = Some(n);
                }
                _ => {}
            }
        }
        Ok(l)
    }

    /// Parses a configuration file's text; unknown keys and wrong types are errors.
    pub fn from_toml(text: &str, path: &Path) -> Result<Layer, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })
    }
}

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

/// The merged configuration: every key's value (defaults filled in) and its source.
#[derive(Clone, Debug)]
pub struct Effective {
    pub file: FileLayer,
    pub values: Layer,
    pub sources: BTreeMap<&'static str, Source>,
}

/// Merges the layers: flags > environment > file > defaults.
pub fn merge(flags: Layer, env: Layer, file: FileLayer) -> Effective {
    let defaults = Layer {
        listen: Some(PathBuf::from(ddpcheck_proto::DEFAULT_SOCKET)),
        metrics_listen: Some(DEFAULT_METRICS_LISTEN.to_string()),
        collect_interval: Some(DEFAULT_COLLECT_INTERVAL_S),
        work_rate_per_minute: Some(crate::ratelimit::DEFAULT_WORK_RATE_PER_MINUTE),
        work_burst: Some(i64::from(crate::ratelimit::DEFAULT_WORK_BURST)),
        history_max_runs: Some(history_max_runs_default()),
        ..Layer::default()
    };
    let mut layers = [
        (Source::Flag, flags),
        (Source::Env(""), env),
        (Source::File(file.path.clone()), file.layer.clone()),
        (Source::Default, defaults),
    ];
    let mut values = Layer::default();
    let mut sources = BTreeMap::new();
    for k in KEYS {
        for (src, layer) in layers.iter_mut() {
            if layer.get(k.name).is_some() {
                values.take_from(layer, k.name);
                let src = match src {
                    Source::Env(_) => Source::Env(k.env),
                    other => other.clone(),
                };
                sources.insert(k.name, src);
                break;
            }
        }
    }
    Effective {
        file,
        values,
        sources,
    }
}

/// Validated settings, ready for [`crate::run::DaemonConfig`].
#[derive(Clone, Debug)]
pub struct Settings {
    pub sim: Option<String>,
    pub listen: PathBuf,
    pub tcp: Option<SocketAddr>,
    pub tls: Option<TlsFiles>,
    pub metrics_listen: Option<SocketAddr>,
    /// `/metrics` TLS and basic auth, read and checked (`None`: plain HTTP, no auth).
    pub web_config: Option<Arc<WebConfig>>,
    pub runtime_dir: Option<PathBuf>,
    pub state_dir: Option<PathBuf>,
    pub collect_interval: Duration,
    /// Rate limit of work-starting gRPC calls (off when `work_rate_per_minute` is 0).
    pub work_rate: WorkRate,
    /// Where other nodes reach this one in cluster runs (`None`: from the host name).
    pub cluster_address: Option<String>,
    /// Runs the history keeps (`None`: all of them).
    pub history_max_runs: Option<u64>,
    /// Folders whose model factories the daemon may run (empty: none).
    pub factory_dirs: Vec<PathBuf>,
    /// Variables a caller may set beyond `core::caller_env::TUNABLE` (empty: none).
    pub allow_env: Vec<String>,
}

impl Effective {
    fn source(&self, key: &str) -> Source {
        self.sources.get(key).cloned().unwrap_or(Source::Default)
    }

    /// A refusal of `key`'s value, naming where it came from.
    pub fn invalid(
        &self,
        key: &'static str,
        value: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError::Invalid {
            key,
            value: value.into(),
            origin: self.source(key),
            message: message.into(),
        }
    }

    /// Checks every value and gives the settings the daemon runs with.
    pub fn settings(&self) -> Result<Settings, ConfigError> {
        let v = &self.values;
        if let Some(spec) = &v.sim {
            ddpcheck_sim::SimBackend::parse(spec)
                .map_err(|e| self.invalid("sim", spec.clone(), e.to_string()))?;
        }
        let listen = match &v.listen {
            None => PathBuf::from(ddpcheck_proto::DEFAULT_SOCKET),
            // A path that is not UTF-8 names no scheme: it is a path.
            Some(p) => match p.to_str() {
                Some(text) => {
                    crate::listen::socket_path(text).map_err(|e| self.invalid("listen", text, e))?
                }
                None if p
                    .as_os_str()
                    .as_encoded_bytes()
                    .iter()
                    .any(u8::is_ascii_control) =>
                {
                    return Err(self.invalid(
                        "listen",
                        p.to_string_lossy(),
                        "control character in the socket path",
                    ))
                }
                None => p.clone(),
            },
        };
        let interval = v.collect_interval.unwrap_or(DEFAULT_COLLECT_INTERVAL_S);
        let (lo, hi) = COLLECT_INTERVAL_RANGE;
        if !(interval.is_finite() && (lo..=hi).contains(&interval)) {
            return Err(self.invalid(
                "collect_interval",
                interval.to_string(),
                format!("outside {lo}..={hi} seconds"),
            ));
        }
        let work_rate = self.work_rate()?;
        let metrics_listen = match v
            .metrics_listen
            .as_deref()
            .unwrap_or(DEFAULT_METRICS_LISTEN)
        {
            "none" | "" => None,
            s => Some(s.parse::<SocketAddr>().map_err(|e| {
                self.invalid(
                    "metrics_listen",
                    s,
                    format!("{e} (want HOST:PORT or \"none\")"),
                )
            })?),
        };
        let tcp = match v.tcp.as_deref() {
            None | Some("") => None,
            Some(s) => Some(
                s.parse::<SocketAddr>()
                    .map_err(|e| self.invalid("tcp", s, format!("{e} (want HOST:PORT)")))?,
            ),
        };
        let tls = match (&v.tls_cert, &v.tls_key, &v.tls_client_ca) {
            (Some(cert), Some(key), Some(client_ca)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: client_ca.clone(),
            }),
            (None, None, None) => None,
            _ => {
                let given = ["tls_cert", "tls_key", "tls_client_ca"]
                    .into_iter()
                    .find(|k| v.get(k).is_some())
                    .unwrap_or("tls_cert");
                // Name the setting that was given, with its value, not an empty tls_cert.
                let value = match v.get(given) {
                    Some(Val::Text(t)) => t,
                    Some(Val::Number(n)) => n.to_string(),
                    Some(Val::Integer(n)) => n.to_string(),
                    None => String::new(),
                };
                return Err(self.invalid(
                    given,
                    value,
                    format!(
                        "tls_cert, tls_key and tls_client_ca go together ({given} is from {})",
                        self.source(given)
                    ),
                ));
            }
        };
        // Read here, so a bad file stops the daemon at start and `config check` reports it.
        let web_config = match v.web_config_file.as_deref() {
            None => None,
            Some(p) if p.as_os_str().is_empty() => None,
            Some(p) => Some(Arc::new(WebConfig::load(p).map_err(|e| {
                self.invalid("web_config_file", p.display().to_string(), e.message)
            })?)),
        };
        if tcp.is_some() && tls.is_none() {
            return Err(self.invalid(
                "tcp",
                v.tcp.clone().unwrap_or_default(),
                "TCP needs mutual TLS: set tls_cert, tls_key and tls_client_ca",
            ));
        }
        Ok(Settings {
            sim: v.sim.clone(),
            listen,
            tcp,
            tls,
            metrics_listen,
            web_config,
            runtime_dir: v.runtime_dir.clone(),
            state_dir: v.state_dir.clone(),
            collect_interval: Duration::from_secs_f64(interval),
            work_rate,
            cluster_address: self.cluster_address()?,
            history_max_runs: self.history_max_runs()?,
            factory_dirs: self.factory_dirs()?,
            allow_env: self.allow_env()?,
        })
    }

    /// Absolute folders, `:`-separated; each must exist (a typo would refuse every factory) and
    /// pass sshd's StrictModes (`factories::strict_dir`): whoever can write there runs code as
    /// the daemon.
    fn factory_dirs(&self) -> Result<Vec<PathBuf>, ConfigError> {
        let Some(text) = self.values.factory_dirs.as_deref() else {
            return Ok(Vec::new());
        };
        let mut dirs = Vec::new();
        for part in text.split(':').map(str::trim).filter(|p| !p.is_empty()) {
            let dir = Path::new(part);
            crate::factories::strict_dir(dir)
                .map_err(|e| self.invalid("factory_dirs", text.to_string(), e))?;
            dirs.push(dir.to_path_buf());
        }
        Ok(dirs)
    }

    /// NCCL_*/CUDA_* names, ','-separated: the only variables a caller may set beyond the
    /// transport and algorithm settings, by the operator's choice, one by one.
    fn allow_env(&self) -> Result<Vec<String>, ConfigError> {
        let Some(text) = self.values.allow_env.as_deref() else {
            return Ok(Vec::new());
        };
        let mut names = Vec::new();
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if !ddpcheck_core::caller_env::is_variable_name(name) {
                return Err(self.invalid(
                    "allow_env",
                    text.to_string(),
                    format!("{name:?} is not the name of an NCCL_* or CUDA_* variable"),
                ));
            }
            names.push(name.to_string());
        }
        Ok(names)
    }

    /// A host name, IPv4 or IPv6 address (NCCL_COMM_ID takes `HOST:PORT`); no port of its own.
    fn cluster_address(&self) -> Result<Option<String>, ConfigError> {
        let Some(a) = self.values.cluster_address.as_deref().map(str::trim) else {
            return Ok(None);
        };
        if a.is_empty() {
            return Ok(None);
        }
        let bare = a.trim_start_matches('[').trim_end_matches(']');
        let is_ip = bare.parse::<std::net::IpAddr>().is_ok();
        let is_name = a.len() <= 253
            && a.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && !l.starts_with('-')
                    && !l.ends_with('-')
                    && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            });
        if !(is_ip || is_name) {
            return Err(self.invalid(
                "cluster_address",
                a.to_string(),
                "not a host name or IP address (give no port: the daemon picks one per run)",
            ));
        }
        Ok(Some(bare.to_string()))
    }

    fn history_max_runs(&self) -> Result<Option<u64>, ConfigError> {
        let n = self
            .values
            .history_max_runs
            .unwrap_or(history_max_runs_default());
        match u64::try_from(n) {
            Ok(0) => Ok(None),
            Ok(n) if n <= MAX_HISTORY_MAX_RUNS => Ok(Some(n)),
            _ => Err(self.invalid(
                "history_max_runs",
                n.to_string(),
                format!("outside 0..={MAX_HISTORY_MAX_RUNS} runs (0 = keep all)"),
            )),
        }
    }

    fn work_rate(&self) -> Result<WorkRate, ConfigError> {
        let v = &self.values;
        let per_minute = v
            .work_rate_per_minute
            .unwrap_or(crate::ratelimit::DEFAULT_WORK_RATE_PER_MINUTE);
        if !(per_minute.is_finite() && (0.0..=MAX_WORK_RATE_PER_MINUTE).contains(&per_minute)) {
            return Err(self.invalid(
                "work_rate_per_minute",
                per_minute.to_string(),
                format!("outside 0..={MAX_WORK_RATE_PER_MINUTE} calls per minute (0 = no limit)"),
            ));
        }
        let burst = v
            .work_burst
            .unwrap_or(i64::from(crate::ratelimit::DEFAULT_WORK_BURST));
        let burst = u32::try_from(burst)
            .ok()
            .filter(|b| (1..=MAX_WORK_BURST).contains(b))
            .ok_or_else(|| {
                self.invalid(
                    "work_burst",
                    burst.to_string(),
                    format!(
                        "outside 1..={MAX_WORK_BURST} calls (turn the limit off with work_rate_per_minute = 0)"
                    ),
                )
            })?;
        Ok(WorkRate { per_minute, burst })
    }

    /// The effective configuration as TOML that parses back into a [`Layer`]: set keys as
    /// `key = value  # source`, unset ones as comments saying what unset means.
    pub fn render_toml(&self) -> String {
        let mut out = String::new();
        let file_state = if self.file.present {
            "read"
        } else {
            "absent, defaults apply"
        };
        out.push_str("# ddpcheckd effective configuration (precedence: flags > DDPCHECK_* > file > defaults)\n");
        out.push_str(&format!(
            "# config file: {} ({file_state})\n",
            self.file.path.display()
        ));
        for k in KEYS {
            match self.values.get(k.name) {
                Some(val) => {
                    let lit = match val {
                        Val::Text(s) => toml::Value::String(s).to_string(),
                        Val::Number(n) => toml::Value::Float(n).to_string(),
                        Val::Integer(n) => toml::Value::Integer(n).to_string(),
                    };
                    out.push_str(&format!("{} = {lit}  # {}\n", k.name, self.source(k.name)));
                }
                None => out.push_str(&format!("# {} (unset): {}\n", k.name, k.help)),
            }
        }
        out
    }

    /// The same as JSON: `config_file`, `config_file_present`, `values` (null when unset) and
    /// `sources`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut values = serde_json::Map::new();
        let mut sources = serde_json::Map::new();
        for k in KEYS {
            let v = match self.values.get(k.name) {
                Some(Val::Text(s)) => serde_json::Value::String(s),
                Some(Val::Number(n)) => serde_json::json!(n),
                Some(Val::Integer(n)) => serde_json::json!(n),
                None => serde_json::Value::Null,
            };
            values.insert(k.name.to_string(), v);
            if self.sources.contains_key(k.name) {
                sources.insert(k.name.to_string(), self.source(k.name).to_string().into());
            }
        }
        serde_json::json!({
            "config_file": self.file.path.display().to_string(),
            "config_file_present": self.file.present,
            "values": values,
            "sources": sources,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> FileLayer {
        let path = PathBuf::from("/test/ddpcheck.toml");
        FileLayer {
            layer: Layer::from_toml(text, &path).unwrap(),
            path,
            present: true,
        }
    }

    fn env(pairs: &[(&str, &str)]) -> Layer {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Layer::from_env(|k| map.get(k).cloned()).unwrap()
    }

    #[test]
    fn precedence_is_flags_env_file_defaults() {
        let f = file("collect_interval = 10\nmetrics_listen = \"127.0.0.1:9999\"\nsim = \"t4x2-pcie\"\nstate_dir = \"/srv/state\"\n");
        let e = env(&[
            ("DDPCHECK_COLLECT_INTERVAL", "20"),
            ("DDPCHECK_SIM", "a6000x4-phb"),
        ]);
        let flags = Layer {
            sim: Some("h200x2-nvlink".into()),
            ..Layer::default()
        };
        let eff = merge(flags, e, f);
        let s = eff.settings().unwrap();
        assert_eq!(s.sim.as_deref(), Some("h200x2-nvlink"));
        assert_eq!(eff.sources["sim"], Source::Flag);
        assert_eq!(s.collect_interval, Duration::from_secs(20));
        assert_eq!(
            eff.sources["collect_interval"],
            Source::Env("DDPCHECK_COLLECT_INTERVAL")
        );
        assert_eq!(s.metrics_listen, Some("127.0.0.1:9999".parse().unwrap()));
        assert_eq!(
            eff.sources["metrics_listen"],
            Source::File(PathBuf::from("/test/ddpcheck.toml"))
        );
        assert_eq!(s.state_dir, Some(PathBuf::from("/srv/state")));
        assert_eq!(s.listen, PathBuf::from(ddpcheck_proto::DEFAULT_SOCKET));
        assert_eq!(eff.sources["listen"], Source::Default);
        assert!(!eff.sources.contains_key("runtime_dir"));
        assert_eq!(s.runtime_dir, None);
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_errors() {
        let p = Path::new("/x.toml");
        let e = Layer::from_toml("colect_interval = 5\n", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("colect_interval"), "{e}");
        assert!(e.starts_with("config file /x.toml"), "{e}");
        let e = Layer::from_toml("collect_interval = \"fast\"\n", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("collect_interval"), "{e}");
        // A table where a key is expected is unknown too.
        assert!(Layer::from_toml("[daemon]\nlisten = \"/x\"\n", p).is_err());
    }

    #[test]
    fn integer_and_float_seconds_both_parse() {
        let p = Path::new("/x.toml");
        assert_eq!(
            Layer::from_toml("collect_interval = 30\n", p)
                .unwrap()
                .collect_interval,
            Some(30.0)
        );
        assert_eq!(
            Layer::from_toml("collect_interval = 0.5\n", p)
                .unwrap()
                .collect_interval,
            Some(0.5)
        );
    }

    #[test]
    fn missing_default_file_is_fine_missing_explicit_file_is_not() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("nope.toml");
        let e = read_file(Some(&missing)).unwrap_err();
        assert!(matches!(e, ConfigError::Missing { .. }), "{e}");
        let ok = d.path().join("ok.toml");
        std::fs::write(&ok, "listen = \"/tmp/x.sock\"\n").unwrap();
        let f = read_file(Some(&ok)).unwrap();
        assert!(f.present);
        assert_eq!(f.layer.listen, Some(PathBuf::from("/tmp/x.sock")));
        // The default path: absent on a development machine, and then simply empty.
        if !Path::new(DEFAULT_CONFIG_FILE).exists() {
            let f = read_file(None).unwrap();
            assert!(!f.present);
            assert_eq!(f.layer, Layer::default());
        }
    }

    #[test]
    fn invalid_values_name_key_and_source() {
        let eff = merge(
            Layer::default(),
            env(&[("DDPCHECK_COLLECT_INTERVAL", "0.001")]),
            file(""),
        );
        let e = eff.settings().unwrap_err().to_string();
        assert!(
            e.contains("collect_interval") && e.contains("env DDPCHECK_COLLECT_INTERVAL"),
            "{e}"
        );
        let eff = merge(
            Layer::default(),
            Layer::default(),
            file("metrics_listen = \"nine-four-oh-two\"\n"),
        );
        let e = eff.settings().unwrap_err().to_string();
        assert!(
            e.contains("metrics_listen") && e.contains("file /test/ddpcheck.toml"),
            "{e}"
        );
        let eff = merge(
            Layer::default(),
            Layer::default(),
            file("tcp = \"0.0.0.0:9403\"\n"),
        );
        assert!(eff
            .settings()
            .unwrap_err()
            .to_string()
            .contains("mutual TLS"));
        let eff = merge(
            Layer::default(),
            Layer::default(),
            file("tls_cert = \"/c.pem\"\n"),
        );
        assert!(eff
            .settings()
            .unwrap_err()
            .to_string()
            .contains("go together"));
        let eff = merge(
            Layer::default(),
            Layer::default(),
            file("sim = \"no-such-profile\"\n"),
        );
        assert!(eff
            .settings()
            .unwrap_err()
            .to_string()
            .starts_with("sim = "));
        assert!(
            Layer::from_env(|k| (k == "DDPCHECK_COLLECT_INTERVAL").then(|| "soon".to_string()))
                .is_err()
        );
    }

    #[test]
    fn metrics_none_disables_and_empty_env_is_unset() {
        let eff = merge(
            Layer::default(),
            env(&[("DDPCHECK_METRICS_LISTEN", "none"), ("DDPCHECK_SIM", "")]),
            file(""),
        );
        let s = eff.settings().unwrap();
        assert_eq!(s.metrics_listen, None);
        assert_eq!(s.sim, None);
    }

    #[test]
    fn rendered_toml_parses_back_to_the_same_values() {
        let f = file("collect_interval = 12.5\nsim = \"h200x2-nvlink+ecc\"\nruntime_dir = \"/run/x \\\"q\\\"\"\n");
        let eff = merge(Layer::default(), Layer::default(), f);
        let text = eff.render_toml();
        let back = Layer::from_toml(&text, Path::new("rendered")).unwrap();
        assert_eq!(back, eff.values, "{text}");
        assert!(text.contains("# tcp (unset)"), "{text}");
        assert!(
            text.contains("collect_interval = 12.5  # file /test/ddpcheck.toml"),
            "{text}"
        );
        let j = eff.to_json();
        assert_eq!(j["values"]["collect_interval"], 12.5);
        assert_eq!(j["values"]["tcp"], serde_json::Value::Null);
        assert_eq!(j["sources"]["listen"], "default");
    }

    #[test]
    fn split_off_moves_only_the_chosen_keys() {
        let mut all = Layer {
            sim: Some("t4x2-pcie".into()),
            collect_interval: Some(5.0),
            ..Layer::default()
        };
        let flags = all.split_off(|k| k == "sim");
        assert_eq!(flags.sim.as_deref(), Some("t4x2-pcie"));
        assert_eq!(all.sim, None);
        assert_eq!(all.collect_interval, Some(5.0));
        assert!(KEYS.iter().all(
            |k| key(k.name).is_some() && k.env == format!("DDPCHECK_{}", k.name.to_uppercase())
        ));
    }

    #[test]
    fn history_max_runs_defaults_zero_and_bounds() {
        let none = || merge(Layer::default(), Layer::default(), file(""));
        assert_eq!(
            none().settings().unwrap().history_max_runs,
            Some(DEFAULT_HISTORY_MAX_RUNS)
        );
        let s = merge(
            Layer::default(),
            env(&[("DDPCHECK_HISTORY_MAX_RUNS", "500")]),
            file("history_max_runs = 0\n"),
        );
        assert_eq!(s.settings().unwrap().history_max_runs, Some(500));
        let s = merge(
            Layer::default(),
            Layer::default(),
            file("history_max_runs = 0\n"),
        );
        assert_eq!(s.settings().unwrap().history_max_runs, None, "0 keeps all");
        for text in ["history_max_runs = -1\n", "history_max_runs = 100000001\n"] {
            let e = merge(Layer::default(), Layer::default(), file(text))
                .settings()
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("history_max_runs = "), "{text}: {e}");
        }
        assert!(
            Layer::from_env(|k| (k == "DDPCHECK_HISTORY_MAX_RUNS").then(|| "many".into())).is_err()
        );
    }

    #[test]
    fn work_rate_defaults_layers_and_bounds() {
        // Default: 30 a minute, burst 10.
        let s = merge(Layer::default(), Layer::default(), file(""))
            .settings()
            .unwrap();
        assert_eq!(
            s.work_rate,
            WorkRate {
                per_minute: 30.0,
                burst: 10
            }
        );
        // File, environment and flag, with the usual precedence; integers and floats parse.
        let eff = merge(
            Layer {
                work_burst: Some(3),
                ..Layer::default()
            },
            env(&[
                ("DDPCHECK_WORK_RATE_PER_MINUTE", "6.5"),
                ("DDPCHECK_WORK_BURST", "4"),
            ]),
            file("work_rate_per_minute = 12\nwork_burst = 5\n"),
        );
        let s = eff.settings().unwrap();
        assert_eq!(
            s.work_rate,
            WorkRate {
                per_minute: 6.5,
                burst: 3
            }
        );
        assert_eq!(eff.sources["work_burst"], Source::Flag);
        assert_eq!(
            eff.sources["work_rate_per_minute"],
            Source::Env("DDPCHECK_WORK_RATE_PER_MINUTE")
        );
        // 0 turns it off.
        let s = merge(
            Layer::default(),
            Layer::default(),
            file("work_rate_per_minute = 0\n"),
        )
        .settings()
        .unwrap();
        assert!(s.work_rate.is_off());
        // Out of bounds or of the wrong type: an error naming the key and its source.
        for (text, key) in [
            ("work_rate_per_minute = -1\n", "work_rate_per_minute"),
            ("work_rate_per_minute = nan\n", "work_rate_per_minute"),
            ("work_rate_per_minute = 1e9\n", "work_rate_per_minute"),
            ("work_burst = 0\n", "work_burst"),
            ("work_burst = -3\n", "work_burst"),
            ("work_burst = 4294967297\n", "work_burst"),
        ] {
            let e = merge(Layer::default(), Layer::default(), file(text))
                .settings()
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(&format!("{key} = ")) && e.contains("file /test/ddpcheck.toml"),
                "{text}: {e}"
            );
        }
        assert!(Layer::from_toml("work_burst = 2.5\n", Path::new("/x.toml")).is_err());
        assert!(Layer::from_toml("work_burst = \"10\"\n", Path::new("/x.toml")).is_err());
        assert!(Layer::from_env(|k| (k == "DDPCHECK_WORK_BURST").then(|| "ten".into())).is_err());
        assert!(
            Layer::from_env(|k| (k == "DDPCHECK_WORK_RATE_PER_MINUTE").then(|| "fast".into()))
                .is_err()
        );
        // Rendered back as TOML that parses to the same values (the burst stays an integer).
        let eff = merge(Layer::default(), Layer::default(), file("work_burst = 7\n"));
        let text = eff.render_toml();
        assert!(text.contains("work_burst = 7  # file"), "{text}");
        assert!(
            text.contains("work_rate_per_minute = 30.0  # default"),
            "{text}"
        );
        let back = Layer::from_toml(&text, Path::new("rendered")).unwrap();
        assert_eq!(back, eff.values);
        assert_eq!(eff.to_json()["values"]["work_burst"], 7);
    }

    #[test]
    fn cluster_address_takes_a_host_or_an_ip_without_a_port() {
        let settings =
            |text: &str| merge(Layer::default(), Layer::default(), file(text)).settings();
        for (text, want) in [
            ("", None),
            ("cluster_address = \"10.0.0.11\"\n", Some("10.0.0.11")),
            (
                "cluster_address = \"node-07.cluster\"\n",
                Some("node-07.cluster"),
            ),
            ("cluster_address = \"[fd00::7]\"\n", Some("fd00::7")),
            ("cluster_address = \"fd00::7\"\n", Some("fd00::7")),
        ] {
            let s = settings(text).unwrap();
            assert_eq!(s.cluster_address.as_deref(), want, "{text}");
        }
        for bad in ["10.0.0.11:29500", "a b", "node_07", "-", "x..y"] {
            let e = settings(&format!("cluster_address = {bad:?}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("cluster_address = ") && e.contains("not a host name or IP"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn web_config_file_is_read_and_checked() {
        let d = tempfile::tempdir().unwrap();
        let good = d.path().join("web.yml");
        let h = bcrypt::hash("pw", 4).unwrap();
        std::fs::write(&good, format!("basic_auth_users:\n  prom: '{h}'\n")).unwrap();
        let eff = merge(
            Layer::default(),
            env(&[("DDPCHECK_WEB_CONFIG_FILE", good.to_str().unwrap())]),
            file(""),
        );
        let s = eff.settings().unwrap();
        assert!(s.web_config.unwrap().auth_required());
        assert_eq!(
            eff.sources["web_config_file"],
            Source::Env("DDPCHECK_WEB_CONFIG_FILE")
        );
        // Unset: plain HTTP.
        let s = merge(Layer::default(), Layer::default(), file(""))
            .settings()
            .unwrap();
        assert!(s.web_config.is_none());
        let bad = d.path().join("bad.yml");
        std::fs::write(&bad, "basic_auth_users:\n  prom: plaintext\n").unwrap();
        let f = file(&format!("web_config_file = {:?}\n", bad.to_str().unwrap()));
        let e = merge(Layer::default(), Layer::default(), f)
            .settings()
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("web_config_file = ") && e.contains("file /test/ddpcheck.toml"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn allow_env_takes_nccl_and_cuda_names_only() {
        let s = merge(
            Layer::default(),
            env(&[("DDPCHECK_ALLOW_ENV", "NCCL_TOPO_FILE, NCCL_GRAPH_FILE")]),
            file(""),
        )
        .settings()
        .unwrap();
        assert_eq!(s.allow_env, ["NCCL_TOPO_FILE", "NCCL_GRAPH_FILE"]);
        let unset = merge(Layer::default(), Layer::default(), file(""));
        assert!(unset.settings().unwrap().allow_env.is_empty());
        let e = merge(
            Layer::default(),
            Layer::default(),
            file("allow_env = \"NCCL_TOPO_FILE,LD_PRELOAD\"\n"),
        )
        .settings()
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("allow_env = ") && e.contains("\"LD_PRELOAD\" is not the name"),
            "{e}"
        );
    }
}

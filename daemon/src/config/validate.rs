//! Validation: every merged value checked and turned into the settings the daemon runs with.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::ratelimit::{WorkRate, MAX_WORK_BURST, MAX_WORK_RATE_PER_MINUTE};
use crate::tls::TlsFiles;
use crate::web_config::WebConfig;

use super::error::ConfigError;
use super::keys::{
    history_max_runs_default, COLLECT_INTERVAL_RANGE, DEFAULT_COLLECT_INTERVAL_S,
    DEFAULT_METRICS_LISTEN, MAX_HISTORY_MAX_RUNS,
};
use super::layer::Val;
use super::merge::Effective;

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
                Some(text) => crate::listen::socket_path(text)
                    .map_err(|e| self.invalid("listen", text, e.to_string()))?,
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
                self.invalid(
                    "web_config_file",
                    p.display().to_string(),
                    e.problem.to_string(),
                )
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
                .map_err(|e| self.invalid("factory_dirs", text.to_string(), e.to_string()))?;
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
}

//! Environment overrides: the `DDPCHECK_*` variables read into a layer.

use super::error::{ConfigError, Source};
use super::keys::KEYS;
use super::layer::Layer;

impl Layer {
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
}

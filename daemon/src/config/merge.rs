//! Merging the layers (flags > environment > file > defaults) and showing the result as TOML or
//! JSON.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::error::{ConfigError, Source};
use super::keys::{
    history_max_runs_default, DEFAULT_COLLECT_INTERVAL_S, DEFAULT_METRICS_LISTEN, KEYS,
};
use super::layer::{FileLayer, Layer, Val};

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

impl Effective {
    pub(super) fn source(&self, key: &str) -> Source {
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

//! The configuration's keys (name, environment variable, help) and its defaults and bounds.

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
pub(super) fn history_max_runs_default() -> i64 {
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

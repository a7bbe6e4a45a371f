//! Command-line arguments (clap derive) and their small parsers.

use clap::{Args, Parser, Subcommand};

/// ddpcheck — is this GPU node healthy, how fast is its interconnect really, and will PyTorch
/// DDP pay off on it (and with which settings)?
///
/// Runs locally on this node's GPUs, on a simulated node (--sim, for tests and demos), or
/// through the node's daemon (--daemon). Exit codes: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN,
/// 4 BUSY, 5 TIMEOUT, 64 usage error.
///
/// Start here: `ddpcheck demo` (a simulated 4xA6000 node, end to end), then on a GPU node
/// `ddpcheck topo`, `ddpcheck check`, `ddpcheck bench collectives`, `ddpcheck recommend --model gpt2-124m`.
#[derive(Parser, Debug)]
#[command(
    name = "ddpcheck",
    version,
    about,
    long_about,
    propagate_version = true
)]
pub struct Cli {
    /// Talk to ddpcheckd at this socket (e.g. /run/ddpcheck/ddpcheck.sock) or, with mutual TLS, at https://HOST:PORT (--tls-ca, --tls-cert, --tls-key), instead of running locally.
    #[arg(long, global = true, env = "DDPCHECK_DAEMON", value_name = "ADDR")]
    pub daemon: Option<String>,
    /// Use a simulated node: PROFILE[+FAULT...], e.g. h200x2-nvlink+degraded-pcie. Output is labelled SIMULATED.
    #[arg(long, global = true, env = "DDPCHECK_SIM", value_name = "SPEC")]
    pub sim: Option<String>,
    /// Print the report as JSON (schema: docs/schema.md) instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// With --daemon https://HOST:PORT: the CA certificate (PEM) that signed ddpcheckd's certificate.
    #[arg(long, global = true, env = ddpcheck_client::ClientTls::ENV_CA, value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// With --daemon https://HOST:PORT: this client's certificate (PEM), signed by the daemon's client CA.
    #[arg(long, global = true, env = ddpcheck_client::ClientTls::ENV_CERT, value_name = "FILE")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// With --daemon https://HOST:PORT: this client's private key (PEM).
    #[arg(long, global = true, env = ddpcheck_client::ClientTls::ENV_KEY, value_name = "FILE")]
    pub tls_key: Option<std::path::PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The client TLS settings for `--daemon https://...` (flags, else DDPCHECK_CLI_TLS_* env).
    pub fn client_tls(&self) -> ddpcheck_client::ClientTls {
        ddpcheck_client::ClientTls {
            ca: self.tls_ca.clone(),
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the GPU pair topology matrix (nvidia-smi topo -m form) with GPU UUIDs.
    Topo(TopoArgs),
    /// Preflight check for schedulers: health, PCIe, topology, NCCL all-reduce; verdict as exit code.
    Check(CheckArgs),
    /// Benchmarks: NCCL collectives (nccl-tests style) or PyTorch DDP.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Why is this node slow: each cause of low GPU bandwidth with its evidence and fix, per pair.
    Explain(crate::explain_cmd::ExplainArgs),
    /// Predict DDP scaling from this node's measurements and recommend settings.
    Recommend(Box<crate::recommend_cmd::RecommendArgs>),
    /// The runs the node's daemon has stored, newest first: `ddpcheck --daemon SOCKET history`.
    History(crate::history_cmd::HistoryArgs),
    /// Run the main flow on a simulated 4xA6000 PHB node through an in-process daemon.
    Demo,
    /// The daemon's configuration: `ddpcheck config check [--config FILE]`.
    #[command(subcommand)]
    Config(crate::config_cmd::ConfigCommand),
    /// Several nodes through their daemons: `ddpcheck cluster check --nodes a,b,c`.
    #[command(subcommand)]
    Cluster(crate::cluster_cmd::ClusterCommand),
}

#[derive(Args, Debug)]
pub struct TopoArgs {
    /// GPUs to show (indices, UUIDs or PCI bus ids, comma-separated). Default: all.
    #[arg(long, default_value = "")]
    pub gpus: String,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The job's GPUs (indices, UUIDs, PCI bus ids). Default: $SLURM_JOB_GPUS, $CUDA_VISIBLE_DEVICES, else all.
    #[arg(long)]
    pub gpus: Option<String>,
    /// Largest all-reduce message (e.g. 256M, 1G).
    #[arg(long, value_parser = parse_message_size, default_value = "256M")]
    pub max_bytes: u64,
    /// Smallest all-reduce message.
    #[arg(long, value_parser = parse_message_size, default_value = "8M")]
    pub min_bytes: u64,
    /// Hard deadline of the NCCL step, seconds.
    #[arg(long, default_value_t = 30.0)]
    pub deadline: f64,
    /// Slurm prolog mode: one line prefixed `ddpcheck:`, exit 0 to run the job, 1 to drain the node.
    #[arg(long)]
    pub prolog: bool,
    /// With --daemon: reuse the daemon's last preflight if it is at most this many seconds old
    /// (a local run keeps no verdicts: without --daemon this is a usage error).
    #[arg(long, value_name = "SECONDS")]
    pub max_age: Option<f64>,
    /// In prolog mode, drain on WARNING too.
    #[arg(long)]
    pub fail_on_warning: bool,
    /// Skip timing each GPU's host↔device copies over its own PCIe link.
    #[arg(long)]
    pub no_host_copies: bool,
    /// Test hook: make the NCCL worker hang, to prove the deadline (gives TIMEOUT).
    #[arg(long, hide = true)]
    pub inject_hang: bool,
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// NCCL collective sweeps with nccl-tests' columns and `# Avg bus bandwidth`.
    Collectives(CollectivesArgs),
    /// PyTorch DDP through torchrun: variants, GPU counts, sweeps, plots.
    Ddp(Box<crate::ddp_cmd::DdpArgs>),
}

#[derive(Args, Debug)]
pub struct CollectivesArgs {
    /// Collectives: all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce (comma-separated) or `all`.
    #[arg(long, default_value = "all_reduce")]
    pub ops: String,
    #[arg(long, default_value = "")]
    pub gpus: String,
    #[arg(long, short = 'b', value_parser = parse_message_size, default_value = "4K")]
    pub min_bytes: u64,
    #[arg(long, short = 'e', value_parser = parse_message_size, default_value = "1G")]
    pub max_bytes: u64,
    #[arg(long, short = 'f', default_value_t = 2)]
    pub step_factor: u64,
    #[arg(long, short = 'n', default_value_t = 20)]
    pub iters: u32,
    #[arg(long, short = 'w', default_value_t = 5)]
    pub warmup: u32,
    /// Skip the correctness check.
    #[arg(long)]
    pub no_check: bool,
    /// Skip the in-place runs.
    #[arg(long)]
    pub no_in_place: bool,
    /// Also measure under candidate NCCL settings: candidates separated by ',', variables of one
    /// candidate joined by '+' (NCCL_P2P_LEVEL=SYS,NCCL_P2P_DISABLE=1+NCCL_SHM_DISABLE=1).
    #[arg(long, value_name = "CANDIDATES")]
    pub env_ab: Option<String>,
    /// Hard deadline of each sweep, seconds.
    #[arg(long, default_value_t = 300.0)]
    pub deadline: f64,
}

/// Sizes like nccl-tests takes them: 4096, 4K, 8M, 1G (binary multiples).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 4096, 4K, 8M, 1G)"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// A message size of a sweep, as [`parse_size`]: at least 1 byte (0 would read as "the default"
/// once in a request) and at most the 16 GiB a sweep may ask for.
pub fn parse_message_size(s: &str) -> Result<u64, String> {
    let max = ddpcheck_core::backend::CollectiveRequest::MAX_BYTES;
    match parse_size(s)? {
        0 => Err(format!("{s:?}: a message is at least 1 byte")),
        n if n > max => Err(format!("{s:?} is above the 16 GiB a sweep may ask for")),
        n => Ok(n),
    }
}

/// Seconds of a budget or limit: above 0, at most a day.
pub fn parse_seconds_up_to_a_day(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if v.is_finite() && v > 0.0 && v <= 86_400.0 {
        Ok(v)
    } else {
        Err(format!("{s} outside (0, 86400] seconds"))
    }
}

/// `1,2,4` → [1, 2, 4].
pub fn parse_u32_list(s: &str) -> Result<Vec<u32>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| {
            x.parse::<u32>()
                .map_err(|_| format!("{x:?} is not a whole number"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("123"), Ok(123));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999999G").is_err());
    }

    #[test]
    fn message_sizes_and_seconds_are_bounded() {
        assert_eq!(parse_message_size("8M"), Ok(8 << 20));
        assert_eq!(parse_message_size("16G"), Ok(16 << 30));
        assert!(parse_message_size("0")
            .unwrap_err()
            .contains("at least 1 byte"));
        assert!(parse_message_size("17G").unwrap_err().contains("16 GiB"));
        assert_eq!(parse_seconds_up_to_a_day("120"), Ok(120.0));
        for bad in ["0", "-1", "1e30", "inf", "NaN", "x"] {
            assert!(parse_seconds_up_to_a_day(bad).is_err(), "{bad}");
        }
    }
}

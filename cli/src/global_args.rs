//! The options every command takes (`--daemon`, `--sim`, `--json`, the client's TLS files) and
//! where they say a command runs. The command files depend on this, never on the top-level
//! `Cli` that gathers them.

use clap::Args;
use ddpcheck_engine::{LocalRunner, RunError, Runner};

use crate::daemon_runner::DaemonRunner;

#[derive(Args, Debug)]
pub struct GlobalArgs {
    /// Talk to ddpcheckd at this socket (e.g. /run/ddpcheck/ddpcheck.sock) or, with mutual TLS, at https://HOST:PORT (--tls-ca, --tls-cert, --tls-key), instead of running locally.
    #[arg(long, global = true, env = "DDPCHECK_DAEMON", value_name = "ADDR")]
    pub daemon: Option<String>,
    /// Use a simulated node: PROFILE[+FAULT...], e.g. h200x2-nvlink+degraded-pcie. Output is labelled SIMULATED.
    #[arg(long, global = true, env = "DDPCHECK_SIM", value_name = "SPEC")]
    pub sim: Option<String>,
    /// Print the report as JSON (schema: docs/schema.md) instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Columns text output fits in, tables' cells wrapped to it (at least 40). Default: COLUMNS, else the terminal's width, else 100. JSON is never wrapped.
    #[arg(long, global = true, value_name = "COLUMNS", value_parser = clap::value_parser!(u16).range(1..))]
    pub width: Option<u16>,
    /// With --daemon https://HOST:PORT: the CA certificate (PEM) that signed ddpcheckd's certificate.
    #[arg(long, global = true, env = ddpcheck_client::ClientTls::ENV_CA, value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// With --daemon https://HOST:PORT: this client's certificate (PEM), signed by the daemon's client CA.
    #[arg(long, global = true, env = ddpcheck_client::ClientTls::ENV_CERT, value_name = "FILE")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// With --daemon https://HOST:PORT: this client's private key (PEM).
    #[arg(long, global = true, env = ddpcheck_client::ClientTls::ENV_KEY, value_name = "FILE")]
    pub tls_key: Option<std::path::PathBuf>,
}

impl GlobalArgs {
    /// The width text output fits in (`crate::width::output_width`).
    pub fn width(&self) -> crate::width::Width {
        crate::width::output_width(self.width)
    }

    /// The client TLS settings for `--daemon https://...` (flags, else DDPCHECK_CLI_TLS_* env).
    pub fn client_tls(&self) -> ddpcheck_client::ClientTls {
        ddpcheck_client::ClientTls {
            ca: self.tls_ca.clone(),
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
        }
    }
}

/// The daemon `--daemon` names, if any (never with `--sim`: the daemon's own backend answers).
pub fn daemon_runner(cli: &GlobalArgs) -> Result<Option<DaemonRunner>, RunError> {
    let Some(addr) = &cli.daemon else {
        return Ok(None);
    };
    if cli.sim.is_some() {
        return Err(RunError::Usage(
            "--sim and --daemon exclude each other: the daemon's own backend answers (start it with --sim)".into(),
        ));
    }
    Ok(Some(DaemonRunner { addr: addr.clone() }))
}

/// Where this command runs: the daemon, else this node (`--sim`: a simulated one).
pub fn make_target(cli: &GlobalArgs) -> Result<Box<dyn Runner>, RunError> {
    if let Some(daemon) = daemon_runner(cli)? {
        return Ok(Box::new(daemon));
    }
    Ok(Box::new(LocalRunner::for_node(cli.sim.as_deref())?))
}

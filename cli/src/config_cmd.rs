//! `ddpcheck config check`: the daemon validates its own configuration (`ddpcheckd
//! check-config`, as `nginx -t` does), so this runs the `ddpcheckd` found beside this
//! executable or on PATH, with the same file and environment, and passes its answer on.

use std::path::PathBuf;
use std::process::Command;

use clap::{Args, Subcommand};
use ddpcheck_engine::RunError;

use crate::daemon_bin;
use crate::global_args::GlobalArgs;

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Validate the daemon's configuration and print the effective values with their sources
    /// (flags > DDPCHECK_* environment > file > defaults). Exit 0 when valid, 64 when not.
    /// Runs `ddpcheckd check-config`.
    Check(ConfigCheckArgs),
}

#[derive(Args, Debug)]
pub struct ConfigCheckArgs {
    /// Configuration file [default: /etc/ddpcheck/ddpcheck.toml, which may be absent]; a file
    /// named here must exist.
    #[arg(long, env = "DDPCHECK_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
}

pub fn run(cli: &GlobalArgs, cmd: &ConfigCommand) -> Result<i32, RunError> {
    let ConfigCommand::Check(a) = cmd;
    let daemon =
        daemon_bin::find().ok_or_else(|| RunError::Daemon(daemon_bin::missing("config check")))?;
    let mut check = Command::new(&daemon);
    check.arg("check-config");
    if let Some(file) = &a.config {
        check.arg("--config").arg(file);
    }
    if cli.json {
        check.arg("--json");
    }
    let status = check
        .status()
        .map_err(|e| RunError::Daemon(format!("cannot run {}: {e}", daemon.display())))?;
    // A daemon killed by a signal gave no answer.
    Ok(status
        .code()
        .unwrap_or(ddpcheck_core::Verdict::Unknown.exit_code()))
}

//! `ddpcheck config check`: reads the daemon's configuration file and `DDPCHECK_*` environment
//! as ddpcheckd would, validates them, and prints the effective configuration with the source of
//! every value.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use ddpcheckd::config;

use crate::args::Cli;
use ddpcheck_engine::RunError;

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Validate the daemon's configuration and print the effective values with their sources
    /// (flags > DDPCHECK_* environment > file > defaults). Exit 0 when valid, 64 when not.
    Check(ConfigCheckArgs),
}

#[derive(Args, Debug)]
pub struct ConfigCheckArgs {
    /// Configuration file [default: /etc/ddpcheck/ddpcheck.toml, which may be absent]; a file
    /// named here must exist.
    #[arg(long, env = config::CONFIG_ENV, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

pub fn run(cli: &Cli, cmd: &ConfigCommand) -> Result<i32, RunError> {
    let ConfigCommand::Check(a) = cmd;
    let usage = |e: config::ConfigError| RunError::Usage(format!("config: {e}"));
    let file = config::read_file(a.config.as_deref()).map_err(usage)?;
    let env = config::Layer::from_env(|k| std::env::var(k).ok()).map_err(usage)?;
    // No daemon flags here: what a daemon started with this file and environment would use.
    let effective = config::merge(config::Layer::default(), env, file);
    effective.settings().map_err(usage)?;
    if cli.json {
        crate::print_json(&effective.to_json())?;
    } else {
        print!("{}", effective.render_toml());
    }
    Ok(0)
}

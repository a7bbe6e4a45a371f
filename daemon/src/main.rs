//! ddpcheckd: the node daemon's command line.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser};
use ddpcheck_engine as engine;
use ddpcheck_gpu::RealConfig;
use ddpcheckd::config;
use ddpcheckd::run::{self, DaemonConfig};

/// ddpcheckd — per-node daemon of ddpcheck: serves the ddpcheck.v1 gRPC API on a Unix socket,
/// keeps a snapshot of the node's GPUs fresh, runs preflights, benchmarks and explain on request
/// (one at a time), and exports Prometheus metrics.
#[derive(Parser, Debug)]
#[command(
    version,
    about,
    long_about = None,
    after_help = "`ddpcheckd check-config [--config FILE] [--json]` validates the configuration file and DDPCHECK_* environment and prints the effective values with their sources (exit 0 valid, 64 not)."
)]
struct Args {
    /// Configuration file (TOML; keys as the flags below, with `_`). Precedence: flags >
    /// DDPCHECK_* environment > file > defaults. The default file may be absent; a file given
    /// here must exist.
    #[arg(long, env = "DDPCHECK_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Simulate a node instead of using real GPUs: PROFILE[+FAULT...] (e.g. h200x2-nvlink+slow-link).
    #[arg(long, env = "DDPCHECK_SIM")]
    sim: Option<String>,
    /// Control socket: a path, or gRPC's unix:PATH / unix:///ABS; other schemes are refused
    /// [default: /run/ddpcheck/ddpcheck.sock].
    #[arg(long, env = "DDPCHECK_LISTEN")]
    listen: Option<PathBuf>,
    /// Also listen on TCP (requires --tls-cert, --tls-key, --tls-client-ca: mutual TLS only).
    #[arg(long, env = "DDPCHECK_TCP")]
    tcp: Option<String>,
    #[arg(long, env = "DDPCHECK_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    #[arg(long, env = "DDPCHECK_TLS_KEY")]
    tls_key: Option<PathBuf>,
    #[arg(long, env = "DDPCHECK_TLS_CLIENT_CA")]
    tls_client_ca: Option<PathBuf>,
    /// Address of the /metrics endpoint, or "none" [default: 0.0.0.0:9402].
    #[arg(long, env = "DDPCHECK_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    /// /metrics TLS and basic auth: a web configuration file in the Prometheus exporter-toolkit
    /// format (tls_server_config, basic_auth_users). Unset: plain HTTP, no authentication.
    #[arg(long, env = "DDPCHECK_WEB_CONFIG_FILE", value_name = "FILE")]
    web_config_file: Option<PathBuf>,
    /// Runtime directory (node lock). Default: $RUNTIME_DIRECTORY, /run/ddpcheck, ...
    #[arg(long, env = "DDPCHECK_RUNTIME_DIR")]
    runtime_dir: Option<PathBuf>,
    /// State directory (history database). Default: $STATE_DIRECTORY or /var/lib/ddpcheck.
    #[arg(long, env = "DDPCHECK_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Seconds between snapshot refreshes [default: 30].
    #[arg(long, env = "DDPCHECK_COLLECT_INTERVAL")]
    collect_interval: Option<f64>,
    /// Host or IP other nodes reach this one at in cluster runs (the NCCL rendezvous when it is
    /// the first node) [default: the address the host name resolves to].
    #[arg(long, env = "DDPCHECK_CLUSTER_ADDRESS")]
    cluster_address: Option<String>,
    /// Work-starting calls (preflights, benchmarks and explain; cluster phases are single flight
    /// only) allowed per minute on average; 0 turns the limit off [default: 30].
    #[arg(long, env = "DDPCHECK_WORK_RATE_PER_MINUTE")]
    work_rate_per_minute: Option<f64>,
    /// Work-starting calls allowed back to back before the per-minute rate applies [default: 10].
    #[arg(long, env = "DDPCHECK_WORK_BURST")]
    work_burst: Option<i64>,
    /// Runs the history keeps; beyond it the oldest are deleted; 0 keeps all [default: 10000].
    #[arg(long, env = "DDPCHECK_HISTORY_MAX_RUNS")]
    history_max_runs: Option<i64>,
    /// Folders (':'-separated, absolute) whose Python model factories (`bench ddp --model
    /// py:FILE:FUNCTION`) the daemon may run, as its own user [default: none; library models
    /// such as torchvision:NAME are always allowed].
    #[arg(long, env = "DDPCHECK_FACTORY_DIRS")]
    factory_dirs: Option<String>,
    /// NCCL_*/CUDA_* variables (','-separated names) a caller may set through the daemon beyond
    /// the transport and algorithm settings, such as NCCL_TOPO_FILE [default: none].
    #[arg(long, env = "DDPCHECK_ALLOW_ENV", value_name = "NAMES")]
    allow_env: Option<String>,
}

impl Args {
    /// Flags and environment as two configuration layers; clap says which gave each value.
    fn layers(self, matches: &clap::ArgMatches) -> (config::Layer, config::Layer) {
        let mut env = config::Layer {
            sim: self.sim,
            listen: self.listen,
            tcp: self.tcp,
            tls_cert: self.tls_cert,
            tls_key: self.tls_key,
            tls_client_ca: self.tls_client_ca,
            metrics_listen: self.metrics_listen,
            web_config_file: self.web_config_file,
            runtime_dir: self.runtime_dir,
            state_dir: self.state_dir,
            collect_interval: self.collect_interval,
            cluster_address: self.cluster_address,
            work_rate_per_minute: self.work_rate_per_minute,
            work_burst: self.work_burst,
            history_max_runs: self.history_max_runs,
            factory_dirs: self.factory_dirs,
            allow_env: self.allow_env,
        };
        let flags = env.split_off(|id| {
            matches!(
                matches.value_source(id),
                Some(clap::parser::ValueSource::CommandLine)
            )
        });
        (flags, env)
    }
}

/// How the daemon's own process ends, where it does not end as a worker: docs/exit-codes.md,
/// "ddpcheckd".
#[derive(Clone, Copy, Debug)]
enum DaemonExit {
    /// Bad flags, an invalid configuration, a `--listen` path it must not take.
    Usage,
    /// Anything else that stops it: the runtime, the state folder, output it cannot write.
    Fault,
}

/// The one map of the daemon's ends to exit codes.
fn exit(how: DaemonExit) -> ExitCode {
    ExitCode::from(match how {
        DaemonExit::Usage => 64,
        DaemonExit::Fault => 1,
    })
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    // Hidden subcommand: the NCCL worker runs as a child of our own binary (invariant 1).
    if argv.get(1).map(String::as_str) == Some("worker") {
        let code = ddpcheck_gpu::worker::main_from_args(&argv[2..]);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    if argv.get(1).map(String::as_str) == Some("check-config") {
        return check_config(&argv[2..]);
    }
    // Parsed through ArgMatches so each value's source (flag or environment) is known.
    let parsed = Args::command()
        .try_get_matches()
        .and_then(|m| Args::from_arg_matches(&m).map(|a| (a, m)));
    let (args, matches) = match parsed {
        Ok(p) => p,
        Err(e) if e.use_stderr() => {
            // Bad flags: one clear line and exit 64 (scripts read the first line of stderr).
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            eprintln!(
                "ddpcheckd: {} (see --help)",
                first.trim_start_matches("error: ")
            );
            return exit(DaemonExit::Usage);
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    // Before anything is written: past `ulimit -f` a write fails (EFBIG), it does not kill us.
    ddpcheckd::signals::ignore_file_size_limit();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DDPCHECK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colours only on a terminal: under systemd stderr is the journal, in tests a pipe.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match ddpcheckd::limits::raise_nofile() {
        Ok((before, after)) if after > before => {
            tracing::info!("open-file limit raised from {before} to the hard limit {after}");
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot raise the open-file limit: {e}"),
    }
    ddpcheckd::runtime::limit_malloc_arenas();
    let rt = match ddpcheckd::runtime::build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ddpcheckd: cannot start the runtime: {e}");
            return exit(DaemonExit::Fault);
        }
    };
    let outcome = rt.block_on(daemon(args, &matches));
    // A blocking task still waiting on a stuck probe must not hold the exit past the unit's
    // TimeoutStopSec.
    rt.shutdown_timeout(Duration::from_secs(5));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ddpcheckd: {}", one_line(&e));
            exit(if e.downcast_ref::<engine::UsageError>().is_some() {
                DaemonExit::Usage
            } else {
                DaemonExit::Fault
            })
        }
    }
}

/// The error and its causes on one line, each said once: an error whose message already ends
/// with its cause (`creating DIR: No such file or directory`) is not followed by it again.
fn one_line(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    text.replace('\n', " ")
}

/// `ddpcheckd check-config`: validates the configuration file and the DDPCHECK_* environment
/// as the daemon would read them, and prints the effective configuration with the source of
/// every value.
#[derive(Parser, Debug)]
#[command(name = "ddpcheckd check-config", version)]
struct CheckConfig {
    /// Configuration file [default: /etc/ddpcheck/ddpcheck.toml, which may be absent]; a file
    /// named here must exist.
    #[arg(long, env = config::CONFIG_ENV, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the effective configuration as JSON instead of TOML.
    #[arg(long)]
    json: bool,
}

fn check_config(args: &[String]) -> ExitCode {
    let argv = std::iter::once("ddpcheckd check-config".to_string()).chain(args.iter().cloned());
    let a = match CheckConfig::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) if e.use_stderr() => {
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            eprintln!(
                "ddpcheckd: {} (see check-config --help)",
                first.trim_start_matches("error: ")
            );
            return exit(DaemonExit::Usage);
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    match effective_config(a.config.as_deref()) {
        Ok(effective) if a.json => match serde_json::to_string_pretty(&effective.to_json()) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("ddpcheckd: JSON output: {e}");
                return exit(DaemonExit::Fault);
            }
        },
        Ok(effective) => print!("{}", effective.render_toml()),
        Err(e) => {
            eprintln!("ddpcheckd: config: {e}");
            return exit(DaemonExit::Usage);
        }
    }
    ExitCode::SUCCESS
}

/// What a daemon started with this file and environment (no flags) would use, validated.
fn effective_config(
    file: Option<&std::path::Path>,
) -> Result<config::Effective, config::ConfigError> {
    let file = config::read_file(file)?;
    let env = config::Layer::from_env(|k| std::env::var(k).ok())?;
    let effective = config::merge(config::Layer::default(), env, file);
    let settings = effective.settings()?;
    ddpcheckd::usable::check(&effective, &settings)?;
    Ok(effective)
}

async fn daemon(args: Args, matches: &clap::ArgMatches) -> anyhow::Result<()> {
    let usage = |e: config::ConfigError| engine::UsageError(e.to_string());
    let file = config::read_file(args.config.as_deref()).map_err(usage)?;
    let (flags, env) = args.layers(matches);
    let effective = config::merge(flags, env, file);
    let settings = effective.settings().map_err(usage)?;
    tracing::info!(
        file = %effective.file.path.display(),
        present = effective.file.present,
        "configuration"
    );
    tracing::debug!("{}", effective.render_toml());
    for warning in settings
        .allow_env
        .iter()
        .filter_map(|name| ddpcheck_core::caller_env::allowance_warning(name))
    {
        tracing::warn!("{warning}");
    }
    // Anything at the socket path but a stale socket is refused before anything starts (64).
    ddpcheckd::listen::before_bind(&settings.listen)
        .map_err(|e| engine::UsageError(e.to_string()))?;
    let runtime_dir = settings
        .runtime_dir
        .or_else(|| std::env::var_os("RUNTIME_DIRECTORY").map(PathBuf::from))
        .unwrap_or_else(engine::lock::default_runtime_dir);
    let state_dir = settings
        .state_dir
        .or_else(|| std::env::var_os("STATE_DIRECTORY").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/var/lib/ddpcheck"));
    let real = RealConfig {
        cluster_address: settings.cluster_address.clone(),
        ..RealConfig::default()
    };
    let backend = engine::make_backend(settings.sim.as_deref(), real)?;
    let label = backend.label();
    let cfg = DaemonConfig {
        socket: settings.listen,
        tcp: settings.tcp,
        tls: settings.tls,
        metrics_addr: settings.metrics_listen,
        runtime_dir,
        state_dir,
        collect_interval: settings.collect_interval,
        collect_deadline: Duration::from_secs(20),
    };
    // Handlers first: a SIGTERM right after the ready line must stop us cleanly, not kill us.
    let mut signals = ddpcheckd::signals::Signals::install()?;
    let opts = run::Options {
        web: settings.web_config,
        work_rate: settings.work_rate,
        history_max_runs: settings.history_max_runs,
        factory_dirs: settings.factory_dirs,
        allow_env: settings.allow_env,
        peer_timeouts: ddpcheckd::limits::PeerTimeouts::default(),
    };
    let running = run::start_with_options(cfg, opts, backend).await?;
    tracing::info!(
        backend = %label,
        socket = ?running.socket,
        metrics = ?running.metrics_addr,
        tcp = ?running.tcp_addr,
        "ddpcheckd ready"
    );
    // One plain line for people and test harnesses: where to connect.
    eprintln!(
        "ddpcheckd: ready backend={label} socket={} metrics={}",
        running.socket.display(),
        running
            .metrics_addr
            .map(|a| a.to_string())
            .unwrap_or_else(|| "none".into())
    );
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
    ddpcheckd::runtime::release_free_memory();
    let why = signals.until_stop().await;
    tracing::info!("{why}: shutting down");
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    // From here a run that ends was ended by this stop; simulated hangs end as a worker would.
    running.node.begin_stop();
    ddpcheck_sim::stop::stop_hangs();
    // End the children of a run in progress first (their group, grandchildren included), so the
    // run's blocking task returns and nothing is left on the GPUs.
    let ended = tokio::task::spawn_blocking(|| {
        ddpcheck_gpu::children::terminate_all(Duration::from_secs(5))
    })
    .await
    .unwrap_or(0);
    if ended > 0 {
        tracing::warn!("stopped {ended} running child process group(s)");
    }
    running.shutdown().await;
    Ok(())
}

//! ddpcheckd: the node daemon's command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use ddpcheck_gpu::RealConfig;
use ddpcheckd::engine;
use ddpcheckd::run::{self, DaemonConfig, TlsFiles};
use tokio::signal::unix::{signal, SignalKind};

/// ddpcheckd — per-node daemon of ddpcheck: serves the ddpcheck.v1 gRPC API on a Unix socket,
/// keeps a snapshot of the node's GPUs fresh, runs preflights and benchmarks on request (one at
/// a time), and exports Prometheus metrics.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
struct Args {
    /// Simulate a node instead of using real GPUs: PROFILE[+FAULT...] (e.g. h200x2-nvlink+slow-link).
    #[arg(long, env = "DDPCHECK_SIM")]
    sim: Option<String>,
    /// Control socket path.
    #[arg(long, env = "DDPCHECK_LISTEN", default_value = ddpcheckd::client::DEFAULT_SOCKET)]
    listen: PathBuf,
    /// Also listen on TCP (requires --tls-cert, --tls-key, --tls-client-ca: mutual TLS only).
    #[arg(long, env = "DDPCHECK_TCP")]
    tcp: Option<SocketAddr>,
    #[arg(long, env = "DDPCHECK_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    #[arg(long, env = "DDPCHECK_TLS_KEY")]
    tls_key: Option<PathBuf>,
    #[arg(long, env = "DDPCHECK_TLS_CLIENT_CA")]
    tls_client_ca: Option<PathBuf>,
    /// Address of the /metrics endpoint, or "none".
    #[arg(long, env = "DDPCHECK_METRICS_LISTEN", default_value = "0.0.0.0:9402")]
    metrics_listen: String,
    /// Runtime directory (node lock). Default: $RUNTIME_DIRECTORY, /run/ddpcheck, ...
    #[arg(long, env = "DDPCHECK_RUNTIME_DIR")]
    runtime_dir: Option<PathBuf>,
    /// State directory (history database). Default: $STATE_DIRECTORY or /var/lib/ddpcheck.
    #[arg(long, env = "DDPCHECK_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Seconds between snapshot refreshes.
    #[arg(long, env = "DDPCHECK_COLLECT_INTERVAL", default_value_t = 30.0)]
    collect_interval: f64,
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    // Hidden subcommand: the NCCL worker runs as a child of our own binary (invariant 1).
    if argv.get(1).map(String::as_str) == Some("worker") {
        let code = ddpcheck_gpu::worker::main_from_args(&argv[2..]);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) if e.use_stderr() => {
            // Bad flags: one clear line and exit 64 (scripts read the first line of stderr).
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            eprintln!("ddpcheckd: {} (see --help)", first.trim_start_matches("error: "));
            return ExitCode::from(64);
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DDPCHECK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ddpcheckd: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(daemon(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ddpcheckd: {e:#}");
            ExitCode::from(if e.downcast_ref::<engine::UsageError>().is_some() {
                64
            } else {
                1
            })
        }
    }
}

async fn daemon(args: Args) -> anyhow::Result<()> {
    if !(args.collect_interval.is_finite() && (0.05..=86400.0).contains(&args.collect_interval)) {
        return Err(engine::UsageError(format!(
            "--collect-interval {} outside 0.05..=86400 s",
            args.collect_interval
        ))
        .into());
    }
    let metrics_addr = match args.metrics_listen.as_str() {
        "none" | "" => None,
        s => Some(
            s.parse::<SocketAddr>()
                .map_err(|e| engine::UsageError(format!("--metrics-listen {s:?}: {e}")))?,
        ),
    };
    let tls = match (args.tls_cert, args.tls_key, args.tls_client_ca) {
        (Some(cert), Some(key), Some(client_ca)) => Some(TlsFiles {
            cert,
            key,
            client_ca,
        }),
        (None, None, None) => None,
        _ => {
            return Err(engine::UsageError(
                "--tls-cert, --tls-key and --tls-client-ca go together".into(),
            )
            .into())
        }
    };
    let runtime_dir = args
        .runtime_dir
        .or_else(|| std::env::var_os("RUNTIME_DIRECTORY").map(PathBuf::from))
        .unwrap_or_else(ddpcheckd::lock::default_runtime_dir);
    let state_dir = args
        .state_dir
        .or_else(|| std::env::var_os("STATE_DIRECTORY").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/var/lib/ddpcheck"));
    let backend = engine::make_backend(args.sim.as_deref(), RealConfig::default())?;
    let label = backend.label();
    let cfg = DaemonConfig {
        socket: args.listen,
        tcp: args.tcp,
        tls,
        metrics_addr,
        runtime_dir,
        state_dir,
        collect_interval: Duration::from_secs_f64(args.collect_interval),
        collect_deadline: Duration::from_secs(20),
    };
    // Handlers first: a SIGTERM right after the ready line must stop us cleanly, not kill us.
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let running = run::start(cfg, backend).await?;
    tracing::info!(
        backend = %label,
        socket = %running.socket.display(),
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
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    running.shutdown().await;
    Ok(())
}

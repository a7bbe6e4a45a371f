//! Starting and stopping the daemon: listeners (Unix socket, optional TCP with mTLS), the
//! collector loop, the `/metrics` endpoint, systemd notification, and clean shutdown.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ddpcheck_core::FullBackend;
use ddpcheck_proto::v1::ddpcheck_server::DdpcheckServer;
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::DaemonError;
use crate::history_recover::open_recovering;
use crate::node::Node;
use crate::ratelimit::{WorkLimiter, WorkRate};
use crate::server::Service;
use crate::state_lock::StateLock;
use crate::tls::TlsFiles;
use crate::web_config::WebConfig;
use ddpcheck_engine::lock::lock_path;

/// Settings of one daemon instance.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    /// The Unix socket of the control API (mode 0660).
    pub socket: PathBuf,
    /// Optional TCP listener; requires `tls` (TCP only with mTLS).
    pub tcp: Option<SocketAddr>,
    pub tls: Option<TlsFiles>,
    /// `/metrics` listener; `None` disables it.
    pub metrics_addr: Option<SocketAddr>,
    pub runtime_dir: PathBuf,
    pub state_dir: PathBuf,
    /// How often the collector refreshes the snapshot.
    pub collect_interval: Duration,
    /// Deadline of one collection; past it the snapshot keeps its old data and says so.
    pub collect_deadline: Duration,
}

impl DaemonConfig {
    /// A private daemon whose socket (`ddpcheck.sock`), runtime and state folders all live in
    /// `dir`: no TCP, no `/metrics`, the collector every 30 s with a 5 s deadline. The demo's and
    /// the tests' in-process daemons.
    pub fn in_dir(dir: &std::path::Path) -> DaemonConfig {
        DaemonConfig {
            socket: dir.join("ddpcheck.sock"),
            tcp: None,
            tls: None,
            metrics_addr: None,
            runtime_dir: dir.join("run"),
            state_dir: dir.join("state"),
            collect_interval: Duration::from_secs(30),
            collect_deadline: Duration::from_secs(5),
        }
    }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DaemonError {
    let what = what.into();
    move |source| DaemonError::Io { what, source }
}

/// A started daemon. Dropping it does not stop it: call [`Running::shutdown`].
pub struct Running {
    pub node: Arc<Node>,
    pub socket: PathBuf,
    pub metrics_addr: Option<SocketAddr>,
    pub tcp_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    /// Folders made for the socket, the deepest first: removed again on shutdown.
    made_dirs: Vec<PathBuf>,
    /// The state folder's lock, released when the daemon is shut down (or its process ends).
    _state_lock: StateLock,
}

impl Running {
    /// Stops the listeners and the collector and waits for them (bounded). A run still going
    /// is stored `interrupted` when it ends.
    pub async fn shutdown(self) {
        self.node.begin_stop();
        let _ = self.stop.send(true);
        // One deadline for all of them, not one each: the stop is bounded by STOP_WAIT.
        let deadline = tokio::time::Instant::now() + crate::limits::STOP_WAIT;
        for mut t in self.tasks {
            if tokio::time::timeout_at(deadline, &mut t).await.is_err() {
                tracing::warn!(
                    "a listener or the collector was still busy {} s after the stop: ended",
                    crate::limits::STOP_WAIT.as_secs()
                );
                t.abort();
            }
        }
        // A last try for runs the history refused: what still fails is logged, and lost.
        let n = self.node.clone();
        let flush = tokio::task::spawn_blocking(move || n.flush_unsaved());
        let _ = tokio::time::timeout(crate::limits::STOP_WAIT, flush).await;
        let _ = std::fs::remove_file(&self.socket);
        // remove_dir takes only an empty folder: what someone else put there keeps it.
        for dir in &self.made_dirs {
            if let Err(e) = std::fs::remove_dir(dir) {
                tracing::debug!("keeping {}: {e}", dir.display());
            }
        }
    }
}

/// Creates `dir` and its missing parents; returns the folders it made, the deepest first.
fn create_dirs(dir: &Path) -> Result<Vec<PathBuf>, DaemonError> {
    let missing: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .map(Path::to_path_buf)
        .collect();
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    Ok(missing)
}

/// Binds the Unix socket, refusing to steal one that a live daemon answers on or to replace
/// anything that is not a socket. Also returns the folders made for it, the deepest first.
fn bind_unix(path: &Path) -> Result<(UnixListener, Vec<PathBuf>), DaemonError> {
    let made = match path.parent() {
        Some(dir) => create_dirs(dir)?,
        None => Vec::new(),
    };
    if crate::listen::before_bind(path)? == crate::listen::AtSocketPath::StaleSocket {
        std::fs::remove_file(path).map_err(io(format!("removing stale {}", path.display())))?;
    }
    let l = UnixListener::bind(path).map_err(io(format!("binding {}", path.display())))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .map_err(io(format!("chmod {}", path.display())))?;
    chown_group(path, "ddpcheck");
    Ok((l, made))
}

/// Gives the socket to group `ddpcheck` when it exists, so members may use the API.
fn chown_group(path: &Path, group: &str) {
    let (Ok(g), Ok(p)) = (
        std::ffi::CString::new(group),
        std::ffi::CString::new(path.as_os_str().as_encoded_bytes()),
    ) else {
        return;
    };
    // SAFETY: both are valid C strings; getgrnam's result is read before any other call.
    unsafe {
        let gr = libc::getgrnam(g.as_ptr());
        if !gr.is_null() {
            let _ = libc::chown(p.as_ptr(), u32::MAX, (*gr).gr_gid);
        }
    }
}

/// Starts a daemon on `backend`. Returns once the socket and `/metrics` accept connections
/// and the first snapshot is taken (or its deadline passed).
pub async fn start(
    cfg: DaemonConfig,
    backend: Arc<dyn FullBackend>,
) -> Result<Running, DaemonError> {
    start_with_web_config(cfg, None, backend).await
}

/// [`start`], with `/metrics` behind the TLS and basic auth of `web` (exporter-toolkit web
/// configuration, already loaded and checked).
pub async fn start_with_web_config(
    cfg: DaemonConfig,
    web: Option<Arc<WebConfig>>,
    backend: Arc<dyn FullBackend>,
) -> Result<Running, DaemonError> {
    start_with_options(
        cfg,
        Options {
            web,
            ..Options::default()
        },
        backend,
    )
    .await
}

/// What a daemon may have beyond [`DaemonConfig`]. The default is what [`start`] gives: plain
/// `/metrics` and no rate limit (embedders and tests that run many calls back to back); the
/// `ddpcheckd` binary passes its configured limit (default 30 a minute, burst 10).
#[derive(Clone, Debug)]
pub struct Options {
    /// `/metrics` TLS and basic auth (exporter-toolkit web configuration, loaded and checked).
    pub web: Option<Arc<WebConfig>>,
    /// Rate limit of work-starting gRPC calls, on top of single flight.
    pub work_rate: WorkRate,
    /// Runs the history keeps, the oldest deleted beyond it (`None`: all).
    pub history_max_runs: Option<u64>,
    /// Folders whose model factories a `BenchDdp` call may name (empty: none).
    pub factory_dirs: Vec<std::path::PathBuf>,
    /// Variables a caller may set beyond the transport and algorithm settings (empty: none).
    pub allow_env: Vec<String>,
    /// How long a network peer may keep the daemon waiting (the documented defaults).
    pub peer_timeouts: crate::limits::PeerTimeouts,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            web: None,
            work_rate: WorkRate::OFF,
            history_max_runs: None,
            factory_dirs: Vec::new(),
            allow_env: Vec::new(),
            peer_timeouts: crate::limits::PeerTimeouts::default(),
        }
    }
}

/// [`start`] with [`Options`].
pub async fn start_with_options(
    cfg: DaemonConfig,
    opts: Options,
    backend: Arc<dyn FullBackend>,
) -> Result<Running, DaemonError> {
    let Options {
        web,
        work_rate,
        history_max_runs,
        factory_dirs,
        allow_env,
        peer_timeouts,
    } = opts;
    if cfg.tcp.is_some() && cfg.tls.is_none() {
        return Err(DaemonError::Config(
            "TCP needs mTLS: give --tls-cert, --tls-key and --tls-client-ca".into(),
        ));
    }
    std::fs::create_dir_all(&cfg.state_dir)
        .map_err(io(format!("creating {}", cfg.state_dir.display())))?;
    // Before the history is touched: a second daemon on this folder must not mark the first
    // one's live run `interrupted`.
    let state_lock = StateLock::take(&cfg.state_dir)?;
    // A corrupted file is moved aside (logged with its new name), never a daemon that is down.
    let (history, _aside) = open_recovering(&cfg.state_dir.join("history.db"))?;
    let interrupted = history.mark_interrupted()?;
    if interrupted > 0 {
        tracing::warn!("{interrupted} run(s) were interrupted by the previous daemon's stop");
    }
    let mut node = Node::new(backend, history, lock_path(&cfg.runtime_dir));
    node.work_limiter = WorkLimiter::new(work_rate);
    node.history_max_runs = history_max_runs;
    node.factory_dirs = factory_dirs;
    node.allow_env = allow_env;
    node.prune_history();
    let node = Arc::new(node);
    let (stop, stop_rx) = watch::channel(false);
    let mut tasks = Vec::new();

    // First snapshot before serving, so every series exists from the first scrape.
    {
        let n = node.clone();
        let first = tokio::task::spawn_blocking(move || n.collect());
        let _ = tokio::time::timeout(cfg.collect_deadline, first).await;
    }
    tasks.push(tokio::spawn(collector_loop(
        node.clone(),
        cfg.clone(),
        stop_rx.clone(),
    )));

    let (unix, made_dirs) = bind_unix(&cfg.socket)?;
    let svc = Service { node: node.clone() };
    {
        let mut rx = stop_rx.clone();
        let incoming = crate::accept::unix(unix, peer_timeouts, stop_rx.clone());
        // Pings keep a live client's connection from looking idle; one that answers none goes.
        let server = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(peer_timeouts.keepalive_interval))
            .http2_keepalive_timeout(Some(peer_timeouts.keepalive_timeout))
            .add_service(DdpcheckServer::new(svc))
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = rx.wait_for(|s| *s).await;
            });
        tasks.push(tokio::spawn(async move {
            if let Err(e) = server.await {
                tracing::error!("gRPC (unix) server: {e}");
            }
        }));
    }

    let mut tcp_addr = None;
    if let (Some(addr), Some(tls)) = (cfg.tcp, cfg.tls.clone()) {
        let (bound, task) =
            crate::tls::serve_tcp(addr, &tls, node.clone(), peer_timeouts, stop_rx.clone()).await?;
        tcp_addr = Some(bound);
        tasks.push(task);
    }

    let mut metrics_addr = None;
    if let Some(addr) = cfg.metrics_addr {
        let listener =
            bind_tcp(addr, METRICS_BACKLOG).map_err(io(format!("binding /metrics on {addr}")))?;
        metrics_addr = listener.local_addr().ok();
        tasks.push(tokio::spawn(crate::http::serve_with(
            listener,
            node.clone(),
            web,
            peer_timeouts,
            stop_rx.clone(),
        )));
    }

    Ok(Running {
        node,
        socket: cfg.socket,
        metrics_addr,
        tcp_addr,
        stop,
        tasks,
        made_dirs,
        _state_lock: state_lock,
    })
}

/// Listen backlog of `/metrics`. tokio's default (128) overflows when a few hundred scrapers
/// connect at once: the kernel drops their SYNs and each waits ~1 s for the retransmit.
const METRICS_BACKLOG: u32 = 1024;

/// Binds a TCP listener with `backlog` (the kernel caps it at `net.core.somaxconn`).
fn bind_tcp(addr: SocketAddr, backlog: u32) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// Refreshes the snapshot on a blocking thread every interval; feeds the systemd watchdog only
/// when a collection finished, so a wedged collector gets the service restarted.
async fn collector_loop(node: Arc<Node>, cfg: DaemonConfig, mut stop: watch::Receiver<bool>) {
    let mut busy: Option<JoinHandle<()>> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(cfg.collect_interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        // A collection still running (a stuck probe) is not started twice.
        if let Some(h) = &busy {
            if !h.is_finished() {
                tracing::warn!("previous collection still running; snapshot is aging");
                continue;
            }
        }
        // Runs the history refused are retried beside the collection, never inside its
        // deadline (a write waits up to SQLite's busy timeout).
        let n = node.clone();
        tokio::task::spawn_blocking(move || n.flush_unsaved());
        let n = node.clone();
        let h = tokio::task::spawn_blocking(move || n.collect());
        busy = Some(h);
        if let Some(h) = busy.as_mut() {
            if tokio::time::timeout(cfg.collect_deadline, h).await.is_ok() {
                busy = None;
                crate::runtime::release_free_memory();
                let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog]);
            } else {
                // The backend did not honour its own deadlines: readers keep the last snapshot,
                // now marked stuck, and the watchdog is not fed.
                node.mark_collection_stuck(cfg.collect_deadline);
            }
        }
    }
}

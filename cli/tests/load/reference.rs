//! Reference servers for the load test: a loopback HTTP server and a gRPC `GetNode` server on a
//! Unix socket that answer fixed copies of the daemon's own answers, doing no other work. Driven
//! by the same client tasks at the same time as the daemon, they measure what the machine and the
//! clients alone cost a call, so the test can hold the daemon to that instead of to a clock.

use std::sync::Arc;

use ddpcheck_proto::v1::ddpcheck_server::{Ddpcheck, DdpcheckServer};
use ddpcheck_proto::v1::{
    BenchCollectivesRequest, BenchDdpRequest, ClusterCollectiveReply, ClusterCollectiveRequest,
    ExplainRequest, GetHistoryRequest, GetLastPreflightRequest, GetNodeRequest, GetTopologyRequest,
    HistoryReply, NodeSnapshot, PreflightRequest, Report, WorkEvent,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::{Request, Response, Status};

/// The daemon's listen backlog for `/metrics` (`run::bind_tcp`), so both queue alike.
const BACKLOG: u32 = 1024;

/// The two reference servers, on a runtime of their own (two workers, as the daemon has on
/// this machine's two cores); stopped when dropped.
pub struct Reference {
    /// `127.0.0.1:PORT` of the HTTP server.
    pub metrics: String,
    /// Path of the gRPC server's Unix socket.
    pub socket: String,
    _dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Reference {
    /// Serves `metrics_body` (an exposition the daemon gave) to every HTTP request and
    /// `snapshot` (a `GetNode` answer the daemon gave) to every `GetNode`.
    pub fn start(metrics_body: String, snapshot: NodeSnapshot) -> Reference {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("reference.sock");
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let path = socket.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("reference runtime");
            rt.block_on(async move {
                let tcp = tokio::net::TcpSocket::new_v4().expect("socket");
                tcp.bind("127.0.0.1:0".parse().unwrap()).expect("bind");
                let listener = tcp.listen(BACKLOG).expect("listen");
                ready_tx.send(listener.local_addr().unwrap()).unwrap();
                let http = tokio::spawn(serve_http(listener, Arc::from(answer(&metrics_body))));
                let unix = tokio::net::UnixListener::bind(&path).expect("bind reference socket");
                tonic::transport::Server::builder()
                    .add_service(DdpcheckServer::new(Fixed(snapshot)))
                    .serve_with_incoming_shutdown(
                        tokio_stream::wrappers::UnixListenerStream::new(unix),
                        async move {
                            let _ = stop_rx.await;
                        },
                    )
                    .await
                    .expect("reference gRPC server");
                http.abort();
            });
        });
        let addr = ready_rx.recv().expect("reference HTTP server ready");
        Reference {
            metrics: addr.to_string(),
            socket: socket.display().to_string(),
            _dir: dir,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Reference {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The whole HTTP/1.0 answer, built once.
fn answer(body: &str) -> Vec<u8> {
    let mut a = format!(
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    a.extend_from_slice(body.as_bytes());
    a
}

/// Accepts until aborted; each connection: read the request head, write the fixed answer, close
/// (HTTP/1.0, as the scrapers ask). Hand-written: a reference must do nothing but that.
async fn serve_http(listener: tokio::net::TcpListener, answer: Arc<[u8]>) {
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            // Out of descriptors, say: wait instead of spinning.
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            continue;
        };
        let answer = answer.clone();
        tokio::spawn(async move {
            let mut head = Vec::with_capacity(512);
            let mut buf = [0u8; 512];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = s.write_all(&answer).await;
            let _ = s.shutdown().await;
        });
    }
}

/// `GetNode` answers a clone of one snapshot; the rest is not part of the load.
struct Fixed(NodeSnapshot);

type NoEvents = tokio_stream::Empty<Result<WorkEvent, Status>>;

fn not_here<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented(
        "the load test's reference serves GetNode only",
    ))
}

#[tonic::async_trait]
impl Ddpcheck for Fixed {
    async fn get_node(&self, _: Request<GetNodeRequest>) -> Result<Response<NodeSnapshot>, Status> {
        Ok(Response::new(self.0.clone()))
    }
    async fn get_topology(
        &self,
        _: Request<GetTopologyRequest>,
    ) -> Result<Response<Report>, Status> {
        not_here()
    }
    async fn get_last_preflight(
        &self,
        _: Request<GetLastPreflightRequest>,
    ) -> Result<Response<Report>, Status> {
        not_here()
    }
    async fn get_history(
        &self,
        _: Request<GetHistoryRequest>,
    ) -> Result<Response<HistoryReply>, Status> {
        not_here()
    }
    type RunPreflightStream = NoEvents;
    async fn run_preflight(
        &self,
        _: Request<PreflightRequest>,
    ) -> Result<Response<NoEvents>, Status> {
        not_here()
    }
    type BenchCollectivesStream = NoEvents;
    async fn bench_collectives(
        &self,
        _: Request<BenchCollectivesRequest>,
    ) -> Result<Response<NoEvents>, Status> {
        not_here()
    }
    type BenchDdpStream = NoEvents;
    async fn bench_ddp(&self, _: Request<BenchDdpRequest>) -> Result<Response<NoEvents>, Status> {
        not_here()
    }
    type ExplainStream = NoEvents;
    async fn explain(&self, _: Request<ExplainRequest>) -> Result<Response<NoEvents>, Status> {
        not_here()
    }
    async fn cluster_collective(
        &self,
        _: Request<ClusterCollectiveRequest>,
    ) -> Result<Response<ClusterCollectiveReply>, Status> {
        not_here()
    }
}

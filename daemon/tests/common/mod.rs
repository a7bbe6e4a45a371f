//! What the daemon's gRPC tests share: an in-process daemon over a simulated node and a client
//! connected to it.

use ddpcheck_proto::v1::ddpcheck_client::DdpcheckClient;
use ddpcheck_sim::SimBackend;
use ddpcheckd::run::{self, DaemonConfig, Running};
use tonic::transport::Channel;

/// A daemon over the simulated node `spec`, its state in `dir`, and a client of it.
pub async fn daemon(spec: &str, dir: &std::path::Path) -> (Running, DdpcheckClient<Channel>) {
    let backend = std::sync::Arc::new(SimBackend::parse(spec).unwrap());
    let running = run::start(DaemonConfig::in_dir(dir), backend)
        .await
        .unwrap();
    let client = ddpcheck_client::connect(&running.socket.display().to_string())
        .await
        .unwrap();
    (running, client)
}

//! ddpcheckd: the node daemon (gRPC API, collector loop, `/metrics`, history) and the engine
//! that both the daemon and the CLI's local mode use to run checks and benchmarks.

pub mod client;
pub mod config;
pub mod engine;
pub mod explain_run;
pub mod history;
pub mod http;
pub mod lock;
pub mod metrics;
pub mod node;
pub mod ratelimit;
pub mod run;
pub mod server;
pub mod tls;
pub mod web_config;

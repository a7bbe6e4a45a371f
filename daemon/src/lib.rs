//! ddpcheckd: the node daemon (gRPC API, collector loop, `/metrics`, history). It runs checks
//! and benchmarks through `ddpcheck-engine`, the engine the CLI's local mode uses too.

pub mod accept;
pub mod config;
pub mod error;
pub mod factories;
pub mod history;
pub mod history_recover;
pub mod http;
pub mod inflight;
pub mod limits;
pub mod listen;
pub mod metrics;
pub mod node;
pub mod ratelimit;
pub mod run;
pub mod runtime;
pub mod server;
pub mod signals;
pub mod state_lock;
pub mod tls;
pub mod unsaved;
pub mod usable;
pub mod watched;
pub mod web_config;
pub mod work;

//! ddpcheckd: the node daemon (gRPC API, collector loop, `/metrics`, history) and the engine
//! that both the daemon and the CLI's local mode use to run checks and benchmarks.

// TODO(restructure): numeric casts here are not yet made explicit (try_from, f64::from)
#![allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]

pub mod client;
pub mod config;
pub mod engine;
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

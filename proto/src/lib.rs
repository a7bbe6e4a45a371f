//! ddpcheck-proto: generated types, client and server of the `ddpcheck.v1` gRPC API, and the
//! conversions between its requests and the engine's parameters (`convert`; a DDP benchmark's
//! in `ddp_request`, a model's in `model_choice`).

pub mod convert;
mod ddp_request;
#[cfg(test)]
mod ddp_request_tests;
mod model_choice;
pub mod status;

/// The daemon's default control socket: where it listens and where clients look.
pub const DEFAULT_SOCKET: &str = "/run/ddpcheck/ddpcheck.sock";

#[allow(clippy::all, clippy::pedantic, clippy::unwrap_used)]
pub mod v1 {
    tonic::include_proto!("ddpcheck.v1");
}

//! ddpcheck-proto: generated types, client and server of the `ddpcheck.v1` gRPC API.

#[allow(clippy::all, clippy::pedantic, clippy::unwrap_used)]
pub mod v1 {
    tonic::include_proto!("ddpcheck.v1");
}

//! ddpcheck-sim: simulated nodes from named profiles (data in `data/profiles.json`), with
//! fault injection, behind core's `NodeBackend`. For tests and demos; every number it produces
//! is labelled `sim`.
//!
//! A spec is `PROFILE[+FAULT...]`, e.g. `h200x2-nvlink+degraded-pcie+slow-link`.
//!
//! Simulated time is not wall time: collective and DDP results are computed, and NCCL init is
//! reported, never slept. The one exception is `hang`, which sleeps until the request's
//! deadline and then reports a timeout, so tests use short deadlines.

pub mod backend;
pub mod catalog_error;
pub mod cluster;
pub mod ddp;
pub mod fault;
pub mod hostcopy;
pub mod platform;
pub mod profile;
pub mod stop;
pub mod timing;
mod worker_env;

pub use backend::{SimBackend, SimError};
pub use fault::Fault;

/// Profile names, for help texts. Empty only if the embedded data is broken.
pub fn profiles() -> Vec<&'static str> {
    profile::catalog()
        .map(|c| c.profiles.iter().map(|p| p.name.as_str()).collect())
        .unwrap_or_default()
}

/// Profile names with a one-line description each.
pub fn profile_descriptions() -> Vec<(&'static str, &'static str)> {
    profile::catalog()
        .map(|c| {
            c.profiles
                .iter()
                .map(|p| (p.name.as_str(), p.description.as_str()))
                .collect()
        })
        .unwrap_or_default()
}

/// Fault names, for help texts.
pub fn faults() -> Vec<&'static str> {
    fault::FAULTS.iter().map(|(_, n, _)| *n).collect()
}

/// Fault names with a one-line description each.
pub fn fault_descriptions() -> Vec<(&'static str, &'static str)> {
    fault::FAULTS.iter().map(|(_, n, h)| (*n, *h)).collect()
}

//! Hostile probes against a real `ddpcheckd`: what a caller who can reach the daemon tries, each
//! of which must be refused without harm.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;
#[path = "hostile/env_injection.rs"]
mod env_injection;

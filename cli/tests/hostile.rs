//! Hostile probes against a real `ddpcheckd`: each fails if what it tries gets through.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

#[path = "hostile/shutdown_verdict.rs"]
mod shutdown_verdict;

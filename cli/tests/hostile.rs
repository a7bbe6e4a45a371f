//! Hostile probes: each does what another user or a careless caller on the node could, against
//! the real binaries, and fails if it gets through.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

#[path = "hostile/symlinked_lock.rs"]
mod symlinked_lock;

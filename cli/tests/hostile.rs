//! Hostile probes against a real `ddpcheckd`: what anyone who can reach it may try, each bounded
//! in count and time, on loopback and Unix sockets only; each fails if what it tries gets
//! through. One module per kind of probe.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

#[path = "hostile/connections.rs"]
mod connections;
#[path = "hostile/env_injection.rs"]
mod env_injection;
#[path = "hostile/shutdown_verdict.rs"]
mod shutdown_verdict;
#[path = "hostile/signals.rs"]
mod signals;
#[path = "hostile/silent_daemon.rs"]
mod silent_daemon;
#[path = "hostile/socket_access.rs"]
mod socket_access;
#[path = "hostile/stop.rs"]
mod stop;
#[path = "hostile/symlinked_lock.rs"]
mod symlinked_lock;

//! A corrupted history file does not keep the daemon down: it is moved aside (its name kept)
//! and the daemon starts on a fresh history that stores runs again.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

use std::sync::Arc;

use ddpcheck_sim::SimBackend;
use ddpcheckd::run::{self, DaemonConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_on_a_garbage_history_moves_it_aside_and_starts() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let garbage: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(state.join("history.db"), &garbage).unwrap();
    let backend = Arc::new(SimBackend::parse("h200x2-nvlink").unwrap());
    let running = run::start(DaemonConfig::in_dir(dir.path()), backend)
        .await
        .expect("a corrupted history must not keep the daemon down");
    let aside: Vec<_> = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("history.db.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(std::fs::read(&aside[0]).unwrap(), garbage);
    let rows = running
        .node
        .with_history(|h| {
            h.begin("preflight", "sim", "sim:x", 1.0)
                .and_then(|_| h.count())
        })
        .unwrap();
    assert_eq!(rows, 1);
    running.shutdown().await;
}

//! A socket that accepts connections and never answers, where the CLI expects `ddpcheckd`: every
//! command gives up within its deadline with one line and UNKNOWN, never hangs.

use std::os::unix::net::{UnixListener, UnixStream};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{bin, code, output_within, stderr};

/// Far past the client's bounds on a call's opening (a hang is what this tells apart).
const LIMIT: Duration = Duration::from_secs(90);

/// A listener on `dir/silent.sock` that accepts and holds every connection, reading nothing.
fn silent_listener(dir: &std::path::Path) -> (std::path::PathBuf, Arc<Mutex<Vec<UnixStream>>>) {
    let path = dir.join("silent.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for s in listener.incoming().map_while(Result::ok) {
            keep.lock().unwrap().push(s);
        }
    });
    (path, held)
}

/// One command against the silent socket: its exit code, its one line and how long it took.
fn run_against(socket: &std::path::Path, args: &[&str]) -> (i32, String, Duration) {
    let start = Instant::now();
    let mut cmd = Command::new(bin("ddpcheck"));
    cmd.arg("--daemon")
        .arg(socket)
        .args(args)
        .env_remove("DDPCHECK_SIM")
        .env_remove("DDPCHECK_DAEMON");
    let o = output_within(&mut cmd, LIMIT);
    // The one line is the prolog's stdout, else stderr.
    let line = if args.contains(&"--prolog") {
        crate::common::stdout(&o)
    } else {
        stderr(&o)
    };
    (code(&o), line, start.elapsed())
}

#[test]
fn a_daemon_that_never_answers_gives_unknown_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, held) = silent_listener(dir.path());
    // UNKNOWN is 3, and 1 under --prolog (docs/exit-codes.md). The commands run at once: each
    // waits out its own bound, and one after another they would take four times as long.
    let cases: [(&[&str], i32); 4] = [
        (&["topo"], 3),
        (&["check"], 3),
        (&["check", "--prolog"], 1),
        (&["history"], 3),
    ];
    let results: Vec<_> = std::thread::scope(|s| {
        let running: Vec<_> = cases
            .iter()
            .map(|(args, _)| s.spawn(|| run_against(&socket, args)))
            .collect();
        running.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for ((args, want), (got, line, took)) in cases.iter().zip(results) {
        assert_eq!(got, *want, "{args:?}: {line}");
        assert_eq!(
            line.trim_end().lines().count(),
            1,
            "{args:?}: one line: {line}"
        );
        assert!(line.contains("did not answer"), "{args:?}: {line}");
        eprintln!(
            "{args:?}: exit {want} after {:.1} s: {}",
            took.as_secs_f64(),
            line.trim_end()
        );
    }
    assert!(!held.lock().unwrap().is_empty(), "the CLI never connected");
}

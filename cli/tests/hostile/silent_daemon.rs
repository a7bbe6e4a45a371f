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

#[test]
fn a_daemon_that_never_answers_gives_unknown_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, held) = silent_listener(dir.path());
    // UNKNOWN is 3, and 1 under --prolog (docs/exit-codes.md); the one line is the prolog's
    // stdout, else stderr.
    for (args, want) in [
        (&["topo"][..], 3),
        (&["check"], 3),
        (&["check", "--prolog"], 1),
        (&["history"], 3),
    ] {
        let start = Instant::now();
        let mut cmd = Command::new(bin("ddpcheck"));
        cmd.arg("--daemon")
            .arg(&socket)
            .args(args)
            .env_remove("DDPCHECK_SIM")
            .env_remove("DDPCHECK_DAEMON");
        let o = output_within(&mut cmd, LIMIT);
        let err = stderr(&o);
        let out = crate::common::stdout(&o);
        let line = if args.contains(&"--prolog") {
            &out
        } else {
            &err
        };
        assert_eq!(code(&o), want, "{args:?}: {out}{err}");
        assert_eq!(
            line.trim_end().lines().count(),
            1,
            "{args:?}: one line: {line}"
        );
        assert!(line.contains("did not answer"), "{args:?}: {line}");
        eprintln!(
            "{args:?}: exit {want} after {:.1} s: {}",
            start.elapsed().as_secs_f64(),
            line.trim_end()
        );
    }
    assert!(!held.lock().unwrap().is_empty(), "the CLI never connected");
}

//! A configuration file that is a named pipe (FIFO) is refused at once, by the daemon's start and
//! by `check-config`, with one line naming it and exit 64: opening one for reading would wait
//! for a writer that never comes.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_config_file_that_is_a_fifo_is_refused_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("ddpcheck.toml");
    let c = CString::new(fifo.as_os_str().as_bytes()).expect("no NUL");
    // SAFETY: mkfifo(3) on a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let fifo = fifo.to_str().expect("utf-8");
    let listen = dir.path().join("d.sock");
    let listen = listen.to_str().expect("utf-8");
    let start = [
        "--config",
        fifo,
        "--sim",
        "h200x2-nvlink",
        "--metrics-listen",
        "none",
        "--listen",
        listen,
    ];
    for args in [&start[..], &["check-config", "--config", fifo]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ddpcheckd"))
            .args(args)
            .env_remove("DDPCHECK_CONFIG")
            .env_remove("DDPCHECK_SIM")
            .env("DDPCHECK_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ddpcheckd");
        let began = Instant::now();
        while child.try_wait().expect("wait").is_none() {
            if began.elapsed() > Duration::from_secs(5) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{args:?}: still waiting on the FIFO after 5 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let o = child.wait_with_output().expect("output");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
        assert!(
            err.contains(fifo) && err.contains("named pipe"),
            "{args:?}: {err}"
        );
    }
}

//! A caller the control socket keeps out (its mode 0660 and group, or a folder on its path it
//! may not enter) hears a permission problem that names the socket and says what to do, not a
//! "transport error" or that the socket does not exist.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use crate::common::{bin, code, output_within, stderr, Daemon};

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[test]
fn a_caller_the_socket_keeps_out_is_told_it_lacks_permission() {
    if euid() != 0 {
        eprintln!("not root: cannot run the CLI as another user; skipped");
        return;
    }
    let d = Daemon::start(Some("h200x2-nvlink"));
    let folder = d.dir.path();
    for (mode, why) in [(0o755, "the socket's mode"), (0o700, "its folder's mode")] {
        std::fs::set_permissions(folder, std::fs::Permissions::from_mode(mode)).unwrap();
        let mut cmd = Command::new(bin("ddpcheck"));
        cmd.arg("--daemon")
            .arg(&d.socket)
            .arg("topo")
            .env_remove("DDPCHECK_SIM")
            .env_remove("DDPCHECK_DAEMON")
            .uid(65534)
            .gid(65534);
        let o = output_within(&mut cmd, Duration::from_secs(20));
        let err = stderr(&o);
        assert_eq!(code(&o), 3, "{why}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{why}: {err}");
        assert!(
            err.contains("permission denied") && err.contains(&d.addr()),
            "{why}: {err}"
        );
        assert!(err.contains("group"), "{why}: what to do: {err}");
        assert!(
            !err.contains("transport error") && !err.contains("does not exist"),
            "{why}: {err}"
        );
    }
    std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o700)).unwrap();
    d.stop();
}

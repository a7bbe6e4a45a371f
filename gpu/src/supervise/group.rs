//! Process groups: signalled, stopped (SIGTERM, grace, SIGKILL), swept after the leader, and
//! orphans reaped by this process.

use std::io::{self};
use std::process::{Child, ExitStatus};
use std::thread::{self};
use std::time::{Duration, Instant};

/// Signals a whole process group. Never group 0 or 1 (that would be us or everyone).
pub(super) fn kill_group(pgid: libc::pid_t, sig: libc::c_int) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: plain syscall on a group we created with setsid.
    unsafe { libc::kill(-pgid, sig) == 0 }
}

/// Whether any process (zombies included) is still in the group.
pub fn group_exists(pgid: i32) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence.
    let r = unsafe { libc::kill(-pgid, 0) };
    !(r == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH))
}

/// SIGTERM to the group, up to `grace` for the leader to exit, SIGKILL to the group, then up
/// to 5 s to reap the leader. `None` if it could not be reaped (stuck in the kernel).
pub(super) fn stop_group(
    child: &mut Child,
    pgid: libc::pid_t,
    grace: Duration,
) -> Option<ExitStatus> {
    kill_group(pgid, libc::SIGTERM);
    let mut status = None;
    let t = Instant::now();
    while t.elapsed() < grace {
        if let Ok(Some(st)) = child.try_wait() {
            status = Some(st);
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    // Grandchildren that ignore SIGTERM, or a leader that does.
    kill_group(pgid, libc::SIGKILL);
    let t = Instant::now();
    while status.is_none() && t.elapsed() < Duration::from_secs(5) {
        match child.try_wait() {
            Ok(Some(st)) => status = Some(st),
            Ok(None) => thread::sleep(Duration::from_millis(10)),
            Err(_) => break,
        }
    }
    status
}

/// Live (not zombie) processes of a group, from /proc.
pub fn live_members(pgid: i32) -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // "pid (comm) state ppid pgrp ...": comm may contain anything, so split at the last ')'.
            let Some((_, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let f: Vec<&str> = rest.split_whitespace().collect();
            f.len() > 3 && f[2].parse::<i32>() == Ok(pgid) && f[0] != "Z" && f[0] != "X"
        })
        .collect()
}

/// After the leader is reaped: SIGKILL what is left of the group and reap those of them that
/// are our children (they are, when we are a subreaper), until nothing of the group runs or
/// `bound`. Zombies whose reaper is someone else (PID 1) are dead and not waited for.
pub(super) fn sweep_group(pgid: libc::pid_t, bound: Duration) -> bool {
    let t = Instant::now();
    loop {
        // SAFETY: reaps only our own children in this group, without blocking.
        while unsafe { libc::waitpid(-pgid, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
        if !group_exists(pgid) || live_members(pgid).is_empty() {
            return true;
        }
        if t.elapsed() >= bound {
            return false;
        }
        kill_group(pgid, libc::SIGKILL);
        thread::sleep(Duration::from_millis(10));
    }
}

/// Makes this process the reaper of orphaned descendants (`PR_SET_CHILD_SUBREAPER`), so that
/// grandchildren of a supervised child are reaped here rather than by PID 1. Worth calling
/// once at daemon start where PID 1 does not reap (some containers), since a zombie keeps its
/// process group alive.
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: plain prctl on this process.
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

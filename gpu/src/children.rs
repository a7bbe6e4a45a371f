//! The process groups of our running children (NCCL workers, torchrun), so a daemon or CLI that
//! is told to stop mid-run ends them too: nothing is left running on the GPUs (invariant 1).

use std::sync::Mutex;
use std::time::{Duration, Instant};

static GROUPS: Mutex<Vec<libc::pid_t>> = Mutex::new(Vec::new());

fn groups() -> std::sync::MutexGuard<'static, Vec<libc::pid_t>> {
    // A panic elsewhere must not stop us from ending children.
    GROUPS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes its group from the registry when dropped (the spawner has reaped it).
#[derive(Debug)]
pub struct Registered(libc::pid_t);

impl Drop for Registered {
    fn drop(&mut self) {
        groups().retain(|g| *g != self.0);
    }
}

/// Records a child's process group (its leader's pid, after setsid or setpgid).
pub fn register(pgid: libc::pid_t) -> Registered {
    groups().push(pgid);
    Registered(pgid)
}

/// Process groups registered now.
pub fn live() -> Vec<libc::pid_t> {
    groups().clone()
}

fn signal_group(pgid: libc::pid_t, sig: libc::c_int) -> bool {
    // SAFETY: kill(2) on a process group we created; a negative pid addresses the group.
    unsafe { libc::kill(-pgid, sig) == 0 }
}

/// SIGTERM to every registered group, then SIGKILL to those still there after `grace`.
/// Returns how many groups were signalled. The spawners reap their children and unregister.
pub fn terminate_all(grace: Duration) -> usize {
    terminate(live(), grace)
}

fn terminate(targets: Vec<libc::pid_t>, grace: Duration) -> usize {
    for &g in &targets {
        signal_group(g, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if live().iter().all(|g| !targets.contains(g)) {
            return targets.len();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for g in live().into_iter().filter(|g| targets.contains(g)) {
        signal_group(g, libc::SIGKILL);
    }
    targets.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    #[test]
    fn terminate_all_ends_a_registered_group_and_its_grandchildren() {
        let mut child = Command::new("sh")
            .args(["-c", "sleep 1000 & sleep 1000"])
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = libc::pid_t::try_from(child.id()).unwrap();
        let reg = register(pgid);
        assert!(live().contains(&pgid));
        let waiter = std::thread::spawn(move || {
            let st = child.wait().unwrap();
            drop(reg);
            st
        });
        // Only this group: tests of other modules run children in parallel in this process.
        assert_eq!(terminate(vec![pgid], Duration::from_secs(2)), 1);
        let st = waiter.join().unwrap();
        assert!(!st.success());
        // The grandchild got the group's SIGTERM too; give init a moment to reap it.
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) && signal_group(pgid, 0) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let alive = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|s| {
                        let rest = s.rsplit_once(')')?.1.to_string();
                        let f: Vec<&str> = rest.split_whitespace().collect();
                        // state is f[0], pgrp is f[2]; zombies (Z) are dead already.
                        Some(f.get(2)?.parse::<i32>().ok()? == pgid && f[0] != "Z")
                    })
                    .unwrap_or(false)
            })
            .count();
        assert_eq!(alive, 0, "processes of group {pgid} still running");
        assert!(!live().contains(&pgid));
    }
}

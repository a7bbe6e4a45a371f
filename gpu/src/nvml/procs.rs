//! Compute processes on a GPU: names from /proc, and leaving out our own process and its descendants.

use ddpcheck_core::node_gpus::ComputeProcess;

/// How far up the parent chain we look for our own pid (process trees are shallow; the bound
/// only guards against a cycle in a changing /proc).
const MAX_ANCESTRY: usize = 64;

/// The parent pid from the text of `/proc/<pid>/stat`. The command name (field 2) is in
/// parentheses and may itself contain spaces and parentheses, so parse after the last `)`.
pub fn parse_stat_ppid(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let _state = fields.next()?;
    fields.next()?.parse().ok()
}

/// True if `pid` is `own` or one of its descendants, walking parents with `parent_of`.
pub fn is_own_family(pid: u32, own: u32, parent_of: impl Fn(u32) -> Option<u32>) -> bool {
    let mut p = pid;
    for _ in 0..MAX_ANCESTRY {
        if p == own {
            return true;
        }
        match parent_of(p) {
            Some(pp) if pp != 0 && pp != p => p = pp,
            _ => return false,
        }
    }
    false
}

/// Keeps the processes that are not ours (raw `(pid, used bytes)` from NVML), naming each from
/// `name_of`. A pid listed twice (several contexts) is kept once.
pub fn foreign_processes(
    raw: &[(u32, Option<u64>)],
    own: u32,
    parent_of: impl Fn(u32) -> Option<u32>,
    name_of: impl Fn(u32) -> Option<String>,
) -> Vec<ComputeProcess> {
    let mut out: Vec<ComputeProcess> = Vec::new();
    for &(pid, used) in raw {
        if is_own_family(pid, own, &parent_of) || out.iter().any(|p| p.pid == pid) {
            continue;
        }
        out.push(ComputeProcess {
            pid,
            name: name_of(pid),
            used_memory_bytes: used,
        });
    }
    out
}

/// Parent pid from /proc; `None` where the process is gone or in another pid namespace.
pub fn proc_parent(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| parse_stat_ppid(&s))
}

/// Process name from `/proc/<pid>/comm`.
pub fn proc_name(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn ppid_survives_odd_command_names() {
        assert_eq!(parse_stat_ppid("1234 (python3) S 77 1234 1234 0"), Some(77));
        assert_eq!(parse_stat_ppid("1234 (a) b (c)) R 5 6 7"), Some(5));
        assert_eq!(parse_stat_ppid("1234 (my proc) S 1 2"), Some(1));
        assert_eq!(parse_stat_ppid("garbage"), None);
        assert_eq!(parse_stat_ppid("1 (x) S"), None);
    }

    #[test]
    fn own_pid_and_descendants_are_left_out() {
        // 1 init -> 100 us -> 200 worker -> 300 its child; 150 a foreign job under init.
        let parents: HashMap<u32, u32> = [(100, 1), (200, 100), (300, 200), (150, 1)].into();
        let parent_of = |p: u32| parents.get(&p).copied();
        let name_of = |p: u32| Some(format!("proc{p}"));
        let raw = [
            (100, Some(10)),
            (300, Some(30)),
            (150, Some(15)),
            (150, Some(15)),
            (999, None),
        ];
        let kept = foreign_processes(&raw, 100, parent_of, name_of);
        let pids: Vec<u32> = kept.iter().map(|p| p.pid).collect();
        assert_eq!(pids, vec![150, 999]);
        assert_eq!(kept[0].name.as_deref(), Some("proc150"));
        assert_eq!(kept[0].used_memory_bytes, Some(15));
        assert_eq!(kept[1].used_memory_bytes, None);
    }

    #[test]
    fn our_real_pid_is_recognised_through_proc() {
        let own = std::process::id();
        assert!(is_own_family(own, own, proc_parent));
        // A child of ours is family: read through /proc/<pid>/stat.
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let family = is_own_family(child.id(), own, proc_parent);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(family);
        // pid 1 is never our descendant.
        assert!(!is_own_family(1, own, proc_parent));
        assert!(proc_name(own).is_some());
    }

    #[test]
    fn parent_cycles_end() {
        let parent_of = |p: u32| Some(if p == 5 { 6 } else { 5 });
        assert!(!is_own_family(5, 42, parent_of));
    }
}

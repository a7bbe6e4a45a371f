//! Which transports NCCL's channels use (`NET/Socket`, `NET/IB`, `P2P/CUMEM`, `SHM/direct`),
//! read from NCCL's own INFO log ("Channel 00/0 : 0[0] -> 1[1] via NET/Socket/0").
//!
//! NCCL has no API that names the transport of a communicator; its INFO log is the only
//! source. The log goes to a pipe (`NCCL_DEBUG_FILE=/dev/fd/N`) read by a thread here, so the
//! worker's stdout protocol and stderr stay as they were; NCCL's warnings are passed on to
//! stderr.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::FromRawFd;
use std::sync::{Arc, Mutex};

/// The transport a channel line names, shortened to its first two parts
/// (`NET/Socket/0` → `NET/Socket`, `P2P/CUMEM/read` → `P2P/CUMEM`).
pub fn transport_of(line: &str) -> Option<String> {
    if !line.contains("Channel") {
        return None;
    }
    let (_, after) = line.split_once(" via ")?;
    let word = after.split_whitespace().next()?;
    let short: Vec<&str> = word.split('/').filter(|p| !p.is_empty()).take(2).collect();
    if short.is_empty()
        || !short[0]
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
    {
        return None;
    }
    Some(short.join("/"))
}

/// The transports seen so far, shared with the reader thread.
#[derive(Clone, Default)]
pub struct TransportLog {
    seen: Arc<Mutex<BTreeSet<String>>>,
}

impl TransportLog {
    /// Points NCCL's INFO log (INIT and NET subsystems) at a pipe read here. Must run before
    /// NCCL is loaded and before other threads start (it sets environment variables). `None`
    /// when the user chose their own `NCCL_DEBUG_FILE` (theirs wins) or no pipe could be made.
    pub fn capture() -> Option<TransportLog> {
        if std::env::var_os("NCCL_DEBUG_FILE").is_some() {
            eprintln!("ddpcheck worker: NCCL_DEBUG_FILE is set; the transport is not recorded");
            return None;
        }
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 fills two descriptors we own from here on.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            eprintln!(
                "ddpcheck worker: no pipe for NCCL's log ({}); the transport is not recorded",
                std::io::Error::last_os_error()
            );
            return None;
        }
        let (read_fd, write_fd) = (fds[0], fds[1]);
        std::env::set_var("NCCL_DEBUG", "INFO");
        std::env::set_var("NCCL_DEBUG_SUBSYS", "INIT,NET");
        // NCCL opens this path itself; the write end stays open for the process's life.
        std::env::set_var("NCCL_DEBUG_FILE", format!("/dev/fd/{write_fd}"));
        let log = TransportLog::default();
        let seen = log.seen.clone();
        // SAFETY: read_fd is ours alone; the File owns it from here.
        let reader = BufReader::new(unsafe { File::from_raw_fd(read_fd) });
        let spawned = std::thread::Builder::new()
            .name("nccl-log".into())
            .spawn(move || {
                for line in reader.lines().map_while(Result::ok) {
                    if line.contains(" WARN ") {
                        eprintln!("{line}");
                    }
                    if let Some(t) = transport_of(&line) {
                        seen.lock().unwrap_or_else(|p| p.into_inner()).insert(t);
                    }
                }
            });
        if let Err(e) = spawned {
            eprintln!("ddpcheck worker: no thread for NCCL's log ({e})");
        }
        Some(log)
    }

    /// The transports seen, comma-separated and sorted; `None` before any channel line.
    pub fn transports(&self) -> Option<String> {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        (!seen.is_empty()).then(|| seen.iter().cloned().collect::<Vec<_>>().join(", "))
    }

    /// Waits up to `bound` for the first channel line (NCCL logs them during init, but the
    /// reader thread may lag the init call by a moment).
    pub fn wait_for_any(&self, bound: std::time::Duration) -> Option<String> {
        let until = std::time::Instant::now() + bound;
        loop {
            if let Some(t) = self.transports() {
                return Some(t);
            }
            if std::time::Instant::now() >= until {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_lines_name_their_transport() {
        let cases = [
            (
                "host:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0",
                Some("NET/Socket"),
            ),
            (
                "host:1:2 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] [receive] via NET/IB/3/GDRDMA",
                Some("NET/IB"),
            ),
            (
                "host:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
                Some("P2P/CUMEM"),
            ),
            (
                "host:1:2 [0] NCCL INFO Channel 03/0 : 0[0] -> 1[1] via SHM/direct/direct",
                Some("SHM/direct"),
            ),
            (
                "host:1:2 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>",
                None,
            ),
            (
                "host:1:2 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 0",
                None,
            ),
            ("Channel 00 : nothing after via", None),
            ("", None),
        ];
        for (line, want) in cases {
            assert_eq!(transport_of(line).as_deref(), want, "{line}");
        }
    }
}

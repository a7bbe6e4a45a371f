//! The hidden `worker` subcommand: reads one JSON `CollectiveRequest` on stdin, runs the NCCL
//! sweep in this process under a watchdog, and prints JSON lines (see
//! [`crate::nccl::protocol`]) on stdout, nothing else. `worker host-copies` reads a
//! `CopyRequest` instead and times each GPU's host↔device copies ([`crate::hostcopy::measure`])
//! under the same watchdog, ending with a `host_copies` event.
//!
//! Stdout is protected: at start the real stdout is duplicated for our events and file
//! descriptor 1 is pointed at stderr, so anything a library prints (NCCL_DEBUG output goes to
//! stdout by default) lands in stderr, which the parent keeps for error messages.
//!
//! The watchdog: a thread with a deadline a little shorter than the request's. It polls
//! `ncclCommGetAsyncError` on every communicator; at the deadline (or on an asynchronous
//! error) it prints the terminal error event first, then calls `ncclCommAbort` on every
//! communicator (bounded), then ends the process with `_exit`. The parent's own deadline
//! (SIGTERM, SIGKILL to the group) stays the last word.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ddpcheck_core::backend::CollectiveRequest;
use ddpcheck_core::hostcopy::CopyRequest;

use crate::nccl::bench::{self, Shared};
use crate::nccl::protocol::{FailKind, WorkerEvent};
use crate::nccl::transport::TransportLog;
use crate::supervise::MULTICAST_OFF;

/// Exit codes of the worker process (the parent reads the events, these are for people).
pub const EXIT_OK: i32 = 0;
pub const EXIT_ERROR: i32 = 2;
pub const EXIT_TIMEOUT: i32 = 3;
pub const EXIT_USAGE: i32 = 64;

/// A request is small; anything bigger is not one.
const MAX_REQUEST_BYTES: u64 = 1 << 20;

/// Parses and validates the request read from stdin.
pub fn parse_request(bytes: &[u8]) -> Result<CollectiveRequest, RequestError> {
    if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(RequestError::Empty);
    }
    let req: CollectiveRequest =
        serde_json::from_slice(bytes).map_err(|e| RequestError::NotJson {
            what: "CollectiveRequest",
            reason: e.to_string(),
        })?;
    req.validate().map_err(|cause| RequestError::Refused {
        what: "collective request",
        cause,
    })?;
    Ok(req)
}

/// Why the worker runs nothing: the request on its stdin cannot be read or is refused. The
/// worker says it in its terminal `invalid` event and exits 64.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error(
        "no request on stdin: expected one JSON CollectiveRequest (ops, gpus, min_bytes, ...)"
    )]
    Empty,
    /// `what`: the request's type, as the parent writes it.
    #[error("the request on stdin is not a valid {what}: {reason}")]
    NotJson { what: &'static str, reason: String },
    /// Read, but outside what a request may ask for.
    #[error("invalid {what}: {cause}")]
    Refused {
        what: &'static str,
        cause: ddpcheck_core::ProbeError,
    },
}

/// The worker's deadline: the request's, less a margin so that our own timeout event and the
/// communicator abort come before the parent's SIGTERM.
pub fn watchdog_deadline(requested: Duration) -> Duration {
    let margin = (requested / 20).clamp(Duration::from_millis(100), Duration::from_secs(2));
    requested.saturating_sub(margin).max(requested / 2)
}

/// Sets the request's NCCL_*/CUDA_* variables, then keeps NVLink multicast off unless someone
/// chose otherwise, and NCCL warnings on (to stderr) unless a level was chosen. Must run before
/// any thread starts and before the libraries are loaded.
pub fn apply_env(overrides: &[(String, String)]) {
    for (k, v) in overrides {
        std::env::set_var(k, v);
    }
    for (k, v) in MULTICAST_OFF.iter().chain(&[("NCCL_DEBUG", "WARN")]) {
        if std::env::var_os(k).is_none() {
            std::env::set_var(k, v);
        }
    }
}

/// Our stdout: whole lines, one terminal event, then silence.
struct Output {
    w: Mutex<Box<dyn Write + Send>>,
    finished: AtomicBool,
    code: AtomicI32,
}

impl Output {
    /// Takes the real stdout for events and points fd 1 at stderr.
    fn take_stdout() -> Output {
        // SAFETY: fcntl/dup2 on this process's own standard descriptors, before any thread.
        let fd = unsafe { libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3) };
        // SAFETY: dup2 of this process's own standard descriptors, before any thread.
        let w: Box<dyn Write + Send> = if fd >= 0 && unsafe { libc::dup2(2, 1) } >= 0 {
            // SAFETY: fd is a fresh descriptor we own.
            Box::new(unsafe { File::from_raw_fd(fd) })
        } else {
            eprintln!("ddpcheck worker: could not protect stdout; library output may mix in");
            Box::new(std::io::stdout())
        };
        Output {
            w: Mutex::new(w),
            finished: AtomicBool::new(false),
            code: AtomicI32::new(EXIT_OK),
        }
    }

    fn write(&self, w: &mut Box<dyn Write + Send>, ev: &WorkerEvent) {
        match serde_json::to_vec(ev) {
            Ok(mut line) => {
                line.push(b'\n');
                if let Err(e) = w.write_all(&line).and_then(|_| w.flush()) {
                    eprintln!("ddpcheck worker: writing an event failed: {e}");
                }
            }
            Err(e) => eprintln!("ddpcheck worker: encoding an event failed: {e}"),
        }
    }

    /// A non-terminal event; dropped once a terminal event went out.
    fn event(&self, ev: &WorkerEvent) {
        let mut w = self.w.lock().unwrap_or_else(|p| p.into_inner());
        if !self.finished.load(Ordering::SeqCst) {
            self.write(&mut w, ev);
        }
    }

    /// The one terminal event; false if another was first.
    fn terminal(&self, ev: &WorkerEvent, code: i32) -> bool {
        let mut w = self.w.lock().unwrap_or_else(|p| p.into_inner());
        if self.finished.swap(true, Ordering::SeqCst) {
            return false;
        }
        self.code.store(code, Ordering::SeqCst);
        self.write(&mut w, ev);
        true
    }

    /// The terminal event of a request that cannot be read: its one line, and the usage exit
    /// code to return.
    fn invalid(&self, message: String) -> i32 {
        self.terminal(
            &WorkerEvent::Error {
                kind: FailKind::Invalid,
                message,
                stage: None,
            },
            EXIT_USAGE,
        );
        EXIT_USAGE
    }

    fn finished(&self) -> Option<i32> {
        self.finished
            .load(Ordering::SeqCst)
            .then(|| self.code.load(Ordering::SeqCst))
    }
}

/// Ends the process without running library destructors, which can hang with NCCL threads
/// still around.
fn hard_exit(code: i32) -> ! {
    let _ = std::io::stderr().flush();
    // C stdio of the libraries (NCCL_DEBUG lines) is buffered; _exit would drop it.
    // SAFETY: flushes every C stdio stream.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    // SAFETY: terminates the process; nothing runs after it.
    unsafe { libc::_exit(code) }
}

/// Aborts every communicator on a helper thread, waiting at most `bound` for it.
fn abort_bounded(shared: &Arc<Shared>, bound: Duration) {
    let s = shared.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(s.abort_all());
    });
    match rx.recv_timeout(bound) {
        Ok(lines) => {
            for l in lines {
                eprintln!("ddpcheck worker: {l}");
            }
        }
        Err(_) => eprintln!(
            "ddpcheck worker: ncclCommAbort did not return within {:.1} s",
            bound.as_secs_f64()
        ),
    }
}

fn watchdog(out: Arc<Output>, shared: Arc<Shared>, deadline_at: Instant, budget: Duration) {
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = Instant::now();
        if let Some(code) = out.finished() {
            // The main thread has reported and is tearing down; the deadline still holds.
            if now >= deadline_at {
                eprintln!("ddpcheck worker: teardown ran into the deadline");
                hard_exit(code);
            }
            continue;
        }
        if let Some(e) = shared.async_error() {
            let kind = if crate::nccl::ffi::nccl_error_is_cuda(&e) {
                FailKind::GpuFailed
            } else {
                FailKind::Worker
            };
            let stage = shared.stage();
            let ev = WorkerEvent::Error {
                kind,
                message: format!("NCCL reported an asynchronous error during {stage}: {e}"),
                stage: Some(stage),
            };
            if out.terminal(&ev, EXIT_ERROR) {
                eprintln!("ddpcheck worker: {e}; aborting communicators");
                abort_bounded(&shared, Duration::from_secs(2));
                hard_exit(EXIT_ERROR);
            }
        }
        if now >= deadline_at {
            let stage = shared.stage();
            let ev = WorkerEvent::Error {
                kind: FailKind::Timeout,
                message: format!(
                    "worker deadline of {:.1} s reached during {stage}; {}",
                    budget.as_secs_f64(),
                    if shared.nccl_loaded() {
                        "NCCL communicators aborted"
                    } else {
                        "stopped"
                    }
                ),
                stage: Some(stage.clone()),
            };
            if out.terminal(&ev, EXIT_TIMEOUT) {
                eprintln!(
                    "ddpcheck worker: deadline {:.1} s reached during {stage}; aborting communicators",
                    budget.as_secs_f64()
                );
                abort_bounded(&shared, Duration::from_secs(2));
                hard_exit(EXIT_TIMEOUT);
            }
        }
    }
}

/// Entry point of `ddpcheck worker` / `ddpcheckd worker`; `args` are the arguments after
/// `worker` (none are needed; extra ones are reported on stderr and ignored). Returns the exit code only when it fails before loading any GPU
/// library; otherwise it ends the process itself (`_exit`), so that NCCL/CUDA destructors
/// cannot hang it.
pub fn main_from_args(args: &[String]) -> i32 {
    let mut args: Vec<&String> = args.iter().filter(|a| a.as_str() != "worker").collect();
    // `worker host-copies`: the sibling run that times host↔device copies (no NCCL).
    let host_copies = args.first().is_some_and(|a| a.as_str() == HOST_COPIES_ARG);
    if host_copies {
        args.remove(0);
    }
    if args
        .iter()
        .any(|a| a.as_str() == "--help" || a.as_str() == "-h")
    {
        eprintln!(
            "usage: ddpcheck worker [host-copies] < request.json\n\
             Runs one NCCL collective sweep (a JSON CollectiveRequest on stdin), or with\n\
             host-copies times each GPU's host-device copies (a JSON CopyRequest), and prints\n\
             JSON lines on stdout. Started by ddpcheck itself; not meant to be run by hand."
        );
        return EXIT_OK;
    }
    let out = Arc::new(Output::take_stdout());
    if !args.is_empty() {
        // Nothing to parse: the request comes on stdin. Say so, but do not fail a run over it.
        eprintln!("ddpcheck worker: ignoring arguments {args:?}; the request comes on stdin");
    }
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin()
        .lock()
        .take(MAX_REQUEST_BYTES)
        .read_to_end(&mut input)
    {
        out.terminal(
            &WorkerEvent::Error {
                kind: FailKind::Worker,
                message: format!("reading the request from stdin: {e}"),
                stage: None,
            },
            EXIT_ERROR,
        );
        return EXIT_ERROR;
    }
    if host_copies {
        return host_copies_main(&out, &input);
    }
    let req = match parse_request(&input) {
        Ok(r) => r,
        Err(e) => return out.invalid(e.to_string()),
    };
    apply_env(&req.env);
    // A communicator across processes: every process derives the same unique id from the
    // root's address, and NCCL's log says which transport the nodes ended up using.
    let transport_log = match &req.group {
        Some(g) => {
            std::env::set_var("NCCL_COMM_ID", &g.comm_id);
            TransportLog::capture()
        }
        None if req.record_transport => TransportLog::capture(),
        None => None,
    };

    let started = Instant::now();
    let budget = watchdog_deadline(req.deadline);
    let shared = Arc::new(Shared::new());
    eprintln!(
        "ddpcheck worker: pid {}, {} op(s) {:?}, {}..{} B ×{}, {} GPU(s) requested, deadline {:.1} s (watchdog {:.1} s){}",
        std::process::id(),
        req.ops.len(),
        req.ops.iter().map(|o| o.name()).collect::<Vec<_>>(),
        req.min_bytes,
        req.max_bytes,
        req.step_factor,
        req.gpus.len(),
        req.deadline.as_secs_f64(),
        budget.as_secs_f64(),
        if req.inject_hang { ", inject_hang" } else { "" }
    );
    let env: Vec<String> = bench::effective_env()
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    eprintln!("ddpcheck worker: environment {}", env.join(" "));
    {
        let (o, s) = (out.clone(), shared.clone());
        std::thread::Builder::new()
            .name("watchdog".into())
            .spawn(move || watchdog(o, s, started + budget, budget))
            .map_err(|e| eprintln!("ddpcheck worker: no watchdog thread: {e}"))
            .ok();
    }

    let emit_out = out.clone();
    let result = bench::run(&req, &shared, transport_log.as_ref(), &mut |ev| {
        emit_out.event(&ev)
    });
    match result {
        Ok(fin) => {
            if out.terminal(&WorkerEvent::Done { run: fin.run }, EXIT_OK) {
                // Communicator teardown is best effort: the result is out already.
                let until = Instant::now() + Duration::from_secs(3);
                for h in fin.ranks {
                    while !h.is_finished() && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
                eprintln!(
                    "ddpcheck worker: done in {:.2} s",
                    started.elapsed().as_secs_f64()
                );
                hard_exit(EXIT_OK);
            }
        }
        Err(f) => {
            let stage = shared.stage();
            eprintln!(
                "ddpcheck worker: {} during {stage}: {}",
                f.kind.as_str(),
                f.message
            );
            let ev = WorkerEvent::Error {
                kind: f.kind,
                message: f.message,
                stage: Some(stage),
            };
            if out.terminal(&ev, EXIT_ERROR) {
                abort_bounded(&shared, Duration::from_secs(2));
                hard_exit(EXIT_ERROR);
            }
        }
    }
    // The watchdog reported first and is ending the process.
    std::thread::sleep(Duration::from_secs(5));
    hard_exit(out.finished().unwrap_or(EXIT_ERROR))
}

/// The argument after `worker` that selects the host-copy run.
pub const HOST_COPIES_ARG: &str = "host-copies";

/// Parses and validates a host-copy request.
pub fn parse_copy_request(bytes: &[u8]) -> Result<CopyRequest, RequestError> {
    let req: CopyRequest = serde_json::from_slice(bytes).map_err(|e| RequestError::NotJson {
        what: "CopyRequest",
        reason: e.to_string(),
    })?;
    req.validate().map_err(|cause| RequestError::Refused {
        what: "host-copy request",
        cause,
    })?;
    Ok(req)
}

/// `worker host-copies`: the copies under the same watchdog and event protocol as a sweep.
fn host_copies_main(out: &Arc<Output>, input: &[u8]) -> i32 {
    let req = match parse_copy_request(input) {
        Ok(r) => r,
        Err(e) => return out.invalid(e.to_string()),
    };
    apply_env(&[]);
    let started = Instant::now();
    let budget = watchdog_deadline(req.deadline);
    let shared = Arc::new(Shared::new());
    eprintln!(
        "ddpcheck worker: pid {}, host copies of {:?} B on {} GPU(s), deadline {:.1} s",
        std::process::id(),
        req.sizes,
        req.gpus.len(),
        req.deadline.as_secs_f64()
    );
    {
        let (o, s) = (out.clone(), shared.clone());
        std::thread::Builder::new()
            .name("watchdog".into())
            .spawn(move || watchdog(o, s, started + budget, budget))
            .map_err(|e| eprintln!("ddpcheck worker: no watchdog thread: {e}"))
            .ok();
    }
    let emit_out = out.clone();
    let ev = match crate::hostcopy::measure::run(&req, &shared, &mut |ev| emit_out.event(&ev)) {
        Ok(run) => (WorkerEvent::HostCopies { run }, EXIT_OK),
        Err(f) => {
            let stage = shared.stage();
            eprintln!(
                "ddpcheck worker: {} during {stage}: {}",
                f.kind.as_str(),
                f.message
            );
            let ev = WorkerEvent::Error {
                kind: f.kind,
                message: f.message,
                stage: Some(stage),
            };
            (ev, EXIT_ERROR)
        }
    };
    if out.terminal(&ev.0, ev.1) {
        eprintln!(
            "ddpcheck worker: host copies done in {:.2} s",
            started.elapsed().as_secs_f64()
        );
        hard_exit(ev.1);
    }
    // The watchdog reported first and is ending the process.
    std::thread::sleep(Duration::from_secs(5));
    hard_exit(out.finished().unwrap_or(EXIT_ERROR))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> serde_json::Value {
        serde_json::json!({
            "ops": ["all_reduce"],
            "gpus": [{"index": 0, "uuid": "GPU-0", "pci_bus_id": "00000000:1B:00.0"}],
            "min_bytes": 1024, "max_bytes": 1048576, "step_factor": 2,
            "warmup_iters": 5, "iters": 20, "in_place": true, "check": true,
            "env": [["NCCL_P2P_DISABLE", "1"]],
            "deadline": {"secs": 30, "nanos": 0}
        })
    }

    #[test]
    fn request_parsing() {
        let req = parse_request(good().to_string().as_bytes()).unwrap();
        assert_eq!(req.iters, 20);
        assert!(!req.inject_hang);

        let e = parse_request(b"").unwrap_err().to_string();
        assert!(e.contains("no request on stdin"), "{e}");
        let e = parse_request(b"{\"ops\": [\"all_reduce\"],")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a valid CollectiveRequest"), "{e}");
        let e = parse_request(b"[1,2]").unwrap_err().to_string();
        assert!(e.contains("not a valid CollectiveRequest"), "{e}");
        let mut bad_op = good();
        bad_op["ops"] = serde_json::json!(["all_reduce2"]);
        let e = parse_request(bad_op.to_string().as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("all_reduce2"), "{e}");
        // Parsed but refused by validation: an environment override that is not NCCL's.
        let mut bad_env = good();
        bad_env["env"] = serde_json::json!([["LD_PRELOAD", "/tmp/x.so"]]);
        let e = parse_request(bad_env.to_string().as_bytes())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("invalid collective request") && e.contains("LD_PRELOAD"),
            "{e}"
        );
    }

    #[test]
    fn watchdog_comes_before_the_parent() {
        for secs in [1u64, 10, 30, 600] {
            let d = Duration::from_secs(secs);
            let w = watchdog_deadline(d);
            assert!(w < d && w >= d / 2, "{d:?} -> {w:?}");
        }
        assert_eq!(
            watchdog_deadline(Duration::from_secs(1)),
            Duration::from_millis(900)
        );
    }
}

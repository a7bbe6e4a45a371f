//! Reading a child's pipes: stdout split into bounded lines, the last bytes of stderr kept and
//! logged.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read};
use std::process::ChildStderr;
use std::sync::mpsc;
use std::sync::Mutex;

pub(super) enum Chunk {
    Line(Vec<u8>),
    /// Bytes after the last newline at EOF.
    Partial(Vec<u8>),
    TooLong,
    Eof,
    Err(io::Error),
}

/// Log target of the children's stderr lines (at trace level).
const CHILD_LOG_TARGET: &str = "ddpcheck::child";

/// Keeps the last `cap` bytes of the child's stderr in `tail`; with trace logging on for
/// [`CHILD_LOG_TARGET`], also logs each line.
pub(super) fn read_stderr(mut e: ChildStderr, pid: u32, cap: usize, tail: &Mutex<VecDeque<u8>>) {
    let trace = tracing::enabled!(target: CHILD_LOG_TARGET, tracing::Level::TRACE);
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match e.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                {
                    let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                    t.extend(&buf[..n]);
                    let excess = t.len().saturating_sub(cap);
                    t.drain(..excess);
                }
                if trace {
                    pending.extend_from_slice(&buf[..n]);
                    while let Some(i) = pending.iter().position(|&b| b == b'\n') {
                        let line: Vec<u8> = pending.drain(..=i).collect();
                        let text = String::from_utf8_lossy(&line);
                        tracing::trace!(target: CHILD_LOG_TARGET, pid, "{}", text.trim_end());
                    }
                    // A runaway line is logged in pieces rather than held.
                    if pending.len() > 64 << 10 {
                        let text = String::from_utf8_lossy(&pending);
                        tracing::trace!(target: CHILD_LOG_TARGET, pid, "{text}");
                        pending.clear();
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    if trace && !pending.is_empty() {
        let text = String::from_utf8_lossy(&pending);
        tracing::trace!(target: CHILD_LOG_TARGET, pid, "{}", text.trim_end());
    }
}

/// Splits stdout into lines. A line longer than `max` ends the reading ([`Chunk::TooLong`]),
/// or with `cut` is handed on cut at `max` and the rest of it dropped.
pub(super) fn read_lines(out: impl Read, max: usize, cut: bool, tx: mpsc::Sender<Chunk>) {
    let mut r = BufReader::with_capacity(64 << 10, out);
    let mut buf: Vec<u8> = Vec::new();
    // Dropping the rest of a line that was cut and handed on.
    let mut skipping = false;
    loop {
        let avail = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = tx.send(Chunk::Err(e));
                return;
            }
        };
        if avail.is_empty() {
            if !buf.is_empty() {
                let _ = tx.send(Chunk::Partial(std::mem::take(&mut buf)));
            }
            let _ = tx.send(Chunk::Eof);
            return;
        }
        match avail.iter().position(|&b| b == b'\n') {
            Some(i) => {
                if !skipping {
                    buf.extend_from_slice(&avail[..i]);
                }
                r.consume(i + 1);
                if std::mem::take(&mut skipping) {
                    continue;
                }
                // A whole over-long line can arrive in one read, newline included: the bound
                // holds whether or not the reader saw it in pieces.
                if buf.len() > max {
                    if !cut {
                        let _ = tx.send(Chunk::TooLong);
                        return;
                    }
                    buf.truncate(max);
                }
                if tx.send(Chunk::Line(std::mem::take(&mut buf))).is_err() {
                    return;
                }
            }
            None => {
                let n = avail.len();
                if !skipping {
                    buf.extend_from_slice(avail);
                }
                r.consume(n);
            }
        }
        if buf.len() > max {
            if !cut {
                let _ = tx.send(Chunk::TooLong);
                return;
            }
            buf.truncate(max);
            skipping = true;
            if tx.send(Chunk::Line(std::mem::take(&mut buf))).is_err() {
                return;
            }
        }
    }
}

//! Reading a launch: its stdout events, how the process ended, and the judgement of both into
//! results, warnings or one error that says what went wrong.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use ddpcheck_core::ddp::{CompileOutcome, HostFacts, ParamLayout, Recipe, RunDevice, TorchBuckets};
use ddpcheck_core::ProbeError;
use serde::Deserialize;

use super::{TorchEnv, TAIL_BYTES, TAIL_LINES, TAIL_LINE_BYTES};
use crate::supervise::{self, Line, Next, SuperviseError};

/// How a supervised child ended, as the judgement reads it.
#[derive(Debug)]
pub(super) struct Ended {
    /// We stopped it: at the deadline, or when it did not exit after its last result.
    pub(super) stopped: bool,
    /// Its exit status, or why there is none.
    pub(super) exit: Exit,
    /// The last lines of stderr, oldest first.
    pub(super) stderr_tail: Vec<String>,
}

impl Ended {
    /// Failing to start `program` is the only error; every other end is judged with what the
    /// callback collected.
    pub(super) fn from_supervised(
        program: &str,
        ran: Result<supervise::Outcome, SuperviseError>,
    ) -> Result<Ended, ProbeError> {
        let e = match ran {
            Ok(o) => {
                return Ok(Ended {
                    stopped: false,
                    exit: Exit::Status(o.status),
                    stderr_tail: tail_lines(&o.stderr_tail),
                })
            }
            Err(SuperviseError::Spawn { source, .. }) => return Err(spawn_error(program, &source)),
            Err(e) => e,
        };
        let stopped = matches!(
            e,
            SuperviseError::Timeout { .. } | SuperviseError::Lingered { .. }
        );
        let exit = match e.exit_status() {
            Some(st) => Exit::Status(st),
            None if stopped => Exit::NotReaped,
            // The supervisor's own trouble (an I/O error; lenient lines never fail): its words.
            None => Exit::Supervisor(clip(&e.to_string(), 500)),
        };
        Ok(Ended {
            stopped,
            exit,
            stderr_tail: tail_lines(e.stderr_tail()),
        })
    }

    pub(super) fn success(&self) -> bool {
        matches!(&self.exit, Exit::Status(st) if st.success())
    }

    pub(super) fn describe(&self) -> String {
        match &self.exit {
            Exit::Status(st) => describe_exit(st),
            Exit::NotReaped => "not reaped after SIGKILL".to_string(),
            Exit::Supervisor(why) => why.clone(),
        }
    }
}

/// A child's exit status, or why there is none.
#[derive(Debug)]
pub(super) enum Exit {
    Status(ExitStatus),
    /// Stopped by us and still not reaped after SIGKILL.
    NotReaped,
    /// The supervisor's own trouble (an I/O error), in its words.
    Supervisor(String),
}

/// The supervisor's stderr tail as its last [`TAIL_LINES`] lines, each cut at
/// [`TAIL_LINE_BYTES`]; a first line cut by the byte bound is dropped.
fn tail_lines(tail: &str) -> Vec<String> {
    let mut lines: Vec<&str> = tail.lines().collect();
    if tail.len() >= TAIL_BYTES && lines.len() > 1 {
        lines.remove(0);
    }
    lines[lines.len().saturating_sub(TAIL_LINES)..]
        .iter()
        .map(|l| clip(l, TAIL_LINE_BYTES))
        .collect()
}

fn spawn_error(program: &str, e: &io::Error) -> ProbeError {
    match e.kind() {
        io::ErrorKind::NotFound => ProbeError::Unavailable(format!(
            "{program} not found: set DDPCHECK_PYTHON to a python3 with torch ≥ 2.4 (or to a torchrun)"
        )),
        io::ErrorKind::PermissionDenied => {
            ProbeError::Unavailable(format!("{program} cannot be executed: {e}"))
        }
        _ => ProbeError::Unavailable(format!("cannot start {program}: {e}")),
    }
}

#[derive(Debug, Deserialize)]
struct ProgressEvent {
    #[serde(default)]
    phase: String,
    #[serde(default)]
    step: u32,
    #[serde(default)]
    total: u32,
}

#[derive(Debug, Deserialize)]
pub(super) struct ResultEvent {
    /// Which run of a grouped launch this is (absent in a one-run launch of an older script).
    #[serde(default)]
    pub(super) model: Option<String>,
    #[serde(default)]
    pub(super) variant: Option<String>,
    pub(super) params: u64,
    pub(super) world_size: u32,
    pub(super) step_time_median_s: f64,
    pub(super) step_time_p90_s: f64,
    /// Steps timed (absent from an older script's line).
    #[serde(default)]
    pub(super) steps: Option<u32>,
    pub(super) throughput: f64,
    pub(super) throughput_unit: String,
    #[serde(default)]
    pub(super) nocomm_step_time_median_s: Option<f64>,
    /// `nocomm` on N GPUs: rank 0's median step alone, the other ranks waiting idle.
    #[serde(default)]
    pub(super) solo_step_time_median_s: Option<f64>,
    /// With `plain_reference`: the model's median step without DDP, and each round's
    /// [DDP block median, plain block median].
    #[serde(default)]
    pub(super) plain_step_time_median_s: Option<f64>,
    #[serde(default)]
    pub(super) plain_rounds: Option<Vec<[f64; 2]>>,
    #[serde(default)]
    pub(super) max_memory_bytes: Option<u64>,
    #[serde(default)]
    pub(super) memory_phases: Option<ddpcheck_core::ddp::RunPhases>,
    #[serde(default)]
    pub(super) final_loss: Option<f64>,
    #[serde(default)]
    pub(super) step_times_s: Vec<f64>,
    /// (bytes per rank, seconds) of the all-reduces timed alone before the steps.
    #[serde(default)]
    pub(super) all_reduce_probe: Option<Vec<(u64, f64)>>,
    /// The parameters as the launch's torch registered them (absent from an older script).
    #[serde(default)]
    pub(super) param_layout: Option<ParamLayout>,
    /// DDP's buckets as torch made them in the launch.
    #[serde(default)]
    pub(super) torch_buckets: Option<TorchBuckets>,
    /// What ran: autocast and DDP's options.
    #[serde(default)]
    pub(super) recipe: Option<Recipe>,
    #[serde(default)]
    pub(super) device: Option<RunDevice>,
    /// The parameters without a gradient and the buffers (absent from an older script).
    #[serde(default)]
    pub(super) host: Option<HostFacts>,
    /// A compiled run: its compile time outside the timed steps, or the compiler's first line.
    #[serde(default)]
    pub(super) compile: Option<CompileOutcome>,
}

impl ResultEvent {
    /// What does not add up between the reported layout, buckets and parameter count.
    pub(super) fn layout_warnings(&self) -> Vec<String> {
        let Some(layout) = &self.param_layout else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let Err(e) = layout.validate() {
            out.push(format!("the reported parameter layout: {e}"));
        }
        if layout.total_params() != self.params {
            out.push(format!(
                "the reported parameter layout holds {} parameters, the launch counted {}",
                layout.total_params(),
                self.params
            ));
        }
        let trainable = layout.trainable().count();
        if let Some(b) = &self.torch_buckets {
            let mut ids: Vec<usize> = b.buckets.iter().flatten().copied().collect();
            ids.sort_unstable();
            if ids != (0..trainable).collect::<Vec<_>>() {
                out.push(format!(
                    "torch's buckets do not hold each of the {trainable} trainable parameters once"
                ));
            }
        }
        out
    }
}

/// One `{"event": "sweep"}` line of a collectives sweep: an op's sizes, the slowest rank's mean
/// seconds per call, and the wrong elements the check counted.
#[derive(Debug, Deserialize)]
pub(super) struct SweepEvent {
    pub(super) op: ddpcheck_core::collective::Collective,
    pub(super) ranks: u32,
    pub(super) samples: Vec<SweepSampleEvent>,
}

#[derive(Debug, Deserialize)]
pub(super) struct SweepSampleEvent {
    pub(super) bytes: u64,
    pub(super) count: u64,
    pub(super) out_of_place_s: f64,
    pub(super) in_place_s: Option<f64>,
    pub(super) wrong_out_of_place: Option<u64>,
    pub(super) wrong_in_place: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct ErrorEvent {
    #[serde(default)]
    kind: String,
    message: String,
}

/// What a launch printed on stdout.
#[derive(Default)]
pub(super) struct Collected {
    pub(super) env: Option<TorchEnv>,
    pub(super) results: Vec<ResultEvent>,
    /// A collectives sweep's ops, each one line (a sweep launch owes these instead of results).
    pub(super) sweeps: Vec<SweepEvent>,
    /// Results the launch owes: once all are in, the process gets a short grace to exit.
    pub(super) expected: usize,
    errors: Vec<ErrorEvent>,
    /// Lines that were not JSON objects with an `event`: the first few, and how many.
    garbage: Vec<String>,
    pub(super) garbage_count: usize,
    /// Known events that did not parse.
    malformed: Vec<String>,
    pub(super) warnings: Vec<String>,
}

impl Collected {
    /// Nothing read yet from a launch that owes `expected` results.
    pub(super) fn expecting(expected: usize) -> Collected {
        Collected {
            expected,
            ..Collected::default()
        }
    }
}

/// Handles one stdout line; says [`Next::Done`] once every result is in.
pub(super) fn on_line(
    line: Line<'_>,
    got: &mut Collected,
    label: &str,
    note: &mut dyn FnMut(String),
) -> Next {
    let value = line.json;
    let line = line.text.trim();
    if line.is_empty() {
        return Next::More;
    }
    let event = value
        .as_ref()
        .and_then(|v| v.get("event"))
        .and_then(|e| e.as_str())
        .map(str::to_string);
    let (Some(value), Some(event)) = (value, event) else {
        got.garbage_count += 1;
        if got.garbage.len() < 3 {
            got.garbage.push(clip(line, 200));
        }
        return Next::More;
    };
    let mut malformed = |e: serde_json::Error| {
        got.malformed
            .push(format!("{event} line: {e}: {}", clip(line, 200)));
    };
    match event.as_str() {
        "env" => match serde_json::from_value(value) {
            Ok(env) => got.env = Some(env),
            Err(e) => malformed(e),
        },
        "progress" => {
            if let Ok(p) = serde_json::from_value::<ProgressEvent>(value) {
                let what = match p.phase.as_str() {
                    "ready" => "model ready, warming up".to_string(),
                    "sizing" => "timing a few steps to size the run".to_string(),
                    "nocomm" => format!("no-communication step {}/{}", p.step, p.total),
                    "sweep" => format!("collective {}/{}", p.step, p.total),
                    _ => format!("step {}/{}", p.step, p.total),
                };
                note(format!("{label}: {what}"));
            }
        }
        "result" => match serde_json::from_value::<ResultEvent>(value) {
            Ok(r) if got.results.len() < got.expected => {
                got.results.push(r);
                if got.results.len() == got.expected {
                    return Next::Done;
                }
            }
            Ok(_) => got
                .warnings
                .push("more result lines than runs; the first ones count".into()),
            Err(e) => malformed(e),
        },
        "sweep" => match serde_json::from_value::<SweepEvent>(value) {
            Ok(sw) => {
                got.sweeps.push(sw);
                if got.sweeps.len() == got.expected {
                    return Next::Done;
                }
            }
            Err(e) => malformed(e),
        },
        "error" => match serde_json::from_value::<ErrorEvent>(value) {
            Ok(e) => got.errors.push(e),
            Err(e) => malformed(e),
        },
        _ => {} // a newer script's event: not ours to judge
    }
    Next::More
}

/// DDP's own stop over parameters without a gradient names torch's keyword, not ddpcheck's
/// flag (an older script's line, or a rank's stderr where no error line came): the flag to pass.
pub(super) fn unused_parameters_hint(message: &str) -> Option<&'static str> {
    (message.contains("find_unused_parameters") && !message.contains("--find-unused-parameters"))
        .then_some(
            " (some trainable parameters got no gradient in a step: pass --find-unused-parameters, or remove them from the model)",
        )
}

/// A rank's error message without its `rank N, ` prefix.
fn without_rank(message: &str) -> &str {
    message
        .strip_prefix("rank ")
        .and_then(|rest| rest.split_once(", "))
        .map_or(message, |(_, m)| m)
}

/// Maps how the launch ended to its result or error.
pub(super) fn judge(
    label: &str,
    deadline_s: f64,
    f: &Ended,
    got: &mut Collected,
) -> Result<Vec<ResultEvent>, ProbeError> {
    if let Some(first) = got.errors.first() {
        // Every rank failing alike (a bad factory fails everywhere) is one failure.
        let same = |e: &ErrorEvent| without_rank(&e.message) == without_rank(&first.message);
        let others = got.errors.iter().filter(|e| !same(e)).count();
        let mut msg = format!("{label}: {}", first.message);
        if others > 0 {
            msg.push_str(&format!(" (and {others} more rank error(s))"));
        }
        if let Some(hint) = unused_parameters_hint(&first.message) {
            msg.push_str(hint);
            return Err(ProbeError::Invalid(msg));
        }
        return Err(match first.kind.as_str() {
            "unavailable" => ProbeError::Unavailable(msg),
            "invalid" => ProbeError::Invalid(msg),
            _ => ProbeError::Worker(msg),
        });
    }
    if !got.results.is_empty() || !got.sweeps.is_empty() {
        let r = std::mem::take(&mut got.results);
        let reported = r.len() + got.sweeps.len();
        if reported < got.expected {
            got.warnings.push(format!(
                "{} of {} runs reported before the launch ended",
                reported, got.expected
            ));
        }
        if f.stopped {
            got.warnings.push(format!(
                "did not exit after reporting its result and was stopped ({})",
                f.describe()
            ));
        } else if !f.success() {
            got.warnings.push(format!(
                "{} after reporting its result: {}",
                f.describe(),
                key_line(&f.stderr_tail).unwrap_or("no stderr")
            ));
        }
        if got.garbage_count > 0 {
            got.warnings.push(format!(
                "{} stdout line(s) were not JSON, e.g. {:?}",
                got.garbage_count,
                got.garbage.first().map(String::as_str).unwrap_or("")
            ));
        }
        return Ok(r);
    }
    if f.stopped {
        return Err(ProbeError::Timeout {
            stage: format!("DDP benchmark {label}"),
            seconds: deadline_s,
        });
    }
    let mut msg = format!("{label}: ");
    if f.success() {
        msg.push_str("the benchmark exited without a result line");
    } else {
        msg.push_str(&f.describe());
        if let Some(k) = key_line(&f.stderr_tail) {
            msg.push_str(": ");
            msg.push_str(k);
            if let Some(hint) = unused_parameters_hint(k) {
                msg.push_str(hint);
                return Err(ProbeError::Invalid(clip(&msg, 2000)));
            }
        }
    }
    if let Some(m) = got.malformed.first() {
        msg.push_str(&format!("; malformed {m}"));
    }
    if got.garbage_count > 0 {
        msg.push_str(&format!(
            "; its stdout was not JSON lines ({} line(s), first {:?})",
            got.garbage_count,
            got.garbage.first().map(String::as_str).unwrap_or("")
        ));
    }
    let tail = tail_summary(&f.stderr_tail, 6);
    if !tail.is_empty() {
        msg.push_str("; stderr tail: ");
        msg.push_str(&tail);
    }
    Err(ProbeError::Worker(clip(&msg, 2000)))
}

pub(super) fn check_result(r: &ResultEvent, world: u32) -> Result<(), ProbeError> {
    if r.world_size != world {
        return Err(ProbeError::Worker(format!(
            "the benchmark reported world size {} for a launch on {world} GPU(s)",
            r.world_size
        )));
    }
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !(positive(r.step_time_median_s) && positive(r.step_time_p90_s) && positive(r.throughput)) {
        return Err(ProbeError::Worker(format!(
            "the benchmark reported non-positive times or throughput (median {} s, p90 {} s, {} {})",
            r.step_time_median_s, r.step_time_p90_s, r.throughput, r.throughput_unit
        )));
    }
    Ok(())
}

pub(super) fn describe_exit(status: &ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit code {code}");
    }
    match status.signal() {
        Some(sig) => {
            let name = match sig {
                libc::SIGKILL => " (SIGKILL)",
                libc::SIGTERM => " (SIGTERM)",
                libc::SIGSEGV => " (SIGSEGV)",
                libc::SIGABRT => " (SIGABRT)",
                libc::SIGBUS => " (SIGBUS)",
                _ => "",
            };
            format!("killed by signal {sig}{name}")
        }
        None => format!("{status}"),
    }
}

/// A line with letters or digits, without torch's `[rankN]:` prefix.
pub(super) fn meaningful(line: &str) -> Option<&str> {
    let mut t = line.trim();
    if let Some(rest) = t.strip_prefix("[rank") {
        if let Some((_, after)) = rest.split_once("]:") {
            t = after.trim();
        }
    }
    t.chars().any(char::is_alphanumeric).then_some(t)
}

/// `SomeError: …` or `pkg.SomeException: …`, the last line of a Python traceback.
pub(super) fn looks_like_exception(line: &str) -> bool {
    let Some((head, _)) = line.split_once(':') else {
        return false;
    };
    // torchrun's own wrapper error says only that a worker failed; the worker's line is better.
    !head.is_empty()
        && !head.ends_with("ChildFailedError")
        && head
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        && ["Error", "Exception", "Interrupt", "Exit"]
            .iter()
            .any(|s| head.ends_with(s))
}

/// The stderr line that best says what went wrong: our own `ddpcheck:` line, else the last
/// exception line, else the last line with words in it.
pub(super) fn key_line(tail: &[String]) -> Option<&str> {
    let lines: Vec<&str> = tail.iter().filter_map(|l| meaningful(l)).collect();
    lines
        .iter()
        .rev()
        .find(|l| l.starts_with("ddpcheck: "))
        .or_else(|| lines.iter().rev().find(|l| looks_like_exception(l)))
        .or_else(|| lines.last())
        .copied()
}

pub(super) fn tail_summary(tail: &[String], n: usize) -> String {
    let lines: Vec<&str> = tail.iter().filter_map(|l| meaningful(l)).collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

pub(super) fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &s[..cut])
}

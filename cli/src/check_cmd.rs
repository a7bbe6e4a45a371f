//! `ddpcheck check`: the preflight, a daemon's verdict reused under `--max-age` (only one that is
//! fresh, for the same GPUs; none when the daemon cannot tell), and the prolog's one line and
//! exit. A prolog that finds the node busy with another test waits for it (through a daemon,
//! joins the same preflight), within its deadline, and is never passed unchecked.

use std::time::{Duration, Instant};

use ddpcheck_core::report::PreflightReport;
use ddpcheck_core::verdict::{is_fresh, PrologPolicy};
use ddpcheck_core::{ProbeError, Verdict};
use ddpcheck_engine::{self as engine, PreflightParams, RunError, Runner};

use crate::args::CheckArgs;
use crate::flag_values::secs;
use crate::global_args::{make_target, GlobalArgs};
use crate::{print_json, progress, render};

/// How often a prolog tries a busy node again (locally, or a daemon that cannot wait itself).
const BUSY_RETRY: Duration = Duration::from_millis(200);

pub fn run(cli: &GlobalArgs, a: &CheckArgs) -> Result<i32, RunError> {
    if a.max_age.is_some() && cli.daemon.is_none() {
        return Err(RunError::Usage(
            "--max-age reuses the daemon's last verdict: it needs --daemon (a local run keeps no verdicts)".into(),
        ));
    }
    let target = make_target(cli)?;
    let policy = PrologPolicy {
        fail_on_warning: a.fail_on_warning,
        ..PrologPolicy::default()
    };
    let deadline = secs(a.deadline, "--deadline")?;
    let params = PreflightParams {
        gpus: a.gpus.clone().unwrap_or_else(engine::job_gpus_from_env),
        min_bytes: a.min_bytes,
        max_bytes: a.max_bytes,
        iters: 0,
        warmup_iters: 0,
        deadline: Some(deadline),
        inject_hang: a.inject_hang,
        skip_host_copies: a.no_host_copies,
        // A prolog waits for a test in progress (one NCCL deadline), never BUSY: BUSY would
        // let the job start on a node nobody checked.
        wait_if_busy: a.prolog.then_some(deadline),
    };
    // A fresh cached verdict from the daemon spares the job a new run.
    let mut report = None;
    if let Some(max_age) = a.max_age {
        if !(max_age.is_finite() && max_age >= 0.0) {
            return Err(RunError::Usage(format!(
                "--max-age {max_age} is not a number of seconds"
            )));
        }
        match reusable(target.as_ref(), max_age, &params.gpus) {
            Ok(r) => report = r,
            // Fail closed: a daemon that cannot tell its last verdict has none to reuse, and a
            // new run would hide that it could not keep one.
            Err(e) => {
                let msg = format!("--max-age: no verdict can be reused: {e}");
                if a.prolog {
                    outln!("{}", Verdict::Unknown.line(&msg));
                    return Ok(policy.prolog_exit(Verdict::Unknown));
                }
                return Err(RunError::Daemon(msg));
            }
        }
    }
    let report = match report {
        Some(r) => r,
        None => {
            let reporter = progress::Reporter::new();
            let r = preflight_waiting(target.as_ref(), &params, &mut |p| reporter.update(p));
            reporter.finish();
            match r {
                Ok(r) => r,
                Err(e) if a.prolog => {
                    // The prolog must always answer with one verdict line.
                    let v = Verdict::from_exit_code(e.exit_code()).unwrap_or(Verdict::Unknown);
                    outln!("{}", v.line(&e.to_string()));
                    return Ok(policy.prolog_exit(v));
                }
                Err(e) => return Err(e),
            }
        }
    };
    if a.prolog {
        // One line even from a report that a daemon of an older version stored.
        outln!("{}", report.verdict.line(verdict_message(&report.reason)));
        return Ok(policy.prolog_exit(report.verdict));
    }
    if cli.json {
        print_json(&report)?;
    } else {
        out!("{}", render::preflight(&report, cli.width()));
    }
    Ok(report.exit_code)
}

/// The daemon's last preflight where it may stand for a new one: fresh (dated, not in the
/// future, at most `max_age` old) and for the job's GPUs. `Err` where the daemon cannot tell.
fn reusable(
    target: &dyn Runner,
    max_age: f64,
    job_gpus: &str,
) -> Result<Option<PreflightReport>, RunError> {
    let Some(r) = target.last_preflight()? else {
        return Ok(None);
    };
    let dated = humantime::parse_rfc3339(&r.header.provenance.time)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs_f64());
    if !is_fresh(dated, engine::unix_now(), max_age) {
        return Ok(None);
    }
    let node_gpus: Vec<String> = target
        .topo("")
        .map(|t| t.gpus.into_iter().map(|g| g.uuid).collect())
        .unwrap_or_default();
    Ok(covers_same_gpus(&r, job_gpus, &node_gpus).then_some(r))
}

/// The preflight; with `wait_if_busy`, a node busy with another test is tried again until the
/// wait is over (a daemon waits itself, this covers a local run and an older daemon), then
/// TIMEOUT: nothing was checked.
fn preflight_waiting(
    target: &dyn Runner,
    params: &PreflightParams,
    progress: &mut dyn FnMut(ddpcheck_core::backend::Progress),
) -> Result<PreflightReport, RunError> {
    let t0 = Instant::now();
    loop {
        match target.preflight(params, progress) {
            Err(RunError::Busy(_)) if params.wait_if_busy.is_some_and(|w| t0.elapsed() < w) => {
                std::thread::sleep(BUSY_RETRY);
            }
            Err(RunError::Busy(m)) if params.wait_if_busy.is_some() => {
                return Err(RunError::Probe(ProbeError::Timeout {
                    stage: format!("the wait for the test in progress on this node ({m})"),
                    seconds: t0.elapsed().as_secs_f64(),
                }));
            }
            other => return other,
        }
    }
}

/// A reason line without its `ddpcheck: VERDICT: ` head.
fn verdict_message(reason: &str) -> &str {
    reason
        .strip_prefix("ddpcheck: ")
        .and_then(|r| r.split_once(": "))
        .map_or(reason, |(_, m)| m)
}

/// Whether a cached preflight checked exactly the GPUs this job asks for (every GPU of the node,
/// `node_gpus`, when the job names none): a verdict about other GPUs must not decide this job.
fn covers_same_gpus(
    r: &ddpcheck_core::report::PreflightReport,
    job_gpus: &str,
    node_gpus: &[String],
) -> bool {
    let mut have: Vec<String> = r.gpus.iter().map(|g| g.uuid.clone()).collect();
    let mut want: Vec<String> = if job_gpus.trim().is_empty() {
        node_gpus.to_vec()
    } else {
        match ddpcheck_core::node_gpus::select_gpus(&r.gpus, job_gpus) {
            Ok(sel) => sel.into_iter().map(|g| g.uuid).collect(),
            Err(_) => return false,
        }
    };
    have.sort_unstable();
    want.sort_unstable();
    !want.is_empty() && want == have
}

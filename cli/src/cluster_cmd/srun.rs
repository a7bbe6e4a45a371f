//! `ddpcheck cluster srun`: the cluster all-reduce without daemons, one task per node under
//! srun, with the rendezvous fixed in advance on the step's first node.

use std::time::{Duration, Instant};

use clap::Args;
use ddpcheck_core::backend::RankGroup;
use ddpcheck_core::cluster::{
    ClusterNode, ClusterReport, DeadNode, Isolation, IsolationRun, NodeResult,
};
use ddpcheck_core::{BackendKind, ProbeError, Severity, Verdict};
use ddpcheck_engine as engine;
use ddpcheck_engine::cluster::{self as engine_cluster, ClusterRun};

use super::srun_error::{HostlistError, ScontrolError, StepError};
use super::{ClusterRunArgs, GRACE};
use crate::global_args::GlobalArgs;
use ddpcheck_engine::RunError;

/// The default root port lies in `PORT_BASE..PORT_BASE + PORT_SPAN` (20000-31999): no root
/// needed, clear of Slurm's own ports (6817-6819), below Linux's ephemeral range (32768-60999),
/// so no connection's local port holds it.
pub const PORT_BASE: u16 = 20000;
pub const PORT_SPAN: u16 = 12000;

/// How long `scontrol show hostnames` may take before we give up on it.
const SCONTROL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Args, Debug)]
pub struct ClusterSrunArgs {
    /// The NCCL bootstrap root, HOST:PORT (default: the step's first node and --port). Task 0 must run on HOST.
    #[arg(long, value_name = "HOST:PORT")]
    pub root: Option<String>,
    /// The root's port on the step's first node (default: derived from SLURM_JOB_ID and SLURM_STEP_ID, 20000-31999).
    #[arg(long, conflicts_with = "root", value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Option<u16>,
    #[command(flatten)]
    pub run: ClusterRunArgs,
}

/// The srun step this task is part of, read from the environment srun gives its tasks.
#[derive(Clone, Debug, PartialEq)]
pub struct SlurmStep {
    /// This task's node rank (SLURM_PROCID; one task per node).
    pub rank: u32,
    /// Nodes (= tasks) of the step.
    pub nodes: u32,
    pub job_id: u64,
    pub step_id: u64,
    /// The step's nodes in Slurm's hostlist syntax (`node[01-04]`), when known.
    pub nodelist: Option<String>,
    /// SLURMD_NODENAME: this node's name in Slurm.
    pub node_name: Option<String>,
}

impl SlurmStep {
    /// Reads the step from `get` (the process environment, or a test's map). Errors are usage
    /// errors in one line: not under srun, more than one task per node, fewer than two nodes.
    pub fn from_env(get: &dyn Fn(&str) -> Option<String>) -> Result<SlurmStep, StepError> {
        // The first of `names` that is set and not empty, with the name it was read from.
        let var = |names: &[&'static str]| -> Option<(&'static str, String)> {
            names.iter().find_map(|n| {
                get(n)
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
                    .map(|v| (*n, v))
            })
        };
        let (Some(procid), Some(step), Some(job)) = (
            var(&["SLURM_PROCID"]),
            var(&["SLURM_STEP_ID", "SLURM_STEPID"]),
            var(&["SLURM_JOB_ID", "SLURM_JOBID"]),
        ) else {
            return Err(StepError::NotUnderSrun);
        };
        fn num<T: std::str::FromStr>((name, v): &(&'static str, String)) -> Result<T, StepError> {
            v.parse().map_err(|_| StepError::NotANumber {
                name,
                value: v.clone(),
            })
        }
        let step_id: u64 = num(&step)?;
        // Slurm's special steps (batch, extern, interactive, pending) sit at the top of u32.
        if step_id >= 0xFFFF_FFF0 {
            return Err(StepError::SpecialStep(step_id));
        }
        let count = |names: &[&'static str]| {
            var(names)
                .ok_or(StepError::Unset(names[0]))
                .and_then(|v| num::<u32>(&v))
        };
        let tasks = count(&["SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"])?;
        let nodes = count(&["SLURM_STEP_NUM_NODES", "SLURM_NNODES"])?;
        if tasks != nodes {
            return Err(StepError::TasksPerNode { tasks, nodes });
        }
        if nodes < 2 {
            return Err(StepError::TooFewNodes(nodes));
        }
        let rank: u32 = num(&procid)?;
        if rank >= nodes {
            return Err(StepError::Rank { rank, nodes });
        }
        // The job's list names the step's nodes only when the step spans the whole job.
        let job_list_is_step = var(&["SLURM_JOB_NUM_NODES", "SLURM_NNODES"])
            .and_then(|v| num::<u32>(&v).ok())
            == Some(nodes);
        let nodelist = var(&["SLURM_STEP_NODELIST"])
            .or_else(|| {
                job_list_is_step
                    .then(|| var(&["SLURM_JOB_NODELIST"]))
                    .flatten()
            })
            .map(|(_, v)| v);
        Ok(SlurmStep {
            rank,
            nodes,
            job_id: num(&job)?,
            step_id,
            nodelist,
            node_name: var(&["SLURMD_NODENAME"]).map(|(_, v)| v),
        })
    }

    pub fn run_id(&self) -> String {
        format!("srun-{}.{}", self.job_id, self.step_id)
    }
}

/// The root's port when none is given: the same on every task of a step (a function of the
/// job and step ids only), different for the steps of one job, and for step s < 101 of
/// neighbouring jobs (job·101 + step, modulo the span: 101 is prime to 12000).
pub fn default_port(job_id: u64, step_id: u64) -> u16 {
    let span = u64::from(PORT_SPAN);
    let offset = ((job_id % span) * 101 + step_id % span) % span;
    PORT_BASE + u16::try_from(offset).unwrap_or(0)
}

/// The first host of a Slurm hostlist: read directly when its first element has no range,
/// else expanded by `scontrol show hostnames` (`program`), bounded by `timeout`.
pub fn first_host(
    nodelist: &str,
    program: &str,
    timeout: Duration,
) -> Result<String, HostlistError> {
    let list = nodelist.trim();
    let end = list.find([',', '[']).unwrap_or(list.len());
    if !list[end..].starts_with('[') && end > 0 {
        return Ok(list[..end].to_string());
    }
    let mut cmd = std::process::Command::new(program);
    cmd.args(["show", "hostnames", list]);
    let out = output_bounded(cmd, timeout).map_err(|why| HostlistError::Expand {
        list: list.to_string(),
        program: program.to_string(),
        why,
    })?;
    out.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
        .ok_or_else(|| HostlistError::NoHost {
            list: list.to_string(),
            program: program.to_string(),
        })
}

/// A short command's standard output (blank lines dropped), through the same supervisor as
/// every other child of ddpcheck: its own process group, stopped past `timeout`.
fn output_bounded(cmd: std::process::Command, timeout: Duration) -> Result<String, ScontrolError> {
    use ddpcheck_gpu::supervise::{self, Next, SuperviseError};
    let mut opts = supervise::Options::new(timeout);
    opts.allow_non_json = true;
    let mut out = String::new();
    supervise::run_lines(cmd, None, &opts, |l| {
        out.push_str(l.text);
        out.push('\n');
        Next::More
    })
    .map_err(|e| match e {
        SuperviseError::Spawn { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            ScontrolError::NotInstalled
        }
        SuperviseError::Spawn { source, .. } => ScontrolError::Spawn(source),
        SuperviseError::Timeout { .. } => ScontrolError::Timeout(timeout.as_secs_f64()),
        SuperviseError::Failed {
            status,
            stderr_tail,
            ..
        } => {
            let why = stderr_tail
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            ScontrolError::Failed {
                why: why.trim().to_string(),
                status,
            }
        }
        other => ScontrolError::Supervise(Box::new(other)),
    })?;
    Ok(out)
}

/// `--root` as given, or the step's first node at `--port` (default: [`default_port`]).
fn root_address(a: &ClusterSrunArgs, step: &SlurmStep) -> Result<String, RunError> {
    let root = match &a.root {
        Some(r) => r.trim().to_string(),
        None => {
            let list = step.nodelist.as_deref().ok_or_else(|| {
                RunError::Usage(
                    "the step's node list is unknown (SLURM_STEP_NODELIST not set): give the root with --root HOST:PORT"
                        .into(),
                )
            })?;
            let host = first_host(list, "scontrol", SCONTROL_TIMEOUT)
                .map_err(|e| RunError::Usage(e.to_string()))?;
            // NCCL's rank 0 opens the root: task 0 must be on the first node (it is, under
            // block or cyclic distribution; an arbitrary one can move it).
            if let (0, Some(me)) = (step.rank, step.node_name.as_deref()) {
                if me != host {
                    return Err(RunError::Usage(format!(
                        "task 0 runs on {me}, not on the step's first node {host}: give the root with --root {me}:PORT"
                    )));
                }
            }
            let port = a
                .port
                .unwrap_or_else(|| default_port(step.job_id, step.step_id));
            format!("{host}:{port}")
        }
    };
    // core's own check of a rendezvous address, so a sim run refuses what a real one would.
    RankGroup {
        first_rank: 0,
        local_ranks: 1,
        world_ranks: 2,
        comm_id: root.clone(),
    }
    .validate()
    .map_err(|e| RunError::Usage(format!("--root: {e}")))?;
    Ok(root)
}

/// What one task prints with --json (one line): the cluster report of its view, and the step.
#[derive(serde::Serialize)]
struct SrunTaskReport {
    #[serde(flatten)]
    report: ClusterReport,
    srun: SrunInfo,
}

#[derive(serde::Serialize)]
struct SrunInfo {
    rank: u32,
    nodes: u32,
    job_id: u64,
    step_id: u64,
    /// SLURMD_NODENAME, else the host name.
    node: String,
    root: String,
    node_result: Option<NodeResult>,
    notes: Vec<String>,
}

pub(super) fn run_srun(cli: &GlobalArgs, a: &ClusterSrunArgs) -> Result<i32, RunError> {
    let started = Instant::now();
    let (network, stage) = a.run.settings()?;
    let step = SlurmStep::from_env(&|k| std::env::var(k).ok())
        .map_err(|e| RunError::Usage(e.to_string()))?;
    let root = root_address(a, &step)?;
    let job = a.run.job(step.run_id(), step.rank, step.nodes, stage);
    job.validate()?;
    let backend = engine::make_backend(cli.sim.as_deref(), ddpcheck_gpu::RealConfig::default())?;
    let kind = backend.kind();
    let label = backend.label();
    let hostname = engine::local_hostname();
    let node = step.node_name.clone().unwrap_or_else(|| hostname.clone());
    let outcome = engine_cluster::join_local(backend, job, root.clone(), stage + GRACE);

    let expected = network.expected(a.run.nics_per_node);
    let names: Vec<String> = (0..step.nodes).map(|r| format!("rank {r}")).collect();
    let mut notes = vec![
        "no pairwise isolation in this mode (every task sees the same collective): to name a slow node, run `ddpcheck cluster check` through the daemons, or srun steps on node subsets with -w".to_string(),
    ];
    if kind == BackendKind::Sim {
        notes.push(format!(
            "simulated: every peer is assumed to be like this node ({label}); a task knows only its own --sim SPEC"
        ));
    }
    let (iso, failure, node_result) = match outcome {
        Ok(nr) => {
            let busbw = nr.busbw_large();
            let wrong = nr.wrong_elements();
            let iso = Isolation {
                rounds: 1,
                runs: vec![IsolationRun {
                    round: 1,
                    nodes: names.clone(),
                    busbw_gbps: busbw,
                    error: None,
                }],
                cluster_run: busbw.map(|b| (names.clone(), b)),
                // Wrong results fail the node whatever its speed, as in `cluster check`.
                dead: (wrong > 0)
                    .then(|| DeadNode {
                        node: node.clone(),
                        reason: format!("{wrong} wrong elements in its all-reduce results"),
                    })
                    .into_iter()
                    .collect(),
                ..Default::default()
            };
            (iso, None, Some(nr))
        }
        Err(ProbeError::Invalid(m)) => return Err(RunError::Usage(m)),
        Err(e) => {
            let iso = Isolation {
                rounds: 1,
                runs: vec![IsolationRun {
                    round: 1,
                    nodes: names.clone(),
                    busbw_gbps: None,
                    error: Some(e.to_string()),
                }],
                dead: vec![DeadNode {
                    node: node.clone(),
                    reason: e.to_string(),
                }],
                ..Default::default()
            };
            (iso, Some(e), None)
        }
    };
    let judged = engine_cluster::judge(&expected, &iso, &[], failure.as_ref());
    let state = if failure.is_some() || !iso.dead.is_empty() {
        "unresponsive"
    } else if judged.verdict == Verdict::Ok {
        "ok"
    } else {
        // Slow as a whole; which node is slow is not known in this mode.
        "unresolved"
    };
    let nr = node_result.as_ref();
    let report = engine_cluster::assemble(ClusterRun {
        started,
        network,
        nics_per_node: a.run.nics_per_node,
        gpus_per_node: a.run.gpus_per_node,
        expected,
        judged,
        nodes: vec![ClusterNode {
            node: node.clone(),
            hostname: Some(nr.map_or(hostname, |r| r.hostname.clone())),
            backend_label: Some(label.clone()),
            state: state.into(),
            busbw_gbps: nr.and_then(NodeResult::busbw_large),
            transport: nr.and_then(|r| r.transport.clone()),
            error: failure.as_ref().map(ToString::to_string),
        }],
        backend: kind,
        backend_label: label,
        nccl_version: nr.and_then(|r| r.nccl_version.clone()),
        transport: nr.and_then(|r| r.transport.clone()),
        nccl_env: if kind == BackendKind::Real {
            engine::nccl_env_from_process()
        } else {
            Default::default()
        },
        isolation: iso,
    });
    let task = SrunTaskReport {
        report,
        srun: SrunInfo {
            rank: step.rank,
            nodes: step.nodes,
            job_id: step.job_id,
            step_id: step.step_id,
            node,
            root,
            node_result,
            notes,
        },
    };
    if cli.json {
        // One line per task: srun interleaves the tasks' output line by line.
        let line = serde_json::to_string(&task)
            .map_err(|e| RunError::Daemon(format!("JSON output: {e}")))?;
        outln!("{line}");
    } else {
        out!("{}", render_srun(&task));
    }
    Ok(task.report.exit_code)
}

fn render_srun(t: &SrunTaskReport) -> String {
    use std::fmt::Write;
    let (r, i) = (&t.report, &t.srun);
    let prefix = format!("[rank {}/{} {}]", i.rank, i.nodes, i.node);
    let mut s = String::new();
    let sim = if r.header.backend == BackendKind::Sim {
        " [SIMULATED]"
    } else {
        ""
    };
    if i.rank == 0 {
        let _ = writeln!(
            s,
            "{prefix} ddpcheck cluster srun: job {} step {}, {} nodes × {} GPUs, root {}, network {} × {} NIC(s), expected {:.1} GB/s{sim}",
            i.job_id,
            i.step_id,
            i.nodes,
            r.gpus_per_node,
            i.root,
            r.network,
            r.nics_per_node,
            r.expected.busbw_gbps
        );
        for n in &i.notes {
            let _ = writeln!(s, "{prefix} note: {n}");
        }
    }
    match &i.node_result {
        Some(nr) => {
            let _ = writeln!(
                s,
                "{prefix} result: {} busbw {} on {}, transport {}, NCCL {}{sim}",
                nr.backend_label,
                nr.busbw_large()
                    .map(|b| format!("{b:.1} GB/s"))
                    .unwrap_or_else(|| "-".into()),
                nr.hostname,
                nr.transport.as_deref().unwrap_or("-"),
                nr.nccl_version.as_deref().unwrap_or("-"),
            );
        }
        None => {
            let _ = writeln!(
                s,
                "{prefix} result: {} failed: {}{sim}",
                r.header.backend_label,
                r.nodes
                    .first()
                    .and_then(|n| n.error.as_deref())
                    .unwrap_or("-")
            );
        }
    }
    for f in r.findings.iter().filter(|f| f.severity > Severity::Info) {
        let _ = writeln!(
            s,
            "{prefix} {} {}: {}",
            f.severity.label(),
            f.code,
            f.message
        );
    }
    let _ = writeln!(s, "{prefix} {}", r.reason);
    // srun forwards a task's output in pieces of 1 KiB: a longer line (a worker's long error)
    // would be interleaved with other tasks' lines, so each line is cut below that.
    s.lines()
        .map(|l| fit_line(l, SRUN_LINE_MAX))
        .map(|l| l + "\n")
        .collect()
}

/// Longest line a task prints in text mode (srun's I/O messages carry 1024 bytes).
const SRUN_LINE_MAX: usize = 1000;

fn fit_line(line: &str, max: usize) -> String {
    if line.len() <= max {
        return line.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &line[..end])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::cluster_cmd::srun_error::SRUN_LINE;
    use std::collections::HashMap;
    use std::os::unix::fs::PermissionsExt;

    /// srun's variables for task `rank` of a step of `nodes` nodes, one task each.
    fn srun_env(rank: u32, nodes: u32) -> HashMap<&'static str, String> {
        HashMap::from([
            ("SLURM_PROCID", rank.to_string()),
            ("SLURM_STEP_ID", "3".to_string()),
            ("SLURM_JOB_ID", "4711".to_string()),
            ("SLURM_STEP_NUM_TASKS", nodes.to_string()),
            ("SLURM_STEP_NUM_NODES", nodes.to_string()),
            ("SLURM_NTASKS", nodes.to_string()),
            ("SLURM_NNODES", nodes.to_string()),
            ("SLURM_JOB_NUM_NODES", nodes.to_string()),
            ("SLURM_STEP_NODELIST", "gpu[07-08]".to_string()),
            ("SLURM_JOB_NODELIST", "gpu[07-08]".to_string()),
            ("SLURMD_NODENAME", format!("gpu0{}", 7 + rank)),
        ])
    }

    fn parse(env: &HashMap<&'static str, String>) -> Result<SlurmStep, String> {
        SlurmStep::from_env(&|k| env.get(k).cloned()).map_err(|e| e.to_string())
    }

    #[test]
    fn a_task_of_an_srun_step_is_read() {
        let s = parse(&srun_env(1, 2)).unwrap();
        assert_eq!(
            s,
            SlurmStep {
                rank: 1,
                nodes: 2,
                job_id: 4711,
                step_id: 3,
                nodelist: Some("gpu[07-08]".into()),
                node_name: Some("gpu08".into()),
            }
        );
        assert_eq!(s.run_id(), "srun-4711.3");
        // Older names only (SLURM_STEPID, SLURM_JOBID, SLURM_NTASKS, SLURM_NNODES).
        let mut e = srun_env(0, 2);
        for k in [
            "SLURM_STEP_ID",
            "SLURM_JOB_ID",
            "SLURM_STEP_NUM_TASKS",
            "SLURM_STEP_NUM_NODES",
        ] {
            e.remove(k);
        }
        e.insert("SLURM_STEPID", "3".into());
        e.insert("SLURM_JOBID", "4711".into());
        let s = parse(&e).unwrap();
        assert_eq!((s.rank, s.nodes, s.job_id, s.step_id), (0, 2, 4711, 3));
    }

    #[test]
    fn outside_srun_and_bad_steps_are_usage_errors() {
        let e = parse(&HashMap::new()).unwrap_err().to_string();
        assert!(e.contains("SLURM_PROCID") && e.contains(SRUN_LINE), "{e}");
        // A batch script: a job, but no step of srun.
        let mut batch = srun_env(0, 2);
        batch.insert("SLURM_STEP_ID", "4294967294".into());
        let e = parse(&batch).unwrap_err().to_string();
        assert!(e.contains("special step"), "{e}");
        // Two tasks on one node (srun -N1 -n2): the step's counts differ.
        let mut two = srun_env(1, 2);
        two.insert("SLURM_STEP_NUM_NODES", "1".into());
        let e = parse(&two).unwrap_err().to_string();
        assert!(e.contains("2 tasks on 1 node(s)"), "{e}");
        assert!(e.contains("one task per node"), "{e}");
        // One node: no network to measure.
        let e = parse(&srun_env(0, 1)).unwrap_err().to_string();
        assert!(e.contains("at least 2"), "{e}");
        let mut bad = srun_env(0, 2);
        bad.insert("SLURM_PROCID", "zero".into());
        let e = parse(&bad).unwrap_err().to_string();
        assert!(e.contains("SLURM_PROCID=\"zero\""), "{e}");
        let mut out = srun_env(0, 2);
        out.insert("SLURM_PROCID", "2".into());
        assert!(parse(&out).unwrap_err().contains("outside"));
    }

    #[test]
    fn the_job_node_list_stands_in_only_for_a_step_over_the_whole_job() {
        let mut e = srun_env(0, 2);
        e.remove("SLURM_STEP_NODELIST");
        assert_eq!(parse(&e).unwrap().nodelist.as_deref(), Some("gpu[07-08]"));
        // A step on 2 of the job's 4 nodes: the job's first node may not be in it.
        e.insert("SLURM_JOB_NUM_NODES", "4".into());
        e.insert("SLURM_JOB_NODELIST", "gpu[05-08]".into());
        assert_eq!(parse(&e).unwrap().nodelist, None);
    }

    #[test]
    fn long_lines_are_cut_below_sruns_message_size() {
        assert_eq!(fit_line("short", 10), "short");
        let long = "é".repeat(600); // 1200 bytes
        let cut = fit_line(&long, SRUN_LINE_MAX);
        assert!(
            cut.len() <= SRUN_LINE_MAX && cut.ends_with("..."),
            "{}",
            cut.len()
        );
    }

    #[test]
    fn the_default_port_is_deterministic_in_range_and_differs_between_steps() {
        assert_eq!(default_port(4711, 3), default_port(4711, 3));
        let mut seen = std::collections::HashSet::new();
        for job in 1000..1100u64 {
            for step in 0..=100u64 {
                let p = default_port(job, step);
                assert!((PORT_BASE..PORT_BASE + PORT_SPAN).contains(&p), "{p}");
                // Steps 0..=100 of 100 neighbouring jobs: no two share a port.
                assert!(seen.insert(p), "job {job} step {step}: port {p} taken");
            }
        }
        // Large ids (Slurm's federated job ids) stay in range.
        let p = default_port(u64::from(u32::MAX) * 7, 4_000_000);
        assert!((PORT_BASE..PORT_BASE + PORT_SPAN).contains(&p));
    }

    /// Held while a test writes and runs stub scripts: a script written while another test
    /// thread forks can fail to execute ("text file busy").
    static STUBS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn stub(dir: &std::path::Path, body: &str) -> String {
        let p = dir.join("scontrol");
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p.to_str().unwrap().to_string()
    }

    #[test]
    fn the_first_host_is_read_or_expanded_by_scontrol() {
        let _stubs = STUBS.lock().unwrap_or_else(|e| e.into_inner());
        let t = Duration::from_secs(10);
        // No range in the first element: no scontrol needed (none exists at this path).
        assert_eq!(
            first_host("node-a", "/nonexistent/scontrol", t).unwrap(),
            "node-a"
        );
        assert_eq!(
            first_host("a1,b[1-2]", "/nonexistent/scontrol", t).unwrap(),
            "a1"
        );
        let d = tempfile::tempdir().unwrap();
        // scontrol's answer: one host per line; the arguments are checked by the stub.
        let ok = stub(
            d.path(),
            r#"[ "$1 $2 $3" = "show hostnames gpu[07-08],x" ] || exit 9; printf 'gpu07\ngpu08\nx\n'"#,
        );
        assert_eq!(first_host("gpu[07-08],x", &ok, t).unwrap(), "gpu07");
        let e = first_host("gpu[07-08]", "/nonexistent/scontrol", t)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not installed") && e.contains("--root HOST:PORT"),
            "{e}"
        );
        let failing = stub(
            d.path(),
            "echo 'scontrol: error: no controller' >&2; exit 1",
        );
        let e = first_host("gpu[07-08]", &failing, t)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no controller"), "{e}");
        let empty = stub(d.path(), "exit 0");
        assert!(first_host("gpu[07-08]", &empty, t)
            .unwrap_err()
            .to_string()
            .contains("named no host"));
    }

    #[test]
    fn a_hung_scontrol_is_stopped_at_the_timeout() {
        let _stubs = STUBS.lock().unwrap_or_else(|e| e.into_inner());
        let d = tempfile::tempdir().unwrap();
        let hung = stub(d.path(), "exec sleep 30");
        let t0 = Instant::now();
        let e = first_host("gpu[07-08]", &hung, Duration::from_millis(300))
            .unwrap_err()
            .to_string();
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert!(e.contains("did not answer"), "{e}");
    }

    fn srun_args(root: Option<&str>, port: Option<u16>) -> ClusterSrunArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            a: ClusterSrunArgs,
        }
        let mut argv = vec!["t".to_string()];
        if let Some(r) = root {
            argv.extend(["--root".into(), r.into()]);
        }
        if let Some(p) = port {
            argv.extend(["--port".into(), p.to_string()]);
        }
        T::parse_from(argv).a
    }

    #[test]
    fn the_root_is_given_or_the_first_node_at_the_port() {
        let step = parse(&srun_env(1, 2)).unwrap();
        let root =
            |a: &ClusterSrunArgs, s: &SlurmStep| root_address(a, s).map_err(|e| e.to_string());
        assert_eq!(
            root(&srun_args(Some("10.0.0.7:2345"), None), &step).unwrap(),
            "10.0.0.7:2345"
        );
        assert!(root(&srun_args(Some("10.0.0.7"), None), &step)
            .unwrap_err()
            .contains("not HOST:PORT"));
        // The node list's first element without a range needs no scontrol.
        let mut plain = step.clone();
        plain.nodelist = Some("gpu07,gpu08".into());
        assert_eq!(
            root(&srun_args(None, Some(2999)), &plain).unwrap(),
            "gpu07:2999"
        );
        assert_eq!(
            root(&srun_args(None, None), &plain).unwrap(),
            format!("gpu07:{}", default_port(4711, 3))
        );
        // Task 0 elsewhere than the first node: NCCL's root could not open there.
        let mut moved = plain.clone();
        moved.rank = 0;
        moved.node_name = Some("gpu08".into());
        assert!(root(&srun_args(None, None), &moved)
            .unwrap_err()
            .contains("task 0 runs on gpu08"));
        let mut unknown = plain;
        unknown.nodelist = None;
        assert!(root(&srun_args(None, None), &unknown)
            .unwrap_err()
            .contains("--root HOST:PORT"));
    }
}

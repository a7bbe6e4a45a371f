//! `ddpcheck cluster check`: one all-reduce across nodes through their daemons, then the
//! isolation of slow or dead nodes (core's `cluster::isolate`), each stage deadline-bounded.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use ddpcheck_core::cluster::{
    self, ClusterJob, ClusterNode, ClusterReport, DeadNode, NodeResult, Phase, PhaseCall,
    SubsetOutcome,
};
use ddpcheck_core::num::{floor_u64, len_u32};
use ddpcheck_core::BackendKind;
use ddpcheck_engine as engine;
use ddpcheck_engine::cluster::{self as engine_cluster, ClusterRun};
use ddpcheck_proto::v1 as pb;
use tokio::task::JoinSet;
use tonic::transport::Channel;

use super::{ClusterRunArgs, GRACE};
use crate::global_args::GlobalArgs;
use ddpcheck_engine::RunError;

type Client = pb::ddpcheck_client::DdpcheckClient<Channel>;

#[derive(Args, Debug)]
pub struct ClusterCheckArgs {
    /// The nodes' daemons, comma-separated: socket paths or https://HOST:PORT (mutual TLS with --tls-ca, --tls-cert, --tls-key). Rank 0 is the first.
    #[arg(long, value_delimiter = ',', conflicts_with = "nodefile")]
    pub nodes: Vec<String>,
    /// A file with one daemon address per line (blank lines and `#` comments ignored).
    #[arg(long, value_name = "FILE")]
    pub nodefile: Option<PathBuf>,
    #[command(flatten)]
    pub run: ClusterRunArgs,
    /// Most isolation rounds (default: enough to bisect the node count).
    #[arg(long)]
    pub max_rounds: Option<u32>,
}

fn node_list(a: &ClusterCheckArgs) -> Result<Vec<String>, RunError> {
    let nodes: Vec<String> = match &a.nodefile {
        Some(f) => ddpcheck_engine::read_file(f, ddpcheck_core::bounded::FileKind::NodeList)
            .map_err(|e| RunError::Usage(format!("--nodefile {}: {e}", f.display())))?
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim().to_string())
            .filter(|l| !l.is_empty())
            .collect(),
        None => a
            .nodes
            .iter()
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect(),
    };
    if nodes.len() < 2 {
        return Err(RunError::Usage(
            "cluster check needs at least two nodes (--nodes a,b or --nodefile FILE)".into(),
        ));
    }
    if nodes.len() > 4096 {
        return Err(RunError::Usage("at most 4096 nodes".into()));
    }
    for (i, n) in nodes.iter().enumerate() {
        if nodes[..i].contains(n) {
            return Err(RunError::Usage(format!("node {n} is named twice")));
        }
    }
    Ok(nodes)
}

/// Facts one node told us about itself.
#[derive(Default, Clone)]
struct Seen {
    hostname: Option<String>,
    label: Option<String>,
}

struct Runner {
    rt: tokio::runtime::Runtime,
    clients: Vec<Client>,
    stage: Duration,
    /// Every run's job; each run names itself and its nodes.
    template: ClusterJob,
    base_id: String,
    round: u32,
    seen: BTreeMap<usize, Seen>,
    /// Every measured run's per-node results, keyed by the sorted node set.
    results: BTreeMap<Vec<usize>, Vec<(usize, NodeResult)>>,
}

/// One phase on one node, bounded: the daemon's deadline plus grace, whatever the daemon does.
async fn call(
    mut c: Client,
    req: pb::ClusterCollectiveRequest,
    stage: Duration,
) -> Result<pb::ClusterCollectiveReply, CallFailure> {
    let phase = req.phase.clone();
    let timed_out = |message| CallFailure {
        timed_out: true,
        message,
    };
    match tokio::time::timeout(stage + GRACE, c.cluster_collective(req)).await {
        Err(_) => Err(timed_out(format!(
            "did not answer the {phase} within {:.1} s",
            stage.as_secs_f64()
        ))),
        Ok(Err(s)) if s.code() == tonic::Code::DeadlineExceeded => Err(timed_out(format!(
            "did not finish the {phase} within {:.1} s ({})",
            stage.as_secs_f64(),
            s.message()
        ))),
        Ok(Err(s)) => Err(CallFailure {
            timed_out: false,
            message: format!("{phase} failed: {}", ddpcheck_client::status_reason(&s)),
        }),
        Ok(Ok(r)) => Ok(r.into_inner()),
    }
}

/// Why one node's phase failed.
struct CallFailure {
    /// It ran into the deadline (possibly waiting for a peer that failed).
    timed_out: bool,
    message: String,
}

/// Runs one phase on every node of `set` at once; the answers in rank order, or who failed.
async fn phase_all(
    clients: Vec<(usize, Client)>,
    reqs: Vec<pb::ClusterCollectiveRequest>,
    stage: Duration,
) -> Result<Vec<(usize, pb::ClusterCollectiveReply)>, Vec<(usize, String)>> {
    let mut js = JoinSet::new();
    for (rank, ((idx, c), req)) in clients.into_iter().zip(reqs).enumerate() {
        js.spawn(async move { (rank, idx, call(c, req, stage).await) });
    }
    let mut ok = Vec::new();
    let mut failed = Vec::new();
    while let Some(j) = js.join_next().await {
        match j {
            Ok((rank, idx, Ok(r))) => ok.push((rank, idx, r)),
            Ok((_, idx, Err(e))) => failed.push((idx, e)),
            Err(e) => failed.push((
                usize::MAX,
                CallFailure {
                    timed_out: false,
                    message: format!("task failed: {e}"),
                },
            )),
        }
    }
    if !failed.is_empty() {
        // In one communicator, a node that refused makes its peers wait until their deadline:
        // those timeouts are the refusal's consequence, so only the refusing nodes are blamed.
        if failed.iter().any(|(_, f)| !f.timed_out) {
            failed.retain(|(_, f)| !f.timed_out);
        }
        let mut failed: Vec<(usize, String)> =
            failed.into_iter().map(|(i, f)| (i, f.message)).collect();
        failed.sort();
        return Err(failed);
    }
    ok.sort_by_key(|(rank, _, _)| *rank);
    Ok(ok.into_iter().map(|(_, idx, r)| (idx, r)).collect())
}

type SetResult = Result<Vec<(usize, NodeResult)>, Vec<(usize, String)>>;

async fn run_set(
    set: Vec<usize>,
    clients: Vec<(usize, Client)>,
    template: ClusterJob,
    run_id: String,
    stage: Duration,
    seen: &mut Vec<(usize, Seen)>,
) -> SetResult {
    let n = len_u32(set.len());
    let req = |rank: u32, phase: Phase, rendezvous: Vec<Vec<u8>>| {
        let job = ClusterJob {
            run_id: run_id.clone(),
            rank,
            world_nodes: n,
            ..template.clone()
        };
        pb::ClusterCollectiveRequest::from(&PhaseCall {
            phase,
            job,
            rendezvous,
        })
    };
    let prep = phase_all(
        clients.clone(),
        (0..n).map(|r| req(r, Phase::Prepare, Vec::new())).collect(),
        stage,
    )
    .await?;
    for (idx, r) in &prep {
        seen.push((
            *idx,
            Seen {
                hostname: Some(r.hostname.clone()),
                label: Some(r.backend_label.clone()),
            },
        ));
    }
    let rdv: Vec<Vec<u8>> = prep.into_iter().map(|(_, r)| r.rendezvous).collect();
    let joined = phase_all(
        clients,
        (0..n).map(|r| req(r, Phase::Join, rdv.clone())).collect(),
        stage,
    )
    .await?;
    let mut out = Vec::new();
    let mut bad = Vec::new();
    for (idx, r) in joined {
        match serde_json::from_str::<NodeResult>(&r.node_result_json) {
            Ok(nr) => out.push((idx, nr)),
            Err(e) => bad.push((idx, format!("unreadable join answer: {e}"))),
        }
    }
    if bad.is_empty() {
        Ok(out)
    } else {
        Err(bad)
    }
}

impl Runner {
    fn run_round(&mut self, sets: &[Vec<usize>]) -> Vec<SubsetOutcome> {
        self.round += 1;
        let mut futs = Vec::new();
        for (k, set) in sets.iter().enumerate() {
            let clients: Vec<(usize, Client)> = set
                .iter()
                .filter_map(|&i| self.clients.get(i).map(|c| (i, c.clone())))
                .collect();
            let run_id = format!("{}-r{}-s{k}", self.base_id, self.round);
            futs.push((
                set.clone(),
                clients,
                self.template.clone(),
                run_id,
                self.stage,
            ));
        }
        let stage = self.stage;
        let results: Vec<(SetResult, Vec<(usize, Seen)>)> = self.rt.block_on(async move {
            let mut js = JoinSet::new();
            for (k, (set, clients, template, run_id, _)) in futs.into_iter().enumerate() {
                js.spawn(async move {
                    let mut seen = Vec::new();
                    let r = run_set(set, clients, template, run_id, stage, &mut seen).await;
                    (k, r, seen)
                });
            }
            let mut out = Vec::new();
            while let Some(j) = js.join_next().await {
                if let Ok(x) = j {
                    out.push(x);
                }
            }
            out.sort_by_key(|(k, _, _)| *k);
            out.into_iter().map(|(_, r, s)| (r, s)).collect()
        });
        let mut outcomes = Vec::new();
        for (set, (r, seen)) in sets.iter().zip(results) {
            for (idx, s) in seen {
                self.seen.insert(idx, s);
            }
            // A node whose all-reduce came back wrong fails the run, whatever its speed.
            let r = r.and_then(|res| {
                let wrong: Vec<(usize, String)> = res
                    .iter()
                    .filter_map(|(i, nr)| {
                        let w = nr.wrong_elements();
                        (w > 0)
                            .then(|| (*i, format!("{w} wrong elements in its all-reduce results")))
                    })
                    .collect();
                if wrong.is_empty() {
                    Ok(res)
                } else {
                    Err(wrong)
                }
            });
            outcomes.push(match r {
                Ok(res) => {
                    let busbw = res
                        .iter()
                        .filter_map(|(_, nr)| nr.busbw_large())
                        .fold(f64::INFINITY, f64::min);
                    let mut key = set.clone();
                    key.sort();
                    self.results.insert(key, res);
                    if busbw.is_finite() {
                        SubsetOutcome::Measured { busbw_gbps: busbw }
                    } else {
                        SubsetOutcome::Failed {
                            nodes: Vec::new(),
                            reason: "no node reported a bandwidth".into(),
                        }
                    }
                }
                Err(failed) => SubsetOutcome::Failed {
                    reason: failed
                        .iter()
                        .map(|(_, e)| e.as_str())
                        .collect::<Vec<_>>()
                        .join("; "),
                    nodes: failed.into_iter().map(|(i, _)| i).collect(),
                },
            });
        }
        // A missing answer (a panicked task) fails its set without blaming a node.
        while outcomes.len() < sets.len() {
            outcomes.push(SubsetOutcome::Failed {
                nodes: Vec::new(),
                reason: "run lost".into(),
            });
        }
        outcomes
    }
}

pub(super) fn run_check(cli: &GlobalArgs, a: &ClusterCheckArgs) -> Result<i32, RunError> {
    let started = Instant::now();
    let addrs = node_list(a)?;
    let (network, stage) = a.run.settings()?;
    // Refuse a bad job here, once, rather than as a failure of every node.
    let job = a.run.job("check".into(), 0, len_u32(addrs.len()), stage);
    job.validate()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| RunError::Daemon(format!("cannot start the async runtime: {e}")))?;

    // Stage 1: connect to every daemon at once, each bounded.
    let conns = connect_all(&rt, &addrs, stage)?;
    let (live_addrs, clients, unreachable) = split_reachable(&addrs, conns);

    // Stages 2 and 3 per run (rendezvous, all-reduce), in isolation rounds.
    let expected = network.expected(a.run.nics_per_node);
    let max_rounds = a
        .max_rounds
        .unwrap_or_else(|| cluster::default_max_rounds(live_addrs.len()));
    let mut runner = Runner {
        rt,
        clients,
        stage,
        template: job,
        base_id: format!(
            "cluster-{}-{}",
            std::process::id(),
            floor_u64(engine::unix_now())
        ),
        round: 0,
        seen: BTreeMap::new(),
        results: BTreeMap::new(),
    };
    let iso = if live_addrs.len() >= 2 {
        cluster::isolate(
            &live_addrs,
            cluster::slow_threshold(&expected),
            max_rounds,
            &mut |sets| runner.run_round(sets),
        )
    } else {
        cluster::Isolation::default()
    };
    let judged = engine_cluster::judge(&expected, &iso, &unreachable, None);

    // The cluster run's per-node view.
    let cluster_results: Vec<(usize, NodeResult)> = iso
        .cluster_run
        .as_ref()
        .map(|(names, _)| {
            let mut key: Vec<usize> = names
                .iter()
                .filter_map(|n| live_addrs.iter().position(|a| a == n))
                .collect();
            key.sort();
            runner.results.get(&key).cloned().unwrap_or_default()
        })
        .unwrap_or_default();
    let nodes = node_views(
        &addrs,
        &live_addrs,
        &runner.seen,
        &cluster_results,
        &unreachable,
        &iso,
    );
    let labels: Vec<&str> = nodes
        .iter()
        .filter_map(|n| n.backend_label.as_deref())
        .collect();
    let sim = !labels.is_empty() && labels.iter().all(|l| l.starts_with("sim:"));
    let (backend, backend_label) = if sim {
        (BackendKind::Sim, "sim:cluster".to_string())
    } else {
        (BackendKind::Real, "real".to_string())
    };
    let first = cluster_results.first().map(|(_, r)| r);
    let report = engine_cluster::assemble(ClusterRun {
        started,
        network,
        nics_per_node: a.run.nics_per_node,
        gpus_per_node: a.run.gpus_per_node,
        expected,
        judged,
        nodes,
        backend,
        backend_label,
        nccl_version: first.and_then(|r| r.nccl_version.clone()),
        transport: first.and_then(|r| r.transport.clone()),
        nccl_env: Default::default(),
        isolation: iso,
    });
    if cli.json {
        crate::print_json(&report)?;
    } else {
        out!("{}", render(&report));
    }
    Ok(report.exit_code)
}

fn render(r: &ClusterReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let sim = if r.header.backend == BackendKind::Sim {
        "  [SIMULATED]"
    } else {
        ""
    };
    let _ = writeln!(
        s,
        "ddpcheck cluster check: {} nodes × {} GPUs, network {} × {} NIC(s){sim}",
        r.nodes.len(),
        r.gpus_per_node,
        r.network,
        r.nics_per_node
    );
    let _ = writeln!(
        s,
        "expected all-reduce busbw: {:.1} GB/s ({}; source: {})",
        r.expected.busbw_gbps, r.expected.class, r.expected.source
    );
    let _ = writeln!(
        s,
        "{:<4} {:<40} {:<22} {:<12} {:>10}  TRANSPORT",
        "RANK", "NODE", "HOSTNAME", "STATE", "BUSBW GB/s"
    );
    for (i, n) in r.nodes.iter().enumerate() {
        let _ = writeln!(
            s,
            "{:<4} {:<40} {:<22} {:<12} {:>10}  {}{}",
            i,
            n.node,
            n.hostname.as_deref().unwrap_or("-"),
            n.state,
            n.busbw_gbps
                .map(|b| format!("{b:.1}"))
                .unwrap_or_else(|| "-".into()),
            n.transport.as_deref().unwrap_or("-"),
            n.error
                .as_deref()
                .map(|e| format!("  ({e})"))
                .unwrap_or_default()
        );
    }
    match r.cluster_busbw_gbps {
        Some(b) => {
            let cap = r
                .capacity
                .as_ref()
                .and_then(|c| c.fraction.map(|f| (f, c)))
                .map(|(f, c)| {
                    format!(
                        ", {:.0}% of capacity ({}, {:.2} GB/s)",
                        f * 100.0,
                        c.path,
                        c.gbps
                    )
                })
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "cluster busbw: {b:.1} GB/s, {:.0}% of expected ({:.1} GB/s){cap}",
                b / r.expected.busbw_gbps.max(f64::MIN_POSITIVE) * 100.0,
                r.expected.busbw_gbps
            );
        }
        None => {
            let _ = writeln!(s, "cluster busbw: not measured");
        }
    }
    let _ = writeln!(
        s,
        "isolation: {} round(s), {} run(s)",
        r.isolation.rounds,
        r.isolation.runs.len()
    );
    for run in &r.isolation.runs {
        let res = match (run.busbw_gbps, &run.error) {
            (Some(b), _) => format!("{b:.1} GB/s"),
            (None, Some(e)) => format!("failed: {e}"),
            (None, None) => "-".into(),
        };
        let _ = writeln!(s, "  round {}: {} → {res}", run.round, run.nodes.join(", "));
    }
    for f in &r.findings {
        let _ = writeln!(s, "{} {}: {}", f.severity.label(), f.code, f.message);
        for e in &f.evidence {
            let _ = writeln!(
                s,
                "    {}: {}{}",
                e.what,
                e.measured,
                e.expected
                    .as_deref()
                    .map(|x| format!(", expected {x}"))
                    .unwrap_or_default()
            );
        }
    }
    let _ = writeln!(s, "{}", r.reason);
    s
}

/// Why one daemon of a cluster run gave no client: that node is taken for unreachable.
#[derive(Debug, thiserror::Error)]
enum Unreachable {
    #[error("{0}")]
    Connect(RunError),
    /// Seconds of the stage's bound.
    #[error("connect did not finish within {0:.1} s")]
    Timeout(f64),
    /// A bad address: the whole run fails with its usage error, so this is never said.
    #[error("bad address")]
    BadAddress,
}

/// Connects to every daemon at once, each within the stage deadline; a usage error (a bad
/// address) fails the whole run, any other failure marks that node unreachable.
fn connect_all(
    rt: &tokio::runtime::Runtime,
    addrs: &[String],
    stage: Duration,
) -> Result<Vec<Result<Client, Unreachable>>, RunError> {
    rt.block_on(async {
        let mut js = JoinSet::new();
        for (i, addr) in addrs.iter().enumerate() {
            let addr = addr.clone();
            js.spawn(async move {
                let r = tokio::time::timeout(stage, crate::daemon_runner::connect(&addr)).await;
                (i, r)
            });
        }
        let mut out: Vec<(usize, Result<Client, Unreachable>)> = Vec::new();
        let mut usage = None;
        while let Some(j) = js.join_next().await {
            match j {
                Ok((i, Ok(Ok(c)))) => out.push((i, Ok(c))),
                Ok((i, Ok(Err(RunError::Usage(m))))) => {
                    usage.get_or_insert(m);
                    out.push((i, Err(Unreachable::BadAddress)));
                }
                Ok((i, Ok(Err(e)))) => out.push((i, Err(Unreachable::Connect(e)))),
                Ok((i, Err(_))) => out.push((i, Err(Unreachable::Timeout(stage.as_secs_f64())))),
                Err(e) => return Err(RunError::Daemon(format!("connect task: {e}"))),
            }
        }
        if let Some(m) = usage {
            return Err(RunError::Usage(m));
        }
        out.sort_by_key(|(i, _)| *i);
        Ok(out.into_iter().map(|(_, r)| r).collect())
    })
}

/// The daemons that answered (their addresses and clients, in order) and those that did not.
fn split_reachable(
    addrs: &[String],
    conns: Vec<Result<Client, Unreachable>>,
) -> (Vec<String>, Vec<Client>, Vec<DeadNode>) {
    let mut live_addrs = Vec::new();
    let mut clients = Vec::new();
    let mut unreachable = Vec::new();
    for (addr, c) in addrs.iter().zip(conns) {
        match c {
            Ok(c) => {
                live_addrs.push(addr.clone());
                clients.push(c);
            }
            Err(reason) => unreachable.push(DeadNode {
                node: addr.clone(),
                reason: reason.to_string(),
            }),
        }
    }
    (live_addrs, clients, unreachable)
}

/// Each node's line of the report: its state (unreachable, unresponsive, slow, unresolved or ok)
/// and what the cluster run measured on it.
fn node_views(
    addrs: &[String],
    live_addrs: &[String],
    seen: &BTreeMap<usize, Seen>,
    cluster_results: &[(usize, NodeResult)],
    unreachable: &[DeadNode],
    iso: &cluster::Isolation,
) -> Vec<ClusterNode> {
    addrs
        .iter()
        .map(|addr| {
            let idx = live_addrs.iter().position(|a| a == addr);
            let seen = idx.and_then(|i| seen.get(&i).cloned()).unwrap_or_default();
            let res = idx.and_then(|i| cluster_results.iter().find(|(j, _)| *j == i));
            let (state, error) = if let Some(u) = unreachable.iter().find(|u| &u.node == addr) {
                ("unreachable", Some(u.reason.clone()))
            } else if let Some(d) = iso.dead.iter().find(|d| &d.node == addr) {
                ("unresponsive", Some(d.reason.clone()))
            } else if iso.slow.iter().any(|s| &s.node == addr) {
                ("slow", None)
            } else if iso.unresolved.iter().any(|s| s.contains(addr)) {
                ("unresolved", None)
            } else {
                ("ok", None)
            };
            ClusterNode {
                node: addr.clone(),
                hostname: seen
                    .hostname
                    .or_else(|| res.map(|(_, r)| r.hostname.clone())),
                backend_label: seen.label,
                state: state.into(),
                busbw_gbps: res.and_then(|(_, r)| r.busbw_large()),
                transport: res.and_then(|(_, r)| r.transport.clone()),
                error,
            }
        })
        .collect()
}

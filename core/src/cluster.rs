//! Cluster-wide all-reduce through the daemons: the job each node is given, the expected
//! inter-node bandwidth (by `crate::capacity::Network`), the isolation of slow or dead nodes (bisection, then pairs
//! with a cleared partner) as a pure function over a "run these subsets" callback, and the
//! judgement into findings and a verdict. No I/O: the CLI runs the subsets, core decides.

use std::collections::BTreeSet;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::capacity::Network;
use crate::collective::Sweep;
use crate::expect::{ratio_band, Expectation, WARN_RATIO};
use crate::explain::PathCapacity;
use crate::finding::{Evidence, Finding, Severity, Subject};
use crate::probe_error::ProbeError;
use crate::report::Header;
use crate::unknown_name::UnknownName;
use crate::verdict::Verdict;

/// What a backend without cluster support answers (the trait's default; the daemon maps it to
/// gRPC UNIMPLEMENTED).
pub const REAL_JOIN_UNAVAILABLE: &str = "this backend does not take part in cluster runs";

/// The two phases of a cluster run: every node prepares (rank 0 creates the NCCL unique id;
/// a simulated node states its NIC), then every node joins with what all of them prepared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Prepare,
    Join,
}

impl Phase {
    /// The phase's name on the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Prepare => "prepare",
            Phase::Join => "join",
        }
    }
}

impl FromStr for Phase {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Phase, UnknownName> {
        match s {
            "prepare" => Ok(Phase::Prepare),
            "join" => Ok(Phase::Join),
            p => Err(UnknownName::new("phase", p, "prepare or join")),
        }
    }
}

/// Most rendezvous entries a join may carry, and most bytes in each.
pub const MAX_RENDEZVOUS: usize = 4096;

/// One phase of a cluster run asked of one node's daemon (the API's `ClusterCollectiveRequest`).
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseCall {
    pub phase: Phase,
    pub job: ClusterJob,
    /// join: every node's prepare answer, in rank order; prepare: none.
    pub rendezvous: Vec<Vec<u8>>,
}

/// One node's part in a cluster run, as its daemon receives it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterJob {
    pub run_id: String,
    pub rank: u32,
    /// Nodes in the run.
    pub world_nodes: u32,
    pub gpus_per_node: u32,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub iters: u32,
    pub deadline: Duration,
}

impl ClusterJob {
    pub fn validate(&self) -> Result<(), ProbeError> {
        let bad = |m: String| Err(ProbeError::Invalid(m));
        if self.run_id.is_empty() || self.run_id.len() > 128 {
            return bad("run id must be 1..=128 characters".into());
        }
        if self.world_nodes < 2 || self.world_nodes > 4096 {
            return bad(format!("{} nodes outside 2..=4096", self.world_nodes));
        }
        if self.rank >= self.world_nodes {
            return bad(format!(
                "rank {} outside 0..{}",
                self.rank, self.world_nodes
            ));
        }
        if self.gpus_per_node == 0 || self.gpus_per_node > 64 {
            return bad(format!(
                "{} GPUs per node outside 1..=64",
                self.gpus_per_node
            ));
        }
        if self.min_bytes == 0 || self.min_bytes > self.max_bytes || self.max_bytes > 16 << 30 {
            return bad(format!(
                "size range {}..{} bytes outside 1..=16 GiB or empty",
                self.min_bytes, self.max_bytes
            ));
        }
        if self.iters == 0 || self.iters > 10_000 {
            return bad(format!("iterations {} outside 1..=10000", self.iters));
        }
        if self.deadline.is_zero() || self.deadline > Duration::from_secs(3600) {
            return bad(format!("deadline {:?} outside (0, 1 h]", self.deadline));
        }
        Ok(())
    }

    /// The join's inputs: this job bounded, and one rendezvous entry per node.
    pub fn validate_join(&self, rendezvous: &[Vec<u8>]) -> Result<(), ProbeError> {
        self.validate()?;
        if rendezvous.len() != self.world_nodes as usize {
            return Err(ProbeError::Invalid(format!(
                "rendezvous has {} entries for {} nodes",
                rendezvous.len(),
                self.world_nodes
            )));
        }
        Ok(())
    }
}

/// The simulated rendezvous: each node's prepare answers its entry; the join gets all of them,
/// in rank order. (Real NCCL: rank 0's unique id bytes instead.)
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimPeer {
    pub backend_label: String,
    pub nic_busbw_gbps: f64,
}

/// One node's answer to the join: its view of the collective.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeResult {
    pub rank: u32,
    pub hostname: String,
    pub backend_label: String,
    pub sweep: Sweep,
    /// The transport NCCL chose between nodes (e.g. `NET/IB`), as NCCL reported it.
    pub transport: Option<String>,
    pub nccl_version: Option<String>,
}

impl NodeResult {
    /// Peak busbw at the large messages (≥ 64 MiB, or the largest size measured).
    pub fn busbw_large(&self) -> Option<f64> {
        let max = self.sweep.samples.iter().map(|s| s.bytes).max()?;
        self.sweep
            .peak_busbw(crate::collective::LARGE_MESSAGE.min(max))
            .map(|(_, b)| b)
    }

    /// Wrong elements counted over the sweep's data checks (0 when none ran).
    pub fn wrong_elements(&self) -> u64 {
        self.sweep
            .samples
            .iter()
            .filter_map(|s| s.out_of_place.wrong)
            .sum()
    }
}

/// What running one subset of nodes together gave.
#[derive(Clone, Debug, PartialEq)]
pub enum SubsetOutcome {
    /// The collective ran; its cluster busbw (the slowest rank's view).
    Measured { busbw_gbps: f64 },
    /// These nodes did not answer in time or refused; the others of the subset are untested.
    Failed { nodes: Vec<usize>, reason: String },
}

/// One run of the isolation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IsolationRun {
    pub round: u32,
    pub nodes: Vec<String>,
    pub busbw_gbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A node found slow: the run with a cleared partner that proves it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlowNode {
    pub node: String,
    pub partner: String,
    pub busbw_gbps: f64,
}

/// A node that did not answer within the deadline, or refused the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeadNode {
    pub node: String,
    pub reason: String,
}

/// What the isolation found, in node names.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Isolation {
    pub rounds: u32,
    pub runs: Vec<IsolationRun>,
    /// The first run that measured a whole set (all nodes that answered): the cluster figure.
    pub cluster_run: Option<(Vec<String>, f64)>,
    pub slow: Vec<SlowNode>,
    pub dead: Vec<DeadNode>,
    /// Sets known slow that rounds or partners ran out before they were split.
    pub unresolved: Vec<Vec<String>>,
}

enum Task {
    /// Run the set as a whole.
    Test(Vec<usize>),
    /// Run this node with a cleared partner.
    Resolve(usize),
}

/// Finds the slow and dead nodes among `nodes` in rounds. Round 1 runs them all; a set below
/// `threshold_gbps` is split in halves (sets of ≤ 3 into single nodes), and a single node runs
/// with a partner from a set that ran fast. The sets of one round are disjoint, so a round can
/// run them at the same time. A set that fails loses the nodes that failed and runs again.
/// Stops after `max_rounds`; what is left is reported unresolved, never waited on.
pub fn isolate(
    nodes: &[String],
    threshold_gbps: f64,
    max_rounds: u32,
    run_round: &mut dyn FnMut(&[Vec<usize>]) -> Vec<SubsetOutcome>,
) -> Isolation {
    let name = |i: usize| nodes.get(i).cloned().unwrap_or_else(|| format!("#{i}"));
    let names = |v: &[usize]| v.iter().map(|&i| name(i)).collect::<Vec<_>>();
    let mut iso = Isolation::default();
    let mut cleared: BTreeSet<usize> = BTreeSet::new();
    let mut dead: BTreeSet<usize> = BTreeSet::new();
    let mut tasks: Vec<Task> = match nodes.len() {
        0 => Vec::new(),
        1 => vec![Task::Resolve(0)],
        n => vec![Task::Test((0..n).collect())],
    };
    let mut whole_pending = nodes.len() >= 2;
    while !tasks.is_empty() && iso.rounds < max_rounds {
        // Plan: tests as they are; each resolve takes a cleared partner not yet used this round.
        let mut partners: Vec<usize> = cleared.iter().copied().collect();
        let mut planned: Vec<(Vec<usize>, Option<usize>)> = Vec::new();
        let mut postponed = Vec::new();
        for t in tasks.drain(..) {
            match t {
                Task::Test(set) => planned.push((set, None)),
                Task::Resolve(n) => match partners.pop() {
                    Some(p) => planned.push((vec![n, p], Some(n))),
                    None => postponed.push(Task::Resolve(n)),
                },
            }
        }
        if planned.is_empty() {
            // Nothing can run: no set left to test and no cleared partner for the rest.
            tasks = postponed;
            break;
        }
        tasks = postponed;
        iso.rounds += 1;
        let sets: Vec<Vec<usize>> = planned.iter().map(|(s, _)| s.clone()).collect();
        let outcomes = run_round(&sets);
        for (k, (set, resolving)) in planned.into_iter().enumerate() {
            let outcome = outcomes.get(k).cloned().unwrap_or(SubsetOutcome::Failed {
                nodes: Vec::new(),
                reason: "no outcome for this run".into(),
            });
            match outcome {
                SubsetOutcome::Measured { busbw_gbps } => {
                    iso.runs.push(IsolationRun {
                        round: iso.rounds,
                        nodes: names(&set),
                        busbw_gbps: Some(busbw_gbps),
                        error: None,
                    });
                    if resolving.is_none() && whole_pending {
                        whole_pending = false;
                        iso.cluster_run = Some((names(&set), busbw_gbps));
                    }
                    if busbw_gbps >= threshold_gbps {
                        cleared.extend(set.iter().copied());
                    } else if let Some(n) = resolving {
                        iso.slow.push(SlowNode {
                            node: name(n),
                            partner: name(set[1]),
                            busbw_gbps,
                        });
                    } else if set.len() <= 3 {
                        tasks.extend(set.into_iter().map(Task::Resolve));
                    } else {
                        let (a, b) = set.split_at(set.len() / 2);
                        tasks.push(Task::Test(a.to_vec()));
                        tasks.push(Task::Test(b.to_vec()));
                    }
                }
                SubsetOutcome::Failed {
                    nodes: failed,
                    reason,
                } => {
                    iso.runs.push(IsolationRun {
                        round: iso.rounds,
                        nodes: names(&set),
                        busbw_gbps: None,
                        error: Some(reason.clone()),
                    });
                    for &f in failed.iter().filter(|f| set.contains(f)) {
                        if dead.insert(f) {
                            cleared.remove(&f);
                            iso.dead.push(DeadNode {
                                node: name(f),
                                reason: reason.clone(),
                            });
                        }
                    }
                    let rest: Vec<usize> = set.into_iter().filter(|n| !dead.contains(n)).collect();
                    if failed.is_empty() {
                        // Nobody to blame: keep the set as unresolved rather than loop on it.
                        iso.unresolved.push(names(&rest));
                        continue;
                    }
                    match (resolving, rest.len()) {
                        (Some(n), _) if !dead.contains(&n) => tasks.push(Task::Resolve(n)),
                        (Some(_), _) | (None, 0) => {}
                        (None, 1) => tasks.push(Task::Resolve(rest[0])),
                        (None, _) => tasks.push(Task::Test(rest)),
                    }
                }
            }
        }
    }
    for t in tasks {
        match t {
            Task::Test(set) => iso.unresolved.push(names(&set)),
            Task::Resolve(n) => iso.unresolved.push(vec![name(n)]),
        }
    }
    iso
}

/// A node of the cluster report: its address and what the run saw of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterNode {
    /// The address the CLI reached it at (socket path or https://HOST:PORT).
    pub node: String,
    pub hostname: Option<String>,
    pub backend_label: Option<String>,
    /// `ok`, `slow`, `unresponsive`, `unreachable` or `unresolved`.
    pub state: String,
    /// Its large-message busbw in the cluster run.
    pub busbw_gbps: Option<f64>,
    pub transport: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterReport {
    #[serde(flatten)]
    pub header: Header,
    pub verdict: Verdict,
    pub exit_code: i32,
    pub reason: String,
    pub wall_seconds: f64,
    pub network: Network,
    pub nics_per_node: u32,
    pub gpus_per_node: u32,
    pub expected: Expectation,
    pub cluster_busbw_gbps: Option<f64>,
    /// The network's line rate per node (NICs × line rate, one direction) and the fraction of
    /// it measured: the physical reference beside `expected`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<PathCapacity>,
    pub transport: Option<String>,
    pub nodes: Vec<ClusterNode>,
    pub isolation: Isolation,
    pub findings: Vec<Finding>,
}

/// Judges a cluster run: the cluster figure against the network's expectation, each slow node
/// by its pair run, each dead or unreachable node, and what stayed unresolved.
/// `unreachable` are nodes the CLI could not connect to (never part of a run).
pub fn judge(
    expected: &Expectation,
    iso: &Isolation,
    unreachable: &[DeadNode],
) -> (Vec<Finding>, Verdict) {
    let mut f = Vec::new();
    let exp_line = format!(
        "≥ {:.1} GB/s ({})",
        expected.busbw_gbps * WARN_RATIO,
        expected.class
    );
    match &iso.cluster_run {
        Some((nodes, busbw)) => {
            let ratio = busbw / expected.busbw_gbps.max(f64::MIN_POSITIVE);
            let ev = Evidence::new(
                format!("all-reduce busbw over {} nodes", nodes.len()),
                format!(
                    "{busbw:.1} GB/s ({:.0}% of {:.1})",
                    ratio * 100.0,
                    expected.busbw_gbps
                ),
            )
            .expected(exp_line.clone())
            .source(expected.source.clone());
            let (code, sev, msg) = match ratio_band(ratio) {
                Some(s) => (
                    "cluster_busbw_low",
                    s,
                    format!(
                        "cluster all-reduce busbw {busbw:.1} GB/s is {:.0}% of the expected {:.1} GB/s",
                        ratio * 100.0,
                        expected.busbw_gbps
                    ),
                ),
                None => (
                    "cluster_busbw_ok",
                    Severity::Info,
                    format!("cluster all-reduce busbw {busbw:.1} GB/s meets the expectation"),
                ),
            };
            f.push(Finding::new(code, sev, Subject::Node, msg).with(ev));
        }
        None => f.push(Finding::new(
            "cluster_not_measured",
            Severity::Critical,
            Subject::Node,
            "no cluster-wide run completed: fewer than two nodes answered",
        )),
    }
    for s in &iso.slow {
        let ratio = s.busbw_gbps / expected.busbw_gbps.max(f64::MIN_POSITIVE);
        let sev = ratio_band(ratio).unwrap_or(Severity::Warning);
        f.push(
            Finding::new(
                "cluster_node_slow",
                sev,
                Subject::Node,
                format!(
                    "node {} is slow: {:.1} GB/s all-reduce busbw with healthy partner {} ({:.0}% of expected)",
                    s.node,
                    s.busbw_gbps,
                    s.partner,
                    ratio * 100.0
                ),
            )
            .with(
                Evidence::new(
                    format!("pair run {} + {}", s.node, s.partner),
                    format!("{:.1} GB/s", s.busbw_gbps),
                )
                .expected(exp_line.clone())
                .source(expected.source.clone()),
            ),
        );
    }
    for d in iso.dead.iter().chain(unreachable) {
        f.push(
            Finding::new(
                "cluster_node_unresponsive",
                Severity::Critical,
                Subject::Node,
                format!("node {} did not take part: {}", d.node, d.reason),
            )
            .with(Evidence::new(format!("node {}", d.node), d.reason.clone())),
        );
    }
    for set in &iso.unresolved {
        f.push(Finding::new(
            "cluster_isolation_unresolved",
            Severity::Warning,
            Subject::Node,
            format!(
                "slow set not narrowed down (rounds or healthy partners ran out): {}",
                set.join(", ")
            ),
        ));
    }
    let verdict = Verdict::from_findings(&f);
    (f, verdict)
}

/// Rounds enough for bisection to single nodes plus their pair runs and a few retries.
pub fn default_max_rounds(nodes: usize) -> u32 {
    let log2 = usize::BITS - nodes.max(1).leading_zeros();
    2 * log2 + 4
}

/// The busbw below which a set counts as slow: the warning band of the expectation.
pub fn slow_threshold(expected: &Expectation) -> f64 {
    expected.busbw_gbps * WARN_RATIO
}

/// A backend that takes part in cluster runs (the capability beside
/// `crate::backend::NodeBackend`).
pub trait ClusterMember {
    /// Cluster run, phase 1: this node's rendezvous contribution (real NCCL: rank 0's unique
    /// id). Default: [`REAL_JOIN_UNAVAILABLE`].
    fn cluster_prepare(&self, job: &ClusterJob) -> Result<Vec<u8>, ProbeError> {
        let _ = job;
        Err(ProbeError::Unavailable(REAL_JOIN_UNAVAILABLE.into()))
    }

    /// Cluster run, phase 2: join one communicator with the other nodes (`rendezvous`: what the
    /// nodes prepared, in rank order) and run the all-reduce sweep. Default:
    /// [`REAL_JOIN_UNAVAILABLE`].
    fn cluster_join(
        &self,
        job: &ClusterJob,
        rendezvous: &[Vec<u8>],
    ) -> Result<NodeResult, ProbeError> {
        let _ = (job, rendezvous);
        Err(ProbeError::Unavailable(REAL_JOIN_UNAVAILABLE.into()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::capacity::NETWORKS;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("n{i}")).collect()
    }

    /// A fake cluster: the ring bottleneck of each set, dead nodes fail the set.
    fn fake(
        nic: Vec<f64>,
        dead: Vec<usize>,
        log: &mut Vec<Vec<Vec<usize>>>,
    ) -> impl FnMut(&[Vec<usize>]) -> Vec<SubsetOutcome> + '_ {
        move |sets: &[Vec<usize>]| {
            // Sets of one round must be disjoint: each node runs one thing at a time.
            let mut seen = BTreeSet::new();
            for s in sets {
                for n in s {
                    assert!(seen.insert(*n), "node {n} twice in one round: {sets:?}");
                }
                assert!(s.len() >= 2, "a set of one node uses no network: {s:?}");
            }
            log.push(sets.to_vec());
            sets.iter()
                .map(|s| {
                    let d: Vec<usize> = s.iter().copied().filter(|n| dead.contains(n)).collect();
                    if d.is_empty() {
                        SubsetOutcome::Measured {
                            busbw_gbps: s.iter().map(|&n| nic[n]).fold(f64::INFINITY, f64::min),
                        }
                    } else {
                        SubsetOutcome::Failed {
                            nodes: d,
                            reason: "did not answer within 2.0 s".into(),
                        }
                    }
                })
                .collect()
        }
    }

    fn exp() -> Expectation {
        Network::Ndr400.expected(1)
    }

    #[test]
    fn capacity_is_the_nics_line_rate_beside_the_expectation() {
        let c = Network::Ndr400.capacity(8, Some(320.0), Network::Ndr400.expected(8).busbw_gbps);
        assert_eq!(c.path, "8 × 400 Gb/s (ndr400)");
        assert!((c.gbps - 400.0).abs() < 1e-9);
        assert!((c.fraction.unwrap() - 0.8).abs() < 1e-9);
        // The expectation is ~92% of the line rate per rail.
        assert!((c.reference_fraction.unwrap() - 368.0 / 400.0).abs() < 1e-9);
        let c = Network::Tcp10.capacity(1, None, 1.1);
        assert!((c.gbps - 1.25).abs() < 1e-9 && c.fraction.is_none());
    }

    fn run(nic: Vec<f64>, dead: Vec<usize>) -> (Isolation, Vec<Vec<Vec<usize>>>) {
        let n = nic.len();
        let mut log = Vec::new();
        let iso = {
            let mut f = fake(nic, dead, &mut log);
            isolate(
                &names(n),
                slow_threshold(&exp()),
                default_max_rounds(n),
                &mut f,
            )
        };
        (iso, log)
    }

    fn slow_names(iso: &Isolation) -> Vec<String> {
        let mut v: Vec<String> = iso.slow.iter().map(|s| s.node.clone()).collect();
        v.sort();
        v
    }

    #[test]
    fn healthy_cluster_is_one_run_and_ok() {
        let (iso, log) = run(vec![45.0; 8], vec![]);
        assert_eq!(log.len(), 1);
        assert_eq!(iso.rounds, 1);
        assert!(iso.slow.is_empty() && iso.dead.is_empty() && iso.unresolved.is_empty());
        let (f, v) = judge(&exp(), &iso, &[]);
        assert_eq!(v, Verdict::Ok, "{f:?}");
    }

    #[test]
    fn one_slow_among_eight_in_every_position() {
        for bad in 0..8 {
            let mut nic = vec![45.0; 8];
            nic[bad] = 11.5;
            let (iso, _) = run(nic, vec![]);
            assert_eq!(slow_names(&iso), vec![format!("n{bad}")]);
            assert!(iso.rounds <= 5, "{} rounds", iso.rounds);
            assert!(iso.unresolved.is_empty());
            let (f, v) = judge(&exp(), &iso, &[]);
            assert_eq!(v, Verdict::Critical);
            assert!(f
                .iter()
                .any(|x| x.code == "cluster_node_slow" && x.message.contains(&format!("n{bad}"))));
        }
    }

    #[test]
    fn two_slow_among_eight() {
        for (a, b) in [(0, 1), (2, 6), (3, 4), (5, 7)] {
            let mut nic = vec![45.0; 8];
            nic[a] = 11.5;
            nic[b] = 30.0;
            let (iso, _) = run(nic, vec![]);
            assert_eq!(slow_names(&iso), vec![format!("n{a}"), format!("n{b}")]);
            let (_, v) = judge(&exp(), &iso, &[]);
            assert_eq!(v, Verdict::Critical);
        }
    }

    #[test]
    fn a_mildly_slow_node_is_a_warning() {
        let mut nic = vec![45.0; 4];
        nic[2] = 30.0; // 65% of 46: below 75%, above 40%
        let (iso, _) = run(nic, vec![]);
        assert_eq!(slow_names(&iso), vec!["n2".to_string()]);
        let (_, v) = judge(&exp(), &iso, &[]);
        assert_eq!(v, Verdict::Warning);
    }

    #[test]
    fn a_dead_node_is_reported_and_the_rest_measured() {
        let (iso, _) = run(vec![45.0; 6], vec![4]);
        assert_eq!(iso.dead.len(), 1);
        assert_eq!(iso.dead[0].node, "n4");
        let (nodes, busbw) = iso.cluster_run.clone().unwrap();
        assert_eq!(nodes.len(), 5);
        assert!(!nodes.contains(&"n4".to_string()));
        assert_eq!(busbw, 45.0);
        let (f, v) = judge(&exp(), &iso, &[]);
        assert_eq!(v, Verdict::Critical);
        assert!(f.iter().any(|x| x.code == "cluster_node_unresponsive"));
    }

    #[test]
    fn dead_and_slow_together() {
        let mut nic = vec![45.0; 8];
        nic[1] = 11.5;
        let (iso, _) = run(nic, vec![6]);
        assert_eq!(slow_names(&iso), vec!["n1".to_string()]);
        assert_eq!(
            iso.dead.iter().map(|d| d.node.as_str()).collect::<Vec<_>>(),
            ["n6"]
        );
    }

    #[test]
    fn all_slow_is_unresolved_not_a_loop() {
        let (iso, _) = run(vec![10.0; 4], vec![]);
        assert!(iso.slow.is_empty());
        assert!(!iso.unresolved.is_empty());
        assert!(iso.rounds <= default_max_rounds(4));
        let (_, v) = judge(&exp(), &iso, &[]);
        assert_eq!(v, Verdict::Critical); // the cluster figure itself is critical
    }

    #[test]
    fn rounds_are_bounded() {
        let mut nic = vec![45.0; 64];
        nic[37] = 5.0;
        let mut log = Vec::new();
        let mut f = fake(nic, vec![], &mut log);
        let iso = isolate(&names(64), slow_threshold(&exp()), 3, &mut f);
        assert_eq!(iso.rounds, 3);
        assert!(iso.slow.is_empty());
        assert!(!iso.unresolved.is_empty());
    }

    #[test]
    fn networks_parse_and_scale() {
        for (n, s) in NETWORKS {
            assert_eq!(s.parse::<Network>(), Ok(n));
            assert!(n.per_nic().busbw_gbps > 0.0);
        }
        assert!("token-ring".parse::<Network>().is_err());
        let e = Network::Hdr200.expected(4);
        assert!((e.busbw_gbps - 4.0 * Network::Hdr200.per_nic().busbw_gbps).abs() < 1e-9);
    }

    #[test]
    fn job_validation() {
        let ok = ClusterJob {
            run_id: "r".into(),
            rank: 1,
            world_nodes: 2,
            gpus_per_node: 8,
            min_bytes: 1 << 20,
            max_bytes: 1 << 28,
            iters: 20,
            deadline: Duration::from_secs(5),
        };
        assert!(ok.validate().is_ok());
        let bad = ClusterJob {
            rank: 2,
            ..ok.clone()
        };
        assert!(matches!(bad.validate(), Err(ProbeError::Invalid(_))));
        let bad = ClusterJob {
            world_nodes: 1,
            rank: 0,
            ..ok
        };
        assert!(bad.validate().is_err());
    }
}

//! A saved report (`check`, `bench collectives`, `explain`, `bench ddp`, each `--json`) as the
//! facts a comparison reads. The PCIe link of each GPU is read as explain's capacity reads it.

use std::collections::BTreeMap;

use super::{Figure, GpuFacts, PairFacts, RunFacts, RunKind};
use crate::collective::{judged_peak, Sweep};
use crate::explain::path_capacity::gpu_pcie;
use crate::explain::{ExplainInput, PlatformFacts};
use crate::node_gpus::GpuInfo;
use crate::report::{BenchCollectivesReport, DdpReport, ExplainReport, Header, PreflightReport};
use crate::topology::TopologyMatrix;

fn source(kind: &str, h: &Header) -> String {
    let host = if h.provenance.hostname.is_empty() {
        "an unnamed node"
    } else {
        h.provenance.hostname.as_str()
    };
    let mut s = format!("{kind} report of {host}");
    if !h.provenance.time.is_empty() {
        s.push_str(&format!(", {}", h.provenance.time));
    }
    if h.backend_label.starts_with("sim") {
        s.push_str(&format!(" (SIMULATED: {})", h.backend_label));
    }
    s
}

/// The facts every report's header gives.
fn base(kind: RunKind, name: &str, h: &Header) -> RunFacts {
    let p = &h.provenance;
    RunFacts {
        kind,
        source: source(name, h),
        figure: None,
        gpu_count: p.gpus.len(),
        gpus: Vec::new(),
        pairs: Vec::new(),
        node_transport: None,
        nccl_version: p.nccl_version.clone(),
        driver_version: p.driver_version.clone(),
        cuda_version: p.cuda_version.clone(),
        nccl_env: p.nccl_env.clone(),
        algo_proto: None,
    }
}

fn busbw(s: &Sweep) -> Option<Figure> {
    let (bytes, gbps) = judged_peak(s)?;
    Some(Figure::Busbw {
        gbps,
        what: format!(
            "all-reduce busbw of {} GPUs at {}",
            s.ranks,
            crate::units::fmt_bytes(crate::num::ToF64::to_f64(bytes))
        ),
    })
}

/// Each GPU's facts, its PCIe link read as explain's capacity reads it.
fn gpu_facts(input: &ExplainInput<'_>) -> Vec<GpuFacts> {
    input
        .gpus
        .iter()
        .map(|g| GpuFacts {
            index: g.index,
            name: g.name.clone(),
            pcie: gpu_pcie(input, g).map(|(gen, width, _)| (gen, width)),
            nvlinks_active: g.health.nvlinks_active,
            sm_clock_mhz: g.health.sm_clock_mhz,
            throttle_reasons: g.health.throttle_reasons.clone(),
        })
        .collect()
}

/// Each pair of the topology with its link and P2P status; transports still unread.
fn pair_facts(t: &TopologyMatrix) -> Vec<PairFacts> {
    t.pairs()
        .iter()
        .map(|p| PairFacts {
            a: p.a.index,
            b: p.b.index,
            link: Some(p.link),
            p2p: p.p2p,
            transport: None,
            transport_raw: None,
        })
        .collect()
}

fn input<'a>(
    gpus: &'a [GpuInfo],
    topology: Option<&'a TopologyMatrix>,
    platform: &'a PlatformFacts,
    env: &'a BTreeMap<String, String>,
) -> ExplainInput<'a> {
    ExplainInput {
        gpus,
        topology,
        platform,
        nccl_env: env,
        measurements: &[],
        node_measurement: None,
        history_busbw: &[],
    }
}

pub fn from_preflight(r: &PreflightReport) -> RunFacts {
    let mut f = base(RunKind::Preflight, "check", &r.header);
    let platform = PlatformFacts::unknown("report");
    let env = BTreeMap::new();
    f.gpus = gpu_facts(&input(&r.gpus, r.topology.as_ref(), &platform, &env));
    f.pairs = r.topology.as_ref().map(pair_facts).unwrap_or_default();
    f.gpu_count = r.gpus.len();
    f.figure = r.all_reduce.as_ref().and_then(busbw);
    f
}

pub fn from_collectives(r: &BenchCollectivesReport) -> RunFacts {
    let mut f = base(RunKind::BenchCollectives, "bench collectives", &r.header);
    if let Some(run) = r.runs.first() {
        f.nccl_version = run.run.nccl_version.clone().or(f.nccl_version);
        f.cuda_version = f.cuda_version.or(run.run.cuda_runtime_version.clone());
        f.nccl_env.extend(run.run.env.iter().cloned());
        f.node_transport = run.run.transport.clone();
    }
    f.figure = r.all_reduce().and_then(busbw);
    if let Some(s) = r.all_reduce() {
        f.gpu_count = usize::try_from(s.ranks).unwrap_or(f.gpu_count);
    }
    f
}

pub fn from_explain(r: &ExplainReport) -> RunFacts {
    let mut f = base(RunKind::Explain, "explain", &r.header);
    let env = r.header.provenance.nccl_env.clone();
    f.gpus = gpu_facts(&input(&r.gpus, r.topology.as_ref(), &r.platform, &env));
    f.gpu_count = r.gpus.len();
    f.pairs = r.topology.as_ref().map(pair_facts).unwrap_or_default();
    for chain in &r.explanation.pairs {
        if let Some(p) = f
            .pairs
            .iter_mut()
            .find(|p| p.a == chain.a.index && p.b == chain.b.index)
        {
            if chain.transport_measured {
                p.transport = Some(chain.transport);
                p.transport_raw = chain.transport_raw.clone();
            }
        }
    }
    let node = r.explanation.node.as_ref();
    f.node_transport = node.and_then(|n| n.transport_raw.clone());
    let gbps = match node {
        Some(n) => n.busbw_gbps,
        None if r.explanation.pairs.len() == 1 => r.explanation.pairs[0].busbw_gbps,
        None => None,
    };
    f.figure = gbps.map(|gbps| Figure::Busbw {
        gbps,
        what: format!("all-reduce busbw of {} GPUs", f.gpu_count),
    });
    f
}

pub fn from_ddp(r: &DdpReport) -> RunFacts {
    let mut f = base(RunKind::BenchDdp, "bench ddp", &r.header);
    let widest = r
        .results
        .iter()
        .max_by_key(|x| x.world_size)
        .filter(|x| x.step_time_median_s > 0.0);
    if let Some(x) = widest {
        f.gpu_count = usize::try_from(x.world_size).unwrap_or(f.gpu_count);
        f.figure = Some(Figure::StepTime {
            seconds: x.step_time_median_s,
            what: format!(
                "the {} {} step at {} GPUs",
                x.model, x.variant, x.world_size
            ),
        });
    }
    f
}

/// What a reader of a user's artifacts assembles (nvidia-smi, nccl-tests, NCCL's log): the same
/// core types a live `explain` judges, with their provenance.
pub struct Parts<'a> {
    pub source: String,
    pub gpus: &'a [GpuInfo],
    pub topology: Option<&'a TopologyMatrix>,
    pub platform: &'a PlatformFacts,
    pub nccl_env: &'a BTreeMap<String, String>,
    /// Pairs measured alone, with the transports NCCL's log shows for them.
    pub measurements: &'a [crate::explain::PairMeasurement],
    /// The all-reduce of every GPU (nccl-tests), with the log's transports.
    pub node: Option<&'a crate::explain::NodeMeasurement>,
    pub nccl_version: Option<String>,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    /// Algorithms and protocols the log shows (`Ring/Simple`).
    pub algo_proto: Option<String>,
    /// Every transport NCCL's log shows: the run's, where no nccl-tests run of the node carries
    /// them (a training job's log alone, which names no GPU).
    pub log_transport: Option<String>,
}

/// The facts of a run read from artifacts: the figure is the node's all-reduce, else the one
/// pair's; each pair's transport is its log's.
pub fn from_parts(p: &Parts<'_>) -> RunFacts {
    let mut pairs = p.topology.map(pair_facts).unwrap_or_default();
    for m in p.measurements {
        let Some(raw) = &m.transport else { continue };
        if let Some(pf) = pairs.iter_mut().find(|x| x.a == m.a && x.b == m.b) {
            pf.transport = crate::explain::Transport::worst_of(raw);
            pf.transport_raw = Some(raw.clone());
        }
    }
    let gpu_count = p.gpus.len();
    let gbps = match p.node {
        Some(n) => n.busbw_gbps,
        None if p.measurements.len() == 1 => p.measurements[0].busbw_gbps,
        None => None,
    };
    RunFacts {
        kind: RunKind::Artifacts,
        source: p.source.clone(),
        figure: gbps.map(|gbps| Figure::Busbw {
            gbps,
            what: format!("all-reduce busbw of {gpu_count} GPUs"),
        }),
        gpu_count,
        gpus: gpu_facts(&input(p.gpus, p.topology, p.platform, p.nccl_env)),
        pairs,
        node_transport: p
            .node
            .and_then(|n| n.transport.clone())
            .or_else(|| p.log_transport.clone()),
        nccl_version: p.nccl_version.clone(),
        driver_version: p.driver_version.clone(),
        cuda_version: p.cuda_version.clone(),
        nccl_env: p.nccl_env.clone(),
        algo_proto: p.algo_proto.clone(),
    }
}

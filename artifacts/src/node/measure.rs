//! Measurements from nccl-tests output: two GPUs of one node are a pair's figure, all of them
//! the node's; the transport from the NCCL log of the same file (or the only log given). Only
//! an all-reduce is judged, as live; other collectives and runs across nodes are said, not
//! guessed into a figure.

use ddpcheck_core::collective::{judged_peak, Collective, Sweep};
use ddpcheck_core::explain::{NodeMeasurement, PairMeasurement};
use ddpcheck_core::node_gpus::GpuInfo;

use super::ByFormat;
use crate::nccl_log::NcclLog;
use crate::nccl_tests::{Device, NcclTests};
use crate::ArtifactError;

#[derive(Default)]
pub(super) struct Measured {
    pub pairs: Vec<PairMeasurement>,
    pub node: Option<NodeMeasurement>,
    pub sweep: Option<Sweep>,
}

/// The log whose "set by environment" lines are the NCCL variables in force: the first with
/// any, so two runs' logs that disagree are refused by `measurements`.
pub(super) fn log_for_env<'a>(b: &ByFormat<'a>) -> Option<&'a NcclLog> {
    b.logs
        .iter()
        .copied()
        .find(|l| !l.env.is_empty())
        .or(b.logs.first().copied())
}

/// The bus number of a GPU's bus id (`00000000:8D:00.0` → 0x8d).
fn bus_number(id: &str) -> Option<u32> {
    let n = ddpcheck_core::explain::platform::normalise_bdf(id);
    u32::from_str_radix(n.split(':').nth(1)?, 16).ok()
}

/// The bus number a device line prints: `[0x8d]`, or `[0000:8d:00]` in newer nccl-tests.
fn device_bus(word: &str) -> Option<u32> {
    match word.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => u32::from_str_radix(word.split(':').nth(1)?, 16).ok(),
    }
}

/// The GPU a device line names: by bus number where it names one GPU alone (GPUs of a VM all
/// sit on bus 0), else by CUDA ordinal where every GPU is the same model (CUDA's order is then
/// the bus order nvidia-smi uses).
fn gpu_of<'a>(d: &Device, gpus: &'a [GpuInfo]) -> Option<&'a GpuInfo> {
    if let Some(b) = device_bus(&d.bus) {
        let on: Vec<&GpuInfo> = gpus
            .iter()
            .filter(|g| bus_number(&g.pci_bus_id) == Some(b))
            .collect();
        if let [one] = on.as_slice() {
            return Some(one);
        }
    }
    let same = gpus.windows(2).all(|w| w[0].name == w[1].name);
    same.then(|| gpus.iter().find(|g| g.index == d.device))
        .flatten()
}

pub(super) fn measurements(
    b: &ByFormat<'_>,
    gpus: &[GpuInfo],
    undecided: &mut Vec<String>,
) -> Result<Measured, ArtifactError> {
    let mut out = Measured::default();
    let only_log = match b.logs.as_slice() {
        [one] => Some(*one),
        _ => None,
    };
    for (t, own) in &b.tests {
        // A log of its own file is the run's; another file's only where it names the same NCCL.
        let other = only_log.filter(|l| same_nccl(t, l, undecided));
        one_run(t, own.or(other), gpus, &mut out, undecided)?;
    }
    // Logs no nccl-tests run took (a training job's): each pair's transport, without a figure.
    let taken = |l: &NcclLog| {
        b.tests
            .iter()
            .any(|(_, own)| own.is_some_and(|o| std::ptr::eq(o, l)))
            || (!b.tests.is_empty() && only_log.is_some_and(|o| std::ptr::eq(o, l)))
    };
    for l in b.logs.iter().filter(|l| !taken(l)) {
        log_pairs(l, gpus, &mut out, undecided);
    }
    Ok(out)
}

/// Whether a log given apart can be the run's: the NCCL version they name is the same (or one
/// names none); otherwise said, and its transports are not taken for the run.
fn same_nccl(t: &NcclTests, l: &NcclLog, undecided: &mut Vec<String>) -> bool {
    match (&t.nccl_version, &l.nccl_version) {
        (Some(a), Some(b)) if a != b => {
            undecided.push(format!(
                "the NCCL log (NCCL {b}) is not of the nccl-tests run (NCCL {a}): its transports are not taken for the run"
            ));
            false
        }
        _ => true,
    }
}

/// The GPU of a rank, from its communicator's `busId` (`17000` → bus 0x17), where one GPU is
/// on that bus.
fn gpu_of_rank<'a>(l: &NcclLog, rank: u32, gpus: &'a [GpuInfo]) -> Option<&'a GpuInfo> {
    let bus = l.rank_bus.get(&rank)?;
    let n = u32::from_str_radix(bus.get(..bus.len().checked_sub(3)?)?, 16).ok()?;
    let on: Vec<&GpuInfo> = gpus
        .iter()
        .filter(|g| bus_number(&g.pci_bus_id) == Some(n))
        .collect();
    match on.as_slice() {
        [one] => Some(one),
        _ => None,
    }
}

fn log_pairs(l: &NcclLog, gpus: &[GpuInfo], out: &mut Measured, undecided: &mut Vec<String>) {
    let hosts: std::collections::BTreeSet<&String> = l.rank_host.values().collect();
    if hosts.len() > 1 {
        undecided.push(format!(
            "the NCCL log spans {} hosts: its transports between nodes are not judged here",
            hosts.len()
        ));
        return;
    }
    let ranks: Vec<u32> = l.rank_bus.keys().copied().collect();
    let mut unmatched = false;
    for (i, ra) in ranks.iter().enumerate() {
        for rb in &ranks[i + 1..] {
            let Some(transport) = l.transport_between(*ra, *rb) else {
                continue;
            };
            let (Some(a), Some(b)) = (gpu_of_rank(l, *ra, gpus), gpu_of_rank(l, *rb, gpus)) else {
                unmatched = true;
                continue;
            };
            let (a, b) = (a.index.min(b.index), a.index.max(b.index));
            if out.pairs.iter().any(|m| (m.a, m.b) == (a, b)) {
                continue;
            }
            out.pairs.push(PairMeasurement {
                a,
                b,
                transport: Some(transport),
                ..PairMeasurement::default()
            });
        }
    }
    if unmatched || (ranks.is_empty() && !l.channels.is_empty()) {
        undecided.push(
            "the NCCL log's ranks could not all be matched to GPUs (no `busId` init lines, or no bus ids from nvidia-smi -q): their transports are not judged"
                .into(),
        );
    }
}

fn one_run(
    t: &NcclTests,
    log: Option<&NcclLog>,
    gpus: &[GpuInfo],
    out: &mut Measured,
    undecided: &mut Vec<String>,
) -> Result<(), ArtifactError> {
    let hosts = t.hosts();
    if hosts.len() > 1 {
        undecided.push(format!(
            "nccl-tests ran across {} hosts ({}): the network between nodes is not judged here (ddpcheck cluster check judges it)",
            hosts.len(),
            hosts.join(", ")
        ));
        return Ok(());
    }
    match t.op {
        Some(Collective::AllReduce) => {}
        Some(op) => {
            undecided.push(format!(
                "nccl-tests ran {}: explain judges all-reduce; bandwidth not judged",
                op.name()
            ));
            return Ok(());
        }
        None => {
            undecided.push(
                "the nccl-tests output does not name its collective (no `…_perf` command or `Collective test starting` line): bandwidth not judged"
                    .into(),
            );
            return Ok(());
        }
    }
    let used: Option<Vec<&GpuInfo>> = t.devices.iter().map(|d| gpu_of(d, gpus)).collect();
    for d in &t.devices {
        if let Some(g) = gpu_of(d, gpus) {
            if !g.name.is_empty() && !d.name.is_empty() && g.name != d.name {
                return Err(ArtifactError::Inconsistent(format!(
                    "nccl-tests ran on {} (device {}), the GPU there is {} (GPU{})",
                    d.name, d.device, g.name, g.index
                )));
            }
        }
    }
    let Some(used) = used.filter(|u| !u.is_empty()) else {
        undecided.push(
            "the nccl-tests devices could not be matched to the GPUs (no bus numbers, mixed models): bandwidth not judged"
                .into(),
        );
        return Ok(());
    };
    let peak = judged_peak(&t.sweep).filter(|_| t.failure.is_none());
    let wrong = t.sweep.wrong_total().filter(|w| *w > 0);
    let rank_of = |g: &GpuInfo| {
        t.devices
            .iter()
            .position(|d| gpu_of(d, gpus).is_some_and(|x| x.index == g.index))
            .and_then(|p| u32::try_from(p).ok())
    };
    match used.as_slice() {
        [a, b] => {
            let transport = log.and_then(|l| match (rank_of(a), rank_of(b)) {
                (Some(ra), Some(rb)) => l.transport_between(ra, rb),
                _ => l.transports(),
            });
            out.pairs.push(PairMeasurement {
                a: a.index.min(b.index),
                b: a.index.max(b.index),
                busbw_gbps: peak.map(|p| p.1),
                bytes: peak.map(|p| p.0),
                transport,
                error: t.failure.clone(),
                wrong,
                timed_out: false,
            });
            if gpus.len() == 2 {
                out.sweep = Some(t.sweep.clone());
            }
        }
        all if all.len() == gpus.len() && all.len() > 2 => {
            out.node = Some(NodeMeasurement {
                busbw_gbps: peak.map(|p| p.1),
                bytes: peak.map(|p| p.0),
                transport: log.and_then(NcclLog::transports),
                error: t.failure.clone(),
            });
            out.sweep = Some(t.sweep.clone());
        }
        some => undecided.push(format!(
            "nccl-tests ran on {} of the {} GPUs: explain judges a pair or the whole node; bandwidth not judged",
            some.len(),
            gpus.len()
        )),
    }
    Ok(())
}

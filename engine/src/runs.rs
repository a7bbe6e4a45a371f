//! Runs checks and benchmarks on a backend and builds their reports. Blocking code, shared by
//! the daemon (on blocking threads) and the CLI's local mode.

use ddpcheck_core::num::len_u32;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use ddpcheck_core::backend::{CollectiveRequest, Progress};
use ddpcheck_core::ddp::{DdpRequest, RunDevice};
use ddpcheck_core::node_gpus::{
    busy_among, busy_gpus, busy_reason, select_gpus, GpuInfo, NodeInventory,
};
use ddpcheck_core::params::{or_default, CollectiveParams, PreflightParams};
use ddpcheck_core::preflight::{self, PreflightOptions};
use ddpcheck_core::report::{
    BenchCollectivesReport, DdpReport, DdpStopped, EnvRun, Header, PreflightReport, Provenance,
    ReportKind, TopoReport,
};
use ddpcheck_core::{FullBackend, ProbeError};
use ddpcheck_gpu::{RealBackend, RealConfig};
use ddpcheck_sim::SimBackend;

pub const TOOL_VERSION: &str = env!("CARGO_PKG_VERSION");

/// A `--sim` spec that names no known profile or fault: a usage error (exit 64).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The real backend, or a simulated node when `sim` is given (`PROFILE[+FAULT...]`).
pub fn make_backend(
    sim: Option<&str>,
    real: RealConfig,
) -> Result<Arc<dyn FullBackend>, UsageError> {
    match sim {
        Some(spec) => SimBackend::parse(spec)
            .map(|b| Arc::new(b) as Arc<dyn FullBackend>)
            .map_err(|e| UsageError(e.to_string())),
        None => Ok(Arc::new(RealBackend::new(real))),
    }
}

pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

pub fn local_hostname() -> String {
    hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown".into())
}

/// NCCL_* variables of this process: part of every report's provenance.
pub fn nccl_env_from_process() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| k.starts_with("NCCL_"))
        .collect()
}

/// The job's GPUs as the scheduler gave them: `SLURM_JOB_GPUS`, else `CUDA_VISIBLE_DEVICES`.
pub fn job_gpus_from_env() -> String {
    for var in ["SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"] {
        if let Ok(v) = std::env::var(var) {
            if !v.trim().is_empty() {
                return v;
            }
        }
    }
    String::new()
}

/// Provenance of numbers measured on `gpus` of the node `inv` describes, now, under this
/// process's NCCL_* environment.
pub(crate) fn provenance(inv: &NodeInventory, gpus: &[GpuInfo]) -> Provenance {
    Provenance {
        hostname: inv.hostname.clone(),
        time: now_rfc3339(),
        tool_version: TOOL_VERSION.to_string(),
        driver_version: inv.driver_version.clone(),
        cuda_version: inv.cuda_driver_version.clone(),
        nccl_env: nccl_env_from_process(),
        gpus: gpus.iter().map(GpuInfo::gpu_ref).collect(),
        ..Provenance::default()
    }
}

pub fn run_preflight(
    backend: &dyn FullBackend,
    params: &PreflightParams,
    history_busbw: Vec<f64>,
    progress: &mut dyn FnMut(Progress),
) -> Result<PreflightReport, ProbeError> {
    let d = PreflightOptions::default();
    let opts = PreflightOptions {
        gpu_filter: params.gpus.clone(),
        min_bytes: or_default(params.min_bytes, d.min_bytes),
        max_bytes: or_default(params.max_bytes, d.max_bytes),
        iters: or_default(params.iters, d.iters),
        warmup_iters: or_default(params.warmup_iters, d.warmup_iters),
        deadline: params.deadline.unwrap_or(d.deadline),
        history_busbw,
        nccl_env: nccl_env_from_process(),
        hostname_fallback: local_hostname(),
        now_rfc3339: now_rfc3339(),
        tool_version: TOOL_VERSION.to_string(),
        inject_hang: params.inject_hang,
        host_copies: !params.skip_host_copies,
        ..d
    };
    preflight::run(backend, &opts, progress)
}

pub fn run_topo(backend: &dyn FullBackend, gpu_filter: &str) -> Result<TopoReport, ProbeError> {
    let inv = backend.inventory()?;
    let gpus = select_gpus(&inv.gpus, gpu_filter)?;
    let topology = backend.topology(&gpus)?;
    topology
        .validate()
        .map_err(|e| ProbeError::Worker(format!("malformed topology: {e}")))?;
    let prov = provenance(&inv, &gpus);
    Ok(TopoReport {
        header: Header::new(ReportKind::Topo, backend.kind(), backend.label(), prov),
        gpus,
        topology,
    })
}

/// Parses `--env-ab`: candidates separated by ',', variables of one candidate joined by '+'
/// (`NCCL_P2P_LEVEL=SYS,NCCL_P2P_DISABLE=1+NCCL_SHM_DISABLE=1`).
pub fn parse_env_ab(spec: &str) -> Result<Vec<Vec<(String, String)>>, UsageError> {
    let mut out = Vec::new();
    for cand in spec.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        let mut vars = Vec::new();
        for kv in cand.split('+') {
            let (k, v) = kv.split_once('=').ok_or_else(|| {
                UsageError(format!("--env-ab candidate {kv:?} is not NAME=VALUE"))
            })?;
            let k = k.trim();
            if !(k.starts_with("NCCL_") || k.starts_with("CUDA_")) {
                return Err(UsageError(format!(
                    "--env-ab variable {k:?} is not an NCCL_* or CUDA_* variable"
                )));
            }
            vars.push((k.to_string(), v.trim().to_string()));
        }
        out.push(vars);
    }
    Ok(out)
}

pub fn env_label(vars: &[(String, String)]) -> String {
    if vars.is_empty() {
        return "current".into();
    }
    vars.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("+")
}

/// BUSY where another process computes on a GPU of `busy` (`busy_gpus`' lines): its kernels
/// would be in the timings.
fn refuse_busy(busy: Vec<String>) -> Result<(), ProbeError> {
    if busy.is_empty() {
        return Ok(());
    }
    Err(ProbeError::Busy(busy_reason(&busy)))
}

pub fn run_bench_collectives(
    backend: &dyn FullBackend,
    params: &CollectiveParams,
    progress: &mut dyn FnMut(Progress),
) -> Result<BenchCollectivesReport, ProbeError> {
    let inv = backend.inventory()?;
    let gpus = select_gpus(&inv.gpus, &params.gpus)?;
    // One GPU sweeps too, as nccl-tests' `-g 1` does: its out-of-place all-gather is a copy on
    // the GPU, the copies FSDP2 makes at world size one (`fsdp_own`).
    if gpus.is_empty() {
        return Err(ProbeError::Invalid(
            "collectives need a GPU; none selected".into(),
        ));
    }
    refuse_busy(busy_gpus(&gpus))?;
    let mut envs = vec![Vec::new()];
    envs.extend(params.env_ab.iter().cloned());
    let mut runs = Vec::new();
    let mut prov = provenance(&inv, &gpus);
    let total = len_u32(envs.len());
    for (i, env) in envs.into_iter().enumerate() {
        let label = env_label(&env);
        progress(Progress {
            stage: "collectives".into(),
            done: len_u32(i),
            total,
            message: format!("sweep under {label}"),
        });
        let req = CollectiveRequest {
            ops: params.ops.clone(),
            gpus: gpus.iter().map(GpuInfo::gpu_ref).collect(),
            min_bytes: params.min_bytes,
            max_bytes: params.max_bytes,
            step_factor: params.step_factor,
            warmup_iters: params.warmup_iters,
            iters: params.iters,
            in_place: params.in_place,
            check: params.check,
            env: env.clone(),
            deadline: params.deadline,
            inject_hang: false,
            group: None,
            record_transport: false,
        };
        req.validate()?;
        let run = backend.collectives(&req, progress)?;
        if prov.nccl_version.is_none() {
            prov.nccl_version = run.nccl_version.clone();
        }
        runs.push(EnvRun {
            label,
            overrides: env,
            run,
        });
    }
    Ok(BenchCollectivesReport {
        header: Header::new(
            ReportKind::BenchCollectives,
            backend.kind(),
            backend.label(),
            prov,
        ),
        runs,
    })
}

pub fn run_bench_ddp(
    backend: &dyn FullBackend,
    req: &DdpRequest,
    progress: &mut dyn FnMut(Progress),
) -> Result<DdpReport, ProbeError> {
    let inv = match req.device {
        RunDevice::Cuda => backend.inventory()?,
        // CPU ranks touch no GPU: a node without (working) GPUs still runs them.
        RunDevice::Cpu => backend.inventory().unwrap_or_else(|_| NodeInventory {
            hostname: local_hostname(),
            driver_version: None,
            cuda_driver_version: None,
            gpus: Vec::new(),
        }),
    };
    req.validate(inv.gpus.len())?;
    // The runner's ranks take the first GPUs CUDA shows this process: the job's
    // ($SLURM_JOB_GPUS, $CUDA_VISIBLE_DEVICES, as `check` reads them) where set, else the
    // node's. CUDA's order need not be NVML's, so a busy GPU anywhere among them counts; GPUs
    // outside the job (another job's, on a shared node) do not.
    refuse_busy(busy_among(&inv.gpus, &job_gpus_from_env()))?;
    let mut prov = provenance(&inv, &inv.gpus);
    for (k, v) in &req.env {
        prov.nccl_env.insert(k.clone(), v.clone());
    }
    // A hooked variant's speedup is taken against one GPU without the hook: run that too.
    let req = req.clone().with_one_gpu_references();
    // A deadline that struck after some runs finished keeps them, and says where it struck.
    let outcome = backend.ddp_outcome(&req, progress)?;
    Ok(DdpReport {
        header: Header::new(ReportKind::BenchDdp, backend.kind(), backend.label(), prov),
        results: outcome.results,
        reference: req.reference,
        stopped: outcome.stopped.as_ref().and_then(DdpStopped::from_error),
    })
}

//! `bench collectives --device cpu`: a sweep between CPU ranks over torch's gloo, as a
//! collectives report labelled [`CPU_RANKS_LABEL`] (figures of CPUs, never of GPUs). It runs
//! here only: it touches no GPU, takes no node lock and is not offered by the daemon.

use ddpcheck_core::backend::{BackendKind, Progress};
use ddpcheck_core::params::CollectiveParams;
use ddpcheck_core::report::{
    BenchCollectivesReport, EnvRun, Header, Provenance, ReportKind, CPU_RANKS_LABEL,
};
use ddpcheck_core::ProbeError;
use ddpcheck_gpu::ddp::cpu_sweep::run_cpu_sweep;
use ddpcheck_gpu::RealConfig;

use crate::runs::{local_hostname, now_rfc3339, TOOL_VERSION};

/// Sweeps `params.ops` between `ranks` CPU processes with the configured Python's torch.
pub fn run_cpu_collectives(
    params: &CollectiveParams,
    ranks: u32,
    progress: &mut dyn FnMut(Progress),
) -> Result<BenchCollectivesReport, ProbeError> {
    let swept = run_cpu_sweep(&RealConfig::default(), params, ranks, progress)?;
    for w in &swept.warnings {
        progress(Progress {
            stage: "collectives".into(),
            done: 1,
            total: 1,
            message: format!("warning: {w}"),
        });
    }
    let provenance = Provenance {
        hostname: local_hostname(),
        time: now_rfc3339(),
        tool_version: TOOL_VERSION.to_string(),
        torch_version: swept.torch_env.map(|e| e.torch),
        ..Provenance::default()
    };
    Ok(BenchCollectivesReport {
        header: Header::new(
            ReportKind::BenchCollectives,
            BackendKind::Real,
            CPU_RANKS_LABEL.into(),
            provenance,
        ),
        runs: vec![EnvRun {
            label: "current".into(),
            overrides: Vec::new(),
            run: swept.run,
        }],
    })
}

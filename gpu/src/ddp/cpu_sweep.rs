//! `bench collectives --device cpu`: torch's all-reduce, all-gather and reduce-scatter timed
//! between CPU ranks over gloo, by the benchmark package's sweep mode (`sweep.py`), read back as
//! core's sweeps with nccl-tests' arithmetic. The calls are the ones FSDP2 and DDP make
//! (`all_gather_into_tensor`, `reduce_scatter_tensor`, `all_reduce`), so the curves are the ones
//! their step models read where there is no GPU. The launch is supervised as a DDP launch is:
//! one process, which starts the other ranks itself, stopped whole at the deadline.

use std::process::Command;

use ddpcheck_core::backend::{CollectiveRun, Progress};
use ddpcheck_core::collective::{size_ladder, Collective, Sample, Sweep, Timing};
use ddpcheck_core::ddp::RunDevice;
use ddpcheck_core::params::CollectiveParams;
use ddpcheck_core::ProbeError;

use super::launch::{cpu_python, launcher};
use super::outcome::{judge, on_line, Collected, Ended, SweepEvent};
use super::probe::{check_probe, probe_torch};
use super::{private_script, supervise_options, TorchEnv, PROBE_DEADLINE};
use crate::{supervise, RealConfig};

/// The ops torch's gloo runs as FSDP2 and DDP call them.
pub const CPU_OPS: [Collective; 3] = [
    Collective::AllReduce,
    Collective::AllGather,
    Collective::ReduceScatter,
];
/// CPU ranks of one sweep (the benchmark package's own bound on CPU ranks).
pub const MAX_CPU_RANKS: u32 = 8;
/// The largest size of one sweep (the package's bound).
const MAX_BYTES: u64 = 1 << 32;

/// What a sweep between CPU ranks measured, and how it ran.
#[derive(Clone, Debug)]
pub struct CpuSweepRun {
    pub run: CollectiveRun,
    /// The launch's `env` line: torch's and Python's versions.
    pub torch_env: Option<TorchEnv>,
    /// The command as run (the package's path is temporary).
    pub command: String,
    pub warnings: Vec<String>,
}

/// Refuses what a CPU sweep cannot run, before any process starts.
pub fn validate(params: &CollectiveParams, ranks: u32) -> Result<Vec<u64>, ProbeError> {
    if !(2..=MAX_CPU_RANKS).contains(&ranks) {
        return Err(ProbeError::Invalid(format!(
            "--ranks {ranks}: a collective needs 2..={MAX_CPU_RANKS} CPU ranks"
        )));
    }
    if let Some(op) = params.ops.iter().find(|o| !CPU_OPS.contains(o)) {
        return Err(ProbeError::Invalid(format!(
            "{}: CPU ranks time all_reduce, all_gather and reduce_scatter (the calls DDP and FSDP2 make over gloo)",
            op.name()
        )));
    }
    if !params.env_ab.is_empty() {
        return Err(ProbeError::Invalid(
            "--env-ab compares NCCL settings; CPU ranks run gloo".into(),
        ));
    }
    // The package's bound on one buffer; a ladder by 2 or more up to it has at most 31 sizes.
    let sizes = size_ladder(
        params.min_bytes.max(4),
        params.max_bytes,
        params.step_factor,
    );
    if sizes.is_empty() || params.max_bytes > MAX_BYTES {
        return Err(ProbeError::Invalid(format!(
            "a CPU sweep takes sizes of 4 B up to 4 GiB; {}..{} gives {}",
            params.min_bytes,
            params.max_bytes,
            sizes.len()
        )));
    }
    Ok(sizes)
}

/// Runs the sweep between `ranks` CPU processes with the configured Python's torch.
pub fn run_cpu_sweep(
    cfg: &RealConfig,
    params: &CollectiveParams,
    ranks: u32,
    progress: &mut dyn FnMut(Progress),
) -> Result<CpuSweepRun, ProbeError> {
    let sizes = validate(params, ranks)?;
    let python = cpu_python(&launcher(cfg)?)?;
    let mut note = |message: String| {
        progress(Progress {
            stage: "collectives".into(),
            done: 0,
            total: 1,
            message,
        })
    };
    note(format!("checking torch ({python} -c 'import torch')"));
    let probe = probe_torch(&python, PROBE_DEADLINE.min(params.deadline))?;
    check_probe(&probe, &python, ranks, RunDevice::Cpu)?;
    let (dir, script) = private_script()?;
    let args = [
        script.display().to_string(),
        "--config".into(),
        sweep_config(params, ranks, &sizes),
    ];
    let mut cmd = Command::new(&python);
    cmd.args(&args).current_dir(dir.path());
    cmd.env("PYTHONUNBUFFERED", "1");
    if std::env::var_os("OMP_NUM_THREADS").is_none() {
        cmd.env("OMP_NUM_THREADS", "1");
    }
    let label = format!("collectives over {ranks} CPU ranks");
    note(format!("{label}: starting"));
    let mut got = Collected::expecting(params.ops.len());
    let ran = supervise::run_lines(cmd, None, &supervise_options(params.deadline), |line| {
        on_line(line, &mut got, &label, &mut note)
    });
    let finished = Ended::from_supervised(&python, ran)?;
    judge(&label, params.deadline.as_secs_f64(), &finished, &mut got)?;
    Ok(CpuSweepRun {
        run: collected_run(&label, params, &mut got)?,
        torch_env: got.env.take(),
        command: format!("{python} {}", args.join(" ")),
        warnings: std::mem::take(&mut got.warnings),
    })
}

/// The `--config` JSON of a sweep launch: CPU ranks, no model, the ops and sizes.
fn sweep_config(params: &CollectiveParams, ranks: u32, sizes: &[u64]) -> String {
    serde_json::json!({
        "device": "cpu",
        "world_size": ranks,
        "sweep": {
            "ops": params.ops.iter().map(|o| o.name()).collect::<Vec<_>>(),
            "sizes": sizes,
            "warmup": params.warmup_iters,
            "iters": params.iters,
            "in_place": params.in_place,
            "check": params.check,
        },
    })
    .to_string()
}

/// The sweeps a launch reported as one collective run; an op asked for that did not come back
/// is the launch's failure.
fn collected_run(
    label: &str,
    params: &CollectiveParams,
    got: &mut Collected,
) -> Result<CollectiveRun, ProbeError> {
    let missing: Vec<&str> = params
        .ops
        .iter()
        .filter(|o| !got.sweeps.iter().any(|s| s.op == **o))
        .map(|o| o.name())
        .collect();
    if !missing.is_empty() {
        return Err(ProbeError::Worker(format!(
            "{label}: no sweep of {} came back",
            missing.join(", ")
        )));
    }
    let sweeps = std::mem::take(&mut got.sweeps)
        .into_iter()
        .map(SweepEvent::into_sweep)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(CollectiveRun {
        sweeps,
        nccl_version: None,
        nccl_library: None,
        cuda_runtime_version: None,
        init_seconds: got.env.as_ref().and_then(|e| e.init_s).unwrap_or(0.0),
        env: Vec::new(),
        transport: None,
    })
}

impl SweepEvent {
    /// The op's sweep in nccl-tests' columns; a time that is not a positive number is refused.
    fn into_sweep(self) -> Result<Sweep, ProbeError> {
        let (op, ranks) = (self.op, self.ranks);
        let timing = |s: f64, wrong: Option<u64>, bytes: u64| {
            if s.is_finite() && s > 0.0 {
                Ok(Timing::from_time(op, ranks, bytes, s * 1e6, wrong))
            } else {
                Err(ProbeError::Worker(format!(
                    "the {} sweep reported {s} s for {bytes} bytes",
                    op.name()
                )))
            }
        };
        let samples = self
            .samples
            .into_iter()
            .map(|x| {
                Ok(Sample {
                    bytes: x.bytes,
                    count: x.count,
                    dtype: "float".into(),
                    out_of_place: timing(x.out_of_place_s, x.wrong_out_of_place, x.bytes)?,
                    in_place: x
                        .in_place_s
                        .map(|s| timing(s, x.wrong_in_place, x.bytes))
                        .transpose()?,
                })
            })
            .collect::<Result<Vec<_>, ProbeError>>()?;
        Ok(Sweep {
            op,
            ranks,
            redop: if op.has_redop() { "sum" } else { "none" }.into(),
            root: -1,
            samples,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddp::outcome::SweepSampleEvent;

    fn params(ops: &[Collective]) -> CollectiveParams {
        CollectiveParams {
            ops: ops.to_vec(),
            min_bytes: 4 << 10,
            max_bytes: 64 << 10,
            ..CollectiveParams::default()
        }
    }

    #[test]
    fn what_cpu_ranks_cannot_run_is_refused_before_any_launch() {
        let ok = params(&CPU_OPS);
        assert_eq!(validate(&ok, 2).unwrap(), [4096, 8192, 16384, 32768, 65536]);
        for ranks in [0, 1, MAX_CPU_RANKS + 1] {
            assert!(matches!(validate(&ok, ranks), Err(ProbeError::Invalid(_))));
        }
        let alltoall = params(&[Collective::AllToAll]);
        assert!(
            matches!(validate(&alltoall, 2), Err(ProbeError::Invalid(m)) if m.contains("alltoall"))
        );
        let env_ab = CollectiveParams {
            env_ab: vec![vec![("NCCL_P2P_DISABLE".into(), "1".into())]],
            ..ok.clone()
        };
        assert!(validate(&env_ab, 2).is_err());
        let largest = CollectiveParams {
            min_bytes: 4,
            max_bytes: MAX_BYTES,
            ..ok.clone()
        };
        assert_eq!(validate(&largest, 2).unwrap().len(), 31);
        let too_large = CollectiveParams {
            max_bytes: MAX_BYTES + 1,
            ..ok.clone()
        };
        assert!(validate(&too_large, 2).is_err());
        let empty = CollectiveParams {
            min_bytes: 8192,
            max_bytes: 4096,
            ..ok
        };
        assert!(validate(&empty, 2).is_err());
    }

    fn sample(out_of_place_s: f64) -> SweepSampleEvent {
        SweepSampleEvent {
            bytes: 1 << 20,
            count: 1 << 17,
            out_of_place_s,
            in_place_s: Some(0.002),
            wrong_out_of_place: Some(0),
            wrong_in_place: Some(0),
        }
    }

    #[test]
    fn a_sweep_line_reads_as_nccl_tests_columns_and_a_bad_time_is_refused() {
        let ev = SweepEvent {
            op: Collective::AllGather,
            ranks: 2,
            samples: vec![sample(0.001)],
        };
        let s = ev.into_sweep().unwrap();
        let t = s.samples[0].out_of_place;
        assert!((t.time_us - 1000.0).abs() < 1e-9);
        // 1 MiB in 1 ms is 1.048576 GB/s; all_gather's bus factor at 2 ranks is 1/2.
        assert!((t.algbw_gbps - 1.048_576).abs() < 1e-9);
        assert!((t.busbw_gbps - 0.524_288).abs() < 1e-9);
        assert_eq!(s.redop, "none");
        for bad in [0.0, -1.0, f64::NAN] {
            let ev = SweepEvent {
                op: Collective::AllReduce,
                ranks: 2,
                samples: vec![sample(bad)],
            };
            assert!(
                matches!(ev.into_sweep(), Err(ProbeError::Worker(_))),
                "{bad}"
            );
        }
    }
}

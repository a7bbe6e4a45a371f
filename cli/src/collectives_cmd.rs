//! `ddpcheck bench collectives`: NCCL sweeps on the node's GPUs (here or through the daemon),
//! or torch's gloo between CPU ranks here (`--device cpu`), printed with nccl-tests' columns.

use ddpcheck_core::collective::Collective;
use ddpcheck_core::ddp::{Backend, RunDevice};
use ddpcheck_engine::cpu_collectives::run_cpu_collectives;
use ddpcheck_engine::{self as engine, CollectiveParams, RunError};
use ddpcheck_gpu::ddp::cpu_sweep::CPU_OPS;

use crate::args::CollectivesArgs;
use crate::flag_values::secs;
use crate::global_args::{make_target, GlobalArgs};
use crate::{print_json, progress, render};

pub fn run(cli: &GlobalArgs, a: &CollectivesArgs) -> Result<i32, RunError> {
    check_backend(a)?;
    let params = params(a)?;
    let reporter = progress::Reporter::new();
    let r = match a.device {
        RunDevice::Cuda => {
            make_target(cli)?.bench_collectives(&params, &mut |p| reporter.update(p))
        }
        RunDevice::Cpu => {
            if cli.daemon.is_some() || cli.sim.is_some() {
                return Err(RunError::Usage(
                    "--device cpu runs torch's gloo between CPU processes here: not through --daemon, not with --sim".into(),
                ));
            }
            run_cpu_collectives(&params, a.ranks, &mut |p| reporter.update(p))
                .map_err(RunError::from)
        }
    };
    reporter.finish();
    let r = r?;
    if cli.json {
        print_json(&r)?;
    } else {
        out!("{}", render::bench_collectives(&r, cli.width()));
    }
    Ok(0)
}

/// GPUs run NCCL itself; CPU ranks run gloo. torch's gloo and nccl2 on GPUs are `bench ddp`'s.
fn check_backend(a: &CollectivesArgs) -> Result<(), RunError> {
    let backend = match &a.backend {
        Some(b) => b.parse::<Backend>().map_err(RunError::usage)?,
        None if a.device == RunDevice::Cpu => Backend::Gloo,
        None => Backend::Nccl,
    };
    let b = backend.as_str();
    match a.device {
        RunDevice::Cuda if backend.is_nccl() => Ok(()),
        RunDevice::Cpu if backend == Backend::Gloo => Ok(()),
        RunDevice::Cpu => Err(RunError::Usage(format!(
            "--backend {b} with --device cpu: CPU ranks run gloo"
        ))),
        RunDevice::Cuda => Err(RunError::Usage(format!(
            "--backend {b}: bench collectives runs NCCL itself on GPUs, not through torch; \
             torch's {b} process group is measured by bench ddp --backend {b}, and between CPU \
             ranks by bench collectives --device cpu"
        ))),
    }
}

fn ops(text: &str, device: RunDevice) -> Result<Vec<Collective>, RunError> {
    if text.trim() == "all" {
        return Ok(match device {
            RunDevice::Cpu => CPU_OPS.to_vec(),
            RunDevice::Cuda => vec![
                Collective::AllReduce,
                Collective::AllGather,
                Collective::ReduceScatter,
                Collective::AllToAll,
                Collective::Broadcast,
            ],
        });
    }
    text.split(',')
        .map(|o| {
            o.parse::<Collective>()
                .map_err(|e| RunError::Usage(e.to_string()))
        })
        .collect()
}

fn params(a: &CollectivesArgs) -> Result<CollectiveParams, RunError> {
    Ok(CollectiveParams {
        ops: ops(&a.ops, a.device)?,
        gpus: a.gpus.clone(),
        min_bytes: a.min_bytes,
        max_bytes: a.max_bytes,
        step_factor: a.step_factor,
        iters: a.iters,
        warmup_iters: a.warmup,
        in_place: !a.no_in_place,
        check: !a.no_check,
        deadline: secs(a.deadline, "--deadline")?,
        env_ab: match &a.env_ab {
            Some(s) => engine::parse_env_ab(s)?,
            None => Vec::new(),
        },
    })
}

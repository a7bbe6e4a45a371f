//! `ddpcheck explain`: its arguments, and the run through the runner (`render::explain` is its
//! text).

use clap::Args;
use ddpcheck_engine::{job_gpus_from_env, ExplainParams, RunError};

use crate::flag_values::{parse_message_size, secs};
use crate::global_args::{make_target, GlobalArgs};
use crate::{print_json, progress, render};

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// The GPUs (indices, UUIDs, PCI bus ids). Default: $SLURM_JOB_GPUS, $CUDA_VISIBLE_DEVICES, else all.
    #[arg(long)]
    pub gpus: Option<String>,
    /// Measure each fix that is an NCCL variable again under that fix (an A/B per pair).
    #[arg(long)]
    pub ab: bool,
    /// Largest all-reduce message of each pair's sweep (it starts at a quarter of it).
    #[arg(long, value_parser = parse_message_size, default_value = "256M")]
    pub max_bytes: u64,
    /// Hard deadline of each pair's sweep, seconds.
    #[arg(long, default_value_t = 60.0)]
    pub deadline: f64,
}

pub fn run(cli: &GlobalArgs, a: &ExplainArgs) -> Result<i32, RunError> {
    // Refused here, not only by the sweep: through the daemon a 0 would read as "unset".
    if a.max_bytes == 0 {
        return Err(RunError::Usage(
            "--max-bytes must be at least 1 byte".into(),
        ));
    }
    let params = ExplainParams {
        gpus: a.gpus.clone().unwrap_or_else(job_gpus_from_env),
        max_bytes: a.max_bytes,
        deadline: secs(a.deadline, "--deadline")?,
        ab: a.ab,
    };
    let target = make_target(cli)?;
    let reporter = progress::Reporter::new();
    let r = target.explain(&params, &mut |p| reporter.update(p));
    reporter.finish();
    let r = r?;
    if cli.json {
        print_json(&r)?;
    } else {
        out!("{}", render::explain(&r));
    }
    Ok(r.exit_code)
}

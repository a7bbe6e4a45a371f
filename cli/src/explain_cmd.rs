//! `ddpcheck explain`: its arguments, and the run through the runner (`render::explain` is its
//! text); with `--from-artifacts` or a file flag, the same judgement of a user's artifacts
//! offline (`render::explain_artifacts`).

use std::path::PathBuf;

use clap::Args;
use ddpcheck_artifacts::folder::{folder_sources, read_all, Source};
use ddpcheck_artifacts::judge::{judge_expecting, Expectations};
use ddpcheck_artifacts::Format;
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
    #[command(flatten)]
    pub artifacts: ArtifactArgs,
}

/// Offline: judge the artifacts a user already has instead of this node.
#[derive(Args, Debug, Default)]
pub struct ArtifactArgs {
    /// Judge a folder of artifacts offline instead of this node: nvidia-smi topo -m, topo -p2p,
    /// -q, nvlink -s, nccl-tests output, NCCL_DEBUG=INFO logs, lspci -vvv (any file names; each
    /// is recognised by its content).
    #[arg(long, value_name = "DIR")]
    pub from_artifacts: Option<PathBuf>,
    /// An `nvidia-smi topo -m` output (offline).
    #[arg(long = "topo-m", value_name = "FILE")]
    pub topo_m: Vec<PathBuf>,
    /// An `nvidia-smi topo -p2p r|w|n|a` output (offline; repeat for each capability).
    #[arg(long = "topo-p2p", value_name = "FILE")]
    pub topo_p2p: Vec<PathBuf>,
    /// An `nvidia-smi -q` output (offline).
    #[arg(long = "smi-q", value_name = "FILE")]
    pub smi_q: Vec<PathBuf>,
    /// An `nvidia-smi nvlink -s` output (offline).
    #[arg(long = "nvlink-s", value_name = "FILE")]
    pub nvlink_s: Vec<PathBuf>,
    /// An nccl-tests output, with or without NCCL's INFO log in it (offline; repeatable).
    #[arg(long = "nccl-tests", value_name = "FILE")]
    pub nccl_tests: Vec<PathBuf>,
    /// An NCCL_DEBUG=INFO log (offline).
    #[arg(long = "nccl-log", value_name = "FILE")]
    pub nccl_log: Vec<PathBuf>,
    /// An `lspci -vvv` output (offline; as root, so that ACS is shown).
    #[arg(long, value_name = "FILE")]
    pub lspci: Vec<PathBuf>,
    /// The GPUs the node's machine type has (offline): fewer in `nvidia-smi -q` or `topo -m` is
    /// a GPU missing (critical).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub expect_gpus: Option<u16>,
}

impl ArtifactArgs {
    /// The files to read, the folder's first; empty where none is named (a live explain).
    fn sources(&self) -> Result<Vec<Source>, RunError> {
        let mut out = match &self.from_artifacts {
            Some(dir) => folder_sources(dir).map_err(|e| RunError::Usage(e.to_string()))?,
            None => Vec::new(),
        };
        let flags = [
            (&self.topo_m, Format::TopoMatrix),
            (&self.topo_p2p, Format::TopoP2p),
            (&self.smi_q, Format::SmiQuery),
            (&self.nvlink_s, Format::NvlinkStatus),
            (&self.nccl_tests, Format::NcclTests),
            (&self.nccl_log, Format::NcclLog),
            (&self.lspci, Format::Lspci),
        ];
        for (paths, format) in flags {
            for p in paths {
                // A file of the folder named by its flag too is read once, as the flag says.
                let same = |s: &Source| same_file(&s.path, p);
                out.retain(|s| s.wanted.is_some() || !same(s));
                out.push(Source {
                    path: p.clone(),
                    wanted: Some(format),
                });
            }
        }
        Ok(out)
    }

    fn named(&self) -> bool {
        self.from_artifacts.is_some()
            || [
                &self.topo_m,
                &self.topo_p2p,
                &self.smi_q,
                &self.nvlink_s,
                &self.nccl_tests,
                &self.nccl_log,
                &self.lspci,
            ]
            .iter()
            .any(|v| !v.is_empty())
    }
}

/// Whether two paths name one file (compared as canonical paths where both resolve).
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Judges the artifacts offline: a bad file is one line and exit 64, the verdict's exit code
/// otherwise.
fn run_offline(cli: &GlobalArgs, a: &ExplainArgs) -> Result<i32, RunError> {
    if cli.daemon.is_some() || cli.sim.is_some() {
        return Err(RunError::Usage(
            "--from-artifacts and the file flags read files here; --daemon and --sim do not apply"
                .into(),
        ));
    }
    if a.ab || a.gpus.is_some() {
        return Err(RunError::Usage(
            "--ab and --gpus measure this node; they do not apply to artifacts".into(),
        ));
    }
    let reads = read_all(&a.artifacts.sources()?).map_err(|e| RunError::Usage(e.to_string()))?;
    let expect = Expectations {
        gpus: a.artifacts.expect_gpus.map(usize::from),
    };
    let r = judge_expecting(&reads, env!("CARGO_PKG_VERSION"), expect)
        .map_err(|e| RunError::Usage(e.to_string()))?;
    if cli.json {
        print_json(&r)?;
    } else {
        out!("{}", render::explain_artifacts(&r, cli.width()));
    }
    Ok(r.exit_code)
}

pub fn run(cli: &GlobalArgs, a: &ExplainArgs) -> Result<i32, RunError> {
    if a.artifacts.named() {
        return run_offline(cli, a);
    }
    if a.artifacts.expect_gpus.is_some() {
        return Err(RunError::Usage(
            "--expect-gpus judges artifacts: give --from-artifacts DIR or a file flag".into(),
        ));
    }
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
        out!("{}", render::explain(&r, cli.width()));
    }
    Ok(r.exit_code)
}

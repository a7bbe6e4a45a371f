//! DDP benchmarks through the node's own PyTorch: an embedded script launched with torchrun, one
//! process per GPU, supervised in its own process group with a hard deadline (invariant 1).
//!
//! [`run_ddp`] validates the request, asks the interpreter about its torch (`python3 -c`, a few
//! seconds, so a missing or old torch is one clear line), writes the benchmark package
//! ([`package_files`], the Python folder `bench_ddp/` embedded file by file) into a private
//! temporary folder (0700), then for each model × variant × world size (ascending, so the 1-GPU
//! row of the same recipe exists) runs the package's main file as the script,
//! `python3 -m torch.distributed.run --standalone --nproc_per_node N SCRIPT --config JSON`
//! (or `torchrun …` when the configured launcher is a torchrun), reads its JSON lines and stops
//! the whole process group at `deadline_s`. [`manual_command`] prints the same command for a run
//! by hand; [`write_script`] puts the package in a folder of your choice.
//!
//! `RunDevice::Cpu` (a test of the script and of a user's factory where there is no GPU) runs
//! `python3 SCRIPT --config JSON` once: that process is rank 0 and starts ranks 1..N-1 itself
//! over gloo, inside the same supervised process group (Debian's torchrun fails at start on
//! Python 3.11); torch ≥ [`MIN_TORCH_CPU`] will do, and its results say `device: cpu`.
//!
//! Every child gets `NCCL_NVLS_ENABLE=0`, `TORCH_SYMM_MEM_DISABLE_MULTICAST=1` and
//! `NVSHMEM_DISABLE_NVLS=1` (NVLink multicast must stay off on the validation machines; a request
//! that asks otherwise is refused), `OMP_NUM_THREADS=1` unless set, then the request's and the
//! variant's `NCCL_*` / `CUDA_*` variables. [`plan`] bounds the request with core's
//! [`DdpRequest::validate`] first, so `TORCH_NCCL_*` overrides are refused here as everywhere
//! else (the runner accepted them on its own until validate became its first check).
//!
//! Exposed communication. With weak scaling every GPU does the 1-GPU recipe's work, so the extra
//! time of an N-GPU step over the 1-GPU step of the same model and variant is communication and
//! synchronisation that the backward pass did not hide: `(step_N − step_1) / step_N` on median
//! step times ([`fill_scaling`]). It also counts any slowdown of compute itself when N GPUs run
//! side by side (power, host). With [`DdpOptions::measure_nocomm`] the script also times N GPUs
//! with every micro-batch under `no_sync` (no gradient traffic at all);
//! `(step_N − nocomm_N) / step_N` then isolates communication. That reference is reported in
//! [`DdpLaunch::nocomm_step_median_s`] (not for FSDP, which all-gathers parameters in every
//! forward).
//!
//! Side by side. A `nocomm` variant on N GPUs first steps rank 0 alone while the other ranks
//! wait on a gloo barrier (a socket wait: an NCCL barrier would spin a core and a GPU), then all
//! N together: `DdpResult::solo_step_time_median_s` is the one-GPU step inside the same launch,
//! against which N side by side is measured with the launch's own speed cancelled.
//!
//! Process supervision is [`crate::supervise`] with `supervise_options`: a new process group
//! (not a new session), stdout lines read leniently (a stray `print()` is counted, not fatal),
//! SIGTERM then SIGKILL to the group at the deadline, and once every result of a launch is in,
//! `EXIT_GRACE_AFTER_RESULT` for torchrun to exit before it is stopped. Results read before a
//! launch fails or is stopped are kept.
//!
//! Here: the public types, the plan and the run loop. `launch` builds a launch (launcher, argv,
//! environment, config JSON, the by-hand line), `probe` checks torch before any launch, and
//! `outcome` reads a launch's stdout and judges how it ended.

pub mod cpu_sweep;
mod launch;
mod outcome;
mod probe;
#[cfg(test)]
mod script_models;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ddpcheck_core::backend::DdpOutcome;
use ddpcheck_core::backend::Progress;
use ddpcheck_core::collective::Sweep;
use ddpcheck_core::ddp::{
    fill_scaling, merge_repeats, DdpRequest, DdpResult, DdpVariant, ModelSpec, PlainReference,
    RunDevice,
};
use ddpcheck_core::num::len_u32;
use ddpcheck_core::ProbeError;
use serde::{Deserialize, Serialize};

use crate::supervise;
use crate::RealConfig;
use launch::{
    command_line, effective_nccl_env, env_overrides, launch_argv, launcher, script_config, Launcher,
};
use outcome::{check_result, judge, on_line, Collected, Ended, ResultEvent};
use probe::{check_probe, probe_torch};

/// The benchmark package's folder name wherever it is written (an importable Python name).
pub const SCRIPT_DIR_NAME: &str = "ddpcheck_bench_ddp";
/// The file of the package a launch runs, by path (as torchrun runs a script).
pub const SCRIPT_MAIN: &str = "__main__.py";

/// `(file name, text)` of each named file of the package folder `bench_ddp/`.
macro_rules! package_files {
    ($($name:literal),* $(,)?) => {
        [$(($name, include_str!(concat!("bench_ddp/", $name)))),*]
    };
}

/// The benchmark package, every Python file of `bench_ddp/` (a test holds the list to the folder).
const PACKAGE: [(&str, &str); 21] = package_files![
    "__init__.py",
    "__main__.py",
    "bench.py",
    "channel.py",
    "collectives.py",
    "config.py",
    "errors.py",
    "host.py",
    "layout.py",
    "main.py",
    "models.py",
    "phases.py",
    "presets.py",
    "ranks.py",
    "recipe.py",
    "report.py",
    "steps.py",
    "sweep.py",
    "timing.py",
    "torchenv.py",
    "wrappers.py",
];
const PROBE: &str = include_str!("probe_torch.py");

/// Oldest torch the script supports (FSDP2, `device_id` in `init_process_group`).
pub const MIN_TORCH: (u32, u32) = (2, 4);
/// Oldest torch for `--device cpu` (gloo ranks; Debian 12's torch is 1.13).
pub const MIN_TORCH_CPU: (u32, u32) = (1, 13);
/// Set in every child, after the request's variables: NVLink multicast stays off.
pub const PINNED_ENV: [(&str, &str); 3] = [
    ("NCCL_NVLS_ENABLE", "0"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
];
/// The GPU count [`plan`] passes to [`DdpRequest::validate`]: the runner does not know the
/// node's GPUs (the engine checked the request against them before it got here).
pub const MAX_WORLD_SIZE: u32 = 64;
/// Models × variants × world sizes in one request.
pub const MAX_LAUNCHES: usize = 256;
/// Upper bound of the per-launch deadline, tighter than validate's 24 h (see [`plan`]).
pub const MAX_DEADLINE_S: f64 = 4.0 * 3600.0;
/// The `python -c` torch probe; importing torch normally takes 1–3 s.
const PROBE_DEADLINE: Duration = Duration::from_secs(20);
/// After its result line a launch gets this long to exit before it is stopped (teardown hangs
/// must not cost a finished measurement).
const EXIT_GRACE_AFTER_RESULT: Duration = Duration::from_secs(60);
/// Time between SIGTERM and SIGKILL: torchrun forwards SIGTERM to its workers.
pub(crate) const TERM_GRACE: Duration = Duration::from_secs(3);
/// Longest stdout line kept; the rest of a longer line is dropped.
const MAX_LINE: usize = 1 << 20;
/// Stderr kept per launch: the last lines, each cut at [`TAIL_LINE_BYTES`].
const TAIL_LINES: usize = 60;
const TAIL_LINE_BYTES: usize = 1000;
const TAIL_BYTES: usize = 64 << 10;
const STAGE: &str = "ddp";

/// Extras of [`run_ddp_report`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DdpOptions {
    /// Also time N GPUs with no gradient communication (DDP, N > 1): [`DdpLaunch::nocomm_step_median_s`].
    pub measure_nocomm: bool,
    /// Record a failed launch and go on; Unavailable and Invalid still stop the run.
    pub keep_going: bool,
}

/// What the interpreter said about its torch before any launch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TorchProbe {
    pub python: Option<String>,
    pub python_version: Option<String>,
    pub torch: Option<String>,
    pub cuda: Option<String>,
    pub cuda_available: Option<bool>,
    pub device_count: Option<u32>,
    pub nccl: Option<bool>,
    pub error: Option<String>,
    pub cuda_error: Option<String>,
}

/// The `env` line of a launch: versions and GPUs, for provenance (invariant 5).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TorchEnv {
    pub torch: String,
    pub cuda: Option<String>,
    /// `torch.cuda.nccl.version()`: the NCCL torch loaded, not the NCCL_VERSION variable.
    pub nccl: Option<String>,
    pub gpus: Vec<String>,
    pub gpu_uuids: Vec<Option<String>>,
    pub gpu_pci_bus_ids: Vec<Option<String>>,
    pub python: Option<String>,
    /// `init_process_group` (NCCL communicator creation), seconds.
    pub init_s: Option<f64>,
    pub nccl_env: BTreeMap<String, String>,
}

/// One launch of the script: how it ran and what came with the result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DdpLaunch {
    pub model: String,
    pub variant: String,
    pub world_size: u32,
    /// The command line as run (environment assignments first); the script path is temporary.
    pub command: String,
    /// NCCL_* variables in force: inherited, then the request's, then pinned.
    pub nccl_env: BTreeMap<String, String>,
    pub torch_env: Option<TorchEnv>,
    pub wall_s: f64,
    /// Median step time of N GPUs with no gradient communication (see the module comment).
    pub nocomm_step_median_s: Option<f64>,
    pub max_memory_bytes: Option<u64>,
    pub final_loss: Option<f64>,
    /// Timed step times (max over ranks), seconds; empty when the script left them out.
    pub step_times_s: Vec<f64>,
    pub warnings: Vec<String>,
    pub error: Option<ProbeError>,
}

/// Everything a DDP run produced; [`run_ddp`] returns only `results`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DdpRun {
    pub probe: Option<TorchProbe>,
    /// What finished; with `stopped`, what finished before the deadline.
    pub results: Vec<DdpResult>,
    pub launches: Vec<DdpLaunch>,
    /// The timeout that stopped the run after `results` (no launch ran after it).
    pub stopped: Option<ProbeError>,
}

/// The embedded benchmark package: `(file name, text)` of each of its files.
pub fn package_files() -> &'static [(&'static str, &'static str)] {
    &PACKAGE
}

/// Writes the package into `dir` as the folder [`SCRIPT_DIR_NAME`] and returns the path of its
/// [`SCRIPT_MAIN`], the script a launch runs.
pub fn write_script(dir: &Path) -> io::Result<PathBuf> {
    let folder = dir.join(SCRIPT_DIR_NAME);
    fs::create_dir_all(&folder)?;
    fs::set_permissions(&folder, fs::Permissions::from_mode(0o755))?;
    for (name, text) in PACKAGE {
        let path = folder.join(name);
        fs::write(&path, text)?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644))?;
    }
    Ok(folder.join(SCRIPT_MAIN))
}

/// The command a person runs by hand for the same measurement as ddpcheck's launch of `model`,
/// `variant` on `world_size` GPUs with the script at `script` (see [`write_script`]): the same
/// launcher, environment, arguments and config (without the no-communication extra).
pub fn manual_command(
    cfg: &RealConfig,
    req: &DdpRequest,
    model: &ModelSpec,
    variant: &DdpVariant,
    world_size: u32,
    script: &Path,
) -> String {
    manual_command_group(cfg, req, &[(model, variant)], world_size, script)
}

/// [`manual_command`] for a grouped launch: every (model, variant) of `items` in one process,
/// as ddpcheck launches them (see [`launch_groups`]).
pub fn manual_command_group(
    cfg: &RealConfig,
    req: &DdpRequest,
    items: &[(&ModelSpec, &DdpVariant)],
    world_size: u32,
    script: &Path,
) -> String {
    let launcher = launcher(cfg).unwrap_or_else(|_| Launcher::Python("python3".into()));
    let Some((_, first)) = items.first() else {
        return String::new();
    };
    let config = script_config(req, items, world_size, false);
    let (program, args) = launch_argv(&launcher, world_size, script, &config, req.device);
    command_line(&env_overrides(req, first), &program, &args)
}

/// The runs one launch makes: (model, variant) pairs on one world size.
pub type LaunchGroup<'a> = (u32, Vec<(&'a ModelSpec, &'a DdpVariant)>);

/// Groups the plan into launches: the runs of one world size whose NCCL environment is the same
/// share one process (one torch start-up and NCCL init instead of one per run).
pub fn launch_groups<'a>(
    req: &DdpRequest,
    plan: &[(&'a ModelSpec, &'a DdpVariant, u32)],
) -> Vec<LaunchGroup<'a>> {
    // (world size, environment, runs)
    type Keyed<'a> = (
        u32,
        Vec<(String, String)>,
        Vec<(&'a ModelSpec, &'a DdpVariant)>,
    );
    let mut groups: Vec<Keyed<'a>> = Vec::new();
    for (model, variant, world) in plan {
        let env = env_overrides(req, variant);
        match groups.iter_mut().find(|(w, e, _)| w == world && *e == env) {
            Some(g) => g.2.push((model, variant)),
            None => groups.push((*world, env, vec![(model, variant)])),
        }
    }
    groups.sort_by_key(|g| g.0);
    groups.into_iter().map(|(w, _, items)| (w, items)).collect()
}

/// Runs every model × variant × world size of `req` (see the module comment); a deadline
/// that struck midway is its timeout (what finished before it is [`run_ddp_outcome`]'s).
pub fn run_ddp(
    cfg: &RealConfig,
    req: &DdpRequest,
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<DdpResult>, ProbeError> {
    let r = run_ddp_outcome(cfg, req, progress)?;
    match r.stopped {
        Some(e) => Err(e),
        None => Ok(r.results),
    }
}

/// [`run_ddp`], keeping the results that finished before a deadline beside its timeout.
pub fn run_ddp_outcome(
    cfg: &RealConfig,
    req: &DdpRequest,
    progress: &mut dyn FnMut(Progress),
) -> Result<DdpOutcome, ProbeError> {
    run_ddp_report(cfg, req, &DdpOptions::default(), progress).map(|r| DdpOutcome {
        results: r.results,
        stopped: r.stopped,
    })
}

/// [`run_ddp`] with options and the per-launch details (versions, GPUs, command, extras).
pub fn run_ddp_report(
    cfg: &RealConfig,
    req: &DdpRequest,
    opts: &DdpOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<DdpRun, ProbeError> {
    let plan = plan(req)?;
    let total = len_u32(plan.len());
    let launcher = launcher(cfg)?;
    if req.device == RunDevice::Cpu {
        launch::cpu_python(&launcher)?;
    }
    let max_world = plan.iter().map(|p| p.2).max().unwrap_or(1);

    let probe = match launcher.probe_python() {
        Some(python) => {
            progress(Progress {
                stage: STAGE.into(),
                done: 0,
                total,
                message: format!("checking torch ({python} -c 'import torch')"),
            });
            let deadline = PROBE_DEADLINE.min(Duration::from_secs_f64(req.deadline_s));
            let p = probe_torch(python, deadline)?;
            check_probe(&p, python, max_world, req.device)?;
            Some(p)
        }
        None => {
            let launcher = &cfg.python;
            tracing::info!(
                "launcher {launcher:?} has no Python shebang; the script checks torch itself"
            );
            None
        }
    };

    let (dir, script) = private_script()?;

    let mut results = Vec::new();
    let mut launches = Vec::new();
    let mut first_error = None;
    let mut stopped = None;
    let groups = launch_groups(req, &plan);
    // Repeats run the whole sequence again, so that drift of the machine over the run touches
    // every configuration alike; `merge_repeats` folds them.
    let repeats = req.repeats.max(1) as usize;
    let total = len_u32(groups.len() * repeats);
    let sequence = (0..repeats).flat_map(|_| groups.iter());
    for (i, (world, items)) in sequence.enumerate() {
        if stopped.is_some() {
            break;
        }
        let ctx = LaunchCtx {
            launcher: &launcher,
            req,
            script: &script,
            workdir: dir.path(),
            index: len_u32(i),
            total,
            measure_nocomm: opts.measure_nocomm,
        };
        for (mut launch, outcome) in run_group(&ctx, items, *world, progress) {
            match outcome {
                Ok(r) => results.push(r),
                // A deadline ends the run where it struck; what finished before it stays.
                Err(e @ ProbeError::Timeout { .. }) if !opts.keep_going => {
                    stopped.get_or_insert_with(|| e.clone());
                    launch.error = Some(e);
                }
                Err(e) => {
                    let fatal = matches!(e, ProbeError::Unavailable(_) | ProbeError::Invalid(_));
                    if !opts.keep_going || fatal {
                        return Err(e);
                    }
                    tracing::warn!("{e}");
                    first_error.get_or_insert_with(|| e.clone());
                    launch.error = Some(e);
                }
            }
            launches.push(launch);
        }
    }
    if results.is_empty() {
        if let Some(e) = stopped.clone().or(first_error) {
            return Err(e);
        }
    }
    let mut results = merge_repeats(results);
    fill_scaling(&mut results, req.price_per_gpu_hour);
    progress(Progress {
        stage: STAGE.into(),
        done: total,
        total,
        message: format!("{} results from {total} DDP launches", results.len()),
    });
    Ok(DdpRun {
        probe,
        results,
        launches,
        stopped,
    })
}

/// The benchmark package written into a private temporary folder (0700), removed when the
/// folder is dropped: (the folder, the package's main file).
fn private_script() -> Result<(tempfile::TempDir, PathBuf), ProbeError> {
    let dir = tempfile::Builder::new()
        .prefix("ddpcheck-ddp-")
        .tempdir()
        .map_err(|e| {
            ProbeError::Unavailable(format!(
                "cannot create a temporary folder for the DDP script: {e}"
            ))
        })?;
    let script = fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700))
        .and_then(|()| write_script(dir.path()))
        .map_err(|e| {
            ProbeError::Unavailable(format!(
                "cannot write the DDP script to {}: {e}",
                dir.path().display()
            ))
        })?;
    Ok((dir, script))
}

/// Bounds every field (a request may come from the outside world) and returns the launches in
/// order: model, variant, world size ascending (1 first).
///
/// The field bounds are core's [`DdpRequest::validate`], the one check the engine and the
/// simulated node use too, against [`MAX_WORLD_SIZE`] (the runner does not know the node's GPU
/// count; the engine has already checked the request against it). What is left here is what
/// only launching processes needs: names that go into a command line, the environment's names
/// and values, [`MAX_LAUNCHES`] and the tighter [`MAX_DEADLINE_S`].
pub fn plan(req: &DdpRequest) -> Result<Vec<(&ModelSpec, &DdpVariant, u32)>, ProbeError> {
    let bad = |m: String| Err(ProbeError::Invalid(m));
    // The runner's own bound, said as such: validate's wording is about the node's GPUs, which
    // a plan made without the node (`--print-manual`) does not know.
    if let Some(n) = req
        .world_sizes
        .iter()
        .find(|&&n| n == 0 || n > MAX_WORLD_SIZE)
    {
        return bad(format!(
            "GPU count {n} outside the runner's 1..={MAX_WORLD_SIZE} processes per launch"
        ));
    }
    req.validate(MAX_WORLD_SIZE as usize)?;
    for m in &req.models {
        // A factory's name holds its file's absolute path.
        let max = if m.source().is_some() { 1024 } else { 64 };
        check_name("model name", &m.name(), max)?;
    }
    for v in &req.variants {
        check_name("variant name", &v.name, 64)?;
        check_env(&format!("variant {}", v.name), &v.env)?;
    }
    check_env("request", &req.env)?;
    // validate allows a day; one launch of the runner is held to 4 h, so a request with a
    // mistyped deadline cannot keep the node's GPUs for longer than any benchmark needs.
    if req.deadline_s > MAX_DEADLINE_S {
        return bad(format!(
            "deadline {} s above the runner's bound of {MAX_DEADLINE_S} s per launch",
            req.deadline_s
        ));
    }

    let mut worlds = req.world_sizes.clone();
    worlds.sort_unstable();
    worlds.dedup();
    let count = req.models.len() * req.variants.len() * worlds.len();
    // validate bounds each list on its own (16 × 32 × 16); the product is the number of
    // processes started, which the runner bounds.
    if count > MAX_LAUNCHES {
        return bad(format!(
            "{count} launches (models × variants × world sizes) is above the bound of {MAX_LAUNCHES}"
        ));
    }
    let mut plan = Vec::with_capacity(count);
    for m in &req.models {
        for v in &req.variants {
            for &n in &worlds {
                plan.push((m, v, n));
            }
        }
    }
    Ok(plan)
}

/// Model and variant names go into the launch's `--config` argument and the printed command.
fn check_name(what: &str, name: &str, max: usize) -> Result<(), ProbeError> {
    if name.is_empty() || name.len() > max || name.chars().any(char::is_control) {
        return Err(ProbeError::Invalid(format!(
            "{what} {name:?} must be 1 to {max} printable characters"
        )));
    }
    Ok(())
}

/// What validate does not check of the variables a child gets: validate admits any name with
/// an `NCCL_` or `CUDA_` prefix; a child's environment also needs a name after the prefix in
/// upper case, digits and `_`, one-line values, a bounded count, and the pinned values kept.
fn check_env(whose: &str, env: &[(String, String)]) -> Result<(), ProbeError> {
    let bad = |m: String| Err(ProbeError::Invalid(format!("{whose} environment: {m}")));
    if env.len() > 64 {
        return bad(format!("{} variables, at most 64", env.len()));
    }
    for (k, v) in env {
        let prefixed = ["NCCL_", "CUDA_"]
            .iter()
            .any(|p| k.len() > p.len() && k.starts_with(p));
        let charset = k
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        if !prefixed || !charset {
            return bad(format!(
                "{k:?} is not an NCCL_* or CUDA_* name (upper-case letters, digits and _)"
            ));
        }
        if v.len() > 4096 || v.contains('\0') || v.contains('\n') {
            return bad(format!(
                "value of {k} must be one line of at most 4096 bytes"
            ));
        }
        if let Some((_, pinned)) = PINNED_ENV.iter().find(|(pk, _)| pk == k) {
            if v != pinned {
                return bad(format!(
                    "{k} is pinned to {pinned}: NVLink multicast stays off in every program ddpcheck starts"
                ));
            }
        }
    }
    Ok(())
}

/// How [`crate::supervise`] runs the torch check and the launches: torchrun in a new process
/// group of our session (as validated on the GPU machines), lenient stdout, a longer SIGTERM
/// grace (torchrun forwards SIGTERM to its workers), the lines written while being stopped.
fn supervise_options(deadline: Duration) -> supervise::Options {
    supervise::Options {
        grace: TERM_GRACE,
        stderr_tail_bytes: TAIL_BYTES,
        max_line_bytes: MAX_LINE,
        allow_non_json: true,
        new_session: false,
        done_grace: EXIT_GRACE_AFTER_RESULT,
        read_while_stopping: true,
        ..supervise::Options::new(deadline)
    }
}

struct LaunchCtx<'a> {
    launcher: &'a Launcher,
    req: &'a DdpRequest,
    script: &'a Path,
    workdir: &'a Path,
    index: u32,
    total: u32,
    measure_nocomm: bool,
}

fn run_group(
    ctx: &LaunchCtx<'_>,
    items: &[(&ModelSpec, &DdpVariant)],
    world: u32,
    progress: &mut dyn FnMut(Progress),
) -> Vec<(DdpLaunch, Result<DdpResult, ProbeError>)> {
    let Some((_, first_variant)) = items.first() else {
        return Vec::new();
    };
    let names: Vec<String> = items
        .iter()
        .map(|(m, v)| format!("{} {}", m.name(), v.name))
        .collect();
    let gpus = match (ctx.req.device, world) {
        (RunDevice::Cpu, 1) => "CPU rank",
        (RunDevice::Cpu, _) => "CPU ranks",
        (RunDevice::Cuda, 1) => "GPU",
        (RunDevice::Cuda, _) => "GPUs",
    };
    let label = format!("{} {world} {gpus}", names.join(", "));
    let nocomm = ctx.measure_nocomm && world > 1 && items.iter().all(|(_, v)| !v.fsdp);
    let config = script_config(ctx.req, items, world, nocomm);
    let (program, args) = launch_argv(ctx.launcher, world, ctx.script, &config, ctx.req.device);
    let overrides = env_overrides(ctx.req, first_variant);
    let template = DdpLaunch {
        model: String::new(),
        variant: String::new(),
        world_size: world,
        command: command_line(&overrides, &program, &args),
        nccl_env: effective_nccl_env(&overrides),
        torch_env: None,
        wall_s: 0.0,
        nocomm_step_median_s: None,
        max_memory_bytes: None,
        final_loss: None,
        step_times_s: Vec::new(),
        warnings: Vec::new(),
        error: None,
    };
    let launch_for = |model: &ModelSpec, variant: &DdpVariant, t: &DdpLaunch| DdpLaunch {
        model: model.name(),
        variant: variant.name.clone(),
        ..t.clone()
    };
    let (index, total) = (ctx.index, ctx.total);
    let mut note = |message: String| {
        progress(Progress {
            stage: STAGE.into(),
            done: index,
            total,
            message,
        })
    };
    note(format!("{label}: starting"));
    tracing::info!("DDP launch {}/{total}: {}", index + 1, template.command);

    let mut cmd = Command::new(&program);
    cmd.args(&args).current_dir(ctx.workdir);
    for (k, v) in &overrides {
        cmd.env(k, v);
    }
    let deadline_s = ctx.req.deadline_s;
    let mut got = Collected::expecting(items.len());
    let started = Instant::now();
    let ran = supervise::run_lines(
        cmd,
        None,
        &supervise_options(Duration::from_secs_f64(deadline_s)),
        |line| on_line(line, &mut got, &label, &mut note),
    );
    let wall = started.elapsed();
    let all_fail = |t: &DdpLaunch, e: ProbeError| {
        items
            .iter()
            .map(|(m, v)| (launch_for(m, v, t), Err(e.clone())))
            .collect::<Vec<_>>()
    };
    let finished = match Ended::from_supervised(&program, ran) {
        Ok(f) => f,
        Err(e) => return all_fail(&template, e),
    };
    let mut template = template;
    template.wall_s = wall.as_secs_f64();
    template.torch_env = got.env.take();
    let outcome = judge(&label, deadline_s, &finished, &mut got);
    template.warnings = std::mem::take(&mut got.warnings);
    for w in &template.warnings {
        tracing::warn!("{label}: {w}");
    }
    let mut events = match outcome {
        Ok(ev) => ev,
        Err(e) => return all_fail(&template, e),
    };
    let single = items.len() == 1;
    // Fewer results than runs from a launch stopped at its deadline: the deadline took the rest.
    let cut_short = finished.stopped && events.len() < items.len();
    items
        .iter()
        .map(|(model, variant)| {
            let mut launch = launch_for(model, variant, &template);
            // A one-run launch takes its one result; a grouped launch matches by names.
            let pos = events.iter().position(|ev| {
                single
                    || (ev.model.as_deref() == Some(model.name().as_str())
                        && ev.variant.as_deref() == Some(variant.name.as_str()))
            });
            let Some(mut ev) = pos.map(|i| events.remove(i)) else {
                let run = format!("{} {} on {world} {gpus}", model.name(), variant.name);
                // Stopped at its deadline before this run reported: the deadline is the cause.
                let e = if cut_short {
                    ProbeError::Timeout {
                        stage: format!("DDP benchmark {run}"),
                        seconds: deadline_s,
                    }
                } else {
                    ProbeError::Worker(format!("{run}: the launch reported no result for this run"))
                };
                return (launch, Err(e));
            };
            let outcome = check_result(&ev, world).map(|()| {
                // A model built by code has the parameters torch says it has.
                if model.source().is_none() && ev.params != model.params() {
                    launch.warnings.push(format!(
                        "the script's model has {} parameters, ddpcheck's formula {}",
                        ev.params,
                        model.params()
                    ));
                }
                launch.warnings.extend(ev.layout_warnings());
                launch.nocomm_step_median_s =
                    ev.nocomm_step_time_median_s.filter(|t| t.is_finite());
                launch.max_memory_bytes = ev.max_memory_bytes;
                launch.final_loss = ev.final_loss;
                launch.step_times_s = std::mem::take(&mut ev.step_times_s);
                result_of(
                    ev,
                    model,
                    variant,
                    world,
                    ctx.req.device,
                    ctx.req.micro_batch,
                )
            });
            (launch, outcome)
        })
        .collect()
}

/// The result a launch reported for one run, as a [`DdpResult`] (speedups and launches are
/// filled in once every launch is in).
fn result_of(
    ev: ResultEvent,
    model: &ModelSpec,
    variant: &DdpVariant,
    world: u32,
    device: RunDevice,
    micro_batch: u32,
) -> DdpResult {
    DdpResult {
        model: model.name(),
        params: ev.params,
        variant: variant.name.clone(),
        world_size: world,
        micro_batch,
        accum: variant.accum,
        step_time_median_s: ev.step_time_median_s,
        step_time_p90_s: ev.step_time_p90_s,
        timed_steps: ev.steps,
        throughput: ev.throughput,
        throughput_unit: ev.throughput_unit,
        all_reduce_probe: ev
            .all_reduce_probe
            .as_deref()
            .and_then(|t| Sweep::all_reduce_from_times(world, t)),
        solo_step_time_median_s: ev
            .solo_step_time_median_s
            .filter(|t| t.is_finite() && *t > 0.0),
        plain_reference: PlainReference::from_launch(ev.plain_step_time_median_s, ev.plain_rounds),
        param_layout: ev.param_layout,
        torch_buckets: ev.torch_buckets,
        recipe: ev.recipe,
        host: ev.host,
        device: ev.device.unwrap_or(device),
        compile: ev.compile,
        max_memory_bytes: ev.max_memory_bytes,
        memory_phases: ev.memory_phases,
        ..DdpResult::default()
    }
}

//! DDP benchmarks through the node's own PyTorch: an embedded script launched with torchrun, one
//! process per GPU, supervised in its own process group with a hard deadline (invariant 1).
//!
//! [`run_ddp`] validates the request, asks the interpreter about its torch (`python3 -c`, a few
//! seconds, so a missing or old torch is one clear line), writes [`script_text`] into a private
//! temporary folder (0700), then for each model × variant × world size (ascending, so the 1-GPU
//! row of the same recipe exists) runs
//! `python3 -m torch.distributed.run --standalone --nproc_per_node N SCRIPT --config JSON`
//! (or `torchrun …` when the configured launcher is a torchrun), reads its JSON lines and stops
//! the whole process group at `deadline_s`. [`manual_command`] prints the same command for a run
//! by hand; [`write_script`] puts the script in a folder of your choice.
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
//! Process supervision is [`crate::supervise`] with `supervise_options`: a new process group
//! (not a new session), stdout lines read leniently (a stray `print()` is counted, not fatal),
//! SIGTERM then SIGKILL to the group at the deadline, and once every result of a launch is in,
//! `EXIT_GRACE_AFTER_RESULT` for torchrun to exit before it is stopped. Results read before a
//! launch fails or is stopped are kept.

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use ddpcheck_core::backend::Progress;
use ddpcheck_core::ddp::{
    fill_scaling, merge_repeats, CommHook, DdpRequest, DdpResult, DdpVariant, ModelSpec,
};
use ddpcheck_core::ProbeError;
use serde::{Deserialize, Serialize};

use crate::supervise::{self, Line, Next, SuperviseError};
use crate::RealConfig;

/// The benchmark script's file name wherever it is written.
pub const SCRIPT_FILE_NAME: &str = "ddpcheck_bench_ddp.py";
const SCRIPT: &str = include_str!("bench_ddp.py");
const PROBE: &str = include_str!("probe_torch.py");

/// Oldest torch the script supports (FSDP2, `device_id` in `init_process_group`).
pub const MIN_TORCH: (u32, u32) = (2, 4);
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
    pub results: Vec<DdpResult>,
    pub launches: Vec<DdpLaunch>,
}

/// The embedded benchmark script.
pub fn script_text() -> &'static str {
    SCRIPT
}

/// Writes the script into `dir` as [`SCRIPT_FILE_NAME`] and returns its path.
pub fn write_script(dir: &Path) -> io::Result<PathBuf> {
    let path = dir.join(SCRIPT_FILE_NAME);
    fs::write(&path, SCRIPT)?;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644))?;
    Ok(path)
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
    let config = script_config(req, items, false);
    let (program, args) = launch_argv(&launcher, world_size, script, &config);
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

/// Runs every model × variant × world size of `req` (see the module comment).
pub fn run_ddp(
    cfg: &RealConfig,
    req: &DdpRequest,
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<DdpResult>, ProbeError> {
    run_ddp_report(cfg, req, &DdpOptions::default(), progress).map(|r| r.results)
}

/// [`run_ddp`] with options and the per-launch details (versions, GPUs, command, extras).
pub fn run_ddp_report(
    cfg: &RealConfig,
    req: &DdpRequest,
    opts: &DdpOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<DdpRun, ProbeError> {
    let plan = plan(req)?;
    let total = plan.len() as u32;
    let launcher = launcher(cfg)?;
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
            check_probe(&p, python, max_world)?;
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

    let mut results = Vec::new();
    let mut launches = Vec::new();
    let mut first_error = None;
    let groups = launch_groups(req, &plan);
    // Repeats run the whole sequence again, so that drift of the machine over the run touches
    // every configuration alike; `merge_repeats` folds them.
    let repeats = req.repeats.max(1) as usize;
    let total = (groups.len() * repeats) as u32;
    let sequence = (0..repeats).flat_map(|_| groups.iter());
    for (i, (world, items)) in sequence.enumerate() {
        let ctx = LaunchCtx {
            launcher: &launcher,
            req,
            script: &script,
            workdir: dir.path(),
            index: i as u32,
            total,
            measure_nocomm: opts.measure_nocomm,
        };
        for (mut launch, outcome) in run_group(&ctx, items, *world, progress) {
            match outcome {
                Ok(r) => results.push(r),
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
        if let Some(e) = first_error {
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
    })
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
        check_name("model name", &m.name())?;
    }
    for v in &req.variants {
        check_name("variant name", &v.name)?;
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
fn check_name(what: &str, name: &str) -> Result<(), ProbeError> {
    if name.is_empty() || name.len() > 64 || name.chars().any(char::is_control) {
        return Err(ProbeError::Invalid(format!(
            "{what} {name:?} must be 1 to 64 printable characters"
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

/// How the script is started.
#[derive(Clone, Debug, PartialEq)]
enum Launcher {
    /// An interpreter, run as `PYTHON -m torch.distributed.run`.
    Python(String),
    /// A torchrun executable, called directly; `python` is the interpreter of its shebang.
    Torchrun {
        torchrun: String,
        python: Option<String>,
    },
}

impl Launcher {
    fn probe_python(&self) -> Option<&str> {
        match self {
            Launcher::Python(p) => Some(p),
            Launcher::Torchrun { python, .. } => python.as_deref(),
        }
    }
}

fn launcher(cfg: &RealConfig) -> Result<Launcher, ProbeError> {
    let p = cfg.python.trim();
    if p.is_empty() {
        return Err(ProbeError::Unavailable(
            "no Python launcher configured: set DDPCHECK_PYTHON to a python3 with torch ≥ 2.4"
                .into(),
        ));
    }
    if Path::new(p).file_name() == Some(OsStr::new("torchrun")) {
        let python = find_program(p).and_then(|path| shebang_python(&path));
        Ok(Launcher::Torchrun {
            torchrun: p.to_string(),
            python,
        })
    } else {
        Ok(Launcher::Python(p.to_string()))
    }
}

/// `name` as the shell would find it: a path as is, a bare name through PATH.
fn find_program(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return p.is_file().then_some(p);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// The Python interpreter named by a script's `#!` line (`/usr/bin/env python3` included).
fn shebang_python(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = [0u8; 512];
    let n = fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .ok()?;
    let text = String::from_utf8_lossy(&head[..n]);
    let first = text.lines().next()?.strip_prefix("#!")?;
    let mut words = first.split_whitespace();
    let mut interp = words.next()?;
    if Path::new(interp).file_name() == Some(OsStr::new("env")) {
        interp = words.find(|w| !w.starts_with('-'))?;
    }
    let base = Path::new(interp).file_name()?.to_str()?;
    base.starts_with("python").then(|| interp.to_string())
}

fn launch_argv(
    launcher: &Launcher,
    world: u32,
    script: &Path,
    config_json: &str,
) -> (String, Vec<String>) {
    let mut args: Vec<String> = Vec::new();
    let program = match launcher {
        Launcher::Python(p) => {
            args.extend(["-m".into(), "torch.distributed.run".into()]);
            p.clone()
        }
        Launcher::Torchrun { torchrun, .. } => torchrun.clone(),
    };
    // --standalone: a private rendezvous on a free local port, so two runs never collide.
    args.extend([
        "--standalone".into(),
        "--nproc_per_node".into(),
        world.to_string(),
        script.display().to_string(),
        "--config".into(),
        config_json.to_string(),
    ]);
    (program, args)
}

/// Variables set on top of the inherited environment, in order (a later key wins).
fn env_overrides(req: &DdpRequest, variant: &DdpVariant) -> Vec<(String, String)> {
    fn set(out: &mut Vec<(String, String)>, k: &str, v: &str) {
        match out.iter_mut().find(|(ek, _)| ek == k) {
            Some(e) => e.1 = v.to_string(),
            None => out.push((k.to_string(), v.to_string())),
        }
    }
    let mut out = Vec::new();
    if std::env::var_os("OMP_NUM_THREADS").is_none() {
        set(&mut out, "OMP_NUM_THREADS", "1");
    }
    set(&mut out, "PYTHONUNBUFFERED", "1");
    for (k, v) in req.env.iter().chain(&variant.env) {
        set(&mut out, k, v);
    }
    for (k, v) in PINNED_ENV {
        set(&mut out, k, v);
    }
    out
}

fn effective_nccl_env(overrides: &[(String, String)]) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("NCCL_"))
        .collect();
    for (k, v) in overrides {
        if k.starts_with("NCCL_") {
            env.insert(k.clone(), v.clone());
        }
    }
    env
}

#[derive(Serialize)]
struct ScriptRun<'a> {
    model: &'a ModelSpec,
    variant: ScriptVariant<'a>,
}

/// One launch's config: a single `model`/`variant` (version 1), or several `runs` that share one
/// torch start-up and NCCL init (version 2).
#[derive(Serialize)]
struct ScriptConfig<'a> {
    version: u32,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    single: Option<ScriptRun<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    runs: Vec<ScriptRun<'a>>,
    micro_batch: u32,
    warmup_steps: u32,
    steps: u32,
    nccl_timeout_s: u32,
    measure_nocomm: bool,
}

#[derive(Serialize)]
struct ScriptVariant<'a> {
    name: &'a str,
    hook: CommHook,
    accum: u32,
    bucket_cap_mb: Option<f64>,
    gradient_as_bucket_view: bool,
    fsdp: bool,
}

/// The `--config` JSON of one launch of `items` (model, variant) pairs.
fn script_config(
    req: &DdpRequest,
    items: &[(&ModelSpec, &DdpVariant)],
    measure_nocomm: bool,
) -> String {
    let mut runs: Vec<ScriptRun<'_>> = items
        .iter()
        .map(|(model, variant)| ScriptRun {
            model,
            variant: ScriptVariant {
                name: &variant.name,
                hook: variant.hook,
                accum: variant.accum,
                bucket_cap_mb: variant.bucket_cap_mb,
                gradient_as_bucket_view: variant.gradient_as_bucket_view,
                fsdp: variant.fsdp,
            },
        })
        .collect();
    let single = if runs.len() == 1 { runs.pop() } else { None };
    let c = ScriptConfig {
        version: if single.is_some() { 1 } else { 2 },
        single,
        runs,
        micro_batch: req.micro_batch,
        warmup_steps: req.warmup_steps,
        steps: req.steps,
        // NCCL's own watchdog: well inside the launch deadline, never absurdly short.
        nccl_timeout_s: (req.deadline_s * 0.5).clamp(30.0, 600.0) as u32,
        measure_nocomm,
    };
    // Strings, integers and finite floats: serialising cannot fail.
    serde_json::to_string(&c).unwrap_or_default()
}

/// `s` quoted for a POSIX shell (bare when it is plainly safe).
fn sh_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./:=@%+,-".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn command_line(env: &[(String, String)], program: &str, args: &[String]) -> String {
    env.iter()
        .map(|(k, v)| format!("{k}={}", sh_quote(v)))
        .chain(std::iter::once(sh_quote(program)))
        .chain(args.iter().map(|a| sh_quote(a)))
        .collect::<Vec<_>>()
        .join(" ")
}

fn probe_torch(python: &str, deadline: Duration) -> Result<TorchProbe, ProbeError> {
    let mut cmd = Command::new(python);
    cmd.arg("-c").arg(PROBE);
    for (k, v) in PINNED_ENV {
        cmd.env(k, v);
    }
    let mut last_json: Option<TorchProbe> = None;
    let mut garbage: Option<String> = None;
    let ran = supervise::run_lines(cmd, None, &supervise_options(deadline), |line| {
        match serde_json::from_str::<TorchProbe>(line.text.trim()) {
            Ok(p) => last_json = Some(p),
            Err(_) if !line.text.trim().is_empty() => {
                garbage.get_or_insert_with(|| clip(line.text, 200));
            }
            Err(_) => {}
        }
        Next::More
    });
    let finished = Ended::from_supervised(python, ran)?;
    if finished.stopped {
        return Err(ProbeError::Timeout {
            stage: format!("torch check ({python} -c 'import torch')"),
            seconds: deadline.as_secs_f64(),
        });
    }
    match last_json {
        Some(p) => Ok(p),
        None => {
            let why = key_line(&finished.stderr_tail)
                .map(str::to_string)
                .or(garbage)
                .unwrap_or_else(|| "no output".into());
            Err(ProbeError::Unavailable(format!(
                "{python} could not check for torch ({}): {why}",
                finished.describe()
            )))
        }
    }
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

/// How a supervised child ended, as the judgement reads it.
#[derive(Debug)]
struct Ended {
    /// We stopped it: at the deadline, or when it did not exit after its last result.
    stopped: bool,
    /// Its exit status, or why there is none.
    exit: Result<ExitStatus, String>,
    /// The last lines of stderr, oldest first.
    stderr_tail: Vec<String>,
}

impl Ended {
    /// Failing to start `program` is the only error; every other end is judged with what the
    /// callback collected.
    fn from_supervised(
        program: &str,
        ran: Result<supervise::Outcome, SuperviseError>,
    ) -> Result<Ended, ProbeError> {
        let e = match ran {
            Ok(o) => {
                return Ok(Ended {
                    stopped: false,
                    exit: Ok(o.status),
                    stderr_tail: tail_lines(&o.stderr_tail),
                })
            }
            Err(SuperviseError::Spawn { source, .. }) => return Err(spawn_error(program, &source)),
            Err(e) => e,
        };
        let stopped = matches!(
            e,
            SuperviseError::Timeout { .. } | SuperviseError::Lingered { .. }
        );
        let exit = match e.exit_status() {
            Some(st) => Ok(st),
            None if stopped => Err("not reaped after SIGKILL".to_string()),
            // The supervisor's own trouble (an I/O error; lenient lines never fail): its words.
            None => Err(clip(&e.to_string(), 500)),
        };
        Ok(Ended {
            stopped,
            exit,
            stderr_tail: tail_lines(e.stderr_tail()),
        })
    }

    fn success(&self) -> bool {
        matches!(&self.exit, Ok(st) if st.success())
    }

    fn describe(&self) -> String {
        match &self.exit {
            Ok(st) => describe_exit(st),
            Err(why) => why.clone(),
        }
    }
}

/// The supervisor's stderr tail as its last [`TAIL_LINES`] lines, each cut at
/// [`TAIL_LINE_BYTES`]; a first line cut by the byte bound is dropped.
fn tail_lines(tail: &str) -> Vec<String> {
    let mut lines: Vec<&str> = tail.lines().collect();
    if tail.len() >= TAIL_BYTES && lines.len() > 1 {
        lines.remove(0);
    }
    lines[lines.len().saturating_sub(TAIL_LINES)..]
        .iter()
        .map(|l| clip(l, TAIL_LINE_BYTES))
        .collect()
}

fn spawn_error(program: &str, e: &io::Error) -> ProbeError {
    match e.kind() {
        io::ErrorKind::NotFound => ProbeError::Unavailable(format!(
            "{program} not found: set DDPCHECK_PYTHON to a python3 with torch ≥ 2.4 (or to a torchrun)"
        )),
        io::ErrorKind::PermissionDenied => {
            ProbeError::Unavailable(format!("{program} cannot be executed: {e}"))
        }
        _ => ProbeError::Unavailable(format!("cannot start {program}: {e}")),
    }
}

fn check_probe(p: &TorchProbe, python: &str, max_world: u32) -> Result<(), ProbeError> {
    let unavailable = |m: String| Err(ProbeError::Unavailable(m));
    if let Some(e) = &p.error {
        return unavailable(e.clone());
    }
    let exe = p.python.as_deref().unwrap_or(python);
    let Some(version) = p.torch.as_deref() else {
        return unavailable(format!("{exe} reported no torch version"));
    };
    match torch_version(version) {
        Some(v) if v >= MIN_TORCH => {}
        Some(_) => {
            return unavailable(format!(
                "torch {version} at {exe} is too old: the DDP benchmark needs torch ≥ {}.{}",
                MIN_TORCH.0, MIN_TORCH.1
            ))
        }
        None => {
            return unavailable(format!(
                "torch at {exe} has an unreadable version {version:?}"
            ))
        }
    }
    if p.cuda_available != Some(true) {
        let detail = p
            .cuda_error
            .clone()
            .unwrap_or_else(|| format!("built for CUDA {}", p.cuda.as_deref().unwrap_or("none")));
        return unavailable(format!(
            "torch {version} at {exe} has no usable CUDA ({detail})"
        ));
    }
    if p.nccl == Some(false) {
        return unavailable(format!("torch {version} at {exe} was built without NCCL"));
    }
    if let Some(n) = p.device_count {
        if n < max_world {
            return Err(ProbeError::Invalid(format!(
                "world size {max_world} needs {max_world} GPUs, but torch sees {n} (CUDA_VISIBLE_DEVICES={})",
                std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "<unset>".into())
            )));
        }
    }
    Ok(())
}

/// `2.11.0+cu130` → (2, 11); `2.4.0a0+git` → (2, 4).
fn torch_version(s: &str) -> Option<(u32, u32)> {
    let mut parts = s.split('.');
    let num = |p: Option<&str>| -> Option<u32> {
        let digits: String = p?.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    Some((num(parts.next())?, num(parts.next())?))
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

#[derive(Debug, Deserialize)]
struct ProgressEvent {
    #[serde(default)]
    phase: String,
    #[serde(default)]
    step: u32,
    #[serde(default)]
    total: u32,
}

#[derive(Debug, Deserialize)]
struct ResultEvent {
    /// Which run of a grouped launch this is (absent in a one-run launch of an older script).
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    variant: Option<String>,
    params: u64,
    world_size: u32,
    step_time_median_s: f64,
    step_time_p90_s: f64,
    throughput: f64,
    throughput_unit: String,
    #[serde(default)]
    nocomm_step_time_median_s: Option<f64>,
    #[serde(default)]
    max_memory_bytes: Option<u64>,
    #[serde(default)]
    final_loss: Option<f64>,
    #[serde(default)]
    step_times_s: Vec<f64>,
}

#[derive(Debug, Deserialize)]
struct ErrorEvent {
    #[serde(default)]
    kind: String,
    message: String,
}

/// What a launch printed on stdout.
#[derive(Default)]
struct Collected {
    env: Option<TorchEnv>,
    results: Vec<ResultEvent>,
    /// Results the launch owes: once all are in, the process gets a short grace to exit.
    expected: usize,
    errors: Vec<ErrorEvent>,
    /// Lines that were not JSON objects with an `event`: the first few, and how many.
    garbage: Vec<String>,
    garbage_count: usize,
    /// Known events that did not parse.
    malformed: Vec<String>,
    warnings: Vec<String>,
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
    let gpus = if world == 1 { "GPU" } else { "GPUs" };
    let label = format!("{} {world} {gpus}", names.join(", "));
    let nocomm = ctx.measure_nocomm && world > 1 && items.iter().all(|(_, v)| !v.fsdp);
    let config = script_config(ctx.req, items, nocomm);
    let (program, args) = launch_argv(ctx.launcher, world, ctx.script, &config);
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
    let mut got = Collected {
        expected: items.len(),
        ..Collected::default()
    };
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
            let Some(ev) = pos.map(|i| events.remove(i)) else {
                let e = ProbeError::Worker(format!(
                    "{} {} on {world} {gpus}: the launch reported no result for this run",
                    model.name(),
                    variant.name
                ));
                return (launch, Err(e));
            };
            let outcome = check_result(&ev, world).map(|()| {
                if ev.params != model.params() {
                    launch.warnings.push(format!(
                        "the script's model has {} parameters, ddpcheck's formula {}",
                        ev.params,
                        model.params()
                    ));
                }
                launch.nocomm_step_median_s =
                    ev.nocomm_step_time_median_s.filter(|t| t.is_finite());
                launch.max_memory_bytes = ev.max_memory_bytes;
                launch.final_loss = ev.final_loss;
                launch.step_times_s = ev.step_times_s;
                DdpResult {
                    model: model.name(),
                    params: ev.params,
                    variant: variant.name.clone(),
                    world_size: world,
                    micro_batch: ctx.req.micro_batch,
                    accum: variant.accum,
                    step_time_median_s: ev.step_time_median_s,
                    step_time_p90_s: ev.step_time_p90_s,
                    throughput: ev.throughput,
                    throughput_unit: ev.throughput_unit,
                    speedup: None,
                    efficiency: None,
                    exposed_comm_fraction: None,
                    cost_per_million: None,
                    launch_step_medians_s: Vec::new(),
                }
            });
            (launch, outcome)
        })
        .collect()
}

/// Handles one stdout line; says [`Next::Done`] once every result is in.
fn on_line(line: Line<'_>, got: &mut Collected, label: &str, note: &mut dyn FnMut(String)) -> Next {
    let value = line.json;
    let line = line.text.trim();
    if line.is_empty() {
        return Next::More;
    }
    let event = value
        .as_ref()
        .and_then(|v| v.get("event"))
        .and_then(|e| e.as_str())
        .map(str::to_string);
    let (Some(value), Some(event)) = (value, event) else {
        got.garbage_count += 1;
        if got.garbage.len() < 3 {
            got.garbage.push(clip(line, 200));
        }
        return Next::More;
    };
    let mut malformed = |e: serde_json::Error| {
        got.malformed
            .push(format!("{event} line: {e}: {}", clip(line, 200)));
    };
    match event.as_str() {
        "env" => match serde_json::from_value(value) {
            Ok(env) => got.env = Some(env),
            Err(e) => malformed(e),
        },
        "progress" => {
            if let Ok(p) = serde_json::from_value::<ProgressEvent>(value) {
                let what = match p.phase.as_str() {
                    "ready" => "model ready, warming up".to_string(),
                    "nocomm" => format!("no-communication step {}/{}", p.step, p.total),
                    _ => format!("step {}/{}", p.step, p.total),
                };
                note(format!("{label}: {what}"));
            }
        }
        "result" => match serde_json::from_value::<ResultEvent>(value) {
            Ok(r) if got.results.len() < got.expected => {
                got.results.push(r);
                if got.results.len() == got.expected {
                    return Next::Done;
                }
            }
            Ok(_) => got
                .warnings
                .push("more result lines than runs; the first ones count".into()),
            Err(e) => malformed(e),
        },
        "error" => match serde_json::from_value::<ErrorEvent>(value) {
            Ok(e) => got.errors.push(e),
            Err(e) => malformed(e),
        },
        _ => {} // a newer script's event: not ours to judge
    }
    Next::More
}

/// Maps how the launch ended to its result or error.
fn judge(
    label: &str,
    deadline_s: f64,
    f: &Ended,
    got: &mut Collected,
) -> Result<Vec<ResultEvent>, ProbeError> {
    if let Some(first) = got.errors.first() {
        let others = got.errors.len() - 1;
        let mut msg = format!("{label}: {}", first.message);
        if others > 0 {
            msg.push_str(&format!(" (and {others} more rank error(s))"));
        }
        return Err(match first.kind.as_str() {
            "unavailable" => ProbeError::Unavailable(msg),
            "invalid" => ProbeError::Invalid(msg),
            _ => ProbeError::Worker(msg),
        });
    }
    if !got.results.is_empty() {
        let r = std::mem::take(&mut got.results);
        if r.len() < got.expected {
            got.warnings.push(format!(
                "{} of {} runs reported before the launch ended",
                r.len(),
                got.expected
            ));
        }
        if f.stopped {
            got.warnings.push(format!(
                "did not exit after reporting its result and was stopped ({})",
                f.describe()
            ));
        } else if !f.success() {
            got.warnings.push(format!(
                "{} after reporting its result: {}",
                f.describe(),
                key_line(&f.stderr_tail).unwrap_or("no stderr")
            ));
        }
        if got.garbage_count > 0 {
            got.warnings.push(format!(
                "{} stdout line(s) were not JSON, e.g. {:?}",
                got.garbage_count,
                got.garbage.first().map(String::as_str).unwrap_or("")
            ));
        }
        return Ok(r);
    }
    if f.stopped {
        return Err(ProbeError::Timeout {
            stage: format!("DDP benchmark {label}"),
            seconds: deadline_s,
        });
    }
    let mut msg = format!("{label}: ");
    if f.success() {
        msg.push_str("the benchmark exited without a result line");
    } else {
        msg.push_str(&f.describe());
        if let Some(k) = key_line(&f.stderr_tail) {
            msg.push_str(": ");
            msg.push_str(k);
        }
    }
    if let Some(m) = got.malformed.first() {
        msg.push_str(&format!("; malformed {m}"));
    }
    if got.garbage_count > 0 {
        msg.push_str(&format!(
            "; its stdout was not JSON lines ({} line(s), first {:?})",
            got.garbage_count,
            got.garbage.first().map(String::as_str).unwrap_or("")
        ));
    }
    let tail = tail_summary(&f.stderr_tail, 6);
    if !tail.is_empty() {
        msg.push_str("; stderr tail: ");
        msg.push_str(&tail);
    }
    Err(ProbeError::Worker(clip(&msg, 2000)))
}

fn check_result(r: &ResultEvent, world: u32) -> Result<(), ProbeError> {
    if r.world_size != world {
        return Err(ProbeError::Worker(format!(
            "the benchmark reported world size {} for a launch on {world} GPU(s)",
            r.world_size
        )));
    }
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !(positive(r.step_time_median_s) && positive(r.step_time_p90_s) && positive(r.throughput)) {
        return Err(ProbeError::Worker(format!(
            "the benchmark reported non-positive times or throughput (median {} s, p90 {} s, {} {})",
            r.step_time_median_s, r.step_time_p90_s, r.throughput, r.throughput_unit
        )));
    }
    Ok(())
}

fn describe_exit(status: &ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit code {code}");
    }
    match status.signal() {
        Some(sig) => {
            let name = match sig {
                libc::SIGKILL => " (SIGKILL)",
                libc::SIGTERM => " (SIGTERM)",
                libc::SIGSEGV => " (SIGSEGV)",
                libc::SIGABRT => " (SIGABRT)",
                libc::SIGBUS => " (SIGBUS)",
                _ => "",
            };
            format!("killed by signal {sig}{name}")
        }
        None => format!("{status}"),
    }
}

/// A line with letters or digits, without torch's `[rankN]:` prefix.
fn meaningful(line: &str) -> Option<&str> {
    let mut t = line.trim();
    if let Some(rest) = t.strip_prefix("[rank") {
        if let Some((_, after)) = rest.split_once("]:") {
            t = after.trim();
        }
    }
    t.chars().any(char::is_alphanumeric).then_some(t)
}

/// `SomeError: …` or `pkg.SomeException: …`, the last line of a Python traceback.
fn looks_like_exception(line: &str) -> bool {
    let Some((head, _)) = line.split_once(':') else {
        return false;
    };
    // torchrun's own wrapper error says only that a worker failed; the worker's line is better.
    !head.is_empty()
        && !head.ends_with("ChildFailedError")
        && head
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        && ["Error", "Exception", "Interrupt", "Exit"]
            .iter()
            .any(|s| head.ends_with(s))
}

/// The stderr line that best says what went wrong: our own `ddpcheck:` line, else the last
/// exception line, else the last line with words in it.
fn key_line(tail: &[String]) -> Option<&str> {
    let lines: Vec<&str> = tail.iter().filter_map(|l| meaningful(l)).collect();
    lines
        .iter()
        .rev()
        .find(|l| l.starts_with("ddpcheck: "))
        .or_else(|| lines.iter().rev().find(|l| looks_like_exception(l)))
        .or_else(|| lines.last())
        .copied()
}

fn tail_summary(tail: &[String], n: usize) -> String {
    let lines: Vec<&str> = tail.iter().filter_map(|l| meaningful(l)).collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &s[..cut])
}

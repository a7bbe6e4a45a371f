//! How a launch is built: the launcher (a Python interpreter or a torchrun), its argv, the
//! environment on top of ours, the benchmark's `--config` JSON, and the same command as one shell
//! line for a run by hand.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};

use ddpcheck_core::ddp::{
    CommHook, DdpRequest, DdpVariant, ModelSpec, Recipe, RunDevice, ALL_REDUCE_PROBE_BYTES,
    PLAIN_ROUNDS, SIZING_STEPS, SOLO_ROUNDS,
};
use ddpcheck_core::num::floor_u64;
use ddpcheck_core::ProbeError;
use serde::Serialize;

use super::PINNED_ENV;
use crate::RealConfig;

/// How the script is started.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Launcher {
    /// An interpreter, run as `PYTHON -m torch.distributed.run`.
    Python(String),
    /// A torchrun executable, called directly; `python` is the interpreter of its shebang.
    Torchrun {
        torchrun: String,
        python: Option<String>,
    },
}

impl Launcher {
    pub(super) fn probe_python(&self) -> Option<&str> {
        match self {
            Launcher::Python(p) => Some(p),
            Launcher::Torchrun { python, .. } => python.as_deref(),
        }
    }
}

pub(super) fn launcher(cfg: &RealConfig) -> Result<Launcher, ProbeError> {
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
pub(super) fn shebang_python(path: &Path) -> Option<String> {
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

/// The interpreter of a CPU launch: the script starts its own ranks there (Debian's torchrun
/// fails at start on Python 3.11), so a torchrun without a Python shebang cannot run one.
pub(super) fn cpu_python(launcher: &Launcher) -> Result<String, ProbeError> {
    launcher.probe_python().map(str::to_string).ok_or_else(|| {
        ProbeError::Unavailable(
            "--device cpu runs the script with a Python interpreter: set DDPCHECK_PYTHON to a python3 with torch"
                .into(),
        )
    })
}

pub(super) fn launch_argv(
    launcher: &Launcher,
    world: u32,
    script: &Path,
    config_json: &str,
    device: RunDevice,
) -> (String, Vec<String>) {
    let mut args: Vec<String> = Vec::new();
    if device == RunDevice::Cpu {
        // One process, rank 0, which starts ranks 1..N-1 itself (the config says how many).
        let python = launcher.probe_python().unwrap_or("python3").to_string();
        args.extend([
            script.display().to_string(),
            "--config".into(),
            config_json.to_string(),
        ]);
        return (python, args);
    }
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
pub(super) fn env_overrides(req: &DdpRequest, variant: &DdpVariant) -> Vec<(String, String)> {
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
    if req.recipe.compile.is_some() {
        for (k, v) in compile_cache_env(&|k| std::env::var_os(k)) {
            set(&mut out, &k, &v);
        }
    }
    for (k, v) in req.env.iter().chain(&variant.env) {
        set(&mut out, k, v);
    }
    for (k, v) in PINNED_ENV {
        set(&mut out, k, v);
    }
    out
}

/// The compile cache of a compiled launch, kept across launches: `TORCHINDUCTOR_CACHE_DIR` (the
/// FX graph and kernel caches) and `TRITON_CACHE_DIR` under ddpcheck's cache folder, the one
/// `CUDA_CACHE_PATH` sits in under the daemon's unit (its parent), else `$XDG_CACHE_HOME/ddpcheck`,
/// else `$HOME/.cache/ddpcheck`. torch's own default is a folder under /tmp, which the unit's
/// PrivateTmp empties at each restart. A variable the caller set stays theirs.
pub(super) fn compile_cache_env(
    var: &dyn Fn(&str) -> Option<std::ffi::OsString>,
) -> Vec<(String, String)> {
    let set = |k: &str| var(k).filter(|v| !v.is_empty());
    let root = set("CUDA_CACHE_PATH")
        .and_then(|p| Path::new(&p).parent().map(Path::to_path_buf))
        .filter(|p| !p.as_os_str().is_empty())
        .or_else(|| set("XDG_CACHE_HOME").map(|x| Path::new(&x).join("ddpcheck")))
        .or_else(|| set("HOME").map(|h| Path::new(&h).join(".cache").join("ddpcheck")));
    let Some(root) = root else {
        return Vec::new();
    };
    [
        ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
        ("TRITON_CACHE_DIR", "triton"),
    ]
    .into_iter()
    .filter(|(k, _)| set(k).is_none())
    .filter_map(|(k, sub)| Some((k.to_string(), root.join(sub).to_str()?.to_string())))
    .collect()
}

pub(super) fn effective_nccl_env(overrides: &[(String, String)]) -> BTreeMap<String, String> {
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
    /// How ddpcheck names a model built by code (its results are matched by name).
    #[serde(skip_serializing_if = "Option::is_none")]
    model_name: Option<String>,
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
    /// 0 leaves the key out: a config the script of an older release reads the same.
    #[serde(skip_serializing_if = "is_zero")]
    min_timed_s: f64,
    nccl_timeout_s: u32,
    measure_nocomm: bool,
    /// Left out when off: a config the script of an older release reads the same.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    plain_reference: bool,
    all_reduce_probe_bytes: &'static [u64],
    recipe: &'a Recipe,
    /// Left out for CUDA: a config the script of an older release reads the same.
    #[serde(skip_serializing_if = "RunDevice::is_cuda")]
    device: RunDevice,
    /// The ranks a CPU launch starts (a CUDA launch's come from torchrun).
    #[serde(skip_serializing_if = "Option::is_none")]
    world_size: Option<u32>,
    /// Importing and calling a model's factory, within a quarter of the launch's deadline
    /// (at most a minute): a hang there is one line, the launch's deadline the backstop.
    #[serde(skip_serializing_if = "Option::is_none")]
    factory_deadline_s: Option<f64>,
    /// The counts the launch budget (engine's `recommend::budget`) counts on, so that the
    /// benchmark runs exactly those: steps that size a run, rounds of one GPU alone and of the
    /// plain reference.
    sizing_steps: u32,
    solo_rounds: u32,
    plain_rounds: u32,
}

#[derive(Serialize)]
struct ScriptVariant<'a> {
    name: &'a str,
    hook: CommHook,
    accum: u32,
    bucket_cap_mb: Option<f64>,
    gradient_as_bucket_view: bool,
    fsdp: bool,
    /// The wrapper by name (`ddp`, `replicate`, `fsdp`, `fsdp-noreshard`, `hsdp`).
    wrapper: &'static str,
    nocomm: bool,
    /// PowerSGD's rank, with the PowerSGD hook only.
    #[serde(skip_serializing_if = "Option::is_none")]
    powersgd_rank: Option<u32>,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// The `--config` JSON of one launch of `items` (model, variant) pairs.
pub(super) fn script_config(
    req: &DdpRequest,
    items: &[(&ModelSpec, &DdpVariant)],
    world: u32,
    measure_nocomm: bool,
) -> String {
    let mut runs: Vec<ScriptRun<'_>> = items
        .iter()
        .map(|(model, variant)| ScriptRun {
            model,
            model_name: model.source().map(|_| model.name()),
            variant: ScriptVariant {
                name: &variant.name,
                hook: variant.hook,
                accum: variant.accum,
                bucket_cap_mb: variant.bucket_cap_mb,
                gradient_as_bucket_view: variant.gradient_as_bucket_view,
                fsdp: variant.fsdp,
                wrapper: variant.wrapper().as_str(),
                nocomm: variant.nocomm,
                powersgd_rank: (variant.hook == CommHook::PowerSgd)
                    .then(|| variant.powersgd_rank()),
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
        min_timed_s: req.min_timed_s,
        // NCCL's own watchdog: well inside the launch deadline, never absurdly short.
        nccl_timeout_s: u32::try_from(floor_u64((req.deadline_s * 0.5).clamp(30.0, 600.0)))
            .unwrap_or(600),
        measure_nocomm,
        plain_reference: req.plain_blocks_at(world),
        all_reduce_probe_bytes: &ALL_REDUCE_PROBE_BYTES,
        recipe: &req.recipe,
        device: req.device,
        world_size: (req.device == RunDevice::Cpu).then_some(world),
        factory_deadline_s: items
            .iter()
            .any(|(m, _)| m.source().is_some())
            .then(|| (req.deadline_s / 4.0).clamp(1.0, 60.0)),
        sizing_steps: SIZING_STEPS,
        solo_rounds: SOLO_ROUNDS,
        plain_rounds: PLAIN_ROUNDS,
    };
    // Strings, integers and finite floats: serialising cannot fail.
    serde_json::to_string(&c).unwrap_or_default()
}

/// `s` quoted for a POSIX shell (bare when it is plainly safe).
pub(super) fn sh_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./:=@%+,-".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

pub(super) fn command_line(env: &[(String, String)], program: &str, args: &[String]) -> String {
    env.iter()
        .map(|(k, v)| format!("{k}={}", sh_quote(v)))
        .chain(std::iter::once(sh_quote(program)))
        .chain(args.iter().map(|a| sh_quote(a)))
        .collect::<Vec<_>>()
        .join(" ")
}

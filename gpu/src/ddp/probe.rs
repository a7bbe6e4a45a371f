//! The torch check before any launch: what the interpreter says about its torch (a few seconds
//! of `python3 -c`), judged into one clear line when it cannot run the benchmark.

use std::process::Command;
use std::time::Duration;

use ddpcheck_core::ddp::RunDevice;
use ddpcheck_core::ProbeError;

use super::outcome::{clip, key_line, Ended};
use super::{supervise_options, TorchProbe, MIN_TORCH, MIN_TORCH_CPU, PINNED_ENV, PROBE};
use crate::supervise::{self, Next};

pub(super) fn probe_torch(python: &str, deadline: Duration) -> Result<TorchProbe, ProbeError> {
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

pub(super) fn check_probe(
    p: &TorchProbe,
    python: &str,
    max_world: u32,
    device: RunDevice,
) -> Result<(), ProbeError> {
    let unavailable = |m: String| Err(ProbeError::Unavailable(m));
    if let Some(e) = &p.error {
        return unavailable(e.clone());
    }
    let exe = p.python.as_deref().unwrap_or(python);
    let Some(version) = p.torch.as_deref() else {
        return unavailable(format!("{exe} reported no torch version"));
    };
    let (need, on) = match device {
        RunDevice::Cuda => (MIN_TORCH, ""),
        RunDevice::Cpu => (MIN_TORCH_CPU, " on CPU"),
    };
    match torch_version(version) {
        Some(v) if v >= need => {}
        Some(_) => {
            return unavailable(format!(
                "torch {version} at {exe} is too old: the DDP benchmark needs torch ≥ {}.{}{on}",
                need.0, need.1
            ))
        }
        None => {
            return unavailable(format!(
                "torch at {exe} has an unreadable version {version:?}"
            ))
        }
    }
    if device == RunDevice::Cpu {
        // gloo on CPU processes: no CUDA, NCCL or GPU count to check.
        return Ok(());
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
pub(super) fn torch_version(s: &str) -> Option<(u32, u32)> {
    let mut parts = s.split('.');
    let num = |p: Option<&str>| -> Option<u32> {
        let digits: String = p?.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    Some((num(parts.next())?, num(parts.next())?))
}

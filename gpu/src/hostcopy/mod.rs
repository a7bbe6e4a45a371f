//! Host↔device copies on each GPU's own link: the parent side starts `EXE worker host-copies`
//! under [`crate::supervise`] (own process group, the request's deadline, SIGTERM→SIGKILL) with
//! the request on stdin and reads its events as the NCCL sweep's; [`measure`] runs in the child.

pub mod measure;

use std::process::Command;

use ddpcheck_core::backend::Progress;
use ddpcheck_core::hostcopy::{CopyRequest, HostCopyRun};
use ddpcheck_core::ProbeError;

use crate::nccl::{ParentState, WorkerKind};
use crate::supervise::{self, Options};
use crate::RealConfig;

/// Times the request's copies in a supervised `worker host-copies` child of `cfg.worker_exe`.
pub fn run_host_copies(
    cfg: &RealConfig,
    req: &CopyRequest,
    progress: &mut dyn FnMut(Progress),
) -> Result<HostCopyRun, ProbeError> {
    req.validate()?;
    let mut cmd = Command::new(&cfg.worker_exe);
    cmd.args(["worker", crate::worker::HOST_COPIES_ARG]);
    supervise::keep_multicast_off(&mut cmd);
    run_copy_worker(cmd, req, &Options::new(req.deadline), progress)
}

/// Supervises an already built host-copy worker command (tests use another executable).
pub fn run_copy_worker(
    cmd: Command,
    req: &CopyRequest,
    opts: &Options,
    progress: &mut dyn FnMut(Progress),
) -> Result<HostCopyRun, ProbeError> {
    let input = serde_json::to_vec(req)
        .map_err(|e| ProbeError::Worker(format!("encoding the host-copy request: {e}")))?;
    let mut st = ParentState::default();
    let res = supervise::run_json_lines_with(cmd, Some(input), opts, |v| st.on_value(v, progress));
    st.conclude(res, req.deadline, WorkerKind::HostCopies, |s| {
        s.copies.take()
    })
}

#[cfg(test)]
mod tests;

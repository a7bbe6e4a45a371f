//! What the driver, the rank threads and the watchdog share: failures with their kind, the
//! abortable state, and the ranks' messages.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use ddpcheck_core::backend::CollectiveRun;

use crate::nccl::ffi::{self, Comm, CudaError, Nccl, NcclError};
use crate::nccl::protocol::FailKind;

/// A failure with the kind the parent maps to a verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub kind: FailKind,
    pub message: String,
}

impl Failure {
    pub fn new(kind: FailKind, message: impl Into<String>) -> Self {
        Failure {
            kind,
            message: message.into(),
        }
    }

    /// A CUDA error while finding and opening GPUs: mostly "cannot tell" (UNKNOWN).
    pub(crate) fn cuda_setup(e: CudaError, what: &str) -> Self {
        let kind = match e.code {
            46 | 216 => FailKind::Busy, // DEVICE_UNAVAILABLE (exclusive mode), CONTEXT_ALREADY_IN_USE
            214 | 220 => FailKind::GpuFailed, // uncorrectable ECC / NVLink
            // SYSTEM_NOT_READY: an NVSwitch system whose Fabric Manager is not up; no CUDA work
            // can start on the node, which is a broken node, not a missing library.
            802 => FailKind::GpuFailed,
            _ => FailKind::Unavailable,
        };
        let hint = match e.code {
            802 => " (the system is not ready: is nvidia-fabricmanager running?)",
            _ => "",
        };
        Failure::new(kind, format!("{what}: {e}{hint}"))
    }

    /// A CUDA error while measuring: hardware faults are GPU failures.
    pub(crate) fn cuda_run(e: CudaError, what: &str) -> Self {
        Failure::new(cuda_run_kind(e.code), format!("{what}: {e}"))
    }

    pub(super) fn nccl(e: NcclError, what: &str) -> Self {
        let kind = if ffi::nccl_error_is_cuda(&e) {
            FailKind::GpuFailed
        } else {
            FailKind::Worker
        };
        Failure::new(kind, format!("{what}: {e}"))
    }
}

pub(super) fn cuda_run_kind(code: i32) -> FailKind {
    match code {
        // ECC, NVLink, illegal address, hardware stack, illegal instruction, misaligned,
        // invalid address space, invalid PC, launch failed, unknown.
        214 | 220 | 700 | 714 | 715 | 716 | 717 | 718 | 719 | 999 => FailKind::GpuFailed,
        2 | 46 => FailKind::Busy,
        _ => FailKind::Worker,
    }
}

/// Failures from either library inside a rank.
pub(super) enum RankErr {
    Cuda(CudaError),
    Nccl(NcclError),
    Other(Failure),
}

impl From<CudaError> for RankErr {
    fn from(e: CudaError) -> Self {
        RankErr::Cuda(e)
    }
}
impl From<NcclError> for RankErr {
    fn from(e: NcclError) -> Self {
        RankErr::Nccl(e)
    }
}

/// State the watchdog shares with the measuring threads.
pub struct Shared {
    stage: Mutex<String>,
    pub(super) nccl: OnceLock<Arc<Nccl>>,
    comms: Mutex<Vec<Comm>>,
    /// Set before communicators are aborted: rank threads stop touching them.
    aborting: AtomicBool,
}

impl Default for Shared {
    fn default() -> Self {
        Self::new()
    }
}

impl Shared {
    pub fn new() -> Self {
        Shared {
            stage: Mutex::new("starting".into()),
            nccl: OnceLock::new(),
            comms: Mutex::new(Vec::new()),
            aborting: AtomicBool::new(false),
        }
    }

    pub fn set_stage(&self, s: impl Into<String>) {
        *self.stage.lock().unwrap_or_else(|p| p.into_inner()) = s.into();
    }

    pub fn stage(&self) -> String {
        self.stage.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(super) fn register(&self, c: Comm) {
        self.comms.lock().unwrap_or_else(|p| p.into_inner()).push(c);
    }

    /// Takes a communicator out of the watchdog's reach; false if an abort already has it.
    pub(super) fn unregister(&self, c: Comm) -> bool {
        let mut v = self.comms.lock().unwrap_or_else(|p| p.into_inner());
        if self.aborting.load(Ordering::SeqCst) {
            return false;
        }
        let before = v.len();
        v.retain(|x| *x != c);
        v.len() != before
    }

    /// Whether this run loaded NCCL (a host-copy run never does).
    pub fn nccl_loaded(&self) -> bool {
        self.nccl.get().is_some()
    }

    pub fn aborting(&self) -> bool {
        self.aborting.load(Ordering::SeqCst)
    }

    /// The first asynchronous error any communicator reports.
    pub fn async_error(&self) -> Option<NcclError> {
        let nccl = self.nccl.get()?;
        let v = self.comms.lock().unwrap_or_else(|p| p.into_inner());
        if self.aborting() {
            return None;
        }
        v.iter().find_map(|c| nccl.async_error(*c).err())
    }

    /// Aborts every registered communicator (kernels waiting on peers exit); returns a line per
    /// communicator. Holds the registry lock, so no rank can destroy one meanwhile.
    pub fn abort_all(&self) -> Vec<String> {
        // Flag first and give rank threads a moment to see it and park, so that none is
        // inside an NCCL call on a communicator while it is being freed.
        self.aborting.store(true, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
        let mut v = self.comms.lock().unwrap_or_else(|p| p.into_inner());
        let Some(nccl) = self.nccl.get() else {
            return Vec::new();
        };
        v.drain(..)
            .enumerate()
            .map(|(i, c)| {
                // SAFETY: registered communicators are live; after this they are never used
                // again (rank threads check `aborting` and park).
                match unsafe { nccl.abort(c) } {
                    Ok(()) => format!("communicator {i}: aborted"),
                    Err(e) => format!("communicator {i}: {e}"),
                }
            })
            .collect()
    }
}

/// What the rank threads tell the driver.
pub(super) enum Msg {
    Ready {
        rank: u32,
        init_s: f64,
    },
    Timed {
        rank: u32,
        oi: usize,
        si: usize,
        in_place: bool,
        dev_us: f64,
        host_us: f64,
        wrong: Option<u64>,
    },
    Failed {
        rank: u32,
        failure: Failure,
    },
}

/// One rank's result for one variant: (rank, device µs, host µs, wrong elements).
pub(super) type RankTiming = (u32, f64, f64, Option<u64>);

/// A finished sweep and the rank threads still tearing down.
pub struct Finished {
    pub run: CollectiveRun,
    pub ranks: Vec<JoinHandle<()>>,
}

pub(super) fn park_forever() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cuda(code: ffi::CUresult, name: &str) -> CudaError {
        CudaError {
            call: "cuInit".into(),
            code,
            name: name.into(),
            message: String::new(),
        }
    }

    /// A node whose NVSwitch fabric is not up fails its GPUs (CRITICAL); a missing device or an
    /// unknown setup error stays "could not tell".
    #[test]
    fn system_not_ready_at_setup_is_a_failed_node_not_a_missing_library() {
        let f = Failure::cuda_setup(cuda(802, "CUDA_ERROR_SYSTEM_NOT_READY"), "CUDA driver");
        assert_eq!(f.kind, FailKind::GpuFailed);
        assert!(f.message.contains("nvidia-fabricmanager"), "{}", f.message);
        let none = Failure::cuda_setup(cuda(100, "CUDA_ERROR_NO_DEVICE"), "CUDA driver");
        assert_eq!(none.kind, FailKind::Unavailable);
        let busy = Failure::cuda_setup(cuda(46, "CUDA_ERROR_DEVICE_UNAVAILABLE"), "CUDA driver");
        assert_eq!(busy.kind, FailKind::Busy);
    }
}

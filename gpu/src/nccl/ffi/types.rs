//! The CUDA driver's and NCCL's types and constants as `cuda.h` and `nccl.h` define them, and the
//! errors of their calls.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::fmt;

pub type CUresult = c_int;
pub type CUdevice = c_int;
pub type CUcontext = *mut c_void;
pub type CUstream = *mut c_void;
pub type CUevent = *mut c_void;
pub type CUdeviceptr = u64;

pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_READY: CUresult = 600;
/// `CU_STREAM_NON_BLOCKING`: no implicit sync with the legacy default stream (as nccl-tests).
pub const CU_STREAM_NON_BLOCKING: c_uint = 1;
pub const CU_EVENT_DEFAULT: c_uint = 0;
/// `CU_MEMHOSTALLOC_PORTABLE`: the pinned buffer counts as pinned in every context, so one
/// buffer serves each GPU in turn.
pub const CU_MEMHOSTALLOC_PORTABLE: c_uint = 1;

pub type NcclResult = c_int;
pub type NcclComm = *mut c_void;
pub type NcclDataType = c_int;
pub type NcclRedOp = c_int;

pub const NCCL_SUCCESS: NcclResult = 0;
pub const NCCL_UNHANDLED_CUDA_ERROR: NcclResult = 1;
pub const NCCL_IN_PROGRESS: NcclResult = 7;
pub const NCCL_FLOAT32: NcclDataType = 7;
pub const NCCL_SUM: NcclRedOp = 0;

/// `ncclUniqueId`: `NCCL_UNIQUE_ID_BYTES` (128) opaque bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NcclUniqueId {
    pub internal: [c_char; 128],
}

/// A communicator handle that may cross threads (the watchdog aborts communicators it did
/// not create; NCCL allows `ncclCommAbort`/`ncclCommGetAsyncError` from another thread).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Comm(pub NcclComm);
// SAFETY: a communicator is an opaque handle; NCCL documents abort and async-error queries as
// callable from a thread other than the one issuing operations.
unsafe impl Send for Comm {}
// SAFETY: as for `Send`: the handle is only passed to the calls NCCL allows from any thread.
unsafe impl Sync for Comm {}

/// A failed CUDA driver call.
#[derive(Clone, Debug, PartialEq)]
pub struct CudaError {
    pub call: String,
    pub code: CUresult,
    pub name: String,
    pub message: String,
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} failed: {} ({}): {}",
            self.call, self.name, self.code, self.message
        )
    }
}

/// A failed NCCL call (or an asynchronous error found on a communicator).
#[derive(Clone, Debug, PartialEq)]
pub struct NcclError {
    pub call: String,
    pub code: NcclResult,
    pub message: String,
    /// `ncclGetLastError`, where the library has it: usually the useful part.
    pub last: String,
}

impl fmt::Display for NcclError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {} ({})", self.call, self.message, self.code)?;
        if !self.last.is_empty() {
            write!(f, ": {}", self.last)?;
        }
        Ok(())
    }
}

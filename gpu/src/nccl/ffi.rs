//! Thin run-time FFI to the CUDA driver API (`libcuda.so.1`) and NCCL (`libnccl.so.2`): tables of
//! function pointers filled by dlopen/dlsym, with checked wrappers. Nothing is linked at build time.
//!
//! Types and enum values follow `cuda.h` and `nccl.h` (2.18+): `CUdeviceptr` is 64-bit,
//! `ncclUniqueId` is a 128-byte struct passed by value, `ncclComm_t` is a pointer,
//! `ncclFloat32 = 7`, `ncclSum = 0`, `ncclSuccess = 0`, `ncclInProgress = 7`.

mod cuda;
mod nccl;
mod symbol;
mod types;

pub use cuda::{Cuda, Event, HostCopyCalls, Pinned, Stream};
pub use nccl::{nccl_error_is_cuda, Nccl};
pub use types::*;

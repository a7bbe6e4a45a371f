//! Thin run-time FFI to the CUDA driver API (`libcuda.so.1`) and NCCL (`libnccl.so.2`): tables of
//! function pointers filled by dlopen/dlsym, with checked wrappers. Nothing is linked at build time.
//!
//! Types and enum values follow `cuda.h` and `nccl.h` (2.18+): `CUdeviceptr` is 64-bit,
//! `ncclUniqueId` is a 128-byte struct passed by value, `ncclComm_t` is a pointer,
//! `ncclFloat32 = 7`, `ncclSum = 0`, `ncclSuccess = 0`, `ncclInProgress = 7`.

use std::ffi::{c_char, c_float, c_int, c_uint, c_void, CStr};
use std::fmt;
use std::path::{Path, PathBuf};

use libloading::os::unix::Library;

use super::loader::{self, LoadError};

// ---- CUDA driver API types -------------------------------------------------------------------

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

type FnHostAlloc = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> CUresult;
type FnCopyHtoDAsync =
    unsafe extern "C" fn(CUdeviceptr, *const c_void, usize, CUstream) -> CUresult;
type FnCopyDtoHAsync = unsafe extern "C" fn(*mut c_void, CUdeviceptr, usize, CUstream) -> CUresult;

/// The calls host-copy timing needs beyond the sweep's; looked up apart, so a driver without
/// one still runs collectives and only this measurement is skipped.
#[derive(Clone, Copy)]
pub struct HostCopyCalls {
    host_alloc: FnHostAlloc,
    htod_async: FnCopyHtoDAsync,
    dtoh_async: FnCopyDtoHAsync,
}

/// Page-locked host memory from `cuMemHostAlloc`; released with the process (the worker ends
/// by `_exit` right after its result, and unpinning 256 MiB would only delay that).
#[derive(Debug)]
pub struct Pinned {
    ptr: *mut c_void,
    len: usize,
}

/// A stream created by [`Cuda::stream`]; only the driver makes these.
#[derive(Clone, Copy, Debug)]
pub struct Stream(CUstream);

/// An event created by [`Cuda::event`].
#[derive(Clone, Copy, Debug)]
pub struct Event(CUevent);

// ---- NCCL types -------------------------------------------------------------------------------

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

// ---- errors -----------------------------------------------------------------------------------

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

// ---- symbol lookup ----------------------------------------------------------------------------

fn sym<T: Copy>(lib: &Library, path: &Path, name: &str) -> Result<T, LoadError> {
    let mut cname = name.as_bytes().to_vec();
    cname.push(0);
    // SAFETY: T is the C signature of `name` as declared in cuda.h / nccl.h; the pointer is
    // only used while `lib` (kept in the same table) is loaded.
    unsafe { lib.get::<T>(&cname) }
        .map(|s| *s)
        .map_err(|e| LoadError::Symbol {
            path: path.display().to_string(),
            symbol: name.to_string(),
            detail: e.to_string(),
        })
}

fn opt_sym<T: Copy>(lib: &Library, path: &Path, name: &str) -> Option<T> {
    sym(lib, path, name).ok()
}

fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the libraries return NUL-terminated static strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

// ---- CUDA -------------------------------------------------------------------------------------

type FnU = unsafe extern "C" fn(c_uint) -> CUresult;
type FnPInt = unsafe extern "C" fn(*mut c_int) -> CUresult;

/// The CUDA driver API functions the worker uses.
pub struct Cuda {
    pub path: PathBuf,
    init: FnU,
    driver_get_version: FnPInt,
    device_get_count: FnPInt,
    device_get: unsafe extern "C" fn(*mut CUdevice, c_int) -> CUresult,
    device_get_by_pci_bus_id: unsafe extern "C" fn(*mut CUdevice, *const c_char) -> CUresult,
    device_get_pci_bus_id: Option<unsafe extern "C" fn(*mut c_char, c_int, CUdevice) -> CUresult>,
    device_get_name: Option<unsafe extern "C" fn(*mut c_char, c_int, CUdevice) -> CUresult>,
    primary_ctx_retain: unsafe extern "C" fn(*mut CUcontext, CUdevice) -> CUresult,
    ctx_set_current: unsafe extern "C" fn(CUcontext) -> CUresult,
    ctx_synchronize: unsafe extern "C" fn() -> CUresult,
    mem_get_info: Option<unsafe extern "C" fn(*mut usize, *mut usize) -> CUresult>,
    mem_alloc: unsafe extern "C" fn(*mut CUdeviceptr, usize) -> CUresult,
    mem_free: unsafe extern "C" fn(CUdeviceptr) -> CUresult,
    memcpy_htod: unsafe extern "C" fn(CUdeviceptr, *const c_void, usize) -> CUresult,
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, CUdeviceptr, usize) -> CUresult,
    memset_d32: unsafe extern "C" fn(CUdeviceptr, c_uint, usize) -> CUresult,
    stream_create: unsafe extern "C" fn(*mut CUstream, c_uint) -> CUresult,
    stream_query: unsafe extern "C" fn(CUstream) -> CUresult,
    stream_synchronize: unsafe extern "C" fn(CUstream) -> CUresult,
    event_create: unsafe extern "C" fn(*mut CUevent, c_uint) -> CUresult,
    event_record: unsafe extern "C" fn(CUevent, CUstream) -> CUresult,
    event_synchronize: unsafe extern "C" fn(CUevent) -> CUresult,
    event_elapsed_time: unsafe extern "C" fn(*mut c_float, CUevent, CUevent) -> CUresult,
    get_error_string: unsafe extern "C" fn(CUresult, *mut *const c_char) -> CUresult,
    get_error_name: Option<unsafe extern "C" fn(CUresult, *mut *const c_char) -> CUresult>,
    /// `Err(symbol)`: the first host-copy call the library lacks.
    host_copy: Result<HostCopyCalls, &'static str>,
    // Keep the library loaded for as long as the pointers above live.
    _lib: Library,
}

impl Cuda {
    /// Opens libcuda (explicit path, else `libcuda.so.1` on the loader path, else system folders).
    pub fn load(explicit: Option<&Path>) -> Result<Cuda, LoadError> {
        let (lib, path) = loader::open_cuda(explicit)?;
        let p = path.as_path();
        Ok(Cuda {
            init: sym(&lib, p, "cuInit")?,
            driver_get_version: sym(&lib, p, "cuDriverGetVersion")?,
            device_get_count: sym(&lib, p, "cuDeviceGetCount")?,
            device_get: sym(&lib, p, "cuDeviceGet")?,
            device_get_by_pci_bus_id: sym(&lib, p, "cuDeviceGetByPCIBusId")?,
            device_get_pci_bus_id: opt_sym(&lib, p, "cuDeviceGetPCIBusId"),
            device_get_name: opt_sym(&lib, p, "cuDeviceGetName"),
            primary_ctx_retain: sym(&lib, p, "cuDevicePrimaryCtxRetain")?,
            ctx_set_current: sym(&lib, p, "cuCtxSetCurrent")?,
            ctx_synchronize: sym(&lib, p, "cuCtxSynchronize")?,
            mem_get_info: opt_sym(&lib, p, "cuMemGetInfo_v2"),
            mem_alloc: sym(&lib, p, "cuMemAlloc_v2")?,
            mem_free: sym(&lib, p, "cuMemFree_v2")?,
            memcpy_htod: sym(&lib, p, "cuMemcpyHtoD_v2")?,
            memcpy_dtoh: sym(&lib, p, "cuMemcpyDtoH_v2")?,
            memset_d32: sym(&lib, p, "cuMemsetD32_v2")?,
            stream_create: sym(&lib, p, "cuStreamCreate")?,
            stream_query: sym(&lib, p, "cuStreamQuery")?,
            stream_synchronize: sym(&lib, p, "cuStreamSynchronize")?,
            event_create: sym(&lib, p, "cuEventCreate")?,
            event_record: sym(&lib, p, "cuEventRecord")?,
            event_synchronize: sym(&lib, p, "cuEventSynchronize")?,
            // CUDA 12.8+ headers map cuEventElapsedTime to the _v2 entry point; same signature.
            event_elapsed_time: match opt_sym(&lib, p, "cuEventElapsedTime_v2") {
                Some(f) => f,
                None => sym(&lib, p, "cuEventElapsedTime")?,
            },
            get_error_string: sym(&lib, p, "cuGetErrorString")?,
            get_error_name: opt_sym(&lib, p, "cuGetErrorName"),
            host_copy: host_copy_calls(&lib, p),
            path,
            _lib: lib,
        })
    }

    fn err(&self, call: &str, code: CUresult) -> CudaError {
        let mut s: *const c_char = std::ptr::null();
        // SAFETY: out-pointer to a static string; on failure `s` stays null.
        unsafe { (self.get_error_string)(code, &mut s) };
        let message = cstr(s);
        let mut n: *const c_char = std::ptr::null();
        if let Some(f) = self.get_error_name {
            // SAFETY: as above.
            unsafe { f(code, &mut n) };
        }
        let name = if n.is_null() {
            format!("CUDA error {code}")
        } else {
            cstr(n)
        };
        CudaError {
            call: call.to_string(),
            code,
            name,
            message,
        }
    }

    fn ck(&self, call: &str, code: CUresult) -> Result<(), CudaError> {
        if code == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(self.err(call, code))
        }
    }

    pub fn init(&self) -> Result<(), CudaError> {
        // SAFETY: plain C call with a flags argument that must be 0.
        self.ck("cuInit", unsafe { (self.init)(0) })
    }

    /// `cuDriverGetVersion`, e.g. 13000 for CUDA 13.0.
    pub fn driver_version(&self) -> Result<i32, CudaError> {
        let mut v: c_int = 0;
        // SAFETY: valid out-pointer.
        self.ck("cuDriverGetVersion", unsafe {
            (self.driver_get_version)(&mut v)
        })?;
        Ok(v)
    }

    pub fn device_count(&self) -> Result<i32, CudaError> {
        let mut v: c_int = 0;
        // SAFETY: valid out-pointer.
        self.ck("cuDeviceGetCount", unsafe {
            (self.device_get_count)(&mut v)
        })?;
        Ok(v)
    }

    pub fn device(&self, ordinal: i32) -> Result<CUdevice, CudaError> {
        let mut d: CUdevice = 0;
        // SAFETY: valid out-pointer.
        self.ck("cuDeviceGet", unsafe { (self.device_get)(&mut d, ordinal) })?;
        Ok(d)
    }

    /// The CUDA device with this PCI bus id (`0000:1b:00.0` or NVML's `00000000:1B:00.0`).
    pub fn device_by_bus_id(&self, bus_id: &str) -> Result<CUdevice, CudaError> {
        let c = std::ffi::CString::new(bus_id).map_err(|_| CudaError {
            call: "cuDeviceGetByPCIBusId".into(),
            code: 1,
            name: "CUDA_ERROR_INVALID_VALUE".into(),
            message: format!("bus id {bus_id:?} contains a NUL byte"),
        })?;
        let mut d: CUdevice = 0;
        // SAFETY: NUL-terminated string and valid out-pointer.
        self.ck(&format!("cuDeviceGetByPCIBusId({bus_id})"), unsafe {
            (self.device_get_by_pci_bus_id)(&mut d, c.as_ptr())
        })?;
        Ok(d)
    }

    /// The device's PCI bus id as CUDA writes it, when the driver has the call.
    pub fn bus_id(&self, dev: CUdevice) -> Option<String> {
        let f = self.device_get_pci_bus_id?;
        let mut buf = [0 as c_char; 64];
        // SAFETY: buffer and its length.
        let r = unsafe { f(buf.as_mut_ptr(), crate::int::c_int_of(buf.len()), dev) };
        (r == CUDA_SUCCESS).then(|| cstr(buf.as_ptr()))
    }

    pub fn name(&self, dev: CUdevice) -> Option<String> {
        let f = self.device_get_name?;
        let mut buf = [0 as c_char; 256];
        // SAFETY: buffer and its length.
        let r = unsafe { f(buf.as_mut_ptr(), crate::int::c_int_of(buf.len()), dev) };
        (r == CUDA_SUCCESS).then(|| cstr(buf.as_ptr()))
    }

    /// Retains the device's primary context (the one the CUDA runtime inside NCCL uses) and
    /// makes it current on this thread.
    pub fn use_primary_context(&self, dev: CUdevice) -> Result<(), CudaError> {
        let mut ctx: CUcontext = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the context stays retained for the life of the process.
        self.ck("cuDevicePrimaryCtxRetain", unsafe {
            (self.primary_ctx_retain)(&mut ctx, dev)
        })?;
        // SAFETY: ctx was just returned by the driver.
        self.ck("cuCtxSetCurrent", unsafe { (self.ctx_set_current)(ctx) })
    }

    pub fn ctx_synchronize(&self) -> Result<(), CudaError> {
        // SAFETY: operates on the current context.
        self.ck("cuCtxSynchronize", unsafe { (self.ctx_synchronize)() })
    }

    /// (free, total) bytes of the current context's device, when the driver has the call.
    pub fn mem_info(&self) -> Option<(u64, u64)> {
        let f = self.mem_get_info?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        let r = unsafe { f(&mut free, &mut total) };
        (r == CUDA_SUCCESS).then_some((free as u64, total as u64))
    }

    pub fn alloc(&self, bytes: u64) -> Result<CUdeviceptr, CudaError> {
        let mut p: CUdeviceptr = 0;
        // SAFETY: valid out-pointer; freed by `free`.
        self.ck(&format!("cuMemAlloc({bytes} B)"), unsafe {
            (self.mem_alloc)(&mut p, crate::int::size_t(bytes))
        })?;
        Ok(p)
    }

    pub fn free(&self, p: CUdeviceptr) -> Result<(), CudaError> {
        // SAFETY: p came from `alloc` in this context.
        self.ck("cuMemFree", unsafe { (self.mem_free)(p) })
    }

    pub fn copy_to_device(&self, dst: CUdeviceptr, src: &[f32]) -> Result<(), CudaError> {
        // SAFETY: src is a live host slice of exactly the bytes copied; dst is a device range
        // the caller sized.
        self.ck("cuMemcpyHtoD", unsafe {
            (self.memcpy_htod)(dst, src.as_ptr().cast(), std::mem::size_of_val(src))
        })
    }

    pub fn copy_to_host(&self, dst: &mut [f32], src: CUdeviceptr) -> Result<(), CudaError> {
        // SAFETY: dst is a live host slice of exactly the bytes copied.
        self.ck("cuMemcpyDtoH", unsafe {
            (self.memcpy_dtoh)(dst.as_mut_ptr().cast(), src, std::mem::size_of_val(dst))
        })
    }

    pub fn memset_u32(&self, dst: CUdeviceptr, value: u32, words: u64) -> Result<(), CudaError> {
        // SAFETY: device range sized by the caller.
        self.ck("cuMemsetD32", unsafe {
            (self.memset_d32)(dst, value, crate::int::size_t(words))
        })
    }

    pub fn stream(&self) -> Result<Stream, CudaError> {
        let mut s: CUstream = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        self.ck("cuStreamCreate", unsafe {
            (self.stream_create)(&mut s, CU_STREAM_NON_BLOCKING)
        })?;
        Ok(Stream(s))
    }

    /// `Ok(true)` when all work on the stream is done, `Ok(false)` while it runs.
    pub fn stream_done(&self, s: Stream) -> Result<bool, CudaError> {
        // SAFETY: s came from `stream`.
        match unsafe { (self.stream_query)(s.0) } {
            CUDA_SUCCESS => Ok(true),
            CUDA_ERROR_NOT_READY => Ok(false),
            code => Err(self.err("cuStreamQuery", code)),
        }
    }

    pub fn stream_synchronize(&self, s: Stream) -> Result<(), CudaError> {
        // SAFETY: s came from `stream`.
        self.ck("cuStreamSynchronize", unsafe {
            (self.stream_synchronize)(s.0)
        })
    }

    pub fn event(&self) -> Result<Event, CudaError> {
        let mut e: CUevent = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        self.ck("cuEventCreate", unsafe {
            (self.event_create)(&mut e, CU_EVENT_DEFAULT)
        })?;
        Ok(Event(e))
    }

    pub fn record(&self, e: Event, s: Stream) -> Result<(), CudaError> {
        // SAFETY: handles from `event` and `stream` in the current context.
        self.ck("cuEventRecord", unsafe { (self.event_record)(e.0, s.0) })
    }

    pub fn event_synchronize(&self, e: Event) -> Result<(), CudaError> {
        // SAFETY: handle from `event`.
        self.ck("cuEventSynchronize", unsafe {
            (self.event_synchronize)(e.0)
        })
    }

    /// Milliseconds between two completed events.
    pub fn elapsed_ms(&self, start: Event, stop: Event) -> Result<f32, CudaError> {
        let mut ms: c_float = 0.0;
        // SAFETY: valid out-pointer and event handles.
        self.ck("cuEventElapsedTime", unsafe {
            (self.event_elapsed_time)(&mut ms, start.0, stop.0)
        })?;
        Ok(ms)
    }
}

fn host_copy_calls(lib: &Library, p: &Path) -> Result<HostCopyCalls, &'static str> {
    Ok(HostCopyCalls {
        host_alloc: opt_sym(lib, p, "cuMemHostAlloc").ok_or("cuMemHostAlloc")?,
        htod_async: opt_sym(lib, p, "cuMemcpyHtoDAsync_v2").ok_or("cuMemcpyHtoDAsync_v2")?,
        dtoh_async: opt_sym(lib, p, "cuMemcpyDtoHAsync_v2").ok_or("cuMemcpyDtoHAsync_v2")?,
    })
}

impl Cuda {
    /// The host-copy calls, or the name of the first one this library lacks.
    pub fn host_copy_calls(&self) -> Result<HostCopyCalls, &'static str> {
        self.host_copy
    }

    /// `bytes` of page-locked host memory, portable across contexts; needs a current context.
    pub fn pinned(&self, calls: HostCopyCalls, bytes: u64) -> Result<Pinned, CudaError> {
        let mut p: *mut c_void = std::ptr::null_mut();
        let len = crate::int::size_t(bytes);
        // SAFETY: valid out-pointer; the buffer lives as long as the process (see `Pinned`).
        self.ck(&format!("cuMemHostAlloc({bytes} B)"), unsafe {
            (calls.host_alloc)(&mut p, len, CU_MEMHOSTALLOC_PORTABLE)
        })?;
        Ok(Pinned { ptr: p, len })
    }

    /// Queues a copy of the first `bytes` of `host` to `dst` on `s`.
    ///
    /// # Safety
    /// `dst` must be a device range of at least `bytes` in the current context, `s` its stream.
    pub unsafe fn copy_to_device_async(
        &self,
        calls: HostCopyCalls,
        dst: CUdeviceptr,
        host: &Pinned,
        bytes: u64,
        s: Stream,
    ) -> Result<(), CudaError> {
        let n = crate::int::size_t(bytes).min(host.len);
        // SAFETY: `host` holds at least `n` bytes; the caller upholds the device side.
        self.ck("cuMemcpyHtoDAsync", unsafe {
            (calls.htod_async)(dst, host.ptr.cast_const(), n, s.0)
        })
    }

    /// Queues a copy of `bytes` from `src` into `host` on `s`.
    ///
    /// # Safety
    /// As [`Cuda::copy_to_device_async`]; nothing reads `host` until the stream is done.
    pub unsafe fn copy_to_host_async(
        &self,
        calls: HostCopyCalls,
        host: &Pinned,
        src: CUdeviceptr,
        bytes: u64,
        s: Stream,
    ) -> Result<(), CudaError> {
        let n = crate::int::size_t(bytes).min(host.len);
        // SAFETY: as above.
        self.ck("cuMemcpyDtoHAsync", unsafe {
            (calls.dtoh_async)(host.ptr, src, n, s.0)
        })
    }
}

// ---- NCCL -------------------------------------------------------------------------------------

type CollFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    NcclDataType,
    NcclRedOp,
    NcclComm,
    CUstream,
) -> NcclResult;

/// The NCCL functions the worker uses.
pub struct Nccl {
    pub path: PathBuf,
    /// How the library was found (explicit path, loader path, a system folder, a Python package).
    pub found_by: String,
    get_version: unsafe extern "C" fn(*mut c_int) -> NcclResult,
    get_unique_id: unsafe extern "C" fn(*mut NcclUniqueId) -> NcclResult,
    comm_init_rank: unsafe extern "C" fn(*mut NcclComm, c_int, NcclUniqueId, c_int) -> NcclResult,
    all_reduce: CollFn,
    all_gather: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        NcclDataType,
        NcclComm,
        CUstream,
    ) -> NcclResult,
    reduce_scatter: CollFn,
    broadcast: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        NcclDataType,
        c_int,
        NcclComm,
        CUstream,
    ) -> NcclResult,
    reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        NcclDataType,
        NcclRedOp,
        c_int,
        NcclComm,
        CUstream,
    ) -> NcclResult,
    send: unsafe extern "C" fn(
        *const c_void,
        usize,
        NcclDataType,
        c_int,
        NcclComm,
        CUstream,
    ) -> NcclResult,
    recv: unsafe extern "C" fn(
        *mut c_void,
        usize,
        NcclDataType,
        c_int,
        NcclComm,
        CUstream,
    ) -> NcclResult,
    group_start: unsafe extern "C" fn() -> NcclResult,
    group_end: unsafe extern "C" fn() -> NcclResult,
    comm_abort: unsafe extern "C" fn(NcclComm) -> NcclResult,
    comm_destroy: unsafe extern "C" fn(NcclComm) -> NcclResult,
    comm_get_async_error: unsafe extern "C" fn(NcclComm, *mut NcclResult) -> NcclResult,
    get_error_string: unsafe extern "C" fn(NcclResult) -> *const c_char,
    get_last_error: Option<unsafe extern "C" fn(NcclComm) -> *const c_char>,
    _lib: Library,
}

impl Nccl {
    /// Opens libnccl in the search order of [`loader::SearchPlan::nccl`].
    pub fn load(explicit: Option<&Path>) -> Result<Nccl, LoadError> {
        let found = loader::open_nccl(explicit)?;
        let lib = found.lib;
        let p = found.path.as_path();
        Ok(Nccl {
            get_version: sym(&lib, p, "ncclGetVersion")?,
            get_unique_id: sym(&lib, p, "ncclGetUniqueId")?,
            comm_init_rank: sym(&lib, p, "ncclCommInitRank")?,
            all_reduce: sym(&lib, p, "ncclAllReduce")?,
            all_gather: sym(&lib, p, "ncclAllGather")?,
            reduce_scatter: sym(&lib, p, "ncclReduceScatter")?,
            broadcast: sym(&lib, p, "ncclBroadcast")?,
            reduce: sym(&lib, p, "ncclReduce")?,
            send: sym(&lib, p, "ncclSend")?,
            recv: sym(&lib, p, "ncclRecv")?,
            group_start: sym(&lib, p, "ncclGroupStart")?,
            group_end: sym(&lib, p, "ncclGroupEnd")?,
            comm_abort: sym(&lib, p, "ncclCommAbort")?,
            comm_destroy: sym(&lib, p, "ncclCommDestroy")?,
            comm_get_async_error: sym(&lib, p, "ncclCommGetAsyncError")?,
            get_error_string: sym(&lib, p, "ncclGetErrorString")?,
            get_last_error: opt_sym(&lib, p, "ncclGetLastError"),
            path: found.path.clone(),
            found_by: found.found_by,
            _lib: lib,
        })
    }

    fn err(&self, call: &str, code: NcclResult, comm: NcclComm) -> NcclError {
        // SAFETY: returns a static string for any code.
        let message = cstr(unsafe { (self.get_error_string)(code) });
        let last = match self.get_last_error {
            // SAFETY: NCCL accepts a null or live communicator here.
            Some(f) => cstr(unsafe { f(comm) }),
            None => String::new(),
        };
        NcclError {
            call: call.to_string(),
            code,
            message,
            last,
        }
    }

    fn ck(&self, call: &str, code: NcclResult, comm: NcclComm) -> Result<(), NcclError> {
        if code == NCCL_SUCCESS {
            Ok(())
        } else {
            Err(self.err(call, code, comm))
        }
    }

    /// `ncclGetVersion`'s code, e.g. 22809 for 2.28.9.
    pub fn version(&self) -> Result<i32, NcclError> {
        let mut v: c_int = 0;
        // SAFETY: valid out-pointer.
        let code = unsafe { (self.get_version)(&mut v) };
        self.ck("ncclGetVersion", code, std::ptr::null_mut())?;
        Ok(v)
    }

    pub fn unique_id(&self) -> Result<NcclUniqueId, NcclError> {
        let mut id = NcclUniqueId { internal: [0; 128] };
        // SAFETY: valid out-pointer to a 128-byte struct.
        let code = unsafe { (self.get_unique_id)(&mut id) };
        self.ck("ncclGetUniqueId", code, std::ptr::null_mut())?;
        Ok(id)
    }

    /// `ncclCommInitRank` on the calling thread's current CUDA context; blocks until every rank
    /// has joined.
    pub fn init_rank(&self, nranks: i32, id: NcclUniqueId, rank: i32) -> Result<Comm, NcclError> {
        let mut c: NcclComm = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the id is passed by value as nccl.h declares.
        let code = unsafe { (self.comm_init_rank)(&mut c, nranks, id, rank) };
        self.ck(
            &format!("ncclCommInitRank(rank {rank} of {nranks})"),
            code,
            std::ptr::null_mut(),
        )?;
        Ok(Comm(c))
    }

    /// # Safety
    /// `send`/`recv` must be device buffers of at least `count` floats in the communicator's
    /// context, `s` a stream of that context.
    pub unsafe fn all_reduce(
        &self,
        send: CUdeviceptr,
        recv: CUdeviceptr,
        count: u64,
        comm: Comm,
        s: Stream,
    ) -> Result<(), NcclError> {
        // SAFETY: upheld by the caller.
        let r = unsafe {
            (self.all_reduce)(
                send as *const c_void,
                recv as *mut c_void,
                crate::int::size_t(count),
                NCCL_FLOAT32,
                NCCL_SUM,
                comm.0,
                s.0,
            )
        };
        self.ck("ncclAllReduce", r, comm.0)
    }

    /// # Safety
    /// As [`Nccl::all_reduce`]; `recv` holds `count × nranks` floats.
    pub unsafe fn all_gather(
        &self,
        send: CUdeviceptr,
        recv: CUdeviceptr,
        count: u64,
        comm: Comm,
        s: Stream,
    ) -> Result<(), NcclError> {
        // SAFETY: upheld by the caller.
        let r = unsafe {
            (self.all_gather)(
                send as *const c_void,
                recv as *mut c_void,
                crate::int::size_t(count),
                NCCL_FLOAT32,
                comm.0,
                s.0,
            )
        };
        self.ck("ncclAllGather", r, comm.0)
    }

    /// # Safety
    /// As [`Nccl::all_reduce`]; `send` holds `recvcount × nranks` floats.
    pub unsafe fn reduce_scatter(
        &self,
        send: CUdeviceptr,
        recv: CUdeviceptr,
        recvcount: u64,
        comm: Comm,
        s: Stream,
    ) -> Result<(), NcclError> {
        // SAFETY: upheld by the caller.
        let r = unsafe {
            (self.reduce_scatter)(
                send as *const c_void,
                recv as *mut c_void,
                crate::int::size_t(recvcount),
                NCCL_FLOAT32,
                NCCL_SUM,
                comm.0,
                s.0,
            )
        };
        self.ck("ncclReduceScatter", r, comm.0)
    }

    /// # Safety
    /// As [`Nccl::all_reduce`].
    pub unsafe fn broadcast(
        &self,
        send: CUdeviceptr,
        recv: CUdeviceptr,
        count: u64,
        root: i32,
        comm: Comm,
        s: Stream,
    ) -> Result<(), NcclError> {
        // SAFETY: upheld by the caller.
        let r = unsafe {
            (self.broadcast)(
                send as *const c_void,
                recv as *mut c_void,
                crate::int::size_t(count),
                NCCL_FLOAT32,
                root,
                comm.0,
                s.0,
            )
        };
        self.ck("ncclBroadcast", r, comm.0)
    }

    /// # Safety
    /// As [`Nccl::all_reduce`].
    pub unsafe fn reduce(
        &self,
        send: CUdeviceptr,
        recv: CUdeviceptr,
        count: u64,
        root: i32,
        comm: Comm,
        s: Stream,
    ) -> Result<(), NcclError> {
        // SAFETY: upheld by the caller.
        let r = unsafe {
            (self.reduce)(
                send as *const c_void,
                recv as *mut c_void,
                crate::int::size_t(count),
                NCCL_FLOAT32,
                NCCL_SUM,
                root,
                comm.0,
                s.0,
            )
        };
        self.ck("ncclReduce", r, comm.0)
    }

    /// All-to-all as nccl-tests builds it before `ncclAlltoAll`: one grouped send and receive
    /// of `count` floats per peer.
    ///
    /// # Safety
    /// `send` and `recv` hold `count × nranks` floats in the communicator's context.
    pub unsafe fn all_to_all(
        &self,
        send: CUdeviceptr,
        recv: CUdeviceptr,
        count: u64,
        nranks: i32,
        comm: Comm,
        s: Stream,
    ) -> Result<(), NcclError> {
        let chunk = count * 4;
        // SAFETY: group calls are thread-local bookkeeping.
        self.ck("ncclGroupStart", unsafe { (self.group_start)() }, comm.0)?;
        let mut first_err = None;
        for peer in 0..nranks {
            let off = u64::from(peer.unsigned_abs()) * chunk;
            // SAFETY: offsets stay inside the caller's buffers (count × nranks floats).
            let r = unsafe {
                (self.send)(
                    (send + off) as *const c_void,
                    crate::int::size_t(count),
                    NCCL_FLOAT32,
                    peer,
                    comm.0,
                    s.0,
                )
            };
            if r != NCCL_SUCCESS && first_err.is_none() {
                first_err = Some(self.err("ncclSend", r, comm.0));
            }
            // SAFETY: as above.
            let r = unsafe {
                (self.recv)(
                    (recv + off) as *mut c_void,
                    crate::int::size_t(count),
                    NCCL_FLOAT32,
                    peer,
                    comm.0,
                    s.0,
                )
            };
            if r != NCCL_SUCCESS && first_err.is_none() {
                first_err = Some(self.err("ncclRecv", r, comm.0));
            }
        }
        // The group must be closed even after an error, or the thread's group state stays open.
        // SAFETY: closes the group opened above.
        let end = unsafe { (self.group_end)() };
        if let Some(e) = first_err {
            return Err(e);
        }
        self.ck("ncclGroupEnd", end, comm.0)
    }

    /// The communicator's asynchronous error: `Ok(())` while healthy or still in progress.
    pub fn async_error(&self, comm: Comm) -> Result<(), NcclError> {
        let mut r: NcclResult = NCCL_SUCCESS;
        // SAFETY: live communicator (callers hold it in the registry), valid out-pointer.
        let q = unsafe { (self.comm_get_async_error)(comm.0, &mut r) };
        self.ck("ncclCommGetAsyncError", q, comm.0)?;
        if r == NCCL_SUCCESS || r == NCCL_IN_PROGRESS {
            Ok(())
        } else {
            Err(self.err("asynchronous NCCL operation", r, comm.0))
        }
    }

    /// # Safety
    /// `comm` must be live and not used again afterwards.
    pub unsafe fn abort(&self, comm: Comm) -> Result<(), NcclError> {
        // SAFETY: upheld by the caller.
        let r = unsafe { (self.comm_abort)(comm.0) };
        self.ck("ncclCommAbort", r, std::ptr::null_mut())
    }

    /// # Safety
    /// `comm` must be live, idle, and not used again afterwards.
    pub unsafe fn destroy(&self, comm: Comm) -> Result<(), NcclError> {
        // SAFETY: upheld by the caller.
        let r = unsafe { (self.comm_destroy)(comm.0) };
        self.ck("ncclCommDestroy", r, std::ptr::null_mut())
    }
}

/// Whether NCCL reported a CUDA failure underneath (a GPU problem rather than ours).
pub fn nccl_error_is_cuda(e: &NcclError) -> bool {
    e.code == NCCL_UNHANDLED_CUDA_ERROR
}

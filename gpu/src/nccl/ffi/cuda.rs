//! The CUDA driver API the worker uses (`libcuda.so.1`): its function table, streams, events,
//! pinned host memory and the host-copy calls.

use std::ffi::{c_char, c_float, c_int, c_uint, c_void};
use std::path::{Path, PathBuf};

use libloading::os::unix::Library;

use crate::nccl::loader::{self, LoadError};

use super::symbol::{cstr, opt_sym, sym};
use super::types::*;

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
pub struct Stream(pub(super) CUstream);

/// An event created by [`Cuda::event`].
#[derive(Clone, Copy, Debug)]
pub struct Event(CUevent);

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

//! The NCCL functions the worker uses (`libnccl.so.2`): its function table and checked calls.

use std::ffi::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};

use libloading::os::unix::Library;

use crate::nccl::loader::{self, LoadError};

use super::cuda::Stream;
use super::symbol::{cstr, opt_sym, sym};
use super::types::*;

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

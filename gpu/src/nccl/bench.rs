//! The measuring side of the worker process: one thread per GPU with one NCCL communicator
//! each, running nccl-tests' sweep (warm-up, timed iterations measured with CUDA events on
//! each rank's stream, out-of-place and in-place, float32 sum, data check).
//!
//! Runs only inside the `worker` child (invariant 1). Everything that can block forever (NCCL
//! init, a collective that a peer never joins) is bounded by the worker's watchdog, which
//! aborts the communicators registered in [`Shared`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ddpcheck_core::backend::{CollectiveRequest, CollectiveRun};
use ddpcheck_core::collective::{size_ladder, Collective, Sample, Sweep, Timing};
use ddpcheck_core::num::{len_u32, ToF64};
use ddpcheck_core::topology::GpuRef;

use crate::int::{c_int_of, size_t};

use super::ffi::{self, CUdevice, CUdeviceptr, Comm, Cuda, CudaError, Nccl, NcclError, Stream};
use super::plan::{self, Buf, Geometry};
use super::protocol::{FailKind, RankDevice, WorkerEvent};
use super::transport::TransportLog;

/// Host staging chunk for the data check: bounds host memory at 64 MiB per rank.
const CHUNK_ELEMS: usize = 16 << 20;

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

    fn nccl(e: NcclError, what: &str) -> Self {
        let kind = if ffi::nccl_error_is_cuda(&e) {
            FailKind::GpuFailed
        } else {
            FailKind::Worker
        };
        Failure::new(kind, format!("{what}: {e}"))
    }
}

fn cuda_run_kind(code: i32) -> FailKind {
    match code {
        // ECC, NVLink, illegal address, hardware stack, illegal instruction, misaligned,
        // invalid address space, invalid PC, launch failed, unknown.
        214 | 220 | 700 | 714 | 715 | 716 | 717 | 718 | 719 | 999 => FailKind::GpuFailed,
        2 | 46 => FailKind::Busy,
        _ => FailKind::Worker,
    }
}

/// Failures from either library inside a rank.
enum RankErr {
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
    nccl: OnceLock<Arc<Nccl>>,
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

    fn register(&self, c: Comm) {
        self.comms.lock().unwrap_or_else(|p| p.into_inner()).push(c);
    }

    /// Takes a communicator out of the watchdog's reach; false if an abort already has it.
    fn unregister(&self, c: Comm) -> bool {
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
enum Msg {
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
type RankTiming = (u32, f64, f64, Option<u64>);

/// A finished sweep and the rank threads still tearing down.
pub struct Finished {
    pub run: CollectiveRun,
    pub ranks: Vec<JoinHandle<()>>,
}

/// The NCCL_* (and CUDA_VISIBLE_DEVICES) environment this process runs with, sorted.
pub fn effective_env() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("NCCL_") || k == "CUDA_VISIBLE_DEVICES")
        .collect();
    v.sort();
    v
}

/// With `inject_hang`, a failure to reach the GPUs still hangs, so that the deadline path can
/// be proven on machines without GPUs; otherwise the failure is returned.
fn fail_or_hang(req: &CollectiveRequest, shared: &Shared, f: Failure) -> Failure {
    if req.inject_hang {
        shared.set_stage(format!(
            "injected hang (no GPU path to hang: {})",
            f.message
        ));
        eprintln!(
            "ddpcheck worker: inject_hang without a GPU path ({}); sleeping until stopped",
            f.message
        );
        park_forever();
    }
    f
}

fn park_forever() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Runs the sweep; `emit` receives progress, init and sample events (not the terminal one).
pub fn run(
    req: &CollectiveRequest,
    shared: &Arc<Shared>,
    transport_log: Option<&TransportLog>,
    emit: &mut dyn FnMut(WorkerEvent),
) -> Result<Finished, Failure> {
    let Libraries {
        cuda,
        nccl,
        driver,
        version,
    } = load_libraries(req, shared)?;

    shared.set_stage("finding the GPUs");
    let devices = match resolve_devices(&cuda, &req.gpus).and_then(|d| place_in_group(d, req)) {
        Ok(d) => d,
        Err(f) => return Err(fail_or_hang(req, shared, f)),
    };
    // Ranks of this process and of the whole communicator (more when it spans processes).
    let n_local = len_u32(devices.len());
    let n = req.group.as_ref().map_or(n_local, |g| g.world_ranks);
    log_devices(&devices);
    let sizes = size_ladder(req.min_bytes, req.max_bytes, req.step_factor);
    let plan = Arc::new(RunPlan {
        ops: req.ops.clone(),
        buf_elems: plan::buffer_elems(&req.ops, &sizes, n),
        sizes,
        warmup: req.warmup_iters,
        iters: req.iters,
        in_place: req.in_place,
        check: req.check,
        inject_hang: req.inject_hang,
    });
    let total = len_u32(plan.ops.len() * plan.sizes.len());

    let id = nccl
        .unique_id()
        .map_err(|e| Failure::nccl(e, "NCCL unique id"))?;
    shared.set_stage(match &req.group {
        Some(g) => format!(
            "NCCL init (ranks {}..{} of {n}, root {})",
            g.first_rank,
            g.first_rank + n_local,
            g.comm_id
        ),
        None => format!("NCCL init ({n} ranks)"),
    });
    emit(WorkerEvent::Progress {
        stage: "nccl init".into(),
        done: 0,
        total,
        message: format!("creating {n_local} of {n} NCCL communicator ranks (NCCL {version})"),
    });

    let (handles, rx) = start_ranks(&devices, n, id, &plan, &cuda, &nccl, shared)?;

    // Communicators.
    let mut init_s = 0.0f64;
    for _ in 0..n_local {
        if let Msg::Ready { init_s: s, rank } = recv_msg(&rx)? {
            eprintln!("ddpcheck worker: rank {rank} communicator ready in {s:.3} s");
            init_s = init_s.max(s);
        }
    }
    emit(WorkerEvent::Init {
        seconds: init_s,
        nccl_version: version.clone(),
        nccl_path: nccl.path.display().to_string(),
        nccl_found_by: nccl.found_by.clone(),
        cuda_path: cuda.path.display().to_string(),
        cuda_driver_version: driver.clone(),
        ranks: n,
        devices: devices.clone(),
    });
    let transport = transport_log.and_then(|l| l.wait_for_any(Duration::from_secs(1)));
    if let Some(t) = &transport {
        eprintln!("ddpcheck worker: NCCL transport {t}");
    }

    // Samples: collect every rank's timing of each (op, size, variant).
    let variants = if plan.in_place { 2 } else { 1 };
    let mut pending: BTreeMap<(usize, usize, bool), Vec<RankTiming>> = BTreeMap::new();
    let mut finished: BTreeMap<(usize, usize), Sample> = BTreeMap::new();
    let mut done = 0u32;
    while finished.len() < plan.ops.len() * plan.sizes.len() {
        let Msg::Timed {
            rank,
            oi,
            si,
            in_place,
            dev_us,
            host_us,
            wrong,
        } = recv_msg(&rx)?
        else {
            continue;
        };
        let slot = pending.entry((oi, si, in_place)).or_default();
        slot.push((rank, dev_us, host_us, wrong));
        let complete = |k| pending.get(&k).is_some_and(|v| v.len() == n_local as usize);
        if !(complete((oi, si, false)) && (variants == 1 || complete((oi, si, true)))) {
            continue;
        }
        let op = plan.ops[oi];
        let g = plan::geometry(op, plan.sizes[si], n);
        let timing = |v: &[RankTiming]| {
            // nccl-tests reports one time for all ranks; the slowest rank bounds the op.
            let t = v.iter().map(|x| x.1).fold(0.0, f64::max);
            let wrong = v
                .iter()
                .filter_map(|x| x.3)
                .reduce(|a, b| a.saturating_add(b));
            Timing::from_time(op, n, g.bytes, t, wrong)
        };
        let mut oop = pending.remove(&(oi, si, false)).unwrap_or_default();
        oop.sort_by_key(|x| x.0);
        let ip = pending.remove(&(oi, si, true));
        let sample = Sample {
            bytes: g.bytes,
            count: g.count,
            dtype: "float".into(),
            out_of_place: timing(&oop),
            in_place: ip.as_deref().map(timing),
        };
        done += 1;
        let msg = format!(
            "{op} {} B: {:.2} us, busbw {:.2} GB/s{}",
            g.bytes,
            sample.out_of_place.time_us,
            sample.out_of_place.busbw_gbps,
            match sample.out_of_place.wrong {
                Some(w) if w > 0 => format!(", {w} wrong"),
                _ => String::new(),
            }
        );
        emit(WorkerEvent::Sample {
            op,
            ranks: n,
            sample: sample.clone(),
            rank_time_us: oop.iter().map(|x| x.1).collect(),
            host_time_us: oop.iter().map(|x| x.2).sum::<f64>() / oop.len().max(1).to_f64(),
        });
        emit(WorkerEvent::Progress {
            stage: "collectives".into(),
            done,
            total,
            message: msg,
        });
        finished.insert((oi, si), sample);
    }

    let sweeps = into_sweeps(&plan, n, finished);
    shared.set_stage("tearing down communicators");
    Ok(Finished {
        run: CollectiveRun {
            sweeps,
            nccl_version: Some(version),
            nccl_library: Some(nccl.path.display().to_string()),
            cuda_runtime_version: driver,
            init_seconds: init_s,
            env: effective_env(),
            transport,
        },
        ranks: handles,
    })
}

/// The CUDA driver and NCCL libraries, opened at run time, with their versions.
struct Libraries {
    cuda: Arc<Cuda>,
    nccl: Arc<Nccl>,
    /// The CUDA driver's version, when it tells.
    driver: Option<String>,
    version: String,
}

/// Opens and initialises CUDA, then opens NCCL; a missing library is `Unavailable` (or the
/// injected hang, which needs no GPU path).
fn load_libraries(req: &CollectiveRequest, shared: &Arc<Shared>) -> Result<Libraries, Failure> {
    shared.set_stage("loading the CUDA driver library");
    let cuda = match Cuda::load(None) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            return Err(fail_or_hang(
                req,
                shared,
                Failure::new(FailKind::Unavailable, format!("CUDA driver: {e}")),
            ))
        }
    };
    eprintln!(
        "ddpcheck worker: CUDA driver library {}",
        cuda.path.display()
    );
    shared.set_stage("cuInit");
    if let Err(e) = cuda.init() {
        return Err(fail_or_hang(
            req,
            shared,
            Failure::cuda_setup(e, "CUDA driver"),
        ));
    }
    let driver = cuda.driver_version().ok().map(plan::cuda_version_string);

    shared.set_stage("loading NCCL");
    let nccl = match Nccl::load(None) {
        Ok(n) => Arc::new(n),
        Err(e) => {
            return Err(fail_or_hang(
                req,
                shared,
                Failure::new(FailKind::Unavailable, format!("NCCL: {e}")),
            ))
        }
    };
    let version = nccl
        .version()
        .map(plan::nccl_version_string)
        .map_err(|e| Failure::nccl(e, "NCCL version"))?;
    eprintln!(
        "ddpcheck worker: NCCL {version} from {} ({})",
        nccl.path.display(),
        nccl.found_by
    );
    let _ = shared.nccl.set(nccl.clone());
    Ok(Libraries {
        cuda,
        nccl,
        driver,
        version,
    })
}

/// One stderr line per rank: which CUDA device it runs on and which GPU was asked for.
fn log_devices(devices: &[RankDevice]) {
    for d in devices {
        eprintln!(
            "ddpcheck worker: rank {} = CUDA device {} ({}, bus {}, asked {})",
            d.rank,
            d.cuda_ordinal,
            d.name.as_deref().unwrap_or("?"),
            d.cuda_bus_id.as_deref().unwrap_or("?"),
            if d.requested_bus_id.is_empty() {
                "any"
            } else {
                &d.requested_bus_id
            }
        );
    }
}

/// One thread per local rank, each creating its communicator and running the plan; their
/// messages come back on the returned channel.
fn start_ranks(
    devices: &[RankDevice],
    n: u32,
    id: ffi::NcclUniqueId,
    plan: &Arc<RunPlan>,
    cuda: &Arc<Cuda>,
    nccl: &Arc<Nccl>,
    shared: &Arc<Shared>,
) -> Result<(Vec<JoinHandle<()>>, mpsc::Receiver<Msg>), Failure> {
    let n_local = len_u32(devices.len());
    let (tx, rx) = mpsc::channel::<Msg>();
    // Only this process's rank threads meet at the barrier; ranks of other processes are
    // synchronized by the collectives themselves.
    let barrier = Arc::new(Barrier::new(n_local as usize));
    let mut handles = Vec::new();
    for d in devices {
        let ctx = RankCtx {
            rank: d.rank,
            n,
            dev: d.cuda_ordinal,
            id,
            plan: plan.clone(),
            cuda: cuda.clone(),
            nccl: nccl.clone(),
            shared: shared.clone(),
            barrier: barrier.clone(),
            tx: tx.clone(),
        };
        let h = std::thread::Builder::new()
            .name(format!("rank{}", d.rank))
            .spawn(move || rank_main(ctx))
            .map_err(|e| Failure::new(FailKind::Worker, format!("starting a rank thread: {e}")))?;
        handles.push(h);
    }
    drop(tx);
    Ok((handles, rx))
}

/// The next message of a rank thread; a rank's failure, or every rank gone, is the run's.
fn recv_msg(rx: &mpsc::Receiver<Msg>) -> Result<Msg, Failure> {
    match rx.recv() {
        Ok(Msg::Failed { rank, failure }) => Err(Failure {
            kind: failure.kind,
            message: format!("rank {rank}: {}", failure.message),
        }),
        Ok(m) => Ok(m),
        Err(_) => Err(Failure::new(
            FailKind::Worker,
            "every rank thread ended without a result (a panic? see stderr)",
        )),
    }
}

/// The finished samples as one sweep per op, in the plan's order of ops and sizes.
fn into_sweeps(
    plan: &RunPlan,
    n: u32,
    mut finished: BTreeMap<(usize, usize), Sample>,
) -> Vec<Sweep> {
    plan.ops
        .iter()
        .enumerate()
        .map(|(oi, &op)| Sweep {
            op,
            ranks: n,
            redop: "sum".into(),
            root: if op.has_root() {
                c_int_of(plan::ROOT)
            } else {
                -1
            },
            samples: (0..plan.sizes.len())
                .filter_map(|si| finished.remove(&(oi, si)))
                .collect(),
        })
        .collect()
}

/// Maps the request's GPUs (by PCI bus id) to CUDA ordinals of this process; all visible
/// GPUs when the request names none.
pub(crate) fn resolve_devices(cuda: &Cuda, gpus: &[GpuRef]) -> Result<Vec<RankDevice>, Failure> {
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "(unset)".into());
    let count = cuda
        .device_count()
        .map_err(|e| Failure::cuda_setup(e, "counting CUDA devices"))?;
    if count <= 0 {
        return Err(Failure::new(
            FailKind::Unavailable,
            format!("CUDA sees no GPU (CUDA_VISIBLE_DEVICES={visible})"),
        ));
    }
    let mut out: Vec<RankDevice> = Vec::new();
    if gpus.is_empty() {
        for i in 0..count {
            let d = cuda
                .device(i)
                .map_err(|e| Failure::cuda_setup(e, "cuDeviceGet"))?;
            out.push(describe(cuda, len_u32(out.len()), String::new(), d));
        }
        return Ok(out);
    }
    for g in gpus {
        let asked = g.pci_bus_id.trim().to_string();
        if asked.is_empty() {
            return Err(Failure::new(
                FailKind::Invalid,
                format!(
                    "GPU {} ({}) has no PCI bus id; GPUs are matched by bus id",
                    g.index, g.uuid
                ),
            ));
        }
        let d = cuda.device_by_bus_id(&asked).or_else(|first| {
            let alt = plan::cuda_bus_id(&asked);
            if alt != asked {
                cuda.device_by_bus_id(&alt).map_err(|_| first)
            } else {
                Err(first)
            }
        });
        let d = d.map_err(|e| {
            let mut f = Failure::cuda_setup(
                e,
                &format!(
                    "GPU {asked} (index {}, {}) is not visible to CUDA (CUDA_VISIBLE_DEVICES={visible}, {count} visible)",
                    g.index, g.uuid
                ),
            );
            if f.kind == FailKind::Worker {
                f.kind = FailKind::Unavailable;
            }
            f
        })?;
        if let Some(prev) = out.iter().find(|x| x.cuda_ordinal == d) {
            return Err(Failure::new(
                FailKind::Invalid,
                format!(
                    "GPU {asked} is listed twice (same CUDA device as {})",
                    prev.requested_bus_id
                ),
            ));
        }
        out.push(describe(cuda, len_u32(out.len()), asked, d));
    }
    Ok(out)
}

/// In a communicator across processes, this process's GPUs take the global ranks from
/// `first_rank` on; with no GPUs named, the first `local_ranks` visible ones.
fn place_in_group(
    mut devices: Vec<RankDevice>,
    req: &CollectiveRequest,
) -> Result<Vec<RankDevice>, Failure> {
    let Some(g) = &req.group else {
        return Ok(devices);
    };
    if devices.len() < g.local_ranks as usize {
        return Err(Failure::new(
            FailKind::Unavailable,
            format!(
                "{} GPU(s) visible to CUDA, {} needed for this node's ranks (CUDA_VISIBLE_DEVICES={})",
                devices.len(),
                g.local_ranks,
                std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "(unset)".into())
            ),
        ));
    }
    devices.truncate(g.local_ranks as usize);
    for (i, d) in devices.iter_mut().enumerate() {
        d.rank = g.first_rank + len_u32(i);
    }
    Ok(devices)
}

fn describe(cuda: &Cuda, rank: u32, requested: String, d: CUdevice) -> RankDevice {
    RankDevice {
        rank,
        requested_bus_id: requested,
        cuda_ordinal: d,
        cuda_bus_id: cuda.bus_id(d),
        name: cuda.name(d),
    }
}

struct RunPlan {
    ops: Vec<Collective>,
    sizes: Vec<u64>,
    buf_elems: u64,
    warmup: u32,
    iters: u32,
    in_place: bool,
    check: bool,
    inject_hang: bool,
}

struct RankCtx {
    rank: u32,
    n: u32,
    dev: CUdevice,
    id: ffi::NcclUniqueId,
    plan: Arc<RunPlan>,
    cuda: Arc<Cuda>,
    nccl: Arc<Nccl>,
    shared: Arc<Shared>,
    barrier: Arc<Barrier>,
    tx: mpsc::Sender<Msg>,
}

/// One rank's device state: buffers, stream, events, communicator.
struct Rank<'a> {
    c: &'a RankCtx,
    stream: Stream,
    send: CUdeviceptr,
    recv: CUdeviceptr,
    comm: Comm,
}

fn rank_main(c: RankCtx) {
    let rank = c.rank;
    // A panic in a rank must reach the driver, or it would wait for this rank forever.
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rank_body(&c)))
        .unwrap_or_else(|p| {
            let what = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(RankErr::Other(Failure::new(
                FailKind::Worker,
                format!("rank thread panicked: {what}"),
            )))
        });
    if let Err(e) = res {
        if c.shared.aborting() {
            park_forever();
        }
        let failure = match e {
            RankErr::Cuda(e) => Failure::cuda_run(e, &c.shared.stage()),
            RankErr::Nccl(e) => Failure::nccl(e, &c.shared.stage()),
            RankErr::Other(f) => f,
        };
        eprintln!("ddpcheck worker: rank {rank} failed: {}", failure.message);
        let _ = c.tx.send(Msg::Failed { rank, failure });
    }
}

fn rank_body(c: &RankCtx) -> Result<(), RankErr> {
    let cuda = &*c.cuda;
    cuda.use_primary_context(c.dev)
        .map_err(|e| RankErr::Other(Failure::cuda_setup(e, &format!("rank {} context", c.rank))))?;
    let stream = cuda.stream()?;
    let (e0, e1) = (cuda.event()?, cuda.event()?);

    let buf_bytes = c.plan.buf_elems.max(64) * plan::ELT;
    if let Some((free, total)) = cuda.mem_info() {
        let need = 2 * buf_bytes;
        if need > total {
            return Err(RankErr::Other(Failure::new(
                FailKind::Invalid,
                format!(
                    "the sweep needs {need} bytes per GPU; rank {} has {total} in all",
                    c.rank
                ),
            )));
        }
        if need > free {
            return Err(RankErr::Other(Failure::new(
                FailKind::Busy,
                format!(
                    "rank {} GPU has {free} of {total} bytes free, the sweep needs {need}: other processes hold its memory",
                    c.rank
                ),
            )));
        }
    }
    let send = cuda.alloc(buf_bytes)?;
    let recv = cuda.alloc(buf_bytes)?;
    cuda.memset_u32(send, 0, buf_bytes / 4)?;
    cuda.memset_u32(recv, 0, buf_bytes / 4)?;
    cuda.ctx_synchronize()?;

    c.barrier.wait();
    let t0 = Instant::now();
    let comm = c.nccl.init_rank(c_int_of(c.n), c.id, c_int_of(c.rank))?;
    let init_s = t0.elapsed().as_secs_f64();
    c.shared.register(comm);
    let _ = c.tx.send(Msg::Ready {
        rank: c.rank,
        init_s,
    });
    c.barrier.wait();

    let r = Rank {
        c,
        stream,
        send,
        recv,
        comm,
    };
    if c.plan.inject_hang {
        r.hang()?;
    }

    let variants: &[bool] = if c.plan.in_place {
        &[false, true]
    } else {
        &[false]
    };
    for (oi, &op) in c.plan.ops.iter().enumerate() {
        for (si, &size) in c.plan.sizes.iter().enumerate() {
            let g = plan::geometry(op, size, c.n);
            if c.rank == 0 {
                c.shared.set_stage(format!("{op} {} B warm-up", g.bytes));
            }
            for _ in 0..c.plan.warmup {
                r.launch(op, &g, false)?;
            }
            r.wait()?;
            for &ip in variants {
                let label = if ip { "in-place" } else { "out-of-place" };
                if c.rank == 0 {
                    c.shared.set_stage(format!("{op} {} B {label}", g.bytes));
                }
                // nccl-tests' untimed sync op, then all ranks start the timed loop together.
                r.launch(op, &g, ip)?;
                r.wait()?;
                c.barrier.wait();
                let h0 = Instant::now();
                cuda.record(e0, stream)?;
                for _ in 0..c.plan.iters {
                    r.launch(op, &g, ip)?;
                }
                cuda.record(e1, stream)?;
                r.wait()?;
                let host_us = h0.elapsed().as_secs_f64() * 1e6 / f64::from(c.plan.iters);
                cuda.event_synchronize(e1)?;
                let dev_us = f64::from(cuda.elapsed_ms(e0, e1)?) * 1e3 / f64::from(c.plan.iters);
                let wrong = if !c.plan.check || (op == Collective::AllToAll && ip) {
                    // nccl-tests checks nothing for in-place alltoall either.
                    None
                } else if plan::checked(op, c.rank, ip) {
                    if c.rank == 0 {
                        c.shared
                            .set_stage(format!("{op} {} B {label} data check", g.bytes));
                    }
                    Some(r.check(op, &g, ip)?)
                } else {
                    // Reduce off the root: no result to count, but the call must be joined.
                    r.launch_check_peer(op, &g, ip)?;
                    Some(0)
                };
                let _ = c.tx.send(Msg::Timed {
                    rank: c.rank,
                    oi,
                    si,
                    in_place: ip,
                    dev_us,
                    host_us,
                    wrong,
                });
            }
        }
    }

    // Everyone is done before anyone tears down.
    c.barrier.wait();
    if c.shared.unregister(comm) {
        // SAFETY: idle (stream synchronized), out of the registry, never used again.
        if let Err(e) = unsafe { c.nccl.destroy(comm) } {
            eprintln!("ddpcheck worker: rank {}: {e}", c.rank);
        }
    }
    let _ = cuda.free(send);
    let _ = cuda.free(recv);
    Ok(())
}

impl Rank<'_> {
    fn addr(&self, p: plan::Ptr) -> CUdeviceptr {
        let base = match p.buf {
            Buf::Send => self.send,
            Buf::Recv => self.recv,
        };
        base + p.off * plan::ELT
    }

    fn launch(&self, op: Collective, g: &Geometry, in_place: bool) -> Result<(), RankErr> {
        if self.c.shared.aborting() {
            park_forever();
        }
        let (s, d) = plan::pointers(op, g, self.c.rank, in_place);
        let (src, dst) = (self.addr(s), self.addr(d));
        let (nccl, comm, st) = (&self.c.nccl, self.comm, self.stream);
        let root = c_int_of(plan::ROOT);
        // SAFETY: both buffers hold `buf_elems` floats, which `buffer_elems` sized for every
        // op and size of the plan, including the in-place offsets; comm and stream belong to
        // this thread's context.
        unsafe {
            match op {
                Collective::AllReduce => nccl.all_reduce(src, dst, g.count, comm, st),
                Collective::AllGather => nccl.all_gather(src, dst, g.count, comm, st),
                Collective::ReduceScatter => nccl.reduce_scatter(src, dst, g.count, comm, st),
                Collective::AllToAll => {
                    nccl.all_to_all(src, dst, g.count, c_int_of(self.c.n), comm, st)
                }
                Collective::Broadcast => nccl.broadcast(src, dst, g.count, root, comm, st),
                Collective::Reduce => nccl.reduce(src, dst, g.count, root, comm, st),
            }
        }?;
        Ok(())
    }

    /// Waits for the stream, polling so that an asynchronous NCCL error (a peer gone, a
    /// network failure) ends the wait instead of hanging it.
    fn wait(&self) -> Result<(), RankErr> {
        let cuda = &self.c.cuda;
        let mut spins = 0u32;
        loop {
            if self.c.shared.aborting() {
                park_forever();
            }
            if cuda.stream_done(self.stream)? {
                return Ok(());
            }
            self.c.nccl.async_error(self.comm)?;
            spins = spins.saturating_add(1);
            if spins < 2000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Fills this rank's input with the check pattern, runs the op once, and counts wrong
    /// elements of its result on the host.
    fn check(&self, op: Collective, g: &Geometry, in_place: bool) -> Result<u64, RankErr> {
        let cuda = &self.c.cuda;
        let rank = self.c.rank;
        let (s, d) = plan::pointers(op, g, rank, in_place);
        cuda.memset_u32(self.recv, 0, self.c.plan.buf_elems.max(64))?;
        let mut host = vec![
            0f32;
            CHUNK_ELEMS
                .min(size_t(g.send_elems.max(g.recv_elems)))
                .max(1)
        ];
        let mut i = 0u64;
        while i < g.send_elems {
            let len = size_t((host.len() as u64).min(g.send_elems - i));
            plan::fill(rank, i, &mut host[..len]);
            cuda.copy_to_device(self.addr(s) + i * plan::ELT, &host[..len])?;
            i += len as u64;
        }
        // Pageable copies may still be in flight on the legacy stream; our stream does not
        // wait for it.
        cuda.ctx_synchronize()?;
        self.launch(op, g, in_place)?;
        self.wait()?;
        let mut wrong = 0u64;
        let mut i = 0u64;
        while i < g.recv_elems {
            let len = size_t((host.len() as u64).min(g.recv_elems - i));
            cuda.copy_to_host(&mut host[..len], self.addr(d) + i * plan::ELT)?;
            wrong += plan::count_wrong(op, self.c.n, rank, g, i, &host[..len]);
            i += len as u64;
        }
        Ok(wrong)
    }

    /// A non-root rank of a checked reduce still has to take part in the root's check call.
    fn launch_check_peer(
        &self,
        op: Collective,
        g: &Geometry,
        in_place: bool,
    ) -> Result<(), RankErr> {
        let cuda = &self.c.cuda;
        let (s, _) = plan::pointers(op, g, self.c.rank, in_place);
        let mut host = vec![0f32; CHUNK_ELEMS.min(size_t(g.send_elems)).max(1)];
        let mut i = 0u64;
        while i < g.send_elems {
            let len = size_t((host.len() as u64).min(g.send_elems - i));
            plan::fill(self.c.rank, i, &mut host[..len]);
            cuda.copy_to_device(self.addr(s) + i * plan::ELT, &host[..len])?;
            i += len as u64;
        }
        cuda.ctx_synchronize()?;
        self.launch(op, g, in_place)?;
        self.wait()
    }

    /// A real hang for tests: rank 0 enters an all-reduce that no other rank joins; with one
    /// rank (nothing to wait for) every rank sleeps.
    fn hang(&self) -> Result<(), RankErr> {
        if self.c.n >= 2 && self.c.rank == 0 {
            self.c.shared.set_stage(
                "injected hang: rank 0 waits in an all-reduce the other ranks never join",
            );
            let g = plan::geometry(Collective::AllReduce, 1 << 20, self.c.n);
            self.launch(Collective::AllReduce, &g, false)?;
            self.wait()?;
        } else if self.c.n < 2 {
            self.c
                .shared
                .set_stage("injected hang: one rank, sleeping after NCCL init");
        }
        park_forever();
    }
}

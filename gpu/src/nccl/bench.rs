//! The measuring side of the worker process: one thread per GPU with one NCCL communicator
//! each, running nccl-tests' sweep (warm-up, timed iterations measured with CUDA events on
//! each rank's stream, out-of-place and in-place, float32 sum, data check).
//!
//! Runs only inside the `worker` child (invariant 1). Everything that can block forever (NCCL
//! init, a collective that a peer never joins) is bounded by the worker's watchdog, which
//! aborts the communicators registered in [`Shared`].

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::Duration;

use ddpcheck_core::backend::{CollectiveRequest, CollectiveRun};
use ddpcheck_core::collective::{size_ladder, Sample, Sweep, Timing};
use ddpcheck_core::num::{len_u32, ToF64};

use crate::int::c_int_of;

use super::ffi::{self, Cuda, Nccl};
use super::plan;
use super::protocol::{FailKind, RankDevice, WorkerEvent};
use super::transport::TransportLog;

mod devices;
mod rank;
mod shared;

pub(crate) use devices::resolve_devices;
pub use shared::{Failure, Finished, Shared};

use devices::place_in_group;
use rank::{rank_main, RankCtx, RunPlan};
use shared::{park_forever, Msg, RankTiming};

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

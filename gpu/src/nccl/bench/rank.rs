//! One rank's thread: its device state, communicator and the sweep it runs, with the data check.

use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use ddpcheck_core::collective::Collective;

use crate::int::{c_int_of, size_t};
use crate::nccl::ffi::{self, CUdevice, CUdeviceptr, Comm, Cuda, Nccl, Stream};
use crate::nccl::plan::{self, Buf, Geometry};
use crate::nccl::protocol::FailKind;

use super::shared::{park_forever, Failure, Msg, RankErr, Shared};

/// Host staging chunk for the data check: bounds host memory at 64 MiB per rank.
const CHUNK_ELEMS: usize = 16 << 20;

pub(super) struct RunPlan {
    pub(super) ops: Vec<Collective>,
    pub(super) sizes: Vec<u64>,
    pub(super) buf_elems: u64,
    pub(super) warmup: u32,
    pub(super) iters: u32,
    pub(super) in_place: bool,
    pub(super) check: bool,
    pub(super) inject_hang: bool,
}

pub(super) struct RankCtx {
    pub(super) rank: u32,
    pub(super) n: u32,
    pub(super) dev: CUdevice,
    pub(super) id: ffi::NcclUniqueId,
    pub(super) plan: Arc<RunPlan>,
    pub(super) cuda: Arc<Cuda>,
    pub(super) nccl: Arc<Nccl>,
    pub(super) shared: Arc<Shared>,
    pub(super) barrier: Arc<Barrier>,
    pub(super) tx: mpsc::Sender<Msg>,
}

/// One rank's device state: buffers, stream, events, communicator.
struct Rank<'a> {
    c: &'a RankCtx,
    stream: Stream,
    send: CUdeviceptr,
    recv: CUdeviceptr,
    comm: Comm,
}

pub(super) fn rank_main(c: RankCtx) {
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

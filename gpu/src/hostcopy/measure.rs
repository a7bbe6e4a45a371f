//! The child side of host-copy timing: one GPU at a time, a portable pinned host buffer shared
//! by all, a device buffer of the largest size, and for each direction and size a warm-up, then
//! `iters` copies back to back on a non-blocking stream between two CUDA events (as nvbandwidth's
//! copy-engine tests time them).

use ddpcheck_core::hostcopy::{CopyDirection, CopyRequest, CopySample, GpuCopies, HostCopyRun};
use ddpcheck_core::num::{len_u32, ToF64};
use ddpcheck_core::topology::GpuRef;

use crate::nccl::bench::{resolve_devices, Failure, Shared};
use crate::nccl::ffi::{CUdeviceptr, Cuda, CudaError, HostCopyCalls, Pinned, Stream};
use crate::nccl::protocol::{FailKind, RankDevice, WorkerEvent};

/// Times every requested GPU's copies; `emit` receives a progress event per GPU.
pub fn run(
    req: &CopyRequest,
    shared: &Shared,
    emit: &mut dyn FnMut(WorkerEvent),
) -> Result<HostCopyRun, Failure> {
    shared.set_stage("loading the CUDA driver library");
    let cuda = Cuda::load(None)
        .map_err(|e| Failure::new(FailKind::Unavailable, format!("CUDA driver: {e}")))?;
    // A driver without one of the calls skips this measurement only, with one line.
    let calls = cuda.host_copy_calls().map_err(|symbol| {
        Failure::new(
            FailKind::Unavailable,
            format!("{} has no {symbol}", cuda.path.display()),
        )
    })?;
    shared.set_stage("cuInit");
    cuda.init()
        .map_err(|e| Failure::cuda_setup(e, "CUDA driver"))?;
    shared.set_stage("finding the GPUs");
    let devices = resolve_devices(&cuda, &req.gpus)?;
    let mut host = None;
    let mut out = Vec::with_capacity(devices.len());
    for (n, d) in devices.iter().enumerate() {
        let gpu = req.gpus.get(n).cloned().unwrap_or_else(|| GpuRef {
            index: len_u32(n),
            uuid: String::new(),
            pci_bus_id: d.cuda_bus_id.clone().unwrap_or_default(),
        });
        let samples = time_gpu(&cuda, calls, d, &mut host, req, shared)?;
        let copies = GpuCopies { gpu, samples };
        emit(WorkerEvent::Progress {
            stage: "host_copies".into(),
            done: len_u32(n) + 1,
            total: len_u32(devices.len()),
            message: format!(
                "GPU {} ({}): {}",
                n,
                d.cuda_bus_id.as_deref().unwrap_or("?"),
                copies.figures()
            ),
        });
        out.push(copies);
    }
    shared.set_stage("reporting");
    Ok(HostCopyRun {
        gpus: out,
        cuda_library: Some(cuda.path.display().to_string()),
    })
}

/// One GPU: its context, stream, events and device buffer; the pinned buffer is made once.
fn time_gpu(
    cuda: &Cuda,
    calls: HostCopyCalls,
    d: &RankDevice,
    host: &mut Option<Pinned>,
    req: &CopyRequest,
    shared: &Shared,
) -> Result<Vec<CopySample>, Failure> {
    let what = format!(
        "GPU {} ({})",
        d.cuda_ordinal,
        d.cuda_bus_id.as_deref().unwrap_or("?")
    );
    shared.set_stage(format!("{what} context"));
    cuda.use_primary_context(d.cuda_ordinal)
        .map_err(|e| Failure::cuda_setup(e, &format!("{what} context")))?;
    let bytes = req.max_bytes();
    if let Some((free, total)) = cuda.mem_info() {
        if bytes > free {
            return Err(Failure::new(
                FailKind::Busy,
                format!("{what} has {free} of {total} bytes free, the copies need {bytes}: other processes hold its memory"),
            ));
        }
    }
    let run = |e: CudaError| Failure::cuda_run(e, &shared.stage());
    let stream = cuda.stream().map_err(run)?;
    let (e0, e1) = (cuda.event().map_err(run)?, cuda.event().map_err(run)?);
    let dev = cuda.alloc(bytes).map_err(run)?;
    if host.is_none() {
        shared.set_stage(format!("pinning {bytes} B of host memory"));
        *host = Some(cuda.pinned(calls, bytes).map_err(run)?);
    }
    let Some(h) = host.as_ref() else {
        return Err(Failure::new(FailKind::Worker, "no pinned buffer"));
    };
    let mut samples = Vec::new();
    for dir in CopyDirection::BOTH {
        for &size in &req.sizes {
            shared.set_stage(format!("{what} {} copies of {size} B", dir.describe()));
            let t = Timed {
                cuda,
                calls,
                dev,
                host: h,
                stream,
                dir,
                size,
            };
            let ms = t.time(req.warmup_iters, req.iters, e0, e1).map_err(run)?;
            let time_us = f64::from(ms) * 1e3 / f64::from(req.iters);
            if !(time_us > 0.0 && time_us.is_finite()) {
                return Err(Failure::new(
                    FailKind::Worker,
                    format!(
                        "{what}: CUDA events timed {ms} ms for {} copies of {size} B",
                        req.iters
                    ),
                ));
            }
            samples.push(CopySample {
                direction: dir,
                bytes: size,
                iters: req.iters,
                time_us,
                gbps: size.to_f64() / time_us / 1e3,
            });
        }
    }
    let _ = cuda.free(dev);
    Ok(samples)
}

/// One direction and size on one GPU.
struct Timed<'a> {
    cuda: &'a Cuda,
    calls: HostCopyCalls,
    dev: CUdeviceptr,
    host: &'a Pinned,
    stream: Stream,
    dir: CopyDirection,
    size: u64,
}

impl Timed<'_> {
    fn copy(&self) -> Result<(), CudaError> {
        let (c, k) = (self.cuda, self.calls);
        // SAFETY: `dev` and the pinned buffer both hold the request's largest size, of which
        // `size` is one; the stream belongs to the current context, made current for this GPU.
        unsafe {
            match self.dir {
                CopyDirection::HostToDevice => {
                    c.copy_to_device_async(k, self.dev, self.host, self.size, self.stream)
                }
                CopyDirection::DeviceToHost => {
                    c.copy_to_host_async(k, self.host, self.dev, self.size, self.stream)
                }
            }
        }
    }

    /// Milliseconds the timed copies took between the two events.
    fn time(
        &self,
        warmup: u32,
        iters: u32,
        e0: crate::nccl::ffi::Event,
        e1: crate::nccl::ffi::Event,
    ) -> Result<f32, CudaError> {
        for _ in 0..warmup {
            self.copy()?;
        }
        self.cuda.stream_synchronize(self.stream)?;
        self.cuda.record(e0, self.stream)?;
        for _ in 0..iters {
            self.copy()?;
        }
        self.cuda.record(e1, self.stream)?;
        self.cuda.event_synchronize(e1)?;
        self.cuda.elapsed_ms(e0, e1)
    }
}

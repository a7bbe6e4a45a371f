"""Collectives of the benchmark's own: the all-reduce probe before a multi-GPU run's steps, each
step's slowest rank, the peak memory over ranks, and the gloo group that holds ranks while rank 0
steps alone. `launch` is main's Launch (torch, dist, device, world, config)."""

import time
from datetime import timedelta

from .channel import note, set_stage
from .errors import one_line

# The all-reduce probe before each multi-GPU run (config "all_reduce_probe_bytes"): warm-up and
# timed calls per size.
PROBE_WARMUP, PROBE_ITERS = 2, 8


def all_reduce_probe(launch):
    """[[bytes, seconds], ...]: each probe size all-reduced alone, the mean of PROBE_ITERS calls
    back to back after PROBE_WARMUP (nccl-tests' way, which the sweep the model otherwise reads
    uses too), the slowest rank's."""
    torch, dist = launch.torch, launch.dist
    set_stage("timing all-reduce alone")
    sizes = launch.cfg["all_reduce_probe_bytes"]
    means = [probe_one(launch, nbytes) for nbytes in sizes]
    slowest = torch.tensor(means, dtype=torch.float64, device=launch.device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return [[n, t] for n, t in zip(sizes, slowest.tolist())]


def probe_one(launch, nbytes):
    """The mean seconds of one all-reduce of nbytes on this rank."""
    torch, dist, device = launch.torch, launch.dist, launch.device
    buf = torch.ones(nbytes // 4, device=device, dtype=torch.float32)
    for _ in range(PROBE_WARMUP):
        dist.all_reduce(buf)
    if launch.on_cuda:
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(PROBE_ITERS):
            dist.all_reduce(buf)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / PROBE_ITERS
    # gloo's all-reduce returns once done: wall time is its time
    t0 = time.perf_counter()
    for _ in range(PROBE_ITERS):
        dist.all_reduce(buf)
    return (time.perf_counter() - t0) / PROBE_ITERS


def slowest_rank(launch, times):
    """Each step's time on its slowest rank (every rank gets the same list)."""
    torch, dist = launch.torch, launch.dist
    if launch.on_cuda and dist.get_backend() == "nccl":
        local = torch.tensor(times, dtype=torch.float64, device=launch.device)
        gathered = torch.empty((launch.world, len(times)), dtype=torch.float64, device=launch.device)
        dist.all_gather_into_tensor(gathered, local)
        return gathered.max(dim=0).values.tolist()
    return gather_on_cpu(torch, dist, launch.world, times).max(dim=0).values.tolist()


def gather_on_cpu(torch, dist, world, values):
    """Every rank's `values` as a (world, len) tensor, through gloo on the CPU: gloo gathers CPU
    tensors, in the list form (torch 1.13's gloo has no all_gather_into_tensor), each part 1-D
    with the local tensor's shape; gloo refuses parts of another shape, a (1, n) part for an (n)
    tensor ("invalid tensor size at index 0 (expected (5), got (1, 5))", which torch 2.11's
    all_gather_into_tensor on gloo makes of a 2-D output on one H100)."""
    local = torch.tensor([float(v) for v in values], dtype=torch.float64)
    parts = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(parts, local)
    return torch.stack(parts)


def peak_memory(launch):
    """The largest peak of allocated GPU memory over ranks, bytes; None on CPU."""
    if not launch.on_cuda:
        return None
    torch, dist = launch.torch, launch.dist
    mem = torch.tensor([float(torch.cuda.max_memory_allocated(launch.device))], dtype=torch.float64,
                       device=launch.device)
    dist.all_reduce(mem, op=dist.ReduceOp.MAX)
    return int(mem.item())


def solo_wait_group(torch, dist, cfg, device, world):
    """nocomm on N GPUs times rank 0 alone first; the others wait for it in this group. Gloo waits
    on a socket, leaving their cores idle; an NCCL barrier would spin a core and a GPU beside it.
    None where no run needs it or gloo is not there."""
    if world <= 1 or not any(v["nocomm"] for _, v in cfg["runs"]):
        return None
    if cfg["device"] != "cuda":
        return dist.group.WORLD  # already gloo
    group = None
    try:
        group = dist.new_group(backend="gloo", timeout=timedelta(seconds=cfg["nccl_timeout_s"]))
    except Exception as e:  # gloo missing or unreachable: the nocomm runs keep their old form
        note("no gloo group (%s): nocomm runs do not time one GPU alone" % one_line(e))
    # Every rank must have it, or none waits on it.
    have = torch.tensor([0.0 if group is None else 1.0], device=device)
    dist.all_reduce(have, op=dist.ReduceOp.MIN)
    return group if have.item() >= 1.0 else None

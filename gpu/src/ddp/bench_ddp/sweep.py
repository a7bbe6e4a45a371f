"""`bench collectives --device cpu`: torch's own collectives over the launch's process group (gloo
on CPU ranks), timed size by size with nccl-tests' sizes: all_reduce's size is each rank's buffer,
all_gather's the gathered output, reduce_scatter's the input that is reduced and scattered. The
calls are the ones FSDP2 makes (all_gather_into_tensor, reduce_scatter_tensor), so the curves are
the ones its step model reads. `launch` is main's Launch."""

import time

from .channel import emit, set_stage
from .errors import Fatal

# The ops this sweep times, as core's `Collective` names them.
OPS = ("all_reduce", "all_gather", "reduce_scatter")


def parse_sweep(d, fatal_int):
    """The config's "sweep" object: ops, sizes (bytes, each a multiple of 4 x world size),
    warm-up and timed calls, in-place runs and the correctness check."""
    if not isinstance(d, dict):
        raise Fatal("config: sweep must be an object", "invalid")
    ops = d.get("ops")
    if not isinstance(ops, list) or not ops or any(op not in OPS for op in ops):
        raise Fatal("config: sweep.ops must be a non-empty list of %s" % ", ".join(OPS), "invalid")
    sizes = d.get("sizes")
    if (not isinstance(sizes, list) or not 1 <= len(sizes) <= 64
            or any(isinstance(s, bool) or not isinstance(s, int) or not 4 <= s <= 1 << 32 for s in sizes)):
        raise Fatal("config: sweep.sizes must be 1..=64 byte counts in 4..=4 GiB", "invalid")
    return {"ops": ops, "sizes": sizes, "warmup": fatal_int(d, "warmup", 5, 0, 1000),
            "iters": fatal_int(d, "iters", 20, 1, 10000), "in_place": bool(d.get("in_place", True)),
            "check": bool(d.get("check", True))}


def run_sweep(launch):
    """One {"event": "sweep"} line per op, every size timed on every rank, the slowest rank's."""
    cfg = launch.cfg["sweep"]
    for i, op in enumerate(cfg["ops"]):
        emit({"event": "progress", "phase": "sweep", "step": i + 1, "total": len(cfg["ops"])})
        require_op(launch, op)
        samples = []
        for nbytes in cfg["sizes"]:
            set_stage("%s of %d bytes" % (op, nbytes))
            samples.append(sample(launch, op, nbytes, cfg))
        emit({"event": "sweep", "op": op, "ranks": launch.world, "samples": samples})


def require_op(launch, op):
    """One line where this torch's process group cannot run `op` as FSDP2 calls it (torch 1.13's
    gloo has neither all_gather_into_tensor nor reduce_scatter_tensor)."""
    name = {"all_gather": "all_gather_into_tensor", "reduce_scatter": "reduce_scatter_tensor"}.get(op)
    if name is None:
        return
    torch, dist = launch.torch, launch.dist
    set_stage("checking %s" % name)
    try:
        tensor_op(launch, op, *buffers(launch, op, 4 * launch.world, in_place=False))
    except (AttributeError, RuntimeError, NotImplementedError) as e:
        raise Fatal("torch %s's %s process group has no %s (%s): the %s curve needs a newer torch"
                    % (torch.__version__, dist.get_backend(), name, type(e).__name__, op),
                    "unavailable") from None


def buffers(launch, op, nbytes, in_place):
    """(output, input) of one call of `op` at nccl-tests' size `nbytes`, float32, input filled with
    rank + 1; in place, the input is this rank's part of the output (all_gather) or the output
    this rank's part of the input (reduce_scatter), as FSDP2 lays them out."""
    torch, world, r = launch.torch, launch.world, launch.rank
    part = nbytes // 4 // world
    opts = {"dtype": torch.float32, "device": launch.device}
    if op == "all_reduce":
        buf = torch.full((nbytes // 4,), float(r + 1), **opts)
        return buf, buf
    if op == "all_gather":
        out = torch.zeros(part * world, **opts)
        inp = out[r * part:(r + 1) * part] if in_place else torch.empty(part, **opts)
        inp.fill_(float(r + 1))
        return out, inp
    inp = torch.full((part * world,), float(r + 1), **opts)
    out = inp[r * part:(r + 1) * part] if in_place else torch.empty(part, **opts)
    return out, inp


def tensor_op(launch, op, out, inp):
    dist = launch.dist
    if op == "all_reduce":
        dist.all_reduce(out)
    elif op == "all_gather":
        dist.all_gather_into_tensor(out, inp)
    else:
        dist.reduce_scatter_tensor(out, inp)


def wrong(launch, op, out):
    """Elements of one call's output that differ from the expected result (exact: small integers
    summed in float32)."""
    torch, world = launch.torch, launch.world
    if op in ("all_reduce", "reduce_scatter"):
        expected = torch.full_like(out, float(world * (world + 1) // 2))
    else:
        part = out.numel() // world
        expected = torch.arange(1, world + 1, dtype=out.dtype, device=out.device).repeat_interleave(part)
    return int((out != expected).sum().item())


def timed(launch, op, nbytes, cfg, in_place):
    """(mean seconds of one call after the warm-up, wrong elements or None). gloo returns once
    the call is done: wall time is its time. all_reduce works in place, so it has no
    out-of-place run: its one time fills that column."""
    out, inp = buffers(launch, op, nbytes, in_place)
    tensor_op(launch, op, out, inp)
    bad = wrong(launch, op, out) if cfg["check"] else None
    for _ in range(cfg["warmup"]):
        tensor_op(launch, op, out, inp)
    launch.dist.barrier()
    t0 = time.perf_counter()
    for _ in range(cfg["iters"]):
        tensor_op(launch, op, out, inp)
    return (time.perf_counter() - t0) / cfg["iters"], bad


def sample(launch, op, nbytes, cfg):
    """One size: out-of-place and in-place mean times over ranks' slowest, wrong elements summed."""
    torch, dist = launch.torch, launch.dist
    count = nbytes // 4
    if op != "all_reduce":
        # nccl-tests' geometry: each rank's part 16-byte aligned, the count column per rank
        count = (count // launch.world) & ~3
        nbytes = count * launch.world * 4
    if count == 0:
        raise Fatal("sweep: %s of %d bytes over %d ranks is empty" % (op, nbytes, launch.world), "invalid")
    oop, oop_bad = timed(launch, op, nbytes, cfg, in_place=(op == "all_reduce"))
    ip, ip_bad = (None, None)
    if cfg["in_place"] and op != "all_reduce":
        ip, ip_bad = timed(launch, op, nbytes, cfg, in_place=True)
    times = torch.tensor([oop, ip if ip is not None else 0.0], dtype=torch.float64)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    bad = torch.tensor([oop_bad or 0, ip_bad or 0], dtype=torch.float64)
    dist.all_reduce(bad)
    checked = cfg["check"]
    return {"bytes": nbytes, "count": count, "out_of_place_s": times[0].item(),
            "in_place_s": times[1].item() if ip is not None else None,
            "wrong_out_of_place": int(bad[0].item()) if checked else None,
            "wrong_in_place": int(bad[1].item()) if checked and ip is not None else None}

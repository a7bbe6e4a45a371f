"""This launch's processes: the ranks' environment (torchrun's, one GPU's private rendezvous, or
the CPU ranks rank 0 starts itself), CPU pinning, and the process group."""

import contextlib
import os
import socket
import sys
import time
from datetime import timedelta

from .channel import json_channel, note, set_stage
from .channel import rank as current_rank
from .errors import Fatal

# On CPU, rank 0's child processes (ranks 1..N-1).
_CHILDREN = []
MAIN_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__main__.py")


def free_port():
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def join_ranks(cfg, config_text):
    """Makes this process a rank: torchrun's variables as they are; on CPU without a launcher,
    rank 0 of ranks it starts itself; one GPU without torchrun, the same code path with a private
    rendezvous. Returns (rank, world size, local rank)."""
    if cfg["device"] != "cuda" and "RANK" not in os.environ:
        set_stage("starting the CPU ranks")
        start_cpu_ranks(cfg, config_text)
    elif "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        os.environ.update(
            {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
        )
    rank = current_rank()
    return rank, int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", rank))


def start_cpu_ranks(cfg, config_text):
    """--device cpu without a launcher's RANK: this process becomes rank 0 and starts ranks
    1..N-1 as children (torchrun is not used on CPU: Debian's fails at start on Python 3.11).
    They stay in our process group, so the launch's deadline stops them with us; their JSON lines
    (errors only) go to our JSON channel."""
    import subprocess

    world = cfg["world_size"]
    os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(world),
                       "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(free_port())})
    for r in range(1, world):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r))
        _CHILDREN.append(subprocess.Popen(
            [sys.executable, MAIN_FILE, "--config", config_text],
            env=env, stdin=subprocess.DEVNULL, stdout=json_channel()))


def wait_cpu_ranks():
    """Rank 0's children, once its own runs are done: each must exit cleanly."""
    for r, child in enumerate(_CHILDREN, start=1):
        code = child.wait()
        if code != 0:
            raise Fatal("CPU rank %d exited with code %d" % (r, code))
    del _CHILDREN[:]


def stop_cpu_ranks():
    for child in _CHILDREN:
        with contextlib.suppress(Exception):
            child.kill()


def launcher_name(on_cuda):
    if not on_cuda:
        return "cpu-ranks"
    return "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "single"


def physical_cores():
    """The CPUs this process may run on, grouped by physical core in (socket, core) order."""
    cores = {}
    for cpu in sorted(os.sched_getaffinity(0)):
        topo = "/sys/devices/system/cpu/cpu%d/topology/" % cpu
        try:
            with open(topo + "physical_package_id") as f, open(topo + "core_id") as g:
                key = (int(f.read()), int(g.read()))
        except (OSError, ValueError):
            key = (0, cpu)  # no topology: every CPU its own core
        cores.setdefault(key, []).append(cpu)
    return [cores[k] for k in sorted(cores)]


def bind_cpus(mode):
    """With mode "cores", pins this rank to its own share of the physical cores it may run on: the
    cores split evenly, in (socket, core) order, among the node's local ranks, both hyperthreads of
    a core to the same rank. Steps of a few milliseconds are bound by the Python thread that
    launches kernels, and the scheduler may otherwise put two ranks on one core's hyperthreads for a
    whole launch. Called before torch starts any thread (threads inherit the mask). Returns the
    CPUs, or None when not pinned."""
    if mode != "cores" or not hasattr(os, "sched_setaffinity"):
        return None
    local = int(os.environ.get("LOCAL_RANK", "0"))
    nlocal = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    groups = physical_cores()
    share = len(groups) // max(nlocal, 1)
    if share < 1 or local >= nlocal:
        note("%d core(s) for %d local rank(s): not pinned" % (len(groups), nlocal))
        return None
    mine = sorted(c for g in groups[local * share:(local + 1) * share] for c in g)
    os.sched_setaffinity(0, mine)
    return mine


def cpu_list(cpus):
    """[0, 1, 2, 5] as "0-2,5"."""
    parts, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            parts.append(str(start) if start == c else "%d-%d" % (start, c))
            start = None
    return ",".join(parts)


def setup_process_group(torch, dist, cfg, local_rank):
    """The device and process group: NCCL on this rank's GPU, or gloo on CPU. (device, seconds)."""
    timeout = timedelta(seconds=cfg["nccl_timeout_s"])
    if cfg["device"] != "cuda":
        t0 = time.perf_counter()
        dist.init_process_group("gloo", timeout=timeout)
        return torch.device("cpu"), time.perf_counter() - t0
    visible = torch.cuda.device_count()
    if local_rank >= visible:
        raise Fatal(
            "local rank %d needs GPU %d but torch sees %d GPU(s) (CUDA_VISIBLE_DEVICES=%s)"
            % (local_rank, local_rank, visible, os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")),
            "invalid",
        )
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    backend = cfg["recipe"].get("backend", "nccl")
    require_backend(torch, dist, backend)
    set_stage("%s init" % backend.upper())
    t0 = time.perf_counter()
    # device_id binds NCCL's communicator to the GPU at once; gloo takes none.
    bind = {} if backend == "gloo" else {"device_id": device}
    dist.init_process_group(backend, timeout=timeout, **bind)
    return device, time.perf_counter() - t0


def backends_of(dist):
    """The process-group backends this torch names (torch.distributed.Backend.backend_list)."""
    return sorted(str(b) for b in getattr(dist.Backend, "backend_list", []))


def require_backend(torch, dist, backend):
    """One line where this torch lacks `backend` (torch 2.11 has no nccl2)."""
    if backend == "nccl":
        ok = dist.is_nccl_available()
    elif backend == "gloo":
        ok = dist.is_gloo_available()
    else:
        check = getattr(dist, "is_backend_available", None)
        ok = backend in backends_of(dist) or (check is not None and bool(check(backend)))
    if not ok:
        raise Fatal("torch %s has no %s backend (its backends: %s)"
                    % (torch.__version__, backend, ", ".join(backends_of(dist)) or "none named"),
                    "unavailable")

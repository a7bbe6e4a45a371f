"""How the launch gathers each rank's step times: NCCL's all_gather_into_tensor on CUDA, gloo's
list form of 1-D CPU tensors everywhere else. Gloo refuses a part whose shape is not the local
tensor's: torch 2.11's all_gather_into_tensor on gloo made (1, n) parts of a 2-D output on one
H100 (docs/results/2026-12-06-h100-fsdp2-variants.md, §4); two real gloo ranks on the CPU show
the same refusal, and that the benchmark's gather passes where it is made."""

import multiprocessing
import os
import tempfile

import torch
import torch.distributed as dist

from bench_ddp import collectives

MISMATCH = "invalid tensor size at index 0 (expected (5), got (1, 5))"


class FakeDist:
    """A process group of `world` ranks that all timed the same steps, recording the call used."""

    def __init__(self, backend, world):
        self.backend, self.world, self.calls = backend, world, []

    def get_backend(self):
        return self.backend

    def all_gather_into_tensor(self, out, local):
        self.calls.append("into_tensor")
        if self.backend != "nccl":
            raise RuntimeError("ProcessGroupGloo::allgather: " + MISMATCH)
        out.copy_(local.expand(self.world, -1))

    def all_gather(self, parts, local):
        self.calls.append(("list", local.device.type, tuple(local.shape), [tuple(p.shape) for p in parts]))
        for p in parts:
            p.copy_(local)


class Launch:
    def __init__(self, dist_, on_cuda, world=2):
        self.torch, self.dist, self.device, self.on_cuda, self.world = torch, dist_, torch.device("cpu"), on_cuda, world


def test_gloo_on_cuda_gathers_1d_cpu_tensors_in_the_list_form():
    d = FakeDist("gloo", 2)
    assert collectives.slowest_rank(Launch(d, on_cuda=True), [0.1, 0.3]) == [0.1, 0.3]
    assert d.calls == [("list", "cpu", (2,), [(2,), (2,)])]


def test_nccl_on_cuda_gathers_into_one_tensor():
    d = FakeDist("nccl", 2)
    assert collectives.slowest_rank(Launch(d, on_cuda=True), [0.2, 0.4]) == [0.2, 0.4]
    assert d.calls == ["into_tensor"]


def _rank(rank, path, out):
    dist.init_process_group("gloo", init_method="file://" + path, rank=rank, world_size=2)
    times = [0.1 * (rank + 1), 0.5, 0.2 / (rank + 1), 0.4, 0.3]
    try:
        try:
            got = {"slowest": collectives.slowest_rank(Launch(dist, on_cuda=True), times)}
        except RuntimeError as e:  # said, not hung on: the test then fails on its value
            got = {"slowest": str(e)}
        local = torch.tensor(times, dtype=torch.float64)
        try:  # the shapes torch 2.11 made of a 2-D output: (1, 5) parts for a (5) tensor
            dist.all_gather([torch.empty((1, 5), dtype=torch.float64) for _ in range(2)], local)
            got["two_d"] = "gathered"
        except RuntimeError as e:
            got["two_d"] = str(e)
        out.put((rank, got))
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_refuse_2d_parts_and_gather_the_benchmarks_times():
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory() as d:
        procs = [ctx.Process(target=_rank, args=(r, os.path.join(d, "rdzv"), out)) for r in range(2)]
        for p in procs:
            p.start()
        got = dict(out.get(timeout=60) for _ in procs)
        for p in procs:
            p.join(timeout=30)
    for rank in (0, 1):
        assert got[rank]["slowest"] == [0.2, 0.5, 0.2, 0.4, 0.3]
        assert MISMATCH in got[rank]["two_d"]

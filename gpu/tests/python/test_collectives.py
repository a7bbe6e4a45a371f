"""How the launch gathers each rank's step times: NCCL's all_gather_into_tensor on CUDA, the
list form everywhere else (gloo refuses a 2-D output on CUDA tensors in torch 2.11, as one H100
showed on 2026-12-06; docs/results/2026-12-06-h100-fsdp2-variants.md)."""

import torch

from bench_ddp import collectives


class FakeDist:
    """A process group of `world` ranks that all timed the same steps, recording the call used."""

    def __init__(self, backend, world):
        self.backend, self.world, self.calls = backend, world, []

    def get_backend(self):
        return self.backend

    def all_gather_into_tensor(self, out, local):
        self.calls.append("into_tensor")
        if self.backend != "nccl":
            raise RuntimeError("ProcessGroupGloo::allgather: invalid tensor size at index 0")
        out.copy_(local.expand(self.world, -1))

    def all_gather(self, parts, local):
        self.calls.append("list")
        for p in parts:
            p.copy_(local)


class Launch:
    def __init__(self, dist, on_cuda):
        self.torch, self.dist, self.device, self.on_cuda, self.world = torch, dist, torch.device("cpu"), on_cuda, 2


def test_gloo_on_cuda_gathers_in_the_list_form():
    d = FakeDist("gloo", 2)
    assert collectives.slowest_rank(Launch(d, on_cuda=True), [0.1, 0.3]) == [0.1, 0.3]
    assert d.calls == ["list"]


def test_nccl_on_cuda_gathers_into_one_tensor():
    d = FakeDist("nccl", 2)
    assert collectives.slowest_rank(Launch(d, on_cuda=True), [0.2, 0.4]) == [0.2, 0.4]
    assert d.calls == ["into_tensor"]

"""On one gloo rank of Debian's torch: DDP's buckets as torch keeps them in each recipe (against
torch's own bucket sizes), the parameters that get no gradient and the line that names the flag,
and the buffers DDP broadcasts."""

import contextlib
import os
import tempfile

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from bench_ddp import errors, host, layout


@pytest.fixture(scope="module", autouse=True)
def one_rank():
    path = os.path.join(tempfile.mkdtemp(), "store")
    dist.init_process_group("gloo", init_method="file://" + path, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


class OutOfOrder(torch.nn.Module):
    """Registered a, b, c, unused; the forward runs c, b, a: the backward reaches a first, so
    registration order is not the gradients' order, and `unused` never gets a gradient."""

    def __init__(self, with_unused=True):
        super().__init__()
        self.a, self.b, self.c = (torch.nn.Linear(512, 512) for _ in range(3))
        self.norm = torch.nn.BatchNorm1d(512)
        if with_unused:
            self.unused = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.a(self.b(self.norm(self.c(x))))


def train(wrapped, steps=3):
    for _ in range(steps):
        wrapped(torch.randn(4, 512)).sum().backward()


def bucket_bytes(model, got):
    trainable = [p for p in model.parameters() if p.requires_grad]
    return [sum(trainable[i].numel() * trainable[i].element_size() for i in b) for b in got["buckets"]]


def test_under_find_unused_parameters_the_buckets_are_the_constructors_as_torch_sizes_them():
    torch.manual_seed(0)
    model = OutOfOrder()
    wrapped = DDP(model, find_unused_parameters=True, bucket_cap_mb=1)
    train(wrapped)
    got = layout.torch_buckets(torch, dist, model, wrapped, 1)
    assert got["source"] == "constructor"
    assert got["sizes_bytes"], "torch 1.13 logs its bucket sizes"
    assert bucket_bytes(model, got) == got["sizes_bytes"]
    # The reverse-order assignment DDP rebuilds with elsewhere is another packing here.
    rebuilt = layout.assigned_buckets(dist, [p for p in model.parameters()], got["first_cap_bytes"],
                                      got["cap_bytes"], constructor=False)
    assert rebuilt != got["buckets"]


def test_without_find_unused_parameters_the_rebuilt_buckets_are_torchs_own_sizes():
    torch.manual_seed(0)
    model = OutOfOrder(with_unused=False)
    wrapped = DDP(model, bucket_cap_mb=1)
    train(wrapped)
    got = layout.torch_buckets(torch, dist, model, wrapped, 1)
    assert got["source"] == "rebuilt"
    assert bucket_bytes(model, got) == got["sizes_bytes"]


def work():
    return {"batch": lambda n, device, gen: torch.randn(n, 512, generator=gen), "loss": None}


def test_the_unused_layer_is_named_and_the_line_names_the_flag():
    model = OutOfOrder()
    unused = host.params_without_grad(torch, work(), model, 4, torch.device("cpu"), contextlib.nullcontext)
    assert unused == [["unused.weight", "unused.bias"]] * host.GRAD_CHECK_MICRO_BATCHES
    assert all(p.grad is None for p in model.parameters()), "the check leaves no gradient behind"
    check = host.grad_check(unused, [(n, p.numel()) for n, p in model.named_parameters()])
    assert (check["count"], check["params"], check["same_each_micro_batch"]) == (2, 72, True)
    recipe = {"find_unused_parameters": False, "static_graph": False}
    with pytest.raises(errors.Fatal) as e:
        host.refuse_without_find_unused(check, recipe)
    line = str(e.value)
    assert "\n" not in line and "unused.weight, unused.bias" in line and "--find-unused-parameters" in line
    host.refuse_without_find_unused(check, dict(recipe, find_unused_parameters=True))
    host.refuse_without_find_unused(check, dict(recipe, static_graph=True))


def test_ddps_own_stop_over_unused_parameters_becomes_one_line_with_the_flag():
    torch.manual_seed(0)
    wrapped = DDP(OutOfOrder())
    with pytest.raises(RuntimeError) as raised:
        train(wrapped)
    assert "find_unused_parameters" in str(raised.value)
    hint = errors.unused_parameters_hint(raised.value)
    assert isinstance(hint, errors.Fatal)
    assert "--find-unused-parameters" in str(hint) and "\n" not in str(hint)
    other = RuntimeError("something else")
    assert errors.unused_parameters_hint(other) is other


class CpuLaunch:
    def __init__(self):
        self.torch, self.dist, self.device, self.on_cuda, self.world = torch, dist, torch.device("cpu"), False, 1


def test_buffers_are_counted_and_their_broadcast_timed_only_where_ddp_broadcasts_them():
    model = OutOfOrder(with_unused=False)
    got = host.buffer_facts(CpuLaunch(), DDP(model), model)
    # BatchNorm1d(512): running mean and var (512 floats each) and its step count (one int64).
    assert (got["count"], got["bytes"]) == (3, 2 * 512 * 4 + 8)
    assert got["broadcast_s"] > 0
    off = host.buffer_facts(CpuLaunch(), DDP(model, broadcast_buffers=False), model)
    assert off["broadcast_s"] is None and off["count"] == 3

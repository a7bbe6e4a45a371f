"""One step read at its phases, on CPU with a stand-in for the allocator's counters: the reads
come in the step's order, the step trains, and its gradients are freed at the end."""

import contextlib

import torch

from bench_ddp import phases, steps


class Counter:
    """The allocator's counters as a list of readings: each read says which phase asked."""

    def __init__(self):
        self.reads, self.resets = [], 0

    def allocated(self):
        self.reads.append("allocated")
        return 100 * len(self.reads)

    def peak(self):
        self.reads.append("peak")
        return 100 * len(self.reads) + 1

    def reset(self):
        self.resets += 1


class Launch:
    def __init__(self):
        self.torch, self.device, self.on_cuda = torch, torch.device("cpu"), False
        self.rank, self.world = 0, 1
        self.cfg = {"micro_batch": 2}


def trainer():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    work = {"batch": lambda n, device, gen: torch.randn(n, 4, generator=gen),
            "loss": lambda m, b: m(b).pow(2).mean()}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    var = {"accum": 1, "fsdp": False}
    return steps.Trainer(Launch(), var, model, model, opt, (contextlib.nullcontext, None), work), model


def test_a_step_is_read_before_the_forward_at_the_loss_after_backward_and_after_the_step():
    t, model = trainer()
    before = model.weight.detach().clone()
    counter = Counter()
    got = phases.memory_phases(t, counter)
    assert list(got) == ["before_forward", "after_forward", "peak_forward", "after_backward",
                         "peak_backward", "after_step", "peak_step"]
    assert counter.reads == ["allocated", "allocated", "peak", "allocated", "peak", "allocated", "peak"]
    assert counter.resets == 3, "each phase's peak is its own"
    assert not torch.equal(model.weight, before), "the optimizer stepped"
    assert model.weight.grad is None, "gradients freed as the timed steps free them"


def test_the_plain_side_is_read_through_the_plain_model():
    t, model = trainer()
    calls = []
    t.nets = {False: lambda x: calls.append("wrapped") or model(x),
              True: lambda x: calls.append("plain") or model(x)}
    phases.memory_phases(t, Counter(), plain=True)
    assert calls == ["plain"]


def test_cpu_ranks_read_no_phases():
    t, _ = trainer()
    assert phases.run_phases(t.launch, t, True) is None

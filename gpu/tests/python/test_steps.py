"""A run's timed steps on CPU, with stand-ins for DDP and the process group: which module each
step goes through, where gradients are held back, and the counts the config sends."""

import contextlib

import pytest
import torch

from bench_ddp import steps


class FakeDist:
    """One rank's process group: a gather hands back this rank's times; barriers are counted."""

    def __init__(self):
        self.barriers = 0

    def all_gather(self, parts, local):
        for p in parts:
            p.copy_(local)

    def barrier(self, group=None):
        self.barriers += 1


class FakeDDP(torch.nn.Module):
    """DDP's surface the steps use: forward through the module, no_sync, counted."""

    def __init__(self, module):
        super().__init__()
        self.module = module
        self.calls = self.held = 0

    def forward(self, x):
        self.calls += 1
        return self.module(x)

    @contextlib.contextmanager
    def no_sync(self):
        self.held += 1
        yield


class Launch:
    def __init__(self, **cfg):
        self.torch, self.dist, self.device = torch, FakeDist(), torch.device("cpu")
        self.on_cuda, self.rank, self.world, self.solo_wait = False, 0, 1, object()
        self.cfg = dict({"micro_batch": 2, "min_timed_s": 0.0, "sizing_steps": 3, "solo_rounds": 3,
                         "plain_rounds": 8}, **cfg)


@pytest.fixture
def events(monkeypatch):
    got = []
    monkeypatch.setattr(steps, "emit", got.append)
    return got


def trainer(launch, accum=1):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    wrapped = FakeDDP(model)
    work = {"batch": lambda n, device, gen: torch.randn(n, 4, generator=gen),
            "loss": lambda m, b: m(b).pow(2).mean()}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    var = {"accum": accum, "fsdp": False}
    return steps.Trainer(launch, var, model, wrapped, opt, (contextlib.nullcontext, None), work), wrapped


def test_accumulation_holds_gradients_back_until_the_last_micro_batch(events):
    t, ddp = trainer(Launch(), accum=3)
    t.train_step(True)
    assert (ddp.calls, ddp.held) == (3, 2)
    t.train_step(False)  # nocomm: every micro-batch held back
    assert (ddp.calls, ddp.held) == (6, 5)


def test_the_plain_reference_calls_the_model_itself(events):
    t, ddp = trainer(Launch(plain_rounds=2))
    got, plain, pairs, loss = t.with_plain_reference(1, 4)
    # The DDP side: its warm-up and four steps through the wrapper; the plain side never.
    assert ddp.calls == 5
    assert (len(got), len(plain), len(pairs)) == (4, 4, 2)
    assert loss is not None
    phases = [e["phase"] for e in events]
    assert phases.count("without DDP") >= 2 and phases[0] == "timed"
    assert events[-1]["step"] == events[-1]["total"] == 2 * (1 + 4)


def test_one_gpu_alone_runs_the_rounds_the_config_sends(events):
    t, ddp = trainer(Launch(solo_rounds=2))
    solo, timed, _ = t.nocomm_with_solo(1, 3)
    assert solo > 0 and len(timed) == 2 * 3
    assert t.launch.dist.barriers == 2
    # Alone and together, every step held back: nothing is sent.
    assert ddp.held == ddp.calls == (1 + 2 * 3) * 2


def test_sizing_times_the_steps_the_config_sends(events):
    t, ddp = trainer(Launch(sizing_steps=4, min_timed_s=60.0))
    n = t.sized_steps(2, 5, True)
    assert ddp.calls == 2 + 4
    assert n > 5  # steps of well under a second each: more to fill a minute
    assert [e["phase"] for e in events] == ["sizing"] * len(events)

"""Compiled training's plumbing on CPU. Debian's torch 1.13 has no torch.compile, so these tests
use a stand-in for it (a wrapper that records what it was given and at which mode) and check
what ddpcheck does around it: what is compiled and in which order, the warm-up until steady and
the compile time outside any timed step, the eager fallback with the compiler's first line, and
the refusal on a torch without torch.compile. The real compiler runs on the GPU
(bench/experiments/eager-vs-compiled-one-gpu.sh)."""

import contextlib
import json
import types

import pytest
import torch

from bench_ddp import config, recipe, report, steps, timing
from bench_ddp.errors import Fatal


class Recorded(torch.nn.Module):
    """torch.compile's stand-in: calls the module it wraps, records it and the mode."""

    def __init__(self, module, mode, log):
        super().__init__()
        self.inner, self.mode = module, mode
        log.append((module, mode))

    def forward(self, x):
        return self.inner(x)


def fake_torch(log):
    """A torch whose compile is the stand-in, with dynamo's optimize_ddp at its default."""
    dynamo = types.SimpleNamespace(config=types.SimpleNamespace(optimize_ddp=True))
    return types.SimpleNamespace(compile=lambda m, mode=None: Recorded(m, mode, log), _dynamo=dynamo,
                                 __version__="2.x (stand-in)")


def test_the_ddp_model_is_compiled_after_wrapping_and_the_plain_model_too():
    log = []
    model, wrapped = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    nets = recipe.compiled_nets(fake_torch(log), model, wrapped, "max-autotune", fsdp=False)
    # DDP first, then torch.compile of the DDP model (PyTorch's order for DDPOptimizer); the
    # plain reference compiled the same way.
    assert [m for m, _ in log] == [wrapped, model]
    assert {mode for _, mode in log} == {"max-autotune"}
    assert nets[False].inner is wrapped and nets[True].inner is model


def test_eager_and_fsdp_runs_compile_nothing():
    log = []
    model, wrapped = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    assert recipe.compiled_nets(fake_torch(log), model, wrapped, None, fsdp=False) == {False: wrapped, True: model}
    assert recipe.compiled_nets(fake_torch(log), model, wrapped, "default", fsdp=True) == {False: wrapped, True: model}
    assert log == []


def test_a_torch_without_compile_is_one_line():
    old = types.SimpleNamespace(__version__="1.13.1")
    with pytest.raises(Fatal) as e:
        recipe.compiler(old, "default")
    assert "has no torch.compile" in str(e.value) and "\n" not in str(e.value)
    assert e.value.kind == "unavailable"
    if not hasattr(torch, "compile"):  # Debian's 1.13: the real module refuses the same way
        with pytest.raises(Fatal):
            recipe.compiler(torch, "default")


def test_ddp_optimizer_is_read_from_dynamo():
    assert recipe.ddp_optimizer_on(fake_torch([])) is True
    off = types.SimpleNamespace(_dynamo=types.SimpleNamespace(config=types.SimpleNamespace(optimize_ddp=False)))
    assert recipe.ddp_optimizer_on(off) is False
    assert recipe.ddp_optimizer_on(types.SimpleNamespace()) is None


def test_the_config_carries_the_mode_and_refuses_others():
    base = {"model": {"kind": "mlp"}}
    assert "compile" not in config.load_config(json.dumps(base))["recipe"]
    for mode in ("default", "reduce-overhead", "max-autotune"):
        cfg = dict(base, recipe={"compile": mode})
        assert config.load_config(json.dumps(cfg))["recipe"]["compile"] == mode
    with pytest.raises(Fatal):
        config.load_config(json.dumps(dict(base, recipe={"compile": "fast"})))
    fsdp = dict(base, variant={"fsdp": True}, recipe={"compile": "default"})
    with pytest.raises(Fatal, match="FSDP"):
        config.load_config(json.dumps(fsdp))


def test_warm_up_runs_blocks_until_two_agree():
    blocks = iter([[5.0] * 5, [1.3] * 5, [1.0] * 5, [1.01] * 5, [9.0] * 5])
    times, steady, settled = timing.warm_until_steady(lambda n: next(blocks), [30.0], size=5, tolerance=0.03)
    assert settled and steady == 1.01 and len(times) == 1 + 4 * 5
    # What the warm-up took beyond as many steady steps: the first step's compile and the slow blocks.
    assert timing.compile_seconds(times, steady) == pytest.approx(sum(times) - 21 * 1.01)


def test_warm_up_is_bounded_when_steps_never_settle():
    sizes = iter([1.0, 2.0] * 10)
    calls = []

    def block(n):
        calls.append(n)
        return [next(sizes)] * n

    _, steady, settled = timing.warm_until_steady(block, [], size=2, tolerance=0.03, max_blocks=6)
    assert not settled and len(calls) == 6 and steady == 2.0
    assert timing.compile_seconds([1.0, 1.0], 2.0) == 0.0


class Launch:
    def __init__(self):
        self.torch, self.device, self.on_cuda, self.rank, self.world = torch, torch.device("cpu"), False, 0, 1
        self.dist = types.SimpleNamespace(all_gather=lambda parts, local: [p.copy_(local) for p in parts])
        self.cfg = {"micro_batch": 2}


class Failing(torch.nn.Module):
    """A compiled model whose first call fails as a compiler does, with a long message."""

    def __init__(self, module):
        super().__init__()
        self.module, self.calls = module, 0

    def forward(self, x):
        self.calls += 1
        raise RuntimeError("BackendCompilerFailed: backend='inductor' raised:\nLoweringException: ...")


def make_trainer(nets_of):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    wrapped = model  # no DDP here: the steps call whichever net they are given
    work = {"batch": lambda n, device, gen: torch.randn(n, 4, generator=gen), "loss": lambda m, b: m(b).pow(2).mean()}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    var = {"accum": 1, "fsdp": False}
    return steps.Trainer(Launch(), var, model, wrapped, opt, (contextlib.nullcontext, None), work, nets_of(model))


def test_compile_warm_up_times_both_sides_before_any_timed_step(monkeypatch):
    monkeypatch.setattr(steps, "emit", lambda e: None)
    log = []
    t = make_trainer(lambda m: {False: Recorded(m, "default", log), True: Recorded(m, "default", log)})
    # Steps of a tiny model on CPU; a compile stand-in adds none: the warm-up settles, bounded.
    monkeypatch.setattr(steps, "warm_until_steady", lambda block, first: (first + block(3), 0.001, True))
    out = t.compile_warmup(True, True, lambda e: True)
    assert out["error"] is None and out["warmup_steps"] == 2 * (1 + 3)
    assert out["compile_s"] >= 0 and out["plain_compile_s"] >= 0
    assert isinstance(t.nets[False], Recorded)  # the timed steps then run compiled


def test_a_model_that_fails_to_compile_runs_eager_with_the_first_line(monkeypatch):
    monkeypatch.setattr(steps, "emit", lambda e: None)
    notes = []
    monkeypatch.setattr(steps, "note", notes.append)
    t = make_trainer(lambda m: {False: Failing(m), True: Failing(m)})
    out = t.compile_warmup(True, True, lambda e: isinstance(e, RuntimeError))
    assert out["error"] == "RuntimeError: BackendCompilerFailed: backend='inductor' raised:"
    assert t.nets == {False: t.wrapped, True: t.model}
    t.train_step(True)  # eager from here on
    assert len(notes) == 1 and "eager" in notes[0]
    # The recipe as it ran: eager, while the result keeps the compiler's line.
    assert "compile" not in report.recipe_report("bf16", {}, t.model, dict(out, mode="default"))


def test_an_error_that_is_not_the_compilers_stands(monkeypatch):
    monkeypatch.setattr(steps, "emit", lambda e: None)
    t = make_trainer(lambda m: {False: Failing(m), True: Failing(m)})
    with pytest.raises(RuntimeError):
        t.compile_warmup(True, False, lambda e: False)


def test_a_compiled_run_reports_its_mode_in_the_recipe():
    ran = {"mode": "reduce-overhead", "error": None}
    assert report.recipe_report("bf16", {}, torch.nn.Linear(1, 1), ran)["compile"] == "reduce-overhead"
    assert "compile" not in report.recipe_report("bf16", {}, torch.nn.Linear(1, 1))

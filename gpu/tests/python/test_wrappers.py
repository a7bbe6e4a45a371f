"""The FSDP2-based wrappers: what this torch can run (one line where it cannot), HSDP's mesh, the
blocks a user wraps one by one, and MixedPrecisionPolicy as users set it."""

import types

import pytest

from bench_ddp import config, wrappers
from bench_ddp.errors import Fatal


def test_debians_torch_has_no_fsdp2_and_says_so_in_one_line():
    torch = pytest.importorskip("torch")
    if wrappers.capability(torch, "fsdp") is None:
        pytest.skip("this torch %s has FSDP2" % torch.__version__)
    for w in wrappers.FSDP2_WRAPPERS:
        line = wrappers.capability(torch, w)
        assert line is not None and "\n" not in line
        assert ("torch %s" % torch.__version__) in line and "FSDP2" in line, line
    with pytest.raises(Fatal) as e:
        wrappers.require(torch, "replicate")
    assert e.value.kind == "unavailable"
    assert wrappers.capability(torch, "ddp") is None


def test_a_torch_with_fully_shard_but_no_replicate_names_replicate(monkeypatch):
    fake = types.SimpleNamespace(__version__="2.6.0")
    monkeypatch.setattr(wrappers, "import_fully_shard", lambda: (None, None))

    def no_replicate():
        raise ImportError("no module named replicate_with_fsdp")

    monkeypatch.setattr(wrappers, "import_replicate", no_replicate)
    assert wrappers.capability(fake, "fsdp") is None
    line = wrappers.capability(fake, "replicate")
    assert "torch 2.6.0" in line and "replicate_with_fsdp" in line


@pytest.mark.parametrize("world", [1, 2, 3, 5])
def test_hsdp_needs_two_replicas_of_two_shards(world):
    with pytest.raises(Fatal) as e:
        wrappers.hsdp_shape(world)
    assert "hsdp needs an even GPU count of at least 4" in str(e.value)


def test_hsdp_mesh_is_two_replicas_of_half_the_ranks():
    assert wrappers.hsdp_shape(4) == (2, 2)
    assert wrappers.hsdp_shape(8) == (2, 4)


def test_mixed_precision_is_bf16_params_fp32_reduction():
    torch = types.SimpleNamespace(bfloat16="bf16", float32="fp32")

    def policy(**kw):
        return kw

    assert wrappers.mp_policy(torch, policy, "bf16") == {"param_dtype": "bf16", "reduce_dtype": "fp32"}
    assert wrappers.mp_policy(torch, policy, "none") == {}
    with pytest.raises(Fatal):
        wrappers.mp_policy(torch, policy, "fp16")


def test_blocks_are_the_outermost_module_lists_else_sequentials():
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 4)
            self.layers = nn.ModuleList([nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(3)])
            self.head = nn.Linear(4, 10)

    d = Decoder()
    assert wrappers.blocks(torch, d) == list(d.layers)

    class Stages(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Linear(4, 4)
            self.stage1 = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
            self.stage2 = nn.Sequential(nn.Linear(4, 4))

    s = Stages()
    assert wrappers.blocks(torch, s) == [s.stage1[0], s.stage1[2], s.stage2[0]]
    assert wrappers.blocks(torch, nn.Linear(2, 2)) == []


def base_config(**variant):
    return {"model": {"kind": "mlp"}, "variant": variant}


@pytest.mark.parametrize("wrapper", wrappers.FSDP2_WRAPPERS)
def test_config_carries_the_wrapper_and_refuses_hooks_and_fp16(wrapper):
    import json

    cfg = config.load_config(json.dumps(base_config(name=wrapper, fsdp=True, wrapper=wrapper)))
    var = cfg["runs"][0][1]
    assert (var["wrapper"], var["fsdp"]) == (wrapper, True)
    with pytest.raises(Fatal):
        config.load_config(json.dumps(dict(base_config(fsdp=True, wrapper=wrapper), recipe={"amp": "fp16"})))


def test_config_refuses_an_unknown_wrapper_and_reads_old_fsdp_as_fsdp():
    import json

    with pytest.raises(Fatal) as e:
        config.load_config(json.dumps(base_config(wrapper="zero3")))
    assert "wrapper must be one of" in str(e.value)
    cfg = config.load_config(json.dumps(base_config(fsdp=True)))
    assert cfg["runs"][0][1]["wrapper"] == "fsdp"


def test_the_mesh_goes_by_the_name_the_torch_gives_it():
    def new(module, *, mesh=None, mp_policy=None):
        pass

    def old(module, *, device_mesh=None, mp_policy=None):
        pass

    assert wrappers.mesh_keyword(new) == "mesh"
    assert wrappers.mesh_keyword(old) == "device_mesh"


BN_MODEL = '''
import torch
from torch import nn


def build():
    model = nn.Sequential()
    model.stem = nn.Conv2d(3, 8, 3, padding=1)
    model.bn = nn.BatchNorm2d(8)
    model.layer1 = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
    model.pool = nn.AdaptiveAvgPool2d(1)
    model.flat = nn.Flatten()
    model.fc = nn.Linear(8, 10)

    def batch(n, device, gen):
        return (torch.randn(n, 3, 8, 8, device=device, generator=gen),
                torch.randint(0, 10, (n,), device=device, generator=gen))

    def loss(m, b):
        return nn.functional.cross_entropy(m(b[0]).float(), b[1])

    return {"model": model, "batch": batch, "loss": loss}
'''


@pytest.mark.parametrize("wrapper", ["replicate", "fsdp", "fsdp-noreshard"])
def test_each_wrapper_trains_a_batchnorm_model_beside_its_plain_copy_on_a_cpu_rank(wrapper, tmp_path):
    """Where this torch has FSDP2 (not Debian's 1.13: skipped there): one CPU rank, bf16
    MixedPrecisionPolicy, BatchNorm in units of its own, the plain reference on a copy."""
    import json
    import os
    import subprocess
    import sys

    torch = pytest.importorskip("torch")
    if wrappers.capability(torch, wrapper) is not None:
        pytest.skip(wrappers.capability(torch, wrapper))
    factory = tmp_path / "bn_model.py"
    factory.write_text(BN_MODEL)
    cfg = {"device": "cpu", "world_size": 1, "micro_batch": 2, "warmup_steps": 1, "steps": 2,
           "plain_reference": True, "plain_rounds": 2, "recipe": {"amp": "bf16"},
           "model": {"kind": "external", "source": {"kind": "python", "target": str(factory),
                                                     "function": "build"}},
           "variant": {"name": wrapper, "fsdp": True, "wrapper": wrapper}}
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "ddp")
    out = subprocess.run([sys.executable, "-W", "ignore", "-m", "bench_ddp", "--config", json.dumps(cfg)],
                         cwd=src, capture_output=True, text=True, timeout=120)
    events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    result = [e for e in events if e.get("event") == "result"]
    assert result, out.stdout + out.stderr
    r = result[0]
    assert r["wrapper"]["wrapper"] == wrapper and r["wrapper"]["norm_units"] == 2
    assert r["plain_step_time_median_s"] > 0 and len(r["plain_rounds"]) == 2


def test_a_backend_this_torch_lacks_is_one_line_naming_its_backends():
    from bench_ddp import ranks

    class Backend:
        backend_list = ["gloo", "mpi", "nccl", "ucc", "xccl", "fake"]

    dist = types.SimpleNamespace(Backend=Backend, is_nccl_available=lambda: True, is_gloo_available=lambda: True,
                                 is_backend_available=lambda name: name in Backend.backend_list)
    torch = types.SimpleNamespace(__version__="2.11.0+cu130")
    ranks.require_backend(torch, dist, "gloo")
    ranks.require_backend(torch, dist, "nccl")
    with pytest.raises(Fatal) as e:
        ranks.require_backend(torch, dist, "nccl2")
    assert str(e.value) == ("torch 2.11.0+cu130 has no nccl2 backend "
                            "(its backends: fake, gloo, mpi, nccl, ucc, xccl)")
    assert e.value.kind == "unavailable"


def test_the_backend_travels_in_the_recipe_and_cpu_ranks_refuse_one():
    import json

    cfg = config.load_config(json.dumps(dict(base_config(), recipe={"backend": "nccl2"})))
    assert cfg["recipe"]["backend"] == "nccl2"
    assert "backend" not in config.load_config(json.dumps(base_config()))["recipe"]
    with pytest.raises(Fatal):
        config.load_config(json.dumps(dict(base_config(), recipe={"backend": "mpi"})))
    with pytest.raises(Fatal) as e:
        config.load_config(json.dumps(dict(base_config(), device="cpu", recipe={"backend": "nccl2"})))
    assert "CPU ranks run gloo" in str(e.value)
    config.load_config(json.dumps(dict(base_config(), device="cpu", recipe={"backend": "gloo"})))

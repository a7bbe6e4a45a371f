"""Bad factories as one line of kind `invalid` (ddpcheck's exit 64) that names the user's file, the
key or the cause: a typo'd key, a batch function of the wrong signature, a model on the meta
device or in float16 on the CPU, autocast the model's own layers refuse, and a forward that returns
several losses."""

import pytest
import torch

from bench_ddp import host, models
from bench_ddp.errors import Fatal

CPU = torch.device("cpu")


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def no_autocast():
    return _Null()


def bf16_autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16)


def batch(n, device, gen):
    return torch.randn(n, 4, device=device, generator=gen)


def invalid(call):
    with pytest.raises(Fatal) as e:
        call()
    assert e.value.kind == "invalid", e.value
    return str(e.value)


def test_a_typod_key_is_named_with_the_keys_returned():
    said = invalid(lambda: models.check_factory_result(
        torch, {"model": torch.nn.Linear(4, 4), "batchh": batch}, "make"))
    assert "make returned no 'batch' key" in said, said
    assert "'batchh'" in said, said
    said = invalid(lambda: models.check_factory_result(
        torch, {"model": torch.nn.Linear(4, 4), "batch": batch, "tokens_per_samples": 128}, "make"))
    assert "unknown key 'tokens_per_samples'" in said and "tokens_per_sample" in said, said


def test_a_batch_of_the_wrong_signature_names_the_users_function_not_the_package(tmp_path):
    f = tmp_path / "fac.py"
    f.write_text("import torch\n\ndef batch(n):\n    return torch.ones(n, 4)\n\n"
                 "def make():\n    return {'model': torch.nn.Linear(4, 4), 'batch': batch}\n")
    made = models.call_factory(torch, models.load_factory(str(f), "make", 10), "make", 10)
    said = invalid(lambda: models.call_batch(made["batch"], 4, CPU, None))
    assert "(defined at %s:3)" % f in said, said
    assert "batch(n, device, generator)" in said, said
    assert "bench_ddp" not in said and "models.py" not in said, said


def test_a_model_on_the_meta_device_is_said_so():
    net = torch.nn.Linear(4, 4, device="meta")
    said = invalid(lambda: models.move_model(torch, net, CPU))
    assert "meta device" in said, said


class HalfOnCpu(torch.nn.Module):
    """float16 parameters whose forward fails as torch 1.13's CPU kernels do."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4, dtype=torch.float16))

    def forward(self, x):
        raise RuntimeError("\"addmm_impl_cpu_\" not implemented for 'Half'")


def test_float16_parameters_on_the_cpu_are_named_as_the_cause():
    work = {"batch": batch, "loss": None}
    said = invalid(lambda: models.try_micro_batch(torch, work, HalfOnCpu(), 2, CPU, no_autocast))
    assert "float16 parameters" in said and "float32" in said, said


class RefusesAutocast(torch.nn.Module):
    """A layer that refuses the autocast dtype, as torch 1.13's CPU LayerNorm refuses bf16."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        if torch.is_autocast_cpu_enabled():
            raise RuntimeError("expected scalar type BFloat16 but found Float")
        return self.lin(x)


def test_autocast_the_model_refuses_is_blamed_on_amp_with_the_hint():
    work = {"batch": batch, "loss": None}
    said = invalid(lambda: models.try_micro_batch(torch, work, RefusesAutocast(), 2, CPU, bf16_autocast, "bf16"))
    assert "--amp bf16" in said and "--amp none" in said, said
    assert "rejected a micro-batch" not in said, said


class FailsBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("no backward for this dtype")


class BadBackward(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return FailsBackward.apply(self.lin(x))


def test_a_backward_that_fails_in_the_gradient_check_is_one_line():
    work = {"batch": batch, "loss": None}
    said = invalid(lambda: host.params_without_grad(torch, work, BadBackward(), 2, CPU, no_autocast))
    assert "no backward for this dtype" in said, said


class TwoLosses(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)

    def forward(self, x):
        return {"ce": self.a(x).mean(), "aux": self.b(x).mean()}


def test_a_dict_of_losses_without_a_loss_key_is_refused_with_its_keys():
    said = invalid(lambda: models.default_loss(TwoLosses(), torch.ones(2, 4)))
    assert "'ce', 'aux'" in said and "'loss'" in said, said
    # One entry is no choice: it is the loss.
    one = models.default_loss(lambda x: {"out": x * 2}, torch.ones(2))
    assert one.item() == 2.0

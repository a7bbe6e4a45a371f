"""Models built by code: override text, the factory contract, the stand-in loss, and failures
that point at the user's line rather than the benchmark's."""

import pytest
import torch

from bench_ddp import errors, models
from bench_ddp.errors import Fatal


@pytest.mark.parametrize("text, value", [
    ("12", 12), ("0.5", 0.5), ("1e-5", 1e-5), ("true", True), ("False", False), ("gelu", "gelu"),
])
def test_typed_reads_overrides_as_their_type(text, value):
    got = models.typed(text)
    assert got == value and type(got) is type(value)


def test_a_factorys_pair_becomes_the_contracts_dict():
    net = torch.nn.Linear(2, 2)
    made = models.check_factory_result(torch, (net, lambda n, d, g: None), "make")
    assert made["model"] is net and callable(made["batch"])


@pytest.mark.parametrize("made, says", [
    (3, "make returned int; expected"),
    ({"model": "net", "batch": print}, "a model of type str"),
    ({"model": torch.nn.Linear(1, 1), "batch": 4}, "a batch of type int"),
    ({"model": torch.nn.Linear(1, 1), "batch": print, "loss": 1}, "a loss that is a int"),
    ({"model": torch.nn.Linear(1, 1), "batch": print, "tokens_per_sample": True}, "tokens_per_sample True"),
])
def test_what_breaks_the_factory_contract_is_one_line(made, says):
    with pytest.raises(Fatal, match=says):
        models.check_factory_result(torch, made, "make")


def test_the_stand_in_loss_takes_the_models_own_else_the_mean_of_its_output():
    class WithLoss(torch.nn.Module):
        def forward(self, input_ids, labels):
            return {"loss": torch.tensor(2.5), "logits": input_ids}

    assert models.default_loss(WithLoss(), {"input_ids": torch.ones(1), "labels": None}).item() == 2.5
    pair = models.default_loss(lambda a, b: (a + b, None), (torch.ones(2), torch.full((2,), 3.0)))
    assert pair.item() == 4.0


def test_a_factory_that_raises_points_at_its_own_line(tmp_path):
    f = tmp_path / "fac.py"
    f.write_text("def make():\n    raise ValueError('boom')\n")
    fn = models.load_factory(str(f), "make", 10)
    with pytest.raises(Fatal) as e:
        models.call_factory(torch, fn, "make", 10)
    assert str(e.value) == "factory make raised ValueError: boom (at %s:2)" % f
    assert e.value.kind == "invalid"


def test_missing_factories_and_functions_are_one_line(tmp_path):
    with pytest.raises(Fatal, match="factory file .* not found"):
        models.load_factory(str(tmp_path / "none.py"), "make", 10)
    (tmp_path / "fac.py").write_text("x = 1\n")
    with pytest.raises(Fatal, match="has no function make"):
        models.load_factory(str(tmp_path / "fac.py"), "make", 10)
    with pytest.raises(Fatal, match="is of type int, not a function"):
        models.load_factory(str(tmp_path / "fac.py"), "x", 10)


def test_a_batch_function_that_raises_is_named_with_its_arguments():
    def batch(n, device, gen):
        raise KeyError("x")

    with pytest.raises(Fatal, match=r"batch\(4, cpu, generator\) raised KeyError: 'x'"):
        models.call_batch(batch, 4, "cpu", None)


def test_frames_of_the_package_are_not_the_users_line():
    try:
        models.typed(None)  # raises inside the package (int(None))
    except TypeError as e:
        exc = e
    here = errors.where(exc)
    assert __file__ in here, here  # this test's frame, not models.py's


def test_the_trial_micro_batch_needs_a_scalar_loss():
    work = {"batch": lambda n, d, g: torch.ones(n, 2), "loss": lambda m, b: m(b)}
    with pytest.raises(Fatal, match=r"is a tensor of shape \[3, 1\]; expected a scalar tensor"):
        models.try_micro_batch(torch, work, torch.nn.Linear(2, 1), 3, torch.device("cpu"), lambda: _Null())


def test_frozen_models_have_nothing_to_send():
    net = torch.nn.Linear(2, 2)
    for p in net.parameters():
        p.requires_grad_(False)
    with pytest.raises(Fatal, match="no trainable parameters: all 6 are frozen"):
        models.check_trainable(net)


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_an_hf_config_is_read_from_the_file_named_not_its_folder(tmp_path):
    # A daemon checked this very file: the configuration read is the file's, not whatever
    # config.json lies beside it.
    named = tmp_path / "checked.json"
    named.write_text('{"model_type": "llama"}')
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    read = []

    class AutoConfig:
        @staticmethod
        def from_pretrained(path):
            read.append(path)
            return type("Cfg", (), {})()

    transformers = type("T", (), {"AutoConfig": AutoConfig})
    cfg = models.hf_config(transformers, {"config_path": str(named), "overrides": [["hidden_size", "64"]]}, "x")
    assert read == [str(named)]
    assert cfg.hidden_size == 64
    with pytest.raises(Fatal, match="not found"):
        models.hf_config(transformers, {"config_path": str(tmp_path / "gone.json")}, "x")

"""The --config JSON as the benchmark reads it: defaults, bounds, the model sources' names."""

import json

import pytest

from bench_ddp import config, timing
from bench_ddp.errors import Fatal


def load(**cfg):
    return config.load_config(json.dumps(cfg))


def refused(**cfg):
    with pytest.raises(Fatal) as e:
        load(**cfg)
    assert e.value.kind == "invalid"
    return str(e.value)


def test_defaults_are_the_seed_recipe_and_the_default_counts():
    c = load(model={"kind": "mlp"})
    assert (c["micro_batch"], c["warmup_steps"], c["steps"]) == (8, 10, 40)
    assert c["device"] == "cuda" and c["world_size"] is None
    assert c["recipe"] == {"amp": "bf16", "find_unused_parameters": False, "static_graph": False,
                           "gradient_as_bucket_view": True, "broadcast_buffers": True}
    assert (c["sizing_steps"], c["solo_rounds"], c["plain_rounds"]) == (
        timing.SIZING_STEPS, timing.SOLO_ROUNDS, timing.PLAIN_ROUNDS)
    (model, variant), = c["runs"]
    assert model["name"] == "mlp:1024x4"
    assert variant == {"name": "base", "hook": "none", "accum": 1, "bucket_cap_mb": None,
                       "gradient_as_bucket_view": True, "fsdp": False, "wrapper": "ddp",
                       "nocomm": False}


def test_counts_sent_in_the_config_are_the_ones_run():
    c = load(model={"kind": "mlp"}, sizing_steps=5, solo_rounds=2, plain_rounds=4)
    assert (c["sizing_steps"], c["solo_rounds"], c["plain_rounds"]) == (5, 2, 4)
    assert "solo_rounds" in refused(model={"kind": "mlp"}, solo_rounds=0)


def test_several_runs_share_one_launch():
    c = load(runs=[{"model": {"kind": "mlp", "width": 64}, "variant": {"name": "a", "hook": "fp16"}},
                   {"model": {"kind": "decoder", "layers": 2, "width": 64, "heads": 4, "arch": "llama"}}])
    assert [(m["name"], v["name"], v["hook"]) for m, v in c["runs"]] == [
        ("mlp:64x4", "a", "fp16"), ("llama-2x64", "base", "none")]
    assert "runs must be a list" in refused(runs=[])


@pytest.mark.parametrize("variant, says", [
    ({"hook": "zip"}, "hook must be"),
    ({"fsdp": True, "hook": "bf16"}, "FSDP takes no DDP comm hook"),
    ({"nocomm": True, "hook": "fp16"}, "nocomm sends no gradients"),
    ({"bucket_cap_mb": 0.01}, "bucket_cap_mb"),
    ({"accum": 0}, "accum must be an integer in 1..=1024"),
])
def test_variants_core_refuses_are_refused(variant, says):
    assert says in refused(model={"kind": "mlp"}, variant=variant)


def test_power_sgd_as_rust_spells_it_is_understood():
    (_, variant), = load(model={"kind": "mlp"}, variant={"hook": "power_sgd"})["runs"]
    assert variant["hook"] == "powersgd"


def test_power_sgd_without_a_rank_runs_at_torchs_default_rank_1():
    (_, variant), = load(model={"kind": "mlp"}, variant={"hook": "power_sgd"})["runs"]
    assert variant["powersgd_rank"] == 1


def test_power_sgd_takes_the_rank_core_sends():
    (_, variant), = load(model={"kind": "mlp"}, variant={"hook": "power_sgd", "powersgd_rank": 4})["runs"]
    assert variant["powersgd_rank"] == 4


@pytest.mark.parametrize("rank", [0, 257, 2.5, True, "4"])
def test_a_power_sgd_rank_out_of_bounds_is_refused(rank):
    says = refused(model={"kind": "mlp"}, variant={"hook": "power_sgd", "powersgd_rank": rank})
    assert "powersgd_rank must be an integer in 1..=256" in says


@pytest.mark.parametrize("source, name", [
    ({"kind": "python", "target": "/abs/f.py", "function": "make"}, "py:/abs/f.py:make"),
    ({"kind": "torchvision", "name": "resnet50"}, "torchvision:resnet50"),
    ({"kind": "timm", "name": "vit_tiny_patch16_224"}, "timm:vit_tiny_patch16_224"),
    ({"kind": "hugging_face", "model_type": "gpt2", "overrides": [["n_layer", "2"]]}, "hf:gpt2"),
    ({"kind": "hugging_face", "config_path": "/c/config.json"}, "hf:/c/config.json"),
])
def test_model_sources_take_ddpchecks_name_for_them(source, name):
    spec = config.parse_external({"kind": "external", "source": source}, None)
    assert spec["name"] == name
    assert config.parse_external({"kind": "external", "source": source}, "mine")["name"] == "mine"


def test_a_hugging_face_source_gets_its_sequence_and_checked_overrides():
    spec = config.parse_external({"kind": "external", "source": {"kind": "hugging_face", "model_type": "gpt2"}}, None)
    assert (spec["source"]["seq"], spec["source"]["overrides"]) == (1024, [])
    with pytest.raises(Fatal, match="overrides must be"):
        config.parse_external({"kind": "external", "source": {
            "kind": "hugging_face", "model_type": "gpt2", "overrides": [["n_layer", 2]]}}, None)


@pytest.mark.parametrize("source, says", [
    ({"kind": "python", "target": "f.py"}, "needs a target and a function"),
    ({"kind": "timm"}, "timm source needs a name"),
    ({"kind": "hugging_face"}, "needs a model_type or a config_path"),
    ({"kind": "onnx"}, "external source kind must be"),
])
def test_incomplete_sources_are_one_line(source, says):
    with pytest.raises(Fatal, match=says):
        config.parse_external({"kind": "external", "source": source}, None)


def test_bad_json_and_bad_probe_sizes_are_refused():
    with pytest.raises(Fatal, match="config is not JSON"):
        config.load_config("{")
    assert "all_reduce_probe_bytes" in refused(model={"kind": "mlp"}, all_reduce_probe_bytes=[4097])

"""The --config JSON, parsed and bounded: the runs ({model, variant} pairs), the recipe, the
device, steps and rounds. Missing keys take the seed recipe's defaults. No torch."""

import json
import math

from .errors import Fatal
from .recipe import POWERSGD_DEFAULT_RANK, POWERSGD_MAX_RANK
from .sweep import parse_sweep
from .timing import MAX_STEPS, PLAIN_ROUNDS, SIZING_STEPS, SOLO_ROUNDS
from .wrappers import WRAPPERS

CONFIG_VERSION = 1

# The process group's backends on GPUs (--backend); CPU ranks run gloo.
BACKENDS = ("nccl", "gloo", "nccl2")

# torch.compile's modes (its `mode` argument), as --compile-mode names them.
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")


def finite_or_none(x):
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _float(d, key, default, lo, hi):
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise Fatal("config: %s must be a number in %g..=%g, got %r" % (key, lo, hi, v), "invalid")
    return float(v)


def _int(d, key, default, lo, hi):
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise Fatal("config: %s must be an integer in %d..=%d, got %r" % (key, lo, hi, v), "invalid")
    return v


def _choice(d, key, allowed):
    value = d.get(key, allowed[0])
    if value not in allowed:
        raise Fatal("config: %s must be one of %s, not %r" % (key, ", ".join(allowed), value), "invalid")
    return value


def load_config(text):
    """Parses and bounds the --config JSON; missing keys take the seed recipe's defaults."""
    try:
        cfg = json.loads(text)
    except ValueError as e:
        raise Fatal("config is not JSON: %s" % e, "invalid") from None
    if not isinstance(cfg, dict):
        raise Fatal("config must be a JSON object", "invalid")
    device = _choice(cfg, "device", ("cuda", "cpu"))
    # A collectives sweep (`bench collectives --device cpu`) runs no model.
    sweep = parse_sweep(cfg["sweep"], _int) if "sweep" in cfg else None
    if sweep is not None and device != "cpu":
        raise Fatal("config: a collectives sweep runs on CPU ranks", "invalid")
    runs = [] if sweep is not None else parse_runs(cfg)
    recipe = parse_recipe(cfg.get("recipe"))
    if recipe.get("compile") and any(var["fsdp"] for _, var in runs):
        raise Fatal("config: compile is DDP's (DDPOptimizer): FSDP variants run without it", "invalid")
    if device == "cpu" and recipe.get("backend", "gloo") != "gloo":
        raise Fatal("config: CPU ranks run gloo; backend %s is for GPUs" % recipe["backend"], "invalid")
    if recipe["amp"] == "fp16" and any(var["fsdp"] for _, var in runs):
        raise Fatal("config: FSDP2 variants take amp bf16 (MixedPrecisionPolicy) or none, not fp16", "invalid")
    return {
        "runs": runs,
        "sweep": sweep,
        "device": device,
        "world_size": _int(cfg, "world_size", 1, 1, 8) if device == "cpu" else None,
        "recipe": recipe,
        "factory_deadline_s": _float(cfg, "factory_deadline_s", 60.0, 1.0, 3600.0),
        "micro_batch": _int(cfg, "micro_batch", 8, 1, 4096),
        "warmup_steps": _int(cfg, "warmup_steps", 10, 0, 10000),
        "steps": _int(cfg, "steps", 40, 1, MAX_STEPS),
        "min_timed_s": _float(cfg, "min_timed_s", 0.0, 0.0, 60.0),
        "nccl_timeout_s": _int(cfg, "nccl_timeout_s", 120, 5, 3600),
        "measure_nocomm": bool(cfg.get("measure_nocomm", False)),
        "plain_reference": bool(cfg.get("plain_reference", False)),
        "cpu_binding": _choice(cfg, "cpu_binding", ("none", "cores")),
        "all_reduce_probe_bytes": probe_sizes(cfg),
        # ddpcheck's launch budget counts on these: it sends its own.
        "sizing_steps": _int(cfg, "sizing_steps", SIZING_STEPS, 1, 100),
        "solo_rounds": _int(cfg, "solo_rounds", SOLO_ROUNDS, 1, 100),
        "plain_rounds": _int(cfg, "plain_rounds", PLAIN_ROUNDS, 1, 100),
    }


def parse_runs(cfg):
    """Several runs share one launch (one torch start-up and NCCL init): "runs": [{model,
    variant}], or the config itself is the one run."""
    entries = cfg.get("runs")
    if entries is None:
        entries = [cfg]
    if not isinstance(entries, list) or not entries or len(entries) > 256:
        raise Fatal("config: runs must be a list of 1..256 {model, variant} objects", "invalid")
    runs = []
    for e in entries:
        if not isinstance(e, dict):
            raise Fatal("config: each run must be an object", "invalid")
        runs.append(parse_run(e))
    return runs


def parse_run(cfg):
    """Parses one {model, variant} pair of the config."""
    return parse_model(cfg), parse_variant(cfg.get("variant") or {})


def parse_model(cfg):
    model = cfg.get("model")
    if not isinstance(model, dict):
        raise Fatal("config: model must be an object with kind decoder, mlp or external", "invalid")
    kind = model.get("kind")
    if kind == "decoder":
        return parse_decoder(model)
    if kind == "mlp":
        return parse_mlp(model)
    if kind == "external":
        return parse_external(model, cfg.get("model_name"))
    raise Fatal("config: model kind must be decoder, mlp or external, got %r" % (kind,), "invalid")


def parse_variant(variant):
    if not isinstance(variant, dict):
        raise Fatal("config: variant must be an object", "invalid")
    hook = str(variant.get("hook", "none")).lower().replace("_", "")
    if hook not in ("none", "fp16", "bf16", "powersgd"):
        raise Fatal("config: hook must be none, fp16, bf16 or power_sgd, got %r" % (hook,), "invalid")
    bucket = variant.get("bucket_cap_mb")
    if bucket is not None:
        bucket = finite_or_none(bucket)
        if bucket is None or not 0.1 <= bucket <= 4096:
            raise Fatal("config: bucket_cap_mb must be 0.1..=4096", "invalid")
    fsdp = bool(variant.get("fsdp", False))
    wrapper = variant.get("wrapper", "fsdp" if fsdp else "ddp")
    if wrapper not in WRAPPERS:
        raise Fatal("config: wrapper must be one of %s, not %r" % (", ".join(WRAPPERS), wrapper), "invalid")
    fsdp = wrapper != "ddp"
    if fsdp and hook != "none":
        raise Fatal("config: FSDP takes no DDP comm hook", "invalid")
    nocomm = bool(variant.get("nocomm", False))
    if nocomm and (fsdp or hook != "none"):
        raise Fatal("config: nocomm sends no gradients: no comm hook, no FSDP", "invalid")
    parsed = {
        "name": str(variant.get("name") or "base"),
        "hook": hook,
        "accum": _int(variant, "accum", 1, 1, 1024),
        "bucket_cap_mb": bucket,
        "gradient_as_bucket_view": bool(variant.get("gradient_as_bucket_view", True)),
        "fsdp": fsdp,
        "wrapper": wrapper,
        "nocomm": nocomm,
    }
    if hook == "powersgd":
        parsed["powersgd_rank"] = _int(variant, "powersgd_rank", POWERSGD_DEFAULT_RANK, 1, POWERSGD_MAX_RANK)
    return parsed


def parse_decoder(model):
    """A decoder's shape; the keys core's ModelSpec leaves out when they hold their defaults
    (arch gpt2, ffn 4 x width, kv_heads = heads, tied) take those defaults."""
    m = {
        "kind": "decoder",
        "layers": _int(model, "layers", 12, 1, 256),
        "width": _int(model, "width", 768, 8, 32768),
        "heads": _int(model, "heads", 12, 1, 256),
        "seq": _int(model, "seq", 1024, 8, 131072),
        "vocab": _int(model, "vocab", 50257, 2, 1000000),
        "arch": _choice(model, "arch", ("gpt2", "llama")),
        "untied": bool(model.get("untied", False)),
    }
    if m["width"] % m["heads"]:
        raise Fatal("config: width %d is not divisible by %d heads" % (m["width"], m["heads"]), "invalid")
    m["ffn"] = _int(model, "ffn", 4 * m["width"], 8, 262144)
    m["kv_heads"] = _int(model, "kv_heads", m["heads"], 1, 256)
    if m["heads"] % m["kv_heads"]:
        raise Fatal("config: %d key/value heads do not divide %d heads" % (m["kv_heads"], m["heads"]), "invalid")
    if m["arch"] == "llama" and (m["width"] // m["heads"]) % 2:
        raise Fatal("config: rotary positions need an even head width", "invalid")
    m["name"] = str(model.get("name") or "%s-%dx%d" % ("llama" if m["arch"] == "llama" else "decoder",
                                                      m["layers"], m["width"]))
    return m


def parse_mlp(model):
    """`depth` square layers of `width`, with `input` -> width and width -> `output` layers
    around them when both are given."""
    m = {
        "kind": "mlp",
        "width": _int(model, "width", 1024, 8, 65536),
        "depth": _int(model, "depth", 4, 1, 64),
        "input": None,
        "output": None,
    }
    ends = [model.get("input"), model.get("output")]
    if any(e is not None for e in ends):
        m["input"] = _int(model, "input", 0, 1, 1 << 20)
        m["output"] = _int(model, "output", 0, 1, 1 << 20)
        m["name"] = "mlp:%d->%dx%d->%d" % (m["input"], m["width"], m["depth"], m["output"])
    else:
        m["name"] = "mlp:%dx%d" % (m["width"], m["depth"])
    return m


def parse_external(model, name):
    """A model built by code: {"kind": "external", "source": {"kind": python|torchvision|timm|
    hugging_face, ...}}; `name` is how ddpcheck names it (the run's `model_name`)."""
    src = model.get("source")
    if not isinstance(src, dict):
        raise Fatal("config: an external model needs a source object", "invalid")
    kind = src.get("kind")
    if kind == "python":
        if not (_text(src, "target") and _text(src, "function")):
            raise Fatal("config: a python source needs a target and a function", "invalid")
        default = "py:%s:%s" % (src["target"], src["function"])
    elif kind in ("torchvision", "timm"):
        if not _text(src, "name"):
            raise Fatal("config: a %s source needs a name" % kind, "invalid")
        default = "%s:%s" % (kind, src["name"])
    elif kind == "hugging_face":
        src = parse_hugging_face(src)
        default = "hf:%s" % (src.get("config_path") or src.get("model_type"))
    else:
        raise Fatal("config: external source kind must be python, torchvision, timm or hugging_face, "
                    "got %r" % (kind,), "invalid")
    return {"kind": "external", "source": src, "name": str(name or default)}


def _text(src, key):
    """The source's non-empty text at key, else None."""
    value = src.get(key)
    return value if isinstance(value, str) and value else None


def parse_hugging_face(src):
    if not (_text(src, "model_type") or _text(src, "config_path")):
        raise Fatal("config: a hugging_face source needs a model_type or a config_path", "invalid")
    overrides = src.get("overrides") or []
    if not (isinstance(overrides, list) and all(
            isinstance(kv, list) and len(kv) == 2 and all(isinstance(x, str) for x in kv) for kv in overrides)):
        raise Fatal("config: hugging_face overrides must be [[key, value], ...] of text", "invalid")
    return dict(src, seq=_int(src, "seq", 1024, 1, 1 << 20), overrides=overrides)


def parse_recipe(recipe):
    """The training recipe's knobs that change communication: autocast and DDP's options."""
    recipe = {} if recipe is None else recipe
    if not isinstance(recipe, dict):
        raise Fatal("config: recipe must be an object", "invalid")
    out = {
        "amp": _choice(recipe, "amp", ("bf16", "fp16", "none")),
        "find_unused_parameters": bool(recipe.get("find_unused_parameters", False)),
        "static_graph": bool(recipe.get("static_graph", False)),
        "gradient_as_bucket_view": bool(recipe.get("gradient_as_bucket_view", True)),
        "broadcast_buffers": bool(recipe.get("broadcast_buffers", True)),
    }
    mode = parse_compile(recipe.get("compile"))
    if mode is not None:  # eager: the key left out, as an eager config sends it
        out["compile"] = mode
    backend = _choice(recipe, "backend", BACKENDS)
    if backend != "nccl":  # NCCL: the key left out, as ddpcheck sends it
        out["backend"] = backend
    return out


def parse_compile(mode):
    """torch.compile's mode for the recipe (--compile-mode), or None: eager."""
    if mode is None:
        return None
    if mode not in COMPILE_MODES:
        raise Fatal("config: compile must be one of %s, not %r" % (", ".join(COMPILE_MODES), mode), "invalid")
    return mode


def probe_sizes(cfg):
    """The config's all-reduce probe sizes: whole float32 buffers of 4 B..1 GiB, at most 32."""
    sizes = cfg.get("all_reduce_probe_bytes", [])
    ok = isinstance(sizes, list) and len(sizes) <= 32 and all(
        isinstance(n, int) and not isinstance(n, bool) and 4 <= n <= 1 << 30 and n % 4 == 0 for n in sizes)
    if not ok:
        raise Fatal("config: all_reduce_probe_bytes must be a list of at most 32 sizes, multiples "
                    "of 4 in 4..=%d, got %r" % (1 << 30, sizes), "invalid")
    return sizes

#!/usr/bin/env python3
"""Dumps models' parameter layouts and DDP's bucket assignment straight from torch, independent of
ddpcheck's benchmark script: the reference its reported layouts and buckets are checked against.

    model-layouts.py OUTDIR MODEL [MODEL ...]

MODEL is one of `torchvision:NAME`, `timm:NAME`, `hf:MODEL_TYPE[,KEY=VALUE...]`,
`mlp:IN->WIDTHxDEPTH->OUT` (nn.Sequential of Linear/ReLU, DEPTH square layers between the input
and output layers) or `py:FILE.py:FUNCTION` (a factory as `--model` takes it). Each model is
written to OUTDIR/<model with ':', '/', ',', '=', '>' as '-'>.json:

    {"model": MODEL, "torch": VERSION, "total_params": N, "trainable_params": N,
     "tensors": [{"name", "shape", "dtype", "trainable", "lookup", "tied_output"}, ...],
     "torch_buckets": {"source": "assignment", "buckets": [[i, ...], ...],
                       "cap_bytes": N, "first_cap_bytes": N}}

Buckets are `torch.distributed._compute_bucket_assignment_by_size` over the trainable parameters
in reverse registration order with DDP's caps (the first bucket's 1 MiB, then 25 MiB), as DDP's
reducer rebuilds them; indices are positions in the trainable list. Random weights, no download.
Runs on CPU (no GPU needed).
"""

import importlib
import importlib.util
import json
import os
import re
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

# Overrides read as the benchmark reads them (its one `typed`); layouts and buckets stay this
# script's own, the reference they are checked against.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "gpu", "src", "ddp"))
from bench_ddp.models import typed  # noqa: E402

BUCKET_CAP_MB = 25


def build(spec):
    kind, _, rest = spec.partition(":")
    if kind == "torchvision":
        import torchvision

        return torchvision.models.get_model(rest, weights=None)
    if kind == "timm":
        import timm

        return timm.create_model(rest, pretrained=False)
    if kind == "hf":
        import transformers

        head, *pairs = rest.split(",")
        # seq= is the batches' length, not the model's: ddpcheck's own key.
        overrides = {k: typed(v) for k, v in (p.split("=", 1) for p in pairs) if k != "seq"}
        if head.endswith(".json"):
            cfg = transformers.AutoConfig.from_pretrained(os.path.dirname(os.path.abspath(head)))
            for k, v in overrides.items():
                setattr(cfg, k, v)
        else:
            cfg = transformers.AutoConfig.for_model(head, **overrides)
        return transformers.AutoModelForCausalLM.from_config(cfg)
    if kind == "mlp":
        m = re.fullmatch(r"(\d+)->(\d+)x(\d+)->(\d+)", rest)
        if not m:
            raise SystemExit(f"mlp takes IN->WIDTHxDEPTH->OUT, not {rest}")
        inp, width, depth, out = (int(g) for g in m.groups())
        layers = [nn.Linear(inp, width), nn.ReLU()]
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.ReLU()]
        layers.append(nn.Linear(width, out))
        return nn.Sequential(*layers)
    if kind == "py":
        target, _, function = rest.rpartition(":")
        if target.endswith(".py"):
            loaded = importlib.util.spec_from_file_location("factory", target)
            module = importlib.util.module_from_spec(loaded)
            loaded.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
        made = getattr(module, function)()
        return made["model"] if isinstance(made, dict) else made[0]
    raise SystemExit(f"unknown model form {spec}")


def tied_output_weight(model):
    """The input embedding's weight where it is also the output projection, else None."""
    get_in = getattr(model, "get_input_embeddings", None)
    get_out = getattr(model, "get_output_embeddings", None)
    if not (callable(get_in) and callable(get_out)):
        return None
    emb, head = get_in(), get_out()
    if emb is None or head is None:
        return None
    return emb.weight if head.weight is emb.weight else None


def layout(model):
    lookups = {
        id(m.weight) for m in model.modules() if isinstance(m, (nn.Embedding, nn.EmbeddingBag))
    }
    tied = tied_output_weight(model)
    return [
        {
            "name": name,
            "shape": list(p.shape),
            "dtype": str(p.dtype).removeprefix("torch."),
            "trainable": p.requires_grad,
            "lookup": id(p) in lookups,
            "tied_output": tied is not None and p is tied,
        }
        for name, p in model.named_parameters()
    ]


def buckets(model):
    trainable = [p for p in model.parameters() if p.requires_grad]
    n = len(trainable)
    first_cap = dist._DEFAULT_FIRST_BUCKET_BYTES
    cap = int(BUCKET_CAP_MB * 1024 * 1024)
    assigned, _ = dist._compute_bucket_assignment_by_size(
        list(reversed(trainable)), [first_cap, cap], [False] * n, list(reversed(range(n)))
    )
    return {
        "source": "assignment",
        "buckets": [list(b) for b in assigned],
        "cap_bytes": cap,
        "first_cap_bytes": first_cap,
    }


def file_name(spec):
    """`torchvision:resnet50` -> `torchvision-resnet50`; a factory by its file's name."""
    if spec.startswith("py:"):
        target, _, function = spec[3:].rpartition(":")
        spec = f"py:{os.path.basename(target).removesuffix('.py')}:{function}"
    return re.sub(r"[-:/,=>]+", "-", spec).strip("-")


def dumps(doc):
    """JSON with one tensor, and one bucket, per line: diffable fixtures."""
    lines = ["{"]
    for key in ("model", "torch", "total_params", "trainable_params"):
        lines.append(f" {json.dumps(key)}: {json.dumps(doc[key])},")
    lines.append(' "tensors": [')
    lines.append(",\n".join(f"  {json.dumps(t)}" for t in doc["tensors"]))
    lines.append(" ],")
    b = doc["torch_buckets"]
    lines.append(' "torch_buckets": {')
    for key in ("source", "cap_bytes", "first_cap_bytes"):
        lines.append(f"  {json.dumps(key)}: {json.dumps(b[key])},")
    lines.append('  "buckets": [')
    lines.append(",\n".join(f"   {json.dumps(ids)}" for ids in b["buckets"]))
    lines.append("  ]")
    lines.append(" }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.manual_seed(0)
    for spec in sys.argv[2:]:
        model = build(spec)
        tensors = layout(model)
        doc = {
            "model": spec,
            "torch": torch.__version__,
            "total_params": sum(p.numel() for p in model.parameters()),
            "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "tensors": tensors,
            "torch_buckets": buckets(model),
        }
        path = os.path.join(outdir, f"{file_name(spec)}.json")
        with open(path, "w") as f:
            f.write(dumps(doc))
        print(f"{spec}: {len(tensors)} tensors, {doc['total_params']} params "
              f"({doc['trainable_params']} trainable), "
              f"{len(doc['torch_buckets']['buckets'])} buckets -> {path}")


if __name__ == "__main__":
    main()

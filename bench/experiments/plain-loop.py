#!/usr/bin/env python3
"""The reference for a 1-GPU `bench ddp` step: the same model, built by the benchmark script's own
code (the package gpu/src/ddp/bench_ddp/, imported), the same micro-batches and loss, bf16 autocast, the
same optimizer (the factory's, else fused AdamW at lr 1e-4), in a plain loop without DDP; each
step timed CUDA-synchronised, the median over `--steps` after `--warmup`.

    plain-loop.py --model MODEL --micro-batch N --steps N [--warmup N] [--ddp] [--compile]

MODEL: torchvision:NAME, timm:NAME, hf:MODEL_TYPE[,KEY=VALUE...][,seq=N] or py:FILE.py:FUNCTION.
Prints one JSON object: model, params, trainable_params, micro_batch, steps, warmup,
step_time_median_s, step_times_s, first_timed_step_unix_s (the wall clock when the first timed
step began), torch.
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "gpu", "src", "ddp"))
from bench_ddp import config, models, ranks, recipe, timing  # noqa: E402  the benchmark's own code


def source(spec):
    """The `--model` text as the script's config source (core's ModelSource, serialised)."""
    scheme, _, rest = spec.partition(":")
    if scheme == "py":
        target, _, function = rest.rpartition(":")
        return {"kind": "python", "target": os.path.abspath(target) if target.endswith(".py") else target,
                "function": function}
    if scheme in ("torchvision", "timm"):
        return {"kind": scheme, "name": rest}
    if scheme == "hf":
        head, *pairs = rest.split(",")
        kv = [p.split("=", 1) for p in pairs]
        seq = next((int(v) for k, v in kv if k == "seq"), 1024)
        src = {"kind": "hugging_face", "overrides": [[k, v] for k, v in kv if k != "seq"], "seq": seq}
        src["config_path" if head.endswith(".json") else "model_type"] = head
        return src
    raise SystemExit("unknown model form %s" % spec)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--micro-batch", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--ddp", action="store_true",
                    help="wrap the model in DDP on one rank (NCCL), as bench ddp's 1-GPU runs do")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the model (after DDP with --ddp, as PyTorch documents); "
                         "the warm-up steps then hold the compile")
    a = ap.parse_args()

    import torch

    spec = config.parse_external({"kind": "external", "source": source(a.model)}, a.model)
    torch.manual_seed(1234)
    work = models.external_workload(torch, spec, 120)
    device = torch.device("cuda", 0)
    model = work["model"].to(device)
    opt, opt_name = recipe.make_optimizer(torch, work, model, True)
    if a.ddp:
        import os

        import torch.distributed as dist
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(ranks.free_port()))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", rank=0, world_size=1)
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[0], gradient_as_bucket_view=True)
    if a.compile:
        model = torch.compile(model)
    loss_of = work["loss"] or models.default_loss
    gen = torch.Generator(device=device)
    gen.manual_seed(4321)

    times, first_timed = [], None
    for i in range(a.warmup + a.steps):
        if i == a.warmup:
            first_timed = time.time()  # wall clock, to line the steps up with GPU clock samples
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        b = work["batch"](a.micro_batch, device, gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_of(model, b)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    timed = times[a.warmup:]
    print(json.dumps({
        "model": a.model, "torch": torch.__version__, "optimizer": opt_name, "ddp": a.ddp,
        "compile": a.compile, "warmup_s": round(sum(times[:a.warmup]), 3),
        "params": sum(p.numel() for p in model.parameters()),
        "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "micro_batch": a.micro_batch, "warmup": a.warmup, "steps": a.steps,
        "step_time_median_s": timing.median(timed), "step_times_s": [round(t, 7) for t in timed],
        "first_timed_step_unix_s": first_timed,
        "final_loss": float(loss.item()),
    }))


if __name__ == "__main__":
    main()

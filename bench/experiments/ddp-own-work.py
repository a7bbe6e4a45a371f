#!/usr/bin/env python3
"""Where DDP's own work at one GPU goes: one model in one process, timed in several forms whose
blocks are interleaved round by round (V1 .. Vk then Vk .. V1), each form's figure the median of
its per-round ratio to the plain loop, so a drift along the launch cancels.

    ddp-own-work.py --model MODEL --micro-batch N [--rounds 8] [--block 6] [--settle 1]
                    [--profile-steps 5]

Forms: `plain` (the model called directly), `plain_again` (the same, a second time: the method's
own noise floor, A against A), `ddp` (DistributedDataParallel on one NCCL rank, as `bench ddp`'s
1-GPU runs wrap it: gradient_as_bucket_view), `ddp_noop_hook` (the same with a communication
hook that hands each bucket back untouched: DDP's bookkeeping without NCCL), and, for a model
with buffers, `ddp_no_buffer_broadcast` (broadcast_buffers=False). Every wrapper holds the same
module; a wrapper whose forward was not called ignores its gradient hooks.

Then torch.profiler over --profile-steps steps of `plain` and of `ddp`: the GPU's kernel time
per step against the step's wall time, and the ten largest self-CPU and self-CUDA operators.
The step is plain-loop.py's (the benchmark script's own model builders, the same batches, bf16
autocast, the factory's optimizer else fused AdamW). Prints one JSON object.
MODEL: as plain-loop.py.
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "gpu", "src", "ddp"))
from importlib import import_module  # noqa: E402

from bench_ddp import config, models, ranks, recipe, timing  # noqa: E402  the benchmark's own code

plain_loop = import_module("plain-loop")


def noop_hook(_state, bucket):
    """A DDP communication hook that sends nothing: the bucket comes back as it went in."""
    import torch

    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def build(a, torch):
    """(module, {form: callable the step runs}, optimizer, loss_of, batch, device)."""
    import torch.distributed as dist

    spec = config.parse_external({"kind": "external", "source": plain_loop.source(a.model)}, a.model)
    torch.manual_seed(1234)
    work = models.external_workload(torch, spec, 120)
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    model = work["model"].to(device)
    opt, _ = recipe.make_optimizer(torch, work, model, True)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(ranks.free_port()))
    dist.init_process_group("nccl", rank=0, world_size=1)
    ddp = torch.nn.parallel.DistributedDataParallel

    forms = {"plain": model, "plain_again": model,
             "ddp": ddp(model, device_ids=[0], gradient_as_bucket_view=True)}
    hooked = ddp(model, device_ids=[0], gradient_as_bucket_view=True)
    hooked.register_comm_hook(None, noop_hook)
    forms["ddp_noop_hook"] = hooked
    if any(True for _ in model.buffers()):
        forms["ddp_no_buffer_broadcast"] = ddp(model, device_ids=[0], gradient_as_bucket_view=True,
                                               broadcast_buffers=False)
    return model, forms, opt, work["loss"] or models.default_loss, work["batch"], device


def stepper(torch, opt, loss_of, make_batch, mb, device):
    gen = torch.Generator(device=device)
    gen.manual_seed(4321)

    def step(net):
        b = make_batch(mb, device, gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_of(net, b)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def timed(net, n):
        out = []
        for _ in range(n):
            torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            step(net)
            torch.cuda.synchronize(device)
            out.append(time.perf_counter() - t0)
        return out

    return step, timed


def interleaved(forms, timed, rounds, block, settle):
    """{form: [block median of each round]}: forms in order, then reversed, every round; the
    first `settle` steps after each switch are run but not counted."""
    names = list(forms)
    per = {n: [] for n in names}
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for n in order:
            timed(forms[n], settle)
            per[n].append(timing.median(timed(forms[n], block)))
    return per


def profiled(torch, step, net, n, device):
    """The GPU's kernel time per step against the wall time per step, and the top operators."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step(net)
        torch.cuda.synchronize(device)
    wall = (time.perf_counter() - t0) / n
    events = prof.key_averages()

    def dev_us(e):
        return getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)

    # The operators' self time on the device holds their kernels' again: count kernels only
    # (DDP's forward annotation also lands there; summarise-ddp-own-work.py takes it out).
    kernel_us = sum(dev_us(e) for e in events if str(getattr(e, "device_type", "")).endswith("CUDA"))
    def top(key):
        return [{"name": e.key, "count": e.count, "us_per_step": round(key(e) / n, 1)}
                for e in sorted(events, key=key, reverse=True)[:10]]

    return {"wall_per_step_s": wall, "device_time_per_step_s": kernel_us / n / 1e6,
            "top_self_cpu": top(lambda e: e.self_cpu_time_total), "top_self_device": top(dev_us)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--micro-batch", type=int, required=True)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--block", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--settle", type=int, default=1,
                    help="steps run after each switch of form and not counted")
    ap.add_argument("--profile-steps", type=int, default=5)
    a = ap.parse_args()

    import torch

    model, forms, opt, loss_of, make_batch, device = build(a, torch)
    step, timed = stepper(torch, opt, loss_of, make_batch, a.micro_batch, device)
    for net in forms.values():
        timed(net, a.warmup)
    per = interleaved(forms, timed, a.rounds, a.block, a.settle)
    ratios = {n: [x / p for x, p in zip(per[n], per["plain"])] for n in per if n != "plain"}
    print(json.dumps({
        "model": a.model, "micro_batch": a.micro_batch, "torch": torch.__version__,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "buffers": sum(1 for _ in model.buffers()), "rounds": a.rounds, "block": a.block, "settle": a.settle,
        "block_medians_s": per,
        "over_plain_median_of_rounds": {n: timing.median(r) for n, r in ratios.items()},
        "over_plain_rounds": ratios,
        "profile": {n: profiled(torch, step, forms[n], a.profile_steps, device) for n in ("plain", "ddp")},
    }))


if __name__ == "__main__":
    main()

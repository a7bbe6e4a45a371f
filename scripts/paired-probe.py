#!/usr/bin/env python3
"""Does timing one GPU and N GPUs in the same launch, in alternating blocks, steady a speedup?

On the shared 2xH200 VMs the speedup of a short-step MLP measured from separate launches (one
launch at 1 GPU, one at N) moves by tens of percent from launch to launch: five launches of the
same configuration spanned 1.19-2.65x (docs/results/h200x2-session5.md). The 1-GPU reference and
the N-GPU run sit in different launches, each at its own level. This probe measures both in one
launch: rank 0 alone (DDP over a one-rank group: the 1-GPU recipe, while the other ranks wait on
a CPU barrier) and all ranks (DDP over the world), in alternating blocks of steps, the order
swapped every round. If a launch-level disturbance is shared by both, the paired speedup of
separate launches should agree far better than the unpaired one.

Run under torchrun, one process per GPU (the MLP and its data are bench_ddp.py's own):
    torchrun --nproc-per-node 2 scripts/paired-probe.py [--widths 1024] [--depth 4]
        [--variants base,fp16,accum8] [--micro-batch 256] [--rounds 5] [--steps 20] [--warmup 5]
Prints one JSON line per (model, variant) on rank 0: the 1-GPU and N-GPU medians of each round
and of all rounds, and the speedup N*solo/full of each round and overall.

An experiment, not part of ddpcheck: if paired speedups agree across launches, the pairing moves
into the DDP runner (`bench ddp`) and the model's judged set is re-measured with it."""
import argparse
import contextlib
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from probe_common import init_rank, load_runner


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--widths", default="1024")
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--variants", default="base,fp16,accum8")
    ap.add_argument("--micro-batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    dev, rank, world = init_rank()
    local = dev.index
    # Every rank takes part in creating every group.
    solo_pg = dist.new_group([0])
    host_pg = dist.new_group(backend="gloo")  # the waiting ranks block on a socket, not a GPU
    runner = load_runner()
    mb = args.micro_batch

    def make(width, variant, pg):
        """One optimizer step of the bench_ddp.py MLP recipe under DDP over `pg`."""
        accum = 8 if "accum8" in variant else 1
        torch.manual_seed(1234)
        with dev:
            model = runner.build_model(torch, {"kind": "mlp", "width": width, "depth": args.depth})
        ddp = DDP(model, device_ids=[local], process_group=pg, gradient_as_bucket_view=True)
        if "fp16" in variant or "bf16" in variant:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            hook = default_hooks.fp16_compress_hook if "fp16" in variant else default_hooks.bf16_compress_hook
            ddp.register_comm_hook(pg, hook)  # the hook's all-reduce must use DDP's own group
        opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, fused=True)
        gen = torch.Generator(device=dev)
        gen.manual_seed(4321 + rank)

        def step():
            for i in range(accum):
                ctx = contextlib.nullcontext() if i == accum - 1 else ddp.no_sync()
                with ctx:
                    x = torch.randn(mb, width, device=dev, generator=gen)
                    y = torch.randn(mb, width, device=dev, generator=gen)
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        out = ddp(x)
                    loss = F.mse_loss(out.float(), y)
                    (loss / accum).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return step

    def block(fn, n):
        times = []
        for _ in range(n):
            torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize(dev)
            times.append(time.perf_counter() - t0)
        return times

    for width in [int(w) for w in args.widths.split(",") if w.strip()]:
        for variant in [v.strip() for v in args.variants.split(",") if v.strip()]:
            full = make(width, variant, None)
            solo = make(width, variant, solo_pg) if rank == 0 else None
            if rank == 0:
                block(solo, args.warmup)
            dist.barrier(group=host_pg)
            block(full, args.warmup)
            solo_rounds, full_rounds = [], []
            for r in range(args.rounds):
                order = ("solo", "full") if r % 2 == 0 else ("full", "solo")
                for which in order:
                    dist.barrier(group=host_pg)
                    if which == "solo":
                        if rank == 0:
                            solo_rounds.append(block(solo, args.steps))
                    else:
                        t = torch.tensor(block(full, args.steps), dtype=torch.float64, device=dev)
                        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # a step lasts as long as its slowest rank
                        full_rounds.append(t.tolist())
            dist.barrier(group=host_pg)
            if rank == 0:
                solo_med = [statistics.median(x) for x in solo_rounds]
                full_med = [statistics.median(x) for x in full_rounds]
                all_solo = statistics.median([t for x in solo_rounds for t in x])
                all_full = statistics.median([t for x in full_rounds for t in x])
                print(json.dumps({
                    "model": "mlp:%dx%d" % (width, args.depth), "variant": variant, "world": world,
                    "micro_batch": mb, "rounds": args.rounds, "steps": args.steps,
                    "solo_round_medians_s": solo_med, "full_round_medians_s": full_med,
                    "round_speedups": [world * s / f for s, f in zip(solo_med, full_med)],
                    "solo_median_s": all_solo, "full_median_s": all_full,
                    "speedup": world * all_solo / all_full,
                }), flush=True)
            del full, solo
            torch.cuda.empty_cache()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

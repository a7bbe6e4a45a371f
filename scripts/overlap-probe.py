#!/usr/bin/env python3
"""Does an all-reduce run slower while the GPU computes? An experiment for the step-time model.

DDP all-reduces gradient buckets while the backward pass still runs. The model reads each bucket's
all-reduce time from a curve measured on an idle GPU. Over shared memory (NCCL_P2P_DISABLE=1) it
over-predicts the speedup of unaccumulated variants by 13-18%, in two sessions on two hosts
(docs/results/h200x2-session4.md). This probe measures the suspected cause on the node: the same
all-reduce timed alone and timed while another stream of the same GPU runs a compute load.

Run under torchrun, one process per GPU, with the regime's NCCL environment:
    torchrun --nproc-per-node 2 scripts/overlap-probe.py [--sizes 1M,13M,25M,100M] [--iters 20]
        [--loads matmul,elementwise]
Prints one JSON line per (load, size) on rank 0: bytes, alone_s, loaded_s, ratio (loaded/alone),
and load_outlasted (whether the load was still running when the last all-reduce ended; if not,
part of the loaded timing was unloaded and the ratio is a lower bound).

An experiment, not part of ddpcheck: if the ratio explains the shm over-prediction, the
measurement moves into the DDP runner and the model."""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist


def parse_size(s):
    s = s.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s.rstrip("KMG")) * scale)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1M,13M,25M,100M")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--loads", default="matmul,elementwise")
    args = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    rank = dist.get_rank()

    # Loads: bf16 matmuls (compute-bound, like a backward's GEMMs) and a large in-place add
    # (memory-bound, like its elementwise kernels).
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    c = torch.empty(8192, 8192, device=dev, dtype=torch.bfloat16)
    big = torch.zeros(256 << 20, device=dev, dtype=torch.float32)  # 1 GiB
    kernels = {
        "matmul": lambda: torch.mm(a, b, out=c),
        "elementwise": lambda: big.add_(1.0),
    }
    load_stream = torch.cuda.Stream(device=dev)

    def kernel_time(fn):
        for _ in range(3):
            fn()
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        for _ in range(10):
            fn()
        torch.cuda.synchronize(dev)
        return (time.perf_counter() - t0) / 10

    def allreduce_loop(buf, iters):
        """Mean seconds per all-reduce of `buf`, host-timed until the default stream (which waits
        for NCCL's stream) is done."""
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        torch.cuda.current_stream(dev).synchronize()
        return (time.perf_counter() - t0) / iters

    for load in [x.strip() for x in args.loads.split(",") if x.strip()]:
        fn = kernels[load]
        per_kernel = kernel_time(fn)
        for size in [parse_size(s) for s in args.sizes.split(",")]:
            buf = torch.ones(max(1, size // 4), device=dev, dtype=torch.float32)
            for _ in range(3):
                dist.all_reduce(buf)
            torch.cuda.synchronize(dev)
            dist.barrier()
            alone = allreduce_loop(buf, args.iters)
            # Enough load to outlast the loaded loop three times over (it may run slower), but
            # no more than CUDA's launch queue holds without blocking this thread (about 1024).
            n = min(int(math.ceil(3 * alone * args.iters / per_kernel)) + 10, 1000)
            torch.cuda.synchronize(dev)
            dist.barrier()
            with torch.cuda.stream(load_stream):
                for _ in range(n):
                    fn()
            loaded = allreduce_loop(buf, args.iters)
            outlasted = not load_stream.query()
            torch.cuda.synchronize(dev)
            # A step lasts as long as its slowest rank: take the largest time over ranks.
            t = torch.tensor([alone, loaded, 0.0 if outlasted else 1.0], device=dev, dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            if rank == 0:
                print(json.dumps({
                    "load": load, "bytes": buf.numel() * 4, "ranks": dist.get_world_size(),
                    "alone_s": t[0].item(), "loaded_s": t[1].item(),
                    "ratio": t[1].item() / t[0].item(), "load_outlasted": t[2].item() == 0.0,
                    "load_kernel_s": per_kernel, "load_kernels": n,
                    "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
                }), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

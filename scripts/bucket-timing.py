#!/usr/bin/env python3
"""How long does each DDP bucket's all-reduce take inside a real step, against the same size alone?

The step-time model reads each bucket's all-reduce from a curve measured on an idle GPU. Over
shared memory it over-predicts unaccumulated GPT-2 by 13-18% in every session; the overlap probe
(session 5) showed an all-reduce running 0.4-1.1 ms longer while long kernels hold the SMs, but
with a synthetic load. This probe measures the real thing: DDP with a comm hook that does what
DDP does by default (average, all-reduce) and times every bucket on the GPU:

- `ready`: an event on the compute stream when the hook is called (the bucket's gradients are
  done when the stream reaches it); `done`: an event recorded in the all-reduce's completion
  callback. A bucket's own all-reduce time is done_i - max(ready_i, done_{i-1}) (the NCCL stream
  runs one bucket after another); the backward ends near the last bucket's `ready`.
- Then the same byte sizes, all-reduced alone on the idle GPUs (20 each, median).

Run under torchrun, one process per GPU, with the regime's NCCL environment (the model and its
data are bench_ddp.py's own):
    torchrun --nproc-per-node 2 scripts/bucket-timing.py [--model gpt2-355m] [--micro-batch 8]
        [--steps 10] [--warmup 5]
Prints one JSON line on rank 0: per bucket (in launch order) bytes, the median in-step time over
the timed steps, the median alone, and their ratio; the step's median; the exposed tail (last
done - last ready).

An experiment, not part of ddpcheck: the hook adds a little Python per bucket (DDP's default runs
in C++), so compare ratios, not absolute step times, with `bench ddp`."""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from probe_common import init_rank, load_runner

PRESETS = {
    "gpt2-124m": {"kind": "decoder", "layers": 12, "width": 768, "heads": 12, "seq": 1024, "vocab": 50257},
    "gpt2-355m": {"kind": "decoder", "layers": 24, "width": 1024, "heads": 16, "seq": 1024, "vocab": 50257},
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-355m", choices=sorted(PRESETS))
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    dev, rank, world = init_rank()
    local = dev.index
    spec = PRESETS[args.model]

    torch.manual_seed(1234)
    with dev:
        model = load_runner().build_model(torch, spec)
    ddp = DDP(model, device_ids=[local], gradient_as_bucket_view=True)
    marks = []  # per step: (bucket index, bytes, ready event, done event)

    def timing_hook(_state, bucket):
        t = bucket.buffer()
        ready = torch.cuda.Event(enable_timing=True)
        ready.record(torch.cuda.current_stream())
        t.div_(world)
        fut = dist.all_reduce(t, async_op=True).get_future()
        done = torch.cuda.Event(enable_timing=True)
        marks.append((bucket.index(), t.numel() * t.element_size(), ready, done))

        def finish(f):
            done.record(torch.cuda.current_stream())  # runs once the all-reduce has completed
            return f.value()[0]

        return fut.then(finish)

    ddp.register_comm_hook(None, timing_hook)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, fused=True)
    gen = torch.Generator(device=dev)
    gen.manual_seed(4321 + rank)
    mb, seq, vocab = args.micro_batch, spec["seq"], spec["vocab"]

    def step():
        tok = torch.randint(0, vocab, (mb, seq + 1), device=dev, generator=gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = ddp(tok[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tok[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    per_step, step_s = [], []
    for s in range(args.warmup + args.steps):
        marks.clear()
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize(dev)
        if s >= args.warmup:
            step_s.append(time.perf_counter() - t0)
            rows, prev_done = [], None
            for idx, nbytes, ready, done in marks:
                start = ready if prev_done is None or ready.elapsed_time(prev_done) < 0 else prev_done
                rows.append((idx, nbytes, start.elapsed_time(done) / 1e3))
                prev_done = done
            tail = marks[-1][2].elapsed_time(marks[-1][3]) / 1e3 if marks else 0.0
            per_step.append((rows, tail))

    # The same sizes alone, on idle GPUs.
    sizes = [nbytes for _, nbytes, _ in per_step[0][0]]
    alone = {}
    for nbytes in sorted(set(sizes)):
        buf = torch.ones(nbytes // 4, device=dev, dtype=torch.float32)
        for _ in range(3):
            dist.all_reduce(buf)
        times = []
        for _ in range(20):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(dev)
            dist.barrier()
            a.record()
            dist.all_reduce(buf)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        alone[nbytes] = statistics.median(times)
        del buf

    # A bucket lasts as long as on its slowest rank: the larger of the ranks' medians.
    in_step = torch.tensor([statistics.median(st[0][i][2] for st in per_step) for i in range(len(sizes))]
                           + [statistics.median(t for _, t in per_step), statistics.median(step_s)],
                           dtype=torch.float64, device=dev)
    dist.all_reduce(in_step, op=dist.ReduceOp.MAX)
    if rank == 0:
        v = in_step.tolist()
        buckets = [{"index": per_step[0][0][i][0], "bytes": sizes[i], "in_step_s": v[i],
                    "alone_s": alone[sizes[i]], "ratio": v[i] / alone[sizes[i]]} for i in range(len(sizes))]
        print(json.dumps({
            "model": args.model, "world": world, "micro_batch": mb, "steps": args.steps,
            "step_median_s": v[-1], "last_bucket_span_s": v[-2],
            "in_step_total_s": sum(b["in_step_s"] for b in buckets),
            "alone_total_s": sum(b["alone_s"] for b in buckets),
            "buckets": buckets,
            "nccl_env": {k: val for k, val in os.environ.items() if k.startswith("NCCL_")},
        }), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Checks on CPU, with real torch and torchrun, the pattern behind bench_ddp.py's solo phase.

A nocomm run on N GPUs alternates rank 0 stepping alone under DDP's no_sync, while the other ranks
wait on a gloo barrier, with all ranks stepping together. That holds only if DDP sends nothing
from a no_sync step; if it did, rank 0 would wait for ranks that wait for it. This script drives
bench_ddp.py's own `alternate_solo` on CPU (gloo stands in for NCCL as the default group) for a
model without buffers, which must finish, and for one with buffers, which DDP broadcasts in every
forward: that one must stall until the timeout, which is why bench_ddp.py skips the solo phase
for such models.

Usage (no GPU needed; torch from PyPI):
    python3 -m torch.distributed.run --standalone --nproc_per_node 2 scripts/solo-phase-check.py
Rank 0 prints one line per model and exits 0 when both behave as bench_ddp.py assumes.
"""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from probe_common import load_runner

STALL_TIMEOUT_S = 10


def solo_then_side_by_side(runner, model, rank, wait_group, steps=5):
    """bench_ddp.py's alternate_solo over a CPU DDP model, every step under no_sync, the together
    blocks ending in an all_gather of their step times as bench_ddp.py's do. Returns rank 0's
    solo step times and the together ones."""
    wrapped = DDP(model)
    opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(4321 + rank)

    def step():
        t0 = time.perf_counter()
        with wrapped.no_sync():
            x = torch.randn(8, 64, generator=gen)
            wrapped(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    def together(_round, warm, n):
        times = torch.tensor([step() for _ in range(warm + n)], dtype=torch.float64)
        gathered = [torch.empty_like(times) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, times)
        return torch.stack(gathered).max(dim=0).values.tolist()[warm:]

    return runner.alternate_solo(rank, runner.SOLO_ROUNDS, 2, steps, step, together,
                                 lambda: dist.barrier(group=wait_group))


def main():
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=timedelta(seconds=STALL_TIMEOUT_S))
    # bench_ddp.py's second group, created the same way; a short timeout so a stall ends here.
    wait_group = dist.new_group(backend="gloo", timeout=timedelta(seconds=STALL_TIMEOUT_S))
    have = torch.tensor([1.0])
    dist.all_reduce(have, op=dist.ReduceOp.MIN)
    ok = have.item() == 1.0

    runner = load_runner()
    torch.manual_seed(1234)
    plain = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 64))
    try:
        solo, together = solo_then_side_by_side(runner, plain, rank, wait_group)
        if rank == 0:
            print("without buffers: finished; %d rounds, rank 0 alone %d steps (median %.2f ms), together %d"
                  % (runner.SOLO_ROUNDS, len(solo), 1e3 * runner.median(solo), len(together)))
            ok = ok and len(solo) == len(together) == runner.SOLO_ROUNDS * 5
    except Exception as e:  # a stall here breaks bench_ddp.py's assumption
        ok = False
        print("rank %d without buffers: FAILED (%s)" % (rank, str(e).splitlines()[0]), file=sys.stderr)

    torch.manual_seed(1234)
    normed = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.BatchNorm1d(64), torch.nn.Linear(64, 64))
    t0 = time.perf_counter()
    stalled = None
    try:
        solo_then_side_by_side(runner, normed, rank, wait_group)
    except Exception as e:  # rank 0 waits in DDP's buffer broadcast, the others at the barrier
        stalled = str(e).splitlines()[0][:160]
    if rank == 0:
        print("with buffers: %s after %.1f s" % ("stalled as expected (%s)" % stalled if stalled
                                                else "finished (unexpected)", time.perf_counter() - t0))
        ok = ok and stalled
        print("solo phase pattern: %s (torch %s)" % ("OK" if ok else "NOT AS ASSUMED", torch.__version__))
    # The stalled case leaves the groups unusable: exit without a final collective.
    sys.stdout.flush()
    os._exit(0 if ok or rank != 0 else 1)


if __name__ == "__main__":
    main()

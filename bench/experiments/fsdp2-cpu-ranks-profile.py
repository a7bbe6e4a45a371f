"""Where FSDP2's step goes between CPU ranks: torch's profiler over six steps of one wrapper on
the small decoder of docs/results/2026-12-06-cpu2-fsdp2-step-model.md (`decoder:4,256,4,128,
1000,llama`, micro-batch 4, fp32), built by the benchmark package itself, then the median of
twelve timed steps; rank 0 prints the step and the ops by self CPU time. Run it under torchrun,
one rank and two, for each wrapper:

    for w in fsdp fsdp-noreshard; do for n in 1 2; do
        W=$w OMP_NUM_THREADS=1 PYTHON -m torch.distributed.run --standalone --nproc-per-node $n \\
            bench/experiments/fsdp2-cpu-ranks-profile.py; done; done

Needs a torch with FSDP2 (2.11) and nothing else running on the machine."""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "gpu", "src", "ddp"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from bench_ddp import presets, wrappers  # noqa: E402
from bench_ddp.config import parse_model  # noqa: E402

MODEL = {"kind": "decoder", "name": "llama-4x256", "layers": 4, "width": 256, "heads": 4, "seq": 128,
         "vocab": 1000, "arch": "llama"}


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    wrapper = os.environ.get("W", "fsdp")
    torch.manual_seed(0)
    work = presets.preset_workload(torch, parse_model({"model": MODEL}), torch.device("cpu"), False)
    model = work["model"]
    wrappers.wrap_fsdp2(torch, model, wrapper, "none", "cpu", world)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = work["batch"](4, "cpu", torch.Generator().manual_seed(rank))

    def step():
        work["loss"](model, batch).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(5):
        step()
    dist.barrier()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(6):
            step()
    times = []
    for _ in range(12):
        dist.barrier()
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        times.sort()
        print("== %s, %d rank(s): median step %.1f ms" % (wrapper, world, times[len(times) // 2] * 1e3))
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=45))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

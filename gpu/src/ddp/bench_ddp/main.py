"""The launch: read the config, become a rank, check torch, join the process group, say what runs
where (the env line), run every run, and turn any failure into one JSON error line."""

import argparse
import contextlib
import os
import sys
import traceback

from .bench import run_all
from .channel import emit, json_channel, rank, set_stage, stage
from .collectives import solo_wait_group
from .config import load_config
from .errors import Fatal, one_line, unused_parameters_hint
from .ranks import bind_cpus, cpu_list, join_ranks, setup_process_group, stop_cpu_ranks, wait_cpu_ranks
from .sweep import run_sweep
from .torchenv import gpu_identity, import_torch, nccl_version


class Launch:
    """What every run of this launch shares: torch, the config, this rank and its device."""

    def __init__(self, torch, dist, cfg, ranks, device, solo_wait):
        self.torch, self.dist, self.cfg = torch, dist, cfg
        self.rank, self.world, self.local_rank = ranks
        self.device, self.device_type = device, device.type
        self.on_cuda = cfg["device"] == "cuda"
        self.solo_wait = solo_wait


def env_event(torch, cfg, world, init_s, pinned):
    """The {"event": "env"} line: versions, GPUs and NCCL's variables, for provenance."""
    on_cuda = cfg["device"] == "cuda"
    gpus = [gpu_identity(torch, i) for i in range(min(world, torch.cuda.device_count() if on_cuda else 0))]
    return {
        "event": "env", "torch": torch.__version__, "cuda": torch.version.cuda if on_cuda else None,
        "nccl": nccl_version(torch) if on_cuda else None, "gpus": [g[0] for g in gpus],
        "gpu_uuids": [g[1] for g in gpus], "gpu_pci_bus_ids": [g[2] for g in gpus], "device": cfg["device"],
        "python": sys.version.split()[0], "world_size": world, "init_s": round(init_s, 4),
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        "cpu_binding": cfg["cpu_binding"], "rank0_cpus": cpu_list(pinned) if pinned else None,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description="ddpcheck DDP benchmark (one process per GPU)")
    parser.add_argument("--config", required=True, help="JSON object: model, variant, micro_batch, ...")
    args = parser.parse_args(argv)

    set_stage("reading config")
    cfg = load_config(args.config)
    json_channel()
    ranks = join_ranks(cfg, args.config)
    set_stage("pinning to CPUs")
    pinned = bind_cpus(cfg["cpu_binding"])

    set_stage("checking torch")
    torch = import_torch(cfg["device"])
    import torch.distributed as dist

    set_stage("starting the process group")
    device, init_s = setup_process_group(torch, dist, cfg, ranks[2])
    solo_wait = solo_wait_group(torch, dist, cfg, device, ranks[1])
    emit(env_event(torch, cfg, ranks[1], init_s, pinned))

    launch = Launch(torch, dist, cfg, ranks, device, solo_wait)
    if cfg["sweep"] is not None:
        run_sweep(launch)
    else:
        run_all(launch)

    set_stage("shutting down")
    with contextlib.suppress(Exception):
        dist.destroy_process_group()
    set_stage("waiting for the CPU ranks")
    wait_cpu_ranks()


def run():
    try:
        main()
    except SystemExit:
        stop_cpu_ranks()
        raise
    except BaseException as e:  # every failure becomes one JSON line
        e = unused_parameters_hint(e)
        kind = e.kind if isinstance(e, Fatal) else "error"
        r = rank()
        message = "rank %d, %s: %s" % (r, stage(), one_line(e))
        if not isinstance(e, Fatal):
            traceback.print_exc(file=sys.stderr)
        print("ddpcheck: " + message, file=sys.stderr)
        with contextlib.suppress(Exception):
            emit({"event": "error", "kind": kind, "rank": r, "stage": stage(), "message": message},
                 any_rank=True)
        sys.stderr.flush()
        stop_cpu_ranks()
        os._exit(1)  # skip interpreter teardown: a wedged NCCL communicator can hang it

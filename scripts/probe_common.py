"""Shared by the experiment scripts (paired-probe.py, bucket-timing.py, solo-phase-check.py): the DDP runner
ddpcheck embeds, loaded as a module so an experiment builds exactly its models, and the start of
a torchrun process."""
import importlib.util
import os

import torch
import torch.distributed as dist


def load_runner():
    """gpu/src/ddp/bench_ddp.py as a module (for its build_model, alternate_solo)."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "gpu", "src", "ddp", "bench_ddp.py")
    spec = importlib.util.spec_from_file_location("ddpcheck_bench_ddp", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def init_rank():
    """Binds this process to its GPU (LOCAL_RANK) and joins the NCCL group: (device, rank, world)."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    return dev, dist.get_rank(), dist.get_world_size()

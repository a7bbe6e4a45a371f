"""The torch this launch runs on: its version checked, its GPUs and NCCL named for the env line,
and a micro-batch that does not fit said as such."""

import os
import sys

from .errors import Fatal, one_line

MIN_TORCH = (2, 4)
# CPU ranks over gloo test the benchmark itself where there is no GPU (Debian's torch is 1.13).
MIN_TORCH_CPU = (1, 13)


def version_tuple(text):
    parts = []
    for piece in str(text).split("+")[0].split(".")[:2]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        parts.append(int(digits) if digits else 0)
    while len(parts) < 2:
        parts.append(0)
    return tuple(parts)


def import_torch(device="cuda"):
    try:
        import torch
    except ImportError as e:
        raise Fatal("torch is not installed for %s (%s)" % (sys.executable, e), "unavailable") from None
    need = MIN_TORCH if device == "cuda" else MIN_TORCH_CPU
    if version_tuple(torch.__version__) < need:
        raise Fatal(
            "torch %s at %s is too old: the DDP benchmark needs torch >= %d.%d%s"
            % (torch.__version__, sys.executable, need[0], need[1], "" if device == "cuda" else " on CPU"),
            "unavailable",
        )
    if device == "cpu":
        check_gloo(torch)
    else:
        check_cuda(torch)
    return torch


def check_gloo(torch):
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        raise Fatal("torch %s at %s was built without gloo" % (torch.__version__, sys.executable), "unavailable")


def check_cuda(torch):
    if not torch.cuda.is_available():
        raise Fatal(
            "torch %s has no usable CUDA (built for CUDA %s; %d device(s) visible; CUDA_VISIBLE_DEVICES=%s)"
            % (torch.__version__, torch.version.cuda, torch.cuda.device_count(),
               os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")),
            "unavailable",
        )
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_nccl_available():
        raise Fatal("torch %s was built without NCCL support" % torch.__version__, "unavailable")


def nccl_version(torch):
    try:
        v = torch.cuda.nccl.version()
    except Exception:
        return None
    if isinstance(v, tuple):
        return ".".join(str(x) for x in v)
    if isinstance(v, int):
        # NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9, major*1000 + ... before.
        if v >= 10000:
            return "%d.%d.%d" % (v // 10000, (v % 10000) // 100, v % 100)
        return "%d.%d.%d" % (v // 1000, (v % 1000) // 100, v % 100)
    return str(v)


def gpu_identity(torch, index):
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    uuid = str(uuid) if uuid is not None else None
    if uuid and not uuid.startswith(("GPU-", "MIG-")):
        uuid = "GPU-" + uuid
    bus = getattr(props, "pci_bus_id", None)
    dom = getattr(props, "pci_domain_id", None)
    dev = getattr(props, "pci_device_id", None)
    pci = None
    if bus is not None and dom is not None and dev is not None:
        pci = "%08X:%02X:%02X.0" % (dom, bus, dev)
    return props.name, uuid, pci


def oom_verdict(torch, exc, mb, index):
    """A micro-batch that does not fit: one line naming it, the GPU, its memory and the peak."""
    props = torch.cuda.get_device_properties(index)
    peak = torch.cuda.max_memory_allocated(index)
    return Fatal("micro-batch %d does not fit on GPU%d (%s, %.1f GiB): %s (peak %.1f GiB)"
                 % (mb, index, props.name, props.total_memory / 2**30, one_line(exc), peak / 2**30), "invalid")

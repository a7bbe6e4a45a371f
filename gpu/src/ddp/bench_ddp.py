#!/usr/bin/env python3
# ddpcheck DDP benchmark. Embedded in the ddpcheck binary (gpu/src/ddp/mod.rs) and written to a
# private temporary folder at run time; `ddpcheck` can also write it out for a run by hand.
"""Measure PyTorch DDP (or FSDP2) training throughput on this node's GPUs.

Run one process per GPU:

    python3 -m torch.distributed.run --standalone --nproc_per_node N ddpcheck_bench_ddp.py \
        --config '{"model": {"kind": "decoder", "name": "gpt2-124m", "layers": 12, "width": 768,
                   "heads": 12, "seq": 1024, "vocab": 50257}, "variant": {"hook": "bf16"}}'

or, for one GPU without torchrun, `python3 ddpcheck_bench_ddp.py --config '...'`.

Recipe: a decoder on random tokens, GPT-2 style (tied embeddings, pre-LN, GELU MLP, learned
positions) or LLaMA style (RMSNorm, no biases, gated SiLU MLP, rotary positions, grouped
key/value heads, tied or not), causal attention through F.scaled_dot_product_attention; or an MLP
of square linear layers, with an input and an output layer around them, on random inputs; random data made on the GPU; bf16 autocast; fused AdamW; weak scaling (every GPU gets its
own micro-batch). Each optimizer step is timed with CUDA-synchronised wall time; warm-up steps are
discarded; each step's time is the maximum over ranks (all_gather); median and p90 are computed on
rank 0.

With "all_reduce_probe_bytes" in the config (ddpcheck sends 4 KiB to 64 MiB), each run on more
than one GPU (`nocomm` too: the network is there) first all-reduces those sizes alone in the
same process group, on the idle GPUs, and reports the mean time of each (the slowest rank's) as the result's
"all_reduce_probe": the network as this launch's NCCL saw it, seconds before the steps.

Output: JSON lines on stdout. Rank 0 prints {"event":"env"}, {"event":"progress"} and
{"event":"result"}; any rank that fails prints {"event":"error","kind":..,"message":..} and exits
non-zero. Everything else (Python warnings, NCCL_DEBUG output, tracebacks) goes to stderr.
"""

import argparse
import contextlib
import json
import math
import os
import socket
import sys
import time
import traceback
from datetime import timedelta

MIN_TORCH = (2, 4)
# CPU ranks over gloo test the script itself where there is no GPU (Debian's torch is 1.13).
MIN_TORCH_CPU = (1, 13)
CONFIG_VERSION = 1
# PowerSGD runs plain all-reduce for its first iterations; 2 is the smallest value its error
# feedback accepts, so the compression is in force from the third optimizer step on.
POWERSGD_START_ITER = 2
# Progress lines at most this often (seconds), outside the timed region.
PROGRESS_EVERY_S = 0.5
# The all-reduce probe before each multi-GPU run (config "all_reduce_probe_bytes"): warm-up and
# timed calls per size.
PROBE_WARMUP, PROBE_ITERS = 2, 8
# A nocomm run on N GPUs alternates rank 0 alone and all ranks together this many times, each
# block the run's steps. One pair of 20-step blocks on 2xH200 put a launch's ln(together/alone)
# 0.089 from the next; three pairs, about 0.058 (the paired launches of 2026-11-30 12:13; the
# noise bounds this gives: docs/results/2026-11-30-h200x2-accumulation-gap.md §3); alternating
# also cancels a drift in the node's speed along the run.
SOLO_ROUNDS = 3
# With "plain_reference", a run's timed steps are split into this many rounds, each a block of
# DDP steps and a block of the same model called without DDP, in A B B A order: launches of one
# GPU spread ±7-12% and two runs of one launch 3-8% (docs/results/2026-12-01-h200-one-gpu-launch-noise.md),
# so only blocks interleaved in one launch compare to a few percent; the order cancels a drift.
PLAIN_ROUNDS = 8
# A run asked to time at least min_timed_s seconds is sized on this many steps after its warm-up.
SIZING_STEPS = 3
# The most timed steps a run may take (as the config's own bound on "steps").
MAX_STEPS = 10000

_STAGE = "starting"
_OUT = None
# On CPU, rank 0's child processes (ranks 1..N-1).
_CHILDREN = []


def _rank():
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


class Fatal(Exception):
    """An expected failure with a ready one-line message; kind is unavailable, invalid or error."""

    def __init__(self, message, kind="error"):
        Exception.__init__(self, message)
        self.kind = kind


def _json_channel():
    """The real stdout, kept for JSON lines; fd 1 then points at stderr, so that anything else
    printed by Python, NCCL (NCCL_DEBUG) or CUDA cannot corrupt the JSON stream."""
    global _OUT
    if _OUT is None:
        try:
            sys.stdout.flush()
            fd = os.dup(1)
            os.dup2(2, 1)
            _OUT = os.fdopen(fd, "w", buffering=1, encoding="utf-8")
            sys.stdout = sys.stderr
        except (OSError, ValueError):
            _OUT = sys.stdout
    return _OUT


def emit(obj, any_rank=False):
    """One JSON line on the JSON channel; only rank 0 speaks unless any_rank."""
    if _rank() != 0 and not any_rank:
        return
    out = _json_channel()
    out.write(json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n")
    out.flush()


def one_line(exc):
    """`Type: first line of the message`, bounded: what a person needs to see first."""
    if isinstance(exc, Fatal):
        text = str(exc)
    else:
        first = ""
        for line in str(exc).strip().splitlines():
            if line.strip():
                first = line.strip()
                break
        text = type(exc).__name__ + (": " + first if first else "")
    return " ".join(text.split())[:600]


def finite_or_none(x):
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def median(xs):
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("median of no values")
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2.0


def alternate_solo(rank, rounds, warm, steps, solo_step, together_block, wait):
    """Rank 0 steps alone for a block while the other ranks wait, then every rank steps together
    for a block, `rounds` times; the first block of each side also runs the warm-up.

    solo_step() times one step of rank 0 alone; together_block(round, warm, steps) runs a block
    on every rank and returns its step times after the warm-up; wait() holds every rank until
    rank 0 is done alone. Returns (rank 0's solo step times after the warm-up, [] on the other
    ranks; the together step times after the warm-up, round after round)."""
    solo, together = [], []
    for r in range(rounds):
        w = warm if r == 0 else 0
        if rank == 0:
            solo += [solo_step() for _ in range(w + steps)][w:]
        wait()
        together += together_block(r, w, steps)
    return solo, together


def interleave_plain(rounds, steps, block):
    """A B B A blocks of the DDP steps (A) and the plain ones (B): `rounds` rounds whose blocks
    hold `steps` steps in all per side. block(plain, n, first) runs n steps of one side (first: its
    first block, which also runs the warm-up) and returns their times. Returns (the DDP step times,
    the plain step times, [[DDP block median, plain block median] for each round])."""
    sizes = [steps // rounds + (1 if r < steps % rounds else 0) for r in range(rounds)]
    ddp, plain, pairs = [], [], []
    for r, n in enumerate(s for s in sizes if s > 0):
        got = {}
        for side in ((False, True) if r % 2 == 0 else (True, False)):
            got[side] = block(side, n, r == 0)
        ddp += got[False]
        plain += got[True]
        pairs.append([median(got[False]), median(got[True])])
    return ddp, plain, pairs


def percentile(xs, q):
    """Linear interpolation between closest ranks (numpy's default), q in [0, 1]."""
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("percentile of no values")
    if n == 1:
        return s[0]
    pos = q * (n - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


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


def steps_for(min_timed_s, steps, step_s):
    """Timed steps of a run: `steps`, or more where that many of `step_s` seconds would time less
    than min_timed_s (never more than MAX_STEPS). A short-step launch lands at its own speed, but
    runs side by side in it compare to a few percent only once each times seconds of steps."""
    if min_timed_s <= 0 or not step_s > 0:
        return steps
    return max(steps, min(MAX_STEPS, int(math.ceil(min_timed_s / step_s))))


def _float(d, key, default, lo, hi):
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise Fatal("config: %s must be a number in %g..=%g, got %r" % (key, lo, hi, v), "invalid")
    return float(v)


def _int(d, key, default, lo, hi):
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise Fatal("config: %s must be an integer in %d..=%d, got %r" % (key, lo, hi, v), "invalid")
    return v


def parse_decoder(model):
    """A decoder's shape; the keys core's ModelSpec leaves out when they hold their defaults
    (arch gpt2, ffn 4 x width, kv_heads = heads, tied) take those defaults."""
    m = {
        "kind": "decoder",
        "layers": _int(model, "layers", 12, 1, 256),
        "width": _int(model, "width", 768, 8, 32768),
        "heads": _int(model, "heads", 12, 1, 256),
        "seq": _int(model, "seq", 1024, 8, 131072),
        "vocab": _int(model, "vocab", 50257, 2, 1000000),
        "arch": _choice(model, "arch", ("gpt2", "llama")),
        "untied": bool(model.get("untied", False)),
    }
    if m["width"] % m["heads"]:
        raise Fatal("config: width %d is not divisible by %d heads" % (m["width"], m["heads"]), "invalid")
    m["ffn"] = _int(model, "ffn", 4 * m["width"], 8, 262144)
    m["kv_heads"] = _int(model, "kv_heads", m["heads"], 1, 256)
    if m["heads"] % m["kv_heads"]:
        raise Fatal("config: %d key/value heads do not divide %d heads" % (m["kv_heads"], m["heads"]), "invalid")
    if m["arch"] == "llama" and (m["width"] // m["heads"]) % 2:
        raise Fatal("config: rotary positions need an even head width", "invalid")
    m["name"] = str(model.get("name") or "%s-%dx%d" % ("llama" if m["arch"] == "llama" else "decoder",
                                                      m["layers"], m["width"]))
    return m


def parse_mlp(model):
    """`depth` square layers of `width`, with `input` -> width and width -> `output` layers
    around them when both are given."""
    m = {
        "kind": "mlp",
        "width": _int(model, "width", 1024, 8, 65536),
        "depth": _int(model, "depth", 4, 1, 64),
        "input": None,
        "output": None,
    }
    ends = [model.get("input"), model.get("output")]
    if any(e is not None for e in ends):
        m["input"] = _int(model, "input", 0, 1, 1 << 20)
        m["output"] = _int(model, "output", 0, 1, 1 << 20)
        m["name"] = "mlp:%d->%dx%d->%d" % (m["input"], m["width"], m["depth"], m["output"])
    else:
        m["name"] = "mlp:%dx%d" % (m["width"], m["depth"])
    return m


def parse_run(cfg):
    """Parses one {model, variant} pair of the config."""
    model = cfg.get("model")
    if not isinstance(model, dict):
        raise Fatal("config: model must be an object with kind decoder, mlp or external", "invalid")
    kind = model.get("kind")
    if kind == "decoder":
        m = parse_decoder(model)
    elif kind == "mlp":
        m = parse_mlp(model)
    elif kind == "external":
        m = parse_external(model, cfg.get("model_name"))
    else:
        raise Fatal("config: model kind must be decoder, mlp or external, got %r" % (kind,), "invalid")

    variant = cfg.get("variant") or {}
    if not isinstance(variant, dict):
        raise Fatal("config: variant must be an object", "invalid")
    hook = str(variant.get("hook", "none")).lower().replace("_", "")
    if hook not in ("none", "fp16", "bf16", "powersgd"):
        raise Fatal("config: hook must be none, fp16, bf16 or power_sgd, got %r" % (hook,), "invalid")
    bucket = variant.get("bucket_cap_mb")
    if bucket is not None:
        bucket = finite_or_none(bucket)
        if bucket is None or not 0.1 <= bucket <= 4096:
            raise Fatal("config: bucket_cap_mb must be 0.1..=4096", "invalid")
    fsdp = bool(variant.get("fsdp", False))
    if fsdp and hook != "none":
        raise Fatal("config: FSDP takes no DDP comm hook", "invalid")
    nocomm = bool(variant.get("nocomm", False))
    if nocomm and (fsdp or hook != "none"):
        raise Fatal("config: nocomm sends no gradients: no comm hook, no FSDP", "invalid")
    v = {
        "name": str(variant.get("name") or "base"),
        "hook": hook,
        "accum": _int(variant, "accum", 1, 1, 1024),
        "bucket_cap_mb": bucket,
        "gradient_as_bucket_view": bool(variant.get("gradient_as_bucket_view", True)),
        "fsdp": fsdp,
        "nocomm": nocomm,
    }
    return m, v


def load_config(text):
    """Parses and bounds the --config JSON; missing keys take the seed recipe's defaults."""
    try:
        cfg = json.loads(text)
    except ValueError as e:
        raise Fatal("config is not JSON: %s" % e, "invalid")
    if not isinstance(cfg, dict):
        raise Fatal("config must be a JSON object", "invalid")
    # Several runs share one launch (one torch start-up and NCCL init): "runs": [{model, variant}].
    entries = cfg.get("runs")
    if entries is None:
        entries = [cfg]
    if not isinstance(entries, list) or not entries or len(entries) > 256:
        raise Fatal("config: runs must be a list of 1..256 {model, variant} objects", "invalid")
    runs = []
    for e in entries:
        if not isinstance(e, dict):
            raise Fatal("config: each run must be an object", "invalid")
        runs.append(parse_run(e))
    device = _choice(cfg, "device", ("cuda", "cpu"))
    return {
        "runs": runs,
        "device": device,
        "world_size": _int(cfg, "world_size", 1, 1, 8) if device == "cpu" else None,
        "recipe": parse_recipe(cfg.get("recipe")),
        "factory_deadline_s": _float(cfg, "factory_deadline_s", 60.0, 1.0, 3600.0),
        "micro_batch": _int(cfg, "micro_batch", 8, 1, 4096),
        "warmup_steps": _int(cfg, "warmup_steps", 10, 0, 10000),
        "steps": _int(cfg, "steps", 40, 1, MAX_STEPS),
        "min_timed_s": _float(cfg, "min_timed_s", 0.0, 0.0, 60.0),
        "nccl_timeout_s": _int(cfg, "nccl_timeout_s", 120, 5, 3600),
        "measure_nocomm": bool(cfg.get("measure_nocomm", False)),
        "plain_reference": bool(cfg.get("plain_reference", False)),
        "cpu_binding": _choice(cfg, "cpu_binding", ("none", "cores")),
        "all_reduce_probe_bytes": probe_sizes(cfg),
    }


def parse_recipe(recipe):
    """The training recipe's knobs that change communication: autocast and DDP's options."""
    recipe = {} if recipe is None else recipe
    if not isinstance(recipe, dict):
        raise Fatal("config: recipe must be an object", "invalid")
    return {
        "amp": _choice(recipe, "amp", ("bf16", "fp16", "none")),
        "find_unused_parameters": bool(recipe.get("find_unused_parameters", False)),
        "static_graph": bool(recipe.get("static_graph", False)),
        "gradient_as_bucket_view": bool(recipe.get("gradient_as_bucket_view", True)),
        "broadcast_buffers": bool(recipe.get("broadcast_buffers", True)),
    }


def probe_sizes(cfg):
    """The config's all-reduce probe sizes: whole float32 buffers of 4 B..1 GiB, at most 32."""
    sizes = cfg.get("all_reduce_probe_bytes", [])
    ok = isinstance(sizes, list) and len(sizes) <= 32 and all(
        isinstance(n, int) and not isinstance(n, bool) and 4 <= n <= 1 << 30 and n % 4 == 0 for n in sizes)
    if not ok:
        raise Fatal("config: all_reduce_probe_bytes must be a list of at most 32 sizes, multiples "
                    "of 4 in 4..=%d, got %r" % (1 << 30, sizes), "invalid")
    return sizes


def _choice(d, key, allowed):
    value = d.get(key, allowed[0])
    if value not in allowed:
        raise Fatal("config: %s must be one of %s, not %r" % (key, ", ".join(allowed), value), "invalid")
    return value


def bind_cpus(mode):
    """With mode "cores", pins this rank to its own share of the physical cores it may run on: the
    cores split evenly, in (socket, core) order, among the node's local ranks, both hyperthreads of
    a core to the same rank. Steps of a few milliseconds are bound by the Python thread that
    launches kernels, and the scheduler may otherwise put two ranks on one core's hyperthreads for a
    whole launch. Called before torch starts any thread (threads inherit the mask). Returns the
    CPUs, or None when not pinned."""
    if mode != "cores" or not hasattr(os, "sched_setaffinity"):
        return None
    local = int(os.environ.get("LOCAL_RANK", "0"))
    nlocal = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    cores = {}
    for cpu in sorted(os.sched_getaffinity(0)):
        topo = "/sys/devices/system/cpu/cpu%d/topology/" % cpu
        try:
            with open(topo + "physical_package_id") as f, open(topo + "core_id") as g:
                key = (int(f.read()), int(g.read()))
        except (OSError, ValueError):
            key = (0, cpu)  # no topology: every CPU its own core
        cores.setdefault(key, []).append(cpu)
    groups = [cores[k] for k in sorted(cores)]
    share = len(groups) // max(nlocal, 1)
    if share < 1 or local >= nlocal:
        print("ddpcheck: %d core(s) for %d local rank(s): not pinned" % (len(groups), nlocal), file=sys.stderr)
        return None
    mine = sorted(c for g in groups[local * share:(local + 1) * share] for c in g)
    os.sched_setaffinity(0, mine)
    return mine


def cpu_list(cpus):
    """[0, 1, 2, 5] as "0-2,5"."""
    parts, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            parts.append(str(start) if start == c else "%d-%d" % (start, c))
            start = None
    return ",".join(parts)


def import_torch(device="cuda"):
    try:
        import torch
    except ImportError as e:
        raise Fatal("torch is not installed for %s (%s)" % (sys.executable, e), "unavailable")
    need = MIN_TORCH if device == "cuda" else MIN_TORCH_CPU
    if version_tuple(torch.__version__) < need:
        raise Fatal(
            "torch %s at %s is too old: the DDP benchmark needs torch >= %d.%d%s"
            % (torch.__version__, sys.executable, need[0], need[1], "" if device == "cuda" else " on CPU"),
            "unavailable",
        )
    if device == "cpu":
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_gloo_available():
            raise Fatal("torch %s at %s was built without gloo" % (torch.__version__, sys.executable), "unavailable")
        return torch
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
    return torch


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


def free_port():
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_model(torch, spec):
    """The model core's ModelSpec describes, tensor for tensor (core/src/ddp/architecture.rs
    counts the same tensors): an MLP of linear layers, or a GPT-2- or LLaMA-style decoder."""
    nn = torch.nn
    F = torch.nn.functional

    if spec["kind"] == "mlp":

        class MLP(nn.Module):
            def __init__(self, width, depth, input, output):
                super().__init__()
                sizes = ([input] if input else []) + [width] * (depth + 1) + ([output] if output else [])
                self.blocks = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

            def forward(self, x):
                last = len(self.blocks) - 1
                for i, layer in enumerate(self.blocks):
                    x = layer(x)
                    if i < last:
                        x = F.relu(x)
                return x

        return MLP(spec["width"], spec["depth"], spec.get("input"), spec.get("output"))

    llama = spec.get("arch") == "llama"

    class RMSNorm(nn.Module):
        """nn.RMSNorm of torch >= 2.4, for an older torch on CPU: the same one weight."""

        def __init__(self, width, eps):
            super().__init__()
            self.eps, self.weight = eps, nn.Parameter(torch.ones(width))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def norm(width):
        if not llama:
            return nn.LayerNorm(width)
        return nn.RMSNorm(width, eps=1e-6) if hasattr(nn, "RMSNorm") else RMSNorm(width, 1e-6)

    def causal_attention(q, k, v):
        """F.scaled_dot_product_attention where torch has it (2.0 on), else the same arithmetic."""
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        t = q.size(-2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
        return att.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v

    def rotate(x):
        """Rotary positions on (batch, heads, time, head width), made in the forward pass: a
        buffer would be broadcast by DDP in every forward."""
        t, hd = x.size(2), x.size(3)
        inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, device=x.device, dtype=torch.float32) / hd))
        angles = torch.outer(torch.arange(t, device=x.device, dtype=torch.float32), inv)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)

    class Block(nn.Module):
        def __init__(self, width, heads, kv_heads, ffn):
            super().__init__()
            self.heads, self.kv_heads, self.hd = heads, kv_heads, width // heads
            self.ln1 = norm(width)
            self.qkv = nn.Linear(width, (heads + 2 * kv_heads) * self.hd, bias=not llama)
            self.proj = nn.Linear(width, width, bias=not llama)
            self.ln2 = norm(width)
            # LLaMA's gate and up projections as one matrix: the same parameters, one matmul.
            self.fc = nn.Linear(width, (2 if llama else 1) * ffn, bias=not llama)
            self.fc_proj = nn.Linear(ffn, width, bias=not llama)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split([self.heads * self.hd, self.kv_heads * self.hd,
                                                   self.kv_heads * self.hd], dim=2)
            q = q.view(b, t, self.heads, self.hd).transpose(1, 2)
            k = k.view(b, t, self.kv_heads, self.hd).transpose(1, 2)
            v = v.view(b, t, self.kv_heads, self.hd).transpose(1, 2)
            if llama:
                q, k = rotate(q), rotate(k)
            if self.kv_heads != self.heads:
                k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
                v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
            y = causal_attention(q, k, v)
            x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
            h = self.fc(self.ln2(x))
            if llama:
                gate, up = h.chunk(2, dim=-1)
                h = F.silu(gate) * up
            else:
                h = F.gelu(h, approximate="tanh")
            return x + self.fc_proj(h)

    class Decoder(nn.Module):
        def __init__(self, s):
            super().__init__()
            width = s["width"]
            self.wte = nn.Embedding(s["vocab"], width)
            # Learned positions for GPT-2; LLaMA rotates queries and keys instead.
            self.wpe = None if llama else nn.Embedding(s["seq"], width)
            ffn = s.get("ffn") or 4 * width
            kv = s.get("kv_heads") or s["heads"]
            self.blocks = nn.ModuleList(Block(width, s["heads"], kv, ffn) for _ in range(s["layers"]))
            self.ln_f = norm(width)
            self.lm_head = nn.Linear(width, s["vocab"], bias=False) if s.get("untied") else None
            self.apply(self._init)

        @staticmethod
        def _init(module):
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

        def ddpcheck_tied_output(self):
            """The token embedding where it is also the output projection."""
            return self.wte.weight if self.lm_head is None else None

        def forward(self, idx):
            x = self.wte(idx)
            if self.wpe is not None:
                x = x + self.wpe(torch.arange(idx.size(1), device=idx.device))
            for block in self.blocks:
                x = block(x)
            x = self.ln_f(x)
            # Tied embeddings: the output projection is the token embedding.
            return self.lm_head(x) if self.lm_head is not None else F.linear(x, self.wte.weight)

    return Decoder(spec)


# ---- Models built by code: the user's factory and library models (docs/recommend.md, "Your own
# model"). Each becomes a workload: the module, one micro-batch of a given size, the loss, the
# optimizer and what one sample counts as.

FACTORY_CONTRACT = "{'model': nn.Module, 'batch': callable} or (model, batch)"


def parse_external(model, name):
    """A model built by code: {"kind": "external", "source": {"kind": python|torchvision|timm|
    hugging_face, ...}}; `name` is how ddpcheck names it (the run's `model_name`)."""
    src = model.get("source")
    if not isinstance(src, dict):
        raise Fatal("config: an external model needs a source object", "invalid")
    kind = src.get("kind")
    text = lambda key: src.get(key) if isinstance(src.get(key), str) and src.get(key) else None  # noqa: E731
    if kind == "python":
        if not (text("target") and text("function")):
            raise Fatal("config: a python source needs a target and a function", "invalid")
        default = "py:%s:%s" % (src["target"], src["function"])
    elif kind in ("torchvision", "timm"):
        if not text("name"):
            raise Fatal("config: a %s source needs a name" % kind, "invalid")
        default = "%s:%s" % (kind, src["name"])
    elif kind == "hugging_face":
        if not (text("model_type") or text("config_path")):
            raise Fatal("config: a hugging_face source needs a model_type or a config_path", "invalid")
        overrides = src.get("overrides") or []
        if not (isinstance(overrides, list) and all(
                isinstance(kv, list) and len(kv) == 2 and all(isinstance(x, str) for x in kv) for kv in overrides)):
            raise Fatal("config: hugging_face overrides must be [[key, value], ...] of text", "invalid")
        src = dict(src, seq=_int(src, "seq", 1024, 1, 1 << 20), overrides=overrides)
        default = "hf:%s" % (src.get("config_path") or src.get("model_type"))
    else:
        raise Fatal("config: external source kind must be python, torchvision, timm or hugging_face, "
                    "got %r" % (kind,), "invalid")
    return {"kind": "external", "source": src, "name": str(name or default)}


def typed(value):
    """A configuration override's text as the int, float or bool it reads as."""
    if value in ("true", "false", "True", "False"):
        return value in ("true", "True")
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def where(exc):
    """` (at FILE:LINE)` of the innermost frame of exc's traceback outside torch and this script
    (the user's line rather than torch's), else of the innermost frame; "" without one."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    if not frames:
        return ""
    here = os.path.abspath(__file__)
    outside = [f for f in frames if os.path.abspath(f.filename) != here
               and os.sep + "torch" + os.sep not in f.filename]
    f = (outside or frames)[-1]
    return " (at %s:%d)" % (f.filename, f.lineno)


def raised(what, exc):
    """A Fatal for user code that raised: `WHAT raised Type: message (at FILE:LINE)`."""
    if isinstance(exc, Fatal):
        return exc
    return Fatal("%s raised %s%s" % (what, one_line(exc), where(exc)), "invalid")


@contextlib.contextmanager
def deadline(seconds, message):
    """Interrupts Python code that runs longer than `seconds` (SIGALRM in the main thread); the
    launch's own deadline stays the backstop for a hang in C."""
    import signal

    def expired(signum, frame):
        raise Fatal(message, "invalid")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(max(1, int(math.ceil(seconds))))
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def import_library(name, spec_name):
    """Imports a model library, or one line naming it and the interpreter."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as e:
        if getattr(e, "name", None) == name:
            raise Fatal("%s is not installed for %s (needed by %s)" % (name, sys.executable, spec_name), "unavailable")
        raise Fatal("%s cannot be imported by %s (needed by %s): %s" % (name, sys.executable, spec_name, one_line(e)),
                    "unavailable")


def load_factory(target, function, seconds):
    """The factory function: from a .py file or an importable module, imported within `seconds`."""
    import importlib
    import importlib.util

    label = "py:%s:%s" % (target, function)
    with deadline(seconds, "importing %s did not finish within %g s" % (label, seconds)):
        try:
            if target.endswith(".py"):
                if not os.path.isfile(target):
                    raise Fatal("factory file %s not found" % target, "invalid")
                sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
                spec = importlib.util.spec_from_file_location("ddpcheck_factory", target)
                module = importlib.util.module_from_spec(spec)
                sys.modules["ddpcheck_factory"] = module
                spec.loader.exec_module(module)
            else:
                module = importlib.import_module(target)
        except ModuleNotFoundError as e:
            missing = e.name or str(e)
            if target == missing or target.startswith(missing + "."):
                raise Fatal("no module named %s for %s (%s)" % (missing, sys.executable, label), "invalid")
            raise Fatal("importing %s: no module named %s for %s%s" % (label, missing, sys.executable, where(e)),
                        "unavailable")
        except Exception as e:
            raise raised("importing %s" % label, e)
    fn = getattr(module, function, None)
    if fn is None:
        raise Fatal("%s has no function %s" % (target, function), "invalid")
    if not callable(fn):
        raise Fatal("%s.%s is of type %s, not a function" % (target, function, type(fn).__name__), "invalid")
    return fn


def call_factory(torch, fn, function, seconds):
    """Calls the factory within `seconds` and checks what it returned against the contract."""
    with deadline(seconds, "factory %s did not return within %g s" % (function, seconds)):
        try:
            made = fn()
        except Exception as e:
            raise raised("factory %s" % function, e)
    expected = "%s returned %%s; expected %s" % (function, FACTORY_CONTRACT)
    if isinstance(made, (tuple, list)) and len(made) == 2:
        made = {"model": made[0], "batch": made[1]}
    elif not isinstance(made, dict):
        raise Fatal(expected % type(made).__name__, "invalid")
    model, batch = made.get("model"), made.get("batch")
    if not isinstance(model, torch.nn.Module):
        raise Fatal(expected % ("a model of type %s" % type(model).__name__), "invalid")
    if not callable(batch):
        raise Fatal(expected % ("a batch of type %s" % type(batch).__name__), "invalid")
    for key in ("loss", "optimizer"):
        if made.get(key) is not None and not callable(made[key]):
            raise Fatal("%s returned a %s that is a %s, not a callable" % (function, key, type(made[key]).__name__),
                        "invalid")
    tps = made.get("tokens_per_sample")
    if tps is not None and (isinstance(tps, bool) or not isinstance(tps, int) or tps < 1):
        raise Fatal("%s returned tokens_per_sample %r; expected a positive integer" % (function, tps), "invalid")
    return made


def default_loss(model, batch):
    """The stand-in loss: the model's own `.loss` where its output has one (Hugging Face with
    labels), else the mean of its output (its first element for a tuple)."""
    if isinstance(batch, dict):
        out = model(**batch)
    elif isinstance(batch, (tuple, list)):
        out = model(*batch)
    else:
        out = model(batch)
    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    if loss is not None:
        return loss
    if isinstance(out, dict):
        out = next(iter(out.values()))
    if isinstance(out, (tuple, list)):
        out = out[0]
    return out.float().mean()


def classifier_workload(torch, model, image, classes, spec_name):
    """Images of `image` pixels and random labels; cross-entropy on the logits (a tuple's first)."""
    F = torch.nn.functional

    def batch(n, device, gen):
        x = torch.randn(n, 3, image, image, device=device, generator=gen)
        y = torch.randint(0, classes, (n,), device=device, generator=gen)
        return x, y

    def loss(m, b):
        out = m(b[0])
        out = getattr(out, "logits", out)
        if isinstance(out, (tuple, list)):
            out = out[0]
        return F.cross_entropy(out.float(), b[1])

    return {"model": model, "batch": batch, "loss": loss, "optimizer": None, "tokens_per_sample": None,
            "name": spec_name}


def hf_workload(torch, src, spec_name):
    """A causal language model from its configuration, random weights, batches of `seq` random
    tokens with themselves as labels (the model shifts them)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    transformers = import_library("transformers", spec_name)
    overrides = {k: typed(v) for k, v in src.get("overrides") or []}
    try:
        if src.get("config_path"):
            path = src["config_path"]
            if not os.path.isfile(path):
                raise Fatal("Hugging Face configuration %s not found" % path, "invalid")
            cfg = transformers.AutoConfig.from_pretrained(os.path.dirname(os.path.abspath(path)))
            for k, v in overrides.items():
                setattr(cfg, k, v)
        else:
            cfg = transformers.AutoConfig.for_model(src["model_type"], **overrides)
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    except Fatal:
        raise
    except Exception as e:
        raise Fatal("transformers cannot build %s: %s" % (spec_name, one_line(e)), "invalid")
    seq, vocab = src["seq"], int(cfg.vocab_size)

    def batch(n, device, gen):
        ids = torch.randint(0, vocab, (n, seq), device=device, generator=gen)
        return {"input_ids": ids, "labels": ids}

    return {"model": model, "batch": batch, "loss": None, "optimizer": None, "tokens_per_sample": seq,
            "name": spec_name}


def external_workload(torch, spec, seconds):
    """The workload of a model built by code, on the CPU (the caller moves it)."""
    src, name = spec["source"], spec["name"]
    kind = src["kind"]
    if kind == "python":
        fn = load_factory(src["target"], src["function"], seconds)
        made = call_factory(torch, fn, src["function"], seconds)
        return {"model": made["model"], "batch": made["batch"], "loss": made.get("loss"),
                "optimizer": made.get("optimizer"), "tokens_per_sample": made.get("tokens_per_sample"),
                "name": name}
    if kind == "torchvision":
        with deadline(seconds, "importing torchvision did not finish within %g s" % seconds):
            tv = import_library("torchvision", name)
        if hasattr(tv.models, "list_models") and src["name"] not in tv.models.list_models():
            raise Fatal("torchvision %s has no model %s" % (tv.__version__, src["name"]), "invalid")
        try:
            model = tv.models.get_model(src["name"], weights=None)
        except Exception as e:
            raise Fatal("torchvision cannot build %s: %s" % (src["name"], one_line(e)), "invalid")
        image = 299 if src["name"].startswith("inception") else 224
        classes = getattr(getattr(model, "fc", None), "out_features", None) or 1000
        return classifier_workload(torch, model, image, classes, name)
    if kind == "timm":
        with deadline(seconds, "importing timm did not finish within %g s" % seconds):
            timm = import_library("timm", name)
        try:
            model = timm.create_model(src["name"], pretrained=False)
        except Exception as e:
            raise Fatal("timm cannot build %s: %s" % (src["name"], one_line(e)), "invalid")
        cfg = getattr(model, "pretrained_cfg", None) or getattr(model, "default_cfg", None) or {}
        image = int((cfg.get("input_size") or (3, 224, 224))[-1])
        return classifier_workload(torch, model, image, int(getattr(model, "num_classes", 1000) or 1000), name)
    with deadline(seconds, "importing transformers did not finish within %g s" % seconds):
        return hf_workload(torch, src, name)


def tied_output_weight(model):
    """The input embedding's weight where it is also the output projection (Hugging Face's tied
    embeddings, the preset decoder's wte), else None."""
    own = getattr(model, "ddpcheck_tied_output", None)
    if callable(own):
        return own()
    get_in, get_out = getattr(model, "get_input_embeddings", None), getattr(model, "get_output_embeddings", None)
    if not (callable(get_in) and callable(get_out)):
        return None
    try:
        emb, head = get_in(), get_out()
    except Exception:
        return None
    if emb is None or head is None or getattr(head, "weight", None) is None:
        return None
    return emb.weight if head.weight is emb.weight else None


def param_layout(torch, model):
    """The parameters in registration order (a tied weight once), as DDP sees them."""
    nn = torch.nn
    lookups = {id(m.weight) for m in model.modules() if isinstance(m, (nn.Embedding, nn.EmbeddingBag))}
    tied = tied_output_weight(model)
    tensors = []
    for name, p in model.named_parameters():
        t = {"name": name, "shape": list(p.shape), "dtype": str(p.dtype).replace("torch.", ""),
             "trainable": bool(p.requires_grad)}
        if id(p) in lookups:
            t["lookup"] = True
        if tied is not None and p is tied:
            t["tied_output"] = True
        tensors.append(t)
    return {"tensors": tensors}


def bucket_caps(dist, wrapped, bucket_cap_mb):
    """(cap, first cap) in bytes as DDP's reducer got them: the first bucket's own cap unless
    torch >= 2.x was given an explicit bucket_cap_mb (then every bucket has the one cap)."""
    cap = int((25 if bucket_cap_mb is None else bucket_cap_mb) * 1024 * 1024)
    first = dist._DEFAULT_FIRST_BUCKET_BYTES
    if wrapped is not None and getattr(wrapped, "bucket_bytes_cap_default", True) is False:
        first = cap
    return cap, first


def torch_buckets(torch, dist, model, wrapped, bucket_cap_mb):
    """DDP's buckets as torch made them: the rebuilt ones from DDP's logging data (after the first
    iteration, in the gradients' real ready order), else torch's assignment over the trainable
    parameters in reverse order (one rank, or find_unused_parameters, where DDP does not
    rebuild). Indices are positions in the trainable parameters in registration order."""
    cap, first = bucket_caps(dist, wrapped, bucket_cap_mb)
    rebuilt = ""
    with contextlib.suppress(Exception):
        rebuilt = str(wrapped._get_ddp_logging_data().get("rebuilt_per_bucket_param_indices") or "")
    buckets = [[int(i) for i in b.split()] for b in rebuilt.split(",") if b.strip()]
    if buckets:
        return {"source": "rebuilt", "buckets": buckets, "cap_bytes": cap, "first_cap_bytes": first}
    trainable = [p for p in model.parameters() if p.requires_grad]
    n = len(trainable)
    try:
        assigned = dist._compute_bucket_assignment_by_size(
            list(reversed(trainable)), [first, cap], [False] * n, list(reversed(range(n))))
    except Exception as e:
        print("ddpcheck: torch's bucket assignment is not available: %s" % one_line(e), file=sys.stderr)
        return None
    buckets = assigned[0] if isinstance(assigned, tuple) else assigned
    return {"source": "assignment", "buckets": [list(b) for b in buckets], "cap_bytes": cap, "first_cap_bytes": first}


def check_trainable(model):
    """One line where DDP would have nothing to send."""
    params = list(model.parameters())
    if not params:
        raise Fatal("the model has no parameters", "invalid")
    if not any(p.requires_grad for p in params):
        raise Fatal("no trainable parameters: all %d are frozen (%d tensors)"
                    % (sum(p.numel() for p in params), len(params)), "invalid")


def call_batch(make_batch, n, device, gen):
    """One micro-batch from the factory's batch function, or one line saying why not."""
    try:
        return make_batch(n, device, gen)
    except Fatal:
        raise
    except Exception as e:
        raise raised("batch(%d, %s, generator)" % (n, device), e)


def import_fully_shard():
    try:
        from torch.distributed.fsdp import fully_shard  # torch >= 2.6
    except ImportError:
        try:
            from torch.distributed._composable.fsdp import fully_shard  # torch 2.4, 2.5
        except ImportError as e:
            raise Fatal("this torch has no FSDP2 fully_shard (%s)" % e, "unavailable")
    return fully_shard


def start_cpu_ranks(cfg, config_text):
    """--device cpu without a launcher's RANK: this process becomes rank 0 and starts ranks
    1..N-1 as children (torchrun is not used on CPU: Debian's fails at start on Python 3.11).
    They stay in our process group, so the launch's deadline stops them with us; their JSON lines
    (errors only) go to our JSON channel."""
    import subprocess

    world = cfg["world_size"]
    os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(world),
                       "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(free_port())})
    for r in range(1, world):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r))
        _CHILDREN.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--config", config_text],
            env=env, stdin=subprocess.DEVNULL, stdout=_json_channel()))


def wait_cpu_ranks():
    """Rank 0's children, once its own runs are done: each must exit cleanly."""
    for r, child in enumerate(_CHILDREN, start=1):
        code = child.wait()
        if code != 0:
            raise Fatal("CPU rank %d exited with code %d" % (r, code))
    del _CHILDREN[:]


def stop_cpu_ranks():
    for child in _CHILDREN:
        with contextlib.suppress(Exception):
            child.kill()


def autocast_for(torch, device_type, amp):
    """A factory of autocast contexts for the recipe's amp; one line where this torch cannot."""
    if amp == "none":
        return contextlib.nullcontext
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.autocast(device_type, dtype=dtype):
                on = torch.is_autocast_enabled() if device_type == "cuda" else torch.is_autocast_cpu_enabled()
    except RuntimeError:  # torch 1.13's CPU autocast refuses float16 outright
        on = False
    if not on:
        raise Fatal("torch %s has no %s autocast on %s: use --amp %s or none"
                    % (torch.__version__, amp, device_type.upper(), "bf16" if amp == "fp16" else "fp16"), "invalid")
    return lambda: torch.autocast(device_type, dtype=dtype)


def grad_scaler(torch, device_type, amp):
    """fp16 autocast trains with a gradient scaler, as torch's recipe has it; None otherwise."""
    if amp != "fp16":
        return None
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        with contextlib.suppress(Exception):
            return torch.amp.GradScaler(device_type)
    return torch.cuda.amp.GradScaler() if device_type == "cuda" else None


def preset_workload(torch, spec, device, on_cuda):
    """A preset's model (built on the device) with its random batches and loss."""
    F = torch.nn.functional
    with device if on_cuda else contextlib.nullcontext():
        model = build_model(torch, spec)
    if spec["kind"] == "decoder":
        seq, vocab = spec["seq"], spec["vocab"]

        def batch(n, dev, gen):
            return torch.randint(0, vocab, (n, seq + 1), device=dev, generator=gen)

        def loss(m, t):
            logits = m(t[:, :-1])
            return F.cross_entropy(logits.reshape(-1, logits.size(-1)), t[:, 1:].reshape(-1))

        return {"model": model, "batch": batch, "loss": loss, "optimizer": None, "tokens_per_sample": seq}
    n_in, n_out = spec.get("input") or spec["width"], spec.get("output") or spec["width"]

    def batch(n, dev, gen):
        return torch.randn(n, n_in, device=dev, generator=gen), torch.randn(n, n_out, device=dev, generator=gen)

    def loss(m, b):
        return F.mse_loss(m(b[0]).float(), b[1])

    return {"model": model, "batch": batch, "loss": loss, "optimizer": None, "tokens_per_sample": None}


def make_optimizer(torch, work, model, on_cuda):
    """The factory's optimizer, else AdamW at lr 1e-4 (fused on CUDA): (optimizer, its name)."""
    if work.get("optimizer") is None:
        if on_cuda:
            return torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True), "adamw-fused"
        return torch.optim.AdamW(model.parameters(), lr=1e-4), "adamw"
    try:
        opt = work["optimizer"](model.parameters())
    except Exception as e:
        raise raised("optimizer(params)", e)
    if not isinstance(opt, torch.optim.Optimizer):
        raise Fatal("optimizer(params) returned %s; expected a torch.optim.Optimizer" % type(opt).__name__, "invalid")
    return opt, type(opt).__name__.lower()


def try_micro_batch(torch, work, model, mb, device, autocast):
    """One forward of the bare model on one micro-batch, before DDP: a batch the model rejects,
    or a loss that is not a scalar, is one line here rather than a traceback mid-run."""
    gen = torch.Generator(device=device)
    gen.manual_seed(1)
    b = call_batch(work["batch"], mb, device, gen)
    try:
        with torch.no_grad(), autocast():
            loss = (work["loss"] or default_loss)(model, b)
    except Exception as e:
        if is_oom(torch, e):
            raise
        raise Fatal("the model rejected a micro-batch of %d: %s%s" % (mb, one_line(e), where(e)), "invalid")
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        what = "a tensor of shape %s" % list(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise Fatal("the loss of a micro-batch of %d is %s; expected a scalar tensor" % (mb, what), "invalid")


def is_oom(torch, exc):
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(exc, oom)) or "CUDA out of memory" in str(exc)


def oom_verdict(torch, exc, mb, index):
    """A micro-batch that does not fit: one line naming it, the GPU, its memory and the peak."""
    props = torch.cuda.get_device_properties(index)
    peak = torch.cuda.max_memory_allocated(index)
    return Fatal("micro-batch %d does not fit on GPU%d (%s, %.1f GiB): %s (peak %.1f GiB)"
                 % (mb, index, props.name, props.total_memory / 2**30, one_line(exc), peak / 2**30), "invalid")


def wrap_ddp(torch, model, var, recipe, cfg, local_rank, on_cuda):
    """DDP with the recipe's options and the variant's comm hook."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    kwargs = {"gradient_as_bucket_view": var["gradient_as_bucket_view"] and recipe["gradient_as_bucket_view"],
              "find_unused_parameters": recipe["find_unused_parameters"]}
    if recipe["static_graph"]:
        kwargs["static_graph"] = True
    if not recipe["broadcast_buffers"]:
        kwargs["broadcast_buffers"] = False
    if on_cuda:
        kwargs["device_ids"] = [local_rank]
    if var["bucket_cap_mb"] is not None:
        kwargs["bucket_cap_mb"] = var["bucket_cap_mb"]
    if var["hook"] == "bf16" and not on_cuda:
        raise Fatal("the bf16 compression hook needs NCCL (gloo cannot all-reduce bfloat16): not on CPU; "
                    "fp16 and power_sgd work there", "invalid")
    wrapped = DDP(model, **kwargs)
    if var["hook"] in ("fp16", "bf16"):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        hook = default_hooks.fp16_compress_hook if var["hook"] == "fp16" else default_hooks.bf16_compress_hook
        wrapped.register_comm_hook(None, hook)
    elif var["hook"] == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

        state = powersgd.PowerSGDState(
            process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=POWERSGD_START_ITER
        )
        wrapped.register_comm_hook(state, powersgd.powerSGD_hook)
        if cfg["warmup_steps"] < POWERSGD_START_ITER:
            print("ddpcheck: PowerSGD compresses from step %d on; the first timed steps are plain "
                  "all-reduce" % (POWERSGD_START_ITER + 1), file=sys.stderr)
    return wrapped, kwargs


def setup_process_group(torch, dist, cfg, local_rank):
    """The device and process group: NCCL on this rank's GPU, or gloo on CPU. (device, seconds)."""
    on_cuda = cfg["device"] == "cuda"
    timeout = timedelta(seconds=cfg["nccl_timeout_s"])
    if not on_cuda:
        t0 = time.perf_counter()
        dist.init_process_group("gloo", timeout=timeout)
        return torch.device("cpu"), time.perf_counter() - t0
    visible = torch.cuda.device_count()
    if local_rank >= visible:
        raise Fatal(
            "local rank %d needs GPU %d but torch sees %d GPU(s) (CUDA_VISIBLE_DEVICES=%s)"
            % (local_rank, local_rank, visible, os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")),
            "invalid",
        )
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    global _STAGE
    _STAGE = "NCCL init"
    t0 = time.perf_counter()
    dist.init_process_group("nccl", timeout=timeout, device_id=device)
    return device, time.perf_counter() - t0


def main(argv=None):
    global _STAGE
    parser = argparse.ArgumentParser(description="ddpcheck DDP benchmark (one process per GPU)")
    parser.add_argument("--config", required=True, help="JSON object: model, variant, micro_batch, ...")
    args = parser.parse_args(argv)

    _STAGE = "reading config"
    cfg = load_config(args.config)
    _json_channel()
    on_cuda = cfg["device"] == "cuda"

    if not on_cuda and "RANK" not in os.environ:
        _STAGE = "starting the CPU ranks"
        start_cpu_ranks(cfg, args.config)
    elif "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        # One GPU without torchrun: the same code path with a private rendezvous.
        os.environ.update(
            {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
        )
    rank = _rank()
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    _STAGE = "pinning to CPUs"
    pinned = bind_cpus(cfg["cpu_binding"])

    _STAGE = "checking torch"
    torch = import_torch(cfg["device"])
    import torch.distributed as dist

    _STAGE = "starting the process group"
    device, init_s = setup_process_group(torch, dist, cfg, local_rank)
    device_type = device.type
    # nocomm on N GPUs times rank 0 alone first; the others wait for it here. Gloo waits on a
    # socket, leaving their cores idle; an NCCL barrier would spin a core and a GPU beside it.
    solo_wait = None
    if world > 1 and any(v["nocomm"] for _, v in cfg["runs"]):
        if not on_cuda:
            solo_wait = dist.group.WORLD  # already gloo
        else:
            try:
                solo_wait = dist.new_group(backend="gloo", timeout=timedelta(seconds=cfg["nccl_timeout_s"]))
            except Exception as e:  # gloo missing or unreachable: the nocomm runs keep their old form
                print("ddpcheck: no gloo group (%s): nocomm runs do not time one GPU alone" % one_line(e),
                      file=sys.stderr)
            # Every rank must have it, or none waits on it.
            have = torch.tensor([0.0 if solo_wait is None else 1.0], device=device)
            dist.all_reduce(have, op=dist.ReduceOp.MIN)
            if have.item() < 1.0:
                solo_wait = None

    gpus, uuids, pcis = [], [], []
    for i in range(min(world, torch.cuda.device_count() if on_cuda else 0)):
        name, uuid, pci = gpu_identity(torch, i)
        gpus.append(name)
        uuids.append(uuid)
        pcis.append(pci)
    emit({
        "event": "env", "torch": torch.__version__, "cuda": torch.version.cuda if on_cuda else None,
        "nccl": nccl_version(torch) if on_cuda else None, "gpus": gpus, "gpu_uuids": uuids,
        "gpu_pci_bus_ids": pcis, "device": cfg["device"],
        "python": sys.version.split()[0], "world_size": world, "init_s": round(init_s, 4),
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        "cpu_binding": cfg["cpu_binding"], "rank0_cpus": cpu_list(pinned) if pinned else None,
    })

    def sync():
        if on_cuda:
            torch.cuda.synchronize(device)

    def all_reduce_probe():
        """[[bytes, seconds], ...]: each probe size all-reduced alone, the mean of PROBE_ITERS calls
        back to back after PROBE_WARMUP (nccl-tests' way, which the sweep the model otherwise
        reads uses too), the slowest rank's."""
        global _STAGE
        _STAGE = "timing all-reduce alone"
        means = []
        for nbytes in cfg["all_reduce_probe_bytes"]:
            buf = torch.ones(nbytes // 4, device=device, dtype=torch.float32)
            for _ in range(PROBE_WARMUP):
                dist.all_reduce(buf)
            if on_cuda:
                torch.cuda.synchronize(device)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(PROBE_ITERS):
                    dist.all_reduce(buf)
                end.record()
                end.synchronize()
                means.append(start.elapsed_time(end) / 1e3 / PROBE_ITERS)
            else:  # gloo's all-reduce returns once done: wall time is its time
                t0 = time.perf_counter()
                for _ in range(PROBE_ITERS):
                    dist.all_reduce(buf)
                means.append((time.perf_counter() - t0) / PROBE_ITERS)
            del buf
        slowest = torch.tensor(means, dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        return [[n, t] for n, t in zip(cfg["all_reduce_probe_bytes"], slowest.tolist())]

    def slowest_rank(times):
        """Each step's time on its slowest rank (every rank gets the same list)."""
        local = torch.tensor(times, dtype=torch.float64, device=device)
        if on_cuda:
            gathered = torch.empty((world, len(times)), dtype=torch.float64, device=device)
            dist.all_gather_into_tensor(gathered, local)
        else:  # gloo has no all_gather_into_tensor on torch 1.13
            parts = [torch.empty_like(local) for _ in range(world)]
            dist.all_gather(parts, local)
            gathered = torch.stack(parts)
        return gathered.max(dim=0).values.tolist()

    def build(spec, var, recipe, mb):
        """The run's workload on the device, checked: (workload, model)."""
        global _STAGE
        _STAGE = "building the model"
        torch.manual_seed(1234)  # identical initial weights on every rank
        if spec["kind"] != "external":
            work = preset_workload(torch, spec, device, on_cuda)
            return work, work["model"]
        if var["fsdp"]:
            raise Fatal("FSDP variants run on the decoder presets only, not on %s" % spec["name"], "invalid")
        work = external_workload(torch, spec, cfg["factory_deadline_s"])
        model = work["model"]
        check_trainable(model)
        _STAGE = "moving the model to %s" % device
        model.to(device)
        _STAGE = "trying one micro-batch"
        try_micro_batch(torch, work, model, mb, device, autocast_for(torch, device_type, recipe["amp"]))
        return work, model

    def bench_one(spec, var):
        global _STAGE
        mb, accum = cfg["micro_batch"], var["accum"]
        recipe = cfg["recipe"]
        _STAGE = "checking autocast"
        autocast = autocast_for(torch, device_type, recipe["amp"])
        scaler = grad_scaler(torch, device_type, recipe["amp"])

        work, model = build(spec, var, recipe, mb)
        params = sum(p.numel() for p in model.parameters())  # a tied weight counts once
        layout = param_layout(torch, model)
        make_batch, loss_of = work["batch"], work["loss"] or default_loss

        _STAGE = "wrapping the model"
        ddp_kwargs = {}
        if var["fsdp"]:
            fully_shard = import_fully_shard()
            for block in model.blocks:
                fully_shard(block)
            fully_shard(model)
            wrapped = model
        else:
            wrapped, ddp_kwargs = wrap_ddp(torch, model, var, recipe, cfg, local_rank, on_cuda)

        opt, opt_name = make_optimizer(torch, work, wrapped, on_cuda)
        probing = cfg["all_reduce_probe_bytes"] and world > 1
        probe = all_reduce_probe() if probing else None

        gen = torch.Generator(device=device)
        gen.manual_seed(4321 + rank)  # different random data on every rank
        tokens_per_sample = work["tokens_per_sample"] or 1
        unit = "tokens/s" if work["tokens_per_sample"] else "samples/s"

        def micro_loss(net):
            b = call_batch(make_batch, mb, device, gen)
            with autocast():
                return loss_of(net, b)

        def train_step(sync_grads, plain=False):
            """One optimizer step of `accum` micro-batches; gradients are synchronised on the last one
            only (no_sync before it), or never when sync_grads is False. plain: the model itself,
            not its DDP wrapper, so DDP neither prepares nor reduces anything (the same parameters,
            optimizer and batches)."""
            loss = None
            for i in range(accum):
                do_sync = sync_grads and i == accum - 1
                if plain:
                    ctx = contextlib.nullcontext()
                elif var["fsdp"]:
                    wrapped.set_requires_gradient_sync(do_sync)
                    ctx = contextlib.nullcontext()
                else:
                    ctx = contextlib.nullcontext() if do_sync else wrapped.no_sync()
                with ctx:
                    loss = micro_loss(model if plain else wrapped)
                    scaled = loss / accum
                    (scaler.scale(scaled) if scaler else scaled).backward()
            if scaler:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        def timed_step(sync_grads, plain=False):
            """One train_step timed from an idle device to an idle device: (seconds, loss)."""
            sync()
            t0 = time.perf_counter()
            loss = train_step(sync_grads, plain)
            sync()
            return time.perf_counter() - t0, loss

        def timed_steps(phase, warm, steps, sync_grads, done=0, overall=None, plain=False):
            """warm + steps steps on every rank; the slowest rank's time of each after the warm-up.
            Progress counts from `done` of `overall` steps (a block of a longer phase)."""
            global _STAGE
            times, last_note, loss = [], 0.0, None
            total = warm + steps
            overall = overall or total
            for s in range(total):
                _STAGE = "%s step %d/%d" % (phase, done + s + 1, overall)
                took, loss = timed_step(sync_grads, plain)
                times.append(took)
                now = time.perf_counter()
                if now - last_note >= PROGRESS_EVERY_S or s + 1 == total:
                    last_note = now
                    emit({"event": "progress", "phase": phase, "step": done + s + 1, "total": overall,
                          "warmup": warm, "last_step_s": round(times[-1], 6)})
            _STAGE = "collecting %s step times" % phase
            return slowest_rank(times)[warm:], loss

        def nocomm_with_solo(warm, steps):
            """A nocomm run on N GPUs that also times one GPU inside this launch, the reference
            for N side by side: SOLO_ROUNDS times rank 0 alone while the other ranks wait idle
            (no_sync throughout, so nothing is sent), then all ranks together. Returns (rank 0's
            median step alone, None on the other ranks; the together step times; the last loss)."""
            last = {}
            overall = warm + SOLO_ROUNDS * steps

            def solo_step():
                global _STAGE
                _STAGE = "one GPU alone (rank 0; the others wait)"
                return timed_step(False)[0]

            def together(r, w, n):
                times, last["loss"] = timed_steps("timed", w, n, False, done=0 if r == 0 else warm + r * n,
                                                  overall=overall)
                return times

            alone, timed = alternate_solo(rank, SOLO_ROUNDS, warm, steps, solo_step, together,
                                          lambda: dist.barrier(group=solo_wait))
            return (median(alone) if rank == 0 else None), timed, last["loss"]

        def with_plain_reference(warm, steps):
            """The run's DDP steps interleaved with as many of the model called without DDP
            (interleave_plain): (DDP step times, plain step times, per-round medians, last loss)."""
            last, done, overall = {}, [0], 2 * (warm + steps)

            def block(plain, n, first):
                w = warm if first else 0
                times, last["loss"] = timed_steps("without DDP" if plain else "timed", w, n, True,
                                                  done=done[0], overall=overall, plain=plain)
                done[0] += w + n
                return times

            ddp, plain, pairs = interleave_plain(min(PLAIN_ROUNDS, steps), steps, block)
            return ddp, plain, pairs, last["loss"]

        def sized_steps(warm, steps, sync_grads):
            """`steps`, or more so that the run times at least min_timed_s: sized on SIZING_STEPS
            steps after the warm-up. timed_steps hands every rank the same step times (each the
            slowest rank's), so every rank arrives at the same count, as they must step together."""
            sizing, _ = timed_steps("sizing", warm, SIZING_STEPS, sync_grads)
            return steps_for(cfg["min_timed_s"], steps, median(sizing))

        warm, steps = cfg["warmup_steps"], cfg["steps"]
        if cfg["min_timed_s"] > 0:
            steps = sized_steps(warm, steps, not var["nocomm"])
        # Not without the gloo group, nor for a model with buffers: DDP broadcasts those in every
        # forward, which rank 0 alone would wait on for ever.
        paired = (var["nocomm"] and world > 1 and solo_wait is not None
                  and not any(True for _ in wrapped.module.buffers()))
        # The plain reference: not for FSDP (it shards the model itself) nor nocomm (nothing to
        # compare: its steps send nothing already).
        with_plain = cfg["plain_reference"] and not var["fsdp"] and not var["nocomm"]
        total = warm + (SOLO_ROUNDS if paired else 1) * steps
        emit({"event": "progress", "phase": "ready", "step": 0,
              "total": 2 * (warm + steps) if with_plain else total, "warmup": warm, "params": params})
        plain_times = plain_pairs = solo = None
        if paired:
            solo, timed, loss = nocomm_with_solo(warm, steps)
        elif with_plain:
            timed, plain_times, plain_pairs, loss = with_plain_reference(warm, steps)
        else:
            # nocomm: every micro-batch under no_sync, N GPUs side by side with no communication.
            timed, loss = timed_steps("timed", warm, steps, not var["nocomm"])
        buckets = None if var["fsdp"] else torch_buckets(torch, dist, model, wrapped, var["bucket_cap_mb"])

        nocomm = None
        if cfg["measure_nocomm"] and world > 1 and not var["fsdp"] and not var["nocomm"]:
            # The same steps with every micro-batch under no_sync: N GPUs computing side by side with
            # no gradient communication, the reference for exposed communication.
            nc_warm, nc_steps = min(warm, 3), max(1, min(steps, 20))
            nc_timed, _ = timed_steps("nocomm", nc_warm, nc_steps, False)
            nocomm = median(nc_timed)

        _STAGE = "reporting"
        max_mem = None
        if on_cuda:
            mem = torch.tensor([float(torch.cuda.max_memory_allocated(device))], dtype=torch.float64, device=device)
            dist.all_reduce(mem, op=dist.ReduceOp.MAX)
            max_mem = int(mem.item())
        final_loss = finite_or_none(loss.item()) if loss is not None else None

        med = median(timed)
        per_step_units = world * mb * accum * tokens_per_sample
        result = {
            "event": "result", "model": spec["name"], "params": params, "variant": var["name"],
            "world_size": world, "micro_batch": mb, "accum": accum,
            "step_time_median_s": med, "step_time_p90_s": percentile(timed, 0.9),
            "throughput": per_step_units / med, "throughput_unit": unit,
            "warmup_steps": warm, "steps": len(timed),
            "solo_rounds": SOLO_ROUNDS if paired else None,
            "nocomm_step_time_median_s": nocomm,
            "solo_step_time_median_s": solo,
            "plain_step_time_median_s": median(plain_times) if plain_times else None,
            "plain_rounds": plain_pairs,
            "max_memory_bytes": max_mem, "final_loss": final_loss,
            "optimizer": opt_name, "autocast": recipe["amp"],
            "powersgd_start_iter": POWERSGD_START_ITER if var["hook"] == "powersgd" else None,
            "launcher": launcher_name(on_cuda),
            "all_reduce_probe": probe,
            "device": cfg["device"],
            "recipe": {"amp": recipe["amp"],
                       "find_unused_parameters": bool(ddp_kwargs.get("find_unused_parameters", False)),
                       "static_graph": bool(ddp_kwargs.get("static_graph", False)),
                       "gradient_as_bucket_view": bool(ddp_kwargs.get("gradient_as_bucket_view", True)),
                       "broadcast_buffers": bool(getattr(wrapped, "broadcast_buffers", True))},
            "param_layout": layout,
            "torch_buckets": buckets,
        }
        if len(timed) <= 2000:
            result["step_times_s"] = [round(t, 7) for t in timed]
        emit(result)

    import gc
    for spec, var in cfg["runs"]:
        try:
            bench_one(spec, var)
        except Exception as e:
            if on_cuda and is_oom(torch, e):
                raise oom_verdict(torch, e, cfg["micro_batch"], local_rank)
            raise
        # Free this run's model, optimizer and communicator buffers before the next.
        gc.collect()
        if on_cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        dist.barrier()

    _STAGE = "shutting down"
    with contextlib.suppress(Exception):
        dist.destroy_process_group()
    _STAGE = "waiting for the CPU ranks"
    wait_cpu_ranks()


def launcher_name(on_cuda):
    if not on_cuda:
        return "cpu-ranks"
    return "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "single"


def run():
    try:
        main()
    except SystemExit:
        stop_cpu_ranks()
        raise
    except BaseException as e:  # noqa: B902 - every failure becomes one JSON line
        kind = e.kind if isinstance(e, Fatal) else "error"
        rank = _rank()
        message = "rank %d, %s: %s" % (rank, _STAGE, one_line(e))
        if not isinstance(e, Fatal):
            traceback.print_exc(file=sys.stderr)
        print("ddpcheck: " + message, file=sys.stderr)
        with contextlib.suppress(Exception):
            emit({"event": "error", "kind": kind, "rank": rank, "stage": _STAGE, "message": message},
                 any_rank=True)
        sys.stderr.flush()
        stop_cpu_ranks()
        os._exit(1)  # skip interpreter teardown: a wedged NCCL communicator can hang it


if __name__ == "__main__":
    run()

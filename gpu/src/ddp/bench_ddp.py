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
# A run asked to time at least min_timed_s seconds is sized on this many steps after its warm-up.
SIZING_STEPS = 3
# The most timed steps a run may take (as the config's own bound on "steps").
MAX_STEPS = 10000

_STAGE = "starting"
_OUT = None


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
        raise Fatal("config: model must be an object with kind decoder or mlp", "invalid")
    kind = model.get("kind")
    if kind == "decoder":
        m = parse_decoder(model)
    elif kind == "mlp":
        m = parse_mlp(model)
    else:
        raise Fatal("config: model kind must be decoder or mlp, got %r" % (kind,), "invalid")

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
    return {
        "runs": runs,
        "micro_batch": _int(cfg, "micro_batch", 8, 1, 4096),
        "warmup_steps": _int(cfg, "warmup_steps", 10, 0, 10000),
        "steps": _int(cfg, "steps", 40, 1, MAX_STEPS),
        "min_timed_s": _float(cfg, "min_timed_s", 0.0, 0.0, 60.0),
        "nccl_timeout_s": _int(cfg, "nccl_timeout_s", 120, 5, 3600),
        "measure_nocomm": bool(cfg.get("measure_nocomm", False)),
        "cpu_binding": _choice(cfg, "cpu_binding", ("none", "cores")),
        "all_reduce_probe_bytes": probe_sizes(cfg),
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


def import_torch():
    try:
        import torch
    except ImportError as e:
        raise Fatal("torch is not installed for %s (%s)" % (sys.executable, e), "unavailable")
    if version_tuple(torch.__version__) < MIN_TORCH:
        raise Fatal(
            "torch %s at %s is too old: the DDP benchmark needs torch >= %d.%d"
            % (torch.__version__, sys.executable, MIN_TORCH[0], MIN_TORCH[1]),
            "unavailable",
        )
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

    def norm(width):
        return nn.RMSNorm(width, eps=1e-6) if llama else nn.LayerNorm(width)

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
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
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


def import_fully_shard():
    try:
        from torch.distributed.fsdp import fully_shard  # torch >= 2.6
    except ImportError:
        try:
            from torch.distributed._composable.fsdp import fully_shard  # torch 2.4, 2.5
        except ImportError as e:
            raise Fatal("this torch has no FSDP2 fully_shard (%s)" % e, "unavailable")
    return fully_shard


def main(argv=None):
    global _STAGE
    parser = argparse.ArgumentParser(description="ddpcheck DDP benchmark (one process per GPU)")
    parser.add_argument("--config", required=True, help="JSON object: model, variant, micro_batch, ...")
    args = parser.parse_args(argv)

    _STAGE = "reading config"
    cfg = load_config(args.config)
    _json_channel()

    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
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
    torch = import_torch()
    import torch.distributed as dist
    import torch.nn.functional as F

    visible = torch.cuda.device_count()
    if local_rank >= visible:
        raise Fatal(
            "local rank %d needs GPU %d but torch sees %d GPU(s) (CUDA_VISIBLE_DEVICES=%s)"
            % (local_rank, local_rank, visible, os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")),
            "invalid",
        )
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)

    _STAGE = "NCCL init"
    t0 = time.perf_counter()
    dist.init_process_group("nccl", timeout=timedelta(seconds=cfg["nccl_timeout_s"]), device_id=device)
    init_s = time.perf_counter() - t0
    # nocomm on N GPUs times rank 0 alone first; the others wait for it here. Gloo waits on a
    # socket, leaving their cores idle; an NCCL barrier would spin a core and a GPU beside it.
    solo_wait = None
    if world > 1 and any(v["nocomm"] for _, v in cfg["runs"]):
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
    for i in range(min(world, visible)):
        name, uuid, pci = gpu_identity(torch, i)
        gpus.append(name)
        uuids.append(uuid)
        pcis.append(pci)
    emit({
        "event": "env", "torch": torch.__version__, "cuda": torch.version.cuda,
        "nccl": nccl_version(torch), "gpus": gpus, "gpu_uuids": uuids, "gpu_pci_bus_ids": pcis,
        "python": sys.version.split()[0], "world_size": world, "init_s": round(init_s, 4),
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        "cpu_binding": cfg["cpu_binding"], "rank0_cpus": cpu_list(pinned) if pinned else None,
    })

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
            torch.cuda.synchronize(device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(PROBE_ITERS):
                dist.all_reduce(buf)
            end.record()
            end.synchronize()
            means.append(start.elapsed_time(end) / 1e3 / PROBE_ITERS)
            del buf
        slowest = torch.tensor(means, dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        return [[n, t] for n, t in zip(cfg["all_reduce_probe_bytes"], slowest.tolist())]

    def bench_one(spec, var):
        global _STAGE
        mb, accum = cfg["micro_batch"], var["accum"]

        _STAGE = "building the model"
        torch.manual_seed(1234)  # identical initial weights on every rank
        with device:
            model = build_model(torch, spec)
        params = sum(p.numel() for p in model.parameters())  # a tied weight counts once

        _STAGE = "wrapping the model"
        if var["fsdp"]:
            fully_shard = import_fully_shard()
            for block in model.blocks:
                fully_shard(block)
            fully_shard(model)
            wrapped = model
        else:
            from torch.nn.parallel import DistributedDataParallel as DDP

            kwargs = {"device_ids": [local_rank], "gradient_as_bucket_view": var["gradient_as_bucket_view"]}
            if var["bucket_cap_mb"] is not None:
                kwargs["bucket_cap_mb"] = var["bucket_cap_mb"]
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

        opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-4, fused=True)
        probing = cfg["all_reduce_probe_bytes"] and world > 1
        probe = all_reduce_probe() if probing else None

        gen = torch.Generator(device=device)
        gen.manual_seed(4321 + rank)  # different random data on every rank
        if spec["kind"] == "decoder":
            seq, vocab = spec["seq"], spec["vocab"]
            tokens_per_sample, unit = seq, "tokens/s"

            def micro_loss():
                t = torch.randint(0, vocab, (mb, seq + 1), device=device, generator=gen)
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    logits = wrapped(t[:, :-1])
                    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), t[:, 1:].reshape(-1))
        else:
            n_in, n_out = spec.get("input") or spec["width"], spec.get("output") or spec["width"]
            tokens_per_sample, unit = 1, "samples/s"

            def micro_loss():
                x = torch.randn(mb, n_in, device=device, generator=gen)
                y = torch.randn(mb, n_out, device=device, generator=gen)
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    out = wrapped(x)
                return F.mse_loss(out.float(), y)

        def train_step(sync):
            """One optimizer step of `accum` micro-batches; gradients are synchronised on the last one
            only (no_sync before it), or never when sync is False."""
            loss = None
            for i in range(accum):
                do_sync = sync and i == accum - 1
                if var["fsdp"]:
                    wrapped.set_requires_gradient_sync(do_sync)
                    ctx = contextlib.nullcontext()
                else:
                    ctx = contextlib.nullcontext() if do_sync else wrapped.no_sync()
                with ctx:
                    loss = micro_loss()
                    (loss / accum).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        def timed_step(sync):
            """One train_step timed from an idle GPU to an idle GPU: (seconds, loss)."""
            torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            loss = train_step(sync)
            torch.cuda.synchronize(device)
            return time.perf_counter() - t0, loss

        def timed_steps(phase, warm, steps, sync, done=0, overall=None):
            """warm + steps steps on every rank; the slowest rank's time of each after the warm-up.
            Progress counts from `done` of `overall` steps (a block of a longer phase)."""
            global _STAGE
            times, last_note, loss = [], 0.0, None
            total = warm + steps
            overall = overall or total
            for s in range(total):
                _STAGE = "%s step %d/%d" % (phase, done + s + 1, overall)
                took, loss = timed_step(sync)
                times.append(took)
                now = time.perf_counter()
                if now - last_note >= PROGRESS_EVERY_S or s + 1 == total:
                    last_note = now
                    emit({"event": "progress", "phase": phase, "step": done + s + 1, "total": overall,
                          "warmup": warm, "last_step_s": round(times[-1], 6)})
            _STAGE = "collecting %s step times" % phase
            local = torch.tensor(times, dtype=torch.float64, device=device)
            gathered = torch.empty((world, len(times)), dtype=torch.float64, device=device)
            dist.all_gather_into_tensor(gathered, local)
            per_step = gathered.max(dim=0).values.tolist()  # a step lasts as long as its slowest rank
            return per_step[warm:], loss

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

        def sized_steps(warm, steps, sync):
            """`steps`, or more so that the run times at least min_timed_s: sized on SIZING_STEPS
            steps after the warm-up. timed_steps hands every rank the same step times (each the
            slowest rank's), so every rank arrives at the same count, as they must step together."""
            sizing, _ = timed_steps("sizing", warm, SIZING_STEPS, sync)
            return steps_for(cfg["min_timed_s"], steps, median(sizing))

        warm, steps = cfg["warmup_steps"], cfg["steps"]
        if cfg["min_timed_s"] > 0:
            steps = sized_steps(warm, steps, not var["nocomm"])
        # Not without the gloo group, nor for a model with buffers: DDP broadcasts those in every
        # forward, which rank 0 alone would wait on for ever.
        paired = (var["nocomm"] and world > 1 and solo_wait is not None
                  and not any(True for _ in wrapped.module.buffers()))
        emit({"event": "progress", "phase": "ready", "step": 0,
              "total": warm + (SOLO_ROUNDS if paired else 1) * steps, "warmup": warm, "params": params})
        if paired:
            solo, timed, loss = nocomm_with_solo(warm, steps)
        else:
            # nocomm: every micro-batch under no_sync, N GPUs side by side with no communication.
            solo = None
            timed, loss = timed_steps("timed", warm, steps, not var["nocomm"])

        nocomm = None
        if cfg["measure_nocomm"] and world > 1 and not var["fsdp"] and not var["nocomm"]:
            # The same steps with every micro-batch under no_sync: N GPUs computing side by side with
            # no gradient communication, the reference for exposed communication.
            nc_warm, nc_steps = min(warm, 3), max(1, min(steps, 20))
            nc_timed, _ = timed_steps("nocomm", nc_warm, nc_steps, False)
            nocomm = median(nc_timed)

        _STAGE = "reporting"
        mem = torch.tensor([float(torch.cuda.max_memory_allocated(device))], dtype=torch.float64, device=device)
        dist.all_reduce(mem, op=dist.ReduceOp.MAX)
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
            "max_memory_bytes": int(mem.item()), "final_loss": final_loss,
            "optimizer": "adamw-fused", "autocast": "bf16",
            "powersgd_start_iter": POWERSGD_START_ITER if var["hook"] == "powersgd" else None,
            "launcher": "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "single",
            "all_reduce_probe": probe,
        }
        if len(timed) <= 2000:
            result["step_times_s"] = [round(t, 7) for t in timed]
        emit(result)


    import gc
    for spec, var in cfg["runs"]:
        bench_one(spec, var)
        # Free this run's model, optimizer and communicator buffers before the next.
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        dist.barrier()

    _STAGE = "shutting down"
    with contextlib.suppress(Exception):
        dist.destroy_process_group()


def run():
    try:
        main()
    except SystemExit:
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
        os._exit(1)  # skip interpreter teardown: a wedged NCCL communicator can hang it


if __name__ == "__main__":
    run()

"""The training recipe around the model: autocast and its gradient scaler, the optimizer, DDP with
the recipe's options and the variant's comm hook, or an FSDP2-based wrapper (wrappers.py)."""

import contextlib

from .channel import note
from .errors import Fatal, raised
from .wrappers import wrap_fsdp2

# PowerSGD runs plain all-reduce for its first iterations; 2 is the smallest value its error
# feedback accepts, so the compression is in force from the third optimizer step on.
POWERSGD_START_ITER = 2
# PowerSGD's rank where the variant names none (`powersgd`): PowerSGDState's default
# matrix_approximation_rank; `powersgd4` names 4. Core's POWERSGD_DEFAULT_RANK and
# POWERSGD_MAX_RANK hold the same numbers.
POWERSGD_DEFAULT_RANK = 1
POWERSGD_MAX_RANK = 256


def autocast_for(torch, device_type, amp):
    """A factory of autocast contexts for the recipe's amp; one line where this torch cannot."""
    if amp == "none":
        return contextlib.nullcontext
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    if not autocast_works(torch, device_type, dtype):
        raise Fatal("torch %s has no %s autocast on %s: use --amp %s or none"
                    % (torch.__version__, amp, device_type.upper(), "bf16" if amp == "fp16" else "fp16"), "invalid")
    return lambda: torch.autocast(device_type, dtype=dtype)


def autocast_works(torch, device_type, dtype):
    """Whether autocast to dtype is really on inside torch.autocast on this device."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.autocast(device_type, dtype=dtype):
                return torch.is_autocast_enabled() if device_type == "cuda" else torch.is_autocast_cpu_enabled()
    except RuntimeError:  # torch 1.13's CPU autocast refuses float16 outright
        return False


def grad_scaler(torch, device_type, amp):
    """fp16 autocast trains with a gradient scaler, as torch's recipe has it; None otherwise."""
    if amp != "fp16":
        return None
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        with contextlib.suppress(Exception):
            return torch.amp.GradScaler(device_type)
    return torch.cuda.amp.GradScaler() if device_type == "cuda" else None


def make_optimizer(torch, work, model, on_cuda):
    """The factory's optimizer, else AdamW at lr 1e-4 (fused on CUDA): (optimizer, its name)."""
    if work.get("optimizer") is None:
        if on_cuda:
            return torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True), "adamw-fused"
        return torch.optim.AdamW(model.parameters(), lr=1e-4), "adamw"
    try:
        opt = work["optimizer"](model.parameters())
    except Exception as e:
        raise raised("optimizer(params)", e) from None
    if not isinstance(opt, torch.optim.Optimizer):
        raise Fatal("optimizer(params) returned %s; expected a torch.optim.Optimizer" % type(opt).__name__, "invalid")
    return opt, type(opt).__name__.lower()


def wrap(torch, model, var, recipe, cfg, local_rank, on_cuda, world=1):
    """The model as the variant trains it: an FSDP2-based wrapper (wrappers.py) or DDP.
    (wrapped, DDP's kwargs or the FSDP2 wrapper's options)."""
    if var["fsdp"]:
        options = wrap_fsdp2(torch, model, var["wrapper"], recipe["amp"], "cuda" if on_cuda else "cpu", world)
        return model, options
    return wrap_ddp(torch, model, var, recipe, cfg, local_rank, on_cuda)


def ddp_kwargs(var, recipe, local_rank, on_cuda):
    """DDP's constructor arguments for the recipe's options and the variant's bucket size."""
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
    return kwargs


def wrap_ddp(torch, model, var, recipe, cfg, local_rank, on_cuda):
    """DDP with the recipe's options and the variant's comm hook."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    kwargs = ddp_kwargs(var, recipe, local_rank, on_cuda)
    if var["hook"] == "bf16" and not on_cuda:
        raise Fatal("the bf16 compression hook needs NCCL (gloo cannot all-reduce bfloat16): not on CPU; "
                    "fp16 and power_sgd work there", "invalid")
    wrapped = DDP(model, **kwargs)
    register_hook(wrapped, var["hook"], cfg["warmup_steps"], var.get("powersgd_rank", POWERSGD_DEFAULT_RANK))
    return wrapped, kwargs


def register_hook(wrapped, hook, warmup_steps, powersgd_rank=POWERSGD_DEFAULT_RANK):
    """The variant's comm hook on the DDP model: fp16 or bf16 compression, or PowerSGD at
    `powersgd_rank`."""
    if hook in ("fp16", "bf16"):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        fn = default_hooks.fp16_compress_hook if hook == "fp16" else default_hooks.bf16_compress_hook
        wrapped.register_comm_hook(None, fn)
    elif hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

        state = powersgd.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=powersgd_rank,
            start_powerSGD_iter=POWERSGD_START_ITER,
        )
        wrapped.register_comm_hook(state, powersgd.powerSGD_hook)
        if warmup_steps < POWERSGD_START_ITER:
            note("PowerSGD compresses from step %d on; the first timed steps are plain all-reduce"
                 % (POWERSGD_START_ITER + 1))


def compiler(torch, mode):
    """torch.compile at the recipe's mode, as a function of a module; None for eager. One line
    where this torch has no torch.compile (before 2.0, e.g. Debian's 1.13)."""
    if mode is None:
        return None
    compile_fn = getattr(torch, "compile", None)
    if compile_fn is None:
        raise Fatal("this torch %s has no torch.compile (torch >= 2.0): run without --compile"
                    % torch.__version__, "unavailable")
    return lambda module: compile_fn(module, mode=mode)


def ddp_optimizer_on(torch):
    """Whether dynamo splits a compiled DDP model at its buckets (DDPOptimizer):
    torch._dynamo.config.optimize_ddp, True by default (newer torch also names it
    "ddp_optimizer"); None where this torch does not say."""
    try:
        value = torch._dynamo.config.optimize_ddp
    except AttributeError:
        return None
    return value is True or value == "ddp_optimizer"


def compiled_nets(torch, model, wrapped, mode, fsdp):
    """The callables the steps run: {False: the DDP model, True: the model without DDP}, each
    through torch.compile when the recipe compiles. As PyTorch documents for DDP, the DDP model
    itself is compiled (DDP first, then torch.compile), so that DDPOptimizer splits its graph at
    the bucket boundaries and the all-reduces overlap the backward pass."""
    compile_module = None if fsdp else compiler(torch, mode)
    if compile_module is None:
        return {False: wrapped, True: model}
    return {False: compile_module(wrapped), True: compile_module(model)}

"""The FSDP2-based wrappers as users write them: replicate() (FSDP2's data parallelism),
fully_shard per block and at the root (resharding after forward, or not), and HSDP over a 2-D
mesh; each with MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32) under bf16. What
this torch lacks is one line (capability), before any model is built."""

from .errors import Fatal

# The wrappers the variants name (core's `Wrapper`): DDP and the FSDP2 family.
WRAPPERS = ("ddp", "replicate", "fsdp", "fsdp-noreshard", "hsdp")
FSDP2_WRAPPERS = WRAPPERS[1:]
# HSDP's replicate dimension: two replicas, each sharded over half the ranks.
HSDP_REPLICAS = 2


def import_fully_shard():
    """(fully_shard, MixedPrecisionPolicy) from this torch; raises where it has none (ImportError,
    or on Debian's torch 1.13 under Python 3.11 a ValueError from FSDP1's dataclasses)."""
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # torch >= 2.6
    except ImportError:
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard  # 2.4, 2.5
    return fully_shard, MixedPrecisionPolicy


def import_replicate():
    """FSDP2's replicate(); ImportError where this torch has none."""
    from torch.distributed._composable.replicate_with_fsdp import replicate

    return replicate


def capability(torch, wrapper):
    """None where this torch has what `wrapper` needs, else one line naming the torch."""
    if wrapper == "ddp":
        return None
    try:
        import_fully_shard()
    except Exception:  # ImportError; Debian's torch 1.13 fails importing FSDP1 on Python 3.11
        return ("torch %s has no FSDP2 (fully_shard and MixedPrecisionPolicy, torch >= 2.4): "
                "the %s variant needs a newer torch" % (torch.__version__, wrapper))
    if wrapper == "replicate":
        try:
            import_replicate()
        except Exception:
            return ("torch %s has no FSDP2-based replicate() "
                    "(torch.distributed._composable.replicate_with_fsdp; torch 2.11 has it)"
                    % torch.__version__)
    return None


def require(torch, wrapper):
    """Refuses, in one line, a wrapper this torch cannot run."""
    line = capability(torch, wrapper)
    if line is not None:
        raise Fatal(line, "unavailable")


def hsdp_shape(world):
    """HSDP's mesh (replicas, shard group size), or one line where `world` ranks cannot form
    one: two replicas of at least two shards each."""
    if world < 2 * HSDP_REPLICAS or world % HSDP_REPLICAS:
        raise Fatal("hsdp needs an even GPU count of at least %d (%d replicas x at least 2 shards); "
                    "this launch has %d" % (2 * HSDP_REPLICAS, HSDP_REPLICAS, world), "invalid")
    return HSDP_REPLICAS, world // HSDP_REPLICAS


def mp_policy(torch, policy_cls, amp):
    """MixedPrecisionPolicy as users set it for bf16 (params cast to bf16 for compute, gradients
    reduced in fp32); full precision under --amp none."""
    if amp == "bf16":
        return policy_cls(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if amp == "none":
        return policy_cls()
    raise Fatal("FSDP2 variants take --amp bf16 (MixedPrecisionPolicy) or none, not %s" % amp, "invalid")


def blocks(torch, model):
    """The units a user wraps one by one: the presets' `blocks`, else the layers of each outermost
    nn.ModuleList (a Hugging Face decoder's `model.layers`), else of each outermost nn.Sequential
    (torchvision's ResNet stages); none for a model with neither."""
    own = getattr(model, "blocks", None)
    if isinstance(own, (torch.nn.ModuleList, torch.nn.Sequential)):
        return list(own)
    for kind in (torch.nn.ModuleList, torch.nn.Sequential):
        found, inside = [], set()
        for name, m in model.named_modules():
            if m is model or any(name.startswith(p + ".") for p in inside):
                continue
            if isinstance(m, kind):
                inside.add(name)
                found.extend(c for c in m.children() if any(True for _ in c.parameters()))
        if found:
            return found
    return []


def mesh_keyword(fn):
    """The name `fn` takes its DeviceMesh by: `mesh` (torch 2.11's replicate()), or `device_mesh`
    where an earlier torch named it so."""
    import inspect

    try:
        names = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return "mesh"
    return "device_mesh" if "device_mesh" in names and "mesh" not in names else "mesh"


def mesh_for(torch, wrapper, device_type, world):
    """The DeviceMesh the wrapper runs on: HSDP's 2-D (replicate, shard), else 1-D."""
    from torch.distributed.device_mesh import init_device_mesh

    if wrapper == "hsdp":
        return init_device_mesh(device_type, hsdp_shape(world), mesh_dim_names=("replicate", "shard"))
    return init_device_mesh(device_type, (world,))


def norm_units(torch, model):
    """The BatchNorm modules, each its own unit with full-precision parameters: their fp32 running
    statistics refuse bf16 weights ("Expected running_mean to have type BFloat16"), and PyTorch's
    own test of FSDP2's mixed precision wraps them so (test_fully_shard_mixed_precision.py)."""
    return [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]


def wrap_fsdp2(torch, model, wrapper, amp, device_type, world):
    """The model under the wrapper, in place: each BatchNorm (under bf16), each block, then the
    root (torchtitan's order). Returns the options as run, for the report."""
    require(torch, wrapper)
    fully_shard, policy_cls = import_fully_shard()
    mp = mp_policy(torch, policy_cls, amp)
    mesh = mesh_for(torch, wrapper, device_type, world)
    norms = norm_units(torch, model) if amp == "bf16" else []
    norm_mp = policy_cls(output_dtype=torch.bfloat16)
    units = [b for b in blocks(torch, model) if not any(b is n for n in norms)]
    if wrapper == "replicate":
        replicate = import_replicate()
        on_mesh = {mesh_keyword(replicate): mesh}
        for norm in norms:
            replicate(norm, mp_policy=norm_mp, **on_mesh)
        for block in units:
            replicate(block, mp_policy=mp, **on_mesh)
        replicate(model, mp_policy=mp, **on_mesh)
    else:
        reshard = wrapper != "fsdp-noreshard"
        for norm in norms:
            fully_shard(norm, mesh=mesh, mp_policy=norm_mp, reshard_after_forward=reshard)
        for block in units:
            fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
    return {"wrapper": wrapper, "units": len(units) + 1, "norm_units": len(norms),
            "mesh": list(mesh.shape), "reshard_after_forward": wrapper in ("fsdp", "hsdp"),
            "param_dtype": "bfloat16" if amp == "bf16" else None,
            "reduce_dtype": "float32" if amp == "bf16" else None}

"""The model's parameters as DDP sees them, and DDP's buckets as torch made them."""

import contextlib

from .channel import note
from .errors import one_line


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


def rebuilt_buckets(wrapped):
    """DDP's rebuilt buckets from its logging data (after the first iteration, in the gradients'
    real ready order), [] where it did not rebuild."""
    rebuilt = ""
    with contextlib.suppress(Exception):
        rebuilt = str(wrapped._get_ddp_logging_data().get("rebuilt_per_bucket_param_indices") or "")
    return [[int(i) for i in b.split()] for b in rebuilt.split(",") if b.strip()]


def never_rebuilt(wrapped):
    """Whether DDP keeps its constructor's buckets for good: with find_unused_parameters and no
    static_graph its reducer never rebuilds them (`should_rebuild_buckets` in torch's reducer)."""
    return bool(getattr(wrapped, "find_unused_parameters", False)) and not getattr(wrapped, "static_graph", False)


def torch_bucket_sizes(wrapped):
    """Each bucket's bytes as DDP's own logging data has them (the rebuilt ones once rebuilt),
    in the reducer's bucket order; None where this torch does not say."""
    data = {}
    with contextlib.suppress(Exception):
        data = wrapped._get_ddp_logging_data()
    sizes = str(data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or "") if data else ""
    try:
        return [int(s) for s in sizes.split(",") if s.strip()] or None
    except ValueError:
        return None


def assigned_buckets(dist, trainable, first, cap, constructor):
    """torch's own assignment: the constructor's (registration order, buckets then reversed, as
    DDP's __init__ hands them to its reducer), else the rebuild's (reverse order, the order the
    backward pass reaches them). Positions in `trainable`."""
    n = len(trainable)
    if constructor:
        limits = [first, cap] if first != cap else [cap]
        assigned = dist._compute_bucket_assignment_by_size(trainable, limits, [False] * n)
        buckets = assigned[0] if isinstance(assigned, tuple) else assigned
        return [list(b) for b in reversed(buckets)]
    assigned = dist._compute_bucket_assignment_by_size(
        list(reversed(trainable)), [first, cap], [False] * n, list(reversed(range(n))))
    buckets = assigned[0] if isinstance(assigned, tuple) else assigned
    return [list(b) for b in buckets]


def torch_buckets(torch, dist, model, wrapped, bucket_cap_mb):
    """DDP's buckets as torch made them: the rebuilt ones, else torch's assignment over the
    trainable parameters: the constructor's where DDP never rebuilds (find_unused_parameters
    without static_graph), else the rebuild's in reverse order (one rank where the logging data
    has none). Indices are positions in the trainable parameters in registration order; `sizes`
    are torch's own bucket bytes from its logging data, to check the lists against."""
    cap, first = bucket_caps(dist, wrapped, bucket_cap_mb)
    out = {"cap_bytes": cap, "first_cap_bytes": first, "sizes_bytes": torch_bucket_sizes(wrapped)}
    constructor = never_rebuilt(wrapped)
    buckets = [] if constructor else rebuilt_buckets(wrapped)
    if buckets:
        return dict(out, source="rebuilt", buckets=buckets)
    trainable = [p for p in model.parameters() if p.requires_grad]
    try:
        buckets = assigned_buckets(dist, trainable, first, cap, constructor)
    except Exception as e:
        note("torch's bucket assignment is not available: %s" % one_line(e))
        return None
    return dict(out, source="constructor" if constructor else "assignment", buckets=buckets)

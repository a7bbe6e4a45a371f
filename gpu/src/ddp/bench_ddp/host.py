"""What DDP does beside the all-reduces, measured on the run's own model: the parameters that get
no gradient (which DDP needs find_unused_parameters for), whether the same ones get gradients in
each micro-batch, and the buffers DDP broadcasts in every forward with the broadcast timed."""

import time

from .channel import set_stage
from .collectives import slowest_rank
from .errors import Fatal
from .models import call_batch, default_loss, is_oom, model_failure
from .timing import median

# Micro-batches the gradient check runs on the bare model: two, so a parameter used in one and
# not the other shows the graph is not static.
GRAD_CHECK_MICRO_BATCHES = 2
# Parameter names a report or a message lists at most; the count says how many there are.
MAX_NAMED = 8
# Buffer broadcasts timed (after as many untimed): their median is the figure.
BROADCAST_REPEATS = 10


def params_without_grad(torch, work, model, mb, device, autocast, amp="none"):
    """Forward and backward of the bare model on GRAD_CHECK_MICRO_BATCHES micro-batches: the
    names of the trainable parameters without a gradient in each, registration order. The
    gradients are dropped again before DDP wraps the model. A backward that fails is one line
    with its cause (models.model_failure)."""
    set_stage("checking which parameters get gradients")
    gen = torch.Generator(device=device)
    gen.manual_seed(2)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    unused = []
    for _ in range(GRAD_CHECK_MICRO_BATCHES):
        b = call_batch(work["batch"], mb, device, gen)

        def passes(context, b=b):
            with context():
                loss = (work["loss"] or default_loss)(model, b)
            loss.backward()

        try:
            passes(autocast)
        except Exception as e:
            if is_oom(torch, e):
                raise
            model.zero_grad(set_to_none=True)
            what = "the model's forward and backward on a micro-batch of %d" % mb
            raise model_failure(torch, (what, what + " failed"), e, model, device, amp, passes) from None
        unused.append([n for n, p in named if p.grad is None])
        model.zero_grad(set_to_none=True)
    return unused


def grad_check(unused, named_params):
    """The report's `no_grad`: the first micro-batch's parameters without a gradient (up to
    MAX_NAMED names, their count and elements) and whether every checked micro-batch left out the
    same ones."""
    first = unused[0]
    sizes = dict(named_params)
    return {"names": first[:MAX_NAMED], "count": len(first), "params": sum(sizes.get(n, 0) for n in first),
            "micro_batches": len(unused), "same_each_micro_batch": all(u == first for u in unused)}


def refuse_without_find_unused(check, recipe):
    """One whole line where DDP would stop mid-run: parameters without a gradient under DDP's
    default find_unused_parameters=False (static_graph copes with a fixed set of them)."""
    if not check["count"] or recipe["find_unused_parameters"] or recipe["static_graph"]:
        return
    more = " and %d more" % (check["count"] - len(check["names"])) if check["count"] > len(check["names"]) else ""
    raise Fatal("%d trainable parameter tensors got no gradient in a step (%s%s): DDP then needs "
                "find_unused_parameters=True; pass --find-unused-parameters, or remove them from the model"
                % (check["count"], ", ".join(check["names"]), more), "invalid")


def buffer_facts(launch, wrapped, model):
    """The model's buffers (count, bytes) and, where DDP broadcasts them (broadcast_buffers), one
    broadcast of them as DDP makes it in each forward, timed alone: the median over
    BROADCAST_REPEATS, each the slowest rank's (seconds)."""
    buffers = [b for b in model.buffers()]
    out = {"count": len(buffers), "bytes": sum(b.numel() * b.element_size() for b in buffers),
           "broadcast_s": None}
    sync = getattr(wrapped, "_distributed_broadcast_coalesced", None)
    if not buffers or not getattr(wrapped, "broadcast_buffers", False) or sync is None:
        return out
    set_stage("timing the buffer broadcast")
    size = getattr(wrapped, "broadcast_bucket_size", 250 * 1024 * 1024)
    times = []
    for i in range(2 * BROADCAST_REPEATS):
        sync_device(launch)
        t0 = time.perf_counter()
        sync(buffers, size)
        sync_device(launch)
        if i >= BROADCAST_REPEATS:
            times.append(time.perf_counter() - t0)
    out["broadcast_s"] = median(slowest_rank(launch, times))
    return out


def sync_device(launch):
    if launch.on_cuda:
        launch.torch.cuda.synchronize(launch.device)

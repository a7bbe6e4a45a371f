"""The result line of one run: what was timed and on what, as ddpcheck reads it
(gpu/src/ddp/outcome.rs, `ResultEvent`). Pure: everything measured comes in."""

from .recipe import POWERSGD_START_ITER
from .timing import median, percentile

# Step times are listed in the result up to this many.
MAX_LISTED_STEPS = 2000


def recipe_report(amp, ddp_kwargs, wrapped, compiled=None):
    """The recipe as it ran: autocast, DDP's options (FSDP's run has no DDP kwargs) and
    torch.compile's mode where the run ran compiled (not where compiling failed: then it ran
    eager)."""
    out = {"amp": amp,
            "find_unused_parameters": bool(ddp_kwargs.get("find_unused_parameters", False)),
            "static_graph": bool(ddp_kwargs.get("static_graph", False)),
            "gradient_as_bucket_view": bool(ddp_kwargs.get("gradient_as_bucket_view", True)),
            "broadcast_buffers": bool(getattr(wrapped, "broadcast_buffers", True))}
    if compiled is not None and compiled.get("error") is None:
        out["compile"] = compiled["mode"]
    return out


def result_event(spec, var, cfg, world, timed, facts):
    """The {"event": "result"} line. timed: the run's timing (`timed` step times, `solo` median
    or None, `solo_rounds` or None, `plain` step times or None, `plain_rounds` medians or None,
    `nocomm` median or None); facts: what else the run knows (params, tokens_per_sample,
    max_memory_bytes, final_loss, optimizer, all_reduce_probe, launcher, recipe, param_layout,
    torch_buckets, host: parameters without a gradient and buffers, host.py, and compile: {mode,
    compile_s, plain_compile_s, warmup_steps, steady, ddp_optimizer, error} of a compiled run, else
    None)."""
    steps = timed["timed"]
    mb, accum = cfg["micro_batch"], var["accum"]
    tokens = facts["tokens_per_sample"]
    med = median(steps)
    result = {
        "event": "result", "model": spec["name"], "params": facts["params"], "variant": var["name"],
        "world_size": world, "micro_batch": mb, "accum": accum,
        "step_time_median_s": med, "step_time_p90_s": percentile(steps, 0.9),
        "throughput": world * mb * accum * (tokens or 1) / med,
        "throughput_unit": "tokens/s" if tokens else "samples/s",
        "warmup_steps": cfg["warmup_steps"], "steps": len(steps),
        "solo_rounds": timed["solo_rounds"],
        "nocomm_step_time_median_s": timed["nocomm"],
        "solo_step_time_median_s": timed["solo"],
        "plain_step_time_median_s": median(timed["plain"]) if timed["plain"] else None,
        "plain_rounds": timed["plain_rounds"],
        "max_memory_bytes": facts["max_memory_bytes"], "final_loss": facts["final_loss"],
        # One step after the timed ones read at its phases (phases.py); None on CPU.
        "memory_phases": facts.get("memory_phases"),
        "optimizer": facts["optimizer"], "autocast": cfg["recipe"]["amp"],
        "powersgd_start_iter": POWERSGD_START_ITER if var["hook"] == "powersgd" else None,
        "powersgd_rank": var.get("powersgd_rank") if var["hook"] == "powersgd" else None,
        "launcher": facts["launcher"],
        "all_reduce_probe": facts["all_reduce_probe"],
        "device": cfg["device"],
        "recipe": facts["recipe"],
        "param_layout": facts["param_layout"],
        "torch_buckets": facts["torch_buckets"],
        "host": facts.get("host"),
        "compile": facts.get("compile"),
        # An FSDP2 run's wrapper as run: {wrapper, units, mesh, param_dtype, reduce_dtype}.
        "wrapper": facts.get("wrapper"),
    }
    if len(steps) <= MAX_LISTED_STEPS:
        result["step_times_s"] = [round(t, 7) for t in steps]
    return result

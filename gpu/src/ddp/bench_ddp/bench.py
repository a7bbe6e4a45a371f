"""One launch's runs, each in turn: build the model, wrap it as the variant says, time its steps
in the order the run asks for, and report the result line."""

import contextlib
import copy
import gc

from .channel import emit, set_stage
from .collectives import all_reduce_probe, peak_memory
from .config import finite_or_none
from .errors import Fatal
from .host import buffer_facts, grad_check, params_without_grad, refuse_without_find_unused
from .layout import param_layout, torch_buckets
from .models import check_trainable, external_workload, is_oom, move_model, try_micro_batch
from .phases import run_phases
from .presets import preset_workload
from .ranks import launcher_name
from .recipe import autocast_for, compiled_nets, ddp_optimizer_on, grad_scaler, make_optimizer, wrap
from .report import recipe_report, result_event
from .steps import Trainer
from .timing import median
from .torchenv import oom_verdict
from .wrappers import hsdp_shape, require


def run_all(launch):
    """Every run of the config, freeing each one's memory before the next."""
    torch, cfg = launch.torch, launch.cfg
    for spec, var in cfg["runs"]:
        try:
            bench_one(launch, spec, var)
        except Exception as e:
            if launch.on_cuda and is_oom(torch, e):
                raise oom_verdict(torch, e, cfg["micro_batch"], launch.local_rank) from None
            raise
        # Free this run's model, optimizer and communicator buffers before the next.
        gc.collect()
        if launch.on_cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(launch.device)
        launch.dist.barrier()


def build(launch, spec, var, autocast):
    """The run's workload on the device, checked: (workload, model)."""
    torch, cfg = launch.torch, launch.cfg
    set_stage("building the model")
    torch.manual_seed(1234)  # identical initial weights on every rank
    if spec["kind"] != "external":
        work = preset_workload(torch, spec, launch.device, launch.on_cuda)
        return work, work["model"]
    work = external_workload(torch, spec, cfg["factory_deadline_s"])
    model = work["model"]
    check_trainable(model)
    set_stage("moving the model to %s" % launch.device)
    move_model(torch, model, launch.device)
    set_stage("trying one micro-batch")
    try_micro_batch(torch, work, model, cfg["micro_batch"], launch.device, autocast, cfg["recipe"]["amp"])
    return work, model


def bench_one(launch, spec, var):
    torch, cfg = launch.torch, launch.cfg
    amp = cfg["recipe"]["amp"]
    set_stage("checking autocast")
    autocast = autocast_for(torch, launch.device_type, amp)
    scaler = grad_scaler(torch, launch.device_type, amp)

    if var["fsdp"]:  # what this torch or GPU count cannot run, before any model is built
        set_stage("checking the wrapper")
        require(torch, var["wrapper"])
        if var["wrapper"] == "hsdp":
            hsdp_shape(launch.world)
    work, model = build(launch, spec, var, autocast)
    params = sum(p.numel() for p in model.parameters())  # a tied weight counts once
    layout = param_layout(torch, model)
    no_grad = None
    if not var["fsdp"]:
        unused = params_without_grad(torch, work, model, cfg["micro_batch"], launch.device, autocast, amp)
        no_grad = grad_check(unused, [(n, p.numel()) for n, p in model.named_parameters()])
        refuse_without_find_unused(no_grad, cfg["recipe"])

    with_plain = plain_reference_on(cfg, var)
    # An FSDP2 wrapper changes the model in place: its plain reference is a copy, kept on the host
    # until the wrapper's own peak memory is read.
    plain_copy = copy.deepcopy(model).to("cpu") if with_plain and var["fsdp"] else None
    set_stage("wrapping the model")
    wrapped, ddp_kwargs = wrap(torch, model, var, cfg["recipe"], cfg, launch.local_rank, launch.on_cuda,
                               launch.world)
    opt, opt_name = make_optimizer(torch, work, wrapped, launch.on_cuda)
    probing = cfg["all_reduce_probe_bytes"] and launch.world > 1
    probe = all_reduce_probe(launch) if probing else None

    mode = cfg["recipe"].get("compile")
    nets = compiled_nets(torch, model, wrapped, mode, var["fsdp"])
    trainer = Trainer(launch, var, model, wrapped, opt, (autocast, scaler), work, nets)
    peak = phases = None
    if var["fsdp"]:
        # MixedPrecisionPolicy casts the parameters: the wrapped step runs without autocast, as
        # users run it; the plain step is the one-GPU training with autocast.
        trainer.autocasts[False] = contextlib.nullcontext
        if plain_copy is not None:
            peak = wrapper_peak(launch, trainer)
            phases = run_phases(launch, trainer, False)
            trainer.plain_side(plain_copy.to(launch.device), make_optimizer(torch, work, plain_copy, launch.on_cuda)[0])
    compiled = compile_warmup(launch, trainer, var, mode)
    timed, loss, steps = time_run(launch, trainer, var, wrapped, params)
    buckets = None if var["fsdp"] else torch_buckets(torch, launch.dist, model, wrapped, var["bucket_cap_mb"])
    timed["nocomm"] = nocomm_reference(launch, trainer, var, steps)
    host = None if var["fsdp"] else {"no_grad": no_grad, "buffers": buffer_facts(launch, wrapped, model)}
    if peak is None:
        # The run's own peak first: reading the phases resets the counter.
        peak = peak_memory(launch)
        if launch.world == 1 and var["accum"] == 1 and not var["nocomm"]:
            phases = run_phases(launch, trainer, with_plain and not var["fsdp"])

    set_stage("reporting")
    facts = {
        "params": params, "tokens_per_sample": work["tokens_per_sample"],
        "max_memory_bytes": peak, "memory_phases": phases,
        "final_loss": finite_or_none(loss.item()) if loss is not None else None,
        "optimizer": opt_name, "all_reduce_probe": probe, "launcher": launcher_name(launch.on_cuda),
        "recipe": recipe_report(amp, {} if var["fsdp"] else ddp_kwargs, wrapped, compiled),
        "param_layout": layout, "wrapper": ddp_kwargs if var["fsdp"] else None,
        "torch_buckets": buckets, "host": host, "compile": compiled,
    }
    emit(result_event(spec, var, cfg, launch.world, timed, facts))


def plain_reference_on(cfg, var):
    """The plain reference (sent only to 1-GPU launches): not for nocomm (nothing to compare: its
    steps send nothing already), nor a comm hook's run (its speedup rests on the run without the
    hook, whose plain step is the same: the hook is DDP's). An FSDP2 wrapper's plain step runs a
    copy of the model (the wrapper changes the model in place)."""
    return cfg["plain_reference"] and not var["nocomm"] and var["hook"] == "none"


def wrapper_peak(launch, trainer):
    """An FSDP2 run's own peak memory before its plain copy comes onto the device: the peak of
    `warmup_steps` wrapped steps (at least 2, so the optimizer's states exist), bytes; None on
    CPU."""
    cfg = launch.cfg
    if launch.on_cuda:
        launch.torch.cuda.reset_peak_memory_stats(launch.device)
    trainer.timed_steps("memory", 0, max(2, min(cfg["warmup_steps"], 5)), True)
    return peak_memory(launch)


def compile_warmup(launch, trainer, var, mode):
    """A compiled run's warm-up until steady, before any timed step (Trainer.compile_warmup),
    with the compile mode and whether DDPOptimizer split the graph; None for eager."""
    if mode is None or var["fsdp"]:
        return None
    torch = launch.torch
    set_stage("compiling (torch.compile, mode %s)" % mode)
    out = trainer.compile_warmup(not var["nocomm"], plain_reference_on(launch.cfg, var),
                                 lambda e: not isinstance(e, Fatal) and not is_oom(torch, e))
    out["mode"] = mode
    out["ddp_optimizer"] = ddp_optimizer_on(torch)
    return out


def time_run(launch, trainer, var, wrapped, params):
    """The run's timed steps in the order it asks for: ({timed, solo, solo_rounds, plain,
    plain_rounds}, the last loss, the steps of each block)."""
    cfg = launch.cfg
    warm, steps = cfg["warmup_steps"], cfg["steps"]
    if cfg["min_timed_s"] > 0:
        steps = trainer.sized_steps(warm, steps, not var["nocomm"])
    # Not without the gloo group, nor for a model with buffers: DDP broadcasts those in every
    # forward, which rank 0 alone would wait on for ever.
    paired = (var["nocomm"] and launch.world > 1 and launch.solo_wait is not None
              and not any(True for _ in wrapped.module.buffers()))
    with_plain = plain_reference_on(cfg, var)
    total = warm + (cfg["solo_rounds"] if paired else 1) * steps
    emit({"event": "progress", "phase": "ready", "step": 0,
          "total": 2 * (warm + steps) if with_plain else total, "warmup": warm, "params": params})
    out = {"solo": None, "solo_rounds": cfg["solo_rounds"] if paired else None, "plain": None,
           "plain_rounds": None}
    if paired:
        out["solo"], out["timed"], loss = trainer.nocomm_with_solo(warm, steps)
    elif with_plain:
        out["timed"], out["plain"], out["plain_rounds"], loss = trainer.with_plain_reference(warm, steps)
    else:
        # nocomm: every micro-batch under no_sync, N GPUs side by side with no communication.
        out["timed"], loss = trainer.timed_steps("timed", warm, steps, not var["nocomm"])
    return out, loss, steps


def nocomm_reference(launch, trainer, var, steps):
    """With measure_nocomm on N GPUs: the same steps with every micro-batch under no_sync, N GPUs
    computing side by side with no gradient communication, the reference for exposed
    communication (median seconds); else None."""
    cfg = launch.cfg
    if not (cfg["measure_nocomm"] and launch.world > 1 and not var["fsdp"] and not var["nocomm"]):
        return None
    nc_warm, nc_steps = min(cfg["warmup_steps"], 3), max(1, min(steps, 20))
    nc_timed, _ = trainer.timed_steps("nocomm", nc_warm, nc_steps, False)
    return median(nc_timed)


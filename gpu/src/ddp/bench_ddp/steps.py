"""One run's optimizer steps, timed: through DDP (or FSDP), through no communication at all
(`no_sync`), or the model itself without DDP (the plain reference); and the orders that pair them
in one launch (rank 0 alone against all ranks; DDP against plain)."""

import contextlib
import time

from .channel import emit, note, set_stage
from .collectives import slowest_rank
from .errors import one_line
from .models import call_batch, default_loss
from .timing import alternate_solo, compile_seconds, interleave_plain, median, steps_for, warm_until_steady

# Progress lines at most this often (seconds), outside the timed region.
PROGRESS_EVERY_S = 0.5


class Trainer:
    """The run's training step on this rank: the model, its wrapper, optimizer, autocast, scaler
    and batches; `launch` is main's Launch."""

    def __init__(self, launch, var, model, wrapped, opt, precision, work, nets=None):
        self.launch, self.var, self.model, self.wrapped, self.opt = launch, var, model, wrapped, opt
        # What a step calls: {False: the DDP model, True: the model without DDP}, compiled where
        # the recipe compiles (recipe.compiled_nets).
        self.nets = nets or {False: wrapped, True: model}
        self.autocast, self.scaler = precision
        # Each side's optimizer and autocast: {False: the wrapped model's, True: the plain one's}
        # (the same unless plain_side gives the plain step a copy of its own).
        self.opts = {False: opt, True: opt}
        self.autocasts = {False: self.autocast, True: self.autocast}
        self.make_batch, self.loss_of = work["batch"], work["loss"] or default_loss
        self.mb = launch.cfg["micro_batch"]
        torch = launch.torch
        self.gen = torch.Generator(device=launch.device)
        self.gen.manual_seed(4321 + launch.rank)  # different random data on every rank

    def plain_side(self, model, opt):
        """The plain step's own model and optimizer: a copy, for a wrapper that changes the
        model in place (FSDP2)."""
        self.nets = {False: self.nets[False], True: model}
        self.opts[True] = opt

    def sync(self):
        if self.launch.on_cuda:
            self.launch.torch.cuda.synchronize(self.launch.device)

    def micro_loss(self, net, plain=False):
        b = call_batch(self.make_batch, self.mb, self.launch.device, self.gen)
        with self.autocasts[plain]():
            return self.loss_of(net, b)

    def sync_context(self, do_sync, plain):
        """Whether this micro-batch's gradients are reduced: no_sync before the last one."""
        if plain:
            return contextlib.nullcontext()
        if self.var["fsdp"]:
            self.wrapped.set_requires_gradient_sync(do_sync)
            return contextlib.nullcontext()
        return contextlib.nullcontext() if do_sync else self.wrapped.no_sync()

    def train_step(self, sync_grads, plain=False):
        """One optimizer step of `accum` micro-batches; gradients are synchronised on the last one
        only (no_sync before it), or never when sync_grads is False. plain: the model itself,
        not its DDP wrapper, so DDP neither prepares nor reduces anything (the same parameters,
        optimizer and batches)."""
        accum, scaler = self.var["accum"], self.scaler
        loss = None
        for i in range(accum):
            with self.sync_context(sync_grads and i == accum - 1, plain):
                loss = self.micro_loss(self.nets[plain], plain)
                scaled = loss / accum
                (scaler.scale(scaled) if scaler else scaled).backward()
        self.optimizer_step(plain)
        return loss

    def optimizer_step(self, plain=False):
        """The optimizer's step on the gradients backward left (through the gradient scaler
        under fp16), then the gradients freed."""
        opt, scaler = self.opts[plain], self.scaler
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)

    def timed_step(self, sync_grads, plain=False):
        """One train_step timed from an idle device to an idle device: (seconds, loss)."""
        self.sync()
        t0 = time.perf_counter()
        loss = self.train_step(sync_grads, plain)
        self.sync()
        return time.perf_counter() - t0, loss

    def timed_steps(self, phase, warm, steps, sync_grads, done=0, overall=None, plain=False):
        """warm + steps steps on every rank; the slowest rank's time of each after the warm-up.
        Progress counts from `done` of `overall` steps (a block of a longer phase)."""
        times, last_note, loss = [], 0.0, None
        total = warm + steps
        overall = overall or total
        for s in range(total):
            set_stage("%s step %d/%d" % (phase, done + s + 1, overall))
            took, loss = self.timed_step(sync_grads, plain)
            times.append(took)
            now = time.perf_counter()
            if now - last_note >= PROGRESS_EVERY_S or s + 1 == total:
                last_note = now
                emit({"event": "progress", "phase": phase, "step": done + s + 1, "total": overall,
                      "warmup": warm, "last_step_s": round(times[-1], 6)})
        set_stage("collecting %s step times" % phase)
        return slowest_rank(self.launch, times)[warm:], loss

    def nocomm_with_solo(self, warm, steps):
        """A nocomm run on N GPUs that also times one GPU inside this launch, the reference
        for N side by side: `solo_rounds` times rank 0 alone while the other ranks wait idle
        (no_sync throughout, so nothing is sent), then all ranks together. Returns (rank 0's
        median step alone, None on the other ranks; the together step times; the last loss)."""
        launch, last = self.launch, {}
        rounds = launch.cfg["solo_rounds"]
        overall = warm + rounds * steps

        def solo_step():
            set_stage("one GPU alone (rank 0; the others wait)")
            return self.timed_step(False)[0]

        def together(r, w, n):
            times, last["loss"] = self.timed_steps("timed", w, n, False, done=0 if r == 0 else warm + r * n,
                                                   overall=overall)
            return times

        alone, timed = alternate_solo(launch.rank, rounds, warm, steps, solo_step, together,
                                      lambda: launch.dist.barrier(group=launch.solo_wait))
        return (median(alone) if launch.rank == 0 else None), timed, last["loss"]

    def with_plain_reference(self, warm, steps):
        """The run's DDP steps interleaved with as many of the model called without DDP
        (interleave_plain): (DDP step times, plain step times, per-round medians, last loss)."""
        last, done, overall = {}, [0], 2 * (warm + steps)

        def block(plain, n, first):
            w = warm if first else 0
            times, last["loss"] = self.timed_steps("without DDP" if plain else "timed", w, n, True,
                                                   done=done[0], overall=overall, plain=plain)
            done[0] += w + n
            return times

        rounds = min(self.launch.cfg["plain_rounds"], steps)
        ddp, plain, pairs = interleave_plain(rounds, steps, block)
        return ddp, plain, pairs, last["loss"]

    def sized_steps(self, warm, steps, sync_grads):
        """`steps`, or more so that the run times at least min_timed_s: sized on `sizing_steps`
        steps after the warm-up. timed_steps hands every rank the same step times (each the
        slowest rank's), so every rank arrives at the same count, as they must step together."""
        cfg = self.launch.cfg
        sizing, _ = self.timed_steps("sizing", warm, cfg["sizing_steps"], sync_grads)
        return steps_for(cfg["min_timed_s"], steps, median(sizing))

    def compile_warmup(self, sync_grads, with_plain, is_compile_error):
        """A compiled run's first steps, before any timed one: the DDP model's (and the plain
        model's, with the plain reference) until their steps are steady (warm_until_steady).
        Returns {compile_s, plain_compile_s, warmup_steps, steady, error}: compile_s is the
        warm-up's time beyond as many steady steps. A first step that raises what
        is_compile_error(e) accepts as the compiler's failure turns both sides back to eager:
        error is its first line, and the run's figures are eager ones."""
        out = {"compile_s": None, "plain_compile_s": None, "warmup_steps": 0, "steady": True, "error": None}
        for plain in ((False, True) if with_plain else (False,)):
            phase = "compiling without DDP" if plain else "compiling"

            def block(n, plain=plain, phase=phase):
                return self.timed_steps(phase, 0, n, sync_grads, plain=plain)[0]

            try:
                first = block(1)
            except Exception as e:
                if not is_compile_error(e):
                    raise
                self.opt.zero_grad(set_to_none=True)
                self.nets = {False: self.wrapped, True: self.model}
                out["error"] = one_line(e)
                note("torch.compile failed (%s); this run's figures are eager" % out["error"])
                return out
            times, steady_s, settled = warm_until_steady(block, first)
            out["plain_compile_s" if plain else "compile_s"] = compile_seconds(times, steady_s)
            out["warmup_steps"] += len(times)
            out["steady"] = out["steady"] and settled
        return out

"""How a run's steps are counted and ordered (warm-up, sizing, the rounds that interleave one GPU
alone or the plain model with the DDP steps) and their statistics. No torch: pure functions."""

import math

# Defaults of the rounds and sizing when the config does not name them; ddpcheck sends its own
# (core/src/ddp: SOLO_ROUNDS, PLAIN_ROUNDS, SIZING_STEPS), which its launch budget counts on.
#
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
# A compiled run warms up in blocks of this many steps until two successive blocks' medians agree
# within STEADY_TOLERANCE, at most MAX_STEADY_BLOCKS blocks: compiling (and autotuning, and
# recompiling for no_sync or the optimizer's state) happens in the first steps, never in a timed one.
STEADY_BLOCK = 5
STEADY_TOLERANCE = 0.03
MAX_STEADY_BLOCKS = 20


def median(xs):
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("median of no values")
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2.0


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


def steps_for(min_timed_s, steps, step_s):
    """Timed steps of a run: `steps`, or more where that many of `step_s` seconds would time less
    than min_timed_s (never more than MAX_STEPS). A short-step launch lands at its own speed, but
    runs side by side in it compare to a few percent only once each times seconds of steps."""
    if min_timed_s <= 0 or not step_s > 0:
        return steps
    return max(steps, min(MAX_STEPS, int(math.ceil(min_timed_s / step_s))))


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


def warm_until_steady(block, first, size=STEADY_BLOCK, tolerance=STEADY_TOLERANCE, max_blocks=MAX_STEADY_BLOCKS):
    """After the `first` step times, blocks of `size` steps (block(n) runs n and returns their
    times) until two successive blocks' medians agree within `tolerance`, at most `max_blocks`.
    Returns (every warm-up step time, the steady step: the last block's median, whether it
    settled)."""
    times, previous = list(first), None
    for _ in range(max_blocks):
        got = block(size)
        times += got
        current = median(got)
        if previous is not None and abs(current - previous) <= tolerance * max(current, previous):
            return times, current, True
        previous = current
    return times, previous, False


def compile_seconds(warm_times, steady_s):
    """What compiling took: the warm-up's time beyond as many steady steps (never below 0)."""
    return max(0.0, sum(warm_times) - len(warm_times) * steady_s)

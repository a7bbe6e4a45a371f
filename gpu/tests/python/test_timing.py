"""The timing statistics and the orders that interleave blocks of steps."""

import pytest

from bench_ddp import timing


def test_median_and_percentile():
    xs = [0.5, 0.1, 0.4, 0.2, 0.3]
    assert timing.median(xs) == 0.3
    assert timing.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    # Sorted 0.1..0.5: position 0.9 * 4 = 3.6, so 0.4 + 0.6 * 0.1 (numpy's default).
    assert timing.percentile(xs, 0.9) == pytest.approx(0.46)
    assert timing.percentile([7.0], 0.9) == 7.0
    with pytest.raises(ValueError):
        timing.median([])


def test_steps_are_sized_to_the_minimum_timed_stretch_within_the_bound():
    assert timing.steps_for(2.0, 15, 0.002) == 1000
    assert timing.steps_for(2.0, 15, 0.2) == 15
    assert timing.steps_for(2.0, 15, 1e-7) == timing.MAX_STEPS
    assert timing.steps_for(0.0, 15, 0.002) == 15


def test_plain_blocks_alternate_abba_and_hold_every_step():
    calls = []

    def block(plain, n, first):
        calls.append(("plain" if plain else "ddp", n, first))
        return [2.0 if plain else 3.0] * n

    ddp, plain, pairs = timing.interleave_plain(3, 7, block)
    assert calls == [("ddp", 3, True), ("plain", 3, True), ("plain", 2, False), ("ddp", 2, False),
                     ("ddp", 2, False), ("plain", 2, False)]
    assert (len(ddp), len(plain), pairs) == (7, 7, [[3.0, 2.0]] * 3)


def test_rank_zero_alone_alternates_with_every_rank_together():
    log = []
    clock = iter(range(100))
    solo, together = timing.alternate_solo(
        0, 2, 1, 2, lambda: log.append("alone") or float(next(clock)),
        lambda r, w, n: log.append("together %d" % r) or [float(r)] * n, lambda: log.append("wait"))
    assert log == ["alone"] * 3 + ["wait", "together 0"] + ["alone"] * 2 + ["wait", "together 1"]
    assert solo == [1.0, 2.0, 3.0, 4.0]  # the warm-up step (0) dropped
    assert together == [0.0, 0.0, 1.0, 1.0]
    solo, _ = timing.alternate_solo(1, 2, 1, 2, lambda: pytest.fail("rank 1 stepped alone"),
                                    lambda r, w, n: [0.0] * n, lambda: None)
    assert solo == []

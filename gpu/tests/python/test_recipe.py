"""The comm hook the recipe registers: PowerSGD's state gets the variant's rank. The hook itself
never runs here (Debian's torch 1.13 hung in it on gloo in most launches): a stand-in DDP model
records what it is given."""

import pytest

from bench_ddp import recipe


class Recorder:
    def __init__(self):
        self.hooks = []

    def register_comm_hook(self, state, fn):
        self.hooks.append((state, fn))


@pytest.mark.parametrize("rank", [1, 4])
def test_power_sgd_state_carries_the_rank_and_the_start_iteration(rank):
    pytest.importorskip("torch")
    wrapped = Recorder()
    recipe.register_hook(wrapped, "powersgd", 5, rank)
    (state, fn), = wrapped.hooks
    assert (state.matrix_approximation_rank, state.start_powerSGD_iter) == (rank, recipe.POWERSGD_START_ITER)
    assert fn.__name__ == "powerSGD_hook"


def test_power_sgd_without_a_rank_registers_rank_1():
    pytest.importorskip("torch")
    wrapped = Recorder()
    recipe.register_hook(wrapped, "powersgd", 5)
    assert wrapped.hooks[0][0].matrix_approximation_rank == recipe.POWERSGD_DEFAULT_RANK == 1

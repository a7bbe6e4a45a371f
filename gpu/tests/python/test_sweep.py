"""The collectives sweep of `bench collectives --device cpu`: its config bounds, the buffers each
call gets (nccl-tests' sizes, FSDP2's in-place layouts) and the check that counts wrong elements
(a planted wrong element is counted)."""

import pytest
import torch

from bench_ddp import sweep
from bench_ddp.config import _int, load_config
from bench_ddp.errors import Fatal


class Launch:
    def __init__(self, rank, world=2):
        self.torch, self.rank, self.world, self.device = torch, rank, world, torch.device("cpu")


def test_a_sweep_config_runs_no_model_and_only_on_cpu_ranks():
    cfg = load_config('{"device": "cpu", "world_size": 2, "sweep": {"ops": ["all_gather"], "sizes": [4096]}}')
    assert cfg["runs"] == [] and cfg["sweep"]["ops"] == ["all_gather"]
    assert cfg["sweep"]["iters"] == 20 and cfg["sweep"]["check"] is True
    with pytest.raises(Fatal, match="runs on CPU ranks"):
        load_config('{"device": "cuda", "sweep": {"ops": ["all_reduce"], "sizes": [4096]}}')


@pytest.mark.parametrize("bad, words", [
    ({"ops": ["alltoall"], "sizes": [4096]}, "sweep.ops"),
    ({"ops": [], "sizes": [4096]}, "sweep.ops"),
    ({"ops": ["all_reduce"], "sizes": []}, "sweep.sizes"),
    ({"ops": ["all_reduce"], "sizes": [2]}, "sweep.sizes"),
    ({"ops": ["all_reduce"], "sizes": [True]}, "sweep.sizes"),
    ({"ops": ["all_reduce"], "sizes": [4096], "iters": 0}, "iters"),
])
def test_bad_sweeps_are_refused_in_one_line(bad, words):
    with pytest.raises(Fatal, match=words):
        sweep.parse_sweep(bad, _int)


def test_buffers_have_nccl_tests_sizes_and_fsdp2s_in_place_layouts():
    out, inp = sweep.buffers(Launch(rank=1), "all_gather", 64, in_place=True)
    assert out.numel() == 16 and inp.numel() == 8
    assert inp.data_ptr() == out[8:].data_ptr(), "rank 1 sends from its part of the output"
    assert torch.all(inp == 2.0)
    out, inp = sweep.buffers(Launch(rank=0), "reduce_scatter", 64, in_place=True)
    assert inp.numel() == 16 and out.data_ptr() == inp[:8].data_ptr()
    out, inp = sweep.buffers(Launch(rank=0), "reduce_scatter", 64, in_place=False)
    assert out.data_ptr() != inp.data_ptr()
    buf, same = sweep.buffers(Launch(rank=0), "all_reduce", 64, in_place=False)
    assert buf is same and buf.numel() == 16


def test_the_check_counts_a_planted_wrong_element():
    launch = Launch(rank=0)
    gathered = torch.tensor([1.0] * 4 + [2.0] * 4)
    assert sweep.wrong(launch, "all_gather", gathered) == 0
    gathered[5] = 7.0
    assert sweep.wrong(launch, "all_gather", gathered) == 1
    reduced = torch.full((4,), 3.0)  # 1 + 2 over two ranks
    assert sweep.wrong(launch, "reduce_scatter", reduced) == 0
    reduced[0] = 2.0
    assert sweep.wrong(launch, "all_reduce", reduced) == 1

"""The result line: what ddpcheck reads of a run (gpu/src/ddp/outcome.rs)."""

from bench_ddp import report

CFG = {"micro_batch": 4, "warmup_steps": 2, "device": "cpu", "recipe": {"amp": "none"}}
VAR = {"name": "powersgd", "accum": 2, "hook": "powersgd"}
SPEC = {"name": "decoder-2x64"}


def facts(**more):
    base = {"params": 1000, "tokens_per_sample": 128, "max_memory_bytes": None, "final_loss": 1.5,
            "optimizer": "adamw", "all_reduce_probe": None, "launcher": "cpu-ranks",
            "recipe": {"amp": "none"}, "param_layout": {"tensors": []}, "torch_buckets": None}
    base.update(more)
    return base


def timed(**more):
    base = {"timed": [0.2, 0.1, 0.3], "solo": None, "solo_rounds": None, "plain": None, "plain_rounds": None,
            "nocomm": None}
    base.update(more)
    return base


def test_throughput_counts_every_rank_micro_batch_and_token():
    r = report.result_event(SPEC, VAR, CFG, 2, timed(), facts())
    assert (r["event"], r["model"], r["variant"], r["world_size"]) == ("result", "decoder-2x64", "powersgd", 2)
    assert r["step_time_median_s"] == 0.2
    assert r["throughput"] == 2 * 4 * 2 * 128 / 0.2
    assert (r["throughput_unit"], r["steps"], r["warmup_steps"]) == ("tokens/s", 3, 2)
    assert r["powersgd_start_iter"] == 2
    assert r["powersgd_rank"] is None
    assert r["step_times_s"] == [0.2, 0.1, 0.3]


def test_samples_without_tokens_and_the_plain_reference_median():
    r = report.result_event(SPEC, dict(VAR, hook="none"), CFG, 1,
                            timed(plain=[0.5, 0.1, 0.2], plain_rounds=[[0.2, 0.1]]),
                            facts(tokens_per_sample=None))
    assert (r["throughput_unit"], r["throughput"]) == ("samples/s", 1 * 4 * 2 / 0.2)
    assert (r["plain_step_time_median_s"], r["plain_rounds"]) == (0.2, [[0.2, 0.1]])
    assert r["powersgd_start_iter"] is None


def test_a_power_sgd_run_reports_its_rank():
    r = report.result_event(SPEC, dict(VAR, powersgd_rank=4), CFG, 2, timed(), facts())
    assert r["powersgd_rank"] == 4


def test_long_runs_leave_their_step_times_out():
    r = report.result_event(SPEC, VAR, CFG, 1, timed(timed=[0.1] * (report.MAX_LISTED_STEPS + 1)), facts())
    assert "step_times_s" not in r and r["steps"] == report.MAX_LISTED_STEPS + 1


def test_the_recipe_is_reported_as_it_ran():
    class Wrapped:
        broadcast_buffers = False

    got = report.recipe_report("bf16", {"static_graph": True, "gradient_as_bucket_view": False}, Wrapped())
    assert got == {"amp": "bf16", "find_unused_parameters": False, "static_graph": True,
                   "gradient_as_bucket_view": False, "broadcast_buffers": False}
    assert report.recipe_report("none", {}, object())["broadcast_buffers"] is True

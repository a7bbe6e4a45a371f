"""Which runs of a launch time the plain reference."""

from bench_ddp import bench


def variant(**kw):
    v = {"fsdp": False, "nocomm": False, "hook": "none"}
    v.update(kw)
    return v


def test_the_plain_reference_is_timed_for_unhooked_runs_only():
    on = {"plain_reference": True}
    assert bench.plain_reference_on(on, variant())
    # The hooked run's speedup rests on its unhooked partner's plain step.
    assert not bench.plain_reference_on(on, variant(hook="bf16"))
    assert not bench.plain_reference_on(on, variant(hook="powersgd"))
    assert not bench.plain_reference_on(on, variant(nocomm=True))
    # An FSDP2 wrapper's own work is read against a plain copy of the model.
    assert bench.plain_reference_on(on, variant(fsdp=True))
    assert not bench.plain_reference_on({"plain_reference": False}, variant())

"""The JSON channel (event lines on the real stdout, everything else on stderr), this process's
rank, and the stage a failure is reported at."""

import json
import os
import sys

_OUT = None
_STAGE = "starting"


def rank():
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def set_stage(text):
    """What this rank is doing now: a failure's message names it."""
    global _STAGE
    _STAGE = text


def stage():
    return _STAGE


def json_channel():
    """The real stdout, kept for JSON lines; fd 1 then points at stderr, so that anything else
    printed by Python, NCCL (NCCL_DEBUG) or CUDA cannot corrupt the JSON stream."""
    global _OUT
    if _OUT is None:
        try:
            sys.stdout.flush()
            fd = os.dup(1)
            os.dup2(2, 1)
            _OUT = os.fdopen(fd, "w", buffering=1, encoding="utf-8")
            sys.stdout = sys.stderr
        except (OSError, ValueError):
            _OUT = sys.stdout
    return _OUT


def emit(obj, any_rank=False):
    """One JSON line on the JSON channel; only rank 0 speaks unless any_rank."""
    if rank() != 0 and not any_rank:
        return
    out = json_channel()
    out.write(json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n")
    out.flush()


def note(text):
    """One line for a person, on stderr."""
    print("ddpcheck: " + text, file=sys.stderr)

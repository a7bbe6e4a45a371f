"""Entry point of the benchmark, run by path (`python3 .../ddpcheck_bench_ddp/__main__.py`, as
torchrun runs a script) or as a module (`python3 -m ddpcheck_bench_ddp`)."""

import importlib
import os
import sys


def package_name():
    """This folder's name as an importable package. Run by path, Python puts the folder itself
    first on sys.path, where its module names (config, models, ...) would shadow a user's
    modules; its parent takes that place, so the package's own name is all that is added."""
    if __package__:
        return __package__
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
        sys.path[0] = os.path.dirname(here)
    else:
        sys.path.insert(0, os.path.dirname(here))
    return os.path.basename(here)


if __name__ == "__main__":
    importlib.import_module(package_name() + ".main").run()

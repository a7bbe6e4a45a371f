"""The entry point run by path, and the env line."""

import os
import runpy
import sys

import torch

from bench_ddp import main

PACKAGE_DIR = os.path.dirname(os.path.abspath(main.__file__))


def test_run_by_path_puts_the_folders_parent_on_the_path_not_the_folder(monkeypatch):
    # As `python3 .../bench_ddp/__main__.py` starts: the script's folder first on sys.path.
    monkeypatch.setattr(sys, "path", [PACKAGE_DIR] + sys.path)
    entry = runpy.run_path(os.path.join(PACKAGE_DIR, "__main__.py"), run_name="by_path")
    assert entry["package_name"]() == os.path.basename(PACKAGE_DIR)
    # The package's modules (config, models, ...) cannot shadow a user's of the same name.
    assert PACKAGE_DIR not in sys.path
    assert sys.path[0] == os.path.dirname(PACKAGE_DIR)


def test_the_env_line_on_cpu_ranks():
    cfg = {"device": "cpu", "cpu_binding": "cores"}
    env = main.env_event(torch, cfg, 2, 0.123456, [0, 1, 2, 5])
    assert (env["event"], env["device"], env["world_size"], env["init_s"]) == ("env", "cpu", 2, 0.1235)
    assert (env["cuda"], env["nccl"], env["gpus"], env["gpu_uuids"]) == (None, None, [], [])
    assert (env["rank0_cpus"], env["torch"]) == ("0-2,5", torch.__version__)
    assert all(k.startswith("NCCL_") for k in env["nccl_env"])

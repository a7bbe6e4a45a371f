"""pytest of the embedded DDP benchmark package (gpu/src/ddp/bench_ddp), imported from the source
tree as `bench_ddp`. Runs on Debian's python3-torch (1.13, CPU): `python3 -m pytest -q gpu/tests/python`."""

import os
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "ddp")
sys.path.insert(0, os.path.abspath(SRC))

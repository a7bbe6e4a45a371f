#!/usr/bin/env python3
"""Leave one model out: does calibrating DDP's overheads on a node's other models help predict
a model the node has not run in DDP?

For each REGIME:CURVE.json:DDP.json and each model of the DDP report with at least --min-params
parameters, writes two reports to a temporary folder (the model's own runs; every other model's
runs) and hands scripts/predict-vs-measured.py the first as the judged runs and the second as
the calibration (its fourth field), so each model is predicted from overheads fitted on the
others only. With --plain the calibration is left out: the same cases, uncalibrated.

    python3 scripts/loo-calibration.py [--plain] [--min-params 800000] DDPCHECK REGIME:CURVE.json:DDP.json...

Prints predict-vs-measured.py's output."""
import json
import os
import subprocess
import sys
import tempfile

args = sys.argv[1:]
plain, min_params = False, 800000.0
while args and args[0].startswith("--"):
    if args[0] == "--plain":
        plain, args = True, args[1:]
    elif args[0] == "--min-params":
        min_params, args = float(args[1]), args[2:]
    else:
        sys.exit(f"unknown option {args[0]}")
if len(args) < 2:
    sys.exit(__doc__)
ddpcheck, sets = args[0], args[1:]
with tempfile.TemporaryDirectory() as tmp:
    cases = []
    for s in sets:
        regime, curve, ddp = s.split(":")
        rep = json.load(open(ddp))
        for model in sorted({r["model"] for r in rep["results"] if r["params"] >= min_params}):
            # Model names hold ':' (mlp:1024x4), the separator of predict-vs-measured's fields.
            stem = os.path.join(tmp, f"{regime}-{model.replace(':', '_')}")
            for part, keep in (("own", True), ("other", False)):
                rows = [r for r in rep["results"] if (r["model"] == model) == keep]
                with open(f"{stem}-{part}.json", "w") as f:
                    json.dump(dict(rep, results=rows), f)
            cases.append(f"{regime}:{curve}:{stem}-own.json" + ("" if plain else f":{stem}-other.json"))
    out = subprocess.run(
        ["python3", os.path.join(os.path.dirname(__file__), "predict-vs-measured.py"),
         "--min-params", str(int(min_params)), ddpcheck] + cases)
    sys.exit(out.returncode)

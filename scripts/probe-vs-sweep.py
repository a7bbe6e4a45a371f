#!/usr/bin/env python3
"""The all-reduce as each DDP run timed it in its own process group before its steps (the
result's `all_reduce_probe`) against `bench collectives` sweeps of the same call (before and,
where run, after the DDP runs): time at a few sizes, and the probe over the sweep.

Usage: probe-vs-sweep.py DDP.json SWEEP.json [SWEEP.json ...]"""
import json
import statistics
import sys

SIZES = [64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def sweep_times(path):
    rep = json.load(open(path))
    for s in rep["runs"][0]["run"]["sweeps"]:
        if s["op"] == "all_reduce":
            return {x["bytes"]: x["out_of_place"]["time_us"] * 1e-6 for x in s["samples"]}
    return {}


def probe_times(r):
    p = r.get("all_reduce_probe")
    return {x["bytes"]: x["out_of_place"]["time_us"] * 1e-6 for x in p["samples"]} if p else {}


ddp, sweeps = sys.argv[1], sys.argv[2:]
runs = [r for r in json.load(open(ddp))["results"] if r["world_size"] > 1 and r.get("all_reduce_probe")]
curves = [(p.rsplit("/", 1)[-1], sweep_times(p)) for p in sweeps]
print(f"{ddp.rsplit('/', 1)[-1]}: {len(runs)} runs with a probe; times in ms")
print(f"{'source':<34}" + "".join(f"{s >> 10:>9}K" for s in SIZES))
for name, c in curves:
    print(f"{name:<34}" + "".join(f"{c[s] * 1e3:>10.3f}" if s in c else f"{'-':>10}" for s in SIZES))
probes = [probe_times(r) for r in runs]
med = {s: statistics.median(p[s] for p in probes if s in p) for s in SIZES if any(s in p for p in probes)}
print(f"{'probe, median of runs':<34}" + "".join(f"{med[s] * 1e3:>10.3f}" if s in med else f"{'-':>10}" for s in SIZES))
for r, p in zip(runs, probes):
    print(f"{'  ' + r['model'] + ' ' + r['variant']:<34}" + "".join(f"{p[s] * 1e3:>10.3f}" if s in p else f"{'-':>10}" for s in SIZES))
for name, c in curves:
    print(f"{'probe / ' + name:<34}" + "".join(f"{med[s] / c[s]:>10.2f}" if s in med and s in c else f"{'-':>10}" for s in SIZES))

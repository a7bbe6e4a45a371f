#!/usr/bin/env python3
"""Summarises `ddpcheck bench ddp --json` reports; with two reports of the same runs, prints the
run-to-run difference of throughput per row (the 5% agreement check).

Usage: summarise-ddp.py REPORT.json [REPORT2.json ...]"""
import json
import sys


def rows(path):
    try:
        rep = json.load(open(path))
    except Exception as e:
        print(f"{path}: unreadable ({e})")
        return None, {}
    env = rep.get("provenance", {}).get("nccl_env", {})
    out = {}
    for r in rep.get("results", []):
        out[(r["model"], r["variant"], r["world_size"])] = r
    return env, out


def fmt(v, f):
    return f.format(v) if v is not None else "-"


reports = [(p, *rows(p)) for p in sys.argv[1:]]
for path, env, rs in reports:
    if env is None:
        continue
    extra = {k: v for k, v in env.items() if k not in ("NCCL_NVLS_ENABLE",)}
    print(f"\n{path}  env={extra or 'default'}")
    print(f"{'model':<14} {'variant':<12} {'n':>2} {'step ms':>8} {'p90 ms':>8} {'throughput':>12} {'speedup':>8} {'eff':>5} {'exp.comm':>8}")
    for (m, v, n), r in rs.items():
        print(f"{m:<14} {v:<12} {n:>2} {r['step_time_median_s']*1e3:>8.1f} {r['step_time_p90_s']*1e3:>8.1f} "
              f"{r['throughput']:>12.0f} {fmt(r.get('speedup'), '{:.2f}x'):>8} {fmt(r.get('efficiency'), '{:.0%}'):>5} "
              f"{fmt(r.get('exposed_comm_fraction'), '{:.0%}'):>8}")
if len(reports) == 2 and reports[0][1] is not None and reports[1][1] is not None:
    a, b = reports[0][2], reports[1][2]
    print("\nrun-to-run: throughput of run 2 / run 1")
    worst = 0.0
    for k in a:
        if k in b and a[k]["throughput"] > 0:
            d = b[k]["throughput"] / a[k]["throughput"]
            worst = max(worst, abs(d - 1))
            print(f"{k[0]:<14} {k[1]:<12} {k[2]:>2} {d:.3f}")
    print(f"largest difference {worst:.1%} ({'PASS' if worst <= 0.05 else 'FAIL'} vs 5%)")

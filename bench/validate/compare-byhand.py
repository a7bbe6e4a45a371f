#!/usr/bin/env python3
"""ddpcheck against the same DDP script launched by hand: per run, every round of each and the ratio
of the medians. Reads byhand-ddpcheck-N.json and byhand-results-N.jsonl (bench/validate/ddp-by-hand.sh).

Usage: compare-byhand.py LOGDIR ROUNDS"""
import json
import pathlib
import statistics
import sys

logs, rounds = pathlib.Path(sys.argv[1]), int(sys.argv[2])


def key(r):
    return (r["model"], r["variant"], r["world_size"])


def fmt(v):
    return " ".join(f"{x:.0f}" for x in v)


ours, hand = {}, {}
for i in range(1, rounds + 1):
    p = logs / f"byhand-ddpcheck-{i}.json"
    if p.exists() and p.stat().st_size:
        for r in json.loads(p.read_text())["results"]:
            ours.setdefault(key(r), []).append(r["throughput"])
    p = logs / f"byhand-results-{i}.jsonl"  # absent when a call was cut before this round
    for line in (p.read_text().splitlines() if p.exists() else []):
        r = json.loads(line)
        hand.setdefault(key(r), []).append(r["throughput"])
print(f"{'run':<28} {'ddpcheck (each round)':>30} {'by hand (each round)':>30} {'median ratio':>12}")
worst = 0.0
for k in sorted(ours):
    o, h = ours[k], hand.get(k, [])
    if h:
        ratio = statistics.median(o) / statistics.median(h)
        worst = max(worst, abs(ratio - 1))
        print(f"{' '.join(map(str, k)):<28} {fmt(o):>30} {fmt(h):>30} {ratio:>12.3f}")
    else:
        print(f"{' '.join(map(str, k)):<28} {fmt(o):>30} {'missing':>30}")
print(f"{rounds} rounds: largest |median ddpcheck / median by hand - 1| = {worst:.1%} ({'PASS' if worst <= 0.03 else 'FAIL'} vs 3%)")

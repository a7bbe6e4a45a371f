#!/usr/bin/env python3
"""How well could a perfect model score against speedups measured with this much noise?

Reads `bench ddp --json` reports whose runs were launched several times (`--repeats N`), takes
the launch-to-launch spread of each configuration (standard deviation of ln(step) over its
launches, 1 GPU and N GPUs apart), and simulates the recommend issue's judged statistics for a
model that is exactly right: every error then comes from the measurement. For each number of
launches per configuration it prints the median |error| and the largest |error| a perfect model
would typically show over as many cases as the reports hold, and how often the largest would
pass 20% (the issue's bar).

Then the ranking: within each report and model, the variants' measured speedups stand in for
the truth (noise widens their spread, so this flatters the measurement), and each launch is
drawn as a factor common to every configuration of that launch plus a configuration's own part,
both measured from the reports (the common part cancels between variants of one launch). It
prints how many variant pairs a measurement would show more than 5% apart and how many of those
a perfect model would still see in the other order.

    python3 scripts/noise-floor.py [--min-params 800000] [--launches 1,3,5,10,15] REPORT.json...

Launch-level noise is drawn as normal in ln(step) with the median spread measured (heavier tails
make the real figures worse, never better)."""
import json
import math
import random
import statistics
import sys

args = sys.argv[1:]
min_params, launches = 800000.0, [1, 3, 5, 10, 15]
while args and args[0].startswith("--"):
    if args[0] == "--min-params":
        min_params, args = float(args[1]), args[2:]
    elif args[0] == "--launches":
        launches, args = [int(x) for x in args[1].split(",")], args[2:]
    else:
        sys.exit(f"unknown option {args[0]}")
if not args:
    sys.exit(__doc__)

sd_one, sd_n, cases = [], [], 0
groups = []  # per report and model: the multi-GPU variants' measured speedups
common, own = {1: [], 2: []}, {1: [], 2: []}  # launch sd split, by 1 GPU (1) and N GPUs (2)
for path in args:
    rows = json.load(open(path))["results"]
    for side in (1, 2):
        mat = [[math.log(x) for x in r["launch_step_medians_s"]] for r in rows
               if (r["world_size"] == 1) == (side == 1) and r["params"] >= min_params]
        mat = [m for m in mat if len(m) == len(mat[0])] if mat else []
        if len(mat) >= 2 and len(mat[0]) >= 2:
            cen = [[v - statistics.mean(m) for v in m] for m in mat]
            launch = [statistics.mean(c[i] for c in cen) for i in range(len(mat[0]))]
            common[side].append(statistics.stdev(launch))
            own[side].append(statistics.stdev(c[i] - launch[i] for c in cen for i in range(len(launch))))
    # Speedups against one GPU running the same recipe without the comm hook (ddpcheck's
    # `ddp::one_gpu_reference`), recomputed: reports before session 6 hold another definition.
    plain = {(r["model"], r["variant"]): r for r in rows if r["world_size"] == 1}
    by_model = {}
    for r in rows:
        hook_free = "+".join(p for p in r["variant"].split("+") if p not in ("fp16", "bf16")) or "base"
        ref = plain.get((r["model"], hook_free))
        if r["world_size"] >= 2 and r["params"] >= min_params and ref and ref["throughput"] > 0:
            by_model.setdefault(r["model"], []).append(r["throughput"] / ref["throughput"])
    groups += [g for g in by_model.values() if len(g) >= 2]
    one = {(r["model"], r["variant"]): r for r in rows if r["world_size"] == 1}
    for r in rows:
        if r["world_size"] < 2 or r["params"] < min_params:
            continue
        o = one.get((r["model"], r["variant"]))
        if o is None or len(o["launch_step_medians_s"]) < 2 or len(r["launch_step_medians_s"]) < 2:
            continue
        sd_one.append(statistics.stdev(math.log(x) for x in o["launch_step_medians_s"]))
        sd_n.append(statistics.stdev(math.log(x) for x in r["launch_step_medians_s"]))
        cases += 1
if not cases:
    sys.exit("no multi-GPU run with repeated launches and a repeated 1-GPU partner in the reports")
s1, sn = statistics.median(sd_one), statistics.median(sd_n)
print(f"{cases} cases; launch-to-launch sd of ln(step): 1 GPU {s1:.3f} (largest {max(sd_one):.3f}), "
      f"N GPUs {sn:.3f} (largest {max(sd_n):.3f})")
print(f"{'launches':>8} {'median |err|':>13} {'largest |err| (typical)':>24} {'P(largest > 20%)':>17}")
rng = random.Random(1)
for n in launches:
    medians, largest = [], []
    for _ in range(2000):
        errs = []
        for _ in range(cases):
            m1 = statistics.median(rng.gauss(0.0, s1) for _ in range(n))
            mn = statistics.median(rng.gauss(0.0, sn) for _ in range(n))
            errs.append(abs(math.exp(mn - m1) - 1.0))
        medians.append(statistics.median(errs))
        largest.append(max(errs))
    over = sum(x > 0.2 for x in largest) / len(largest)
    print(f"{n:>8} {100 * statistics.median(medians):>12.1f}% {100 * statistics.median(largest):>23.1f}% {over:>17.2f}")

if not (common[1] and common[2]):
    sys.exit(0)
c1, o1 = statistics.median(common[1]), statistics.median(own[1])
cn, on = statistics.median(common[2]), statistics.median(own[2])
print(f"\nranking: {len(groups)} groups of variants; launch sd of ln(step) split into common and own: "
      f"1 GPU {c1:.3f} + {o1:.3f}, N GPUs {cn:.3f} + {on:.3f}")
print(f"{'launches':>8} {'pairs >5% apart':>16} {'of them in the wrong order':>27} {'P(none wrong)':>14}")
for n in launches:
    shown, wrong, clean = [], [], 0
    for _ in range(1000):
        s_pairs = w_pairs = 0
        for g in groups:
            f1 = [rng.gauss(0.0, c1) for _ in range(n)]
            fn = [rng.gauss(0.0, cn) for _ in range(n)]
            meas = []
            for true in g:
                m1 = statistics.median(f + rng.gauss(0.0, o1) for f in f1)
                mn = statistics.median(f + rng.gauss(0.0, on) for f in fn)
                meas.append(true * math.exp(m1 - mn))
            for i in range(len(g)):
                for j in range(i + 1, len(g)):
                    if abs(meas[i] - meas[j]) / max(meas[i], meas[j]) > 0.05:
                        s_pairs += 1
                        w_pairs += (g[i] - g[j]) * (meas[i] - meas[j]) < 0
        shown.append(s_pairs)
        wrong.append(w_pairs)
        clean += w_pairs == 0
    print(f"{n:>8} {statistics.median(shown):>16.0f} {statistics.mean(wrong):>27.1f} {clean / 1000:>14.2f}")

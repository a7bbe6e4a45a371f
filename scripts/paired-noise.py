#!/usr/bin/env python3
"""How noisy is a side-by-side slowdown measured inside each launch? Read from paired-probe.py's logs.

paired-probe.py (session 5) timed, in one launch, rank 0 alone and all ranks together in
alternating blocks of steps. The log ratio ln(together / alone) per launch is what
`ddp::SoloSlowdown` takes from a nocomm run's solo phase (one block alone, then one together).
This prints, per model and variant, that ratio for each launch, its spread over the launches,
the spread of one block pair inside a launch, and then, from the medians over all of them, the
noise bound `recommend` would put on the slowdown from L launches of R block pairs each
(bench_ddp.py's SOLO_ROUNDS, 3 since session 11; 1 in session 10):
t(L-1) * sqrt(pi/2) * sd / sqrt(L), with sd = sqrt(launch-level part^2 + one block pair's^2 / R).

Usage: paired-noise.py [--launches L] [--rounds R] PAIRED.jsonl...
(e.g. bench/accuracy/fixtures/2026-11-30-h200x2-1213/paired/paired-*.jsonl; needs no GPU)"""
import json
import math
import statistics
import sys
from collections import defaultdict

# Student's t at 97.5% for 1..12 degrees of freedom (as ddp::noise_bound, whose floor is 2).
T975 = [12.71, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179]

args = sys.argv[1:]
launches, rounds = 8, 3
while args[:1] in (["--launches"], ["--rounds"]):
    if args[0] == "--launches":
        launches = int(args[1])
    else:
        rounds = int(args[1])
    args = args[2:]
if not args or launches < 2 or rounds < 1:
    sys.exit(__doc__)

per_launch = defaultdict(list)  # (model, variant) -> ln(together/alone) of each launch
pair_sd = defaultdict(list)  # (model, variant) -> within-launch sd of one block pair's ln ratio
for path in args:
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            key = (r["model"], r["variant"])
            per_launch[key].append(math.log(r["full_median_s"] / r["solo_median_s"]))
            pairs = [math.log(t / s) for t, s in zip(r["full_round_medians_s"], r["solo_round_medians_s"])]
            if len(pairs) > 1:
                pair_sd[key].append(statistics.stdev(pairs))

print("model        variant  ln(together/alone) per launch   sd over launches  one block pair's sd")
launch_sds, rounds_sds = [], []
for key, xs in per_launch.items():
    sd = statistics.stdev(xs) if len(xs) > 1 else float("nan")
    one_pair = statistics.mean(pair_sd[key]) if pair_sd[key] else float("nan")
    launch_sds.append(sd)
    rounds_sds.append(one_pair)
    print(f"{key[0]:12} {key[1]:8} " + " ".join(f"{x:+.3f}" for x in xs).ljust(30)
          + f"  {sd:.3f}             {one_pair:.3f}")

n_rounds = statistics.median(
    len(json.loads(line)["full_round_medians_s"]) for path in args for line in open(path))
launch_sd, pair = statistics.median(launch_sds), statistics.median(rounds_sds)
# A launch's ratio over n_rounds block pairs carries pair/sqrt(n_rounds) of block noise; the rest
# of its spread over launches is the launch's own level.
launch_part = math.sqrt(max(0.0, launch_sd**2 - pair**2 / n_rounds))
per_launch = math.sqrt(launch_part**2 + pair**2 / rounds)
bound = max(2.0, T975[min(launches, len(T975) + 1) - 2]) * math.sqrt(math.pi / 2) * per_launch / math.sqrt(launches)
print(f"medians: sd over launches {launch_sd:.3f} ({n_rounds:.0f} block pairs a launch), one block pair "
      f"{pair:.3f}, launch-level part {launch_part:.3f}")
print(f"{launches} launches of {rounds} block pair(s) each: sd of a launch's ln ratio {per_launch:.3f}, "
      f"noise bound ±{bound:.3f} (a slowdown of x{math.exp(bound):.3f} just clears it)")

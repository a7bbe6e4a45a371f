#!/usr/bin/env python3
"""Where P1's fp16 errors come from: the input launch's own deviations.

For every judged P1 case of the fp16 hook (the MLP data sets of eight launches), this prints
the model's error next to two deviations of the input launch (launch 1) from the median of the
other launches, each as a difference of natural logarithms:

- hook: ln(fp16 step / base step) of the 1-GPU runs, both inside the input launch (the hook's
  cost the model reads);
- speedup: ln(2-GPU base step / 1-GPU base step) of the input launch, two launches apart (the
  baseline the model is calibrated on);

and the correlation of each with the error. The errors come from `ddpcheck-accuracy --cases`.

Usage: cargo run -p ddpcheck-accuracy --release -- --cases | bench/accuracy/p1-error-sources.py
"""
import glob
import json
import math
import os
import statistics
import sys

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def launches():
    """(call, regime, model, variant, GPUs) -> each launch's median step, seconds."""
    out = {}
    for path in glob.glob(os.path.join(FIXTURES, "*", "mlprep8", "mlprep8-mlp-*.json")):
        call = os.path.basename(os.path.dirname(os.path.dirname(path)))[-4:]
        regime = os.path.basename(path)[len("mlprep8-mlp-"):-len(".json")]
        for r in json.load(open(path))["results"]:
            out[(call, regime, r["model"], r["variant"], r["world_size"])] = r["launch_step_medians_s"]
    return out


def deviation(num, den):
    """ln(num/den) of the first launch minus its median over the other launches."""
    rest = statistics.median(math.log(a / b) for a, b in zip(num[1:], den[1:]))
    return math.log(num[0] / den[0]) - rest


def main():
    steps = launches()
    hooks, speedups, errors = [], [], []
    print("call regime   model        error   hook dev  speedup dev")
    for line in sys.stdin:
        f = line.rstrip("\n").split("\t")
        if len(f) < 9 or f[0] != "P1" or f[1] != "judged" or f[4] != "fp16":
            continue
        call, regime = f[2].split()[0], f[2].split()[-1]
        model, error = f[3], float(f[8].rstrip("%")) / 100
        base1, fp16_1, base2 = (steps.get((call, regime, model, variant, gpus))
                                for variant, gpus in (("base", 1), ("fp16", 1), ("base", 2)))
        if not (base1 and fp16_1 and base2):
            continue
        hook, speedup = deviation(fp16_1, base1), deviation(base2, base1)
        hooks.append(hook)
        speedups.append(speedup)
        errors.append(error)
        print("%s %-8s %-12s %+6.1f%%  %+7.3f  %+7.3f" % (call, regime, model, 100 * error, hook, speedup))
    if len(errors) > 2:
        print("cases %d; correlation with the error: hook %.2f, speedup %.2f; sd of the hook deviation %.3f"
              % (len(errors), statistics.correlation(hooks, errors),
                 statistics.correlation(speedups, errors), statistics.stdev(hooks)))


if __name__ == "__main__":
    main()

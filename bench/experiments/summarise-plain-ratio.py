#!/usr/bin/env python3
"""One summary line from a `bench ddp --json --plain-reference` report's first run: whether
DDP broadcast its buffers, the DDP and the plain step's medians, and the median and range of
the rounds' ratios (DDP / plain).

    summarise-plain-ratio.py REPORT.json LABEL
"""

import json
import statistics
import sys


def main():
    path, label = sys.argv[1], sys.argv[2]
    r = json.load(open(path))["results"][0]
    plain = r["plain_reference"]
    rs = [d / p for d, p in plain["rounds"]]
    print("  %s (broadcast_buffers=%s): ddp %.2f ms, plain %.2f ms, x%.4f median of %d rounds (%.3f-%.3f)"
          % (label, (r.get("recipe") or {}).get("broadcast_buffers", True), 1e3 * r["step_time_median_s"],
             1e3 * plain["step_time_median_s"], statistics.median(rs), len(rs), min(rs), max(rs)))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The table of a results page from ddp-own-work.py's reports: per report, each form's ratio to
the plain loop (median of the rounds' ratios, and their range), and from the profile the kernels'
time per step, plain against DDP. The kernel time leaves out DDP's own forward annotation
(`DistributedDataParallel.forward`, which the profiler puts on the device's timeline as a range
over the whole forward); a report without `settle` came from the script's first form, which
summed operators and their kernels alike, so its kernel time is not given.

    summarise-ddp-own-work.py REPORT.json...
"""

import json
import sys

FORMS = ("plain_again", "ddp", "ddp_noop_hook", "ddp_no_buffer_broadcast")


def kernels_ms(p):
    annotation = sum(e["us_per_step"] for e in p["top_self_device"] if "DistributedDataParallel" in e["name"])
    return 1e3 * p["device_time_per_step_s"] - annotation / 1e3


def main():
    print("| report | " + " | ".join(FORMS) + " | kernels plain / DDP (ms a step) |")
    print("| --- " * (len(FORMS) + 2) + "|")
    for path in sys.argv[1:]:
        r = json.load(open(path))
        cells = []
        for f in FORMS:
            if f in r["over_plain_median_of_rounds"]:
                rs = r["over_plain_rounds"][f]
                cells.append("%.3f (%.2f–%.2f)" % (r["over_plain_median_of_rounds"][f], min(rs), max(rs)))
            else:
                cells.append("no buffers")
        pl, dd = r["profile"]["plain"], r["profile"]["ddp"]
        kernels = "%.1f / %.1f" % (kernels_ms(pl), kernels_ms(dd)) if "settle" in r else "not given"
        print("| %s | %s | %s |" % (path.rsplit("/", 2)[-2] + "/" + path.rsplit("/", 1)[-1], " | ".join(cells), kernels))


if __name__ == "__main__":
    main()

"""The results page's memory table from an fsdp2-variants-one-gpu.sh folder: every run's torch
peak beside ddpcheck's prediction before launch and from the activations another slice measured
under the same wrapper (memory-TAG.json, `ddpcheck --json memory`), and what one step's forward
kept for backward as the run read it (memory_phases in TAG.json), beside the model's activations
and parameter copies for that wrapper.

    python3 memory-table.py OUTDIR > memory-table.md
"""

import glob
import json
import os
import sys

GIB = 2**30


def gib(b):
    return "-" if b is None else "%.2f" % (b / GIB)


def pct(x):
    return "-" if x is None else "%+.1f%%" % (x * 100)


def phases_of(out, tag):
    """{variant: the wrapped step's phases} of the tag's reports."""
    got = {}
    for path in [os.path.join(out, tag + ".json")] + sorted(glob.glob(os.path.join(out, tag + "-*.json"))):
        try:
            report = json.load(open(path))
        except (OSError, ValueError):
            continue
        for r in report.get("results", []):
            p = (r.get("memory_phases") or {}).get("wrapped")
            if p:
                got[r["variant"]] = p
    return got


def rows(out, path):
    tag = os.path.basename(path)[len("memory-"):-len(".json")]
    memory = json.load(open(path))
    plan = {r["wrapper"]: r for r in memory["plan"]["rows"]}
    phases = phases_of(out, tag)
    for c in memory.get("checks", []):
        row = plan.get(c["wrapper"], {})
        p = phases.get(c["variant"])
        kept = p["after_forward"] - p["before_forward"] if p else None
        model = row.get("activations_bytes", 0) + row.get("compute_bytes", 0) if row else None
        yield [tag, c["variant"], gib(c["peak_bytes"]), gib(c["predicted_bytes"]), pct(c["error"]),
               c.get("peak_at", "-").replace("backward_", ""), gib(c.get("from_measured_bytes")),
               pct(c.get("from_measured_error")), gib(kept), gib(model)]


def main(out):
    head = ["model", "run", "peak", "predicted", "error", "at", "from measured", "error",
            "kept by forward", "model: activations + computed"]
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for path in sorted(glob.glob(os.path.join(out, "memory-*.json"))):
        try:
            for r in rows(out, path):
                print("| " + " | ".join(r) + " |")
        except (OSError, ValueError, KeyError) as e:
            print("%s: not read (%s)" % (path, e), file=sys.stderr)
    print("\n(GiB; at: the backward's start or end, where the prediction puts the peak; kept by "
          "forward: allocated at the loss less before the forward, one step after the timed ones)")


if __name__ == "__main__":
    main(sys.argv[1])

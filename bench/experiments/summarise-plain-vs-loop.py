#!/usr/bin/env python3
"""The summary lines of bench-step-vs-plain-loops.sh: `bench ddp`'s 1-GPU plain reference (the
DDP step over ddp_over_plain) against plain-loop.py's step, per round and over the call.

    summarise-plain-vs-loop.py round OUTDIR NAME ROUND SECONDS   (one round of one model)
    summarise-plain-vs-loop.py call OUTDIR MODEL...              (the medians of the call's rounds)

Reads OUTDIR/NAME-rROUND-{bench,plain[,plain-omp1,ddp]}.json as the script writes them.
"""

import glob
import json
import os
import statistics
import sys


def reference(b):
    """The reference every speedup rests on: the DDP step over ddp_over_plain (the median of the
    rounds' ratios), or None in a report without a plain step."""
    own = b.get("ddp_over_plain")
    return b["step_time_median_s"] / own if own else None


def verdict(ratio):
    return "within" if abs(ratio - 1) <= 0.03 else "NOT within"


def one_round(out, name, r, secs):
    def load(kind):
        path = "%s/%s-r%s-%s.json" % (out, name, r, kind)
        try:
            return json.load(open(path))
        except Exception as e:
            print("%s round %s: no %s figures (%s), %s s" % (name, r, kind, e, secs))
            sys.exit()

    b = load("bench")["results"][0]
    loop = load("plain")["step_time_median_s"]
    ref = reference(b)
    blocks = (b.get("plain_reference") or {}).get("step_time_median_s")
    if not ref or not blocks:
        print("%s round %s: the bench report has no plain step (reference %s), %s s" % (name, r, b.get("reference"), secs))
        return
    ratio = ref / loop
    extra = ""
    if os.path.exists("%s/%s-r%s-ddp.json" % (out, name, r)):
        extra = "; plain-loop --ddp %.2f ms" % (load("ddp")["step_time_median_s"] * 1e3)
    if os.path.exists("%s/%s-r%s-plain-omp1.json" % (out, name, r)):
        extra += "; plain-loop with OMP_NUM_THREADS=1 %.2f ms" % (load("plain-omp1")["step_time_median_s"] * 1e3)
    print("%s round %s: bench ddp step in DDP %.2f ms, plain %.2f ms (blocks' median %.2f ms), ddp_over_plain %.4f, "
          "1-GPU row speedup %.3f (reference %s); plain-loop %.2f ms%s; bench-plain/plain-loop %.4f: %s 3%%; %s s"
          % (name, r, b["step_time_median_s"] * 1e3, ref * 1e3, blocks * 1e3, b["ddp_over_plain"],
             b.get("speedup") or float("nan"), b.get("reference"), loop * 1e3, extra, ratio, verdict(ratio), secs))


def over_the_call(out, models):
    """Per model, the median of the rounds' references against the median of the rounds' loops:
    one launch against another moves several per cent on the lent VM, so the medians of several
    launches in one call are what the 3% check reads."""
    for name in models:
        refs, loops = [], []
        for path in sorted(glob.glob("%s/%s-r*-bench.json" % (out, name))):
            try:
                b = json.load(open(path))["results"][0]
                loop = json.load(open(path.replace("-bench.json", "-plain.json")))["step_time_median_s"]
            except Exception:
                continue
            if reference(b):
                refs.append(reference(b))
                loops.append(loop)
        if not refs:
            print("%s over the call: no round with both figures" % name)
            continue
        ref, loop = statistics.median(refs), statistics.median(loops)
        print("%s over the call (%d rounds): reference median %.2f ms (%.2f-%.2f), plain-loop median %.2f ms "
              "(%.2f-%.2f), ratio %.4f: %s 3%%" % (name, len(refs), ref * 1e3, min(refs) * 1e3, max(refs) * 1e3,
                                                  loop * 1e3, min(loops) * 1e3, max(loops) * 1e3, ref / loop,
                                                  verdict(ref / loop)))


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "round":
        one_round(*sys.argv[2:6])
    elif len(sys.argv) >= 4 and sys.argv[1] == "call":
        over_the_call(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

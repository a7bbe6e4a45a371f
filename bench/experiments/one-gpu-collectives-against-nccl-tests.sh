#!/usr/bin/env bash
# `bench collectives` on one GPU against nccl-tests' `-g 1` in the same call: all_gather,
# reduce_scatter and all_reduce from 64 KiB to 1 GiB, 20 timed calls after 5 (both tools'
# defaults). At one rank the out-of-place all-gather is a copy on the GPU: the curve FSDP2's
# model prices the second gather's copies at world size one on (core/src/step_time/fsdp_own.rs).
#
#   bench/experiments/one-gpu-collectives-against-nccl-tests.sh OUTDIR   (about 2 minutes)
#
# Needs ddpcheck in DDPCHECK_BIN_DIR, nvcc and the pip package's NCCL for nccl-tests (built from
# .fetched/nccl-tests by bench/validate/build-nccl-tests.sh; without it ddpcheck runs alone).
# Writes OUTDIR/ddpcheck-OP.{json,txt}, OUTDIR/nccl-tests-OP.txt, summary.txt.
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}"
need_bin ddpcheck
new_summary
say "$(date -u +%FT%TZ) $("$DDPCHECK" --version)"
say "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1)"
OPS="all_gather reduce_scatter all_reduce"
for op in $OPS; do
    logged "$OUT" json "ddpcheck-$op" 200 "$DDPCHECK" --json bench collectives --ops "$op" \
        -b 64K -e 1G --deadline 180
    logged "$OUT" txt "ddpcheck-$op" 200 "$DDPCHECK" bench collectives --ops "$op" \
        -b 64K -e 1G --deadline 180
done
NT=""
if [ -d "$ROOT/.fetched/nccl-tests" ]; then
    NT=$(bash "$VALIDATE/build-nccl-tests.sh" "$ROOT/.fetched/nccl-tests" 2> "$OUT/nccl-tests-build.txt")
fi
if [ -n "$NT" ]; then
    NTDIR=$(dirname "$NT")
    NT_LIBDIR=$(grep -o 'LD_LIBRARY_PATH=[^ ]*' "$OUT/nccl-tests-build.txt" | tail -1 | cut -d= -f2)
    for op in $OPS; do
        LD_LIBRARY_PATH=$NT_LIBDIR:${LD_LIBRARY_PATH:-} logged "$OUT" txt "nccl-tests-$op" 200 \
            "$NTDIR/${op}_perf" -b 64K -e 1G -f 2 -g 1 -n 20 -w 5 -c 1
    done
else
    say "nccl-tests: not built (see nccl-tests-build.txt)"
fi
"$PYTHON" - "$OUT" >> "$SUMMARY" 2>&1 <<'PYEOF'
import json, os, sys
out = sys.argv[1]
def nccl_tests(path):
    rows = {}
    for line in open(path):
        f = line.split()
        if f and not line.lstrip().startswith("#") and f[0].isdigit() and len(f) >= 10:
            rows[int(f[0])] = (float(f[5]), float(f[9]))
    return rows
for op in ("all_gather", "reduce_scatter", "all_reduce"):
    try:
        r = json.load(open(os.path.join(out, "ddpcheck-%s.json" % op)))
        ours = {s["bytes"]: (s["out_of_place"]["time_us"], (s["in_place"] or {}).get("time_us"))
                for s in r["runs"][0]["run"]["sweeps"][0]["samples"]}
    except Exception as e:
        print("%s: no ddpcheck report (%s)" % (op, e)); continue
    path = os.path.join(out, "nccl-tests-%s.txt" % op)
    theirs = nccl_tests(path) if os.path.exists(path) else {}
    print("%s: size, ddpcheck out-of-place / in-place us, nccl-tests out-of-place / in-place us" % op)
    for b in sorted(ours):
        t = theirs.get(b)
        print("  %11d %10.2f %10s %10s %10s" % (b, ours[b][0], "%.2f" % ours[b][1] if ours[b][1] else "-",
                                              "%.2f" % t[0] if t else "-", "%.2f" % t[1] if t else "-"))
PYEOF
cat "$SUMMARY"

#!/usr/bin/env bash
# Does timing more steps steady a one-GPU launch of a short-step model? On one GPU: ROUNDS
# rounds, each a launch of 20 timed steps and a launch of LONG_STEPS timed steps (about 2-4 s
# of steps for these MLPs), interleaved so drift hits both alike; then each configuration's
# launch-to-launch spread. These are the 1-GPU inputs a fresh node's `recommend` measures (its
# quick runs time 15-20 steps). Everything under $OUT; logs tarred to $OUT/steps-noise.tgz after
# every round, so a run cut at a time limit keeps what it measured. With MIN_TIMED=S, a third arm
# ("sized") asks `bench ddp --min-timed-seconds S` instead of a fixed count.
#
#   ROUNDS=6 bench/experiments/do-more-steps-steady-one-gpu.sh OUTDIR
#   ROUNDS=8 LONG_STEPS=0 MIN_TIMED=2 bench/experiments/do-more-steps-steady-one-gpu.sh OUTDIR
#
# OUTDIR may come in OUT instead (default /tmp/ddpcheck-steps-noise); binaries come from
# DDPCHECK_BIN_DIR (bench/lib.sh).
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
out_dir "${1:-}" /tmp/ddpcheck-steps-noise
need_bin ddpcheck
X=$OUT/steps-noise
mkdir -p "$X"
SUMMARY=$X/summary.txt
ROUNDS=${ROUNDS:-6}
LONG_STEPS=${LONG_STEPS:-1000}
SWEEP=${SWEEP:-mlp:1024,4352}
VARIANTS=${VARIANTS:-base,fp16}
MIN_TIMED=${MIN_TIMED:-}
# launch NAME STEPS [EXTRA ARGS...]
launch() {
    local name=$1 steps=$2 t0 t1 rc
    shift 2
    t0=$(date +%s.%N)
    timeout -k 5 240 "$DDPCHECK" bench ddp --sweep "$SWEEP" --variants "$VARIANTS" --gpus 1 \
        --warmup-steps 5 --steps "$steps" "$@" --json > "$X/$name.json" 2> "$X/$name.err"
    rc=$?
    t1=$(date +%s.%N)
    say "$name steps=$steps $* rc=$rc wall_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')"
}
say "do-more-steps-steady-one-gpu $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname) rounds=$ROUNDS long=$LONG_STEPS min_timed=${MIN_TIMED:-none} sweep=$SWEEP variants=$VARIANTS"
{ "$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  nvidia-smi --query-gpu=name,driver_version,pci.bus_id,clocks.sm,clocks.max.sm --format=csv,noheader
  "$DDPCHECK" --version; } >> "$SUMMARY" 2>&1
for r in $(seq 1 "$ROUNDS"); do
    # Alternate which goes first, so neither always follows the other.
    if [ $((r % 2)) -eq 1 ]; then
        launch "short-$r" 20
        [ "$LONG_STEPS" -gt 0 ] && launch "long-$r" "$LONG_STEPS"
        [ -n "$MIN_TIMED" ] && launch "sized-$r" 20 --min-timed-seconds "$MIN_TIMED"
    else
        [ -n "$MIN_TIMED" ] && launch "sized-$r" 20 --min-timed-seconds "$MIN_TIMED"
        [ "$LONG_STEPS" -gt 0 ] && launch "long-$r" "$LONG_STEPS"
        launch "short-$r" 20
    fi
    tar -C "$OUT" -czf "$OUT/steps-noise.tgz" steps-noise
done
"$PYTHON" - "$X" <<'PY' | tee -a "$X/summary.txt"
# Per configuration: the launch-to-launch spread of the median step. Per model: the spread of
# ln(step) of each variant across launches, and of ln(variant / first variant) inside each
# launch, the comparison a launch makes side by side.
import glob, json, math, os, statistics, sys
rows, by_launch = {}, {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*-*.json"))):
    arm, launch = os.path.basename(path)[:-5].split("-", 1)
    try:
        results = json.load(open(path))["results"]
    except Exception as e:
        print("unreadable", path, e)
        continue
    for r in results:
        ms = r["step_time_median_s"] * 1e3
        if arm == "sized":
            print("sized-%s %s %s timed %d steps" % (launch, r["model"], r["variant"], len(r.get("step_times_s") or [])))
        rows.setdefault((r["model"], r["variant"], arm), []).append(ms)
        by_launch.setdefault((arm, r["model"]), {}).setdefault(launch, {})[r["variant"]] = ms
print("model        variant arm    n  median ms  spread   sd/median  launch medians ms")
for (model, variant, arm), xs in sorted(rows.items()):
    med = statistics.median(xs)
    sd = statistics.stdev(xs) if len(xs) > 1 else float("nan")
    print("%-12s %-7s %-5s %2d  %8.3f  %6.1f%%  %8.1f%%   %s" % (
        model, variant, arm, len(xs), med, 100 * (max(xs) - min(xs)) / med, 100 * sd / med,
        " ".join("%.3f" % x for x in xs)))
print()
print("arm   model        sd ln(step) per variant        sd ln(variant/first) inside a launch")
for (arm, model), launches in sorted(by_launch.items()):
    full = [v for v in launches.values() if len(v) == len(max(launches.values(), key=len))]
    names = sorted(full[0]) if full else []
    if len(full) < 3 or len(names) < 2:
        continue
    first = names[0]
    alone = ["%s %.3f" % (n, statistics.stdev([math.log(v[n]) for v in full])) for n in names]
    paired = ["%s/%s %.3f" % (n, first, statistics.stdev([math.log(v[n] / v[first]) for v in full]))
              for n in names[1:]]
    print("%-5s %-12s %-30s %s" % (arm, model, ", ".join(alone), ", ".join(paired)))
PY
tar -C "$OUT" -czf "$OUT/steps-noise.tgz" steps-noise
say "done"
